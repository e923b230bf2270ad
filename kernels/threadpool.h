/* The kernels' thread pool: run `num_tasks` independent tasks on up to `num_threads` threads, the caller included.
 *
 * Why not OpenMP: an OpenMP parallel region's join barrier waits for every team thread, so when another thread
 * (onnxruntime's spinning intra-op pool, another process) holds a core, a 70 us GEMM waited milliseconds for its
 * descheduled second thread. Here thread t first runs its contiguous segment of the tasks, then takes what is left
 * of the others' from their ends; the caller runs every task no worker has claimed, and it never waits for a
 * worker that has not started a task (see threadpool.c for the protocol).
 *
 * Contract for kernels:
 *   - task(context, task_index, thread_index) runs exactly once for every task_index in [0, num_tasks), on any
 *     thread; thread_index < num_threads always (index per-thread workspace with it: one thread runs its tasks
 *     one after another). The partition of work into tasks must not depend on thread_index, so a kernel's results
 *     are the same whichever thread runs which task.
 *   - All tasks have finished (and their writes are visible) when ortx_parallel_for returns.
 *   - num_threads <= 1 or num_tasks <= 1 runs inline on the caller. A call made while the pool runs another
 *     caller's job (concurrent sessions, or a call from inside a task) runs its tasks serially on the caller as
 *     thread_index 0: on an oversubscribed machine that is also the faster choice.
 */
#ifndef ORTX_THREADPOOL_H
#define ORTX_THREADPOOL_H

#include <stdint.h>

#include "ortx_kernels.h"

/* Most tasks per call that kernels create per thread: enough that a late or preempted thread's share is picked up
 * by the others in pieces, few enough that per-task overhead (~0.1 us) and per-task packing stay negligible. */
#define ORTX_TASKS_PER_THREAD 4

typedef void (*ortx_task_fn)(void *context, int64_t task_index, int thread_index);
typedef void (*ortx_range_fn)(void *context, int64_t begin, int64_t end, int thread_index);

void ortx_parallel_for(int num_threads, int64_t num_tasks, ortx_task_fn task, void *context);

/* Thread `thread`'s own segment of ortx_parallel_for's tasks, [*first, *end) = [n*t/T, n*(t+1)/T): the tasks it
 * runs first (a kernel can stage, on that thread's first task, what the whole segment reads). */
static inline void ortx_task_segment(int64_t num_tasks, int threads, int thread, int64_t *first, int64_t *end) {
    *first = num_tasks * thread / threads;
    *end = num_tasks * (thread + 1) / threads;
}

/* Splits [0, count) into min(num_tasks, count) contiguous chunks, chunk t = [count*t/n, count*(t+1)/n): the split
 * depends on count and num_tasks only. Runs fn(context, 0, count, 0) inline when one thread or one chunk. */
void ortx_parallel_range(int num_threads, int64_t count, int64_t num_tasks, ortx_range_fn fn, void *context);

/* Memory private to the calling OS thread, at least `floats` floats, 64-byte aligned, kept from call to call (grown
 * when a larger size is asked for, contents then lost; freed when the thread exits). Kernels put per-thread
 * working buffers (packed panels, transformed tiles, partial sums) here instead of in their arena workspace.
 * Why: the arena is shared, so a kernel's per-thread slice lands on lines the other thread last wrote (another
 * kernel's slice, or a tensor); each such line then moves between the cores' caches, cheap when the two cores are
 * close and ~400 ns when they are far apart (ortx.host_contention): Winograd's per-thread buffers in the arena made
 * a chain of four 64 @ 56x56 3x3 convs 1.15x slower, far apart, than the same buffers held here. One user at a
 * time: a task must not call another kernel that uses it while it holds the pointer. It is outside the arena, so
 * `ortx memory`'s plan does not count it: at most the largest per-thread need of one kernel, per thread that runs
 * kernels. Aborts with a message when the memory cannot be had (there is no result to return without it). */
float *ortx_thread_scratch(int64_t floats);

/* Workers the pool has started so far (tests). */
int ortx_threadpool_workers(void);

extern const ortx_kernel_entry ortx_family_threadpool[];

#endif
