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

#include "fft_stages.h"
#include "ortx_kernels.h"

void ortx_fft_run_stages_avx2(const ortx_fft_plan *plan, ortx_cpx *data, ortx_cpx *scratch);
void ortx_fft_real_post_avx2(const ortx_cpx *z, int64_t h, const ortx_cpx *twiddles, ortx_cpx *out);

/* ---------------------------------------------------------------------------------------------------------- */
/* Execution                                                                                                  */

/* The stages' ISA variant: AVX2 + FMA from AVX2 up (an AVX-512 build of the same loops measured no faster:
 * 4.4 vs 4.4 us per 1024-point complex FFT; portable 6.4). */
static void run_stages_dispatch(const ortx_fft_plan *plan, ortx_cpx *data, ortx_cpx *scratch) {
#if defined(__x86_64__) || defined(__i386__)
    if (ortx_selected_isa() >= ORTX_ISA_AVX2) {
        ortx_fft_run_stages_avx2(plan, data, scratch);
        return;
    }
#endif
    run_stages(plan, data, scratch);
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
        run_stages_dispatch(plan, data, scratch);
}

void ortx_fft_real_forward(const ortx_fft_plan *plan, const float *x, ortx_cpx *out, ortx_cpx *scratch) {
    const int64_t h = plan->n / 2;
    ortx_cpx *z = scratch;
    memcpy(z, x, (size_t)plan->n * sizeof(float));
    ortx_fft_forward(plan->half, z, scratch + h);
#if defined(__x86_64__) || defined(__i386__)
    if (ortx_selected_isa() >= ORTX_ISA_AVX2) {
        ortx_fft_real_post_avx2(z, h, plan->real_twiddles, out);
        return;
    }
#endif
    real_post(z, h, plan->real_twiddles, out);
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
