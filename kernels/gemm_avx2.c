/* AVX2+FMA pieces of the packed SGEMM: the 6x16 micro-kernel (12 accumulators, 2 B loads and 6 broadcasts per
 * k step, as in BLIS's Haswell/Zen kernel; also reading a raw row-major A in place), the vectorised epilogue and
 * the vectorised activations, which the conv family reuses (the activation itself is inline in gemm_avx2.h). */
#include "gemm_avx2.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

#include "activation.h"

ORTX_TARGET_AVX2 void ortx_activation_array_avx2(float *data, int64_t count, int activation, float param0,
                                                 float param1) {
    if (activation == ORTX_ACT_NONE) return;
    int64_t i = 0;
    for (; i + 8 <= count; i += 8)
        _mm256_storeu_ps(data + i, ortx_activation_avx2(_mm256_loadu_ps(data + i), activation, param0, param1));
    for (; i < count; i++) data[i] = ortx_activation_scalar(activation, data[i], param0, param1);
}

/* The epilogue for one activation code; `activation` is a constant at every call site below, so each case
 * compiles to its own loop with the switch folded away. Tails use masked loads/stores. */
ORTX_TARGET_AVX2 static inline __attribute__((always_inline)) void epilogue_rows_avx2(
    float *c, int64_t ldc, int64_t rows, int64_t cols, int64_t row0, int64_t col0, const ortx_gemm_epilogue *e,
    const int activation) {
    const float *bias_row = e->bias_row, *bias_col = e->bias_col ? e->bias_col + col0 : NULL;
    const float *residual = e->residual;
    const int64_t residual_row_stride = e->residual_row_stride;
    const int scale_alpha = e->alpha != 1.0f, scale_residual = e->residual_scale != 1.0f;
    const __m256 alpha = _mm256_set1_ps(e->alpha), scale = _mm256_set1_ps(e->residual_scale);
    const float param0 = e->param0, param1 = e->param1;
    int32_t lanes[8];
    for (int i = 0; i < 8; i++) lanes[i] = i < cols % 8 ? -1 : 0;
    const __m256i tail = _mm256_loadu_si256((const __m256i *)lanes);
    for (int64_t i = 0; i < rows; i++) {
        float *row = c + i * ldc;
        const __m256 row_bias = _mm256_set1_ps(bias_row ? bias_row[row0 + i] : 0.0f);
        const float *res = residual ? residual + (row0 + i) * residual_row_stride + col0 : NULL;
        for (int64_t j = 0; j < cols; j += 8) {
            int partial = j + 8 > cols;
            __m256 v = partial ? _mm256_maskload_ps(row + j, tail) : _mm256_loadu_ps(row + j);
            if (scale_alpha) v = _mm256_mul_ps(v, alpha);
            if (bias_row) v = _mm256_add_ps(v, row_bias);
            if (bias_col)
                v = _mm256_add_ps(v, partial ? _mm256_maskload_ps(bias_col + j, tail) : _mm256_loadu_ps(bias_col + j));
            if (res) {
                __m256 r = partial ? _mm256_maskload_ps(res + j, tail) : _mm256_loadu_ps(res + j);
                v = scale_residual ? _mm256_fmadd_ps(scale, r, v) : _mm256_add_ps(v, r);
            }
            v = ortx_activation_avx2(v, activation, param0, param1);
            if (partial) {
                _mm256_maskstore_ps(row + j, tail, v);
            } else {
                _mm256_storeu_ps(row + j, v);
            }
        }
    }
}

ORTX_TARGET_AVX2 void ortx_gemm_epilogue_avx2(float *c, int64_t ldc, int64_t rows, int64_t cols, int64_t row0,
                                              int64_t col0, const ortx_gemm_epilogue *e) {
    if (e->alpha == 1.0f && !e->bias_row && !e->bias_col && !e->residual && e->activation == ORTX_ACT_NONE) return;
    if (e->residual && e->residual_col_stride != 1) {  /* broadcast residual columns: the scalar definition */
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++)
                c[i * ldc + j] = ortx_gemm_epilogue_scalar(e, c[i * ldc + j], row0 + i, col0 + j);
        return;
    }
    switch (e->activation) {
        case ORTX_ACT_RELU: epilogue_rows_avx2(c, ldc, rows, cols, row0, col0, e, ORTX_ACT_RELU); break;
        case ORTX_ACT_LEAKY_RELU: epilogue_rows_avx2(c, ldc, rows, cols, row0, col0, e, ORTX_ACT_LEAKY_RELU); break;
        case ORTX_ACT_CLIP: epilogue_rows_avx2(c, ldc, rows, cols, row0, col0, e, ORTX_ACT_CLIP); break;
        case ORTX_ACT_SIGMOID: epilogue_rows_avx2(c, ldc, rows, cols, row0, col0, e, ORTX_ACT_SIGMOID); break;
        case ORTX_ACT_HARD_SIGMOID:
            epilogue_rows_avx2(c, ldc, rows, cols, row0, col0, e, ORTX_ACT_HARD_SIGMOID);
            break;
        case ORTX_ACT_HARD_SWISH: epilogue_rows_avx2(c, ldc, rows, cols, row0, col0, e, ORTX_ACT_HARD_SWISH); break;
        case ORTX_ACT_HARD_SWISH_AFFINE:
            epilogue_rows_avx2(c, ldc, rows, cols, row0, col0, e, ORTX_ACT_HARD_SWISH_AFFINE);
            break;
        case ORTX_ACT_TANH: epilogue_rows_avx2(c, ldc, rows, cols, row0, col0, e, ORTX_ACT_TANH); break;
        case ORTX_ACT_GELU: epilogue_rows_avx2(c, ldc, rows, cols, row0, col0, e, ORTX_ACT_GELU); break;
        default: epilogue_rows_avx2(c, ldc, rows, cols, row0, col0, e, ORTX_ACT_NONE); break;
    }
}

/* The 6x16 tile: A element (i, k) at a[i*a_row_stride + k*a_col_stride] (packed panels: 1, MR; a raw row-major A
 * read in place: its row stride, 1); the strides are constants at both calls below. */
ORTX_TARGET_AVX2 static inline __attribute__((always_inline)) void tile_avx2(
    int64_t kc, const float *a, const int64_t a_row_stride, const int64_t a_col_stride, const float *b, float *c,
    int64_t ldc, int accumulate, const ortx_gemm_epilogue *epilogue, int64_t row0, int64_t col0) {
    for (int i = 0; i < ORTX_GEMM_MR; i++) {  /* start fetching the output lines; the k loop hides the latency */
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 15), _MM_HINT_T0);
    }
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps();
    __m256 c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps();
    __m256 c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        __m256 a0 = _mm256_broadcast_ss(a), a1 = _mm256_broadcast_ss(a + a_row_stride);
        c00 = _mm256_fmadd_ps(a0, b0, c00);
        c01 = _mm256_fmadd_ps(a0, b1, c01);
        c10 = _mm256_fmadd_ps(a1, b0, c10);
        c11 = _mm256_fmadd_ps(a1, b1, c11);
        a0 = _mm256_broadcast_ss(a + 2 * a_row_stride);
        a1 = _mm256_broadcast_ss(a + 3 * a_row_stride);
        c20 = _mm256_fmadd_ps(a0, b0, c20);
        c21 = _mm256_fmadd_ps(a0, b1, c21);
        c30 = _mm256_fmadd_ps(a1, b0, c30);
        c31 = _mm256_fmadd_ps(a1, b1, c31);
        a0 = _mm256_broadcast_ss(a + 4 * a_row_stride);
        a1 = _mm256_broadcast_ss(a + 5 * a_row_stride);
        c40 = _mm256_fmadd_ps(a0, b0, c40);
        c41 = _mm256_fmadd_ps(a0, b1, c41);
        c50 = _mm256_fmadd_ps(a1, b0, c50);
        c51 = _mm256_fmadd_ps(a1, b1, c51);
        a += a_col_stride;
        b += ORTX_GEMM_NR;
    }
    /* Broadcast residual columns need the scalar definition: store first, then the tile epilogue. */
    const ortx_gemm_epilogue *fused =
        epilogue && !(epilogue->residual && epilogue->residual_col_stride != 1) ? epilogue : NULL;
#define ORTX_STORE_ROW(i, lo, hi)                                                      \
    do {                                                                               \
        float *row = c + (i) * ldc;                                                    \
        if (accumulate) {                                                              \
            lo = _mm256_add_ps(_mm256_loadu_ps(row), lo);                              \
            hi = _mm256_add_ps(_mm256_loadu_ps(row + 8), hi);                          \
        }                                                                              \
        if (fused) epilogue_registers_avx2(&lo, &hi, fused, row0 + (i), col0);        \
        _mm256_storeu_ps(row, lo);                                                     \
        _mm256_storeu_ps(row + 8, hi);                                                 \
    } while (0)
    ORTX_STORE_ROW(0, c00, c01);
    ORTX_STORE_ROW(1, c10, c11);
    ORTX_STORE_ROW(2, c20, c21);
    ORTX_STORE_ROW(3, c30, c31);
    ORTX_STORE_ROW(4, c40, c41);
    ORTX_STORE_ROW(5, c50, c51);
#undef ORTX_STORE_ROW
    if (epilogue && !fused) ortx_gemm_epilogue_avx2(c, ldc, ORTX_GEMM_MR, ORTX_GEMM_NR, row0, col0, epilogue);
}

ORTX_TARGET_AVX2 static void micro_avx2(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                        int accumulate, const ortx_gemm_epilogue *epilogue, int64_t row0,
                                        int64_t col0) {
    tile_avx2(kc, a, 1, ORTX_GEMM_MR, b, c, ldc, accumulate, epilogue, row0, col0);
}

ORTX_TARGET_AVX2 static void micro_rows_avx2(int64_t kc, const float *a, int64_t lda, const float *b, float *c,
                                             int64_t ldc, int accumulate, const ortx_gemm_epilogue *epilogue,
                                             int64_t row0, int64_t col0) {
    tile_avx2(kc, a, lda, 1, b, c, ldc, accumulate, epilogue, row0, col0);
}

const ortx_gemm_isa ortx_gemm_isa_avx2 = {
    .name = "avx2",
    .micro = micro_avx2,
    .micro_wide = NULL,
    .micro_rows = micro_rows_avx2,
    .micro_rows_wide = NULL,
    .epilogue = ortx_gemm_epilogue_avx2,
    .activation = ortx_activation_array_avx2,
    .transpose = ortx_gemm_transpose_portable,  /* no 8-lane instance yet */
};

#else
/* Never selected off x86 (dispatch.c only picks AVX2 after CPUID says so). */
const ortx_gemm_isa ortx_gemm_isa_avx2 = {.name = "avx2"};
#endif
