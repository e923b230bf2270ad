/* AVX2 depthwise conv: one output channel plane from the zero-padded column phases of conv.h. Each output row
 * is computed 32 columns at a time (4 accumulators, so every broadcast weight feeds 4 FMAs; 3x3 kernels keep all
 * nine weights in registers), then 8 at a time,
 * then one masked vector for the tail; bias starts the accumulators and residual + activation run before the
 * store. Loads never leave the phase rows because their width has 8 floats of slack.
 * Also the direct dense conv tile (conv.h, conv.c Case 1b). */
#include "conv.h"
#include "gemm.h"
#include "gemm_avx2.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

/* Rows of one output plane; TAPS > 0 is the compile-time tap count (3x3: 9), which lets the compiler keep every
 * broadcast weight in a register; TAPS == 0 reads the weights from memory for any kernel size. */
ORTX_TARGET_AVX2 static inline __attribute__((always_inline)) void depthwise_rows_avx2(
    const ortx_conv_params *p, const float *planes, const float *weights, float bias, const float *residual,
    float *output, const int64_t *tap_offsets, int64_t taps, const int TAPS) {
    ortx_depthwise_geometry g = ortx_depthwise_geometry_of(p);
    int64_t OW = p->out_width;
    int activation = (int)p->activation;
    const __m256 start = _mm256_set1_ps(bias);
    int64_t tail = OW % 8;
    int32_t lanes[8];
    for (int i = 0; i < 8; i++) lanes[i] = i < tail ? -1 : 0;
    const __m256i tail_mask = _mm256_loadu_si256((const __m256i *)lanes);
    __m256 w[TAPS > 0 ? TAPS : 1];
    if (TAPS > 0)
        for (int t = 0; t < TAPS; t++) w[t] = _mm256_broadcast_ss(weights + t);
#define ORTX_WEIGHT(t) (TAPS > 0 ? w[t] : _mm256_broadcast_ss(weights + (t)))
    int64_t count = TAPS > 0 ? TAPS : taps;
    for (int64_t oy = 0; oy < p->out_height; oy++) {
        float *out = output + oy * OW;
        const float *res = residual ? residual + oy * OW : NULL;
        const float *row_base = planes + oy * p->stride_height * g.phase_width;
        int64_t ox = 0;
        for (; ox + 32 <= OW; ox += 32) {
            __m256 a0 = start, a1 = start, a2 = start, a3 = start;
#pragma GCC unroll 9
            for (int64_t t = 0; t < count; t++) {
                const float *in = row_base + ox + tap_offsets[t];
                __m256 wt = ORTX_WEIGHT(t);
                a0 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(in), a0);
                a1 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(in + 8), a1);
                a2 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(in + 16), a2);
                a3 = _mm256_fmadd_ps(wt, _mm256_loadu_ps(in + 24), a3);
            }
            if (res) {
                a0 = _mm256_add_ps(a0, _mm256_loadu_ps(res + ox));
                a1 = _mm256_add_ps(a1, _mm256_loadu_ps(res + ox + 8));
                a2 = _mm256_add_ps(a2, _mm256_loadu_ps(res + ox + 16));
                a3 = _mm256_add_ps(a3, _mm256_loadu_ps(res + ox + 24));
            }
            _mm256_storeu_ps(out + ox, ortx_activation_avx2(a0, activation, p->param0, p->param1));
            _mm256_storeu_ps(out + ox + 8, ortx_activation_avx2(a1, activation, p->param0, p->param1));
            _mm256_storeu_ps(out + ox + 16, ortx_activation_avx2(a2, activation, p->param0, p->param1));
            _mm256_storeu_ps(out + ox + 24, ortx_activation_avx2(a3, activation, p->param0, p->param1));
        }
        for (; ox < OW; ox += 8) {
            int partial = ox + 8 > OW;
            __m256 a0 = start;
#pragma GCC unroll 9
            for (int64_t t = 0; t < count; t++)
                a0 = _mm256_fmadd_ps(ORTX_WEIGHT(t), _mm256_loadu_ps(row_base + ox + tap_offsets[t]), a0);
            if (res) a0 = _mm256_add_ps(a0, partial ? _mm256_maskload_ps(res + ox, tail_mask) : _mm256_loadu_ps(res + ox));
            a0 = ortx_activation_avx2(a0, activation, p->param0, p->param1);
            if (partial) {
                _mm256_maskstore_ps(out + ox, tail_mask, a0);
            } else {
                _mm256_storeu_ps(out + ox, a0);
            }
        }
    }
#undef ORTX_WEIGHT
}

ORTX_TARGET_AVX2 void ortx_depthwise_plane_avx2(const ortx_conv_params *p, const float *planes, const float *weights,
                                               float bias, const float *residual, float *output) {
    ortx_depthwise_geometry g = ortx_depthwise_geometry_of(p);
    int64_t KH = p->kernel_height, KW = p->kernel_width, sw = p->stride_width;
    /* Offset of each tap in the phase planes, computed once (no divisions in the loops). */
    int64_t taps = KH * KW, tap_offsets[taps];
    for (int64_t ky = 0; ky < KH; ky++)
        for (int64_t kx = 0; kx < KW; kx++) {
            int64_t tap = kx * p->dilation_width;
            tap_offsets[ky * KW + kx] = ky * p->dilation_height * g.phase_width +
                                        (tap % sw) * g.padded_rows * g.phase_width + tap / sw;
        }
    if (taps == 9) {
        depthwise_rows_avx2(p, planes, weights, bias, residual, output, tap_offsets, taps, 9);
    } else {
        depthwise_rows_avx2(p, planes, weights, bias, residual, output, tap_offsets, taps, 0);
    }
}

/* Direct conv tile (conv.h): the gemm micro-kernel's 6x16 register block (12 accumulators, 6 broadcasts of
 * packed weights and 2 loads per k), with B loaded in place from the phase planes at x + offsets[k]. A's packed
 * panels change address at each KC block boundary (gemm.h layout); the accumulators carry over. */
ORTX_TARGET_AVX2 static inline __attribute__((always_inline)) void direct_tile_avx2(
    int64_t K, int64_t k_begin, int64_t k_end, const float *weights, int64_t m_padded, int64_t row0, const float *x,
    const int32_t *offsets, const float *partial, float *c, int64_t ldc, int64_t rows,
    const ortx_gemm_epilogue *epilogue, int64_t col0, const int prefetch) {
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps();
    __m256 c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps();
    __m256 c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    for (int64_t k0 = k_begin; k0 < k_end; k0 += ORTX_GEMM_KC) {
        int64_t kc = K - k0 < ORTX_GEMM_KC ? K - k0 : ORTX_GEMM_KC;
        const float *a = weights + k0 * m_padded + row0 * kc;
        const int32_t *offset = offsets + k0;
#pragma GCC unroll 4
        for (int64_t k = 0; k < kc; k++) {
            const float *b = x + offset[k];
            if (prefetch) _mm_prefetch((const char *)(b + 2 * ORTX_GEMM_NR), _MM_HINT_T0);
            __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
            __m256 a0 = _mm256_broadcast_ss(a), a1 = _mm256_broadcast_ss(a + 1);
            c00 = _mm256_fmadd_ps(a0, b0, c00);
            c01 = _mm256_fmadd_ps(a0, b1, c01);
            c10 = _mm256_fmadd_ps(a1, b0, c10);
            c11 = _mm256_fmadd_ps(a1, b1, c11);
            a0 = _mm256_broadcast_ss(a + 2);
            a1 = _mm256_broadcast_ss(a + 3);
            c20 = _mm256_fmadd_ps(a0, b0, c20);
            c21 = _mm256_fmadd_ps(a0, b1, c21);
            c30 = _mm256_fmadd_ps(a1, b0, c30);
            c31 = _mm256_fmadd_ps(a1, b1, c31);
            a0 = _mm256_broadcast_ss(a + 4);
            a1 = _mm256_broadcast_ss(a + 5);
            c40 = _mm256_fmadd_ps(a0, b0, c40);
            c41 = _mm256_fmadd_ps(a0, b1, c41);
            c50 = _mm256_fmadd_ps(a1, b0, c50);
            c51 = _mm256_fmadd_ps(a1, b1, c51);
            a += ORTX_GEMM_MR;
        }
    }
    /* Broadcast residual columns need the scalar definition: store first, then the tile epilogue. */
    const ortx_gemm_epilogue *fused =
        epilogue && !(epilogue->residual && epilogue->residual_col_stride != 1) ? epilogue : NULL;
#define ORTX_STORE_ROW(i, lo, hi)                                                      \
    do {                                                                               \
        if ((i) < rows) {                                                              \
            float *row = c + (i) * ldc;                                                \
            if (partial) {                                                             \
                lo = _mm256_add_ps(_mm256_loadu_ps(partial + (i) * ORTX_GEMM_NR), lo);     \
                hi = _mm256_add_ps(_mm256_loadu_ps(partial + (i) * ORTX_GEMM_NR + 8), hi); \
            }                                                                          \
            if (fused) epilogue_registers_avx2(&lo, &hi, fused, row0 + (i), col0);    \
            _mm256_storeu_ps(row, lo);                                                 \
            _mm256_storeu_ps(row + 8, hi);                                             \
        }                                                                              \
    } while (0)
    ORTX_STORE_ROW(0, c00, c01);
    ORTX_STORE_ROW(1, c10, c11);
    ORTX_STORE_ROW(2, c20, c21);
    ORTX_STORE_ROW(3, c30, c31);
    ORTX_STORE_ROW(4, c40, c41);
    ORTX_STORE_ROW(5, c50, c51);
#undef ORTX_STORE_ROW
    if (epilogue && !fused) ortx_gemm_epilogue_avx2(c, ldc, rows, ORTX_GEMM_NR, row0, col0, epilogue);
}

/* The first row panel of a tile also prefetches the next tile's B lines: the planes are read at K scattered
 * rows, too many streams for the hardware prefetcher, and the later panels find them in L1/L2. */
ORTX_TARGET_AVX2 void ortx_conv_direct_tile_avx2(int64_t K, int64_t k_begin, int64_t k_end, const float *weights,
                                                int64_t m_padded, int64_t row0, const float *x,
                                                const int32_t *offsets, const float *partial, float *c, int64_t ldc,
                                                int64_t rows, const ortx_gemm_epilogue *epilogue, int64_t col0) {
    if (row0 == 0) {
        direct_tile_avx2(K, k_begin, k_end, weights, m_padded, row0, x, offsets, partial, c, ldc, rows, epilogue,
                         col0, 1);
    } else {
        direct_tile_avx2(K, k_begin, k_end, weights, m_padded, row0, x, offsets, partial, c, ldc, rows, epilogue,
                         col0, 0);
    }
}

#else
void ortx_depthwise_plane_avx2(const ortx_conv_params *p, const float *planes, const float *weights, float bias,
                               const float *residual, float *output) {
    /* Never selected off x86; kept so the ISA table links everywhere. */
    ortx_depthwise_plane_portable(p, planes, weights, bias, residual, output);
}

void ortx_conv_direct_tile_avx2(int64_t K, int64_t k_begin, int64_t k_end, const float *weights, int64_t m_padded,
                                int64_t row0, const float *x, const int32_t *offsets, const float *partial, float *c,
                                int64_t ldc, int64_t rows, const struct ortx_gemm_epilogue *epilogue, int64_t col0) {
    ortx_conv_direct_tile_portable(K, k_begin, k_end, weights, m_padded, row0, x, offsets, partial, c, ldc, rows,
                                   epilogue, col0);
}
#endif
