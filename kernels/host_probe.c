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
 *
 * host_core_latency: two tasks on two pool threads pass a cache line back and forth `round_trips` times (each
 *   waits, spinning, for the other's store); the round trip is the time for a line to move from one core to the
 *   other and back. On these VMs it tells where the host put the two vCPUs: ~60-170 ns, or ~350 ns and more in
 *   periods in which a two-thread ONNX Runtime run of PP-OCR rec took 2.1x its time (slower than one thread) and
 *   OrtxEP's 1.6x (ortx/host_contention.py). If the second task has not started within 50 ms (a worker did not
 *   wake), the reading is abandoned.
 *   ints:    [0] round_trips
 *   buffers: [0] int64[3] out: nanoseconds for all round trips (-1: abandoned), thread index of task 0, of task 1
 */
#define _POSIX_C_SOURCE 199309L
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "isa.h"
#include "ortx_kernels.h"
#include "threadpool.h"

#if ORTX_HAVE_X86
#include <immintrin.h>
#endif

typedef float probe_vector __attribute__((vector_size(64), aligned(64)));

#define PROBE_CHAINS(step) step(0) step(1) step(2) step(3) step(4) step(5) step(6) step(7) step(8) step(9) step(10) step(11)
#define PROBE_DECLARE(i) probe_vector a##i = start + (float)(i);
#define PROBE_STEP(i) a##i = a##i * scale + offset;
#define PROBE_SUM(i) sum += a##i;

/* One body per instruction set and chain count; the compiler turns a * b + c into a fused multiply-add where the
 * target has one. */
#define PROBE_BODY_OF(CHAINS)                                                                                          \
    probe_vector start = {0}, scale = start + 0.9999f, offset = start + 0.0001f, sum = start;                       \
    CHAINS(PROBE_DECLARE)                                                                                              \
    for (int64_t i = 0; i < iterations; i++) {                                                                         \
        CHAINS(PROBE_STEP)                                                                                             \
    }                                                                                                                  \
    CHAINS(PROBE_SUM)                                                                                                  \
    return sum[0] + sum[15];
#define PROBE_BODY PROBE_BODY_OF(PROBE_CHAINS)

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

typedef struct latency_job {
    _Atomic int64_t flag;  /* task 0 stores 2i + 1, task 1 answers 2i + 2 */
    char pad[64 - sizeof(int64_t)];
    _Atomic int started, abandoned;
    int64_t round_trips, *out;
} latency_job;

#define LATENCY_START_WAIT_NS 50000000

static void latency_task(void *context, int64_t task_index, int thread_index) {
    latency_job *job = context;
    job->out[1 + task_index] = thread_index;
    atomic_fetch_add(&job->started, 1);
    int64_t waited = now_ns();
    while (atomic_load(&job->started) < 2) {
        if (atomic_load(&job->abandoned)) return;
        /* task 0 waits 50 ms for task 1's thread; task 1 (never first on a thread) waits longer, as a safeguard */
        if (now_ns() - waited > (task_index == 0 ? 1 : 20) * (int64_t)LATENCY_START_WAIT_NS) {
            atomic_store(&job->abandoned, 1);
            return;
        }
    }
    if (atomic_load(&job->abandoned)) return;
    if (task_index == 0) {
        int64_t start = now_ns();
        for (int64_t i = 0; i < job->round_trips; i++) {
            atomic_store(&job->flag, 2 * i + 1);
            while (atomic_load(&job->flag) != 2 * i + 2) {
            }
        }
        job->out[0] = now_ns() - start;
        return;
    }
    for (int64_t i = 0; i < job->round_trips; i++) {
        while (atomic_load(&job->flag) != 2 * i + 1) {
            if (atomic_load(&job->abandoned)) return;  /* task 0 gave up just as this task started */
        }
        atomic_store(&job->flag, 2 * i + 2);
    }
}

static void host_core_latency(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    latency_job job;
    atomic_init(&job.flag, 0);
    atomic_init(&job.started, 0);
    atomic_init(&job.abandoned, 0);
    job.round_trips = ints[0];
    job.out = buffers[0];
    job.out[0] = -1;
    job.out[1] = job.out[2] = -1;
    if (num_threads < 2 || job.round_trips < 1) return;
    ortx_parallel_for(2, 2, latency_task, &job);
}

/* ---------------------------------------------------------------------------------------------------------------
 * ortx_fma_ports: how many zmm multiply-adds a core starts per cycle, 1 or 2, from the time per multiply-add of 4
 * dependent chains (bound by the latency, ~4 cycles: one a cycle on either kind of core) against 12 chains (bound
 * by the ports: one a cycle where a 512-bit multiply-add takes both 256-bit halves of the units, as on the Zen 4
 * host; two on Intel's server cores with two 512-bit units). Kernels whose tile shape depends on it
 * (conv_expand_depthwise.c's blocks per task) ask once; the fastest of 5 tries of each loop, so a preempted try
 * does not count. 1 off AVX-512.
 * ------------------------------------------------------------------------------------------------------------- */
#define PORTS_CHAINS_4(step) step(0) step(1) step(2) step(3)

#if ORTX_HAVE_X86
ORTX_TARGET_AVX512 static float chains4_avx512(int64_t iterations) { PROBE_BODY_OF(PORTS_CHAINS_4) }

static int64_t fastest_ns(float (*loop)(int64_t), int64_t iterations) {
    int64_t best = INT64_MAX;
    for (int attempt = 0; attempt < 5; attempt++) {
        int64_t start = now_ns();
        volatile float value = loop(iterations);
        (void)value;
        int64_t spent = now_ns() - start;
        best = spent < best ? spent : best;
    }
    return best;
}
#endif

int ortx_fma_ports(void) {
    static _Atomic int ports = 0;
    if (ports == 0) {
        int found = 1;
#if ORTX_HAVE_X86
        if (ortx_cpu_isa() == ORTX_ISA_AVX512) {
            const int64_t iterations = 4000;  /* 16K-48K multiply-adds a try: ~10-20 us */
            double per_fma_4 = (double)fastest_ns(chains4_avx512, iterations) / (4.0 * iterations);
            double per_fma_12 = (double)fastest_ns(probe_avx512, iterations) / (12.0 * iterations);
            found = per_fma_4 > 1.5 * per_fma_12 ? 2 : 1;
        }
#endif
        ports = found;
    }
    return ports;
}

/* host_fma_ports: buffers [0] int64[1] out: ortx_fma_ports(). */
static void host_fma_ports(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)ints;
    (void)floats;
    (void)num_threads;
    ((int64_t *)buffers[0])[0] = ortx_fma_ports();
}

/* ---------------------------------------------------------------------------------------------------------------
 * host_dot_rates: multiply-adds per nanosecond one core sustains in fp32 (vfmadd231ps, 16 a zmm instruction) and in
 * bf16 pairs (vdpbf16ps, 32: 16 lanes of two bf16 products each), each the fastest of 5 tries of 12 independent
 * chains, tried alternately. Why: vdpbf16ps does not always beat fp32 multiply-adds. On the Intel model 167 host it
 * starts one every other cycle against two vfmadd231ps a cycle (session 36: 1.65 G against 6.5 G instructions/s), so
 * its products come at half the fp32 rate, and a bf16 session without AMX ran ResNet-18-style at 1.7x ONNX Runtime's
 * fp32 time; on the Zen 4 host it ran at 0.60x (ortx/ep/precision.py decides from these rates). bf16 0 without
 * AVX512_BF16. ~1 ms.
 *   buffers: [0] float64[2] out: fp32 multiply-adds per ns, bf16 multiply-adds per ns
 * ------------------------------------------------------------------------------------------------------------- */
#if ORTX_HAVE_X86
#define DOT_DECLARE(i) __m512 a##i = _mm512_set1_ps((float)(i));
#define DOT_STEP(i) a##i = _mm512_dpbf16_ps(a##i, x, y);
#define DOT_SUM(i) sum = _mm512_add_ps(sum, a##i);

ORTX_TARGET_AVX512_BF16 static float dot_chains_bf16(int64_t iterations) {
    /* bf16 1.0 pairs: each step adds 2 to every lane (no denormals, no overflow in a try) */
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3F80), y = x;
    __m512 sum = _mm512_setzero_ps();
    PROBE_CHAINS(DOT_DECLARE)
    for (int64_t i = 0; i < iterations; i++) {
        PROBE_CHAINS(DOT_STEP)
    }
    PROBE_CHAINS(DOT_SUM)
    return _mm512_reduce_add_ps(sum);
}
#endif

static void host_dot_rates(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)ints;
    (void)floats;
    (void)num_threads;
    double *out = buffers[0];
    out[0] = out[1] = 0.0;
#if ORTX_HAVE_X86
    if (ortx_cpu_isa() != ORTX_ISA_AVX512) return;
    const int64_t iterations = 20000, chains = 12;  /* 240K instructions a try: ~40 us fp32, ~150 us bf16 here */
    int bf16 = ortx_cpu_has_avx512_bf16();
    int64_t fp32_ns = INT64_MAX, bf16_ns = INT64_MAX;
    for (int attempt = 0; attempt < 5; attempt++) {
        int64_t start = now_ns();
        volatile float value = probe_avx512(iterations);
        int64_t spent = now_ns() - start;
        fp32_ns = spent < fp32_ns ? spent : fp32_ns;
        if (bf16) {
            start = now_ns();
            value = dot_chains_bf16(iterations);
            spent = now_ns() - start;
            bf16_ns = spent < bf16_ns ? spent : bf16_ns;
        }
        (void)value;
    }
    out[0] = 16.0 * chains * iterations / (double)fp32_ns;
    if (bf16) out[1] = 32.0 * chains * iterations / (double)bf16_ns;
#endif
}

const ortx_kernel_entry ortx_family_host[] = {
    {"host_fma_probe", host_fma_probe, NULL},
    {"host_fma_ports", host_fma_ports, NULL},
    {"host_dot_rates", host_dot_rates, NULL},
    {"host_core_latency", host_core_latency, NULL},
    {NULL, NULL, NULL},
};
