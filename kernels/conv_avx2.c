/* AVX2 depthwise conv: one output channel plane from the zero-padded column phases of conv.h. Each output row
 * is computed 32 columns at a time (4 accumulators, so every broadcast weight feeds 4 FMAs; 3x3 kernels keep all
 * nine weights in registers), then 8 at a time,
 * then one masked vector for the tail; bias starts the accumulators and residual + activation run before the
 * store. Loads never leave the phase rows because their width has 8 floats of slack. */
#include "conv.h"
#include "gemm_avx2.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

/* Rows of one output plane; TAPS > 0 is the compile-time tap count (3x3: 9), which lets the compiler keep every
 * broadcast weight in a register; TAPS == 0 reads the weights from memory for any kernel size. */
ORTX_TARGET_AVX2 static inline __attribute__((always_inline)) void depthwise_rows_avx2(
    const ortx_conv_params *p, const float *planes, const float *weights, float bias, const float *residual,
    float *output, const int64_t *tap_offsets, int64_t taps, const int TAPS) {
    ortx_depthwise_geometry g = ortx_depthwise_geometry_of(p);
    int64_t OW = p->out_width;
    int activation = (int)p->activation;
    const __m256 start = _mm256_set1_ps(bias);
    int64_t tail = OW % 8;
    int32_t lanes[8];
    for (int i = 0; i < 8; i++) lanes[i] = i < tail ? -1 : 0;
    const __m256i tail_mask = _mm256_loadu_si256((const __m256i *)lanes);
    __m256 w[TAPS > 0 ? TAPS : 1];
    if (TAPS > 0)
        for (int t = 0; t < TAPS; t++) w[t] = _mm256_broadcast_ss(weights + t);
#define ORTX_WEIGHT(t) (TAPS > 0 ? w[t] : _mm256_broadcast_ss(weights + (t)))
    int64_t count = TAPS > 0 ? TAPS : taps;
    for (int64_t oy = 0; oy < p->out_height; oy++) {
        float *out = output + oy * OW;
        const float *res = residual ? residual + oy * OW : NULL;
        const float *row_base = planes + oy * p->stride_height * g.phase_width;
        int64_t ox = 0;
        for (; ox + 32 <= OW; ox += 32) {
            __m256 a0 = start, a1 = start, a2 = start, a3 = start;
#pragma GCC unroll 9
            for (int64_t t = 0; t < count; t++) {
                const float *in = row_base + ox + tap_offsets[t];
                __m256 wt = ORTX_WEIGHT(t);
                a0 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(in), a0);
                a1 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(in + 8), a1);
                a2 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(in + 16), a2);
                a3 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(in + 24), a3);
            }
            if (res) {
                a0 = _mm256_add_ps(a0, _mm256_loadu_ps(res + ox));
                a1 = _mm256_add_ps(a1, _mm256_loadu_ps(res + ox + 8));
                a2 = _mm256_add_ps(a2, _mm256_loadu_ps(res + ox + 16));
                a3 = _mm256_add_ps(a3, _mm256_loadu_ps(res + ox + 24));
            }
            _mm256_storeu_ps(out + ox, ortx_activation_avx2(a0, activation, p->param0, p->param1));
            _mm256_storeu_ps(out + ox + 8, ortx_activation_avx2(a1, activation, p->param0, p->param1));
            _mm256_storeu_ps(out + ox + 16, ortx_activation_avx2(a2, activation, p->param0, p->param1));
            _mm256_storeu_ps(out + ox + 24, ortx_activation_avx2(a3, activation, p->param0, p->param1));
        }
        for (; ox < OW; ox += 8) {
            int partial = ox + 8 > OW;
            __m256 a0 = start;
#pragma GCC unroll 9
            for (int64_t t = 0; t < count; t++)
                a0 = _mm256_fmadd_ps(ORTX_WEIGHT(t), _mm256_loadu_ps(row_base + ox + tap_offsets[t]), a0);
            if (res) a0 = _mm256_add_ps(a0, partial ? _mm256_maskload_ps(res + ox, tail_mask) : _mm256_loadu_ps(res + ox));
            a0 = ortx_activation_avx2(a0, activation, p->param0, p->param1);
            if (partial) {
                _mm256_maskstore_ps(out + ox, tail_mask, a0);
            } else {
                _mm256_storeu_ps(out + ox, a0);
            }
        }
    }
#undef ORTX_WEIGHT
}

ORTX_TARGET_AVX2 void ortx_depthwise_plane_avx2(const ortx_conv_params *p, const float *planes, const float *weights,
                                               float bias, const float *residual, float *output) {
    ortx_depthwise_geometry g = ortx_depthwise_geometry_of(p);
    int64_t KH = p->kernel_height, KW = p->kernel_width, sw = p->stride_width;
    /* Offset of each tap in the phase planes, computed once (no divisions in the loops). */
    int64_t taps = KH * KW, tap_offsets[taps];
    for (int64_t ky = 0; ky < KH; ky++)
        for (int64_t kx = 0; kx < KW; kx++) {
            int64_t tap = kx * p->dilation_width;
            tap_offsets[ky * KW + kx] = ky * p->dilation_height * g.phase_width +
                                        (tap % sw) * g.padded_rows * g.phase_width + tap / sw;
        }
    if (taps == 9) {
        depthwise_rows_avx2(p, planes, weights, bias, residual, output, tap_offsets, taps, 9);
    } else {
        depthwise_rows_avx2(p, planes, weights, bias, residual, output, tap_offsets, taps, 0);
    }
}

#else
void ortx_depthwise_plane_avx2(const ortx_conv_params *p, const float *planes, const float *weights, float bias,
                               const float *residual, float *output) {
    /* Never selected off x86; kept so the ISA table links everywhere. */
    ortx_depthwise_plane_portable(p, planes, weights, bias, residual, output);
}
#endif
