/* The Stockham stages of fft_plan.c, included once per instruction set: fft_plan.c (portable flags) and
 * fft_avx2.c (under `#pragma GCC target("avx2,fma")`, so the compiler vectorises the same loops 8 floats wide).
 * Everything here is static; each including file exports its own run_stages wrapper. Stage algebra: fft_plan.c.
 */
#ifndef ORTX_FFT_STAGES_H
#define ORTX_FFT_STAGES_H

#include <string.h>

#include "fft.h"

static inline ortx_cpx cpx_mul(ortx_cpx a, ortx_cpx b) {
    ortx_cpx r = {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
    return r;
}

static void stage_radix2(const ortx_fft_stage *st, const ortx_cpx *restrict x, ortx_cpx *restrict y) {
    const int64_t s = st->stride, m = st->length / 2;
    for (int64_t p = 0; p < m; p++) {
        const ortx_cpx w = st->twiddles[p];
        const ortx_cpx *x0 = x + s * p, *x1 = x + s * (p + m);
        ortx_cpx *y0 = y + s * (2 * p), *y1 = y + s * (2 * p + 1);
        for (int64_t q = 0; q < s; q++) {
            const float dre = x0[q].re - x1[q].re, dim = x0[q].im - x1[q].im;
            y0[q].re = x0[q].re + x1[q].re;
            y0[q].im = x0[q].im + x1[q].im;
            y1[q].re = dre * w.re - dim * w.im;
            y1[q].im = dre * w.im + dim * w.re;
        }
    }
}

static void stage_radix4(const ortx_fft_stage *st, const ortx_cpx *restrict x, ortx_cpx *restrict y) {
    const int64_t s = st->stride, m = st->length / 4;
    for (int64_t p = 0; p < m; p++) {
        const ortx_cpx w1 = st->twiddles[3 * p], w2 = st->twiddles[3 * p + 1], w3 = st->twiddles[3 * p + 2];
        const ortx_cpx *x0 = x + s * p, *x1 = x + s * (p + m), *x2 = x + s * (p + 2 * m), *x3 = x + s * (p + 3 * m);
        ortx_cpx *y0 = y + s * (4 * p);
        for (int64_t q = 0; q < s; q++) {
            const float t0r = x0[q].re + x2[q].re, t0i = x0[q].im + x2[q].im;
            const float t1r = x0[q].re - x2[q].re, t1i = x0[q].im - x2[q].im;
            const float t2r = x1[q].re + x3[q].re, t2i = x1[q].im + x3[q].im;
            /* t3 = -i (x1 - x3) */
            const float t3r = x1[q].im - x3[q].im, t3i = x3[q].re - x1[q].re;
            const float b1r = t1r + t3r, b1i = t1i + t3i;
            const float b2r = t0r - t2r, b2i = t0i - t2i;
            const float b3r = t1r - t3r, b3i = t1i - t3i;
            y0[q].re = t0r + t2r;
            y0[q].im = t0i + t2i;
            y0[q + s].re = b1r * w1.re - b1i * w1.im;
            y0[q + s].im = b1r * w1.im + b1i * w1.re;
            y0[q + 2 * s].re = b2r * w2.re - b2i * w2.im;
            y0[q + 2 * s].im = b2r * w2.im + b2i * w2.re;
            y0[q + 3 * s].re = b3r * w3.re - b3i * w3.im;
            y0[q + 3 * s].im = b3r * w3.im + b3i * w3.re;
        }
    }
}

/* Stride 1 (the first stage): no inner loop, so the butterfly stays in registers (measured 1.8 -> 0.9 us of
 * a 1024-point FFT's 4.4 with AVX2). */
static void stage_radix4_stride1(const ortx_fft_stage *st, const ortx_cpx *restrict x, ortx_cpx *restrict y) {
    const int64_t m = st->length / 4;
    const ortx_cpx *restrict tw = st->twiddles;
    for (int64_t p = 0; p < m; p++) {
        const ortx_cpx a0 = x[p], a1 = x[p + m], a2 = x[p + 2 * m], a3 = x[p + 3 * m];
        const float t0r = a0.re + a2.re, t0i = a0.im + a2.im;
        const float t1r = a0.re - a2.re, t1i = a0.im - a2.im;
        const float t2r = a1.re + a3.re, t2i = a1.im + a3.im;
        const float t3r = a1.im - a3.im, t3i = a3.re - a1.re;
        const float b1r = t1r + t3r, b1i = t1i + t3i;
        const float b2r = t0r - t2r, b2i = t0i - t2i;
        const float b3r = t1r - t3r, b3i = t1i - t3i;
        const ortx_cpx w1 = tw[3 * p], w2 = tw[3 * p + 1], w3 = tw[3 * p + 2];
        ortx_cpx *out = y + 4 * p;
        out[0].re = t0r + t2r;
        out[0].im = t0i + t2i;
        out[1].re = b1r * w1.re - b1i * w1.im;
        out[1].im = b1r * w1.im + b1i * w1.re;
        out[2].re = b2r * w2.re - b2i * w2.im;
        out[2].im = b2r * w2.im + b2i * w2.re;
        out[3].re = b3r * w3.re - b3i * w3.im;
        out[3].im = b3r * w3.im + b3i * w3.re;
    }
}

static void stage_radix3(const ortx_fft_stage *st, const ortx_cpx *restrict x, ortx_cpx *restrict y) {
    const int64_t s = st->stride, m = st->length / 3;
    const float half_sqrt3 = 0.86602540378443864676f;
    for (int64_t p = 0; p < m; p++) {
        const ortx_cpx w1 = st->twiddles[2 * p], w2 = st->twiddles[2 * p + 1];
        const ortx_cpx *x0 = x + s * p, *x1 = x + s * (p + m), *x2 = x + s * (p + 2 * m);
        ortx_cpx *y0 = y + s * (3 * p);
        for (int64_t q = 0; q < s; q++) {
            const float t1r = x1[q].re + x2[q].re, t1i = x1[q].im + x2[q].im;
            const float t2r = x1[q].re - x2[q].re, t2i = x1[q].im - x2[q].im;
            const float m1r = x0[q].re - 0.5f * t1r, m1i = x0[q].im - 0.5f * t1i;
            /* m2 = -i (sqrt(3)/2) t2 */
            const float m2r = half_sqrt3 * t2i, m2i = -half_sqrt3 * t2r;
            const float b1r = m1r + m2r, b1i = m1i + m2i, b2r = m1r - m2r, b2i = m1i - m2i;
            y0[q].re = x0[q].re + t1r;
            y0[q].im = x0[q].im + t1i;
            y0[q + s].re = b1r * w1.re - b1i * w1.im;
            y0[q + s].im = b1r * w1.im + b1i * w1.re;
            y0[q + 2 * s].re = b2r * w2.re - b2i * w2.im;
            y0[q + 2 * s].im = b2r * w2.im + b2i * w2.re;
        }
    }
}

static void stage_radix5(const ortx_fft_stage *st, const ortx_cpx *restrict x, ortx_cpx *restrict y) {
    const int64_t s = st->stride, m = st->length / 5;
    /* cos and sin of 2 pi / 5 and 4 pi / 5 */
    const float c1 = 0.30901699437494742410f, c2 = -0.80901699437494742410f;
    const float s1 = 0.95105651629515357212f, s2 = 0.58778525229247312917f;
    for (int64_t p = 0; p < m; p++) {
        const ortx_cpx *w = st->twiddles + 4 * p;
        const ortx_cpx *x0 = x + s * p, *x1 = x + s * (p + m), *x2 = x + s * (p + 2 * m);
        const ortx_cpx *x3 = x + s * (p + 3 * m), *x4 = x + s * (p + 4 * m);
        ortx_cpx *y0 = y + s * (5 * p);
        for (int64_t q = 0; q < s; q++) {
            const ortx_cpx a0 = x0[q];
            const float t1r = x1[q].re + x4[q].re, t1i = x1[q].im + x4[q].im;
            const float t2r = x2[q].re + x3[q].re, t2i = x2[q].im + x3[q].im;
            const float t3r = x1[q].re - x4[q].re, t3i = x1[q].im - x4[q].im;
            const float t4r = x2[q].re - x3[q].re, t4i = x2[q].im - x3[q].im;
            const float m1r = a0.re + c1 * t1r + c2 * t2r, m1i = a0.im + c1 * t1i + c2 * t2i;
            const float m2r = a0.re + c2 * t1r + c1 * t2r, m2i = a0.im + c2 * t1i + c1 * t2i;
            const float n1r = s1 * t3r + s2 * t4r, n1i = s1 * t3i + s2 * t4i;
            const float n2r = s2 * t3r - s1 * t4r, n2i = s2 * t3i - s1 * t4i;
            /* b1 = m1 - i n1, b4 = m1 + i n1, b2 = m2 - i n2, b3 = m2 + i n2 */
            const ortx_cpx b1 = {m1r + n1i, m1i - n1r}, b4 = {m1r - n1i, m1i + n1r};
            const ortx_cpx b2 = {m2r + n2i, m2i - n2r}, b3 = {m2r - n2i, m2i + n2r};
            y0[q].re = a0.re + t1r + t2r;
            y0[q].im = a0.im + t1i + t2i;
            y0[q + s] = cpx_mul(b1, w[0]);
            y0[q + 2 * s] = cpx_mul(b2, w[1]);
            y0[q + 3 * s] = cpx_mul(b3, w[2]);
            y0[q + 4 * s] = cpx_mul(b4, w[3]);
        }
    }
}

static void stage_generic(const ortx_fft_stage *st, const ortx_cpx *restrict x, ortx_cpx *restrict y) {
    const int64_t r = st->radix, s = st->stride, m = st->length / r;
    ortx_cpx a[ORTX_FFT_MAX_GENERIC_RADIX];
    for (int64_t p = 0; p < m; p++) {
        for (int64_t q = 0; q < s; q++) {
            for (int64_t k = 0; k < r; k++) a[k] = x[q + s * (p + k * m)];
            for (int64_t j = 0; j < r; j++) {
                float sum_re = 0.0f, sum_im = 0.0f;
                int64_t index = 0;
                for (int64_t k = 0; k < r; k++) {
                    const ortx_cpx root = st->roots[index];
                    sum_re += a[k].re * root.re - a[k].im * root.im;
                    sum_im += a[k].re * root.im + a[k].im * root.re;
                    index += j;
                    if (index >= r) index -= r;
                }
                ortx_cpx b = {sum_re, sum_im};
                y[q + s * (r * p + j)] = j == 0 ? b : cpx_mul(b, st->twiddles[p * (r - 1) + j - 1]);
            }
        }
    }
}

static void run_stages(const ortx_fft_plan *plan, ortx_cpx *data, ortx_cpx *scratch) {
    ortx_cpx *from = data, *to = scratch;
    for (int i = 0; i < plan->num_stages; i++) {
        const ortx_fft_stage *st = &plan->stages[i];
        switch (st->radix) {
            case 2: stage_radix2(st, from, to); break;
            case 3: stage_radix3(st, from, to); break;
            case 4:
                if (st->stride == 1)
                    stage_radix4_stride1(st, from, to);
                else
                    stage_radix4(st, from, to);
                break;
            case 5: stage_radix5(st, from, to); break;
            default: stage_generic(st, from, to); break;
        }
        ortx_cpx *swap = from;
        from = to;
        to = swap;
    }
    if (from != data) memcpy(data, from, (size_t)plan->n * sizeof(ortx_cpx));
}

/* Real-input post-processing (fft_plan.c's formula): X[k] from Z[k] and Z[h - k] of the half-length FFT, k = 0..h.
 * k = 0 and k = h (both read Z[0]) are done apart, so the loop between has no branches and vectorises. */
static inline void real_post_bin(ortx_cpx zk, ortx_cpx zc, ortx_cpx w, ortx_cpx *out) {
    /* E = (Zk + conj Zc) / 2, O = -i (Zk - conj Zc) / 2, X = E + W O */
    const float er = 0.5f * (zk.re + zc.re), ei = 0.5f * (zk.im - zc.im);
    const float or_ = 0.5f * (zk.im + zc.im), oi = -0.5f * (zk.re - zc.re);
    out->re = er + or_ * w.re - oi * w.im;
    out->im = ei + or_ * w.im + oi * w.re;
}

static void real_post(const ortx_cpx *restrict z, int64_t h, const ortx_cpx *restrict twiddles,
                      ortx_cpx *restrict out) {
    real_post_bin(z[0], z[0], twiddles[0], out);
    for (int64_t k = 1; k < h; k++) real_post_bin(z[k], z[h - k], twiddles[k], out + k);
    real_post_bin(z[0], z[0], twiddles[h], out + h);
}

#endif
