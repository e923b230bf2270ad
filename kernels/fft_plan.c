/* FFT plans and their execution (fft.h): mixed-radix Stockham stages, Bluestein for large prime factors, and the
 * real-input FFT through a half-length complex FFT.
 *
 * Stockham stage (radix r, sub-transform length n = r * m, stride s), decimation in frequency, for p < m, q < s:
 *     a_k = x[q + s * (p + k * m)]                       k < r
 *     y[q + s * (r * p + j)] = W_n^(j p) * sum_k a_k W_r^(j k)    j < r
 * then n /= r, s *= r; the output lands in natural order after the last stage (no bit reversal).
 * Real input of even length n: z[t] = x[2t] + i x[2t+1], Z = FFT_{n/2}(z), and for k <= n/2 with
 * Zc = conj(Z[(n/2 - k) mod n/2]): X[k] = (Z[k] + Zc) / 2 - i W_n^k (Z[k] - Zc) / 2.
 * Limits: plans are built in double precision and stored as float; they are cached forever (one per length).
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fft.h"

/* ---------------------------------------------------------------------------------------------------------- */
/* Butterflies                                                                                                */

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

/* ---------------------------------------------------------------------------------------------------------- */
/* Execution                                                                                                  */

static void run_stages(const ortx_fft_plan *plan, ortx_cpx *data, ortx_cpx *scratch) {
    ortx_cpx *from = data, *to = scratch;
    for (int i = 0; i < plan->num_stages; i++) {
        const ortx_fft_stage *st = &plan->stages[i];
        switch (st->radix) {
            case 2: stage_radix2(st, from, to); break;
            case 3: stage_radix3(st, from, to); break;
            case 4: stage_radix4(st, from, to); break;
            case 5: stage_radix5(st, from, to); break;
            default: stage_generic(st, from, to); break;
        }
        ortx_cpx *swap = from;
        from = to;
        to = swap;
    }
    if (from != data) memcpy(data, from, (size_t)plan->n * sizeof(ortx_cpx));
}

static void run_bluestein(const ortx_fft_plan *plan, ortx_cpx *data, ortx_cpx *scratch) {
    const int64_t n = plan->n, m = plan->sub->n;
    ortx_cpx *a = scratch, *sub_scratch = scratch + m;
    for (int64_t k = 0; k < n; k++) a[k] = cpx_mul(data[k], plan->chirp[k]);
    memset(a + n, 0, (size_t)(m - n) * sizeof(ortx_cpx));
    ortx_fft_forward(plan->sub, a, sub_scratch);
    /* inverse FFT as conj(FFT(conj(.))); the kernel carries the 1/m */
    for (int64_t k = 0; k < m; k++) {
        ortx_cpx product = cpx_mul(a[k], plan->kernel[k]);
        a[k].re = product.re;
        a[k].im = -product.im;
    }
    ortx_fft_forward(plan->sub, a, sub_scratch);
    for (int64_t k = 0; k < n; k++) {
        ortx_cpx conjugate = {a[k].re, -a[k].im};
        data[k] = cpx_mul(conjugate, plan->chirp[k]);
    }
}

void ortx_fft_forward(const ortx_fft_plan *plan, ortx_cpx *data, ortx_cpx *scratch) {
    if (plan->sub)
        run_bluestein(plan, data, scratch);
    else
        run_stages(plan, data, scratch);
}

void ortx_fft_real_forward(const ortx_fft_plan *plan, const float *x, ortx_cpx *out, ortx_cpx *scratch) {
    const int64_t h = plan->n / 2;
    ortx_cpx *z = scratch;
    memcpy(z, x, (size_t)plan->n * sizeof(float));
    ortx_fft_forward(plan->half, z, scratch + h);
    for (int64_t k = 0; k <= h; k++) {
        const ortx_cpx zk = z[k == h ? 0 : k], zc = z[k == 0 ? 0 : h - k];
        /* E = (Zk + conj Zc) / 2, O = -i (Zk - conj Zc) / 2 */
        const float er = 0.5f * (zk.re + zc.re), ei = 0.5f * (zk.im - zc.im);
        const float or_ = 0.5f * (zk.im + zc.im), oi = -0.5f * (zk.re - zc.re);
        const ortx_cpx w = plan->real_twiddles[k];
        out[k].re = er + or_ * w.re - oi * w.im;
        out[k].im = ei + or_ * w.im + oi * w.re;
    }
}

int64_t ortx_fft_scratch_points(const ortx_fft_plan *plan) {
    int64_t complex_points = plan->sub ? plan->sub->n + ortx_fft_scratch_points(plan->sub) : plan->n;
    int64_t real_points = plan->half ? plan->n / 2 + ortx_fft_scratch_points(plan->half) : 0;
    return complex_points > real_points ? complex_points : real_points;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Planning                                                                                                   */

static ortx_cpx unit_root(int64_t numerator, int64_t denominator) {
    /* exp(-2 pi i numerator / denominator), the numerator reduced first so large products keep their precision */
    const double angle = -2.0 * M_PI * (double)(numerator % denominator) / (double)denominator;
    ortx_cpx r = {(float)cos(angle), (float)sin(angle)};
    return r;
}

static int64_t smallest_factor(int64_t n) {
    for (int64_t f = 2; f * f <= n; f++)
        if (n % f == 0) return f;
    return n;
}

static void free_plan(ortx_fft_plan *plan) {
    for (int i = 0; i < plan->num_stages; i++) {
        free(plan->stages[i].twiddles);
        free(plan->stages[i].roots);
    }
    free(plan->chirp);
    free(plan->kernel);
    free(plan->real_twiddles);
    free(plan);
}

/* Radices in stage order: 4s first, then 2, 3, 5, then other primes. 0 when a factor exceeds the generic limit. */
static int factorize(int64_t n, int64_t *radices) {
    int count = 0;
    while (n % 4 == 0) radices[count++] = 4, n /= 4;
    while (n % 2 == 0) radices[count++] = 2, n /= 2;
    while (n % 3 == 0) radices[count++] = 3, n /= 3;
    while (n % 5 == 0) radices[count++] = 5, n /= 5;
    while (n > 1) {
        int64_t f = smallest_factor(n);
        if (f > ORTX_FFT_MAX_GENERIC_RADIX) return 0;
        radices[count++] = f;
        n /= f;
    }
    return count;
}

static int build_stages(ortx_fft_plan *plan, const int64_t *radices, int count) {
    int64_t length = plan->n, stride = 1;
    plan->num_stages = count;
    for (int i = 0; i < count; i++) {
        ortx_fft_stage *st = &plan->stages[i];
        const int64_t r = radices[i], m = length / r;
        st->radix = r;
        st->length = length;
        st->stride = stride;
        st->twiddles = malloc((size_t)(m * (r - 1) > 0 ? m * (r - 1) : 1) * sizeof(ortx_cpx));
        st->roots = malloc((size_t)r * sizeof(ortx_cpx));
        if (!st->twiddles || !st->roots) return -1;
        for (int64_t p = 0; p < m; p++)
            for (int64_t j = 1; j < r; j++) st->twiddles[p * (r - 1) + j - 1] = unit_root(j * p, length);
        for (int64_t j = 0; j < r; j++) st->roots[j] = unit_root(j, r);
        length = m;
        stride *= r;
    }
    return 0;
}

static int build_bluestein(ortx_fft_plan *plan) {
    const int64_t n = plan->n;
    int64_t m = 1;
    while (m < 2 * n - 1) m *= 2;
    plan->sub = ortx_fft_plan_get(m);
    plan->chirp = malloc((size_t)n * sizeof(ortx_cpx));
    plan->kernel = calloc((size_t)m, sizeof(ortx_cpx));
    ortx_cpx *scratch = malloc((size_t)(plan->sub ? ortx_fft_scratch_points(plan->sub) : 1) * sizeof(ortx_cpx));
    if (!plan->sub || !plan->chirp || !plan->kernel || !scratch) {
        free(scratch);
        return -1;
    }
    for (int64_t k = 0; k < n; k++) {
        /* exp(-i pi k^2 / n) = unit_root(k^2 mod 2n, 2n) */
        plan->chirp[k] = unit_root((k * k) % (2 * n), 2 * n);
        ortx_cpx conjugate = {plan->chirp[k].re, -plan->chirp[k].im};
        plan->kernel[k] = conjugate;
        if (k > 0) plan->kernel[m - k] = conjugate;
    }
    ortx_fft_forward(plan->sub, plan->kernel, scratch);
    const float inverse_m = 1.0f / (float)m;
    for (int64_t k = 0; k < m; k++) {
        plan->kernel[k].re *= inverse_m;
        plan->kernel[k].im *= inverse_m;
    }
    free(scratch);
    return 0;
}

static ortx_fft_plan *build_plan(int64_t n) {
    ortx_fft_plan *plan = calloc(1, sizeof(ortx_fft_plan));
    if (!plan) return NULL;
    plan->n = n;
    int64_t radices[ORTX_FFT_MAX_STAGES];
    int count = n == 1 ? 0 : factorize(n, radices);
    int status = (count > 0 || n == 1) ? build_stages(plan, radices, count) : build_bluestein(plan);
    if (status == 0 && n % 2 == 0) {
        plan->half = ortx_fft_plan_get(n / 2);
        plan->real_twiddles = malloc((size_t)(n / 2 + 1) * sizeof(ortx_cpx));
        if (!plan->half || !plan->real_twiddles) status = -1;
        for (int64_t k = 0; status == 0 && k <= n / 2; k++) plan->real_twiddles[k] = unit_root(k, n);
    }
    if (status != 0) {
        free_plan(plan);
        return NULL;
    }
    return plan;
}

/* The cache: a linked list under a mutex. Plans are built outside the lock (building one may get others); when two
 * threads build the same length, the first inserted wins and the other copy is freed. */
typedef struct cache_entry {
    ortx_fft_plan *plan;
    struct cache_entry *next;
} cache_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cache_entry *cache_head = NULL;

static const ortx_fft_plan *cache_find(int64_t n) {
    for (cache_entry *e = cache_head; e; e = e->next)
        if (e->plan->n == n) return e->plan;
    return NULL;
}

const ortx_fft_plan *ortx_fft_plan_get(int64_t n) {
    if (n < 1) return NULL;
    pthread_mutex_lock(&cache_lock);
    const ortx_fft_plan *found = cache_find(n);
    pthread_mutex_unlock(&cache_lock);
    if (found) return found;
    ortx_fft_plan *plan = build_plan(n);
    if (!plan) return NULL;
    cache_entry *entry = malloc(sizeof(cache_entry));
    if (!entry) {
        free_plan(plan);
        return NULL;
    }
    pthread_mutex_lock(&cache_lock);
    found = cache_find(n);
    if (!found) {
        entry->plan = plan;
        entry->next = cache_head;
        cache_head = entry;
        found = plan;
    }
    pthread_mutex_unlock(&cache_lock);
    if (found != plan) {
        free(entry);
        free_plan(plan);
    }
    return found;
}
