/* AVX2 helpers shared by the gemm and conv families (defined in gemm_avx2.c). */
#ifndef ORTX_GEMM_AVX2_H
#define ORTX_GEMM_AVX2_H

#include "gemm.h"
#include "isa.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

#include "activation.h"
#include "vector_math.h"

/* exp on 8 lanes: Cephes expf (range reduction by ln 2, degree-5 polynomial), max relative error ~2e-7. */
ORTX_TARGET_AVX2 static inline __m256 exp_avx2(__m256 x) {
    x = _mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f));
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3365478515625f));
    __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(scale));
}

ORTX_TARGET_AVX2 static inline __m256 ortx_activation_avx2(__m256 x, int activation, float param0, float param1) {
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    switch (activation) {
        case ORTX_ACT_RELU:
            return _mm256_max_ps(x, zero);
        case ORTX_ACT_LEAKY_RELU:
            return _mm256_blendv_ps(_mm256_mul_ps(x, _mm256_set1_ps(param0)), x,
                                    _mm256_cmp_ps(x, zero, _CMP_GE_OQ));
        case ORTX_ACT_CLIP:
            return _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(param0)), _mm256_set1_ps(param1));
        case ORTX_ACT_SIGMOID:
            return _mm256_div_ps(one, _mm256_add_ps(one, exp_avx2(_mm256_sub_ps(zero, x))));
        case ORTX_ACT_HARD_SIGMOID: {
            __m256 y = _mm256_fmadd_ps(x, _mm256_set1_ps(param0), _mm256_set1_ps(param1));
            return _mm256_min_ps(_mm256_max_ps(y, zero), one);
        }
        case ORTX_ACT_HARD_SWISH: {
            __m256 y = _mm256_fmadd_ps(x, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f));
            return _mm256_mul_ps(x, _mm256_min_ps(_mm256_max_ps(y, zero), one));
        }
        case ORTX_ACT_HARD_SWISH_AFFINE: {
            __m256 y = _mm256_fmadd_ps(x, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f));
            y = _mm256_mul_ps(x, _mm256_min_ps(_mm256_max_ps(y, zero), one));
            return _mm256_fmadd_ps(_mm256_set1_ps(param0), y, _mm256_set1_ps(param1));
        }
        case ORTX_ACT_TANH: {
            /* tanh(x) = (e^2x - 1) / (e^2x + 1); |x| > 9 is +-1 in float32. */
            __m256 clamped = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-9.0f)), _mm256_set1_ps(9.0f));
            __m256 e = exp_avx2(_mm256_add_ps(clamped, clamped));
            return _mm256_div_ps(_mm256_sub_ps(e, one), _mm256_add_ps(e, one));
        }
        case ORTX_ACT_GELU:
            return ortx_gelu_avx2(x);
        default:
            return x;
    }
}

/* Applies the epilogue to one tile row held in two registers (columns col0 .. col0+15); the gemm micro-kernel
 * and conv's direct tiles fuse it before their single store. */
ORTX_TARGET_AVX2 static inline __attribute__((always_inline)) void epilogue_registers_avx2(
    __m256 *lo, __m256 *hi, const ortx_gemm_epilogue *e, int64_t row, int64_t col0) {
    __m256 v0 = *lo, v1 = *hi;
    if (e->alpha != 1.0f) {
        v0 = _mm256_mul_ps(v0, _mm256_set1_ps(e->alpha));
        v1 = _mm256_mul_ps(v1, _mm256_set1_ps(e->alpha));
    }
    if (e->bias_row) {
        __m256 bias = _mm256_set1_ps(e->bias_row[row]);
        v0 = _mm256_add_ps(v0, bias);
        v1 = _mm256_add_ps(v1, bias);
    }
    if (e->bias_col) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(e->bias_col + col0));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(e->bias_col + col0 + 8));
    }
    if (e->residual) {
        const float *r = e->residual + row * e->residual_row_stride + col0;
        __m256 scale = _mm256_set1_ps(e->residual_scale);
        v0 = _mm256_fmadd_ps(scale, _mm256_loadu_ps(r), v0);
        v1 = _mm256_fmadd_ps(scale, _mm256_loadu_ps(r + 8), v1);
    }
    *lo = ortx_activation_avx2(v0, e->activation, e->param0, e->param1);
    *hi = ortx_activation_avx2(v1, e->activation, e->param0, e->param1);
}

ORTX_TARGET_AVX2 void ortx_activation_array_avx2(float *data, int64_t count, int activation, float param0,
                                                 float param1);
ORTX_TARGET_AVX2 void ortx_gemm_epilogue_avx2(float *c, int64_t ldc, int64_t rows, int64_t cols, int64_t row0,
                                              int64_t col0, const ortx_gemm_epilogue *epilogue);
#endif

#endif
