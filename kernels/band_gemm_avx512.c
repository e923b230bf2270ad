/* AVX-512 rows of band_gemm_f32 (band_gemm.c): a panel is one vector; ROWS rows of A share each W row load,
 * their A values broadcast from memory into the multiply-add. */
#include "band_gemm.h"
#include "isa.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

#define ORTX_BAND_ROWS_AVX512 6

ORTX_TARGET_AVX512 __attribute__((always_inline)) static inline void band_block(const ortx_band_job *job, int64_t m,
                                                                                 const int rows) {
    for (int64_t p = 0; p < job->panels; p++) {
        const int64_t *panel = job->panel + 3 * p;
        const float *w = job->values + panel[2] * ORTX_BAND_PANEL;
        const float *a = job->a + m * job->K + panel[0];
        __m512 acc[ORTX_BAND_ROWS_AVX512];
        for (int r = 0; r < rows; r++) acc[r] = _mm512_setzero_ps();
        for (int64_t i = 0; i < panel[1]; i++) {
            __m512 weights = _mm512_loadu_ps(w + i * ORTX_BAND_PANEL);
            for (int r = 0; r < rows; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * job->K + i]), weights, acc[r]);
        }
        int64_t n0 = p * ORTX_BAND_PANEL, valid = job->N - n0 < ORTX_BAND_PANEL ? job->N - n0 : ORTX_BAND_PANEL;
        __mmask16 mask = (__mmask16)((1u << valid) - 1u);
        for (int r = 0; r < rows; r++) _mm512_mask_storeu_ps(job->y + (m + r) * job->N + n0, mask, acc[r]);
    }
}

ORTX_TARGET_AVX512 void ortx_band_rows_f32_avx512(const ortx_band_job *job, int64_t row_begin, int64_t row_end) {
    int64_t m = row_begin;
    for (; m + ORTX_BAND_ROWS_AVX512 <= row_end; m += ORTX_BAND_ROWS_AVX512) band_block(job, m, ORTX_BAND_ROWS_AVX512);
    for (; m < row_end; m++) band_block(job, m, 1);
}

#else
void ortx_band_rows_f32_avx512(const ortx_band_job *job, int64_t row_begin, int64_t row_end) {
    (void)job; (void)row_begin; (void)row_end;
}
#endif
