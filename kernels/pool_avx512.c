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
