/* AVX-512 vector primitives for templates/gemm.c: 16-float zmm vectors, masked loads and stores for tails. Every
 * function carries ORTX_TARGET, so the file needs no -m flags and runs only where the caller checked the CPU. */
#include <immintrin.h>

#define VL 16
#define ORTX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define ORTX_PRIMITIVE static inline __attribute__((always_inline)) ORTX_TARGET

typedef __m512 vec_t;

ORTX_PRIMITIVE vec_t vec_zero(void) { return _mm512_setzero_ps(); }
ORTX_PRIMITIVE vec_t vec_set1(float value) { return _mm512_set1_ps(value); }
ORTX_PRIMITIVE vec_t vec_broadcast(const float *p) { return _mm512_set1_ps(*p); }
ORTX_PRIMITIVE vec_t vec_load(const float *p) { return _mm512_loadu_ps(p); }
ORTX_PRIMITIVE void vec_store(float *p, vec_t v) { _mm512_storeu_ps(p, v); }
ORTX_PRIMITIVE vec_t vec_load_part(const float *p, int lanes) {
    return _mm512_maskz_loadu_ps((__mmask16)((1u << lanes) - 1), p);
}
ORTX_PRIMITIVE void vec_store_part(float *p, vec_t v, int lanes) {
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << lanes) - 1), v);
}
ORTX_PRIMITIVE vec_t vec_fma(vec_t a, vec_t b, vec_t c) { return _mm512_fmadd_ps(a, b, c); }
ORTX_PRIMITIVE vec_t vec_add(vec_t a, vec_t b) { return _mm512_add_ps(a, b); }
ORTX_PRIMITIVE vec_t vec_mul(vec_t a, vec_t b) { return _mm512_mul_ps(a, b); }
ORTX_PRIMITIVE vec_t vec_max(vec_t a, vec_t b) { return _mm512_max_ps(a, b); }
ORTX_PRIMITIVE vec_t vec_min(vec_t a, vec_t b) { return _mm512_min_ps(a, b); }
/* value where value >= 0, else if_negative (LeakyRelu) */
ORTX_PRIMITIVE vec_t vec_where_negative(vec_t value, vec_t if_negative) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(value, _mm512_setzero_ps(), _CMP_GE_OQ), if_negative, value);
}
ORTX_PRIMITIVE void vec_prefetch(const float *p) { _mm_prefetch((const char *)p, _MM_HINT_T0); }
