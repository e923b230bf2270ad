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
#include "pair_rows.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

/* each pair prefetches the weights PREFETCH_PAIRS pairs ahead into L1, as the fp32 tile does (kernel alone, 2 threads,
 * Zen 5, paired in one process: 576 -> 96 and 64 -> 384 at 14x14 0.96-0.97x, 960 -> 320 at 7x7 0.97x, others
 * 0.99-1.01x) */
enum { PREFETCH_PAIRS = 8 };

/* One channel pair q of a tile: its weight vectors (and a prefetch PREFETCH_PAIRS pairs ahead), pixel i's pair word
 * at at[i * stride], into the P x B sums. */
ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void pair_step(
    const int P, const int B, const uint16_t *w, int64_t q, const uint32_t *at, int64_t stride, __m512 *acc) {
    __m512bh wv[4];
    for (int b = 0; b < B; b++) wv[b] = (__m512bh)_mm512_loadu_si512(w + (q * 64 + b * 16) * 2);
    for (int b = 0; b < B; b++)
        _mm_prefetch((const char *)(w + ((q + PREFETCH_PAIRS) * 64 + b * 16) * 2), _MM_HINT_T0);
#pragma GCC unroll 24
    for (int i = 0; i < P; i++) {
        __m512bh xv = (__m512bh)_mm512_set1_epi32((int32_t)at[i * stride]);
        for (int b = 0; b < B; b++) acc[i * B + b] = _mm512_dpbf16_ps(acc[i * B + b], xv, wv[b]);
    }
}

/* The tile (IN_ROWS and OUT_ROWS 0: conv_pointwise_nchwc_bf16's) and conv_pointwise_pair_rows_bf16's (conv.h's
 * ortx_pointwise_rows_tile_fn). With X in pair rows the pair words are the rows themselves, pixel i's word q at
 * ((q / 16) * x_plane + i) * 16 words (no rounding: a pair-rows writer rounded them as the blocked form's scratch
 * would hold them); with Y in pair rows the epilogue rounds a chunk's two blocks of a pixel at once
 * (vcvtne2ps2bf16: the low block's 16 values, then the high block's, the chunk's channel order), lanes past
 * out_lanes zero (an activation of a zero sum need not be zero; out_lanes is read with OUT_ROWS only). The sums
 * are the same in every form, so a 1x1 conv that reads pair rows computes the bits it would from fp32. */
ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void rows_fixed(
    const int P, const int B, const int IN_ROWS, const int OUT_ROWS, int64_t in_channels, int64_t x_plane,
    int64_t y_plane, const void *x, const uint16_t *w, const float *bias, const float *residual, void *y,
    int64_t out_lanes, int activation, float param0, float param1, uint32_t *scratch) {
    const int64_t words = ortx_pointwise_bf16_pair_words(in_channels), pairs = (in_channels + 1) / 2;
    if (!IN_ROWS)
        for (int i = 0; i < P; i++)
            ortx_pointwise_round_pixel_bf16((const float *)x + i * 16, x_plane, in_channels, words,
                                            scratch + i * words);
    __m512 acc[ORTX_POINTWISE_LONG_PIXELS];
    for (int b = 0; b < B; b++) {
        __m512 start = _mm512_loadu_ps(bias + 16 * b);
#pragma GCC unroll 24
        for (int i = 0; i < P; i++) acc[i * B + b] = start;
    }
    if (IN_ROWS) {
        for (int64_t q0 = 0; q0 < pairs; q0 += 16) {  /* pixel i's words q0 .. q0 + 15 at at[i * 16 + j] */
            const uint32_t *at = (const uint32_t *)x + q0 / 16 * x_plane * 16;
            for (int64_t j = 0; j < 16 && q0 + j < pairs; j++) pair_step(P, B, w, q0 + j, at + j, 16, acc);
        }
    } else {
        for (int64_t q = 0; q < pairs; q++) pair_step(P, B, w, q, scratch + q, words, acc);
    }
    if (!OUT_ROWS) {
        ortx_pointwise_store_tile(P, B, acc, y_plane, 16, residual, (float *)y, activation, param0, param1);
        return;
    }
    uint16_t *rows = y;
    for (int b = 0; b < B; b += 2) {
        const int64_t lo_lanes = out_lanes - 16 * b, hi_lanes = lo_lanes - 16;
        const __mmask16 keep_lo = (__mmask16)(lo_lanes >= 16 ? 0xFFFF : lo_lanes <= 0 ? 0 : (1u << lo_lanes) - 1u);
        const __mmask16 keep_hi = (__mmask16)(b + 1 >= B || hi_lanes <= 0 ? 0 : hi_lanes >= 16 ? 0xFFFF
                                                                                    : (1u << hi_lanes) - 1u);
#pragma GCC unroll 24
        for (int i = 0; i < P; i++) {
            __m512 lo = acc[i * B + b], hi = b + 1 < B ? acc[i * B + b + 1] : _mm512_setzero_ps();
            if (residual) {
                lo = _mm512_add_ps(lo, _mm512_loadu_ps(residual + (b * y_plane + i) * 16));
                if (b + 1 < B) hi = _mm512_add_ps(hi, _mm512_loadu_ps(residual + ((b + 1) * y_plane + i) * 16));
            }
            lo = _mm512_maskz_mov_ps(keep_lo, ortx_activation_avx512(lo, activation, param0, param1));
            hi = _mm512_maskz_mov_ps(keep_hi, ortx_activation_avx512(hi, activation, param0, param1));
            _mm512_storeu_si512(rows + (b / 2 * y_plane + i) * ORTX_PAIR_ROWS_CHUNK,
                                (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    }
}

/* One function per tile size, as the fp32 tile's (conv_pointwise_nchwc_avx512.c) */
#define TILE_FUNCTION(P, B)                                                                                         \
    ORTX_TARGET_AVX512_BF16 static __attribute__((noinline)) void tile_##P##_##B(                                   \
        int64_t in_channels, int64_t x_plane, int64_t y_plane, const float *x, const uint16_t *w, const float *bias, \
        const float *residual, float *y, int activation, float param0, float param1, uint32_t *scratch) {           \
        rows_fixed(P, B, 0, 0, in_channels, x_plane, y_plane, x, w, bias, residual, y, 0, activation, param0,       \
                   param1, scratch);                                                                                \
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

/* One function per tile size and pair-rows form, and per common activation inside it (ORTX_WITH_ACTIVATION_CONSTANT
 * at the function's top; with the switch in the epilogue alone the expands from 16-24 channels ran 3-4% slower in
 * one kernel A/B); the enum gives ROWS_AS the function's sizes as constants */
#define ROWS_AS(ACT)                                                                                                \
    rows_fixed(ROWS_P, ROWS_B, ROWS_IN, ROWS_OUT, in_channels, x_plane, y_plane, x, w, bias, residual, y,           \
               out_lanes, ACT, param0, param1, scratch)
#define ROWS_FUNCTION(P, B, IN_ROWS, OUT_ROWS)                                                                      \
    ORTX_TARGET_AVX512_BF16 static __attribute__((noinline)) void rows_##P##_##B##_##IN_ROWS##OUT_ROWS(            \
        int64_t in_channels, int64_t x_plane, int64_t y_plane, const void *x, const uint16_t *w, const float *bias, \
        const float *residual, void *y, int64_t out_lanes, int activation, float param0, float param1,              \
        uint32_t *scratch) {                                                                                        \
        enum { ROWS_P = P, ROWS_B = B, ROWS_IN = IN_ROWS, ROWS_OUT = OUT_ROWS };                                    \
        ORTX_WITH_ACTIVATION_CONSTANT(activation, ROWS_AS)                                                          \
    }
#define ROWS_FORMS(P, B) ROWS_FUNCTION(P, B, 1, 0) ROWS_FUNCTION(P, B, 0, 1) ROWS_FUNCTION(P, B, 1, 1)
ORTX_POINTWISE_SHORT_SIZES(ROWS_FORMS)
ORTX_POINTWISE_LONG_SIZES(ROWS_FORMS)
#undef ROWS_FORMS
#undef ROWS_FUNCTION
#undef ROWS_AS

ORTX_TARGET_AVX512_BF16 static void rows_tile_avx512_bf16(int64_t pixels, int64_t blocks, int64_t in_channels,
                                                         int64_t x_plane, int64_t y_plane, const void *x_in,
                                                         int in_rows, const void *weights, const float *bias,
                                                         const float *residual, void *y_out, int out_rows,
                                                         int64_t out_lanes, int activation, float param0,
                                                         float param1, uint32_t *scratch) {
    const uint16_t *w = weights;
    const int form = 2 * !!in_rows + !!out_rows;  /* 2: X in pair rows, 1: Y, 3: both */
    /* a pixel is 64 bytes in either layout (16 floats, 32 bf16), so ORTX_POINTWISE_RUN's runs step both alike */
    const float *x = x_in;
    float *y = y_out;
#define ROWS_TILE(P, B)                                                                                         \
    do switch (form) {                                                                                          \
        case 2: rows_##P##_##B##_10(in_channels, x_plane, y_plane, tile_x, w, bias, tile_residual, tile_y,      \
                                    out_lanes, activation, param0, param1, scratch); break;                    \
        case 1: rows_##P##_##B##_01(in_channels, x_plane, y_plane, tile_x, w, bias, tile_residual, tile_y,      \
                                    out_lanes, activation, param0, param1, scratch); break;                    \
        default: rows_##P##_##B##_11(in_channels, x_plane, y_plane, tile_x, w, bias, tile_residual, tile_y,     \
                                     out_lanes, activation, param0, param1, scratch);                          \
    } while (0)
    ORTX_POINTWISE_RUN(ROWS_TILE, 3)
#undef ROWS_TILE
}

const ortx_pointwise_rows_tile_fn ortx_pointwise_rows_tile_avx512_bf16 = rows_tile_avx512_bf16;
#else
const ortx_pointwise_nchwc_tile_fn ortx_pointwise_nchwc_tile_avx512_bf16 = NULL;
const ortx_pointwise_rows_tile_fn ortx_pointwise_rows_tile_avx512_bf16 = NULL;
#endif
