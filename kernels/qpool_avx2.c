/* AVX2 paths of the int8 average pools (kernels/qpool.c; arithmetic in kernels/qpool.h): column sums over the
 * width 8 int32 lanes at a time and the interior outputs' w taps at stride 1 from unaligned loads of the column
 * sums; requantization stays scalar (AVX2 has no 64-bit arithmetic shift or min/max), as do tails and edges.
 * Global pools sum 32 bytes per vpsadbw. */
#include "isa.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

#include "qpool.h"

ORTX_TARGET_AVX2 void ortx_qpool_row_avx2(const uint8_t *const *rows, int64_t num_rows, int64_t padded_rows,
                                          const ortx_pool_params *p, const ortx_qpool_quant *q, const int32_t *table,
                                          int32_t *column_sums, int32_t *accumulators, void *y, int64_t y_offset) {
    const int64_t in_w = p->in[2];
    const uint8_t flip = q->input_signed ? 0x80 : 0;
    const __m128i flips = _mm_set1_epi8((char)flip);
    int64_t w = 0;
    for (; w + 8 <= in_w; w += 8) {
        __m256i sum = _mm256_setzero_si256();
        for (int64_t r = 0; r < num_rows; r++) {
            __m128i bytes = _mm_xor_si128(_mm_loadl_epi64((const __m128i *)(rows[r] + w)), flips);
            sum = _mm256_add_epi32(sum, _mm256_cvtepu8_epi32(bytes));
        }
        _mm256_storeu_si256((__m256i *)(column_sums + w), sum);
    }
    for (; w < in_w; w++) {
        int32_t sum = 0;
        for (int64_t r = 0; r < num_rows; r++) sum += (uint8_t)(rows[r][w] ^ flip);
        column_sums[w] = sum;
    }
    int64_t lo, hi;
    ortx_pool_interior(p, &lo, &hi);
    const int64_t kernel = p->kernel[2], dil = p->dilation[2], stride = p->stride[2], pad = p->pad_begin[2];
    const int64_t divisor = (p->count_include_pad ? padded_rows : num_rows) * kernel;
    if (num_rows == 0 || divisor <= 0 || hi <= lo || stride != 1) {
        ortx_qpool_columns(column_sums, num_rows, padded_rows, p, q, table, y, y_offset, 0, p->out[2]);
        return;
    }
    ortx_qpool_columns(column_sums, num_rows, padded_rows, p, q, table, y, y_offset, 0, lo);
    ortx_qpool_columns(column_sums, num_rows, padded_rows, p, q, table, y, y_offset, hi, p->out[2]);
    const int32_t offset = (int32_t)(num_rows * kernel * ortx_qpool_zero_u(q));
    int64_t ow = lo;
    for (; ow + 8 <= hi; ow += 8) {
        __m256i sum = _mm256_set1_epi32(-offset);
        for (int64_t j = 0; j < kernel; j++)
            sum = _mm256_add_epi32(sum, _mm256_loadu_si256((const __m256i *)(column_sums + ow - pad + j * dil)));
        _mm256_storeu_si256((__m256i *)(accumulators + ow), sum);
    }
    for (; ow < hi; ow++) {
        int32_t sum = -offset;
        for (int64_t j = 0; j < kernel; j++) sum += column_sums[ow - pad + j * dil];
        accumulators[ow] = sum;
    }
    for (ow = lo; ow < hi; ow++) ortx_qpool_store(q, table, accumulators[ow], divisor, y, y_offset + ow);
}

ORTX_TARGET_AVX2 int64_t ortx_qpool_byte_sum_avx2(const uint8_t *x, int64_t count, uint8_t flip) {
    const __m256i flips = _mm256_set1_epi8((char)flip), zero = _mm256_setzero_si256();
    __m256i sums = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 32 <= count; i += 32) {
        __m256i bytes = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(x + i)), flips);
        sums = _mm256_add_epi64(sums, _mm256_sad_epu8(bytes, zero));
    }
    int64_t total = _mm256_extract_epi64(sums, 0) + _mm256_extract_epi64(sums, 1) + _mm256_extract_epi64(sums, 2) +
                    _mm256_extract_epi64(sums, 3);
    for (; i < count; i++) total += (uint8_t)(x[i] ^ flip);
    return total;
}
#endif
