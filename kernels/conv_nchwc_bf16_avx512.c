/* AVX512_BF16 steps of conv2d_nchwc_bf16 (conv_nchwc_bf16.c): rounding blocked pixels to bf16 (vcvtneps2bf16), a
 * stem's x-unfolded pair rows (vcvtne2ps2bf16), and the tile: up to 6 output pixels x 4 output blocks in 24 zmm sums
 * over a chunk's taps and channel pairs, per tap and pair 4 weight vectors and one broadcast pair word per pixel into
 * vdpbf16ps (the 1x1 bf16 conv's tile, conv_pointwise_nchwc_avx512_bf16.c, over taps, reading a padded image instead
 * of its scratch). */
#include "conv_pointwise_nchwc_tile.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

ORTX_TARGET_AVX512_BF16 static void round_pixels(const float *src, int64_t count, int64_t lanes, uint16_t *dst) {
    const __mmask16 keep = (__mmask16)(lanes >= 16 ? 0xffff : (1u << lanes) - 1u);
    for (int64_t i = 0; i < count; i++) {
        const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(keep, src + i * 16));
        _mm256_storeu_si256((__m256i *)(dst + i * 16), (__m256i)v);
    }
}

/* 16 values src[ox * stride + offset] for ox in [ox0, ox0 + 16), 0 outside [0, width) (stride 1 and 2: masked
 * loads, a permute for 2; others a gather). */
ORTX_TARGET_AVX512_BF16 static inline __m512 column_values(const float *src, int64_t offset, int64_t stride,
                                                           int64_t width, int64_t ox0) {
    if (src == NULL) return _mm512_setzero_ps();
    const int64_t start = ox0 * stride + offset;
    if (stride == 1 || stride == 2) {
        __m512 half[2];
        for (int h = 0; h < (int)stride; h++) {
            const int64_t first = start + 16 * h;  /* lanes first .. first + 15 */
            const int64_t lo = first < 0 ? -first : 0, hi = width - first;
            __mmask16 keep = 0;
            if (hi > lo && lo < 16) keep = (__mmask16)(((hi >= 16 ? 0xffffu : (1u << hi) - 1u) >> lo) << lo);
            half[h] = _mm512_maskz_loadu_ps(keep, src + first);  /* masked lanes are not read */
        }
        if (stride == 1) return half[0];
        const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        return _mm512_permutex2var_ps(half[0], even, half[1]);
    }
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i index = _mm512_add_epi32(_mm512_set1_epi32((int32_t)start),
                                           _mm512_mullo_epi32(lane, _mm512_set1_epi32((int32_t)stride)));
    const __mmask16 keep = _mm512_cmpge_epi32_mask(index, _mm512_setzero_si512())
                           & _mm512_cmplt_epi32_mask(index, _mm512_set1_epi32((int32_t)width));
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), keep, index, src, 4);
}

ORTX_TARGET_AVX512_BF16 static void unfold_pair(const float *const *src, const int64_t *offset, int64_t stride,
                                                int64_t width, int64_t out_width, uint16_t *dst) {
    /* words: value 0's bf16 in the low half, value 1's in the high (vcvtne2ps2bf16 puts its second operand's
     * values first; the permute interleaves the halves) */
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                                22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int64_t ox = 0; ox < out_width; ox += 16) {
        const __m512 a = column_values(src[0], offset[0], stride, width, ox);
        const __m512 b = column_values(src[1], offset[1], stride, width, ox);
        const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(b, a);  /* a's 16 values, then b's */
        const __m512i words = _mm512_permutexvar_epi16(interleave, both);
        const int64_t count = out_width - ox < 16 ? out_width - ox : 16;
        _mm512_mask_storeu_epi32(dst + 2 * ox, (__mmask16)(count >= 16 ? 0xffffu : (1u << count) - 1u), words);
    }
}

/* STEP 0: pixel i reads at x[i]; else (a long tile along one output row) at x[0] + i * STEP values, so its
 * addresses are one register plus constants (24 pointers would not fit the general registers). */
ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void tile_fixed(
    const int P, const int B, const int STEP, const ortx_nchwc_bf16_tile *t, const uint16_t *const *x,
    const uint16_t *w, const float *residual, float *y) {
    __m512 acc[ORTX_NCHWC_BF16_SUMS][4];
    for (int b = 0; b < B; b++) {
        const __m512 start = _mm512_loadu_ps(t->bias + 16 * b);
#pragma GCC unroll 24
        for (int i = 0; i < P; i++) acc[i][b] = t->first ? start : _mm512_loadu_ps(y + b * t->y_plane + i * 16);
    }
    const uint16_t *xi[ORTX_NCHWC_BF16_SUMS];
#pragma GCC unroll 24
    for (int i = 0; i < P; i++) xi[i] = STEP ? x[0] + i * STEP : x[i];
    for (int64_t k = 0; k < t->taps; k++) {
        const int64_t tap = t->tap_offsets[k];
        const uint16_t *wt = w + k * t->w_tap;
        for (int64_t block = 0; block < t->block_count; block++, wt += t->pairs * 128) {
            const int64_t at = tap + block * t->x_plane;
            for (int64_t q = 0; q < t->pairs; q++) {
                __m512bh wv[4];
                for (int b = 0; b < B; b++) wv[b] = (__m512bh)_mm512_loadu_si512(wt + q * 128 + b * 32);
#pragma GCC unroll 24
                for (int i = 0; i < P; i++) {
                    int32_t word;
                    __builtin_memcpy(&word, xi[i] + at + q * t->pair_stride, sizeof word);
                    const __m512bh xv = (__m512bh)_mm512_set1_epi32(word);
                    for (int b = 0; b < B; b++) acc[i][b] = _mm512_dpbf16_ps(acc[i][b], xv, wv[b]);
                }
            }
        }
    }
    for (int b = 0; b < B; b++)
#pragma GCC unroll 24
        for (int i = 0; i < P; i++) {
            __m512 v = acc[i][b];
            const int64_t at = b * t->y_plane + i * 16;
            if (t->last) {
                if (residual) v = _mm512_add_ps(v, _mm512_loadu_ps(residual + at));
                v = ortx_activation_avx512(v, t->activation, t->param0, t->param1);
            }
            _mm512_storeu_ps(y + at, v);
        }
}

/* One function per tile size and step: with all of them inlined into the dispatch gcc kept the 24 x 1 tiles'
 * accumulators on the stack in their inner loop (a load and a store around every vdpbf16ps). Kernel alone, 2
 * threads, Zen 5, paired in one process: 32 -> 16 3x3 at 56x56 0.69x, 24 -> 16 3x3 stride 2 at 80x80 0.84x; 2-4
 * blocks alike (0.99-1.01x). */
#define SHORT_TILE(P, B)                                                                                     \
    ORTX_TARGET_AVX512_BF16 static __attribute__((noinline)) void tile_##P##_##B(                            \
        const ortx_nchwc_bf16_tile *t, const uint16_t *const *x, const uint16_t *w, const float *residual,    \
        float *y) {                                                                                          \
        tile_fixed(P, B, 0, t, x, w, residual, y);                                                           \
    }
#define LONG_TILE(P, B, STEP)                                                                                \
    ORTX_TARGET_AVX512_BF16 static __attribute__((noinline)) void tile_##P##_##B##_##STEP(                   \
        const ortx_nchwc_bf16_tile *t, const uint16_t *const *x, const uint16_t *w, const float *residual,    \
        float *y) {                                                                                          \
        tile_fixed(P, B, STEP, t, x, w, residual, y);                                                        \
    }
#define LONG_TILES(P, B) LONG_TILE(P, B, 2) LONG_TILE(P, B, 16) LONG_TILE(P, B, 32)
ORTX_POINTWISE_SHORT_SIZES(SHORT_TILE)
ORTX_POINTWISE_LONG_SIZES(LONG_TILES)
#undef SHORT_TILE
#undef LONG_TILE
#undef LONG_TILES

ORTX_TARGET_AVX512_BF16 static void tile_avx512_bf16(const ortx_nchwc_bf16_tile *t, int64_t pixels,
                                                    const uint16_t *const *x, const uint16_t *w,
                                                    const float *residual, float *y) {
    const int64_t blocks = t->blocks;
    if (pixels == ortx_nchwc_bf16_tile_pixels(blocks) && blocks < 4) {  /* the long tiles of 1-3 blocks */
#define LONG(STEP)                                                            \
    if (blocks == 1) tile_24_1_##STEP(t, x, w, residual, y);                  \
    else if (blocks == 2) tile_12_2_##STEP(t, x, w, residual, y);             \
    else tile_8_3_##STEP(t, x, w, residual, y);
        if (t->pixel_step == 2) {
            LONG(2)
        } else if (t->pixel_step == 16) {
            LONG(16)
        } else {
            LONG(32)
        }
#undef LONG
        return;
    }
#define TILE(P, B) tile_##P##_##B(t, x, w, residual, y)
    ORTX_POINTWISE_DISPATCH(TILE)
#undef TILE
}

const ortx_nchwc_bf16_isa ortx_nchwc_bf16_avx512 = {round_pixels, unfold_pair, tile_avx512_bf16};
#else
const ortx_nchwc_bf16_isa ortx_nchwc_bf16_avx512 = {NULL, NULL, NULL};
#endif
