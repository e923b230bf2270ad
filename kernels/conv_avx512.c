/* AVX-512 depthwise conv: conv_avx2.c's loop over one output channel plane with 16-float vectors, 64 columns at a
 * time (4 accumulators, so each broadcast weight feeds 4 FMAs; 3x3 kernels keep all nine weights in registers),
 * then 16 at a time, then a masked tail (masked-off lanes are never loaded, so the planes' 8-float slack
 * suffices). Each lane runs the AVX2 loop's operations in the same order (bias, taps, residual, the AVX2
 * activation on each 8-lane half), so both ISAs give the same bits. */
#include "conv.h"
#include "gemm.h"
#include "gemm_avx2.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) __m512 activate(__m512 v, int activation, float p0,
                                                                             float p1) {
    if (activation == ORTX_ACT_NONE) return v;
    __m256 lo = _mm512_castps512_ps256(v), hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    lo = ortx_activation_avx2(lo, activation, p0, p1);
    hi = ortx_activation_avx2(hi, activation, p0, p1);
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void depthwise_rows_avx512(
    const ortx_conv_params *p, const float *planes, const float *weights, float bias, const float *residual,
    float *output, const int64_t *tap_offsets, int64_t taps, const int TAPS) {
    ortx_depthwise_geometry g = ortx_depthwise_geometry_of(p);
    const int64_t OW = p->out_width;
    const int activation = (int)p->activation;
    const float p0 = p->param0, p1 = p->param1;
    const __m512 start = _mm512_set1_ps(bias);
    const __mmask16 tail = (__mmask16)((1u << (OW % 16)) - 1u);
    __m512 w[TAPS > 0 ? TAPS : 1];
    if (TAPS > 0)
        for (int t = 0; t < TAPS; t++) w[t] = _mm512_set1_ps(weights[t]);
#define ORTX_WEIGHT(t) (TAPS > 0 ? w[t] : _mm512_set1_ps(weights[t]))
    const int64_t count = TAPS > 0 ? TAPS : taps;
    for (int64_t oy = 0; oy < p->out_height; oy++) {
        float *out = output + oy * OW;
        const float *res = residual ? residual + oy * OW : NULL;
        const float *row_base = planes + oy * p->stride_height * g.phase_width;
        int64_t ox = 0;
        for (; ox + 64 <= OW; ox += 64) {
            __m512 a0 = start, a1 = start, a2 = start, a3 = start;
#pragma GCC unroll 9
            for (int64_t t = 0; t < count; t++) {
                const float *in = row_base + ox + tap_offsets[t];
                __m512 wt = ORTX_WEIGHT(t);
                a0 = _mm512_fmadd_ps(wt, _mm512_loadu_ps(in), a0);
                a1 = _mm512_fmadd_ps(wt, _mm512_loadu_ps(in + 16), a1);
                a2 = _mm512_fmadd_ps(wt, _mm512_loadu_ps(in + 32), a2);
                a3 = _mm512_fmadd_ps(wt, _mm512_loadu_ps(in + 48), a3);
            }
            if (res) {
                a0 = _mm512_add_ps(a0, _mm512_loadu_ps(res + ox));
                a1 = _mm512_add_ps(a1, _mm512_loadu_ps(res + ox + 16));
                a2 = _mm512_add_ps(a2, _mm512_loadu_ps(res + ox + 32));
                a3 = _mm512_add_ps(a3, _mm512_loadu_ps(res + ox + 48));
            }
            _mm512_storeu_ps(out + ox, activate(a0, activation, p0, p1));
            _mm512_storeu_ps(out + ox + 16, activate(a1, activation, p0, p1));
            _mm512_storeu_ps(out + ox + 32, activate(a2, activation, p0, p1));
            _mm512_storeu_ps(out + ox + 48, activate(a3, activation, p0, p1));
        }
        for (; ox < OW; ox += 16) {
            __mmask16 lanes = ox + 16 <= OW ? (__mmask16)0xFFFF : tail;
            __m512 a0 = start;
#pragma GCC unroll 9
            for (int64_t t = 0; t < count; t++)
                a0 = _mm512_fmadd_ps(ORTX_WEIGHT(t), _mm512_maskz_loadu_ps(lanes, row_base + ox + tap_offsets[t]), a0);
            if (res) a0 = _mm512_add_ps(a0, _mm512_maskz_loadu_ps(lanes, res + ox));
            _mm512_mask_storeu_ps(out + ox, lanes, activate(a0, activation, p0, p1));
        }
    }
#undef ORTX_WEIGHT
}

ORTX_TARGET_AVX512 void ortx_depthwise_plane_avx512(const ortx_conv_params *p, const float *planes,
                                                   const float *weights, float bias, const float *residual,
                                                   float *output) {
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
        depthwise_rows_avx512(p, planes, weights, bias, residual, output, tap_offsets, taps, 9);
    } else {
        depthwise_rows_avx512(p, planes, weights, bias, residual, output, tap_offsets, taps, 0);
    }
}

#else
/* Never selected off x86 (dispatch.c only picks AVX-512 after CPUID says so). */
void ortx_depthwise_plane_avx512(const ortx_conv_params *p, const float *planes, const float *weights, float bias,
                                 const float *residual, float *output) {
    ortx_depthwise_plane_portable(p, planes, weights, bias, residual, output);
}
#endif
