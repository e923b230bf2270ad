/* Portable pieces of the bf16 family (gemm_bf16.h's ISA table for CPUs without AVX512_BF16, or a lower ISA forced):
 * scalar rounding, and micro-kernels doing vdpbf16ps's additions in its order (odd product first) with fp32
 * multiply-adds; products of bf16 values are exact in fp32, so a fused multiply-add rounds exactly as the separate
 * add does, and both paths give the same bits. The direct conv's portable tile is in conv_bf16_direct.c.
 */

#include "gemm_bf16.h"

static void pair_rows_portable(const float *first, const float *second, int64_t count, uint16_t *dst) {
    for (int64_t j = 0; j < ORTX_GEMM_NR; j++) {
        dst[2 * j] = j < count ? ortx_bf16_from_float(first[j]) : 0;
        dst[2 * j + 1] = j < count && second ? ortx_bf16_from_float(second[j]) : 0;
    }
}

static void pair_run_portable(const float *first, const float *second, int64_t count, uint16_t *dst,
                              int64_t chunk_stride, int pad) {
    for (int64_t j0 = 0; j0 < count; j0 += ORTX_GEMM_NR, dst += chunk_stride) {
        int64_t width = count - j0 < ORTX_GEMM_NR && !pad ? count - j0 : ORTX_GEMM_NR;
        for (int64_t j = 0; j < width; j++) {
            dst[2 * j] = j0 + j < count ? ortx_bf16_from_float(first[j0 + j]) : 0;
            dst[2 * j + 1] = j0 + j < count && second ? ortx_bf16_from_float(second[j0 + j]) : 0;
        }
    }
}

static void pair_run_strided_portable(const float *first, const float *second, int64_t count, int64_t step,
                                      uint16_t *dst) {
    for (int64_t j = 0; j < count; j++) {
        dst[2 * j] = ortx_bf16_from_float(first[j * step]);
        dst[2 * j + 1] = second ? ortx_bf16_from_float(second[j * step]) : 0;
    }
}

static void convert_portable(const float *src, int64_t count, uint16_t *dst) {
    for (int64_t i = 0; i < count; i++) dst[i] = ortx_bf16_from_float(src[i]);
}

static void interleave_portable(const uint16_t *first, const uint16_t *second, const int32_t *at, int64_t column,
                                int64_t width, int64_t stride, uint16_t *dst) {
    (void)column, (void)width, (void)stride;
    for (int64_t j = 0; j < ORTX_GEMM_NR; j++) {
        dst[2 * j] = first[at[j]];
        dst[2 * j + 1] = second ? second[at[j]] : 0;
    }
}

static inline void tile_portable(const int vectors, int64_t pairs, const uint16_t *a, const uint16_t *b, float *c,
                                 int64_t ldc, int accumulate, const ortx_gemm_epilogue *epilogue, int64_t row0,
                                 int64_t col0) {
    enum { MR = ORTX_BGEMM_MR, NR = ORTX_GEMM_NR };
    float acc[MR][2 * NR] = {{0}};
    for (int v = 0; v < vectors; v++) {
        const uint16_t *panel = b + v * NR * 2 * pairs;
        for (int64_t q = 0; q < pairs; q++) {
            const uint16_t *aq = a + q * MR * 2, *bq = panel + q * NR * 2;
            for (int i = 0; i < MR; i++) {
                float a0 = ortx_bf16_to_float(aq[2 * i]), a1 = ortx_bf16_to_float(aq[2 * i + 1]);
                for (int j = 0; j < NR; j++) {
                    float sum = acc[i][v * NR + j] + a1 * ortx_bf16_to_float(bq[2 * j + 1]);
                    acc[i][v * NR + j] = sum + a0 * ortx_bf16_to_float(bq[2 * j]);
                }
            }
        }
    }
    int64_t width = vectors * NR;
    for (int i = 0; i < MR; i++)
        for (int64_t j = 0; j < width; j++) c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
    if (epilogue) ortx_gemm_select_isa()->epilogue(c, ldc, MR, width, row0, col0, epilogue);
}

static void micro_portable(int64_t pairs, const uint16_t *a, const uint16_t *b, float *c, int64_t ldc,
                           int accumulate, const ortx_gemm_epilogue *epilogue, int64_t row0, int64_t col0) {
    tile_portable(1, pairs, a, b, c, ldc, accumulate, epilogue, row0, col0);
}

static void micro_wide_portable(int64_t pairs, const uint16_t *a, const uint16_t *b, float *c, int64_t ldc,
                                int accumulate, const ortx_gemm_epilogue *epilogue, int64_t row0, int64_t col0) {
    tile_portable(2, pairs, a, b, c, ldc, accumulate, epilogue, row0, col0);
}

const ortx_bgemm_isa ortx_bgemm_isa_portable = {
    .name = "portable",
    .micro = micro_portable,
    .micro_wide = micro_wide_portable,
    .pair_rows = pair_rows_portable,
    .pair_run = pair_run_portable,
    .pair_run_strided = pair_run_strided_portable,
    .convert = convert_portable,
    .interleave = interleave_portable,
    .direct_tile = ortx_bf16_direct_tile_portable,
};
