/* AVX-512 row function of the windowed pools: max pooling with stride 2 and 2 or 3 taps along w (ResNet's stem
 * pool: 3x3/2), 16 outputs at a time. The window's rows are reduced first into two 16-column vectors (and one more
 * column for 3 taps), whose even and odd columns, split by two permutes, are the taps of 16 outputs: about 3 lane
 * shuffles per 16 outputs, where the AVX2 row function's per-tap even loads take 2 per tap per 8 outputs (its
 * shuffle port bounded the pool at 2.4x ORT's time in ResNet-18). Everything else goes to the AVX2 row function.
 * Max is exact, so results equal the reference's (taps are visited in another order: only which of two equal
 * zeros is kept could differ, and -0 == +0). */
#include <float.h>

#include "isa.h"
#include "ortx_kernels.h"
#include "pool_internal.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

ORTX_TARGET_AVX512 void ortx_pool_row_f32_avx512(const float *const *rows, int64_t num_rows, int64_t padded_rows,
                                                 float *out, const ortx_pool_params *p, int is_max) {
    const int64_t k = p->kernel[2], pad = p->pad_begin[2];
    int64_t lo, hi;
    ortx_pool_interior(p, &lo, &hi);
    if (!is_max || p->stride[2] != 2 || p->dilation[2] != 1 || (k != 2 && k != 3) || num_rows == 0 ||
        hi - lo < 16) {
        ortx_pool_row_f32_avx2(rows, num_rows, padded_rows, out, p, is_max);
        return;
    }
    ortx_pool_row_f32_range(rows, num_rows, padded_rows, out, p, is_max, 0, lo);
    ortx_pool_row_f32_range(rows, num_rows, padded_rows, out, p, is_max, hi, p->out[2]);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512 lowest = _mm512_set1_ps(-FLT_MAX);
    /* a last partial group runs as the 16 ending at hi (recomputing a few outputs, the same values) */
    for (int64_t next = lo; next < hi; next += 16) {
        const int64_t ow = next + 16 <= hi ? next : hi - 16;
        const int64_t start = 2 * ow - pad;  /* output ow + i takes columns start + 2i (+ 1, + 2) */
        __m512 low = lowest, high = lowest, last = lowest;
        for (int64_t r = 0; r < num_rows; r++) {
            const float *base = rows[r] + start;
            low = _mm512_max_ps(_mm512_loadu_ps(base), low);
            high = _mm512_max_ps(_mm512_loadu_ps(base + 16), high);
            /* column start + 32, the third tap of output ow + 15: inside the row for an interior output */
            if (k == 3) last = _mm512_max_ps(_mm512_maskz_loadu_ps(1, base + 32), last);
        }
        __m512 even_columns = _mm512_permutex2var_ps(low, even, high);
        __m512 result = _mm512_max_ps(_mm512_permutex2var_ps(low, odd, high), even_columns);
        if (k == 3) {
            __m512 shifted = _mm512_castsi512_ps(
                _mm512_alignr_epi32(_mm512_castps_si512(last), _mm512_castps_si512(even_columns), 1));
            result = _mm512_max_ps(shifted, result);
        }
        _mm512_storeu_ps(out + ow, result);
    }
}

/* ortx_pool_plane_f32_avx512 (pool_internal.h): one channel plane of a 2-D pool with w stride 1 and dilation 1,
 * 16 output columns a vector. Each column's valid w taps, its tap masks and its divisor (valid or padded w taps)
 * are set once per plane; per output row, its valid input rows (in order) and per tap a masked load (padding and
 * columns past the row read nothing) added (a masked-off lane adds +0.0, which leaves a sum that started at +0.0
 * unchanged, so the sums are the reference's, tap for tap) or maxed (a masked-off lane keeps its value). A window
 * with no valid tap averages to 0, as the reference's. The rows' taps too are set once (ortx_pool_taps divides).
 * Through the row functions, the narrow maps of Inception's 3x3/1 pools (7 to 28 columns) ran mostly in the
 * scalar edge code: 1024 channels at 7x7, 2 threads, 0.26 ms against ORT's 0.04 as one-node sessions. */
/* Per lane, the window starting at column `start` (ortx_pool_taps: first = max(0, -start), last = min(k, in -
 * start), padded = min(k, in + pad_end - start); no column starts before the padded extent): its valid w taps and
 * those inside the padded extent, AveragePool's divisors. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void window_counts(
    __m512i start, int64_t k, int64_t W, int64_t pad_end, __m512i *valid, __m512i *padded) {
    const __m512i zero = _mm512_setzero_si512(), taps = _mm512_set1_epi32((int)k);
    const __m512i first = _mm512_max_epi32(zero, _mm512_sub_epi32(zero, start));
    const __m512i last = _mm512_min_epi32(taps, _mm512_sub_epi32(_mm512_set1_epi32((int)W), start));
    *valid = _mm512_max_epi32(zero, _mm512_sub_epi32(last, first));
    *padded = _mm512_max_epi32(zero, _mm512_min_epi32(taps, _mm512_sub_epi32(_mm512_set1_epi32((int)(W + pad_end)),
                                                                             start)));
}

/* An average's sum over its divisor (valid or padded taps: count_include_pad); a window with none averages to 0. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) __m512 window_average(
    __m512 sum, const ortx_pool_params *p, __m512i valid, __m512i padded, int64_t rows, int64_t padded_rows) {
    const __m512i count = p->count_include_pad ? _mm512_mullo_epi32(padded, _mm512_set1_epi32((int)padded_rows))
                                               : _mm512_mullo_epi32(valid, _mm512_set1_epi32((int)rows));
    const __mmask16 some = _mm512_cmpgt_epi32_mask(count, _mm512_setzero_si512());
    return _mm512_maskz_div_ps(some, sum, _mm512_cvtepi32_ps(count));
}

/* The planes at w stride S (1 or 2). At stride 2 (1-3 w taps: the 3x3/2 and 2x2/2 pools of SqueezeNet, Inception
 * and ShuffleNet) output columns 16c .. 16c + 15 read input columns s .. s + 32 (s = 32c - pad): per input row, two
 * masked loads (columns outside the row read as 0) and a one-lane third, whose even and odd columns, split by two
 * permutes, are taps 0 and 1 of the 16 outputs, and the even ones shifted by a lane tap 2; each tap is then maxed or
 * added under its mask as at stride 1, row by row and tap by tap, so the sums are the reference's. Through the row
 * functions (the AVX-512 one takes maxima of rows with 16 interior outputs or more), 2 threads, single-node
 * sessions: SqueezeNet's 3x3/2 max pools at 0.09-0.26 ms against ORT's 0.02-0.08. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void pool_planes(
    const float *x, float *y, int64_t planes, const ortx_pool_params *p, const int is_max, const int S) {
    const int64_t W = p->in[2], OW = p->out[2], k = p->kernel[2], pad = p->pad_begin[2];
    const int64_t chunks = (OW + 15) / 16;
    /* per chunk: the tap masks (stride 1: each tap's load; stride 2: each tap's lanes) and stride 2's loads */
    __mmask16 masks[ORTX_POOL_PLANE_CHUNKS][ORTX_POOL_PLANE_MAX_TAPS], loads[ORTX_POOL_PLANE_CHUNKS][3];
    __m512i valid[ORTX_POOL_PLANE_CHUNKS], padded[ORTX_POOL_PLANE_CHUNKS];
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512i zero = _mm512_setzero_si512(), width = _mm512_set1_epi32((int)W);
    for (int64_t c = 0; c < chunks; c++) {
        const __m512i output = _mm512_add_epi32(iota, _mm512_set1_epi32((int)(16 * c)));  /* ow */
        const __m512i start = _mm512_sub_epi32(S == 2 ? _mm512_slli_epi32(output, 1) : output,
                                               _mm512_set1_epi32((int)pad));  /* S ow - pad */
        const __mmask16 live = _mm512_cmplt_epi32_mask(output, _mm512_set1_epi32((int)OW));
        for (int64_t j = 0; j < k; j++) {
            const __m512i column = _mm512_add_epi32(start, _mm512_set1_epi32((int)j));
            masks[c][j] = live & _mm512_cmpge_epi32_mask(column, zero) & _mm512_cmplt_epi32_mask(column, width);
        }
        for (int64_t j = 0; S == 2 && j < 3; j++) {  /* columns s + 16 j + lane (lane 0 only for the third) */
            const __m512i loaded = _mm512_add_epi32(iota, _mm512_set1_epi32((int)(32 * c - pad + 16 * j)));
            loads[c][j] = (j < 2 ? 0xFFFF : 1) & _mm512_cmpge_epi32_mask(loaded, zero) &
                          _mm512_cmplt_epi32_mask(loaded, width);
        }
        window_counts(start, k, W, p->pad_end[2], &valid[c], &padded[c]);
    }
    int64_t row_first[ORTX_POOL_PLANE_MAX_ROWS], row_last[ORTX_POOL_PLANE_MAX_ROWS];
    int64_t row_padded[ORTX_POOL_PLANE_MAX_ROWS];
    for (int64_t oh = 0; oh < p->out[1]; oh++) ortx_pool_taps(p, 1, oh, &row_first[oh], &row_last[oh], &row_padded[oh]);
    const __m512 lowest = _mm512_set1_ps(-FLT_MAX);
    const int64_t in_plane = p->in[1] * W, out_plane = p->out[1] * OW;
    for (int64_t plane = 0; plane < planes; plane++)
    for (int64_t oh = 0; oh < p->out[1]; oh++) {
        const int64_t first = row_first[oh], last = row_last[oh], padded_rows = row_padded[oh];
        const int64_t h0 = oh * p->stride[1] - p->pad_begin[1], rows = last - first;
        float *out = y + plane * out_plane + oh * OW;
        const float *x_plane = x + plane * in_plane;
        for (int64_t c = 0; c < chunks; c++) {
            const float *base = x_plane + 16 * S * c - pad;
            __m512 acc = is_max ? lowest : _mm512_setzero_ps();
            for (int64_t i = first; i < last; i++) {
                const float *row = base + (h0 + i * p->dilation[1]) * W;
                __m512 taps[3];
                if (S == 2) {
                    const __m512 low = _mm512_maskz_loadu_ps(loads[c][0], row);
                    const __m512 high = _mm512_maskz_loadu_ps(loads[c][1], row + 16);
                    taps[0] = _mm512_permutex2var_ps(low, even, high);
                    taps[1] = _mm512_permutex2var_ps(low, odd, high);
                    taps[2] = _mm512_castsi512_ps(_mm512_alignr_epi32(
                        _mm512_castps_si512(_mm512_maskz_loadu_ps(loads[c][2], row + 32)),
                        _mm512_castps_si512(taps[0]), 1));
                }
                for (int64_t j = 0; j < k; j++) {
                    const __m512 v = S == 2 ? taps[j] : _mm512_maskz_loadu_ps(masks[c][j], row + j);
                    acc = is_max ? _mm512_mask_max_ps(acc, masks[c][j], v, acc) : _mm512_add_ps(acc, v);
                }
            }
            const __mmask16 live = (__mmask16)(OW - 16 * c >= 16 ? 0xFFFF : (1u << (OW - 16 * c)) - 1);
            if (!is_max) acc = window_average(acc, p, valid[c], padded[c], rows, padded_rows);
            _mm512_mask_storeu_ps(out + 16 * c, live, acc);
        }
    }
}

ORTX_TARGET_AVX512 void ortx_pool_planes_f32_avx512(const float *x, float *y, int64_t planes, const ortx_pool_params *p,
                                                    int is_max) {
    if (p->stride[2] == 2) {
        if (is_max)
            pool_planes(x, y, planes, p, 1, 2);
        else
            pool_planes(x, y, planes, p, 0, 2);
    } else if (is_max) {
        pool_planes(x, y, planes, p, 1, 1);
    } else {
        pool_planes(x, y, planes, p, 0, 1);
    }
}

/* One 16-channel vector of a blocked pixel, or (PAIR) of a pair-rows pixel's half, widened from bf16. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) __m512 pool_pixel(const void *plane, int64_t pixel,
                                                                                const int PAIR) {
    if (!PAIR) return _mm512_loadu_ps((const float *)plane + pixel * 16);
    __m256i half = _mm256_loadu_si256((const __m256i *)((const uint16_t *)plane + pixel * 32));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

/* ortx_pool_bf16_key on 32 lanes, NaNs aside (a positive NaN keys above +inf, a negative one below -inf's key);
 * also its inverse. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) __m512i pair_key(__m512i v) {
    return _mm512_ternarylogic_epi32(v, _mm512_srai_epi16(v, 15), _mm512_set1_epi16(0x7FFF), 0x78);  /* a ^ (b & c) */
}

/* The w pass of both max pools: output ow is the max of its valid taps' column vectors (64 bytes a column: 16
 * floats, or with KEYS 32 bf16 order keys, stored back as values). */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void window_maxima(const ortx_pool_params *p,
                                                                                 const void *columns, void *out,
                                                                                 __m512i lowest, const int KEYS) {
    for (int64_t ow = 0; ow < p->out[2]; ow++) {
        int64_t w_first, w_last, padded;
        ortx_pool_taps(p, 2, ow, &w_first, &w_last, &padded);
        const int64_t w0 = ow * p->stride[2] - p->pad_begin[2];
        __m512i acc = lowest;
        for (int64_t j = w_first; j < w_last; j++) {
            const __m512i column = _mm512_load_si512((const char *)columns + (w0 + j * p->dilation[2]) * 64);
            acc = KEYS ? _mm512_max_epi16(column, acc)
                       : _mm512_castps_si512(_mm512_max_ps(_mm512_castsi512_ps(column), _mm512_castsi512_ps(acc)));
        }
        _mm512_storeu_si512((char *)out + ow * 64, KEYS ? pair_key(acc) : acc);
    }
}

ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void maxpool_row(
    const void *plane, const ortx_pool_params *p, int64_t oh, float *out, float *column_max, const int PAIR) {
    const int64_t IW = p->in[2], h0 = oh * p->stride[1] - p->pad_begin[1];
    int64_t first, last, padded;
    ortx_pool_taps(p, 1, oh, &first, &last, &padded);
    const __m512 lowest = _mm512_set1_ps(-FLT_MAX);
    for (int64_t iw = 0; iw < IW; iw++) {  /* max(load, acc): a NaN tap leaves acc, as v > best ? v : best does */
        __m512 acc = lowest;
        for (int64_t i = first; i < last; i++)
            acc = _mm512_max_ps(pool_pixel(plane, (h0 + i * p->dilation[1]) * IW + iw, PAIR), acc);
        _mm512_store_ps(column_max + iw * 16, acc);
    }
    window_maxima(p, column_max, out, _mm512_castps_si512(lowest), 0);
}

ORTX_TARGET_AVX512 void ortx_maxpool_nchwc_row_avx512(const float *plane, const ortx_pool_params *p, int64_t oh,
                                                      float *out, float *column_max) {
    maxpool_row(plane, p, oh, out, column_max, 0);
}

ORTX_TARGET_AVX512 void ortx_maxpool_pair_rows_bf16_row_avx512(const uint16_t *plane, const ortx_pool_params *p,
                                                              int64_t oh, uint16_t *out, int16_t *column_key) {
    const int64_t IW = p->in[2], h0 = oh * p->stride[1] - p->pad_begin[1];
    int64_t first, last, padded;
    ortx_pool_taps(p, 1, oh, &first, &last, &padded);
    const __m512i lowest = _mm512_set1_epi16(ORTX_POOL_BF16_LOWEST), infinity = _mm512_set1_epi16(0x7F80);
    const __m512i magnitude = _mm512_set1_epi16(0x7FFF);
    for (int64_t iw = 0; iw < IW; iw++) {
        __m512i acc = lowest;
        for (int64_t i = first; i < last; i++)
            acc = _mm512_max_epi16(pair_key(_mm512_loadu_si512(plane + ((h0 + i * p->dilation[1]) * IW + iw) * 32)),
                                   acc);
        if (_mm512_cmpgt_epi16_mask(acc, infinity)) {  /* a positive NaN won: again, NaNs as the lowest */
            acc = lowest;
            for (int64_t i = first; i < last; i++) {
                __m512i v = _mm512_loadu_si512(plane + ((h0 + i * p->dilation[1]) * IW + iw) * 32);
                __mmask32 nan = _mm512_cmpgt_epi16_mask(_mm512_and_si512(v, magnitude), infinity);
                acc = _mm512_max_epi16(_mm512_mask_mov_epi16(pair_key(v), nan, lowest), acc);
            }
        }
        _mm512_store_si512(column_key + iw * 32, acc);
    }
    window_maxima(p, column_key, out, lowest, 1);
}

ORTX_TARGET_AVX512 void ortx_maxpool_pair_rows_row_avx512(const uint16_t *plane, const ortx_pool_params *p,
                                                          int64_t oh, float *out, float *column_max) {
    maxpool_row(plane, p, oh, out, column_max, 1);
}
#endif
