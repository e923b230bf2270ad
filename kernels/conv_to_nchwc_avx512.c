/* AVX-512 steps of conv2d_to_nchwc_f32 (conv_to_nchwc.c): the tile holds pixels x blocks = 24 accumulators
 * (12 x 2 for a 32-channel stem), per tap `blocks` weight vectors and one broadcast input value per pixel; border
 * pixels up to 4 blocks at a time with the out-of-input taps skipped. The pixel loops are unrolled by pragma: without
 * it gcc 12 kept the 24 accumulators in memory (a load and a store around every multiply-add). Strides 1 and 2
 * are constants in their instances: with the stride a variable, gcc 12 stepped the pixel address by one add per
 * multiply-add, a chain of 24 adds a tap that held the tile to half the multiply-add rate. Both run
 * conv_to_nchwc.c's portable operations (bias, then one multiply-add per tap in order, then the activation) on
 * 16 lanes. */
#include "activation_avx512.h"
#include "conv.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void tile_fixed(
    const int P, const int B, const int SW, const ortx_conv_params *p, const float *x, const int32_t *tap_offsets,
    const int32_t *tap_rows, int64_t taps, const float *w, int64_t ldw, const float *bias, float *y) {
    const int64_t sw = SW ? SW : p->stride_width;
    const int64_t plane = p->out_height * p->out_width;
    __m512 acc[24];
    for (int b = 0; b < B; b++) {
        __m512 start = _mm512_loadu_ps(bias + 16 * b);
#pragma GCC unroll 24
        for (int i = 0; i < P; i++) acc[i * B + b] = start;
    }
    for (int64_t k = 0; k < taps; k++) {
        __m512 wv[4];
        const float *wk = w + (int64_t)tap_rows[k] * ldw;
        for (int b = 0; b < B; b++) wv[b] = _mm512_loadu_ps(wk + 16 * b);
        const float *xk = x + tap_offsets[k];
#pragma GCC unroll 24
        for (int i = 0; i < P; i++) {
            __m512 xv = _mm512_set1_ps(xk[i * sw]);
            for (int b = 0; b < B; b++) acc[i * B + b] = _mm512_fmadd_ps(xv, wv[b], acc[i * B + b]);
        }
    }
    /* the stores with the common activations as constants and the parameters in locals (each store would switch
     * on the activation and reload them: the stores may alias *p) */
    const int activation = (int)p->activation;
    const float p0 = p->param0, p1 = p->param1;
#define STORE_ALL(ACT)                                                                                          \
    for (int b = 0; b < B; b++)                                                                                 \
        _Pragma("GCC unroll 24") for (int i = 0; i < P; i++)                                                    \
            _mm512_storeu_ps(y + (b * plane + i) * 16, ortx_activation_avx512(acc[i * B + b], ACT, p0, p1))
    ORTX_WITH_ACTIVATION_CONSTANT(activation, STORE_ALL)
#undef STORE_ALL
}

ORTX_TARGET_AVX512 static void tile_avx512(const ortx_conv_params *p, int64_t pixels, int64_t blocks, const float *x,
                                          const int32_t *tap_offsets, const int32_t *tap_rows, int64_t taps,
                                          const float *w, int64_t ldw, const float *bias, float *y) {
    (void)pixels;  /* always ortx_to_nchwc_tile_pixels(blocks) */
#define TILE(SW)                                                                                          \
    switch (blocks) {                                                                                     \
        case 4: tile_fixed(6, 4, SW, p, x, tap_offsets, tap_rows, taps, w, ldw, bias, y); break;          \
        case 3: tile_fixed(8, 3, SW, p, x, tap_offsets, tap_rows, taps, w, ldw, bias, y); break;          \
        case 2: tile_fixed(12, 2, SW, p, x, tap_offsets, tap_rows, taps, w, ldw, bias, y); break;         \
        default: tile_fixed(24, 1, SW, p, x, tap_offsets, tap_rows, taps, w, ldw, bias, y);               \
    }
    if (p->stride_width == 1) TILE(1)
    else if (p->stride_width == 2) TILE(2)
    else TILE(0)
#undef TILE
}

/* A border pixel, up to 4 blocks at a time: one accumulator per block is a chain of dependent multiply-adds, and
 * with one block at a time a pixel ran at a quarter of the rate the latency allows. */
ORTX_TARGET_AVX512 static void border_avx512(const ortx_conv_params *p, const float *x, const float *w,
                                            const float *bias, int64_t oy, int64_t ox, float *y) {
    const int64_t blocks = ortx_nchwc_blocks(p->out_channels), ldw = blocks * 16;
    const int64_t plane = p->out_height * p->out_width, H = p->in_height, W = p->in_width;
    for (int64_t b0 = 0; b0 < blocks; b0 += 4) {
        const int64_t group = blocks - b0 < 4 ? blocks - b0 : 4;
        __m512 acc[4];
        for (int64_t b = 0; b < group; b++) acc[b] = _mm512_loadu_ps(bias + 16 * (b0 + b));
        for (int64_t c = 0, k = 0; c < p->in_channels; c++)
            for (int64_t ky = 0; ky < p->kernel_height; ky++)
                for (int64_t kx = 0; kx < p->kernel_width; kx++, k++) {
                    int64_t iy = oy * p->stride_height - p->pad_top + ky * p->dilation_height;
                    int64_t ix = ox * p->stride_width - p->pad_left + kx * p->dilation_width;
                    if (iy >= 0 && iy < H && ix >= 0 && ix < W) {
                        const __m512 xv = _mm512_set1_ps(x[(c * H + iy) * W + ix]);
                        for (int64_t b = 0; b < group; b++)
                            acc[b] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(w + k * ldw + 16 * (b0 + b)), acc[b]);
                    }
                }
        for (int64_t b = 0; b < group; b++)
            _mm512_storeu_ps(y + ((b0 + b) * plane + oy * p->out_width + ox) * 16,
                             ortx_activation_avx512(acc[b], (int)p->activation, p->param0, p->param1));
    }
}

const ortx_to_nchwc_isa ortx_to_nchwc_avx512 = {tile_avx512, border_avx512};
#else
const ortx_to_nchwc_isa ortx_to_nchwc_avx512 = {NULL, NULL};
#endif
