/* Internal declarations of the "band" family (band_gemm.c): the job one task sees and the per-ISA row-block
 * functions the dispatcher picks from. */
#ifndef ORTX_BAND_GEMM_H
#define ORTX_BAND_GEMM_H

#include <stdint.h>

#define ORTX_BAND_PANEL 16 /* columns per panel: one AVX-512 vector, two AVX2 vectors */

typedef struct ortx_band_job {
    int64_t M, N, K, panels;
    const float *a;          /* [M, K] row-major */
    const float *values;     /* panel after panel: count rows of ORTX_BAND_PANEL floats */
    const int64_t *panel;    /* [panels][3]: first row of W, row count, offset (in rows) into values */
    float *y;                /* [M, N] row-major */
} ortx_band_job;

/* Rows [row_begin, row_end) of Y, every panel. */
void ortx_band_rows_f32_avx2(const ortx_band_job *job, int64_t row_begin, int64_t row_end);
void ortx_band_rows_f32_avx512(const ortx_band_job *job, int64_t row_begin, int64_t row_end);

#endif
