/* AVX512_BF16 steps of conv2d_nchwc_bf16 (conv_nchwc_bf16.c): rounding blocked pixels to bf16 (vcvtneps2bf16),
 * and the tile: up to 6 output pixels x 4 output blocks in 24 zmm sums over a chunk's taps and channel pairs, per
 * tap and pair 4 weight vectors and one broadcast pair word per pixel into vdpbf16ps (the 1x1 bf16 conv's tile,
 * conv_pointwise_nchwc_avx512_bf16.c, over taps, reading a padded image instead of its scratch). */
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

ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void tile_fixed(
    const int P, const int B, const ortx_nchwc_bf16_tile *t, const uint16_t *const *x, const uint16_t *w,
    const float *residual, float *y) {
    __m512 acc[ORTX_POINTWISE_PIXELS][4];
    for (int b = 0; b < B; b++) {
        const __m512 start = _mm512_loadu_ps(t->bias + 16 * b);
        for (int i = 0; i < P; i++) acc[i][b] = t->first ? start : _mm512_loadu_ps(y + b * t->y_plane + i * 16);
    }
    const uint16_t *xi[ORTX_POINTWISE_PIXELS];
    for (int i = 0; i < P; i++) xi[i] = x[i];
    for (int64_t k = 0; k < t->taps; k++) {
        const int64_t tap = t->tap_offsets[k];
        const uint16_t *wt = w + k * t->w_tap;
        for (int64_t block = 0; block < t->block_count; block++, wt += 8 * 128) {
            const int64_t at = tap + block * t->x_plane;
            for (int q = 0; q < 8; q++) {
                __m512bh wv[4];
                for (int b = 0; b < B; b++) wv[b] = (__m512bh)_mm512_loadu_si512(wt + q * 128 + b * 32);
                for (int i = 0; i < P; i++) {
                    int32_t word;
                    __builtin_memcpy(&word, xi[i] + at + 2 * q, sizeof word);
                    const __m512bh xv = (__m512bh)_mm512_set1_epi32(word);
                    for (int b = 0; b < B; b++) acc[i][b] = _mm512_dpbf16_ps(acc[i][b], xv, wv[b]);
                }
            }
        }
    }
    for (int b = 0; b < B; b++)
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

ORTX_TARGET_AVX512_BF16 static void tile_avx512_bf16(const ortx_nchwc_bf16_tile *t, int64_t pixels,
                                                    const uint16_t *const *x, const uint16_t *w,
                                                    const float *residual, float *y) {
    const int64_t blocks = t->blocks;
#define TILE(P, B) tile_fixed(P, B, t, x, w, residual, y)
    ORTX_POINTWISE_DISPATCH(TILE)
#undef TILE
}

const ortx_nchwc_bf16_isa ortx_nchwc_bf16_avx512 = {round_pixels, tile_avx512_bf16};
#else
const ortx_nchwc_bf16_isa ortx_nchwc_bf16_avx512 = {NULL, NULL};
#endif
