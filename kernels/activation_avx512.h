/* The fused activations on 16 lanes for AVX-512 kernels, bit for bit gemm_avx2.h's AVX2 activation on each 8-lane
 * half, so an AVX-512 kernel and its AVX2 twin give the same bits (the depthwise conv and the NCHWc kernels). The
 * lane-wise activations are written out on zmm registers: a call of the AVX2 function per half, which gcc does not
 * inline, spilled the pointwise tile's 24 accumulators and doubled its time at 16 input channels. */
#ifndef ORTX_ACTIVATION_AVX512_H
#define ORTX_ACTIVATION_AVX512_H

#include "gemm_avx2.h"
#include "isa.h"
#include "vector_math.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

/* CALL(ACT) with the common activations as compile-time constants, each its own instance of the caller's loop, and
 * any other as the runtime value `activation` (a local: it is read more than once). Where a loop's activation is
 * read through a struct its stores may alias (the kernels are built without strict aliasing), gcc kept the switch
 * on it in the loop, one per vector, with every case's code: the AMX 1x1 epilogues, the fp32 stem's stores. */
#define ORTX_WITH_ACTIVATION_CONSTANT(activation, CALL)            \
    switch (activation) {                                          \
        case ORTX_ACT_NONE: CALL(ORTX_ACT_NONE); break;            \
        case ORTX_ACT_RELU: CALL(ORTX_ACT_RELU); break;            \
        case ORTX_ACT_CLIP: CALL(ORTX_ACT_CLIP); break;            \
        case ORTX_ACT_HARD_SWISH: CALL(ORTX_ACT_HARD_SWISH); break; \
        default: CALL(activation);                                 \
    }

ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) __m512 ortx_activation_avx512(__m512 v, int activation,
                                                                                           float p0, float p1) {
    const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
    switch (activation) {  /* the lane-wise cases as ortx_activation_avx2 computes them, on 16 lanes at once */
        case ORTX_ACT_NONE:
            return v;
        case ORTX_ACT_RELU:
            return _mm512_max_ps(v, zero);
        case ORTX_ACT_LEAKY_RELU:
            return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, zero, _CMP_GE_OQ), _mm512_mul_ps(v, _mm512_set1_ps(p0)),
                                        v);
        case ORTX_ACT_CLIP:
            return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(p0)), _mm512_set1_ps(p1));
        case ORTX_ACT_HARD_SIGMOID: {
            __m512 y = _mm512_fmadd_ps(v, _mm512_set1_ps(p0), _mm512_set1_ps(p1));
            return _mm512_min_ps(_mm512_max_ps(y, zero), one);
        }
        case ORTX_ACT_HARD_SWISH: {
            __m512 y = _mm512_fmadd_ps(v, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f));
            return _mm512_mul_ps(v, _mm512_min_ps(_mm512_max_ps(y, zero), one));
        }
        case ORTX_ACT_HARD_SWISH_AFFINE: {
            __m512 y = _mm512_fmadd_ps(v, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f));
            y = _mm512_mul_ps(v, _mm512_min_ps(_mm512_max_ps(y, zero), one));
            return _mm512_fmadd_ps(_mm512_set1_ps(p0), y, _mm512_set1_ps(p1));
        }
        case ORTX_ACT_GELU:  /* vector_math.h's, the AVX2 one's bits on 16 lanes */
            return ortx_gelu_avx512(v);
        default: {  /* sigmoid, tanh: the AVX2 exp on each half (not inlined: calls keep the accumulators live) */
            __m256 lo = _mm512_castps512_ps256(v);
            __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
            lo = ortx_activation_avx2(lo, activation, p0, p1);
            hi = ortx_activation_avx2(hi, activation, p0, p1);
            return _mm512_castpd_ps(
                _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
        }
    }
}
#endif

#endif
