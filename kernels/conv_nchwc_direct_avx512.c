/* AVX-512 tile of conv2d_nchwc_f32 (conv_nchwc_direct.c): up to 6 output pixels x 4 output blocks in 24 zmm
 * accumulators over a rectangle of taps and a chunk of input channels, the sums held in registers from the first
 * tap to the last (conv.h's ortx_direct_nchwc_taps_fn). Per tap and input channel, as the 1x1 conv's tile: 4 weight
 * vectors and one broadcast per pixel. Calling the 1x1 conv's chunk form once per tap instead stored and reloaded
 * the 24 accumulators at every tap, and its weights (the chunk's channels at one tap) changed at every call. */
#include "conv_pointwise_nchwc_tile.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void taps_fixed(
    const int P, const int B, const ortx_direct_nchwc_tile *t, const float *x, const float *w, const float *residual,
    float *y) {
    __m512 acc[ORTX_POINTWISE_PIXELS][4];
    for (int b = 0; b < B; b++) {
        const __m512 start = _mm512_loadu_ps(t->bias + 16 * b);
        for (int i = 0; i < P; i++)
            acc[i][b] = t->first ? start : _mm512_loadu_ps(y + b * t->y_plane * 16 + i * t->y_step);
    }
    const int64_t c_end = t->c_begin + t->c_count;
    for (int64_t ty = 0; ty < t->taps_y; ty++)
        for (int64_t tx = 0; tx < t->taps_x; tx++) {
            const float *xt = x + ty * t->x_tap_row + tx * t->x_tap_col;
            const float *wt = w + ty * t->w_tap_row + tx * t->w_tap_col;
            for (int64_t c0 = t->c_begin; c0 < c_end; c0 += 16) {
                const float *xb = xt + c0 * t->x_plane;  /* block c0 / 16 at the tile's first pixel */
                const int64_t count = c_end - c0 < 16 ? c_end - c0 : 16;
                const float *wc = wt + (c0 - t->c_begin) * 64;
                for (int64_t c = 0; c < count; c++, wc += 64) {
                    __m512 wv[4];
                    for (int b = 0; b < B; b++) wv[b] = _mm512_loadu_ps(wc + 16 * b);
                    for (int i = 0; i < P; i++) {
                        const __m512 xv = _mm512_set1_ps(xb[i * t->x_step + c]);
                        for (int b = 0; b < B; b++) acc[i][b] = _mm512_fmadd_ps(xv, wv[b], acc[i][b]);
                    }
                }
            }
        }
    for (int b = 0; b < B; b++)
        for (int i = 0; i < P; i++) {
            __m512 v = acc[i][b];
            const int64_t at = b * t->y_plane * 16 + i * t->y_step;
            if (t->last) {
                if (residual) v = _mm512_add_ps(v, _mm512_loadu_ps(residual + at));
                v = ortx_activation_avx512(v, t->activation, t->param0, t->param1);
            }
            _mm512_storeu_ps(y + at, v);
        }
}

ORTX_TARGET_AVX512 static void taps_avx512(const ortx_direct_nchwc_tile *t, int64_t pixels, int64_t blocks,
                                          const float *x, const float *w, const float *residual, float *y) {
#define TILE(P, B) taps_fixed(P, B, t, x, w, residual, y)
    ORTX_POINTWISE_DISPATCH(TILE)
#undef TILE
}

const ortx_direct_nchwc_taps_fn ortx_direct_nchwc_taps_avx512 = taps_avx512;
#else
const ortx_direct_nchwc_taps_fn ortx_direct_nchwc_taps_avx512 = NULL;
#endif
