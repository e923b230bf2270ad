/* Family "fft": the DSP device's signal kernels on the planned FFT of fft.h / fft_plan.c.
 *
 * dft_f32: ints = [n, input_length, outer, inner, input_complex, output_bins, inverse]; floats = [scale];
 *   buffers = [x[outer, input_length, inner, 1 or 2], y[outer, output_bins, inner, 2]]. One DFT of length n per
 *   (outer, inner) pair along input_length, zero-padded or truncated to n; bins 0..output_bins-1 are written
 *   (output_bins = n, or n / 2 + 1 for one-sided). inverse: exp(+2 pi i k t / n). Every bin is multiplied by scale.
 *   Real input of even n runs the real-input FFT (n / 2 complex points); the rest runs the complex plan.
 * stft_f32: ints = [batch, signal_length, input_complex, frame_step, frame_length, num_frames, output_bins,
 *   has_window]; buffers = [signal[batch, signal_length, 1 or 2], window[frame_length] (unused unless
 *   has_window), y[batch, num_frames, output_bins, 2]]; frame f is signal[f * frame_step ...] times the window,
 *   transformed forward with n = frame_length.
 * fir_f32: ints = [batch, channels, input_length, taps, output_length, pad_begin, has_bias, method, shared_input];
 *   buffers = [x[batch, channels or 1, input_length], weight[channels, taps], bias[channels], y[batch, channels,
 *   output_length]]; y[t] = bias + sum_k weight[k] x[t + k - pad_begin] (ONNX Conv: a correlation, stride 1,
 *   x zero outside [0, input_length)). shared_input: every channel filters input channel 0 (a filter bank on a
 *   one-channel signal) instead of its own (depthwise). method 0: direct; 1: overlap-save with FFTs, two real blocks per complex
 *   FFT (real and imaginary parts), which pays for long filters (the Python side picks by taps).
 * Threads split over whole transforms (rows, frames or FIR blocks); each output is computed by one task in a
 * fixed order, so results do not depend on the thread count. An allocation failure leaves y unwritten.
 */
#include <stdlib.h>
#include <string.h>

#include "fft.h"
#include "ortx_kernels.h"
#include "threadpool.h"

extern void ortx_dft_f32_ref(const int64_t *, const float *, void *const *, int);
extern void ortx_stft_f32_ref(const int64_t *, const float *, void *const *, int);
extern void ortx_fir_f32_ref(const int64_t *, const float *, void *const *, int);

/* Below this many points per call, threads cost more than they save. */
#define ORTX_FFT_PARALLEL_MIN_POINTS 16384

static int threads_for(int64_t points, int num_threads) {
    return points >= ORTX_FFT_PARALLEL_MIN_POINTS && num_threads > 1 ? num_threads : 1;
}

/* Per-task buffers: the gathered input (n points), the spectrum (n points) and the plan's scratch. */
typedef struct transform_buffers {
    ortx_cpx *work, *spectrum, *scratch;
} transform_buffers;

static int buffers_alloc(transform_buffers *b, const ortx_fft_plan *plan) {
    const int64_t n = plan->n;
    b->work = malloc((size_t)(2 * n + ortx_fft_scratch_points(plan)) * sizeof(ortx_cpx));
    b->spectrum = b->work ? b->work + n : NULL;
    b->scratch = b->work ? b->work + 2 * n : NULL;
    return b->work ? 0 : -1;
}

/* The forward spectrum bins 0..bins-1 of the gathered input: real input in ((float *)work)[0..n), complex in
 * work[0..n). Returns where the bins are. */
static const ortx_cpx *forward_spectrum(const ortx_fft_plan *plan, int input_complex, int64_t bins,
                                        transform_buffers *b) {
    const int64_t n = plan->n;
    if (input_complex) {
        ortx_fft_forward(plan, b->work, b->scratch);
        return b->work;
    }
    if (n % 2 == 0) {
        ortx_fft_real_forward(plan, (const float *)b->work, b->spectrum, b->scratch);
        /* bins past n / 2 by conjugate symmetry, X[n - k] = conj X[k] */
        for (int64_t k = n / 2 + 1; k < bins; k++) {
            b->spectrum[k].re = b->spectrum[n - k].re;
            b->spectrum[k].im = -b->spectrum[n - k].im;
        }
        return b->spectrum;
    }
    const float *real = (const float *)b->work;
    for (int64_t t = n - 1; t >= 0; t--) {  /* widen in place, from the end */
        const float value = real[t];
        b->spectrum[t].re = value;
        b->spectrum[t].im = 0.0f;
    }
    ortx_fft_forward(plan, b->spectrum, b->scratch);
    return b->spectrum;
}

/* dft_f32 ---------------------------------------------------------------------------------------------------- */
typedef struct dft_job {
    const int64_t *ints;
    float scale;
    const float *x;
    float *y;
    const ortx_fft_plan *plan;
} dft_job;

static void dft_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const dft_job *job = context;
    const int64_t n = job->ints[0], input_length = job->ints[1], inner = job->ints[3];
    const int input_complex = (int)job->ints[4], inverse = (int)job->ints[6];
    const int64_t bins = job->ints[5], channels = input_complex ? 2 : 1, copied = input_length < n ? input_length : n;
    transform_buffers b;
    if (buffers_alloc(&b, job->plan) != 0) return;
    for (int64_t row = begin; row < end; row++) {
        const int64_t o = row / inner, i = row % inner;
        const float *x = job->x + (o * input_length * inner + i) * channels;
        if (input_complex) {
            const float sign = inverse ? -1.0f : 1.0f;  /* inverse = conj(FFT(conj x)) */
            for (int64_t t = 0; t < copied; t++) {
                b.work[t].re = x[t * inner * 2];
                b.work[t].im = sign * x[t * inner * 2 + 1];
            }
            memset(b.work + copied, 0, (size_t)(n - copied) * sizeof(ortx_cpx));
        } else {
            float *real = (float *)b.work;
            for (int64_t t = 0; t < copied; t++) real[t] = x[t * inner];
            memset(real + copied, 0, (size_t)(n - copied) * sizeof(float));
        }
        const ortx_cpx *spectrum = forward_spectrum(job->plan, input_complex, bins, &b);
        /* real input: IDFT(x) = conj(DFT(x)) / n; complex: the conjugation of the input above */
        const float scale = job->scale, imag_scale = inverse ? -job->scale : job->scale;
        float *y = job->y + (o * bins * inner + i) * 2;
        for (int64_t k = 0; k < bins; k++) {
            y[k * inner * 2] = spectrum[k].re * scale;
            y[k * inner * 2 + 1] = spectrum[k].im * imag_scale;
        }
    }
    free(b.work);
}

static void ortx_dft_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    const int64_t n = ints[0], rows = ints[2] * ints[3];
    dft_job job = {ints, floats[0], buffers[0], buffers[1], ortx_fft_plan_get(n)};
    if (!job.plan || rows <= 0) return;
    const int threads = threads_for(rows * n, num_threads);
    ortx_parallel_range(threads, rows, (int64_t)ORTX_TASKS_PER_THREAD * threads, dft_rows, &job);
}

/* stft_f32 --------------------------------------------------------------------------------------------------- */
typedef struct stft_job {
    const int64_t *ints;
    const float *signal, *window;
    float *y;
    const ortx_fft_plan *plan;
} stft_job;

static void stft_frames(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const stft_job *job = context;
    const int64_t signal_length = job->ints[1], frame_step = job->ints[3], frame_length = job->ints[4];
    const int64_t num_frames = job->ints[5], bins = job->ints[6];
    const int input_complex = (int)job->ints[2], has_window = (int)job->ints[7];
    const int64_t channels = input_complex ? 2 : 1;
    transform_buffers b;
    if (buffers_alloc(&b, job->plan) != 0) return;
    for (int64_t index = begin; index < end; index++) {
        const int64_t batch = index / num_frames, frame = index % num_frames;
        const float *x = job->signal + (batch * signal_length + frame * frame_step) * channels;
        if (input_complex) {
            for (int64_t t = 0; t < frame_length; t++) {
                const float w = has_window ? job->window[t] : 1.0f;
                b.work[t].re = x[2 * t] * w;
                b.work[t].im = x[2 * t + 1] * w;
            }
        } else {
            float *real = (float *)b.work;
            if (has_window)
                for (int64_t t = 0; t < frame_length; t++) real[t] = x[t] * job->window[t];
            else
                memcpy(real, x, (size_t)frame_length * sizeof(float));
        }
        const ortx_cpx *spectrum = forward_spectrum(job->plan, input_complex, bins, &b);
        memcpy(job->y + index * bins * 2, spectrum, (size_t)bins * sizeof(ortx_cpx));
    }
    free(b.work);
}

static void ortx_stft_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    const int64_t frames = ints[0] * ints[5], frame_length = ints[4];
    stft_job job = {ints, buffers[0], buffers[1], buffers[2], ortx_fft_plan_get(frame_length)};
    if (!job.plan || frames <= 0) return;
    const int threads = threads_for(frames * frame_length, num_threads);
    ortx_parallel_range(threads, frames, (int64_t)ORTX_TASKS_PER_THREAD * threads, stft_frames, &job);
}

/* fir_f32 ---------------------------------------------------------------------------------------------------- */
typedef struct fir_job {
    const int64_t *ints;
    const float *x, *weight, *bias;
    float *y;
    const ortx_fft_plan *plan;    /* overlap-save: FFT length */
    const ortx_cpx *responses;    /* overlap-save: [channels][fft length], FFT of the reversed taps / fft length */
    int64_t block, pair_blocks;   /* outputs per block; (blocks + 1) / 2 block pairs per row */
} fir_job;

/* Direct form as axpys over blocks of outputs: y[t] += w[k] x[t + k - pad_begin] for each tap k, the block of y
 * staying in L1 and the inner loop (over t, no reduction) vectorised by the compiler. */
#define ORTX_FIR_BLOCK 1024

static void fir_direct_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const fir_job *job = context;
    const int64_t channels = job->ints[1], input_length = job->ints[2], taps = job->ints[3];
    const int64_t output_length = job->ints[4], pad_begin = job->ints[5], has_bias = job->ints[6];
    for (int64_t row = begin; row < end; row++) {
        const int64_t channel = row % channels;
        const float *x = job->x + (job->ints[8] ? row / channels : row) * input_length;
        const float *w = job->weight + channel * taps;
        float *y = job->y + row * output_length;
        const float bias = has_bias ? job->bias[channel] : 0.0f;
        for (int64_t block = 0; block < output_length; block += ORTX_FIR_BLOCK) {
            const int64_t block_end = block + ORTX_FIR_BLOCK < output_length ? block + ORTX_FIR_BLOCK : output_length;
            float *restrict out = y;
            for (int64_t t = block; t < block_end; t++) out[t] = bias;
            for (int64_t k = 0; k < taps; k++) {
                /* x index t + k - pad_begin must lie in [0, input_length) */
                int64_t t_begin = pad_begin - k > block ? pad_begin - k : block;
                int64_t t_end = input_length + pad_begin - k < block_end ? input_length + pad_begin - k : block_end;
                const float weight = w[k];
                const float *restrict source = x + k - pad_begin;
                for (int64_t t = t_begin; t < t_end; t++) out[t] += weight * source[t];
            }
        }
    }
}

/* One task = two consecutive blocks of one row, carried as the real and imaginary parts of one complex FFT. */
static void fir_overlap_save_pairs(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const fir_job *job = context;
    const int64_t channels = job->ints[1], input_length = job->ints[2], taps = job->ints[3];
    const int64_t output_length = job->ints[4], pad_begin = job->ints[5], has_bias = job->ints[6];
    const int64_t n = job->plan->n, block = job->block;
    ortx_cpx *work = malloc((size_t)(n + ortx_fft_scratch_points(job->plan)) * sizeof(ortx_cpx));
    if (!work) return;
    ortx_cpx *scratch = work + n;
    for (int64_t task = begin; task < end; task++) {
        const int64_t row = task / job->pair_blocks, pair = task % job->pair_blocks, channel = row % channels;
        const float *x = job->x + (job->ints[8] ? row / channels : row) * input_length;
        const ortx_cpx *response = job->responses + channel * n;
        /* y[t] = sum_j h[j] x[t - pad_begin + taps - 1 - j] with h the reversed taps: block output t0 + u,
         * u < block, is circular-convolution index u + taps - 1 of the input window starting at t0 - pad_begin. */
        const int64_t t0 = 2 * pair * block, t1 = t0 + block;
        for (int64_t u = 0; u < n; u++) {
            const int64_t a = t0 - pad_begin + u, c = t1 - pad_begin + u;
            work[u].re = a >= 0 && a < input_length ? x[a] : 0.0f;
            work[u].im = c >= 0 && c < input_length ? x[c] : 0.0f;
        }
        ortx_fft_forward(job->plan, work, scratch);
        for (int64_t u = 0; u < n; u++) {  /* multiply, conjugate for the inverse transform */
            const float re = work[u].re * response[u].re - work[u].im * response[u].im;
            const float im = work[u].re * response[u].im + work[u].im * response[u].re;
            work[u].re = re;
            work[u].im = -im;
        }
        ortx_fft_forward(job->plan, work, scratch);
        const float bias = has_bias ? job->bias[channel] : 0.0f;
        float *y = job->y + row * output_length;
        for (int64_t u = 0; u < block && t0 + u < output_length; u++) y[t0 + u] = work[u + taps - 1].re + bias;
        for (int64_t u = 0; u < block && t1 + u < output_length; u++) y[t1 + u] = -work[u + taps - 1].im + bias;
    }
    free(work);
}

/* FFT length for overlap-save: a power of two >= 4 taps (so each block yields at least 3/4 of its points). */
static int64_t overlap_save_length(int64_t taps) {
    int64_t n = 8;
    while (n < 4 * taps) n *= 2;
    return n;
}

static void ortx_fir_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    const int64_t rows = ints[0] * ints[1], channels = ints[1], taps = ints[3], output_length = ints[4];
    fir_job job = {ints, buffers[0], buffers[1], buffers[2], buffers[3], NULL, NULL, 0, 0};
    if (rows <= 0 || output_length <= 0) return;
    /* work in FFT-point units: a direct output costs taps / 4 of them, an overlap-save output about 8 */
    const int threads = threads_for(rows * output_length * (ints[7] ? 8 : taps / 4 + 1), num_threads);
    if (ints[7] == 0) {
        ortx_parallel_range(threads, rows, (int64_t)ORTX_TASKS_PER_THREAD * threads, fir_direct_rows, &job);
        return;
    }
    const int64_t n = overlap_save_length(taps);
    job.plan = ortx_fft_plan_get(n);
    ortx_cpx *responses = calloc((size_t)(channels * n), sizeof(ortx_cpx));
    ortx_cpx *scratch = job.plan ? malloc((size_t)ortx_fft_scratch_points(job.plan) * sizeof(ortx_cpx)) : NULL;
    if (!job.plan || !responses || !scratch) {
        free(responses);
        free(scratch);
        return;
    }
    for (int64_t channel = 0; channel < channels; channel++) {
        ortx_cpx *h = responses + channel * n;
        for (int64_t j = 0; j < taps; j++) h[j].re = job.weight[channel * taps + taps - 1 - j] / (float)n;
        ortx_fft_forward(job.plan, h, scratch);
    }
    free(scratch);
    job.responses = responses;
    job.block = n - taps + 1;
    const int64_t blocks = (output_length + job.block - 1) / job.block;
    job.pair_blocks = (blocks + 1) / 2;
    ortx_parallel_range(threads, rows * job.pair_blocks, (int64_t)ORTX_TASKS_PER_THREAD * threads,
                        fir_overlap_save_pairs, &job);
    free(responses);
}

const ortx_kernel_entry ortx_family_fft[] = {
    {"dft_f32", ortx_dft_f32, ortx_dft_f32_ref},
    {"stft_f32", ortx_stft_f32, ortx_stft_f32_ref},
    {"fir_f32", ortx_fir_f32, ortx_fir_f32_ref},
    {NULL, NULL, NULL},
};
