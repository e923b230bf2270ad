/* AVX2+FMA pieces of the packed SGEMM: the 6x16 micro-kernel (12 accumulators, 2 B loads and 6 broadcasts per
 * k step, as in BLIS's Haswell/Zen kernel), the vectorised epilogue and the vectorised activations, which the
 * conv family reuses (the activation itself is inline in gemm_avx2.h). */
#include "gemm_avx2.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

#include "activation.h"

ORTX_TARGET_AVX2 static void micro_avx2(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                        int accumulate) {
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps();
    __m256 c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps();
    __m256 c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        __m256 a0 = _mm256_broadcast_ss(a), a1 = _mm256_broadcast_ss(a + 1);
        c00 = _mm256_fmadd_ps(a0, b0, c00);
        c01 = _mm256_fmadd_ps(a0, b1, c01);
        c10 = _mm256_fmadd_ps(a1, b0, c10);
        c11 = _mm256_fmadd_ps(a1, b1, c11);
        a0 = _mm256_broadcast_ss(a + 2);
        a1 = _mm256_broadcast_ss(a + 3);
        c20 = _mm256_fmadd_ps(a0, b0, c20);
        c21 = _mm256_fmadd_ps(a0, b1, c21);
        c30 = _mm256_fmadd_ps(a1, b0, c30);
        c31 = _mm256_fmadd_ps(a1, b1, c31);
        a0 = _mm256_broadcast_ss(a + 4);
        a1 = _mm256_broadcast_ss(a + 5);
        c40 = _mm256_fmadd_ps(a0, b0, c40);
        c41 = _mm256_fmadd_ps(a0, b1, c41);
        c50 = _mm256_fmadd_ps(a1, b0, c50);
        c51 = _mm256_fmadd_ps(a1, b1, c51);
        a += ORTX_GEMM_MR;
        b += ORTX_GEMM_NR;
    }
#define ORTX_STORE_ROW(i, lo, hi)                                                      \
    do {                                                                               \
        float *row = c + (i) * ldc;                                                    \
        if (accumulate) {                                                              \
            lo = _mm256_add_ps(_mm256_loadu_ps(row), lo);                              \
            hi = _mm256_add_ps(_mm256_loadu_ps(row + 8), hi);                          \
        }                                                                              \
        _mm256_storeu_ps(row, lo);                                                     \
        _mm256_storeu_ps(row + 8, hi);                                                 \
    } while (0)
    ORTX_STORE_ROW(0, c00, c01);
    ORTX_STORE_ROW(1, c10, c11);
    ORTX_STORE_ROW(2, c20, c21);
    ORTX_STORE_ROW(3, c30, c31);
    ORTX_STORE_ROW(4, c40, c41);
    ORTX_STORE_ROW(5, c50, c51);
#undef ORTX_STORE_ROW
}

ORTX_TARGET_AVX2 void ortx_activation_array_avx2(float *data, int64_t count, int activation, float param0,
                                                 float param1) {
    if (activation == ORTX_ACT_NONE) return;
    int64_t i = 0;
    for (; i + 8 <= count; i += 8)
        _mm256_storeu_ps(data + i, ortx_activation_avx2(_mm256_loadu_ps(data + i), activation, param0, param1));
    for (; i < count; i++) data[i] = ortx_activation_scalar(activation, data[i], param0, param1);
}

ORTX_TARGET_AVX2 void ortx_gemm_epilogue_avx2(float *c, int64_t ldc, int64_t rows, int64_t cols, int64_t row0,
                                              int64_t col0, const ortx_gemm_epilogue *e) {
    int plain = e->alpha == 1.0f && !e->bias_row && !e->bias_col && !e->residual;
    if (plain && e->activation == ORTX_ACT_NONE) return;
    const __m256 alpha = _mm256_set1_ps(e->alpha), scale = _mm256_set1_ps(e->residual_scale);
    for (int64_t i = 0; i < rows; i++) {
        float *row = c + i * ldc;
        int64_t m = row0 + i;
        __m256 row_bias = _mm256_set1_ps(e->bias_row ? e->bias_row[m] : 0.0f);
        const float *residual = e->residual ? e->residual + m * e->residual_row_stride : NULL;
        int64_t j = 0;
        if (e->residual == NULL || e->residual_col_stride == 1) {
            for (; j + 8 <= cols; j += 8) {
                __m256 v = _mm256_loadu_ps(row + j);
                if (!plain) {
                    v = _mm256_mul_ps(v, alpha);
                    if (e->bias_row) v = _mm256_add_ps(v, row_bias);
                    if (e->bias_col) v = _mm256_add_ps(v, _mm256_loadu_ps(e->bias_col + col0 + j));
                    if (residual) v = _mm256_fmadd_ps(scale, _mm256_loadu_ps(residual + col0 + j), v);
                }
                _mm256_storeu_ps(row + j, ortx_activation_avx2(v, e->activation, e->param0, e->param1));
            }
        }
        for (; j < cols; j++) row[j] = ortx_gemm_epilogue_scalar(e, row[j], m, col0 + j);
    }
}

const ortx_gemm_isa ortx_gemm_isa_avx2 = {
    .name = "avx2",
    .micro = micro_avx2,
    .micro_wide = NULL,
    .epilogue = ortx_gemm_epilogue_avx2,
    .activation = ortx_activation_array_avx2,
};

#else
/* Never selected off x86 (dispatch.c only picks AVX2 after CPUID says so). */
const ortx_gemm_isa ortx_gemm_isa_avx2 = {.name = "avx2"};
#endif
