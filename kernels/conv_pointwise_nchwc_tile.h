/* What the AVX-512 tiles of conv_pointwise_nchwc_f32 and _bf16 share (conv_pointwise_nchwc_avx512*.c): the epilogue
 * of a tile's accumulators, and the dispatch from run-time (pixels, blocks) to compile-time tile sizes, so every
 * accumulator stays in a register. */
#ifndef ORTX_CONV_POINTWISE_NCHWC_TILE_H
#define ORTX_CONV_POINTWISE_NCHWC_TILE_H

#include "activation_avx512.h"
#include "conv.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

/* Pixel i of output block b: acc[i][b] (+ the residual) through the activation, stored at y + (b * y_plane + i) *
 * 16. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void ortx_pointwise_store_tile(
    const int P, const int B, __m512 acc[ORTX_POINTWISE_PIXELS][4], int64_t y_plane, const float *residual, float *y,
    int activation, float param0, float param1) {
    for (int b = 0; b < B; b++)
        for (int i = 0; i < P; i++) {
            __m512 v = acc[i][b];
            const int64_t at = (b * y_plane + i) * 16;
            if (residual) v = _mm512_add_ps(v, _mm512_loadu_ps(residual + at));
            _mm512_storeu_ps(y + at, ortx_activation_avx512(v, activation, param0, param1));
        }
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

#endif
