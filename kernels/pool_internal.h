/* Shared by pool.c and its ISA files: the parameter block every windowed pooling kernel reads, and the
 * per-output-row contract.
 *
 * Windowed pools (maxpool_f32, avgpool_f32) read ints = [channels, in_d, in_h, in_w, out_d, out_h, out_w,
 * k_d, k_h, k_w, stride_d, stride_h, stride_w, pad_begin_d, pad_begin_h, pad_begin_w, pad_end_d, pad_end_h,
 * pad_end_w, dilation_d, dilation_h, dilation_w, count_include_pad]; 1-D and 2-D pools pass 1 for the missing
 * leading spatial dims. channels is N*C. buffers = [x, y], NCDHW contiguous.
 */
#ifndef ORTX_POOL_INTERNAL_H
#define ORTX_POOL_INTERNAL_H

#include <stdint.h>

#define ORTX_POOL_INTS 23

typedef struct ortx_pool_params {
    int64_t channels;
    int64_t in[3], out[3], kernel[3], stride[3], pad_begin[3], pad_end[3], dilation[3];
    int64_t count_include_pad;
} ortx_pool_params;

static inline ortx_pool_params ortx_pool_params_read(const int64_t *ints) {
    ortx_pool_params p;
    p.channels = ints[0];
    for (int i = 0; i < 3; i++) {
        p.in[i] = ints[1 + i];
        p.out[i] = ints[4 + i];
        p.kernel[i] = ints[7 + i];
        p.stride[i] = ints[10 + i];
        p.pad_begin[i] = ints[13 + i];
        p.pad_end[i] = ints[16 + i];
        p.dilation[i] = ints[19 + i];
    }
    p.count_include_pad = ints[22];
    return p;
}

/* Window taps of output position `o` along one axis: taps j in [*first, *last) land inside the input;
 * *padded counts the taps inside the padded extent [-pad_begin, in + pad_end) (AveragePool's
 * count_include_pad divisor, as onnxruntime counts it). */
static inline void ortx_pool_taps(const ortx_pool_params *p, int axis, int64_t o, int64_t *first, int64_t *last,
                                  int64_t *padded) {
    int64_t start = o * p->stride[axis] - p->pad_begin[axis];
    int64_t dil = p->dilation[axis], k = p->kernel[axis], in = p->in[axis];
    int64_t lo = 0, hi = k, plo = 0, phi = k;
    /* first tap >= 0 and >= -pad_begin; last tap < in and < in + pad_end */
    if (start < 0) lo = (-start + dil - 1) / dil;
    if (start + (k - 1) * dil >= in) hi = start >= in ? 0 : (in - 1 - start) / dil + 1;
    if (start < -p->pad_begin[axis]) plo = (-p->pad_begin[axis] - start + dil - 1) / dil;
    int64_t padded_end = in + p->pad_end[axis];
    if (start + (k - 1) * dil >= padded_end) phi = start >= padded_end ? 0 : (padded_end - 1 - start) / dil + 1;
    if (hi < lo) hi = lo;
    if (phi < plo) phi = plo;
    *first = lo;
    *last = hi;
    *padded = phi - plo;
}

/* The input rows that output row (od, oh)'s windows cover in one channel plane (padded taps left out), as element
 * offsets from the plane's start in (d, h) tap order; *taps = the window's d x h taps counting padding (times the w
 * taps, AveragePool's count_include_pad divisor). Returns the count, at most kernel[0] * kernel[1]. Shared by the
 * fp32 and int8 pools, whose row functions then reduce over w. */
static inline int64_t ortx_pool_window_rows(const ortx_pool_params *p, int64_t od, int64_t oh, int64_t *offsets,
                                            int64_t *taps) {
    int64_t d_first, d_last, d_padded, h_first, h_last, h_padded;
    ortx_pool_taps(p, 0, od, &d_first, &d_last, &d_padded);
    ortx_pool_taps(p, 1, oh, &h_first, &h_last, &h_padded);
    const int64_t d_start = od * p->stride[0] - p->pad_begin[0], h_start = oh * p->stride[1] - p->pad_begin[1];
    int64_t count = 0;
    for (int64_t i = d_first; i < d_last; i++)
        for (int64_t j = h_first; j < h_last; j++)
            offsets[count++] = ((d_start + i * p->dilation[0]) * p->in[1] + (h_start + j * p->dilation[1])) * p->in[2];
    *taps = d_padded * h_padded;
    return count;
}

/* One output row (fixed channel, d and h): out[ow] for ow in [0, out_w), reducing over the `num_rows` input rows
 * in `rows` (already restricted to valid d/h taps) and the w taps. is_max selects max or average; the average
 * divides by valid taps, or by `padded_rows` x padded w taps when count_include_pad. */
typedef void (*ortx_pool_row_fn)(const float *const *rows, int64_t num_rows, int64_t padded_rows, float *out,
                                 const ortx_pool_params *p, int is_max);

void ortx_pool_row_f32_range(const float *const *rows, int64_t num_rows, int64_t padded_rows, float *out,
                             const ortx_pool_params *p, int is_max, int64_t ow_begin, int64_t ow_end);
/* [*begin, *end): output columns whose every w tap lies inside the input row */
void ortx_pool_interior(const ortx_pool_params *p, int64_t *begin, int64_t *end);
void ortx_pool_row_f32_portable(const float *const *rows, int64_t num_rows, int64_t padded_rows, float *out,
                                const ortx_pool_params *p, int is_max);
void ortx_pool_row_f32_avx2(const float *const *rows, int64_t num_rows, int64_t padded_rows, float *out,
                            const ortx_pool_params *p, int is_max);
/* maxpool_nchwc_f32's output row oh of one block on AVX-512 (pool.c): the window's valid input rows reduced
 * into `column_max` (in[2] vectors of 16), then each output's valid w taps from it; -FLT_MAX where no tap. */
#define ORTX_POOL_NCHWC_MAX_WIDTH 256
void ortx_maxpool_nchwc_row_avx512(const float *plane, const ortx_pool_params *p, int64_t oh, float *out,
                                   float *column_max);
/* The same from one block's half of a pair-rows chunk plane (pair_rows.h: 32 bf16 a pixel), widened as loaded. */
void ortx_maxpool_pair_rows_row_avx512(const uint16_t *plane, const ortx_pool_params *p, int64_t oh, float *out,
                                       float *column_max);
/* maxpool_pair_rows_bf16's output row oh of one chunk on AVX-512 (pool.c): 32 channels a vector as 16-bit order keys
 * (ortx_pool_bf16_key), `column_key` in[2] vectors of 32 keys. */
void ortx_maxpool_pair_rows_bf16_row_avx512(const uint16_t *plane, const ortx_pool_params *p, int64_t oh,
                                            uint16_t *out, int16_t *column_key);

/* A bf16 value's order key: the bits as int16 with the magnitude bits flipped when the sign is set, so keys compare
 * as the values do (-0 below +0); NaNs key as -inf (a NaN tap is left out, as maxpool_f32's v > best leaves it).
 * ortx_pool_bf16_value inverts it (the same flip). */
#define ORTX_POOL_BF16_LOWEST ((int16_t)0x807F) /* -inf's key: a window with no value left */
static inline int16_t ortx_pool_bf16_key(uint16_t v) {
    if ((v & 0x7FFFu) > 0x7F80u) return ORTX_POOL_BF16_LOWEST;
    return (int16_t)(v & 0x8000u ? v ^ 0x7FFFu : v);
}

static inline uint16_t ortx_pool_bf16_value(int16_t key) {
    const uint16_t bits = (uint16_t)key;
    return (uint16_t)(bits & 0x8000u ? bits ^ 0x7FFFu : bits);
}

/* `planes` consecutive channel planes (2-D: d extents 1) of a max or average pool with w dilation 1 on AVX-512,
 * when out[2] <= 16 * ORTX_POOL_PLANE_CHUNKS, out[1] <= ORTX_POOL_PLANE_MAX_ROWS, and w stride 1 with kernel[2] <=
 * ORTX_POOL_PLANE_MAX_TAPS or w stride 2 with kernel[2] <= 3 (pool_avx512.c). */
#define ORTX_POOL_PLANE_CHUNKS 16
#define ORTX_POOL_PLANE_MAX_ROWS 256
#define ORTX_POOL_PLANE_MAX_TAPS 16
void ortx_pool_planes_f32_avx512(const float *x, float *y, int64_t planes, const ortx_pool_params *p, int is_max);

/* Max pooling with stride 2 and 2 or 3 w taps on AVX-512; everything else through ortx_pool_row_f32_avx2. */
void ortx_pool_row_f32_avx512(const float *const *rows, int64_t num_rows, int64_t padded_rows, float *out,
                              const ortx_pool_params *p, int is_max);
void ortx_global_pool_f32_avx2(const float *x, float *y, int64_t channels, int64_t spatial, int is_max);

#endif
