/* NEON vector primitives for templates/gemm.c (AArch64): 4-float q registers, fused multiply-add, partial vectors
 * through a local array. Only an AArch64 compiler builds this file; elsewhere the candidate fails to compile. */
#include <arm_neon.h>

#define VL 4
#define ORTX_TARGET
#define ORTX_PRIMITIVE static inline __attribute__((always_inline))

typedef float32x4_t vec_t;

ORTX_PRIMITIVE vec_t vec_zero(void) { return vdupq_n_f32(0.0f); }
ORTX_PRIMITIVE vec_t vec_set1(float value) { return vdupq_n_f32(value); }
ORTX_PRIMITIVE vec_t vec_broadcast(const float *p) { return vld1q_dup_f32(p); }
ORTX_PRIMITIVE vec_t vec_load(const float *p) { return vld1q_f32(p); }
ORTX_PRIMITIVE void vec_store(float *p, vec_t v) { vst1q_f32(p, v); }
ORTX_PRIMITIVE vec_t vec_load_part(const float *p, int lanes) {
    float lanes_in[VL] = {0};
    memcpy(lanes_in, p, (size_t)lanes * sizeof(float));
    return vld1q_f32(lanes_in);
}
ORTX_PRIMITIVE void vec_store_part(float *p, vec_t v, int lanes) {
    float lanes_out[VL];
    vst1q_f32(lanes_out, v);
    memcpy(p, lanes_out, (size_t)lanes * sizeof(float));
}
ORTX_PRIMITIVE vec_t vec_fma(vec_t a, vec_t b, vec_t c) { return vfmaq_f32(c, a, b); }
ORTX_PRIMITIVE vec_t vec_add(vec_t a, vec_t b) { return vaddq_f32(a, b); }
ORTX_PRIMITIVE vec_t vec_mul(vec_t a, vec_t b) { return vmulq_f32(a, b); }
ORTX_PRIMITIVE vec_t vec_max(vec_t a, vec_t b) { return vmaxq_f32(a, b); }
ORTX_PRIMITIVE vec_t vec_min(vec_t a, vec_t b) { return vminq_f32(a, b); }
/* value where value >= 0, else if_negative (LeakyRelu) */
ORTX_PRIMITIVE vec_t vec_where_negative(vec_t value, vec_t if_negative) {
    return vbslq_f32(vcgeq_f32(value, vdupq_n_f32(0.0f)), value, if_negative);
}
ORTX_PRIMITIVE void vec_prefetch(const float *p) { __builtin_prefetch(p); }
