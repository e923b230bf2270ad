/* AVX2 variants of the layout family (selected by layout.c after dispatch.c has checked the CPU).
 *
 * ortx_upsample_row_f32_avx2: dst[x] = src[x / factor] for x < in_w * factor (nearest-neighbour upsampling by an
 * integer factor, the Resize of PP-OCR's detection FPN). Factor 2 duplicates lanes with unpack + cross-lane
 * permute; factors 4 and 8 store broadcasts; other factors fall back to scalar stores.
 */
#include "isa.h"
#include "layout_internal.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

/* Writes each produced vector to `copies` output rows `row_stride` floats apart (the rows nearest-resizing maps
 * to the same source row), so repeated rows cost stores only. */
ORTX_TARGET_AVX2 void ortx_upsample_row_f32_avx2(float *dst, int64_t row_stride, int64_t copies, const float *src,
                                                 int64_t in_w, int64_t factor) {
    int64_t x = 0;
    if (factor == 2) {
        for (; x + 8 <= in_w; x += 8) {
            __m256 v = _mm256_loadu_ps(src + x);
            __m256 lo = _mm256_unpacklo_ps(v, v); /* v0 v0 v1 v1 | v4 v4 v5 v5 */
            __m256 hi = _mm256_unpackhi_ps(v, v); /* v2 v2 v3 v3 | v6 v6 v7 v7 */
            __m256 first = _mm256_permute2f128_ps(lo, hi, 0x20), second = _mm256_permute2f128_ps(lo, hi, 0x31);
            for (int64_t r = 0; r < copies; r++) {
                _mm256_storeu_ps(dst + r * row_stride + 2 * x, first);
                _mm256_storeu_ps(dst + r * row_stride + 2 * x + 8, second);
            }
        }
    } else if (factor == 4) {
        for (; x < in_w; x++) {
            __m128 v = _mm_set1_ps(src[x]);
            for (int64_t r = 0; r < copies; r++) _mm_storeu_ps(dst + r * row_stride + 4 * x, v);
        }
    } else if (factor == 8) {
        for (; x < in_w; x++) {
            __m256 v = _mm256_set1_ps(src[x]);
            for (int64_t r = 0; r < copies; r++) _mm256_storeu_ps(dst + r * row_stride + 8 * x, v);
        }
    }
    for (; x < in_w; x++)
        for (int64_t r = 0; r < copies; r++)
            for (int64_t i = 0; i < factor; i++) dst[r * row_stride + x * factor + i] = src[x];
}
#endif
