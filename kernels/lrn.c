/* Family "lrn": LocalResponseNormalization across channels, float32 N x C x spatial.
 *
 * lrn_f32: ints = [batch, channels, spatial (product of the dims after C), size]; floats = [alpha, beta, bias];
 *   buffers = [x, y]. y[n, c, p] = x[n, c, p] / (bias + alpha / size * S)^beta, S the sum of x[n, i, p]^2 over
 *   channels i in [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] inside [0, C) (ONNX's LRN).
 * AVX-512: 16 pixels a vector; per channel its window's squares summed in channel order (fused multiply-adds),
 *   then x * exp(-beta * log(bias + alpha / size * S)) with vector_math.h's exp and log (each within ~2 ulp of
 *   libm), where the reference divides by powf. Tasks are (image, run of pixel vectors), every channel each.
 * Why: ONNX Runtime's CPU LRN computes it element by element; in the model zoo's GoogLeNet (Inception v1) its two
 *   LRNs took 10.2 of ORT's 24.2 ms (2 threads), and OrtxEP handed them to ORT in two segments of their own.
 * Known limits: no AVX2 variant (AVX2 CPUs run the portable loop); the window's squares are summed afresh per
 *   channel (size multiply-adds an output, not a running sum, whose rounding would drift over many channels).
 */
#include <math.h>

#include "isa.h"
#include "ortx_kernels.h"
#include "threadpool.h"
#include "vector_math.h"

void ortx_lrn_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);

typedef struct lrn_job {
    const float *x;
    float *y;
    int64_t channels, spatial, size, vectors;
    float alpha, beta, bias;
} lrn_job;

static void lrn_pixels_portable(const lrn_job *job, int64_t n, int64_t p_begin, int64_t p_end) {
    const int64_t C = job->channels, P = job->spatial, before = (job->size - 1) / 2, after = job->size / 2;
    const float scale = job->alpha / (float)job->size;
    for (int64_t c = 0; c < C; c++) {
        const int64_t lo = c - before < 0 ? 0 : c - before, hi = c + after >= C ? C - 1 : c + after;
        for (int64_t p = p_begin; p < p_end; p++) {
            float sum = 0.0f;
            for (int64_t i = lo; i <= hi; i++) {
                float v = job->x[(n * C + i) * P + p];
                sum += v * v;
            }
            job->y[(n * C + c) * P + p] = job->x[(n * C + c) * P + p] / powf(job->bias + scale * sum, job->beta);
        }
    }
}

#if ORTX_HAVE_X86
#include <immintrin.h>

ORTX_TARGET_AVX512 static void lrn_pixels_avx512(const lrn_job *job, int64_t n, int64_t p_begin, int64_t p_end) {
    const int64_t C = job->channels, P = job->spatial, before = (job->size - 1) / 2, after = job->size / 2;
    const __m512 scale = _mm512_set1_ps(job->alpha / (float)job->size), bias = _mm512_set1_ps(job->bias);
    const __m512 minus_beta = _mm512_set1_ps(-job->beta);
    for (int64_t p = p_begin; p < p_end; p += 16) {
        const __mmask16 live = p_end - p >= 16 ? 0xFFFF : (__mmask16)((1u << (p_end - p)) - 1);
        const float *x = job->x + n * C * P + p;
        float *y = job->y + n * C * P + p;
        for (int64_t c = 0; c < C; c++) {
            const int64_t lo = c - before < 0 ? 0 : c - before, hi = c + after >= C ? C - 1 : c + after;
            __m512 sum = _mm512_setzero_ps();
            for (int64_t i = lo; i <= hi; i++) {
                const __m512 v = _mm512_maskz_loadu_ps(live, x + i * P);
                sum = _mm512_fmadd_ps(v, v, sum);
            }
            const __m512 base = _mm512_fmadd_ps(scale, sum, bias);
            const __m512 factor = ortx_exp_avx512(_mm512_mul_ps(minus_beta, ortx_log_avx512(base)));
            _mm512_mask_storeu_ps(y + c * P, live, _mm512_mul_ps(_mm512_maskz_loadu_ps(live, x + c * P), factor));
        }
    }
}
#endif

/* Tasks [begin, end): task t is image t / vectors, pixel vector run t % vectors (16 pixels each). */
static void lrn_tasks(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const lrn_job *job = context;
    for (int64_t task = begin; task < end; task++) {
        const int64_t n = task / job->vectors, v = task % job->vectors;
        const int64_t p_begin = v * 16, p_end = p_begin + 16 < job->spatial ? p_begin + 16 : job->spatial;
#if ORTX_HAVE_X86
        if (ortx_selected_isa() >= ORTX_ISA_AVX512) {
            lrn_pixels_avx512(job, n, p_begin, p_end);
            continue;
        }
#endif
        lrn_pixels_portable(job, n, p_begin, p_end);
    }
}

static void ortx_lrn_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    lrn_job job = {buffers[0], buffers[1], ints[1], ints[2], ints[3], (ints[2] + 15) / 16, floats[0], floats[1],
                   floats[2]};
    const int64_t tasks = ints[0] * job.vectors;
    const int threads = num_threads < 1 ? 1 : num_threads;
    ortx_parallel_range(threads, tasks, (int64_t)ORTX_TASKS_PER_THREAD * threads, lrn_tasks, &job);
}

const ortx_kernel_entry ortx_family_lrn[] = {
    {"lrn_f32", ortx_lrn_f32, ortx_lrn_f32_ref},
    {NULL, NULL, NULL},
};
