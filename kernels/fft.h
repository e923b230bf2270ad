/* Planned FFTs for the DSP family (fft.c): plans cached per length, executed by any number of threads at once.
 *
 * A plan for length n is one of:
 *   Case 1: mixed radix. n = product of radices 4, 2, 3, 5 and other primes <= ORTX_FFT_MAX_GENERIC_RADIX, run as
 *           Stockham autosort stages (decimation in frequency, out of place, ping-pong; no bit reversal).
 *   Case 2: Bluestein. n has a prime factor above ORTX_FFT_MAX_GENERIC_RADIX: the DFT is a convolution with a
 *           chirp, done by a power-of-two plan of length >= 2n - 1.
 * Even lengths also carry the post-processing twiddles of the real-input FFT, done as a complex FFT of n/2.
 */
#ifndef ORTX_FFT_H
#define ORTX_FFT_H

#include <stdint.h>

/* A generic radix-p butterfly costs p^2 complex products per p points; above this, Bluestein is cheaper. */
#define ORTX_FFT_MAX_GENERIC_RADIX 31
#define ORTX_FFT_MAX_STAGES 40

typedef struct ortx_cpx {
    float re, im;
} ortx_cpx;

typedef struct ortx_fft_stage {
    int64_t radix;
    int64_t length;    /* n of this stage's sub-transforms */
    int64_t stride;    /* s: number of interleaved sub-transforms */
    ortx_cpx *twiddles; /* [length / radix][radix - 1]: W_length^(j * p) for j = 1..radix-1 */
    ortx_cpx *roots;    /* [radix]: W_radix^j, for the generic butterfly */
} ortx_fft_stage;

typedef struct ortx_fft_plan {
    int64_t n;
    int num_stages;
    ortx_fft_stage stages[ORTX_FFT_MAX_STAGES];
    /* Case 2 (Bluestein) when sub != NULL: chirp[k] = exp(-i pi k^2 / n), k < n; kernel = FFT_m(conj chirp,
     * wrapped) / m, so the inverse transform's 1/m is folded in. */
    const struct ortx_fft_plan *sub;
    ortx_cpx *chirp;
    ortx_cpx *kernel;
    /* Real-input post-processing for even n: W_n^k, k = 0..n/2; half = plan of n/2. */
    ortx_cpx *real_twiddles;
    const struct ortx_fft_plan *half;
} ortx_fft_plan;

/* The cached plan for n (built on first use, never freed); NULL when out of memory. Thread-safe. */
const ortx_fft_plan *ortx_fft_plan_get(int64_t n);

/* Complex points the execution functions need as scratch for this plan (per concurrent call). */
int64_t ortx_fft_scratch_points(const ortx_fft_plan *plan);

/* Forward complex DFT of data[n] in place: X[k] = sum_t x[t] exp(-2 pi i k t / n). */
void ortx_fft_forward(const ortx_fft_plan *plan, ortx_cpx *data, ortx_cpx *scratch);

/* Forward DFT of real x[n] (n even, plan->half set): writes X[0..n/2] (the one-sided spectrum) to out. */
void ortx_fft_real_forward(const ortx_fft_plan *plan, const float *x, ortx_cpx *out, ortx_cpx *scratch);

#endif
