/* AVX2 rows of band_gemm_f32 (band_gemm.c): band_gemm_avx512.c with a panel as two 8-float vectors and 4 rows per
 * block (8 accumulators of 16 registers). */
#include "band_gemm.h"
#include "isa.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

#define ORTX_BAND_ROWS_AVX2 4

ORTX_TARGET_AVX2 static inline __m256i tail_mask(int64_t remaining) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)remaining), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

ORTX_TARGET_AVX2 __attribute__((always_inline)) static inline void band_block(const ortx_band_job *job, int64_t m,
                                                                               const int rows) {
    for (int64_t p = 0; p < job->panels; p++) {
        const int64_t *panel = job->panel + 3 * p;
        const float *w = job->values + panel[2] * ORTX_BAND_PANEL;
        const float *a = job->a + m * job->K + panel[0];
        __m256 low[ORTX_BAND_ROWS_AVX2], high[ORTX_BAND_ROWS_AVX2];
        for (int r = 0; r < rows; r++) low[r] = high[r] = _mm256_setzero_ps();
        for (int64_t i = 0; i < panel[1]; i++) {
            __m256 w_low = _mm256_loadu_ps(w + i * ORTX_BAND_PANEL), w_high = _mm256_loadu_ps(w + i * ORTX_BAND_PANEL + 8);
            for (int r = 0; r < rows; r++) {
                __m256 value = _mm256_broadcast_ss(a + r * job->K + i);
                low[r] = _mm256_fmadd_ps(value, w_low, low[r]);
                high[r] = _mm256_fmadd_ps(value, w_high, high[r]);
            }
        }
        int64_t n0 = p * ORTX_BAND_PANEL, valid = job->N - n0 < ORTX_BAND_PANEL ? job->N - n0 : ORTX_BAND_PANEL;
        __m256i mask_low = tail_mask(valid), mask_high = tail_mask(valid - 8);
        for (int r = 0; r < rows; r++) {
            float *y = job->y + (m + r) * job->N + n0;
            _mm256_maskstore_ps(y, mask_low, low[r]);
            _mm256_maskstore_ps(y + 8, mask_high, high[r]);
        }
    }
}

ORTX_TARGET_AVX2 void ortx_band_rows_f32_avx2(const ortx_band_job *job, int64_t row_begin, int64_t row_end) {
    int64_t m = row_begin;
    for (; m + ORTX_BAND_ROWS_AVX2 <= row_end; m += ORTX_BAND_ROWS_AVX2) band_block(job, m, ORTX_BAND_ROWS_AVX2);
    for (; m < row_end; m++) band_block(job, m, 1);
}

#else
void ortx_band_rows_f32_avx2(const ortx_band_job *job, int64_t row_begin, int64_t row_end) {
    (void)job; (void)row_begin; (void)row_end;
}
#endif
