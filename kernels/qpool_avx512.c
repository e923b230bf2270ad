/* AVX-512 paths of the int8 average pools (kernels/qpool.c; arithmetic in kernels/qpool.h): column sums over the
 * width 16 int32 lanes at a time, the interior outputs' w taps from unaligned loads of the column sums (stride 1;
 * stride 2: the even lanes of two loads, vpermt2d; other strides scalar), and the interior's requantization in
 * 8 int64 lanes (vpmuldq, vpsraq, half-even correction, vpmovqb). Tails use masked loads and stores, full
 * vectors plain ones (masked stores are slow on Zen 4); edges (taps in the padding) take the portable code. */
#include "isa.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

#include "qpool.h"

typedef struct requant_constants {
    __m512i m0, mask_low, half, low, high, zero_y;
    __m128i shift;
} requant_constants;

/* Eight int32 accumulators (sign-extended in 64-bit lanes) -> clamp(round_half_even(acc * m0 / 2^shift)) + zy
 * in the low 8 bytes (int8 and uint8 outputs are both the low byte of each lane). */
ORTX_TARGET_AVX512 static inline __m128i requantize8(__m512i acc, const requant_constants *k) {
    const __m512i one = _mm512_set1_epi64(1);
    __m512i product = _mm512_mul_epi32(acc, k->m0);
    __m512i quotient = _mm512_sra_epi64(product, k->shift);
    __m512i remainder = _mm512_and_si512(product, k->mask_low);
    __mmask8 up = _mm512_cmpgt_epi64_mask(remainder, k->half) |
                  (_mm512_cmpeq_epi64_mask(remainder, k->half) & _mm512_test_epi64_mask(quotient, one));
    quotient = _mm512_mask_add_epi64(quotient, up, quotient, one);
    quotient = _mm512_add_epi64(_mm512_min_epi64(_mm512_max_epi64(quotient, k->low), k->high), k->zero_y);
    return _mm512_cvtepi64_epi8(quotient);
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
        if (mask == 0xFFFF) _mm512_storeu_si512(column_sums + w, sum);  /* masked stores are slow on Zen 4 */
        else _mm512_mask_storeu_epi32(column_sums + w, mask, sum);
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
            _mm512_storeu_si512(accumulators + ow, sum);  /* the scratch has 16 int32 of slack past out_w */
        }
    } else if (stride == 2) {
        /* 16 outputs read the even lanes of 32 consecutive column sums per tap */
        const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        for (int64_t ow = lo; ow < hi; ow += 16) {
            int64_t count = hi - ow >= 16 ? 16 : hi - ow;
            __mmask16 first = count >= 8 ? (__mmask16)0xFFFF : (__mmask16)((1u << (2 * count)) - 1);
            __mmask16 second = count > 8 ? (__mmask16)((1u << (2 * (count - 8))) - 1) : 0;
            __m512i sum = _mm512_set1_epi32(-offset);
            for (int64_t j = 0; j < kernel; j++) {
                const int32_t *source = column_sums + 2 * ow - pad + j * dil;
                __m512i a = _mm512_maskz_loadu_epi32(first, source), b = _mm512_maskz_loadu_epi32(second, source + 16);
                sum = _mm512_add_epi32(sum, _mm512_permutex2var_epi32(a, even, b));
            }
            _mm512_storeu_si512(accumulators + ow, sum);
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
    const requant_constants k = {
        _mm512_set1_epi64(entry[0]), _mm512_set1_epi64((1LL << entry[1]) - 1), _mm512_set1_epi64(1LL << (entry[1] - 1)),
        _mm512_set1_epi64(q->qmin - q->y_zero), _mm512_set1_epi64(q->qmax - q->y_zero), _mm512_set1_epi64(q->y_zero),
        _mm_cvtsi64_si128(entry[1])};
    uint8_t *out = (uint8_t *)y + y_offset;  /* int8 and uint8 outputs are both one byte per value */
    int64_t ow = lo;
    for (; ow + 16 <= hi; ow += 16) {
        __m512i acc = _mm512_loadu_si512(accumulators + ow);
        __m128i low_half = requantize8(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(acc)), &k);
        __m128i high_half = requantize8(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(acc, 1)), &k);
        _mm_storeu_si128((__m128i *)(out + ow), _mm_unpacklo_epi64(low_half, high_half));
    }
    for (; ow < hi; ow += 8) {
        __mmask8 mask = hi - ow >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (hi - ow)) - 1);
        __m128i bytes = requantize8(_mm512_cvtepi32_epi64(_mm256_maskz_loadu_epi32(mask, accumulators + ow)), &k);
        _mm_mask_storeu_epi8(out + ow, (__mmask16)mask, bytes);
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
