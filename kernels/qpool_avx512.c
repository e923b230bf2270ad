/* AVX-512 paths of the int8 average pools (kernels/qpool.c; arithmetic in kernels/qpool.h): column sums over the
 * width 16 int32 lanes at a time, the interior outputs' w taps at stride 1 from unaligned loads of the column
 * sums, and the interior's requantization in 8 int64 lanes (vpmuldq, vpsraq, half-even correction, vpmovqb).
 * Tails use masks; edges (outputs with taps in the padding) take the portable code. */
#include "isa.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

#include "qpool.h"

/* Eight int32 accumulators (sign-extended in 64-bit lanes) -> clamp(round_half_even(acc * m0 / 2^shift)) + zy,
 * stored as bytes at out under `mask`. */
ORTX_TARGET_AVX512 static inline void requantize8(__m512i acc, __m512i m0, __m128i shift, __m512i mask_low,
                                                  __m512i half, __m512i low, __m512i high, __m512i zero_y,
                                                  void *out, __mmask8 mask) {
    const __m512i one = _mm512_set1_epi64(1);
    __m512i product = _mm512_mul_epi32(acc, m0);
    __m512i quotient = _mm512_sra_epi64(product, shift);
    __m512i remainder = _mm512_and_si512(product, mask_low);
    __mmask8 up = _mm512_cmpgt_epi64_mask(remainder, half) |
                  (_mm512_cmpeq_epi64_mask(remainder, half) & _mm512_test_epi64_mask(quotient, one));
    quotient = _mm512_mask_add_epi64(quotient, up, quotient, one);
    quotient = _mm512_add_epi64(_mm512_min_epi64(_mm512_max_epi64(quotient, low), high), zero_y);
    _mm512_mask_cvtepi64_storeu_epi8(out, mask, quotient);
}

ORTX_TARGET_AVX512 void ortx_qpool_row_avx512(const uint8_t *const *rows, int64_t num_rows, int64_t padded_rows,
                                              const ortx_pool_params *p, const ortx_qpool_quant *q,
                                              const int32_t *table, int32_t *column_sums, int32_t *accumulators,
                                              void *y, int64_t y_offset) {
    const int64_t in_w = p->in[2];
    const __m128i flip = _mm_set1_epi8(q->input_signed ? (char)0x80 : 0);
    /* Step 1: column sums */
    for (int64_t w = 0; w < in_w; w += 16) {
        __mmask16 mask = in_w - w >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (in_w - w)) - 1);
        __m512i sum = _mm512_setzero_si512();
        for (int64_t r = 0; r < num_rows; r++) {
            __m128i bytes = _mm_xor_si128(_mm_maskz_loadu_epi8(mask, rows[r] + w), flip);
            sum = _mm512_add_epi32(sum, _mm512_cvtepu8_epi32(bytes));
        }
        _mm512_mask_storeu_epi32(column_sums + w, mask, sum);
    }
    int64_t lo, hi;
    ortx_pool_interior(p, &lo, &hi);
    const int64_t kernel = p->kernel[2], dil = p->dilation[2], stride = p->stride[2], pad = p->pad_begin[2];
    const int64_t taps = num_rows * kernel, divisor = (p->count_include_pad ? padded_rows : num_rows) * kernel;
    if (num_rows == 0 || divisor <= 0 || hi <= lo) {
        ortx_qpool_columns(column_sums, num_rows, padded_rows, p, q, table, y, y_offset, 0, p->out[2]);
        return;
    }
    ortx_qpool_columns(column_sums, num_rows, padded_rows, p, q, table, y, y_offset, 0, lo);
    ortx_qpool_columns(column_sums, num_rows, padded_rows, p, q, table, y, y_offset, hi, p->out[2]);
    /* Step 2: interior accumulators (every tap inside the row), minus taps x zu */
    const int32_t offset = (int32_t)(taps * ortx_qpool_zero_u(q));
    if (stride == 1) {
        for (int64_t ow = lo; ow < hi; ow += 16) {
            __mmask16 mask = hi - ow >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (hi - ow)) - 1);
            __m512i sum = _mm512_set1_epi32(-offset);
            for (int64_t j = 0; j < kernel; j++)
                sum = _mm512_add_epi32(sum, _mm512_maskz_loadu_epi32(mask, column_sums + ow - pad + j * dil));
            _mm512_mask_storeu_epi32(accumulators + ow, mask, sum);
        }
    } else {
        for (int64_t ow = lo; ow < hi; ow++) {
            const int32_t *source = column_sums + ow * stride - pad;
            int32_t sum = -offset;
            for (int64_t j = 0; j < kernel; j++) sum += source[j * dil];
            accumulators[ow] = sum;
        }
    }
    /* Step 3: requantize the interior (one divisor) */
    const int32_t *entry = table + 2 * (divisor - q->count_base);
    const __m512i m0 = _mm512_set1_epi64(entry[0]);
    const __m128i shift = _mm_cvtsi64_si128(entry[1]);
    const __m512i mask_low = _mm512_set1_epi64((1LL << entry[1]) - 1), half = _mm512_set1_epi64(1LL << (entry[1] - 1));
    const __m512i low = _mm512_set1_epi64(q->qmin - q->y_zero), high = _mm512_set1_epi64(q->qmax - q->y_zero);
    const __m512i zero_y = _mm512_set1_epi64(q->y_zero);
    uint8_t *out = (uint8_t *)y + y_offset;  /* int8 and uint8 outputs are both one byte per value */
    for (int64_t ow = lo; ow < hi; ow += 8) {
        __mmask8 mask = hi - ow >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (hi - ow)) - 1);
        __m512i acc = _mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(mask, accumulators + ow));
        requantize8(acc, m0, shift, mask_low, half, low, high, zero_y, out + ow, mask);
    }
}

ORTX_TARGET_AVX512 int64_t ortx_qpool_byte_sum_avx512(const uint8_t *x, int64_t count, uint8_t flip) {
    const __m512i flips = _mm512_set1_epi8((char)flip), zero = _mm512_setzero_si512();
    __m512i sums = _mm512_setzero_si512();
    int64_t i = 0;
    for (; i + 64 <= count; i += 64)
        sums = _mm512_add_epi64(sums, _mm512_sad_epu8(_mm512_xor_si512(_mm512_loadu_si512(x + i), flips), zero));
    if (i < count) {
        __mmask64 mask = (__mmask64)((1ULL << (count - i)) - 1);  /* count - i < 64 */
        __m512i bytes = _mm512_maskz_mov_epi8(mask, _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, x + i), flips));
        sums = _mm512_add_epi64(sums, _mm512_sad_epu8(bytes, zero));
    }
    return _mm512_reduce_add_epi64(sums);
}
#endif
