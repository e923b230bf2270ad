/* Portable vector primitives for templates/gemm.c: GCC/Clang vector extensions of 4 floats, which the compiler
 * lowers to whatever the baseline target has (an SSE register on x86-64, a NEON register on AArch64, scalars
 * elsewhere). Partial vectors go through a local array. No intrinsics and no target attribute. */
#define VL 4
#define ORTX_TARGET
#define ORTX_PRIMITIVE static inline __attribute__((always_inline))

typedef float vec_t __attribute__((vector_size(VL * sizeof(float))));
typedef int32_t vec_mask_t __attribute__((vector_size(VL * sizeof(int32_t))));

/* Lanes of if_true where mask is all ones, else of if_false (C has no ?: on vectors). */
ORTX_PRIMITIVE vec_t vec_select(vec_mask_t mask, vec_t if_true, vec_t if_false) {
    return (vec_t)((mask & (vec_mask_t)if_true) | (~mask & (vec_mask_t)if_false));
}

ORTX_PRIMITIVE vec_t vec_set1(float value) {
    vec_t v = {value, value, value, value};
    return v;
}
ORTX_PRIMITIVE vec_t vec_zero(void) { return vec_set1(0.0f); }
ORTX_PRIMITIVE vec_t vec_broadcast(const float *p) { return vec_set1(*p); }
ORTX_PRIMITIVE vec_t vec_load(const float *p) {
    vec_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}
ORTX_PRIMITIVE void vec_store(float *p, vec_t v) { memcpy(p, &v, sizeof(v)); }
ORTX_PRIMITIVE vec_t vec_load_part(const float *p, int lanes) {
    float lanes_in[VL] = {0};
    memcpy(lanes_in, p, (size_t)lanes * sizeof(float));
    return vec_load(lanes_in);
}
ORTX_PRIMITIVE void vec_store_part(float *p, vec_t v, int lanes) {
    float lanes_out[VL];
    vec_store(lanes_out, v);
    memcpy(p, lanes_out, (size_t)lanes * sizeof(float));
}
ORTX_PRIMITIVE vec_t vec_fma(vec_t a, vec_t b, vec_t c) { return a * b + c; }
ORTX_PRIMITIVE vec_t vec_add(vec_t a, vec_t b) { return a + b; }
ORTX_PRIMITIVE vec_t vec_mul(vec_t a, vec_t b) { return a * b; }
ORTX_PRIMITIVE vec_t vec_max(vec_t a, vec_t b) { return vec_select(a > b, a, b); }
ORTX_PRIMITIVE vec_t vec_min(vec_t a, vec_t b) { return vec_select(a < b, a, b); }
/* value where value >= 0, else if_negative (LeakyRelu) */
ORTX_PRIMITIVE vec_t vec_where_negative(vec_t value, vec_t if_negative) {
    return vec_select(value >= vec_zero(), value, if_negative);
}
ORTX_PRIMITIVE void vec_prefetch(const float *p) { __builtin_prefetch(p); }
