/* AVX-512 BF16 pieces of the bf16 GEMM (gemm_bf16.h): an 8x32 micro-kernel over two adjacent 16-column K-pair B
 * panels (16 zmm accumulators; per k pair 2 B loads, 8 broadcasts of an A pair, 16 vdpbf16ps, each 32
 * multiply-adds) and an 8x16 one for a lone panel; rounding to bf16 with vcvtne2ps2bf16 (the same bits as
 * ortx_bf16_from_float). The epilogue runs on the accumulators before the single store, alpha, bias and residual
 * through the AVX2 register epilogue on each 8-lane half (as gemm_avx512.c), so it matches ortx_gemm_epilogue_avx2
 * on edge tiles, and the activation on all 16 lanes (ortx_activation_avx512: the AVX2 one's bits; on two halves
 * BERT-like's FFN Gelu in the epilogue ran 1.07x the separate unary pass, on 16 lanes 0.98x). */
#include "activation_avx512.h"
#include "bf16_direct_store_avx512.h"
#include "gemm_avx2.h"
#include "gemm_bf16.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

/* The epilogue on one register; `plain` is *e without its activation, which runs on all 16 lanes at once
 * (ortx_activation_avx512: the AVX2 one's bits, at half the instructions of two 8-lane halves) */
ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) __m512 epilogue_register(
    __m512 v, const ortx_gemm_epilogue *e, const ortx_gemm_epilogue *plain, int64_t row, int64_t col0) {
    __m256 lo = _mm512_castps512_ps256(v), hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    epilogue_registers_avx2(&lo, &hi, plain, row, col0);
    v = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
    return ortx_activation_avx512(v, e->activation, e->param0, e->param1);
}

ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void tile_avx512_bf16(
    const int vectors, int64_t pairs, const uint16_t *a, const uint16_t *b, float *c, int64_t ldc, int accumulate,
    const ortx_gemm_epilogue *epilogue, int64_t row0, int64_t col0) {
    for (int i = 0; i < ORTX_BGEMM_MR; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        if (vectors == 2) _mm_prefetch((const char *)(c + i * ldc + 31), _MM_HINT_T0);
    }
    __m512 acc[ORTX_BGEMM_MR][2];
    for (int i = 0; i < ORTX_BGEMM_MR; i++)
        for (int v = 0; v < vectors; v++) acc[i][v] = _mm512_setzero_ps();
    const uint16_t *b_second = b + ORTX_GEMM_NR * 2 * pairs;
#pragma GCC unroll 2
    for (int64_t q = 0; q < pairs; q++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + q * ORTX_GEMM_NR * 2);
        __m512bh b1 = vectors == 2 ? (__m512bh)_mm512_loadu_si512(b_second + q * ORTX_GEMM_NR * 2) : b0;
        const uint16_t *aq = a + q * ORTX_BGEMM_MR * 2;
        for (int i = 0; i < ORTX_BGEMM_MR; i++) {
            int32_t pair;
            __builtin_memcpy(&pair, aq + 2 * i, sizeof(pair));
            __m512bh broadcast = (__m512bh)_mm512_set1_epi32(pair);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], broadcast, b0);
            if (vectors == 2) acc[i][1] = _mm512_dpbf16_ps(acc[i][1], broadcast, b1);
        }
    }
    /* broadcast residual columns need the scalar definition: store first, then the tile epilogue */
    const ortx_gemm_epilogue *fused =
        epilogue && !(epilogue->residual && epilogue->residual_col_stride != 1) ? epilogue : NULL;
    ortx_gemm_epilogue plain = {0};
    if (fused) {
        plain = *fused;
        plain.activation = ORTX_ACT_NONE;
    }
    for (int i = 0; i < ORTX_BGEMM_MR; i++) {
        float *row = c + i * ldc;
        for (int v = 0; v < vectors; v++) {
            __m512 value = acc[i][v];
            if (accumulate) value = _mm512_add_ps(_mm512_loadu_ps(row + 16 * v), value);
            if (fused) value = epilogue_register(value, fused, &plain, row0 + i, col0 + 16 * v);
            _mm512_storeu_ps(row + 16 * v, value);
        }
    }
    if (epilogue && !fused)
        ortx_gemm_epilogue_avx2(c, ldc, ORTX_BGEMM_MR, vectors * ORTX_GEMM_NR, row0, col0, epilogue);
}

ORTX_TARGET_AVX512_BF16 void ortx_bgemm_micro_avx512_bf16(int64_t pairs, const uint16_t *a, const uint16_t *b, float *c,
                                                      int64_t ldc, int accumulate, const ortx_gemm_epilogue *epilogue,
                                                      int64_t row0, int64_t col0) {
    tile_avx512_bf16(1, pairs, a, b, c, ldc, accumulate, epilogue, row0, col0);
}

ORTX_TARGET_AVX512_BF16 void ortx_bgemm_micro_wide_avx512_bf16(int64_t pairs, const uint16_t *a, const uint16_t *b,
                                                           float *c, int64_t ldc, int accumulate,
                                                           const ortx_gemm_epilogue *epilogue, int64_t row0,
                                                           int64_t col0) {
    tile_avx512_bf16(2, pairs, a, b, c, ldc, accumulate, epilogue, row0, col0);
}

/* Interleaves two rounded rows: vcvtne2ps2bf16 gives [first 0..15, second 0..15], vpermw pairs them up. */
ORTX_TARGET_AVX512_BF16 void ortx_bf16_pair_rows_avx512_bf16(const float *first, const float *second, int64_t count,
                                                          uint16_t *dst) {
    static const uint16_t interleave[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                            8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    __mmask16 mask = count >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << count) - 1u);
    __m512 lo = _mm512_maskz_loadu_ps(mask, first);
    __m512 hi = second ? _mm512_maskz_loadu_ps(mask, second) : _mm512_setzero_ps();
    __m512i rounded = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    _mm512_storeu_si512(dst, _mm512_permutexvar_epi16(_mm512_loadu_si512(interleave), rounded));
}

ORTX_TARGET_AVX512_BF16 void ortx_bf16_pair_run_avx512_bf16(const float *first, const float *second, int64_t count,
                                                         uint16_t *dst, int64_t chunk_stride, int pad) {
    static const uint16_t interleave[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                            8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i order = _mm512_loadu_si512(interleave);
    for (int64_t j = 0; j < count; j += 16, dst += chunk_stride) {
        int64_t left = count - j;
        __mmask16 mask = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
        __m512 lo = _mm512_maskz_loadu_ps(mask, first + j);
        __m512 hi = second ? _mm512_maskz_loadu_ps(mask, second + j) : _mm512_setzero_ps();
        __m512i words = _mm512_permutexvar_epi16(order, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        if (left >= 16 || pad)
            _mm512_storeu_si512(dst, words);
        else
            _mm512_mask_storeu_epi32(dst, mask, words);
    }
}

/* Step 1: masked loads; step 2: each 16 words from two zmm of a row, their even lanes taken by vpermt2ps; other
 * steps gather 16 values at a time into a buffer first. */
ORTX_TARGET_AVX512_BF16 void ortx_bf16_pair_run_strided_avx512_bf16(const float *first, const float *second,
                                                                 int64_t count, int64_t step, uint16_t *dst) {
    static const uint16_t interleave[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                            8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i order = _mm512_loadu_si512(interleave);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (int64_t j = 0; j < count; j += 16, dst += 32) {
        int64_t left = count - j < 16 ? count - j : 16;
        __mmask16 mask = (__mmask16)((1u << left) - 1u);
        __m512 lo, hi = _mm512_setzero_ps();
        if (step == 1) {
            lo = _mm512_maskz_loadu_ps(mask, first + j);
            if (second) hi = _mm512_maskz_loadu_ps(mask, second + j);
        } else if (step == 2) {  /* elements 2j .. 2j + 2(left - 1): 2 left - 1 values over two vectors */
            int64_t values = 2 * left - 1;
            __mmask16 low = values >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << values) - 1u);
            __mmask16 high = values > 16 ? (__mmask16)((1u << (values - 16)) - 1u) : 0;
            const float *row = first + 2 * j;
            lo = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(low, row), even, _mm512_maskz_loadu_ps(high, row + 16));
            if (second) {
                row = second + 2 * j;
                hi = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(low, row), even,
                                            _mm512_maskz_loadu_ps(high, row + 16));
            }
        } else {
            float gathered[2][16] __attribute__((aligned(64))) = {{0}};
            for (int64_t k = 0; k < left; k++) {
                gathered[0][k] = first[(j + k) * step];
                gathered[1][k] = second ? second[(j + k) * step] : 0.0f;
            }
            lo = _mm512_load_ps(gathered[0]);
            hi = _mm512_load_ps(gathered[1]);
        }
        __m512i words = _mm512_permutexvar_epi16(order, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        if (left == 16)
            _mm512_storeu_si512(dst, words);
        else
            _mm512_mask_storeu_epi32(dst, mask, words);
    }
}

ORTX_TARGET_AVX512_BF16 void ortx_bf16_convert_avx512_bf16(const float *src, int64_t count, uint16_t *dst) {
    int64_t i = 0;
    for (; i + 32 <= count; i += 32) {
        __m512bh rounded = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
        _mm512_storeu_si512(dst + i, (__m512i)rounded);
    }
    for (; i < count; i += 16) {
        int64_t left = count - i;
        __mmask16 mask = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
        __m256bh rounded = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, src + i));
        _mm256_mask_storeu_epi16(dst + i, mask, (__m256i)rounded);
    }
}

/* Stride 1: the 16 values of a row in a ymm, one masked load per output-row run; vpermw pairs the two rows up.
 * Stride 2 (or more): the run's elements at even positions of a zmm (element j at 2j), vpermt2w takes the even
 * ones of both rows, paired; larger strides gather element by element. */
ORTX_TARGET_AVX512_BF16 static inline __m512i strided_row(const uint16_t *row, const int32_t *at, int64_t column,
                                                          int64_t width, int64_t stride) {
    __m512i values = _mm512_setzero_si512();
    for (int64_t j = 0; j < 16;) {
        int64_t run = width - column < 16 - j ? width - column : 16 - j;
        uint32_t lanes = (uint32_t)(((1u << run) - 1u) << j);
        if (stride == 1) {
            values = _mm512_mask_loadu_epi16(values, (__mmask32)lanes, row + at[j] - j);
        } else {  /* element j at lane 2j: the even lanes of [2j, 2(j + run)) */
            uint32_t even = (uint32_t)((((uint64_t)1 << (2 * (j + run))) - ((uint64_t)1 << (2 * j))) & 0x55555555u);
            values = _mm512_mask_loadu_epi16(values, (__mmask32)even, row + at[j] - 2 * j);
        }
        j += run;
        column = 0;
    }
    return values;
}

ORTX_TARGET_AVX512_BF16 void ortx_bf16_interleave_avx512_bf16(const uint16_t *first, const uint16_t *second,
                                                           const int32_t *at, int64_t column, int64_t width,
                                                           int64_t stride, uint16_t *dst) {
    static const uint16_t pairs[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    static const uint16_t even_pairs[32] = {0, 32, 2, 34, 4, 36, 6, 38, 8, 40, 10, 42, 12, 44, 14, 46,
                                            16, 48, 18, 50, 20, 52, 22, 54, 24, 56, 26, 58, 28, 60, 30, 62};
    __m512i a = strided_row(first, at, column, width, stride);
    __m512i b = second ? strided_row(second, at, column, width, stride) : _mm512_setzero_si512();
    __m512i result;
    if (stride == 1) {
        __m512i both = _mm512_inserti64x4(a, _mm512_castsi512_si256(b), 1);
        result = _mm512_permutexvar_epi16(_mm512_loadu_si512(pairs), both);
    } else {
        result = _mm512_permutex2var_epi16(a, _mm512_loadu_si512(even_pairs), b);
    }
    _mm512_storeu_si512(dst, result);
}

/* The direct conv's tile (gemm_bf16.h's ortx_bf16_direct_tile_fn): the micro-kernel's loop with each k pair's B
 * words loaded straight from the channel-pair planes at x + offsets[q], then per vector the kept lanes packed
 * together (vcompressps in a register: the memory form is slow on Zen 4) and the epilogue in the order of
 * epilogue_registers_avx2 (alpha, bias_row, residual by fused multiply-add, activation), the residual read with the
 * store's mask so no element past the kept ones is touched. */
ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void direct_tile_avx512_bf16(
    const int vectors, int64_t pairs, const uint16_t *a, const uint32_t *x, const int32_t *offsets,
    const uint32_t *masks, const int64_t *at, float *c, int64_t ldc, int64_t rows, const ortx_gemm_epilogue *e,
    int64_t row0, int64_t prefetch) {
    __m512 acc[ORTX_BGEMM_MR][2];
    for (int i = 0; i < ORTX_BGEMM_MR; i++)
        for (int v = 0; v < vectors; v++) acc[i][v] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int64_t q = 0; q < pairs; q++) {
        const uint32_t *words = x + offsets[q];
        if (prefetch) {
            _mm_prefetch((const char *)(words + prefetch), _MM_HINT_T0);
            _mm_prefetch((const char *)(words + prefetch + 16), _MM_HINT_T0);
        }
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(words);
        __m512bh b1 = vectors == 2 ? (__m512bh)_mm512_loadu_si512(words + ORTX_GEMM_NR) : b0;
        const uint16_t *aq = a + q * ORTX_BGEMM_MR * 2;
        for (int i = 0; i < ORTX_BGEMM_MR; i++) {
            int32_t pair;
            __builtin_memcpy(&pair, aq + 2 * i, sizeof(pair));
            __m512bh broadcast = (__m512bh)_mm512_set1_epi32(pair);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], broadcast, b0);
            if (vectors == 2) acc[i][1] = _mm512_dpbf16_ps(acc[i][1], broadcast, b1);
        }
    }
    for (int v = 0; v < vectors; v++) {
        __mmask16 keep = (__mmask16)masks[v];
        int count = __builtin_popcount(masks[v]);
        if (!count) continue;
        __mmask16 store = (__mmask16)((1u << count) - 1u);
        for (int i = 0; i < ORTX_BGEMM_MR; i++) {
            if (i >= rows) break;
            ortx_bf16_direct_store_row(acc[i][v], keep, store, e, row0 + i, at[v], c + i * ldc + at[v]);
        }
    }
}

ORTX_TARGET_AVX512_BF16 void ortx_bf16_direct_tile_avx512_bf16(
    int64_t pairs, const uint16_t *a, const uint32_t *x, const int32_t *offsets, int vectors, const uint32_t *masks,
    const int64_t *at, float *c, int64_t ldc, int64_t rows, const ortx_gemm_epilogue *epilogue, int64_t row0,
    int64_t prefetch) {
    if (vectors == 2 && prefetch)
        direct_tile_avx512_bf16(2, pairs, a, x, offsets, masks, at, c, ldc, rows, epilogue, row0, prefetch);
    else if (vectors == 2)
        direct_tile_avx512_bf16(2, pairs, a, x, offsets, masks, at, c, ldc, rows, epilogue, row0, 0);
    else
        direct_tile_avx512_bf16(1, pairs, a, x, offsets, masks, at, c, ldc, rows, epilogue, row0, 0);
}

const ortx_bgemm_isa ortx_bgemm_isa_avx512_bf16 = {
    .name = "avx512_bf16",
    .micro = ortx_bgemm_micro_avx512_bf16,
    .micro_wide = ortx_bgemm_micro_wide_avx512_bf16,
    .pair_rows = ortx_bf16_pair_rows_avx512_bf16,
    .pair_run = ortx_bf16_pair_run_avx512_bf16,
    .pair_run_strided = ortx_bf16_pair_run_strided_avx512_bf16,
    .convert = ortx_bf16_convert_avx512_bf16,
    .interleave = ortx_bf16_interleave_avx512_bf16,
    .direct_tile = ortx_bf16_direct_tile_avx512_bf16,
};

#else
/* Never selected off x86 (ortx_bgemm_select_isa checks the CPU first). */
const ortx_bgemm_isa ortx_bgemm_isa_avx512_bf16 = {.name = "avx512_bf16"};
#endif
