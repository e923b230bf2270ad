/* AVX2+FMA vector primitives for templates/gemm.c: 8-float ymm vectors, maskload/maskstore for tails. Every
 * function carries ORTX_TARGET, so the file needs no -m flags and runs only where the caller checked the CPU. */
#include <immintrin.h>

#define VL 8
#define ORTX_TARGET __attribute__((target("avx2,fma")))
#define ORTX_PRIMITIVE static inline __attribute__((always_inline)) ORTX_TARGET

typedef __m256 vec_t;

ORTX_PRIMITIVE __m256i lane_mask(int lanes) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
ORTX_PRIMITIVE vec_t vec_zero(void) { return _mm256_setzero_ps(); }
ORTX_PRIMITIVE vec_t vec_set1(float value) { return _mm256_set1_ps(value); }
ORTX_PRIMITIVE vec_t vec_broadcast(const float *p) { return _mm256_broadcast_ss(p); }
ORTX_PRIMITIVE vec_t vec_load(const float *p) { return _mm256_loadu_ps(p); }
ORTX_PRIMITIVE void vec_store(float *p, vec_t v) { _mm256_storeu_ps(p, v); }
ORTX_PRIMITIVE vec_t vec_load_part(const float *p, int lanes) { return _mm256_maskload_ps(p, lane_mask(lanes)); }
ORTX_PRIMITIVE void vec_store_part(float *p, vec_t v, int lanes) { _mm256_maskstore_ps(p, lane_mask(lanes), v); }
ORTX_PRIMITIVE vec_t vec_fma(vec_t a, vec_t b, vec_t c) { return _mm256_fmadd_ps(a, b, c); }
ORTX_PRIMITIVE vec_t vec_add(vec_t a, vec_t b) { return _mm256_add_ps(a, b); }
ORTX_PRIMITIVE vec_t vec_mul(vec_t a, vec_t b) { return _mm256_mul_ps(a, b); }
ORTX_PRIMITIVE vec_t vec_max(vec_t a, vec_t b) { return _mm256_max_ps(a, b); }
ORTX_PRIMITIVE vec_t vec_min(vec_t a, vec_t b) { return _mm256_min_ps(a, b); }
/* value where value >= 0, else if_negative (LeakyRelu) */
ORTX_PRIMITIVE vec_t vec_where_negative(vec_t value, vec_t if_negative) {
    return _mm256_blendv_ps(if_negative, value, _mm256_cmp_ps(value, _mm256_setzero_ps(), _CMP_GE_OQ));
}
ORTX_PRIMITIVE void vec_prefetch(const float *p) { _mm_prefetch((const char *)p, _MM_HINT_T0); }
