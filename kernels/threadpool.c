/* Family "threadpool": the kernels' pthread pool (threadpool.h) and a probe kernel that tests drive it with.
 *
 * The pool: one job slot, workers 1..W (W grows up to the largest num_threads - 1 requested, at most
 * ORTX_POOL_MAX_THREADS - 1), the caller is thread 0. A call:
 *   1. takes the pool (`busy` 0 -> 1); if another caller holds it, or this is a call from inside a task, runs the
 *      tasks serially on the calling thread instead;
 *   2. writes the job (task, context, num_tasks, threads, thread t's segment of tasks [n*t/T, n*(t+1)/T),
 *      done = left = 0), then publishes it with one
 *      store of `state` = (sequence << 32) | OPEN | joined 0, and wakes workers blocked on the condition variable;
 *   3. runs tasks itself like every worker: its own segment from the front, then the others' from their backs
 *      (compare_exchange on the segment's one word), until none is left;
 *   4. waits until done == num_tasks (only for tasks some thread has claimed and is running; each thread adds
 *      the count of tasks it ran once, when it finds none left to claim);
 *   5. closes the job: fetch_and(state, ~OPEN) returns the final joined count J; waits until left == J;
 *   6. releases the pool (busy = 0) and returns.
 * A worker spins on `state` for up to ORTX_POOL_SPIN_NS (pause in the loop), then up to ORTX_POOL_YIELD_NS
 * yielding its core between checks, then blocks on the condition variable. On a new sequence with OPEN set it joins with compare_exchange(state: s -> s + 1), which succeeds only
 * while that very job is still open; then it claims and runs tasks like the caller, adds their count to done and
 * finally increments left, after which it touches nothing of the job.
 *
 * Why a late worker never touches a finished job: joining and closing are read-modify-writes of the same atomic word,
 * so they are totally ordered. A worker whose join comes after the close fails its compare_exchange (OPEN is clear, or
 * the sequence has moved on to a later job), and it has only read job fields, all atomics, as hints. A worker whose
 * join comes before the close is counted in J, so the caller waits in step 5 until it has left; that wait is short,
 * because a joined worker is running: it needs only to find every segment exhausted. The job slot is rewritten only by
 * the next holder of `busy`, after every joined worker has left. Writes by tasks are published by the seq_cst
 * fetch_add(done) after them and seen by the caller's seq_cst load of done, so results are visible on return.
 * Why the caller never waits for a worker that did not start: it waits only for claimed tasks (step 4) and joined
 * workers (step 5); a descheduled worker that never joined is not counted anywhere, and the caller runs its share.
 * Why no wake-up is lost: a blocking worker increments `sleepers` and re-reads `state` under the mutex; the caller
 * stores `state` and then reads `sleepers` (both seq_cst), so either the worker sees the new job or the caller sees
 * the sleeper and broadcasts under the mutex.
 * Fork: a child has no workers; pthread_atfork's child handler resets the pool to empty (the workers are recreated
 * on the child's first parallel call). Threads are never joined or stopped: they live until the process exits.
 * Known limits: one job at a time (concurrent callers run serially); the sequence is 32 bits, so a worker would
 * have to sleep through 2^32 jobs without being woken for an ABA (impossible: every publish broadcasts to sleepers).
 */
#define _GNU_SOURCE /* sched_getcpu, sched_setaffinity, CPU_* (Linux) */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "threadpool.h"

#define ORTX_POOL_MAX_THREADS 64
/* How long an idle worker pause-spins: back-to-back kernel steps are a few us apart, so 100 us catches the next
 * step of a running segment. Then it keeps checking between sched_yield calls (any runnable thread, e.g. an ORT
 * segment's, gets the core) up to ORTX_POOL_YIELD_NS before blocking: a worker that blocked after 100 us was woken
 * by a futex and, on this VM, a halted vCPU, ~50-100 us later for every parallel step that followed a serial run
 * of steps (int8 BERT-like block after 100 ms idle, 4 runs: 2.25/1.49/1.70/2.28 ms against 0.81 ms back to back;
 * with 2 ms before blocking 1.46/1.15/1.10/1.04, while ORT took 1.77/1.33/1.22/1.19). */
#define ORTX_POOL_SPIN_NS 100000
#define ORTX_POOL_YIELD_NS 2000000
/* Between yields it pause-spins: a sched_yield every ~0.6 us of spinning was a syscall storm that slowed the
 * other core's kernels (PP-OCR det int8 0.41-0.49 -> 0.47-0.54 of ORT's time). */
#define ORTX_POOL_YIELD_EVERY_NS 50000
/* How long the caller spins waiting for running tasks before it also yields its core between checks. */
#define ORTX_POOL_WAIT_SPIN_NS 50000

#define STATE_OPEN ((uint64_t)1 << 31)
#define STATE_JOINED_MASK (STATE_OPEN - 1)

static inline void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

typedef struct pool {
    /* owned by the holder of busy */
    _Alignas(64) atomic_int busy;
    uint32_t sequence;
    int workers;  /* started workers, indices 1..workers */
    ortx_task_fn task;
    void *context;
    /* the job; num_tasks and threads are also read (as hints) by workers that have not joined */
    atomic_llong num_tasks;
    atomic_int threads;
    _Alignas(64) atomic_llong done;
    _Alignas(64) atomic_ullong state;
    _Alignas(64) atomic_llong left;
    atomic_int sleepers;
    atomic_int caller_cpu;  /* the CPU the caller published the job from (-1: unknown), a hint for move_off */
    pthread_mutex_t mutex;
    pthread_cond_t wake;
} pool;

static pool the_pool = {.caller_cpu = -1, .mutex = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

/* Thread t's share of the job, tasks [front, back) in one word (front | back << 32): t takes its front, threads
 * that ran out take others' backs. Part of the job: written by the holder of busy before it publishes. */
typedef struct segment {
    _Alignas(64) _Atomic uint64_t range;
} segment;

static segment segments[ORTX_POOL_MAX_THREADS];

/* ortx_thread_scratch: the buffer in thread-local storage; a pthread key's destructor frees it at thread exit. */
typedef struct thread_scratch {
    float *data;
    int64_t floats;
} thread_scratch;

static _Thread_local thread_scratch scratch_of_thread;
static pthread_key_t scratch_key;
static pthread_once_t scratch_key_once = PTHREAD_ONCE_INIT;

static void free_scratch(void *value) {
    thread_scratch *scratch = value;
    free(scratch->data);
    scratch->data = NULL;
    scratch->floats = 0;
}

static void make_scratch_key(void) { (void)pthread_key_create(&scratch_key, free_scratch); }

float *ortx_thread_scratch(int64_t floats) {
    thread_scratch *scratch = &scratch_of_thread;
    if (floats <= scratch->floats) return scratch->data;
    pthread_once(&scratch_key_once, make_scratch_key);
    free(scratch->data);
    size_t bytes = ((size_t)(floats < 16 ? 16 : floats) * sizeof(float) + 63) / 64 * 64;
    scratch->data = aligned_alloc(64, bytes);
    if (scratch->data == NULL) {
        fprintf(stderr, "ortx: out of memory for %zu bytes of per-thread kernel scratch (%s)\n", bytes,
                strerror(errno));
        abort();
    }
    scratch->floats = floats;
    (void)pthread_setspecific(scratch_key, scratch);
    return scratch->data;
}
static pthread_once_t fork_handler_once = PTHREAD_ONCE_INIT;

static void reset_after_fork(void) {
    the_pool.workers = 0;
    atomic_store(&the_pool.busy, 0);
    atomic_store(&the_pool.state, 0);
    atomic_store(&the_pool.sleepers, 0);
    atomic_store(&the_pool.left, 0);
    the_pool.sequence = 0;
    pthread_mutex_init(&the_pool.mutex, NULL);
    pthread_cond_init(&the_pool.wake, NULL);
}

static void register_fork_handler(void) { pthread_atfork(NULL, NULL, reset_after_fork); }

static inline uint32_t state_sequence(uint64_t state) { return (uint32_t)(state >> 32); }

/* The task at the front (from_back 0) or back of segment s, or -1 when it is empty. */
static int64_t claim(segment *s, int from_back) {
    uint64_t range = atomic_load(&s->range);
    for (;;) {
        uint64_t front = range & 0xffffffffu, back = range >> 32;
        if (front >= back) return -1;
        uint64_t next = from_back ? front | (back - 1) << 32 : (front + 1) | back << 32;
        if (atomic_compare_exchange_weak(&s->range, &range, next)) return (int64_t)(from_back ? back - 1 : front);
    }
}

/* Runs this thread's segment front to back, then takes tasks from the backs of the others' until none is left.
 * Why segments: thread t runs the same contiguous share of every kernel's tasks (a GEMM's column panels, a conv's
 * row bands), so it mostly reads what it wrote in the step before, from its own core's cache; a shared counter
 * handed out tasks in arrival order and moved half of every tensor between the cores. */
static void run_tasks(pool *p, int threads, int thread_index) {
    int64_t ran = 0;  /* added to done once: a fetch_add per task bounced done's line between the cores (about 100
                       * ns a task at 2 threads; 960 one-plane tasks of a 7x7 depthwise conv ran slower than on 1) */
    for (int k = 0; k < threads; k++) {  /* k 0: its own segment, from the front */
        segment *s = &segments[(thread_index + k) % threads];
        for (int64_t index; (index = claim(s, k > 0)) >= 0;) {
            p->task(p->context, index, thread_index);
            ran++;
        }
    }
    if (ran) atomic_fetch_add(&p->done, ran);
}

/* Returns the first state whose sequence differs from `seen`: spins, then blocks. */
static uint64_t wait_for_job(pool *p, uint32_t seen) {
    int64_t start = now_ns(), last_yield = start;
    for (unsigned spin = 1;; spin++) {
        uint64_t state = atomic_load(&p->state);
        if (state_sequence(state) != seen) return state;
        if (spin % 32 != 0) {
            cpu_pause();
            continue;
        }
        int64_t now = now_ns();
        if (now - start > ORTX_POOL_YIELD_NS) break;
        if (now - start > ORTX_POOL_SPIN_NS && now - last_yield > ORTX_POOL_YIELD_EVERY_NS) {
            sched_yield();
            last_yield = now;
        }
    }
    pthread_mutex_lock(&p->mutex);
    atomic_fetch_add(&p->sleepers, 1);
    uint64_t state;
    while (state_sequence(state = atomic_load(&p->state)) == seen) pthread_cond_wait(&p->wake, &p->mutex);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mutex);
    return state;
}

/* Moves the calling worker off `cpu` (the caller's) onto another CPU the thread may use, then gives back its mask.
 * Why: a worker woken by the caller's futex is placed on the caller's CPU (wake-affine) and, spinning and yielding
 * there, was not moved by the load balancer while the other CPU idled: the job ran serially at twice the wall time
 * (ResNet-18's 64 @56 3x3 through an OrtxEP session at 2 threads, this 2-vCPU VM: 1.26 ms, the 1-thread time, in
 * about half the processes, else 0.72 ms). The migration costs two syscalls, only when the CPUs coincide. */
static void move_off(int cpu) {
#if defined(__linux__)
    if (cpu < 0 || sched_getcpu() != cpu) return;
    cpu_set_t allowed, others;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || !CPU_ISSET(cpu, &allowed)) return;
    others = allowed;
    CPU_CLR(cpu, &others);
    if (CPU_COUNT(&others) == 0) return;
    if (sched_setaffinity(0, sizeof(others), &others) == 0) sched_setaffinity(0, sizeof(allowed), &allowed);
#else
    (void)cpu;
#endif
}

typedef struct worker_start {
    int index;
    uint32_t seen;
} worker_start;

static void *worker_main(void *argument) {
    worker_start start = *(worker_start *)argument;
    free(argument);
    pool *p = &the_pool;
    uint32_t seen = start.seen;
    for (;;) {
        uint64_t state = wait_for_job(p, seen);
        seen = state_sequence(state);
        /* hints (they may already describe a later job; the compare_exchange below decides) */
        if (start.index >= atomic_load(&p->threads) || atomic_load(&p->done) >= atomic_load(&p->num_tasks))
            continue;
        move_off(atomic_load(&p->caller_cpu));
        int joined = 0;
        while ((state & STATE_OPEN) && state_sequence(state) == seen)
            if (atomic_compare_exchange_weak(&p->state, &state, state + 1)) {
                joined = 1;
                break;
            }
        if (!joined) continue;
        /* joined: the job's fields stay as they are until this worker increments left */
        int threads = atomic_load(&p->threads);
        if (start.index < threads) run_tasks(p, threads, start.index);
        atomic_fetch_add(&p->left, 1);
    }
    return NULL;
}

/* Starts workers up to index wanted - 1; called by the holder of busy before it publishes. */
static void grow(pool *p, int wanted) {
    if (p->workers + 1 >= wanted) return;
    pthread_once(&fork_handler_once, register_fork_handler);
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);  /* workers inherit a fully blocked mask: signals go elsewhere */
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    while (p->workers + 1 < wanted) {
        worker_start *start = malloc(sizeof(worker_start));
        if (!start) break;
        start->index = p->workers + 1;
        start->seen = p->sequence;
        pthread_t thread;
        if (pthread_create(&thread, &attributes, worker_main, start) != 0) {
            free(start);
            break;
        }
        p->workers++;
    }
    pthread_attr_destroy(&attributes);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
}

static void run_serially(int64_t num_tasks, ortx_task_fn task, void *context) {
    for (int64_t index = 0; index < num_tasks; index++) task(context, index, 0);
}

/* Waits until *counter >= target: pause-spins, then also yields so a preempted task's thread can run here. */
static void wait_at_least(atomic_llong *counter, int64_t target) {
    int64_t start = 0;
    for (unsigned spin = 1; atomic_load(counter) < target; spin++) {
        cpu_pause();
        if (spin % 32 != 0) continue;
        if (start == 0) start = now_ns();
        else if (now_ns() - start > ORTX_POOL_WAIT_SPIN_NS) sched_yield();
    }
}

void ortx_parallel_for(int num_threads, int64_t num_tasks, ortx_task_fn task, void *context) {
    if (num_tasks <= 0) return;
    if (num_threads <= 1 || num_tasks == 1 || num_tasks > (int64_t)UINT32_MAX) {  /* segments hold 32-bit indices */
        run_serially(num_tasks, task, context);
        return;
    }
    pool *p = &the_pool;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&p->busy, &expected, 1)) {  /* Case busy: another caller, or nested */
        run_serially(num_tasks, task, context);
        return;
    }
    if (num_threads > ORTX_POOL_MAX_THREADS) num_threads = ORTX_POOL_MAX_THREADS;
    grow(p, num_threads);
    int threads = p->workers + 1 < num_threads ? p->workers + 1 : num_threads;
    if (threads <= 1) {
        atomic_store(&p->busy, 0);
        run_serially(num_tasks, task, context);
        return;
    }
    p->task = task;
    p->context = context;
    atomic_store(&p->num_tasks, num_tasks);
    atomic_store(&p->threads, threads);
    for (int t = 0; t < threads; t++) {
        int64_t first, end;
        ortx_task_segment(num_tasks, threads, t, &first, &end);
        uint64_t front = (uint64_t)first, back = (uint64_t)end;
        atomic_store(&segments[t].range, front | back << 32);
    }
    atomic_store(&p->done, 0);
    atomic_store(&p->left, 0);
    p->sequence++;
#if defined(__linux__)
    atomic_store(&p->caller_cpu, sched_getcpu());
#else
    atomic_store(&p->caller_cpu, -1);
#endif
    atomic_store(&p->state, ((uint64_t)p->sequence << 32) | STATE_OPEN);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mutex);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mutex);
    }
    run_tasks(p, threads, 0);
    wait_at_least(&p->done, num_tasks);
    uint64_t closed = atomic_fetch_and(&p->state, ~STATE_OPEN);
    int joined = (int)(closed & STATE_JOINED_MASK);
    wait_at_least(&p->left, joined);
    atomic_store(&p->busy, 0);
}

typedef struct range_job {
    ortx_range_fn fn;
    void *context;
    int64_t count, chunks;
} range_job;

static void range_task(void *context, int64_t task_index, int thread_index) {
    const range_job *job = context;
    int64_t begin = job->count * task_index / job->chunks, end = job->count * (task_index + 1) / job->chunks;
    if (begin < end) job->fn(job->context, begin, end, thread_index);
}

void ortx_parallel_range(int num_threads, int64_t count, int64_t num_tasks, ortx_range_fn fn, void *context) {
    if (count <= 0) return;
    int64_t chunks = num_tasks < count ? num_tasks : count;
    if (num_threads <= 1 || chunks <= 1) {
        fn(context, 0, count, 0);
        return;
    }
    range_job job = {fn, context, count, chunks};
    ortx_parallel_for(num_threads, chunks, range_task, &job);
}

int ortx_threadpool_workers(void) { return the_pool.workers; }

/* ---------------------------------------------------------------------------------------------------------------
 * Kernel.
 *
 * threadpool_probe: exercises ortx_parallel_for. Task t hashes work(t) = base_work * (uneven ? 1 + t % 7 : 1)
 *   steps of an integer mixer seeded with t; with nested != 0 each task instead sums 3 sub-tasks run through a
 *   nested ortx_parallel_for (which runs serially). The probe runs `repeats` calls back to back.
 *   ints:    [0] num_tasks [1] base_work [2] uneven [3] nested [4] repeats
 *   buffers: [0] int64[num_tasks] hashes out [1] int64[num_tasks] visits out (each task adds 1 per call)
 *            [2] int64[num_tasks] thread index that ran the task out (the last call's)
 * ------------------------------------------------------------------------------------------------------------- */

typedef struct probe_job {
    int64_t base_work;
    int uneven, nested, num_threads;
    int64_t *hashes, *visits, *thread_of;
} probe_job;

static uint64_t mix(uint64_t seed, int64_t steps) {
    uint64_t h = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < steps; i++) {
        h ^= h >> 31;
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 29;
    }
    return h;
}

typedef struct probe_inner {
    uint64_t seed;
    int64_t steps;
    uint64_t parts[3];
} probe_inner;

static void probe_inner_task(void *context, int64_t task_index, int thread_index) {
    probe_inner *inner = context;
    (void)thread_index;
    inner->parts[task_index] = mix(inner->seed * 3 + (uint64_t)task_index, inner->steps);
}

static void probe_task(void *context, int64_t task_index, int thread_index) {
    const probe_job *job = context;
    int64_t steps = job->base_work * (job->uneven ? 1 + task_index % 7 : 1);
    uint64_t hash;
    if (job->nested) {
        probe_inner inner = {(uint64_t)task_index, steps, {0, 0, 0}};
        ortx_parallel_for(job->num_threads, 3, probe_inner_task, &inner);
        hash = inner.parts[0] + inner.parts[1] + inner.parts[2];
    } else {
        hash = mix((uint64_t)task_index, steps);
    }
    job->hashes[task_index] = (int64_t)hash;
    job->visits[task_index] += 1;
    job->thread_of[task_index] = thread_index;
}

static void probe_run(const int64_t *ints, void *const *buffers, int num_threads, int serial) {
    probe_job job = {ints[1], (int)ints[2], (int)ints[3], serial ? 1 : num_threads, buffers[0], buffers[1],
                     buffers[2]};
    for (int64_t repeat = 0; repeat < ints[4]; repeat++) {
        if (serial)
            run_serially(ints[0], probe_task, &job);
        else
            ortx_parallel_for(num_threads, ints[0], probe_task, &job);
    }
}

static void threadpool_probe(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    probe_run(ints, buffers, num_threads, 0);
}

static void threadpool_probe_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    probe_run(ints, buffers, num_threads, 1);
}

const ortx_kernel_entry ortx_family_threadpool[] = {
    {"threadpool_probe", threadpool_probe, threadpool_probe_ref},
    {NULL, NULL, NULL},
};
