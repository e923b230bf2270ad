/* AVX-512 tile of conv_pointwise_nchwc_f32 (conv_pointwise_nchwc.c): up to 6 pixels x 4 output blocks in 24 zmm
 * accumulators, started at the bias; per input channel 4 weight vectors and one broadcast per pixel (an embedded
 * {1to16} operand of the multiply-add). Tile sizes are compile-time constants (always_inline + switch), so every
 * accumulator stays in a register. A group of one output block takes 24 pixels at once (6 accumulators left the
 * multiply-adds waiting on each other: kernel alone, 2 threads, Zen 5, paired in one process, 32 -> 16 at 112x112
 * 0.79x); 12 x 2 and 8 x 3 tiles measured 1-3% slower than runs of 6 there (96 -> 24 at 56x56, 576 -> 96 at 14x14),
 * so fp32 keeps those at 6. Each size is its own function: with every size inlined into one, gcc spilled the long
 * tiles' accumulators to the stack in their inner loop (1.59x the 6-pixel tiles' time).
 *
 * Each input channel prefetches the weights PREFETCH_CHANNELS channels ahead into L1: a group's weights (Cin x 256
 * bytes; 240 KB at Cin = 960) stream from L2, or from L3 on a model's first pass, once per 6-pixel tile, and the
 * hardware prefetchers left the multiply-adds waiting. Kernel-level, 2 threads, Emerald Rapids, paired A/B in one
 * process, weights cold / warm: 960 -> 320 at 7x7 0.84 / 0.84x, 320 -> 1280 at 7x7 0.85 / 0.89x, 576 -> 96 at 14x14
 * 0.95 / 0.91x, 96 -> 96 at 80x80 1.00 / 1.00x; distances 8-32 within 3% of each other, 4 worse; K blocking by 128
 * channels (partial sums in the output, as MLAS does) added nothing on top there, with weights that stay in L2;
 * prefetching the next input block neither. In-process A/B of the prefetch, whole models: MobileNetV2-style 0.98x,
 * PP-OCR rec 0.965x, det 0.99-1.00x, cls 1.005-1.01x, ResNet-18-style 1.00x (2 runs each). Weights that come from
 * L3 or memory (ResNet-50's 1-4 MB) do gain from K blocking: the chunk form below, used for large weights
 * (conv_pointwise_nchwc.c). */
#include "conv_pointwise_nchwc_tile.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

enum { PREFETCH_CHANNELS = 16 };

/* Input channels [c_begin, c_begin + c_count) of a tile (conv.h's ortx_pointwise_nchwc_chunk_fn); the whole tile
 * is the one chunk of all channels. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void chunk_fixed(
    const int P, const int B, int64_t c_begin, int64_t c_count, int64_t x_plane, int64_t x_step, int64_t y_plane,
    int64_t y_step, const float *x, const float *w, const float *bias, const float *residual, float *y, int first,
    int last, int activation, float param0, float param1) {
    __m512 acc[ORTX_POINTWISE_LONG_PIXELS];
    for (int b = 0; b < B; b++) {
        __m512 start = _mm512_loadu_ps(bias + 16 * b);
#pragma GCC unroll 24
        for (int i = 0; i < P; i++)
            acc[i * B + b] = first ? start : _mm512_loadu_ps(y + b * y_plane * 16 + i * y_step);
    }
    const int64_t c_end = c_begin + c_count;
    for (int64_t c0 = c_begin; c0 < c_end; c0 += 16) {
        const float *xb = x + c0 * x_plane;  /* block c0 / 16 at the tile's first pixel */
        const int64_t count = c_end - c0 < 16 ? c_end - c0 : 16;
        const float *wc = w + c0 * 64;
        for (int64_t c = 0; c < count; c++, wc += 64) {
            __m512 wv[4];
            for (int b = 0; b < B; b++) wv[b] = _mm512_loadu_ps(wc + 16 * b);
            for (int b = 0; b < B; b++)
                _mm_prefetch((const char *)(wc + PREFETCH_CHANNELS * 64 + 16 * b), _MM_HINT_T0);
#pragma GCC unroll 24
            for (int i = 0; i < P; i++) {
                __m512 xv = _mm512_set1_ps(xb[i * x_step + c]);
                for (int b = 0; b < B; b++) acc[i * B + b] = _mm512_fmadd_ps(xv, wv[b], acc[i * B + b]);
            }
        }
    }
    if (last) {
        ortx_pointwise_store_tile(P, B, acc, y_plane, y_step, residual, y, activation, param0, param1);
        return;
    }
    for (int b = 0; b < B; b++)
#pragma GCC unroll 24
        for (int i = 0; i < P; i++) _mm512_storeu_ps(y + b * y_plane * 16 + i * y_step, acc[i * B + b]);
}

/* One function per tile size (the file comment) */
#define TILE_FUNCTION(P, B)                                                                                       \
    ORTX_TARGET_AVX512 static __attribute__((noinline)) void tile_##P##_##B(                                      \
        int64_t in_channels, int64_t x_plane, int64_t y_plane, const float *x, const float *w, const float *bias, \
        const float *residual, float *y, int activation, float param0, float param1) {                           \
        chunk_fixed(P, B, 0, in_channels, x_plane, 16, y_plane, 16, x, w, bias, residual, y, 1, 1, activation,    \
                    param0, param1);                                                                              \
    }
ORTX_POINTWISE_SHORT_SIZES(TILE_FUNCTION)
ORTX_POINTWISE_LONG_SIZES(TILE_FUNCTION)
#undef TILE_FUNCTION

#define CHUNK_FUNCTION(P, B)                                                                                     \
    ORTX_TARGET_AVX512 static __attribute__((noinline)) void chunk_##P##_##B(                                    \
        int64_t c_begin, int64_t c_count, int64_t x_plane, int64_t x_step, int64_t y_plane, int64_t y_step,      \
        const float *x, const float *w, const float *bias, const float *residual, float *y, int first, int last, \
        int activation, float param0, float param1) {                                                            \
        chunk_fixed(P, B, c_begin, c_count, x_plane, x_step, y_plane, y_step, x, w, bias, residual, y, first,    \
                    last, activation, param0, param1);                                                           \
    }
ORTX_POINTWISE_SHORT_SIZES(CHUNK_FUNCTION)
#undef CHUNK_FUNCTION

ORTX_TARGET_AVX512 static void tile_avx512(int64_t pixels, int64_t blocks, int64_t in_channels, int64_t x_plane,
                                          int64_t y_plane, const float *x, const void *weights, const float *bias,
                                          const float *residual, float *y, int activation, float param0, float param1,
                                          uint32_t *scratch) {
    (void)scratch;
    const float *w = weights;
#define TILE(P, B) \
    tile_##P##_##B(in_channels, x_plane, y_plane, tile_x, w, bias, tile_residual, tile_y, activation, param0, param1)
    ORTX_POINTWISE_RUN(TILE, 1)
#undef TILE
}

ORTX_TARGET_AVX512 static void chunk_avx512(int64_t pixels, int64_t blocks, int64_t c_begin, int64_t c_count,
                                           int64_t x_plane, int64_t x_step, int64_t y_plane, int64_t y_step,
                                           const float *x, const float *w, const float *bias, const float *residual,
                                           float *y, int first, int last, int activation, float param0,
                                           float param1) {
#define TILE(P, B) chunk_##P##_##B(c_begin, c_count, x_plane, x_step, y_plane, y_step, x, w, bias, residual, y, \
                                   first, last, activation, param0, param1)
    ORTX_POINTWISE_DISPATCH(TILE)
#undef TILE
}

const ortx_pointwise_nchwc_tile_fn ortx_pointwise_nchwc_tile_avx512 = tile_avx512;
const ortx_pointwise_nchwc_chunk_fn ortx_pointwise_nchwc_chunk_avx512 = chunk_avx512;
#else
const ortx_pointwise_nchwc_tile_fn ortx_pointwise_nchwc_tile_avx512 = NULL;
const ortx_pointwise_nchwc_chunk_fn ortx_pointwise_nchwc_chunk_avx512 = NULL;
#endif
