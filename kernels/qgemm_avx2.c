/* AVX2 micro-kernel of the int8 GEMM without VNNI. vpmaddubsw (u8 x s8 pairs summed into int16) saturates: 255 *
 * 127 * 2 = 64770 > 32767. So both operands are widened to int16 and multiplied with vpmaddwd (int16 pairs summed
 * into int32, exact for |values| <= 255): each 32-bit lane's bytes (k0 k1 k2 k3) split into the words (k0, k2)
 * (mask 0x00ff) and (k1, k3) (shift right 8), the weights' likewise with sign extension (shift left then
 * arithmetic right). Per 8 rows x 8 pixels and quad of k: one B load, three ops to split it, and per row one
 * broadcast, two shifts to sign-extend, two vpmaddwd and two adds. */
#include "isa.h"
#include "qgemm.h"

#if ORTX_HAVE_X86
#include <immintrin.h>
#include <string.h>

ORTX_TARGET_AVX2 static void micro_avx2(int64_t k4, const int8_t *a, const uint8_t *b, const int64_t *quad_offsets,
                                        int32_t *acc) {
    const __m256i low_bytes = _mm256_set1_epi16(0x00ff);
    for (int column = 0; column < ORTX_QGEMM_NB; column += 8) {
        __m256i c[ORTX_QGEMM_MR];
        for (int m = 0; m < ORTX_QGEMM_MR; m++) c[m] = _mm256_setzero_si256();
        for (int64_t q = 0; q < k4; q++) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(b + quad_offsets[q] + column * 4));
            __m256i even = _mm256_and_si256(x, low_bytes), odd = _mm256_srli_epi16(x, 8);
            const int8_t *aq = a + q * ORTX_QGEMM_MR * 4;
            for (int m = 0; m < ORTX_QGEMM_MR; m++) {
                int32_t quad;
                memcpy(&quad, aq + 4 * m, 4);
                __m256i w = _mm256_set1_epi32(quad);
                __m256i w_even = _mm256_srai_epi16(_mm256_slli_epi16(w, 8), 8), w_odd = _mm256_srai_epi16(w, 8);
                c[m] = _mm256_add_epi32(c[m], _mm256_madd_epi16(even, w_even));
                c[m] = _mm256_add_epi32(c[m], _mm256_madd_epi16(odd, w_odd));
            }
        }
        for (int m = 0; m < ORTX_QGEMM_MR; m++) _mm256_storeu_si256((__m256i *)(acc + m * ORTX_QGEMM_NB + column), c[m]);
    }
}

/* Sparse tiles: per block, row and 16 pixels, its stored quads as micro_avx2's k quads (exact int16 pairs). */
ORTX_TARGET_AVX2 static void sparse_micro_avx2(const ortx_qsparse *w, int64_t panel, int64_t m0, int64_t rows,
                                               const uint8_t *b, int64_t block_stride, int64_t blocks,
                                               const int64_t *quad_offsets, int accumulate, int32_t *tiles) {
    const __m256i low_bytes = _mm256_set1_epi16(0x00ff);
    const int32_t *row_ptr = w->row_ptr + panel * w->rows + m0;
    for (int64_t i = 0; i < blocks; i++, b += block_stride) {
        for (int64_t r = 0; r < rows; r++) {
            int32_t *acc = tiles + i * ORTX_QGEMM_MR * ORTX_QGEMM_NB;
            int64_t begin = row_ptr[r], end = row_ptr[r + 1];
            for (int column = 0; column < ORTX_QGEMM_NB; column += 16) {
                int32_t *out = acc + r * ORTX_QGEMM_NB + column;
                __m256i c0 = _mm256_setzero_si256(), c1 = c0;
                if (accumulate) {
                    c0 = _mm256_loadu_si256((const __m256i *)out);
                    c1 = _mm256_loadu_si256((const __m256i *)(out + 8));
                }
                for (int64_t e = begin; e < end; e++) {
                    const uint8_t *bq = b + quad_offsets[w->cols[e]] + column * 4;
                    int32_t quad;
                    memcpy(&quad, w->values + 4 * e, 4);
                    __m256i wq = _mm256_set1_epi32(quad);
                    __m256i w_even = _mm256_srai_epi16(_mm256_slli_epi16(wq, 8), 8), w_odd = _mm256_srai_epi16(wq, 8);
                    __m256i x0 = _mm256_loadu_si256((const __m256i *)bq);
                    __m256i x1 = _mm256_loadu_si256((const __m256i *)(bq + 32));
                    c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(_mm256_and_si256(x0, low_bytes), w_even));
                    c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(_mm256_srli_epi16(x0, 8), w_odd));
                    c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(_mm256_and_si256(x1, low_bytes), w_even));
                    c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(_mm256_srli_epi16(x1, 8), w_odd));
                }
                _mm256_storeu_si256((__m256i *)out, c0);
                _mm256_storeu_si256((__m256i *)(out + 8), c1);
            }
        }
    }
}

const ortx_qgemm_isa ortx_qgemm_isa_avx2 = {.name = "avx2", .micro = micro_avx2,
                                            .sparse_micro = sparse_micro_avx2,
                                            .pack_run = ortx_qgemm_pack_run_portable,
                                            .epilogue = ortx_qgemm_epilogue_portable,
                                            .depthwise_row = ortx_qdepthwise_row_portable};

#else
const ortx_qgemm_isa ortx_qgemm_isa_avx2 = {.name = "avx2", .micro = ortx_qgemm_micro_portable,
                                            .sparse_micro = ortx_qgemm_sparse_micro_portable,
                                            .pack_run = ortx_qgemm_pack_run_portable,
                                            .epilogue = ortx_qgemm_epilogue_portable,
                                            .depthwise_row = ortx_qdepthwise_row_portable};
#endif
