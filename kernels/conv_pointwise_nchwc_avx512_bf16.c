/* AVX512_BF16 tile of conv_pointwise_nchwc_bf16 (conv_pointwise_nchwc.c): the tile's input pixels are first rounded
 * to bf16 channel pairs in the thread's scratch (one vcvtne2ps2bf16 per 32 channels of a pixel, lanes past Cin
 * zeroed: a blocked tensor's pad lanes hold anything), then per pair 4 weight vectors (16 output channels x 2 input
 * channels each) and one broadcast pair word per pixel feed up to 24 vdpbf16ps accumulators, started at the bias.
 * Epilogue as the fp32 tile's. */
#include "conv_pointwise_nchwc_tile.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void tile_fixed(
    const int P, const int B, int64_t in_channels, int64_t x_plane, int64_t y_plane, const float *x,
    const uint16_t *w, const float *bias, const float *residual, float *y, int activation, float param0, float param1,
    uint32_t *scratch) {
    const int64_t words = ortx_pointwise_bf16_pair_words(in_channels), pairs = (in_channels + 1) / 2;
    for (int i = 0; i < P; i++)
        ortx_pointwise_round_pixel_bf16(x + i * 16, x_plane, in_channels, words, scratch + i * words);
    __m512 acc[ORTX_POINTWISE_PIXELS][4];
    for (int b = 0; b < B; b++) {
        __m512 start = _mm512_loadu_ps(bias + 16 * b);
        for (int i = 0; i < P; i++) acc[i][b] = start;
    }
    for (int64_t q = 0; q < pairs; q++) {
        __m512bh wv[4];
        for (int b = 0; b < B; b++) wv[b] = (__m512bh)_mm512_loadu_si512(w + (q * 64 + b * 16) * 2);
        for (int i = 0; i < P; i++) {
            __m512bh xv = (__m512bh)_mm512_set1_epi32((int32_t)scratch[i * words + q]);
            for (int b = 0; b < B; b++) acc[i][b] = _mm512_dpbf16_ps(acc[i][b], xv, wv[b]);
        }
    }
    ortx_pointwise_store_tile(P, B, acc, y_plane, 16, residual, y, activation, param0, param1);
}

ORTX_TARGET_AVX512_BF16 static void tile_avx512_bf16(int64_t pixels, int64_t blocks, int64_t in_channels,
                                                    int64_t x_plane, int64_t y_plane, const float *x,
                                                    const void *weights, const float *bias, const float *residual,
                                                    float *y, int activation, float param0, float param1,
                                                    uint32_t *scratch) {
    const uint16_t *w = weights;
#define TILE(P, B) \
    tile_fixed(P, B, in_channels, x_plane, y_plane, x, w, bias, residual, y, activation, param0, param1, scratch)
    ORTX_POINTWISE_DISPATCH(TILE)
#undef TILE
}

const ortx_pointwise_nchwc_tile_fn ortx_pointwise_nchwc_tile_avx512_bf16 = tile_avx512_bf16;
#else
const ortx_pointwise_nchwc_tile_fn ortx_pointwise_nchwc_tile_avx512_bf16 = NULL;
#endif
