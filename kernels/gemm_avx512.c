/* AVX-512 pieces of the packed SGEMM: a 6x32 micro-kernel over two adjacent 16-column B panels (12 zmm
 * accumulators, 2 B loads and 6 broadcasts per k step) and a 6x16 one for a lone last panel. The packed format
 * is the one every ISA shares (gemm.h), so weights packed under AVX2 run here unchanged. The epilogue (applied to
 * the stored tile, not fused into the registers) and the activations reuse the AVX2 code, which every AVX-512 CPU
 * also runs.
 * This box has no AVX-512: the kernels compile here and are checked by tests on machines that have it. */
#include "gemm_avx2.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

ORTX_TARGET_AVX512 static void micro_avx512(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                            int accumulate, const ortx_gemm_epilogue *epilogue, int64_t row0,
                                            int64_t col0) {
    __m512 acc[ORTX_GEMM_MR];
    for (int i = 0; i < ORTX_GEMM_MR; i++) acc[i] = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_loadu_ps(b + k * ORTX_GEMM_NR);
        const float *ak = a + k * ORTX_GEMM_MR;
        for (int i = 0; i < ORTX_GEMM_MR; i++) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(ak[i]), b0, acc[i]);
    }
    for (int i = 0; i < ORTX_GEMM_MR; i++) {
        float *row = c + i * ldc;
        __m512 v = accumulate ? _mm512_add_ps(_mm512_loadu_ps(row), acc[i]) : acc[i];
        _mm512_storeu_ps(row, v);
    }
    if (epilogue) ortx_gemm_epilogue_avx2(c, ldc, ORTX_GEMM_MR, ORTX_GEMM_NR, row0, col0, epilogue);
}

ORTX_TARGET_AVX512 static void micro_wide_avx512(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                                 int accumulate, const ortx_gemm_epilogue *epilogue, int64_t row0,
                                                 int64_t col0) {
    const float *b_second = b + ORTX_GEMM_NR * kc;  /* the next packed panel */
    __m512 lo[ORTX_GEMM_MR], hi[ORTX_GEMM_MR];
    for (int i = 0; i < ORTX_GEMM_MR; i++) {
        lo[i] = _mm512_setzero_ps();
        hi[i] = _mm512_setzero_ps();
    }
#pragma GCC unroll 2
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_loadu_ps(b + k * ORTX_GEMM_NR), b1 = _mm512_loadu_ps(b_second + k * ORTX_GEMM_NR);
        const float *ak = a + k * ORTX_GEMM_MR;
        for (int i = 0; i < ORTX_GEMM_MR; i++) {
            __m512 broadcast = _mm512_set1_ps(ak[i]);
            lo[i] = _mm512_fmadd_ps(broadcast, b0, lo[i]);
            hi[i] = _mm512_fmadd_ps(broadcast, b1, hi[i]);
        }
    }
    for (int i = 0; i < ORTX_GEMM_MR; i++) {
        float *row = c + i * ldc;
        __m512 v0 = lo[i], v1 = hi[i];
        if (accumulate) {
            v0 = _mm512_add_ps(_mm512_loadu_ps(row), v0);
            v1 = _mm512_add_ps(_mm512_loadu_ps(row + 16), v1);
        }
        _mm512_storeu_ps(row, v0);
        _mm512_storeu_ps(row + 16, v1);
    }
    if (epilogue) ortx_gemm_epilogue_avx2(c, ldc, ORTX_GEMM_MR, 2 * ORTX_GEMM_NR, row0, col0, epilogue);
}

const ortx_gemm_isa ortx_gemm_isa_avx512 = {
    .name = "avx512",
    .micro = micro_avx512,
    .micro_wide = micro_wide_avx512,
    .epilogue = ortx_gemm_epilogue_avx2,
    .activation = ortx_activation_array_avx2,
};

#else
/* Never selected off x86 (dispatch.c only picks AVX-512 after CPUID says so). */
const ortx_gemm_isa ortx_gemm_isa_avx512 = {.name = "avx512"};
#endif
