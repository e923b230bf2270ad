/* AVX-512 direct dense conv tile (conv.h, conv.c Case 1b): 12 output channels (two packed A panels) x 32 virtual
 * pixels, 24 zmm accumulators, per k 2 loads of B in place from the phase planes at x + offsets[k] and 12
 * broadcasts of packed weights. Enough independent FMAs to keep two 512-bit FMA ports busy (Sapphire Rapids: the
 * 6x16 AVX2 tile's 12 ymm chains fill a quarter of them), where the packed GEMM's B panels stream from L2 and their
 * packing costs ~10% of a 3x3 conv. A lone last panel (M - row0 <= 6) runs the 6 x 32 instance. */
#include "conv.h"
#include "gemm.h"
#include "gemm_avx2.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

enum { PIXELS = 32, PANEL = ORTX_GEMM_MR };

/* The epilogue on one 16-pixel register through the AVX2 register epilogue on each half, as gemm_avx512.c's
 * fused tiles do, so bias, residual and activation round exactly as there. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) __m512 epilogue_register(
    __m512 v, const ortx_gemm_epilogue *e, int64_t row, int64_t col0) {
    __m256 lo = _mm512_castps512_ps256(v), hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    epilogue_registers_avx2(&lo, &hi, e, row, col0);
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

/* `panels` (1 or 2) A panels x 32 pixels over depth [k_begin, k_end); A's packed panels change address at each KC
 * block boundary (gemm.h layout) and the accumulators carry over. The first row group also prefetches the next
 * tile's B lines: the planes are read at K scattered rows, too many streams for the hardware prefetcher. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void direct_tile(
    const int panels, int64_t K, int64_t k_begin, int64_t k_end, const float *weights, int64_t m_padded,
    int64_t row0, const float *x, const int32_t *offsets, const float *partial, float *c, int64_t ldc, int64_t rows,
    const ortx_gemm_epilogue *epilogue, int64_t col0, const int prefetch) {
    __m512 acc[2 * PANEL][2];
    for (int i = 0; i < panels * PANEL; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t k0 = k_begin; k0 < k_end; k0 += ORTX_GEMM_KC) {
        int64_t kc = K - k0 < ORTX_GEMM_KC ? K - k0 : ORTX_GEMM_KC;
        const float *a = weights + k0 * m_padded + row0 * kc;
        const int32_t *offset = offsets + k0;
#pragma GCC unroll 4
        for (int64_t k = 0; k < kc; k++) {
            const float *b = x + offset[k];
            if (prefetch) _mm_prefetch((const char *)(b + 2 * PIXELS), _MM_HINT_T0);
            __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
            for (int p = 0; p < panels; p++)
                for (int i = 0; i < PANEL; i++) {
                    __m512 s = _mm512_set1_ps(a[p * PANEL * kc + k * PANEL + i]);
                    acc[p * PANEL + i][0] = _mm512_fmadd_ps(s, b0, acc[p * PANEL + i][0]);
                    acc[p * PANEL + i][1] = _mm512_fmadd_ps(s, b1, acc[p * PANEL + i][1]);
                }
        }
    }
    /* Broadcast residual columns need the scalar definition: store first, then the tile epilogue. */
    const ortx_gemm_epilogue *fused =
        epilogue && !(epilogue->residual && epilogue->residual_col_stride != 1) ? epilogue : NULL;
    for (int i = 0; i < panels * PANEL; i++) {
        if (i >= rows) break;
        for (int v = 0; v < 2; v++) {
            __m512 value = acc[i][v];
            if (partial) value = _mm512_add_ps(_mm512_loadu_ps(partial + i * PIXELS + 16 * v), value);
            if (fused) value = epilogue_register(value, fused, row0 + i, col0 + 16 * v);
            _mm512_storeu_ps(c + i * ldc + 16 * v, value);
        }
    }
    if (epilogue && !fused) ortx_gemm_epilogue_avx2(c, ldc, rows, PIXELS, row0, col0, epilogue);
}

ORTX_TARGET_AVX512 void ortx_conv_direct_tile_avx512(int64_t K, int64_t k_begin, int64_t k_end,
                                                    const float *weights, int64_t m_padded, int64_t row0,
                                                    const float *x, const int32_t *offsets, const float *partial,
                                                    float *c, int64_t ldc, int64_t rows,
                                                    const ortx_gemm_epilogue *epilogue, int64_t col0) {
    if (rows > PANEL) {
        if (row0 == 0) {
            direct_tile(2, K, k_begin, k_end, weights, m_padded, row0, x, offsets, partial, c, ldc, rows, epilogue,
                        col0, 1);
        } else {
            direct_tile(2, K, k_begin, k_end, weights, m_padded, row0, x, offsets, partial, c, ldc, rows, epilogue,
                        col0, 0);
        }
    } else if (row0 == 0) {
        direct_tile(1, K, k_begin, k_end, weights, m_padded, row0, x, offsets, partial, c, ldc, rows, epilogue, col0,
                    1);
    } else {
        direct_tile(1, K, k_begin, k_end, weights, m_padded, row0, x, offsets, partial, c, ldc, rows, epilogue, col0,
                    0);
    }
}

#endif
