/* Vectorised exp, sigmoid, tanh and erf for AVX2 and AVX-512, within ~2 ulp of libm over the whole float range.
 *
 * exp: Cephes expf. n = round(x log2 e); r = x - n ln2 (ln2 split hi/lo so n*hi is exact); e^r by Cephes'
 *   degree-5 minimax polynomial on |r| <= ln2/2 (about 1 ulp); 2^n applied as two factors 2^(n/2) 2^(n - n/2) so
 *   n from -150 to 128 neither overflows the exponent field early nor loses the denormal range. x is clamped to
 *   [-104, 89] (beyond: 0 and +inf arrive naturally); NaN is restored at the end.
 * tanh: |x| < 0.625: Cephes tanhf's odd polynomial (8e-8 relative, checked in float32); else
 *   1 - 2 / (e^{2|x|} + 1) with the sign of x (|x| clamped to 9.1, where tanh rounds to 1).
 * erf: |x| < 0.921875: x P(x^2), degree-5 least-squares fit in z = x^2 (1.9e-7 relative); up to 3.925:
 *   1 - exp(Q(|x|)), Q a degree-8 least-squares fit of log(erfc) (0.8 ulp absolute); beyond 3.925 erf rounds to 1.
 *   Q stays in [-18, 0.001] on [0, 3.925] (and |x| is clamped there), so its exp skips exp's clamps, NaN blend
 *   and two-factor scaling: the same bits (every scaling exact, results normal), ~10 fewer operations a vector.
 *   (Fits: numpy lstsq on Chebyshev nodes, coefficients rounded to float32, errors measured on 2e5 float32 points.)
 * gelu: 0.5 x (1 + erf(x / sqrt 2)) as x - 0.5 x E for x > 0 and 0.5 x E else (-0 stays -0), E = erfc(|x| / sqrt 2) =
 *   exp(G(|x|)), G a degree-10 weighted least-squares fit of log(erfc(a / sqrt 2)) on [0, 5.5507884] (weights erfc,
 *   so the error is absolute in E); beyond 5.5507884 (E < 2^-27) gelu is x above 0 and 0 * x below. One polynomial
 *   and one exp, no erf: 1 + erf never cancels. Error at most 1.7 |x| 2^-24 against float64 on [-12, 12] (11 ulp
 *   where |gelu| > 0.01), below the erf route's (2.3 |x| 2^-24, 50 ulp), in ~30 operations a vector, not ~42.
 * sigmoid: 1 / (1 + e^{-x}) with a true division.
 * log: Cephes logf. x = m 2^e with m in [sqrt(1/2), sqrt 2) (denormals first scaled by 2^23); f = m - 1;
 *   log(1 + f) = f - f^2/2 + f^3 P(f), P Cephes' degree-8 minimax polynomial; e ln2 added with ln2 split hi/lo.
 *   x < 0 and NaN give NaN, +-0 gives -inf, +inf gives +inf.
 */
#ifndef ORTX_VECTOR_MATH_H
#define ORTX_VECTOR_MATH_H

#include <math.h>

#include "isa.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

#define ORTX_EXP_LOWEST -104.0f
#define ORTX_EXP_HIGHEST 89.0f
#define ORTX_LOG2E 1.44269504088896341f
#define ORTX_LN2_HI 0.693359375f
#define ORTX_LN2_LO -2.12194440e-4f
#define ORTX_EXP_P0 1.9875691500e-4f
#define ORTX_EXP_P1 1.3981999507e-3f
#define ORTX_EXP_P2 8.3334519073e-3f
#define ORTX_EXP_P3 4.1665795894e-2f
#define ORTX_EXP_P4 1.6666665459e-1f
#define ORTX_EXP_P5 5.0000001201e-1f

#define ORTX_TANH_SPLIT 0.625f
#define ORTX_TANH_SATURATE 9.1f
#define ORTX_TANH_P0 -5.70498872745e-3f
#define ORTX_TANH_P1 2.06390887954e-2f
#define ORTX_TANH_P2 -5.37397155531e-2f
#define ORTX_TANH_P3 1.33314422036e-1f
#define ORTX_TANH_P4 -3.33332819422e-1f

#define ORTX_LOG_SQRTHF 0.707106781186547524f
#define ORTX_LOG_MIN_NORMAL 1.17549435e-38f
#define ORTX_LOG_DENORMAL_SCALE 8388608.0f /* 2^23 */
static const float ortx_log_poly[9] = {7.0376836292e-2f, -1.1514610310e-1f, 1.1676998740e-1f, -1.2420140846e-1f,
                                       1.4249322787e-1f, -1.6668057665e-1f, 2.0000714765e-1f, -2.4999993993e-1f,
                                       3.3333331174e-1f};

#define ORTX_ERF_SPLIT 0.921875f
#define ORTX_ERF_SATURATE 3.925f
static const float ortx_erf_small[6] = {-0.0006024051108397543f, 0.0050007677637040615f, -0.02677285112440586f,
                                        0.1128203496336937f, -0.3761252462863922f, 1.1283791065216064f};
static const float ortx_erf_big[9] = {1.6355436400772305e-06f, -4.599265957949683e-05f, 0.0005959683912806213f,
                                      -0.004754324443638325f, 0.026402311399579048f, -0.11004017293453217f,
                                      -0.6318756341934204f, -1.1302002668380737f, 0.00031093755387701094f};

#define ORTX_GELU_SATURATE 5.5507884f
static const float ortx_gelu_log_erfc[11] = {
    -4.168519751601707e-08f, 1.0086720294566476e-06f, -1.086182237486355e-05f, 6.674551696050912e-05f,
    -0.00022731887293048203f, 4.739430369227193e-05f, 0.004777729976922274f, -0.036334555596113205f,
    -0.318310022354126f, -0.7978845834732056f, -2.929284939612309e-11f};

/* AVX2 ------------------------------------------------------------------------------------------------------ */
/* exp's core on a clamped x: n = round(x log2 e) and e^r (r = x - n ln2), Cephes' polynomial; the callers scale. */
ORTX_TARGET_AVX2 static inline __m256 ortx_exp_core_avx2(__m256 x, __m256 *n) {
    *n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(ORTX_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(ORTX_LN2_HI), x);
    r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(ORTX_LN2_LO), r);
    __m256 p = _mm256_set1_ps(ORTX_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ORTX_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ORTX_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ORTX_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ORTX_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ORTX_EXP_P5));
    return _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
}

ORTX_TARGET_AVX2 static inline __m256 ortx_exp_avx2(__m256 x) {
    __m256 clamped = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(ORTX_EXP_LOWEST)),
                                   _mm256_set1_ps(ORTX_EXP_HIGHEST));
    __m256 n, p = ortx_exp_core_avx2(clamped, &n);
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i half = _mm256_srai_epi32(ni, 1);
    __m256i rest = _mm256_sub_epi32(ni, half);
    __m256i bias = _mm256_set1_epi32(127);
    __m256 scale_half = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
    __m256 scale_rest = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(rest, bias), 23));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, scale_half), scale_rest);
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

ORTX_TARGET_AVX2 static inline __m256 ortx_sigmoid_avx2(__m256 x) {
    __m256 one = _mm256_set1_ps(1.0f);
    __m256 e = ortx_exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(one, _mm256_add_ps(one, e));
}

ORTX_TARGET_AVX2 static inline __m256 ortx_tanh_avx2(__m256 x) {
    __m256 sign_mask = _mm256_set1_ps(-0.0f);
    __m256 a = _mm256_andnot_ps(sign_mask, x);
    __m256 z = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(ORTX_TANH_P0);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(ORTX_TANH_P1));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(ORTX_TANH_P2));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(ORTX_TANH_P3));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(ORTX_TANH_P4));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), a, a);
    __m256 e = ortx_exp_avx2(_mm256_add_ps(_mm256_min_ps(a, _mm256_set1_ps(ORTX_TANH_SATURATE)),
                                           _mm256_min_ps(a, _mm256_set1_ps(ORTX_TANH_SATURATE))));
    __m256 one = _mm256_set1_ps(1.0f);
    __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
    __m256 y = _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, _mm256_set1_ps(ORTX_TANH_SPLIT), _CMP_LT_OQ));
    y = _mm256_or_ps(y, _mm256_and_ps(sign_mask, x));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* exp on erf's Q range [-18, 0.001] (see the top): ortx_exp_avx2's bits without its clamps, NaN blend and
 * two-factor scaling. */
ORTX_TARGET_AVX2 static inline __m256 ortx_exp_erf_range_avx2(__m256 q) {
    __m256 n, p = ortx_exp_core_avx2(q, &n);
    __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
}

ORTX_TARGET_AVX2 static inline __m256 ortx_erf_avx2(__m256 x) {
    __m256 sign_mask = _mm256_set1_ps(-0.0f);
    __m256 a = _mm256_andnot_ps(sign_mask, x);
    __m256 z = _mm256_mul_ps(a, a);
    __m256 p = _mm256_set1_ps(ortx_erf_small[0]);
    for (int k = 1; k < 6; k++) p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(ortx_erf_small[k]));
    __m256 small = _mm256_mul_ps(a, p);
    __m256 t = _mm256_min_ps(a, _mm256_set1_ps(ORTX_ERF_SATURATE));
    __m256 q = _mm256_set1_ps(ortx_erf_big[0]);
    for (int k = 1; k < 9; k++) q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(ortx_erf_big[k]));
    __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.0f), ortx_exp_erf_range_avx2(q));
    big = _mm256_blendv_ps(big, _mm256_set1_ps(1.0f), _mm256_cmp_ps(a, _mm256_set1_ps(ORTX_ERF_SATURATE), _CMP_GE_OQ));
    __m256 y = _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, _mm256_set1_ps(ORTX_ERF_SPLIT), _CMP_LT_OQ));
    y = _mm256_or_ps(y, _mm256_and_ps(sign_mask, x));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* gelu (see the top); NaN propagates through x - 0.5 x E and 0.5 x E. */
ORTX_TARGET_AVX2 static inline __m256 ortx_gelu_avx2(__m256 x) {
    __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    __m256 t = _mm256_min_ps(a, _mm256_set1_ps(ORTX_GELU_SATURATE));
    __m256 g = _mm256_set1_ps(ortx_gelu_log_erfc[0]);
    for (int k = 1; k < 11; k++) g = _mm256_fmadd_ps(g, t, _mm256_set1_ps(ortx_gelu_log_erfc[k]));
    __m256 half = _mm256_mul_ps(_mm256_set1_ps(0.5f), x);
    __m256 e = _mm256_mul_ps(half, ortx_exp_erf_range_avx2(g));
    __m256 positive = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ); /* -0: 0.5 x E = -0 */
    __m256 y = _mm256_blendv_ps(e, _mm256_sub_ps(x, e), positive);
    __m256 saturated = _mm256_cmp_ps(a, _mm256_set1_ps(ORTX_GELU_SATURATE), _CMP_GE_OQ);
    return _mm256_blendv_ps(y, _mm256_blendv_ps(_mm256_mul_ps(x, _mm256_setzero_ps()), x, positive), saturated);
}

ORTX_TARGET_AVX2 static inline __m256 ortx_log_avx2(__m256 x) {
    __m256 denormal = _mm256_cmp_ps(x, _mm256_set1_ps(ORTX_LOG_MIN_NORMAL), _CMP_LT_OQ);
    __m256 scaled = _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(ORTX_LOG_DENORMAL_SCALE)), denormal);
    __m256i bits = _mm256_castps_si256(scaled);
    __m256 e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(126)));
    e = _mm256_sub_ps(e, _mm256_and_ps(denormal, _mm256_set1_ps(23.0f)));
    __m256 m = _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)),
                                                   _mm256_set1_epi32(0x3f000000))); /* [0.5, 1) */
    __m256 below = _mm256_cmp_ps(m, _mm256_set1_ps(ORTX_LOG_SQRTHF), _CMP_LT_OQ);
    e = _mm256_sub_ps(e, _mm256_and_ps(below, _mm256_set1_ps(1.0f)));
    __m256 f = _mm256_sub_ps(_mm256_add_ps(m, _mm256_and_ps(below, m)), _mm256_set1_ps(1.0f));
    __m256 z = _mm256_mul_ps(f, f);
    __m256 p = _mm256_set1_ps(ortx_log_poly[0]);
    for (int k = 1; k < 9; k++) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(ortx_log_poly[k]));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, f), z);
    y = _mm256_fmadd_ps(e, _mm256_set1_ps(ORTX_LN2_LO), y);
    y = _mm256_fnmadd_ps(z, _mm256_set1_ps(0.5f), y);
    y = _mm256_fmadd_ps(e, _mm256_set1_ps(ORTX_LN2_HI), _mm256_add_ps(f, y));
    y = _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, _mm256_set1_ps(INFINITY), _CMP_EQ_OQ));
    y = _mm256_blendv_ps(y, _mm256_set1_ps(-INFINITY), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ));
    return _mm256_blendv_ps(y, _mm256_set1_ps(NAN), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NGE_UQ));
}

/* AVX-512: the same algorithms, operation for operation. ----------------------------------------------------- */
/* ortx_exp_core_avx2 on 16 lanes. */
ORTX_TARGET_AVX512 static inline __m512 ortx_exp_core_avx512(__m512 x, __m512 *n) {
    *n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(ORTX_LOG2E)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(ORTX_LN2_HI), x);
    r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(ORTX_LN2_LO), r);
    __m512 p = _mm512_set1_ps(ORTX_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ORTX_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ORTX_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ORTX_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ORTX_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ORTX_EXP_P5));
    return _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
}

ORTX_TARGET_AVX512 static inline __m512 ortx_exp_avx512(__m512 x) {
    __m512 clamped = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(ORTX_EXP_LOWEST)),
                                   _mm512_set1_ps(ORTX_EXP_HIGHEST));
    __m512 n, p = ortx_exp_core_avx512(clamped, &n);
    __m512i ni = _mm512_cvtps_epi32(n);
    __m512i half = _mm512_srai_epi32(ni, 1);
    __m512i rest = _mm512_sub_epi32(ni, half);
    __m512i bias = _mm512_set1_epi32(127);
    __m512 scale_half = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(half, bias), 23));
    __m512 scale_rest = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(rest, bias), 23));
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, scale_half), scale_rest);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}

ORTX_TARGET_AVX512 static inline __m512 ortx_sigmoid_avx512(__m512 x) {
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 e = ortx_exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(one, _mm512_add_ps(one, e));
}

ORTX_TARGET_AVX512 static inline __m512 ortx_tanh_avx512(__m512 x) {
    __m512 a = _mm512_abs_ps(x);
    __m512 z = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(ORTX_TANH_P0);
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(ORTX_TANH_P1));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(ORTX_TANH_P2));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(ORTX_TANH_P3));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(ORTX_TANH_P4));
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), a, a);
    __m512 clamped = _mm512_min_ps(a, _mm512_set1_ps(ORTX_TANH_SATURATE));
    __m512 e = ortx_exp_avx512(_mm512_add_ps(clamped, clamped));
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 big = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
    __m512 sign = _mm512_and_ps(_mm512_set1_ps(-0.0f), x);
    __m512 y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(ORTX_TANH_SPLIT), _CMP_LT_OQ), big, small);
    y = _mm512_or_ps(y, sign);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}

/* exp on erf's Q range: ortx_exp_avx512's bits, the scaling by 2^n one vscalefps. */
ORTX_TARGET_AVX512 static inline __m512 ortx_exp_erf_range_avx512(__m512 q) {
    __m512 n, p = ortx_exp_core_avx512(q, &n);
    return _mm512_scalef_ps(p, n);
}

ORTX_TARGET_AVX512 static inline __m512 ortx_erf_avx512(__m512 x) {
    __m512 a = _mm512_abs_ps(x);
    __m512 z = _mm512_mul_ps(a, a);
    __m512 p = _mm512_set1_ps(ortx_erf_small[0]);
    for (int k = 1; k < 6; k++) p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(ortx_erf_small[k]));
    __m512 small = _mm512_mul_ps(a, p);
    __m512 t = _mm512_min_ps(a, _mm512_set1_ps(ORTX_ERF_SATURATE));
    __m512 q = _mm512_set1_ps(ortx_erf_big[0]);
    for (int k = 1; k < 9; k++) q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(ortx_erf_big[k]));
    __m512 big = _mm512_sub_ps(_mm512_set1_ps(1.0f), ortx_exp_erf_range_avx512(q));
    big = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(ORTX_ERF_SATURATE), _CMP_GE_OQ), big,
                               _mm512_set1_ps(1.0f));
    __m512 y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(ORTX_ERF_SPLIT), _CMP_LT_OQ), big, small);
    y = _mm512_or_ps(y, _mm512_and_ps(_mm512_set1_ps(-0.0f), x));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}

/* gelu (see the top): ortx_gelu_avx2 operation for operation. */
ORTX_TARGET_AVX512 static inline __m512 ortx_gelu_avx512(__m512 x) {
    __m512 a = _mm512_abs_ps(x);
    __m512 t = _mm512_min_ps(a, _mm512_set1_ps(ORTX_GELU_SATURATE));
    __m512 g = _mm512_set1_ps(ortx_gelu_log_erfc[0]);
    for (int k = 1; k < 11; k++) g = _mm512_fmadd_ps(g, t, _mm512_set1_ps(ortx_gelu_log_erfc[k]));
    __m512 half = _mm512_mul_ps(_mm512_set1_ps(0.5f), x);
    __m512 e = _mm512_mul_ps(half, ortx_exp_erf_range_avx512(g));
    __mmask16 positive = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);
    __m512 y = _mm512_mask_blend_ps(positive, e, _mm512_sub_ps(x, e));
    __mmask16 saturated = _mm512_cmp_ps_mask(a, _mm512_set1_ps(ORTX_GELU_SATURATE), _CMP_GE_OQ);
    return _mm512_mask_blend_ps(saturated, y,
                                _mm512_mask_blend_ps(positive, _mm512_mul_ps(x, _mm512_setzero_ps()), x));
}

ORTX_TARGET_AVX512 static inline __m512 ortx_log_avx512(__m512 x) {
    __mmask16 denormal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(ORTX_LOG_MIN_NORMAL), _CMP_LT_OQ);
    __m512 scaled = _mm512_mask_mul_ps(x, denormal, x, _mm512_set1_ps(ORTX_LOG_DENORMAL_SCALE));
    __m512i bits = _mm512_castps_si512(scaled);
    __m512 e = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(bits, 23), _mm512_set1_epi32(126)));
    e = _mm512_mask_sub_ps(e, denormal, e, _mm512_set1_ps(23.0f));
    __m512 m = _mm512_castsi512_ps(_mm512_or_si512(_mm512_and_si512(bits, _mm512_set1_epi32(0x007fffff)),
                                                   _mm512_set1_epi32(0x3f000000))); /* [0.5, 1) */
    __mmask16 below = _mm512_cmp_ps_mask(m, _mm512_set1_ps(ORTX_LOG_SQRTHF), _CMP_LT_OQ);
    e = _mm512_mask_sub_ps(e, below, e, _mm512_set1_ps(1.0f));
    __m512 f = _mm512_sub_ps(_mm512_mask_add_ps(m, below, m, m), _mm512_set1_ps(1.0f));
    __m512 z = _mm512_mul_ps(f, f);
    __m512 p = _mm512_set1_ps(ortx_log_poly[0]);
    for (int k = 1; k < 9; k++) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ortx_log_poly[k]));
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, f), z);
    y = _mm512_fmadd_ps(e, _mm512_set1_ps(ORTX_LN2_LO), y);
    y = _mm512_fnmadd_ps(z, _mm512_set1_ps(0.5f), y);
    y = _mm512_fmadd_ps(e, _mm512_set1_ps(ORTX_LN2_HI), _mm512_add_ps(f, y));
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ), y, x);
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ), y, _mm512_set1_ps(-INFINITY));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NGE_UQ), y, _mm512_set1_ps(NAN));
}

#endif
#endif
