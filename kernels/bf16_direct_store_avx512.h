/* The bf16 direct conv's store of one tile row vector, shared by the vdpbf16ps tile (gemm_bf16_avx512.c) and the
 * AMX step (gemm_bf16_amx.c): a vector's 16 lanes cover output pixels with padding columns among them, so the kept
 * lanes (`keep`) are compressed to the front, the epilogue runs on them (activation_avx512.h's activation: the AVX2
 * code's bits on 16 lanes, as every other bf16 epilogue's, so both paths agree bit for bit), and `store` lanes go
 * to dst. */
#ifndef ORTX_BF16_DIRECT_STORE_AVX512_H
#define ORTX_BF16_DIRECT_STORE_AVX512_H

#include "activation_avx512.h"
#include "gemm_avx2.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void ortx_bf16_direct_store_row(
    __m512 value, __mmask16 keep, __mmask16 store, const ortx_gemm_epilogue *e, int64_t row, int64_t at,
    float *dst) {
    if (keep != 0xffff) value = _mm512_maskz_compress_ps(keep, value);
    if (e->alpha != 1.0f) value = _mm512_mul_ps(value, _mm512_set1_ps(e->alpha));
    if (e->bias_row) value = _mm512_add_ps(value, _mm512_set1_ps(e->bias_row[row]));
    if (e->residual)
        value = _mm512_fmadd_ps(_mm512_set1_ps(e->residual_scale),
                                _mm512_maskz_loadu_ps(store, e->residual + row * e->residual_row_stride + at), value);
    if (e->activation != ORTX_ACT_NONE) value = ortx_activation_avx512(value, e->activation, e->param0, e->param1);
    _mm512_mask_storeu_ps(dst, store, value);
}

#endif
#endif
