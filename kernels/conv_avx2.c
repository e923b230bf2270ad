/* AVX2 direct dense conv tile (conv.h, conv.c Case 1b). */
#include "conv.h"
#include "gemm.h"
#include "gemm_avx2.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

/* Direct conv tile (conv.h): the gemm micro-kernel's 6x16 register block (12 accumulators, 6 broadcasts of
 * packed weights and 2 loads per k), with B loaded in place from the phase planes at x + offsets[k]. A's packed
 * panels change address at each KC block boundary (gemm.h layout); the accumulators carry over. */
ORTX_TARGET_AVX2 static inline __attribute__((always_inline)) void direct_tile_avx2(
    int64_t K, int64_t k_begin, int64_t k_end, const float *weights, int64_t m_padded, int64_t row0, const float *x,
    const int32_t *offsets, const float *partial, float *c, int64_t ldc, int64_t rows,
    const ortx_gemm_epilogue *epilogue, int64_t col0, const int prefetch) {
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps();
    __m256 c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps();
    __m256 c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    for (int64_t k0 = k_begin; k0 < k_end; k0 += ORTX_GEMM_KC) {
        int64_t kc = K - k0 < ORTX_GEMM_KC ? K - k0 : ORTX_GEMM_KC;
        const float *a = weights + k0 * m_padded + row0 * kc;
        const int32_t *offset = offsets + k0;
#pragma GCC unroll 4
        for (int64_t k = 0; k < kc; k++) {
            const float *b = x + offset[k];
            if (prefetch) _mm_prefetch((const char *)(b + 2 * ORTX_GEMM_NR), _MM_HINT_T0);
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
        }
    }
    /* Broadcast residual columns need the scalar definition: store first, then the tile epilogue. */
    const ortx_gemm_epilogue *fused =
        epilogue && !(epilogue->residual && epilogue->residual_col_stride != 1) ? epilogue : NULL;
#define ORTX_STORE_ROW(i, lo, hi)                                                      \
    do {                                                                               \
        if ((i) < rows) {                                                              \
            float *row = c + (i) * ldc;                                                \
            if (partial) {                                                             \
                lo = _mm256_add_ps(_mm256_loadu_ps(partial + (i) * ORTX_GEMM_NR), lo);     \
                hi = _mm256_add_ps(_mm256_loadu_ps(partial + (i) * ORTX_GEMM_NR + 8), hi); \
            }                                                                          \
            if (fused) epilogue_registers_avx2(&lo, &hi, fused, row0 + (i), col0);    \
            _mm256_storeu_ps(row, lo);                                                 \
            _mm256_storeu_ps(row + 8, hi);                                             \
        }                                                                              \
    } while (0)
    ORTX_STORE_ROW(0, c00, c01);
    ORTX_STORE_ROW(1, c10, c11);
    ORTX_STORE_ROW(2, c20, c21);
    ORTX_STORE_ROW(3, c30, c31);
    ORTX_STORE_ROW(4, c40, c41);
    ORTX_STORE_ROW(5, c50, c51);
#undef ORTX_STORE_ROW
    if (epilogue && !fused) ortx_gemm_epilogue_avx2(c, ldc, rows, ORTX_GEMM_NR, row0, col0, epilogue);
}

/* The first row panel of a tile also prefetches the next tile's B lines: the planes are read at K scattered
 * rows, too many streams for the hardware prefetcher, and the later panels find them in L1/L2. */
ORTX_TARGET_AVX2 void ortx_conv_direct_tile_avx2(int64_t K, int64_t k_begin, int64_t k_end, const float *weights,
                                                int64_t m_padded, int64_t row0, const float *x,
                                                const int32_t *offsets, const float *partial, float *c, int64_t ldc,
                                                int64_t rows, const ortx_gemm_epilogue *epilogue, int64_t col0) {
    if (row0 == 0) {
        direct_tile_avx2(K, k_begin, k_end, weights, m_padded, row0, x, offsets, partial, c, ldc, rows, epilogue,
                         col0, 1);
    } else {
        direct_tile_avx2(K, k_begin, k_end, weights, m_padded, row0, x, offsets, partial, c, ldc, rows, epilogue,
                         col0, 0);
    }
}

#else
void ortx_conv_direct_tile_avx2(int64_t K, int64_t k_begin, int64_t k_end, const float *weights, int64_t m_padded,
                                int64_t row0, const float *x, const int32_t *offsets, const float *partial, float *c,
                                int64_t ldc, int64_t rows, const struct ortx_gemm_epilogue *epilogue, int64_t col0) {
    ortx_conv_direct_tile_portable(K, k_begin, k_end, weights, m_padded, row0, x, offsets, partial, c, ldc, rows,
                                   epilogue, col0);
}
#endif
