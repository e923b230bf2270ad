/* Family "pool": windowed and global pooling over NC[D][H]W float32 tensors.
 *
 * maxpool_f32, avgpool_f32: ints and buffers as documented in pool_internal.h (23 ints; buffers = [x, y]).
 *   MaxPool of windows with no valid tap is the lowest float (onnxruntime's initial value). AveragePool divides
 *   by the valid taps, or with count_include_pad by the taps inside the padded extent (taps past the end pads,
 *   which ceil_mode can create, are not counted), as onnxruntime does.
 * global_avgpool_f32, global_maxpool_f32: ints = [channels (N*C), spatial (product of spatial dims)];
 *   buffers = [x, y].
 * maxpool_nchwc_f32: maxpool_f32's ints with channels = N * ceil(C/16) blocks, 2-D (the d dims 1); buffers = [x, y]
 *   in conv.h's blocked layout ([blocks][H][W][16], as blocked runs keep ResNet's stem -> MaxPool -> convs): each
 *   output pixel is the lane-wise max of its window's valid 16-float vectors, taps in maxpool_f32's order.
 * maxpool_pair_rows_f32: maxpool_nchwc_f32 whose x is bf16 pair rows (pair_rows.h; a bf16 session's stem on AMX
 *   writes them): ints its ints, then the blocks of one image (ceil(C/16)); block b of image n is the half b % 2 of
 *   chunk n * ceil(C/32) + b / 2. y blocked fp32 as there. Max commutes with rounding, so y is the fp32 maxima
 *   rounded to bf16 (widened back).
 * maxpool_pair_rows_bf16: the same into pair rows: ints maxpool_f32's with channels = N * ceil(C/32) chunks (2-D);
 *   buffers = [x, y], both pair rows. Each output pixel's 32 values are its window's maxima of the bf16 values
 *   (NaNs left out, -inf where no value is left: maxpool_pair_rows_f32's output rounded), computed on 16-bit order
 *   keys (pool_internal.h's ortx_pool_bf16_key), a chunk's 32 channels a vector: no widening, half the bytes out.
 *
 * Structure: a driver walks (channel, d, h) output rows, ranges of channels as thread-pool tasks, and hands each row's
 * valid input rows to a row function; the AVX2 row function vectorises along the output width for strides 1
 * and 2 with dilation 1 (ISA variant in pool_avx2.c), the AVX-512 one max pooling with stride 2 and 2 or 3 w taps
 * (pool_avx512.c). Averages reduce taps in the reference's order (d, h, then w), so windowed results match the
 * reference bitwise; the AVX-512 max takes w's rows first (max is exact: the same values, and -0 == +0); global
 * averages use 8-lane partial sums.
 */
#include <float.h>
#include <stdlib.h>

#include "gemm_bf16.h"
#include "isa.h"
#include "ortx_kernels.h"
#include "pool_internal.h"
#include "threadpool.h"

void ortx_maxpool_f32_ref(const int64_t *, const float *, void *const *, int);
void ortx_avgpool_f32_ref(const int64_t *, const float *, void *const *, int);
void ortx_global_avgpool_f32_ref(const int64_t *, const float *, void *const *, int);
void ortx_global_maxpool_f32_ref(const int64_t *, const float *, void *const *, int);

void ortx_pool_row_f32_range(const float *const *rows, int64_t num_rows, int64_t padded_rows, float *out,
                             const ortx_pool_params *p, int is_max, int64_t ow_begin, int64_t ow_end) {
    const int64_t dil = p->dilation[2];
    for (int64_t ow = ow_begin; ow < ow_end; ow++) {
        int64_t first, last, padded;
        ortx_pool_taps(p, 2, ow, &first, &last, &padded);
        const int64_t start = ow * p->stride[2] - p->pad_begin[2];
        if (is_max) {
            float best = -FLT_MAX;
            for (int64_t r = 0; r < num_rows; r++)
                for (int64_t j = first; j < last; j++) {
                    float v = rows[r][start + j * dil];
                    best = v > best ? v : best;
                }
            out[ow] = best;
        } else {
            float sum = 0.0f;
            for (int64_t r = 0; r < num_rows; r++)
                for (int64_t j = first; j < last; j++) sum += rows[r][start + j * dil];
            int64_t count = p->count_include_pad ? padded_rows * padded : num_rows * (last - first);
            out[ow] = count > 0 ? sum / (float)count : 0.0f;
        }
    }
}

void ortx_pool_interior(const ortx_pool_params *p, int64_t *begin, int64_t *end) {
    const int64_t stride = p->stride[2], span = (p->kernel[2] - 1) * p->dilation[2] + 1, pad = p->pad_begin[2];
    int64_t lo = (pad + stride - 1) / stride;
    int64_t hi = p->in[2] - span + pad >= 0 ? (p->in[2] - span + pad) / stride + 1 : 0;
    if (hi > p->out[2]) hi = p->out[2];
    if (lo > hi) lo = hi;
    *begin = lo;
    *end = hi;
}

/* Interior outputs (every tap inside the row) skip the tap bounds; edges use the general range code. */
void ortx_pool_row_f32_portable(const float *const *rows, int64_t num_rows, int64_t padded_rows, float *out,
                                const ortx_pool_params *p, int is_max) {
    int64_t lo, hi;
    ortx_pool_interior(p, &lo, &hi);
    ortx_pool_row_f32_range(rows, num_rows, padded_rows, out, p, is_max, 0, lo);
    ortx_pool_row_f32_range(rows, num_rows, padded_rows, out, p, is_max, hi, p->out[2]);
    if (num_rows == 0) {
        ortx_pool_row_f32_range(rows, num_rows, padded_rows, out, p, is_max, lo, hi);
        return;
    }
    const int64_t stride = p->stride[2], dil = p->dilation[2], k = p->kernel[2], pad = p->pad_begin[2];
    const float divisor = (float)((p->count_include_pad ? padded_rows : num_rows) * k);
    for (int64_t ow = lo; ow < hi; ow++) {
        const int64_t start = ow * stride - pad;
        float acc = is_max ? -FLT_MAX : 0.0f;
        for (int64_t r = 0; r < num_rows; r++)
            for (int64_t j = 0; j < k; j++) {
                float v = rows[r][start + j * dil];
                acc = is_max ? (v > acc ? v : acc) : acc + v;
            }
        out[ow] = is_max ? acc : acc / divisor;
    }
}

static ortx_pool_row_fn select_row_fn(void) {
#if ORTX_HAVE_X86
    if (ortx_selected_isa() >= ORTX_ISA_AVX512) return ortx_pool_row_f32_avx512;
    if (ortx_selected_isa() >= ORTX_ISA_AVX2) return ortx_pool_row_f32_avx2;
#endif
    return ortx_pool_row_f32_portable;
}

typedef struct pool_job {
    ortx_pool_params p;
    const float *x;
    float *y;
    ortx_pool_row_fn row_fn;
    int is_max;
    int plane;  /* ortx_pool_planes_f32_avx512 applies */
} pool_job;

/* Whether a pool runs a plane at a time on AVX-512 (pool_internal.h's conditions). */
static int plane_applies(const ortx_pool_params *p) {
#if ORTX_HAVE_X86
    return ortx_selected_isa() >= ORTX_ISA_AVX512 && p->in[0] == 1 && p->out[0] == 1 && p->kernel[0] == 1 &&
           p->dilation[2] == 1 &&
           (p->stride[2] == 1 ? p->kernel[2] <= ORTX_POOL_PLANE_MAX_TAPS : p->stride[2] == 2 && p->kernel[2] <= 3) &&
           p->out[2] <= 16 * ORTX_POOL_PLANE_CHUNKS && p->out[1] <= ORTX_POOL_PLANE_MAX_ROWS;
#else
    (void)p;
    return 0;
#endif
}

/* Channels [begin, end): every output row of each, with one scratch of row pointers per range. */
static void pool_channels(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const pool_job *job = context;
    const ortx_pool_params *p = &job->p;
    const int64_t in_plane = p->in[0] * p->in[1] * p->in[2];
    const int64_t out_plane = p->out[0] * p->out[1] * p->out[2];
    const int64_t max_rows = p->kernel[0] * p->kernel[1];
    const size_t slots = (size_t)(max_rows > 0 ? max_rows : 1);
#if ORTX_HAVE_X86
    if (job->plane) {
        ortx_pool_planes_f32_avx512(job->x + begin * in_plane, job->y + begin * out_plane, end - begin, p,
                                    job->is_max);
        return;
    }
#endif
    const float **rows = malloc((sizeof(float *) + sizeof(int64_t)) * slots);
    if (!rows) return;
    int64_t *offsets = (int64_t *)(rows + slots);
    for (int64_t c = begin; c < end; c++) {
        const float *xc = job->x + c * in_plane;
        float *yc = job->y + c * out_plane;
        for (int64_t od = 0; od < p->out[0]; od++)
            for (int64_t oh = 0; oh < p->out[1]; oh++) {
                int64_t taps, num_rows = ortx_pool_window_rows(p, od, oh, offsets, &taps);
                for (int64_t r = 0; r < num_rows; r++) rows[r] = xc + offsets[r];
                job->row_fn(rows, num_rows, taps, yc + (od * p->out[1] + oh) * p->out[2], p, job->is_max);
            }
    }
    free(rows);
}

static void pool_driver(const int64_t *ints, void *const *buffers, int num_threads, int is_max) {
    pool_job job = {ortx_pool_params_read(ints), buffers[0], buffers[1], select_row_fn(), is_max, 0};
    job.plane = plane_applies(&job.p);
    int threads = num_threads < 1 ? 1 : num_threads;
    ortx_parallel_range(threads, job.p.channels, (int64_t)ORTX_TASKS_PER_THREAD * threads, pool_channels, &job);
}

static void ortx_maxpool_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    pool_driver(ints, buffers, num_threads, 1);
}

static void ortx_avgpool_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    pool_driver(ints, buffers, num_threads, 0);
}

typedef struct nchwc_pool_job {
    ortx_pool_params p;
    const float *x;
    float *y;
    int64_t pair_rows_blocks;  /* maxpool_pair_rows_f32: blocks of one image; 0: x blocked */
} nchwc_pool_job;

/* Where block `block` (of all images) of the input lies: its blocked plane, or its half of a pair-rows chunk plane
 * (*pair set), whose pixels are 32 bf16 apart. */
static const void *pool_plane(const nchwc_pool_job *job, int64_t block, int *pair) {
    const int64_t pixels = job->p.in[1] * job->p.in[2], per_image = job->pair_rows_blocks;
    *pair = per_image > 0;
    if (!*pair) return job->x + block * pixels * 16;
    const int64_t n = block / per_image, b = block % per_image, chunks = (per_image + 1) / 2;
    return (const uint16_t *)job->x + ((n * chunks + b / 2) * pixels * 32 + b % 2 * 16);
}

/* Output rows [begin, end): unit u is block u / OH, row u % OH; on AVX-512 ortx_maxpool_nchwc_row_avx512's column
 * maxima (ResNet-18's stem pool, 2 threads: 0.249 ms here portable, maxpool_f32 on NCHW 0.128). Max is exact. */
static void maxpool_nchwc_rows(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const nchwc_pool_job *job = context;
    const ortx_pool_params *p = &job->p;
    const int64_t IW = p->in[2], OH = p->out[1], OW = p->out[2];
#if ORTX_HAVE_X86
    if (ortx_selected_isa() >= ORTX_ISA_AVX512 && IW <= ORTX_POOL_NCHWC_MAX_WIDTH) {
        float column_max[ORTX_POOL_NCHWC_MAX_WIDTH * 16] __attribute__((aligned(64)));
        for (int64_t unit = begin; unit < end; unit++) {
            int pair;
            const void *plane = pool_plane(job, unit / OH, &pair);
            if (pair)
                ortx_maxpool_pair_rows_row_avx512(plane, p, unit % OH, job->y + unit * OW * 16, column_max);
            else
                ortx_maxpool_nchwc_row_avx512(plane, p, unit % OH, job->y + unit * OW * 16, column_max);
        }
        return;
    }
#endif
    for (int64_t unit = begin; unit < end; unit++) {
        const int64_t block = unit / OH, oh = unit % OH, h0 = oh * p->stride[1] - p->pad_begin[1];
        int64_t h_first, h_last, h_padded;
        ortx_pool_taps(p, 1, oh, &h_first, &h_last, &h_padded);
        int pair;
        const void *plane = pool_plane(job, block, &pair);
        float *out = job->y + (block * OH + oh) * OW * 16;
        for (int64_t ow = 0; ow < OW; ow++) {
            int64_t w_first, w_last, w_padded;
            ortx_pool_taps(p, 2, ow, &w_first, &w_last, &w_padded);
            const int64_t w0 = ow * p->stride[2] - p->pad_begin[2];
            float best[16];
            for (int l = 0; l < 16; l++) best[l] = -FLT_MAX;
            for (int64_t i = h_first; i < h_last; i++) {
                const int64_t row = (h0 + i * p->dilation[1]) * IW;  /* the row's first pixel */
                for (int64_t j = w_first; j < w_last; j++) {
                    const int64_t pixel = row + w0 + j * p->dilation[2];
                    for (int l = 0; l < 16; l++) {
                        float v = pair ? ortx_bf16_to_float(((const uint16_t *)plane)[pixel * 32 + l])
                                       : ((const float *)plane)[pixel * 16 + l];
                        best[l] = v > best[l] ? v : best[l];
                    }
                }
            }
            for (int l = 0; l < 16; l++) out[ow * 16 + l] = best[l];
        }
    }
}

/* maxpool_pair_rows_bf16's output rows [begin, end): unit u is chunk u / OH, row u % OH. */
static void maxpool_pair_rows_bf16_rows(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const nchwc_pool_job *job = context;
    const ortx_pool_params *p = &job->p;
    const int64_t IW = p->in[2], OH = p->out[1], OW = p->out[2], pixels = p->in[1] * IW;
    const uint16_t *x = (const uint16_t *)job->x;
    uint16_t *y = (uint16_t *)job->y;
#if ORTX_HAVE_X86
    if (ortx_selected_isa() >= ORTX_ISA_AVX512 && IW <= ORTX_POOL_NCHWC_MAX_WIDTH) {
        int16_t column_key[ORTX_POOL_NCHWC_MAX_WIDTH * 32] __attribute__((aligned(64)));
        for (int64_t unit = begin; unit < end; unit++)
            ortx_maxpool_pair_rows_bf16_row_avx512(x + unit / OH * pixels * 32, p, unit % OH, y + unit * OW * 32,
                                                   column_key);
        return;
    }
#endif
    for (int64_t unit = begin; unit < end; unit++) {
        const int64_t oh = unit % OH, h0 = oh * p->stride[1] - p->pad_begin[1];
        const uint16_t *plane = x + unit / OH * pixels * 32;
        int64_t h_first, h_last, h_padded;
        ortx_pool_taps(p, 1, oh, &h_first, &h_last, &h_padded);
        for (int64_t ow = 0; ow < OW; ow++) {
            int64_t w_first, w_last, w_padded;
            ortx_pool_taps(p, 2, ow, &w_first, &w_last, &w_padded);
            const int64_t w0 = ow * p->stride[2] - p->pad_begin[2];
            int16_t best[32];
            for (int l = 0; l < 32; l++) best[l] = ORTX_POOL_BF16_LOWEST;
            for (int64_t i = h_first; i < h_last; i++)
                for (int64_t j = w_first; j < w_last; j++) {
                    const uint16_t *pixel = plane + ((h0 + i * p->dilation[1]) * IW + w0 + j * p->dilation[2]) * 32;
                    for (int l = 0; l < 32; l++) {
                        int16_t key = ortx_pool_bf16_key(pixel[l]);
                        best[l] = key > best[l] ? key : best[l];
                    }
                }
            for (int l = 0; l < 32; l++) y[(unit * OW + ow) * 32 + l] = ortx_pool_bf16_value(best[l]);
        }
    }
}

static void ortx_maxpool_pair_rows_bf16(const int64_t *ints, const float *floats, void *const *buffers,
                                        int num_threads) {
    (void)floats;
    nchwc_pool_job job = {ortx_pool_params_read(ints), buffers[0], buffers[1], 0};
    const int64_t units = job.p.channels * job.p.out[1];
    const int threads = units * job.p.out[2] * 64 >= 64 * 1024 ? num_threads : 1;  /* small maps: one thread */
    ortx_parallel_range(threads, units, (int64_t)ORTX_TASKS_PER_THREAD * threads, maxpool_pair_rows_bf16_rows, &job);
}

static void maxpool_blocked(const int64_t *ints, void *const *buffers, int num_threads, int64_t pair_rows_blocks) {
    nchwc_pool_job job = {ortx_pool_params_read(ints), buffers[0], buffers[1], pair_rows_blocks};
    const int64_t units = job.p.channels * job.p.out[1];
    const int threads = units * job.p.out[2] * 16 * 4 >= 64 * 1024 ? num_threads : 1;  /* small maps: one thread */
    ortx_parallel_range(threads, units, (int64_t)ORTX_TASKS_PER_THREAD * threads, maxpool_nchwc_rows, &job);
}

static void ortx_maxpool_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    maxpool_blocked(ints, buffers, num_threads, 0);
}

static void ortx_maxpool_pair_rows_f32(const int64_t *ints, const float *floats, void *const *buffers,
                                       int num_threads) {
    (void)floats;
    maxpool_blocked(ints, buffers, num_threads, ints[ORTX_POOL_INTS]);
}

/* maxpool_nchwc_f32's oracle: maxpool_f32's reference on the blocks' lanes as channels. */
static void ortx_maxpool_nchwc_f32_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                       int num_threads) {
    const ortx_pool_params p = ortx_pool_params_read(ints);
    const int64_t in_pixels = p.in[1] * p.in[2], out_pixels = p.out[1] * p.out[2], lanes = p.channels * 16;
    float *x = malloc(lanes * in_pixels * sizeof(float)), *y = malloc(lanes * out_pixels * sizeof(float));
    if (!x || !y) abort();
    const float *src = buffers[0];
    float *dst = buffers[1];
    for (int64_t c = 0; c < lanes; c++)
        for (int64_t i = 0; i < in_pixels; i++) x[c * in_pixels + i] = src[(c / 16 * in_pixels + i) * 16 + c % 16];
    int64_t plain[ORTX_POOL_INTS];
    for (int i = 0; i < ORTX_POOL_INTS; i++) plain[i] = ints[i];
    plain[0] = lanes;
    void *plain_buffers[2] = {x, y};
    ortx_maxpool_f32_ref(plain, floats, plain_buffers, num_threads);
    for (int64_t c = 0; c < lanes; c++)
        for (int64_t i = 0; i < out_pixels; i++) dst[(c / 16 * out_pixels + i) * 16 + c % 16] = y[c * out_pixels + i];
    free(x);
    free(y);
}

/* maxpool_pair_rows_f32's oracle: the pair rows widened into a blocked copy, then maxpool_nchwc_f32's oracle. */
static void ortx_maxpool_pair_rows_f32_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                           int num_threads) {
    const ortx_pool_params p = ortx_pool_params_read(ints);
    const int64_t pixels = p.in[1] * p.in[2], per_image = ints[ORTX_POOL_INTS], chunks = (per_image + 1) / 2;
    float *x = malloc(p.channels * pixels * 16 * sizeof(float));
    if (!x) abort();
    const uint16_t *src = buffers[0];
    for (int64_t block = 0; block < p.channels; block++) {
        const int64_t n = block / per_image, b = block % per_image;
        for (int64_t i = 0; i < pixels; i++)
            for (int l = 0; l < 16; l++)
                x[(block * pixels + i) * 16 + l] =
                    ortx_bf16_to_float(src[((n * chunks + b / 2) * pixels + i) * 32 + b % 2 * 16 + l]);
    }
    void *blocked[2] = {x, buffers[1]};
    ortx_maxpool_nchwc_f32_ref(ints, floats, blocked, num_threads);
    free(x);
}

/* maxpool_pair_rows_bf16's oracle: each chunk's two blocks through maxpool_pair_rows_f32's oracle, rounded back. */
static void ortx_maxpool_pair_rows_bf16_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                            int num_threads) {
    const ortx_pool_params p = ortx_pool_params_read(ints);
    const int64_t out_pixels = p.out[1] * p.out[2], chunks = p.channels;
    float *y = malloc(chunks * 2 * out_pixels * 16 * sizeof(float));
    if (!y) abort();
    int64_t blocked[ORTX_POOL_INTS + 1];
    for (int i = 0; i < ORTX_POOL_INTS; i++) blocked[i] = ints[i];
    blocked[0] = 2 * chunks;
    blocked[ORTX_POOL_INTS] = 2 * chunks;  /* as one image: block b is the half b % 2 of chunk b / 2 */
    void *f32_buffers[2] = {buffers[0], y};
    ortx_maxpool_pair_rows_f32_ref(blocked, floats, f32_buffers, num_threads);
    uint16_t *dst = buffers[1];
    for (int64_t c = 0; c < chunks; c++)
        for (int64_t i = 0; i < out_pixels; i++)
            for (int l = 0; l < 32; l++)
                dst[(c * out_pixels + i) * 32 + l] =
                    ortx_bf16_from_float(y[((2 * c + l / 16) * out_pixels + i) * 16 + l % 16]);
    free(y);
}

/* Portable global pools: four partial sums per channel so the compiler can keep several adds in flight. */
static void global_pool_portable(const float *x, float *y, int64_t channels, int64_t spatial, int is_max) {
    for (int64_t c = 0; c < channels; c++) {
        const float *xc = x + c * spatial;
        float acc[4];
        int64_t i = 0;
        if (is_max) {
            acc[0] = acc[1] = acc[2] = acc[3] = -FLT_MAX;
            for (; i + 4 <= spatial; i += 4)
                for (int l = 0; l < 4; l++) acc[l] = xc[i + l] > acc[l] ? xc[i + l] : acc[l];
            float best = acc[0];
            for (int l = 1; l < 4; l++) best = acc[l] > best ? acc[l] : best;
            for (; i < spatial; i++) best = xc[i] > best ? xc[i] : best;
            y[c] = best;
        } else {
            acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
            for (; i + 4 <= spatial; i += 4)
                for (int l = 0; l < 4; l++) acc[l] += xc[i + l];
            float sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
            for (; i < spatial; i++) sum += xc[i];
            y[c] = sum / (float)spatial;
        }
    }
}

typedef struct global_pool_job {
    const float *x;
    float *y;
    int64_t spatial;
    int is_max, isa;
} global_pool_job;

/* Channels [begin, end), each reduced whole by one task. */
static void global_pool_channels(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const global_pool_job *job = context;
    const float *x = job->x + begin * job->spatial;
    float *y = job->y + begin;
#if ORTX_HAVE_X86
    if (job->isa >= ORTX_ISA_AVX2) {
        ortx_global_pool_f32_avx2(x, y, end - begin, job->spatial, job->is_max);
        return;
    }
#endif
    global_pool_portable(x, y, end - begin, job->spatial, job->is_max);
}

static void global_pool(const int64_t *ints, void *const *buffers, int num_threads, int is_max) {
    global_pool_job job = {buffers[0], buffers[1], ints[1], is_max, ortx_selected_isa()};
    int threads = num_threads < 1 ? 1 : num_threads;
    ortx_parallel_range(threads, ints[0], (int64_t)ORTX_TASKS_PER_THREAD * threads, global_pool_channels, &job);
}

static void ortx_global_avgpool_f32(const int64_t *ints, const float *floats, void *const *buffers,
                                    int num_threads) {
    (void)floats;
    global_pool(ints, buffers, num_threads, 0);
}

static void ortx_global_maxpool_f32(const int64_t *ints, const float *floats, void *const *buffers,
                                    int num_threads) {
    (void)floats;
    global_pool(ints, buffers, num_threads, 1);
}

const ortx_kernel_entry ortx_family_pool[] = {
    {"maxpool_f32", ortx_maxpool_f32, ortx_maxpool_f32_ref},
    {"maxpool_nchwc_f32", ortx_maxpool_nchwc_f32, ortx_maxpool_nchwc_f32_ref},
    {"maxpool_pair_rows_f32", ortx_maxpool_pair_rows_f32, ortx_maxpool_pair_rows_f32_ref},
    {"maxpool_pair_rows_bf16", ortx_maxpool_pair_rows_bf16, ortx_maxpool_pair_rows_bf16_ref},
    {"avgpool_f32", ortx_avgpool_f32, ortx_avgpool_f32_ref},
    {"global_avgpool_f32", ortx_global_avgpool_f32, ortx_global_avgpool_f32_ref},
    {"global_maxpool_f32", ortx_global_maxpool_f32, ortx_global_maxpool_f32_ref},
    {NULL, NULL, NULL},
};
