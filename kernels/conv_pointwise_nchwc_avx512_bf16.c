/* AVX512_BF16 tile of conv_pointwise_nchwc_bf16 (conv_pointwise_nchwc.c): the tile's input pixels are first rounded
 * to bf16 channel pairs in the thread's scratch (one vcvtne2ps2bf16 per 32 channels of a pixel, lanes past Cin
 * zeroed: a blocked tensor's pad lanes hold anything), then per pair 4 weight vectors (16 output channels x 2 input
 * channels each) and one broadcast pair word per pixel feed up to 24 vdpbf16ps accumulators, started at the bias.
 * Epilogue as the fp32 tile's. Groups of 1-3 output blocks take 24, 12 or 8 pixels at once (conv.h's
 * ortx_pointwise_tile_pixels), so they too have 24 chains of vdpbf16ps (kernel alone, 2 threads, Zen 5, paired in
 * one process, with the epilogue's constant activations: MobileNetV2's projections 32 -> 16 at 112x112 0.58x, 96 ->
 * 24 at 56x56 0.84x, 192 -> 32 at 28x28 0.85x, 576 -> 96 at 14x14 0.96x); each size its own function, as the fp32
 * tile's. */
#include "conv_pointwise_nchwc_tile.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

/* each pair prefetches the weights PREFETCH_PAIRS pairs ahead into L1, as the fp32 tile does (kernel alone, 2 threads,
 * Zen 5, paired in one process: 576 -> 96 and 64 -> 384 at 14x14 0.96-0.97x, 960 -> 320 at 7x7 0.97x, others
 * 0.99-1.01x) */
enum { PREFETCH_PAIRS = 8 };

ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void tile_fixed(
    const int P, const int B, int64_t in_channels, int64_t x_plane, int64_t y_plane, const float *x,
    const uint16_t *w, const float *bias, const float *residual, float *y, int activation, float param0, float param1,
    uint32_t *scratch) {
    const int64_t words = ortx_pointwise_bf16_pair_words(in_channels), pairs = (in_channels + 1) / 2;
    for (int i = 0; i < P; i++)
        ortx_pointwise_round_pixel_bf16(x + i * 16, x_plane, in_channels, words, scratch + i * words);
    __m512 acc[ORTX_POINTWISE_LONG_PIXELS];
    for (int b = 0; b < B; b++) {
        __m512 start = _mm512_loadu_ps(bias + 16 * b);
#pragma GCC unroll 24
        for (int i = 0; i < P; i++) acc[i * B + b] = start;
    }
    for (int64_t q = 0; q < pairs; q++) {
        __m512bh wv[4];
        for (int b = 0; b < B; b++) wv[b] = (__m512bh)_mm512_loadu_si512(w + (q * 64 + b * 16) * 2);
        for (int b = 0; b < B; b++)
            _mm_prefetch((const char *)(w + ((q + PREFETCH_PAIRS) * 64 + b * 16) * 2), _MM_HINT_T0);
#pragma GCC unroll 24
        for (int i = 0; i < P; i++) {
            __m512bh xv = (__m512bh)_mm512_set1_epi32((int32_t)scratch[i * words + q]);
            for (int b = 0; b < B; b++) acc[i * B + b] = _mm512_dpbf16_ps(acc[i * B + b], xv, wv[b]);
        }
    }
    ortx_pointwise_store_tile(P, B, acc, y_plane, 16, residual, y, activation, param0, param1);
}

/* One function per tile size, as the fp32 tile's (conv_pointwise_nchwc_avx512.c) */
#define TILE_FUNCTION(P, B)                                                                                         \
    ORTX_TARGET_AVX512_BF16 static __attribute__((noinline)) void tile_##P##_##B(                                   \
        int64_t in_channels, int64_t x_plane, int64_t y_plane, const float *x, const uint16_t *w, const float *bias, \
        const float *residual, float *y, int activation, float param0, float param1, uint32_t *scratch) {           \
        tile_fixed(P, B, in_channels, x_plane, y_plane, x, w, bias, residual, y, activation, param0, param1,        \
                   scratch);                                                                                        \
    }
ORTX_POINTWISE_SHORT_SIZES(TILE_FUNCTION)
ORTX_POINTWISE_LONG_SIZES(TILE_FUNCTION)
#undef TILE_FUNCTION

ORTX_TARGET_AVX512_BF16 static void tile_avx512_bf16(int64_t pixels, int64_t blocks, int64_t in_channels,
                                                    int64_t x_plane, int64_t y_plane, const float *x,
                                                    const void *weights, const float *bias, const float *residual,
                                                    float *y, int activation, float param0, float param1,
                                                    uint32_t *scratch) {
    const uint16_t *w = weights;
#define TILE(P, B)                                                                                          \
    tile_##P##_##B(in_channels, x_plane, y_plane, tile_x, w, bias, tile_residual, tile_y, activation, param0, \
                   param1, scratch)
    ORTX_POINTWISE_RUN(TILE, 3)
#undef TILE
}

const ortx_pointwise_nchwc_tile_fn ortx_pointwise_nchwc_tile_avx512_bf16 = tile_avx512_bf16;
#else
const ortx_pointwise_nchwc_tile_fn ortx_pointwise_nchwc_tile_avx512_bf16 = NULL;
#endif
