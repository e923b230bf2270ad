/* Portable C pieces of the packed SGEMM: a 6x16 micro-kernel written so the compiler can vectorise it for the
 * baseline ISA, and the scalar epilogue. Used when the CPU has neither AVX2+FMA nor AVX-512. */
#include "activation.h"
#include "gemm.h"

static void epilogue_portable(float *c, int64_t ldc, int64_t rows, int64_t cols, int64_t row0, int64_t col0,
                              const ortx_gemm_epilogue *epilogue);

/* A element (i, k) at a[i*a_row_stride + k*a_col_stride]: packed panels (1, MR) or a raw row-major A (lda, 1). */
static inline void tile_portable(int64_t kc, const float *a, int64_t a_row_stride, int64_t a_col_stride,
                                 const float *b, float *c, int64_t ldc, int accumulate,
                                 const ortx_gemm_epilogue *epilogue, int64_t row0, int64_t col0) {
    enum { MR = ORTX_GEMM_MR, NR = ORTX_GEMM_NR };
    float acc[MR][NR] = {{0}};
    for (int64_t k = 0; k < kc; k++) {
        const float *ak = a + k * a_col_stride, *bk = b + k * NR;
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++) acc[i][j] += ak[i * a_row_stride] * bk[j];
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
    if (epilogue) epilogue_portable(c, ldc, MR, NR, row0, col0, epilogue);
}

static void micro_portable(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int accumulate,
                           const ortx_gemm_epilogue *epilogue, int64_t row0, int64_t col0) {
    tile_portable(kc, a, 1, ORTX_GEMM_MR, b, c, ldc, accumulate, epilogue, row0, col0);
}

static void micro_rows_portable(int64_t kc, const float *a, int64_t lda, const float *b, float *c, int64_t ldc,
                                int accumulate, const ortx_gemm_epilogue *epilogue, int64_t row0, int64_t col0) {
    tile_portable(kc, a, lda, 1, b, c, ldc, accumulate, epilogue, row0, col0);
}

static void epilogue_portable(float *c, int64_t ldc, int64_t rows, int64_t cols, int64_t row0, int64_t col0,
                              const ortx_gemm_epilogue *epilogue) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            c[i * ldc + j] = ortx_gemm_epilogue_scalar(epilogue, c[i * ldc + j], row0 + i, col0 + j);
}

static void activation_portable(float *data, int64_t count, int activation, float param0, float param1) {
    if (activation == ORTX_ACT_NONE) return;
    for (int64_t i = 0; i < count; i++) data[i] = ortx_activation_scalar(activation, data[i], param0, param1);
}

void ortx_gemm_transpose_portable(const float *src, int64_t ld_src, int64_t rows, int64_t cols, float *dst,
                                  int64_t ld_dst) {
    for (int64_t i = 0; i < rows; i++, src += ld_src)
        for (int64_t c = 0; c < cols; c++) dst[c * ld_dst + i] = src[c];
}

const ortx_gemm_isa ortx_gemm_isa_portable = {
    .name = "portable",
    .micro = micro_portable,
    .micro_wide = NULL,
    .micro_rows = micro_rows_portable,
    .micro_rows_wide = NULL,
    .epilogue = epilogue_portable,
    .activation = activation_portable,
    .transpose = ortx_gemm_transpose_portable,
};
