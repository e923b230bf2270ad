/* What the AVX-512 tiles of conv_pointwise_nchwc_f32 and _bf16 share (conv_pointwise_nchwc_avx512*.c): the epilogue
 * of a tile's accumulators, and the dispatch from run-time (pixels, blocks) to compile-time tile sizes, so every
 * accumulator stays in a register; and the bf16 paths' rounding of a pixel's input to pair words (the vdpbf16ps
 * tile's and the AMX steps', conv_pointwise_nchwc_amx.c). */
#ifndef ORTX_CONV_POINTWISE_NCHWC_TILE_H
#define ORTX_CONV_POINTWISE_NCHWC_TILE_H

#include "activation_avx512.h"
#include "conv.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

/* One pixel's input channels (x at the pixel in its first block, blocks x_plane pixels apart) rounded to bf16
 * pairs: `words` 32-bit words (whole 32-channel chunks), channels 2q and 2q + 1 in word q, zeros past `in_channels`
 * (0: a row of zeros). Masked loads: a blocked tensor's pad lanes hold anything. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void ortx_pointwise_load_chunk(
    const float *x, int64_t x_plane, int64_t in_channels, int64_t c0, __m512 *lo, __m512 *hi) {
    const int64_t left = in_channels - c0;  /* chunk c0 / 32: lo its first 16 channels, hi the next 16 */
    const __mmask16 low = (__mmask16)(left >= 16 ? 0xFFFF : left <= 0 ? 0 : (1u << left) - 1u);
    const __mmask16 high = (__mmask16)(left >= 32 ? 0xFFFF : left <= 16 ? 0 : (1u << (left - 16)) - 1u);
    *lo = low ? _mm512_maskz_loadu_ps(low, x + c0 / 16 * x_plane * 16) : _mm512_setzero_ps();
    *hi = high ? _mm512_maskz_loadu_ps(high, x + (c0 / 16 + 1) * x_plane * 16) : _mm512_setzero_ps();
}

ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void ortx_pointwise_round_pixel_bf16(
    const float *x, int64_t x_plane, int64_t in_channels, int64_t words, uint32_t *dst) {
    for (int64_t c0 = 0; c0 < 2 * words; c0 += 32) {
        __m512 lo, hi;
        ortx_pointwise_load_chunk(x, x_plane, in_channels, c0, &lo, &hi);
        _mm512_storeu_si512(dst + c0 / 2, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

/* The same pixel split in two (bf16x3, conv_pointwise_nchwc_amx.c): `hi` its rounded pairs as above, `lo` the
 * rounding's remainders x - hi rounded too, so hi + lo holds each value to about 16 significant bits. */
ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void ortx_pointwise_split_pixel_bf16(
    const float *x, int64_t x_plane, int64_t in_channels, int64_t words, uint32_t *hi, uint32_t *lo) {
    for (int64_t c0 = 0; c0 < 2 * words; c0 += 32) {
        __m512 a, b;
        ortx_pointwise_load_chunk(x, x_plane, in_channels, c0, &a, &b);
        const __m512i words_hi = (__m512i)_mm512_cvtne2ps_pbh(b, a);
        /* the rounded values widened back: the vector's first 16 elements are a's, the next 16 b's */
        const __m512i a_words = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(words_hi));
        const __m512i b_words = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(words_hi, 1));
        const __m512 a_hi = _mm512_castsi512_ps(_mm512_slli_epi32(a_words, 16));
        const __m512 b_hi = _mm512_castsi512_ps(_mm512_slli_epi32(b_words, 16));
        _mm512_storeu_si512(hi + c0 / 2, words_hi);
        _mm512_storeu_si512(lo + c0 / 2,
                            (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(b, b_hi), _mm512_sub_ps(a, a_hi)));
    }
}

/* bf16x3 from at most 16 channels, packed: the pixel's rounded values in words 0-7 and their remainders in 8-15, one
 * 32-channel chunk (the weights packed to match: rows [W; W] and [W_lo; 0]). */
ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void ortx_pointwise_split_packed_bf16(
    const float *x, int64_t in_channels, uint32_t *dst) {
    const __mmask16 keep = (__mmask16)(in_channels >= 16 ? 0xFFFF : in_channels <= 0 ? 0 : (1u << in_channels) - 1u);
    const __m512 a = _mm512_maskz_loadu_ps(keep, x);
    const __m512 a_hi = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(a)), 16));
    _mm512_storeu_si512(dst, (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(a, a_hi), a));
}

/* Pixel i of output block b: acc[i * B + b] (+ the residual) through the activation, stored at y + b * y_plane * 16 + i
 * * y_step; the common activations as compile-time constants (ORTX_WITH_ACTIVATION_CONSTANT), not a switch a vector
 * (bf16 tile, session 44: 16 -> 96 expand + depthwise at 112x112 0.85x, 24 -> 144 at 56x56 0.91x). */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void ortx_pointwise_store_tile_as(
    const int P, const int B, __m512 acc[ORTX_POINTWISE_LONG_PIXELS], int64_t y_plane, int64_t y_step,
    const float *residual, float *y, int activation, float param0, float param1) {
    for (int b = 0; b < B; b++)
#pragma GCC unroll 24
        for (int i = 0; i < P; i++) {
            __m512 v = acc[i * B + b];
            const int64_t at = b * y_plane * 16 + i * y_step;
            if (residual) v = _mm512_add_ps(v, _mm512_loadu_ps(residual + at));
            _mm512_storeu_ps(y + at, ortx_activation_avx512(v, activation, param0, param1));
        }
}

ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void ortx_pointwise_store_tile(
    const int P, const int B, __m512 acc[ORTX_POINTWISE_LONG_PIXELS], int64_t y_plane, int64_t y_step,
    const float *residual, float *y, int activation, float param0, float param1) {
#define ORTX_POINTWISE_STORE_AS(ACT) \
    ortx_pointwise_store_tile_as(P, B, acc, y_plane, y_step, residual, y, ACT, param0, param1)
    ORTX_WITH_ACTIVATION_CONSTANT(activation, ORTX_POINTWISE_STORE_AS)
#undef ORTX_POINTWISE_STORE_AS
}
#endif

/* Runs TILE(P, B) for the run-time `pixels` (1..6) and `blocks` (1..4); TILE is the including file's macro calling
 * its always-inline tile with compile-time sizes. */
#define ORTX_POINTWISE_BLOCKS(TILE, P)                                                                           \
    switch (blocks) {                                                                                            \
        case 4: TILE(P, 4); break;                                                                               \
        case 3: TILE(P, 3); break;                                                                               \
        case 2: TILE(P, 2); break;                                                                               \
        default: TILE(P, 1);                                                                                     \
    }
#define ORTX_POINTWISE_DISPATCH(TILE)                                                                            \
    switch (pixels) {                                                                                            \
        case 6: ORTX_POINTWISE_BLOCKS(TILE, 6) break;                                                            \
        case 5: ORTX_POINTWISE_BLOCKS(TILE, 5) break;                                                            \
        case 4: ORTX_POINTWISE_BLOCKS(TILE, 4) break;                                                            \
        case 3: ORTX_POINTWISE_BLOCKS(TILE, 3) break;                                                            \
        case 2: ORTX_POINTWISE_BLOCKS(TILE, 2) break;                                                            \
        default: ORTX_POINTWISE_BLOCKS(TILE, 1)                                                                  \
    }

/* Every tile size a call may take, X(P, B): up to 6 pixels x 1-4 blocks, and the long tiles. */
#define ORTX_POINTWISE_SHORT_SIZES(X)                                                                            \
    X(1, 1) X(1, 2) X(1, 3) X(1, 4) X(2, 1) X(2, 2) X(2, 3) X(2, 4) X(3, 1) X(3, 2) X(3, 3) X(3, 4) X(4, 1) X(4, 2)  \
    X(4, 3) X(4, 4) X(5, 1) X(5, 2) X(5, 3) X(5, 4) X(6, 1) X(6, 2) X(6, 3) X(6, 4)
#define ORTX_POINTWISE_LONG_SIZES(X) X(24, 1) X(12, 2) X(8, 3)

/* A tile call's `pixels` (up to ortx_pointwise_tile_pixels(blocks)) with compile-time sizes: the long tile TILE(24,
 * 1), TILE(12, 2) or TILE(8, 3) where the count is the whole of one and blocks <= LONG_BLOCKS, else TILE(P, B) over
 * runs of at most 6 pixels; TILE reads the run's x, y and residual at tile_x, tile_y and tile_residual. */
#define ORTX_POINTWISE_RUN(TILE, LONG_BLOCKS)                                                                    \
    if (blocks <= (LONG_BLOCKS) && pixels == ortx_pointwise_tile_pixels(blocks)) {                               \
        const float *tile_x = x, *tile_residual = residual;                                                      \
        float *tile_y = y;                                                                                       \
        if (blocks == 1) TILE(24, 1);                                                                            \
        else if (blocks == 2) TILE(12, 2);                                                                       \
        else TILE(8, 3);                                                                                         \
    } else {                                                                                                     \
        const int64_t all_pixels = pixels;                                                                       \
        for (int64_t tile_i = 0; tile_i < all_pixels; tile_i += ORTX_POINTWISE_PIXELS) {                         \
            const float *tile_x = x + tile_i * 16, *tile_residual = residual ? residual + tile_i * 16 : NULL;    \
            float *tile_y = y + tile_i * 16;                                                                     \
            const int64_t pixels = all_pixels - tile_i < ORTX_POINTWISE_PIXELS ? all_pixels - tile_i             \
                                                                               : ORTX_POINTWISE_PIXELS;          \
            ORTX_POINTWISE_DISPATCH(TILE)                                                                        \
        }                                                                                                        \
    }

#endif
