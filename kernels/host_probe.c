/* Family "host": what the machine under the kernels is doing now, for benchmarks to report beside their times.
 *
 * host_fma_probe: each of `tasks` tasks (run through ortx_parallel_for, so one per pool thread) times `iterations`
 *   steps of 12 independent vector multiply-add chains, a loop bound by the core's multiply-add throughput and
 *   nothing else (no memory, latency hidden by the 12 chains). Run with one task, then with one task per thread,
 *   the ratio of the per-task times tells whether the threads have a core each: on this kind of VM there are
 *   periods in which the host runs both vCPUs on one physical core's two hardware threads, so that this loop slows
 *   ~1.8x when both run while a latency-bound loop slows ~1.1x (ortx/host_contention.py has the measurements).
 *   ints:    [0] tasks [1] iterations
 *   buffers: [0] int64[tasks] nanoseconds each task took out [1] int64[tasks] thread index that ran it out
 */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <time.h>

#include "isa.h"
#include "ortx_kernels.h"
#include "threadpool.h"

typedef float probe_vector __attribute__((vector_size(64), aligned(64)));

#define PROBE_CHAINS(step) step(0) step(1) step(2) step(3) step(4) step(5) step(6) step(7) step(8) step(9) step(10) step(11)
#define PROBE_DECLARE(i) probe_vector a##i = start + (float)(i);
#define PROBE_STEP(i) a##i = a##i * scale + offset;
#define PROBE_SUM(i) sum += a##i;

/* One body per instruction set; the compiler turns a * b + c into a fused multiply-add where the target has one. */
#define PROBE_BODY                                                                                                     \
    probe_vector start = {0}, scale = start + 0.9999f, offset = start + 0.0001f, sum = start;                       \
    PROBE_CHAINS(PROBE_DECLARE)                                                                                        \
    for (int64_t i = 0; i < iterations; i++) {                                                                         \
        PROBE_CHAINS(PROBE_STEP)                                                                                       \
    }                                                                                                                  \
    PROBE_CHAINS(PROBE_SUM)                                                                                            \
    return sum[0] + sum[15];

#if ORTX_HAVE_X86
ORTX_TARGET_AVX512 static float probe_avx512(int64_t iterations) { PROBE_BODY }
ORTX_TARGET_AVX2 static float probe_avx2(int64_t iterations) { PROBE_BODY }
#endif
static float probe_portable(int64_t iterations) { PROBE_BODY }

typedef struct probe_job {
    int64_t iterations;
    int64_t *nanoseconds, *thread_of;
} probe_job;

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void probe_task(void *context, int64_t task_index, int thread_index) {
    probe_job *job = context;
    int64_t start = now_ns();
    float value;
#if ORTX_HAVE_X86
    int isa = ortx_selected_isa();
    value = isa == ORTX_ISA_AVX512 ? probe_avx512(job->iterations)
          : isa == ORTX_ISA_AVX2   ? probe_avx2(job->iterations)
                                   : probe_portable(job->iterations);
#else
    value = probe_portable(job->iterations);
#endif
    /* the result feeds the task's own output (never in practice: the chains settle near 1), so the loop is kept
     * without the threads writing to one shared place */
    job->nanoseconds[task_index] = now_ns() - start + (value == -1.0f);
    job->thread_of[task_index] = thread_index;
}

static void host_fma_probe(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    probe_job job = {ints[1], buffers[0], buffers[1]};
    ortx_parallel_for(num_threads, ints[0], probe_task, &job);
}

const ortx_kernel_entry ortx_family_host[] = {
    {"host_fma_probe", host_fma_probe, NULL},
    {NULL, NULL, NULL},
};
