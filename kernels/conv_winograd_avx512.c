/* AVX-512 Winograd transforms (conv_winograd.c), one vector per run of up to 16 tiles in a tile row.
 *
 * Input: per input channel, the run's n input rows are loaded as contiguous vectors (masked to the image, so the
 * padding reads as zeros), B^T is applied down the rows on whole vectors, then each result row is split by the tile
 * stride m into the n phase vectors (lane l = tile l's column j) with two-source permutes, and B^T applied across
 * them. Output: A^T down and across in registers, then the m phase vectors of each output row are interleaved back
 * into contiguous pixels and stored masked to the image. No gathers or scatters: on this Xeon a 16-lane gather
 * cost more than the rest of the input transform together (measured: the gather version's input transform took
 * 1.7x the GEMM's time on 64 @56x56).
 * The sums are the portable transforms' factored (shared differences first), so the two agree to rounding. */
#include "activation_avx512.h"
#include "conv_winograd.h"
#include "gemm_avx2.h"
#include "isa.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

#define INLINE __attribute__((always_inline)) static inline

/* B^T d (n = m + 2 vectors in, n out) and A^T s (n in, m out), written out so every coefficient is an immediate
 * operand: shared differences first (as NNPACK factors them). */
ORTX_TARGET_AVX512 INLINE void apply_bt(const __m512 *d, __m512 *r, const int m) {
    if (m == 4) {
        const __m512 four = _mm512_set1_ps(4.0f), five = _mm512_set1_ps(5.0f), two = _mm512_set1_ps(2.0f);
        __m512 a = _mm512_fnmadd_ps(four, d[2], d[4]), b = _mm512_fnmadd_ps(four, d[1], d[3]);
        __m512 c = _mm512_sub_ps(d[4], d[2]), e = _mm512_mul_ps(two, _mm512_sub_ps(d[3], d[1]));
        r[0] = _mm512_fmadd_ps(four, d[0], _mm512_fnmadd_ps(five, d[2], d[4]));
        r[1] = _mm512_add_ps(a, b);
        r[2] = _mm512_sub_ps(a, b);
        r[3] = _mm512_add_ps(c, e);
        r[4] = _mm512_sub_ps(c, e);
        r[5] = _mm512_fmadd_ps(four, d[1], _mm512_fnmadd_ps(five, d[3], d[5]));
    } else {
        r[0] = _mm512_sub_ps(d[0], d[2]);
        r[1] = _mm512_add_ps(d[1], d[2]);
        r[2] = _mm512_sub_ps(d[2], d[1]);
        r[3] = _mm512_sub_ps(d[1], d[3]);
    }
}

ORTX_TARGET_AVX512 INLINE void apply_at(const __m512 *s, __m512 *y, const int m) {
    if (m == 4) {
        __m512 s12 = _mm512_add_ps(s[1], s[2]), d12 = _mm512_sub_ps(s[1], s[2]);
        __m512 s34 = _mm512_add_ps(s[3], s[4]), d34 = _mm512_sub_ps(s[3], s[4]);
        y[0] = _mm512_add_ps(_mm512_add_ps(s[0], s12), s34);
        y[1] = _mm512_fmadd_ps(_mm512_set1_ps(2.0f), d34, d12);
        y[2] = _mm512_fmadd_ps(_mm512_set1_ps(4.0f), s34, s12);
        y[3] = _mm512_add_ps(_mm512_fmadd_ps(_mm512_set1_ps(8.0f), d34, d12), s[5]);
    } else {
        y[0] = _mm512_add_ps(_mm512_add_ps(s[0], s[1]), s[2]);
        y[1] = _mm512_sub_ps(_mm512_sub_ps(s[1], s[2]), s[3]);
    }
}

/* Lanes [lo, hi) of a 16-lane mask, clamped. */
static inline __mmask16 lanes(int64_t lo, int64_t hi) {
    if (lo < 0) lo = 0;
    if (hi > 16) hi = 16;
    if (hi <= lo) return 0;
    return (__mmask16)((((uint32_t)1 << hi) - 1) & ~(((uint32_t)1 << lo) - 1));
}

ORTX_TARGET_AVX512 INLINE __m512 shift_in(__m512 low, __m512 high, int lanes_in) {
    /* lanes [lanes_in, 16) of low then lanes [0, lanes_in) of high (valignd) */
    return _mm512_castsi512_ps(lanes_in == 1
                                   ? _mm512_alignr_epi32(_mm512_castps_si512(high), _mm512_castps_si512(low), 1)
                                   : _mm512_alignr_epi32(_mm512_castps_si512(high), _mm512_castps_si512(low), 2));
}

/* row: a result row over x (vectors of 16 floats, x = 0 at the run's first tile's first input column); out[j] lane
 * l = row element l * m + j, j < n. */
ORTX_TARGET_AVX512 INLINE void split_phases(const __m512 *row, __m512 *out, const int m) {
    if (m == 4) {
        /* two rounds of even/odd splits: pairs of vectors, then the pairs' results (8 permutes for 4 phases) */
        const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        __m512 even01 = _mm512_permutex2var_ps(row[0], even, row[1]), odd01 = _mm512_permutex2var_ps(row[0], odd, row[1]);
        __m512 even23 = _mm512_permutex2var_ps(row[2], even, row[3]), odd23 = _mm512_permutex2var_ps(row[2], odd, row[3]);
        out[0] = _mm512_permutex2var_ps(even01, even, even23);
        out[2] = _mm512_permutex2var_ps(even01, odd, even23);
        out[1] = _mm512_permutex2var_ps(odd01, even, odd23);
        out[3] = _mm512_permutex2var_ps(odd01, odd, odd23);
        /* columns 4 and 5 of tile l are columns 0 and 1 of tile l + 1; the last lane's come from row[4] */
        out[4] = shift_in(out[0], row[4], 1);
        out[5] = shift_in(out[1], shift_in(row[4], row[4], 1), 1);
    } else {
        for (int k = 0; k < 2; k++) {
            const __m512i index = _mm512_setr_epi32(k, 2 + k, 4 + k, 6 + k, 8 + k, 10 + k, 12 + k, 14 + k, 16 + k,
                                                    18 + k, 20 + k, 22 + k, 24 + k, 26 + k, 28 + k, 30 + k);
            out[k] = _mm512_permutex2var_ps(row[0], index, row[1]);
        }
        out[2] = shift_in(out[0], row[2], 1);
        out[3] = shift_in(out[1], shift_in(row[2], row[2], 1), 1);
    }
}

/* The inverse for output rows: phase[j] lane l = pixel l * m + j -> row vectors of 16 contiguous pixels (m of
 * them). */
ORTX_TARGET_AVX512 INLINE void join_phases(const __m512 *phase, __m512 *row, const int m) {
    const __m512i pairs_low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i pairs_high = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    if (m == 4) {
        const __m512i quads_low = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
        const __m512i quads_high = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
        __m512d p01[2], p23[2];
        p01[0] = _mm512_castps_pd(_mm512_permutex2var_ps(phase[0], pairs_low, phase[1]));
        p01[1] = _mm512_castps_pd(_mm512_permutex2var_ps(phase[0], pairs_high, phase[1]));
        p23[0] = _mm512_castps_pd(_mm512_permutex2var_ps(phase[2], pairs_low, phase[3]));
        p23[1] = _mm512_castps_pd(_mm512_permutex2var_ps(phase[2], pairs_high, phase[3]));
        for (int h = 0; h < 2; h++) {
            row[2 * h] = _mm512_castpd_ps(_mm512_permutex2var_pd(p01[h], quads_low, p23[h]));
            row[2 * h + 1] = _mm512_castpd_ps(_mm512_permutex2var_pd(p01[h], quads_high, p23[h]));
        }
    } else {
        row[0] = _mm512_permutex2var_ps(phase[0], pairs_low, phase[1]);
        row[1] = _mm512_permutex2var_ps(phase[0], pairs_high, phase[1]);
    }
}

ORTX_TARGET_AVX512 INLINE void input_m(const ortx_wino_geometry *g, const ortx_wino_run *run, const float *x,
                                       int64_t ic0, int64_t ic1, float *v, const int m) {
    const int n = m + 2, vectors = m + 1;  /* 16 tiles span 16 m + 2 input columns */
    const ortx_conv_params *p = g->p;
    const int64_t width = p->in_width, plane = p->in_height * width, cin = p->in_channels;
    const int64_t position_floats = cin * ORTX_WINO_GROUP_COLUMNS;
    const int64_t iy = run->ty * m - p->pad_top, ix = run->tx0 * m - p->pad_left;
    __mmask16 column_mask[5];
    for (int u = 0; u < vectors; u++) column_mask[u] = lanes(-ix - 16 * u, width - ix - 16 * u);
    column_mask[vectors - 1] &= 0x3;
    int row_inside[6];
    for (int i = 0; i < n; i++) row_inside[i] = iy + i >= 0 && iy + i < p->in_height;
    /* the run's lanes in the group's first and second panel */
    const __mmask16 first_panel = lanes(0, 16 - run->column0) & lanes(0, run->count);
    const __mmask16 second_panel = lanes(16 - run->column0, run->count);
    for (int64_t ic = ic0; ic < ic1; ic++) {
        const float *xp = x + ic * plane + ix;  /* may point before the row: only masked lanes are read there */
        __m512 down[6][5];  /* B^T down the rows, per column vector */
        for (int u = 0; u < vectors; u++) {
            __m512 rows[6];
            for (int i = 0; i < n; i++)
                rows[i] = row_inside[i] ? _mm512_maskz_loadu_ps(column_mask[u], xp + (iy + i) * width + 16 * u)
                                        : _mm512_setzero_ps();
            __m512 transformed[6];
            apply_bt(rows, transformed, m);
            for (int r = 0; r < n; r++) down[r][u] = transformed[r];
        }
        int64_t k0 = ic / ORTX_GEMM_KC * ORTX_GEMM_KC, kc = cin - k0 < ORTX_GEMM_KC ? cin - k0 : ORTX_GEMM_KC;
        float *dst0 = v + k0 * ORTX_WINO_GROUP_COLUMNS + (ic - k0) * ORTX_GEMM_NR + run->column0;
        float *dst1 = dst0 + ORTX_GEMM_NR * kc - ORTX_GEMM_NR;
        for (int r = 0; r < n; r++) {
            __m512 phase[6];
            __m512 values[6];
            split_phases(down[r], phase, m);
            apply_bt(phase, values, m);
            for (int c = 0; c < n; c++) {
                __m512 value = values[c];
                _mm512_mask_storeu_ps(dst0 + (r * n + c) * position_floats, first_panel, value);
                if (second_panel) _mm512_mask_storeu_ps(dst1 + (r * n + c) * position_floats, second_panel, value);
            }
        }
    }
}

/* conv.h's group epilogue on 16 pixels of channel `row` from pixel `pixel` (lanes in mask), in registers: the
 * gemm family's activations, on each 8-lane half. */
ORTX_TARGET_AVX512 INLINE __m512 epilogue_vector(__m512 v, const ortx_gemm_epilogue *e, int64_t row, int64_t pixel,
                                                 __mmask16 mask) {
    if (e->alpha != 1.0f) v = _mm512_mul_ps(v, _mm512_set1_ps(e->alpha));
    if (e->bias_row) v = _mm512_add_ps(v, _mm512_set1_ps(e->bias_row[row]));
    if (e->residual) {
        __m512 r = _mm512_maskz_loadu_ps(mask, e->residual + row * e->residual_row_stride + pixel);
        v = e->residual_scale == 1.0f ? _mm512_add_ps(v, r) : _mm512_fmadd_ps(_mm512_set1_ps(e->residual_scale), r, v);
    }
    if (e->activation == ORTX_ACT_RELU) return _mm512_max_ps(v, _mm512_setzero_ps());
    if (e->activation != ORTX_ACT_NONE) {
        __m256 low = ortx_activation_avx2(_mm512_castps512_ps256(v), e->activation, e->param0, e->param1);
        __m256 high = ortx_activation_avx2(_mm512_extractf32x8_ps(v, 1), e->activation, e->param0, e->param1);
        v = _mm512_insertf32x8(_mm512_castps256_ps512(low), high, 1);
    }
    return v;
}

ORTX_TARGET_AVX512 INLINE void output_m(const ortx_wino_geometry *g, const ortx_wino_run *run, const float *c_local,
                                        int64_t position_stride, int64_t rows, int64_t row0, float *y,
                                        const ortx_gemm_epilogue *epilogue, const int m) {
    const int n = m + 2;
    const ortx_conv_params *p = g->p;
    const int64_t width = p->out_width, plane = p->out_height * width;
    const int64_t oy = run->ty * m, ox = run->tx0 * m;
    int64_t valid = run->count * m < width - ox ? run->count * m : width - ox;  /* output columns of the run */
    __mmask16 column_mask[4];
    for (int u = 0; u < m; u++) column_mask[u] = lanes(-16 * u, valid - 16 * u);
    int out_rows = p->out_height - oy < m ? (int)(p->out_height - oy) : m;
    for (int64_t r_oc = 0; r_oc < rows; r_oc++) {
        const float *c = c_local + r_oc * ORTX_WINO_GROUP_COLUMNS + run->column0;
        __m512 down[4][6];  /* A^T down the positions' rows, per position column */
        for (int cc = 0; cc < n; cc++) {
            __m512 column[6];
            for (int r = 0; r < n; r++) column[r] = _mm512_loadu_ps(c + (r * n + cc) * position_stride);
            __m512 transformed[4];
            apply_at(column, transformed, m);
            for (int i = 0; i < m; i++) down[i][cc] = transformed[i];
        }
        float *yp = y + (row0 + r_oc) * plane + oy * width + ox;
        for (int i = 0; i < out_rows; i++) {
            __m512 phase[4], pixels[4];
            apply_at(down[i], phase, m);
            join_phases(phase, pixels, m);
            for (int u = 0; u < m; u++) {
                if (!column_mask[u]) continue;
                __m512 value = pixels[u];
                if (epilogue)
                    value = epilogue_vector(value, epilogue, row0 + r_oc, (oy + i) * width + ox + 16 * u,
                                            column_mask[u]);
                _mm512_mask_storeu_ps(yp + i * width + 16 * u, column_mask[u], value);
            }
        }
    }
}

ORTX_TARGET_AVX512 static void input_avx512(const ortx_wino_geometry *g, const ortx_wino_run *run, const float *x,
                                            int64_t ic0, int64_t ic1, float *v) {
    if (g->m == 4) input_m(g, run, x, ic0, ic1, v, 4);
    else input_m(g, run, x, ic0, ic1, v, 2);
}

ORTX_TARGET_AVX512 static void output_avx512(const ortx_wino_geometry *g, const ortx_wino_run *run,
                                             const float *c_local, int64_t position_stride, int64_t rows,
                                             int64_t row0, float *y, const ortx_gemm_epilogue *epilogue) {
    if (g->m == 4) output_m(g, run, c_local, position_stride, rows, row0, y, epilogue, 4);
    else output_m(g, run, c_local, position_stride, rows, row0, y, epilogue, 2);
}

const ortx_wino_isa ortx_wino_avx512 = {input_avx512, output_avx512};

/* conv2d_winograd_nchwc_f32's transforms (conv_winograd_nchwc.c), F(4x4, 3x3) on blocked tensors: a vector is one
 * pixel's 16 channels, so B^T d B and A^T M A are the same sums as above on whole vectors, no shuffles. */
ORTX_TARGET_AVX512 static void nchwc_input(const ortx_conv_params *p, const float *x, int64_t ty, int64_t tx,
                                           float *v, int64_t position_stride) {
    const int64_t iy0 = ty * 4 - p->pad_top, ix0 = tx * 4 - p->pad_left;
    const int inside = iy0 >= 0 && ix0 >= 0 && iy0 + 6 <= p->in_height && ix0 + 6 <= p->in_width;
    __m512 columns[6][6];  /* B^T d, column by column: columns[j][i] */
    for (int j = 0; j < 6; j++) {
        __m512 d[6];
        for (int i = 0; i < 6; i++) {
            const int64_t iy = iy0 + i, ix = ix0 + j;
            d[i] = inside || (iy >= 0 && iy < p->in_height && ix >= 0 && ix < p->in_width)
                       ? _mm512_loadu_ps(x + (iy * p->in_width + ix) * 16)
                       : _mm512_setzero_ps();
        }
        apply_bt(d, columns[j], 4);
    }
    for (int i = 0; i < 6; i++) {
        __m512 row[6], out[6];
        for (int j = 0; j < 6; j++) row[j] = columns[j][i];
        apply_bt(row, out, 4);
        for (int j = 0; j < 6; j++) _mm512_storeu_ps(v + (i * 6 + j) * position_stride, out[j]);
    }
}

ORTX_TARGET_AVX512 static void nchwc_output(const ortx_conv_params *p, const float *m, int64_t position_stride,
                                            int64_t ty, int64_t tx, const float *bias, const float *residual,
                                            float *y) {
    __m512 columns[6][4];  /* A^T s, column by column: columns[j][a] */
    for (int j = 0; j < 6; j++) {
        __m512 s[6];
        for (int i = 0; i < 6; i++) s[i] = _mm512_loadu_ps(m + (i * 6 + j) * position_stride);
        apply_at(s, columns[j], 4);
    }
    const __m512 b = _mm512_loadu_ps(bias);
    for (int a = 0; a < 4; a++) {
        const int64_t oy = ty * 4 + a;
        if (oy >= p->out_height) break;
        __m512 row[6], out[4];
        for (int j = 0; j < 6; j++) row[j] = columns[j][a];
        apply_at(row, out, 4);
        for (int c = 0; c < 4; c++) {
            const int64_t ox = tx * 4 + c;
            if (ox >= p->out_width) break;
            const int64_t at = (oy * p->out_width + ox) * 16;
            __m512 value = _mm512_add_ps(out[c], b);
            if (residual) value = _mm512_add_ps(value, _mm512_loadu_ps(residual + at));
            _mm512_storeu_ps(y + at, ortx_activation_avx512(value, (int)p->activation, p->param0, p->param1));
        }
    }
}

const ortx_wino_nchwc_isa ortx_wino_nchwc_avx512 = {nchwc_input, nchwc_output};
#else
const ortx_wino_isa ortx_wino_avx512 = {NULL, NULL};
const ortx_wino_nchwc_isa ortx_wino_nchwc_avx512 = {NULL, NULL};
#endif
