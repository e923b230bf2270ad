/* AVX-512 pieces of the packed SGEMM: a 6x32 micro-kernel over two adjacent 16-column B panels (12 zmm
 * accumulators, 2 B loads and 6 broadcasts per k step), a 12x32 one over two A panels as well (24 accumulators, for
 * two FMA ports) and a 6x16 one for a lone last panel, each also reading a raw row-major A in place (micro_rows*: the broadcasts come from A's rows, so A is never packed); the 12x32 tile also with a prefetch
 * stream inside its k loop (micro_tall_prefetching) and the 6x32 tile over the first rows of a partial panel only
 * (micro_wide_partial). The packed format
 * is the one every ISA shares (gemm.h), so weights packed under AVX2 run here unchanged. The epilogue runs on the
 * registers before the single store (as in the AVX2 kernel), through the AVX2 register epilogue on each 8-lane
 * half, so it matches the AVX2 tile epilogue that edge tiles use bit for bit; the activations reuse the AVX2
 * code, which every AVX-512 CPU also runs. */
#include "gemm_avx2.h"
#include "transpose_avx512.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

/* Applies the epilogue to one 16-column tile row in a register: each 8-lane half runs the AVX2 register
 * epilogue, so the fused tiles and ortx_gemm_epilogue_avx2 (edge tiles) give bitwise equal results. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) __m512 epilogue_register_avx512(
    __m512 v, const ortx_gemm_epilogue *e, int64_t row, int64_t col0) {
    __m256 lo = _mm512_castps512_ps256(v), hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    epilogue_registers_avx2(&lo, &hi, e, row, col0);
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

/* Broadcast residual columns need the scalar definition: those tiles store first, then run the tile epilogue. */
static inline const ortx_gemm_epilogue *fusable(const ortx_gemm_epilogue *epilogue) {
    return epilogue && !(epilogue->residual && epilogue->residual_col_stride != 1) ? epilogue : NULL;
}

/* The (PANELS x MR) x (VECTORS x 16) tile: A element (i, k) of panel p at a[p*a_panel_stride + i*a_row_stride +
 * k*a_col_stride] (packed panels: 1, MR, panel stride MR*kc; a raw row-major A read in place: its row stride, 1,
 * panel stride MR*lda), B vector v of step k at b + v*NR*kc + k*NR (adjacent packed panels). Constant strides and
 * counts at every call below, so each instance keeps its accumulators in registers and its broadcasts as memory
 * operands. Each element sums its k in order whatever the instance, so all give the same bits. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void tile_prefetching_avx512(
    const int panels, const int vectors, int64_t kc, const float *a, const int64_t a_row_stride,
    const int64_t a_col_stride, const int64_t a_panel_stride, const float *b, float *c, int64_t ldc, int accumulate,
    const ortx_gemm_epilogue *epilogue, int64_t row0, int64_t col0, const char *prefetch, int64_t prefetch_lines,
    const int rows) {
    enum { MR = ORTX_GEMM_MR };
    for (int i = 0; i < rows; i++) {  /* start fetching the output lines; the k loop hides the latency */
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        if (vectors == 2) _mm_prefetch((const char *)(c + i * ldc + 31), _MM_HINT_T0);
    }
    __m512 acc[2 * MR][2];
    for (int i = 0; i < rows; i++)
        for (int v = 0; v < vectors; v++) acc[i][v] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int64_t k = 0; k < kc; k++) {
        if (prefetch != NULL && k < prefetch_lines) _mm_prefetch(prefetch + 64 * k, _MM_HINT_T1);
        __m512 b0 = _mm512_loadu_ps(b + k * ORTX_GEMM_NR);
        __m512 b1 = vectors == 2 ? _mm512_loadu_ps(b + ORTX_GEMM_NR * kc + k * ORTX_GEMM_NR) : b0;
        const float *ak = a + k * a_col_stride;
        for (int p = 0; p < panels; p++)
            for (int i = 0; i < MR && p * MR + i < rows; i++) {
                __m512 broadcast = _mm512_set1_ps(ak[p * a_panel_stride + i * a_row_stride]);
                acc[p * MR + i][0] = _mm512_fmadd_ps(broadcast, b0, acc[p * MR + i][0]);
                if (vectors == 2) acc[p * MR + i][1] = _mm512_fmadd_ps(broadcast, b1, acc[p * MR + i][1]);
            }
    }
    const ortx_gemm_epilogue *fused = fusable(epilogue);
    for (int i = 0; i < rows; i++) {
        float *row = c + i * ldc;
        for (int v = 0; v < vectors; v++) {
            __m512 value = acc[i][v];
            if (accumulate) value = _mm512_add_ps(_mm512_loadu_ps(row + 16 * v), value);
            if (fused) value = epilogue_register_avx512(value, fused, row0 + i, col0 + 16 * v);
            _mm512_storeu_ps(row + 16 * v, value);
        }
    }
    if (epilogue && !fused)
        ortx_gemm_epilogue_avx2(c, ldc, rows, vectors * ORTX_GEMM_NR, row0, col0, epilogue);
}

ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void tile_avx512(
    const int panels, const int vectors, int64_t kc, const float *a, const int64_t a_row_stride,
    const int64_t a_col_stride, const int64_t a_panel_stride, const float *b, float *c, int64_t ldc, int accumulate,
    const ortx_gemm_epilogue *epilogue, int64_t row0, int64_t col0) {
    tile_prefetching_avx512(panels, vectors, kc, a, a_row_stride, a_col_stride, a_panel_stride, b, c, ldc, accumulate,
                            epilogue, row0, col0, NULL, 0, panels * ORTX_GEMM_MR);
}

ORTX_TARGET_AVX512 static void micro_avx512(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                            int accumulate, const ortx_gemm_epilogue *epilogue, int64_t row0,
                                            int64_t col0) {
    tile_avx512(1, 1, kc, a, 1, ORTX_GEMM_MR, 0, b, c, ldc, accumulate, epilogue, row0, col0);
}

ORTX_TARGET_AVX512 static void micro_wide_avx512(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                                 int accumulate, const ortx_gemm_epilogue *epilogue, int64_t row0,
                                                 int64_t col0) {
    tile_avx512(1, 2, kc, a, 1, ORTX_GEMM_MR, 0, b, c, ldc, accumulate, epilogue, row0, col0);
}

ORTX_TARGET_AVX512 static void micro_rows_avx512(int64_t kc, const float *a, int64_t lda, const float *b, float *c,
                                                 int64_t ldc, int accumulate, const ortx_gemm_epilogue *epilogue,
                                                 int64_t row0, int64_t col0) {
    tile_avx512(1, 1, kc, a, lda, 1, 0, b, c, ldc, accumulate, epilogue, row0, col0);
}

ORTX_TARGET_AVX512 static void micro_rows_wide_avx512(int64_t kc, const float *a, int64_t lda, const float *b,
                                                      float *c, int64_t ldc, int accumulate,
                                                      const ortx_gemm_epilogue *epilogue, int64_t row0,
                                                      int64_t col0) {
    tile_avx512(1, 2, kc, a, lda, 1, 0, b, c, ldc, accumulate, epilogue, row0, col0);
}

/* Two adjacent A panels at once (2*MR x 2*NR, 24 accumulators): half the B loads per FMA of micro_wide's, for CPUs
 * with two FMA ports (gemm.h). */
ORTX_TARGET_AVX512 static void micro_tall_avx512(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                                 int accumulate, const ortx_gemm_epilogue *epilogue, int64_t row0,
                                                 int64_t col0) {
    tile_avx512(2, 2, kc, a, 1, ORTX_GEMM_MR, ORTX_GEMM_MR * kc, b, c, ldc, accumulate, epilogue, row0, col0);
}

/* micro_tall, also prefetching (to L2) `lines` cache lines from `prefetch` on, one per k step: a stream the
 * caller will read next (conv_pixel_rows.c's next weight panels), fetched while the tile computes instead of in a
 * burst that waits on the fill buffers. */
ORTX_TARGET_AVX512 static void micro_tall_prefetching_avx512(int64_t kc, const float *a, const float *b, float *c,
                                                             int64_t ldc, int accumulate, const char *prefetch,
                                                             int64_t lines) {
    tile_prefetching_avx512(2, 2, kc, a, 1, ORTX_GEMM_MR, ORTX_GEMM_MR * kc, b, c, ldc, accumulate, NULL, 0, 0,
                            prefetch, lines, 2 * ORTX_GEMM_MR);
}

/* micro_wide over the first `rows` (< MR) rows of its A panel only: a last panel of few rows (49 pixels = 8 panels
 * and one row) costs its rows, not a full panel's. */
ORTX_TARGET_AVX512 static void micro_wide_partial_avx512(int64_t kc, const float *a, const float *b, float *c,
                                                         int64_t ldc, int accumulate, int rows) {
#define ORTX_PARTIAL_TILE(r) \
    case r: tile_prefetching_avx512(1, 2, kc, a, 1, ORTX_GEMM_MR, 0, b, c, ldc, accumulate, NULL, 0, 0, NULL, 0, r); break;
    switch (rows) {
        ORTX_PARTIAL_TILE(1)
        ORTX_PARTIAL_TILE(2)
        ORTX_PARTIAL_TILE(3)
        ORTX_PARTIAL_TILE(4)
        ORTX_PARTIAL_TILE(5)
        default:
            tile_avx512(1, 2, kc, a, 1, ORTX_GEMM_MR, 0, b, c, ldc, accumulate, NULL, 0, 0);
    }
#undef ORTX_PARTIAL_TILE
}

ORTX_TARGET_AVX512 static void micro_rows_tall_avx512(int64_t kc, const float *a, int64_t lda, const float *b,
                                                      float *c, int64_t ldc, int accumulate,
                                                      const ortx_gemm_epilogue *epilogue, int64_t row0,
                                                      int64_t col0) {
    tile_avx512(2, 2, kc, a, lda, 1, ORTX_GEMM_MR * lda, b, c, ldc, accumulate, epilogue, row0, col0);
}

/* 16 rows at a time: masked loads of the 16-float source rows (cols lanes), one 16x16 register transpose, masked
 * stores of the rows' lanes into each destination column plane. */
ORTX_TARGET_AVX512 static void transpose_avx512(const float *src, int64_t ld_src, int64_t rows, int64_t cols,
                                                float *dst, int64_t ld_dst) {
    const __mmask16 columns = (__mmask16)((1u << cols) - 1u);
    for (int64_t i0 = 0; i0 < rows; i0 += 16) {
        int64_t count = rows - i0 < 16 ? rows - i0 : 16;
        __m512 r[16];
        for (int j = 0; j < 16; j++)
            r[j] = j < count ? _mm512_maskz_loadu_ps(columns, src + (i0 + j) * ld_src) : _mm512_setzero_ps();
        transpose16(r);
        const __mmask16 lanes = (__mmask16)((1u << count) - 1u);
        for (int c = 0; c < cols; c++) _mm512_mask_storeu_ps(dst + c * ld_dst + i0, lanes, r[c]);
    }
}

const ortx_gemm_isa ortx_gemm_isa_avx512 = {
    .name = "avx512",
    .micro = micro_avx512,
    .micro_wide = micro_wide_avx512,
    .micro_rows = micro_rows_avx512,
    .micro_rows_wide = micro_rows_wide_avx512,
    .micro_tall = micro_tall_avx512,
    .micro_rows_tall = micro_rows_tall_avx512,
    .micro_tall_prefetching = micro_tall_prefetching_avx512,
    .micro_wide_partial = micro_wide_partial_avx512,
    .epilogue = ortx_gemm_epilogue_avx2,
    .activation = ortx_activation_array_avx2,
    .transpose = transpose_avx512,
};

#else
/* Never selected off x86 (dispatch.c only picks AVX-512 after CPUID says so). */
const ortx_gemm_isa ortx_gemm_isa_avx512 = {.name = "avx512"};
#endif
