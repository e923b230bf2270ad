/* AVX-512 rows of the "elementwise" family: elementwise_avx2.c with 16-float vectors and mask-register tails.
 * Same algorithms, operation for operation, as the AVX2 rows. */
#include "elementwise.h"
#include "vector_math.h"

#if ORTX_HAVE_X86

static inline __mmask16 tail_mask(int64_t remaining) { return (__mmask16)((1u << remaining) - 1u); }

int ortx_unary_f32_avx512_supports(int op) { return ortx_unary_f32_avx2_supports(op); }

ORTX_TARGET_AVX512 __attribute__((always_inline)) static inline __m512 unary_vector(int op, __m512 x, __m512 p0,
                                                                                    __m512 p1) {
    __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);
    switch (op) {
        case ORTX_ACT_RELU: return _mm512_max_ps(x, zero);
        case ORTX_ACT_LEAKY_RELU:
            return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, zero, _CMP_GE_OQ), _mm512_mul_ps(x, p0), x);
        case ORTX_ACT_CLIP: return _mm512_min_ps(_mm512_max_ps(x, p0), p1);
        case ORTX_ACT_SIGMOID: return ortx_sigmoid_avx512(x);
        case ORTX_ACT_HARD_SIGMOID: return _mm512_min_ps(_mm512_max_ps(_mm512_fmadd_ps(x, p0, p1), zero), one);
        case ORTX_ACT_HARD_SWISH: {
            __m512 gate = _mm512_add_ps(_mm512_div_ps(x, _mm512_set1_ps(6.0f)), half);
            return _mm512_mul_ps(x, _mm512_min_ps(_mm512_max_ps(gate, zero), one));
        }
        case ORTX_ACT_TANH: return ortx_tanh_avx512(x);
        case ORTX_UNARY_EXP: return ortx_exp_avx512(x);
        case ORTX_UNARY_LOG: return ortx_log_avx512(x);
        case ORTX_UNARY_ERF: return ortx_erf_avx512(x);
        case ORTX_UNARY_GELU: return ortx_gelu_avx512(x);
        case ORTX_UNARY_GELU_TANH: {
            __m512 cube = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
            __m512 inner = _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f),
                                         _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), cube, x));
            return _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_add_ps(one, ortx_tanh_avx512(inner)));
        }
        case ORTX_UNARY_SILU: return _mm512_mul_ps(x, ortx_sigmoid_avx512(_mm512_mul_ps(p0, x)));
        case ORTX_UNARY_NEG: return _mm512_xor_ps(x, _mm512_set1_ps(-0.0f));
        default: return _mm512_abs_ps(x); /* ORTX_UNARY_ABS */
    }
}

ORTX_TARGET_AVX512 __attribute__((always_inline)) static inline void unary_loop(int op, float p0, float p1,
                                                                                const float *x, float *y,
                                                                                int64_t n) {
    __m512 v0 = _mm512_set1_ps(p0), v1 = _mm512_set1_ps(p1);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, unary_vector(op, _mm512_loadu_ps(x + i), v0, v1));
    if (i < n) {
        __mmask16 mask = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, mask, unary_vector(op, _mm512_maskz_loadu_ps(mask, x + i), v0, v1));
    }
}

ORTX_TARGET_AVX512 void ortx_unary_f32_avx512(int op, float p0, float p1, const float *x, float *y, int64_t n) {
    switch (op) {
        case ORTX_ACT_RELU: unary_loop(ORTX_ACT_RELU, p0, p1, x, y, n); break;
        case ORTX_ACT_LEAKY_RELU: unary_loop(ORTX_ACT_LEAKY_RELU, p0, p1, x, y, n); break;
        case ORTX_ACT_CLIP: unary_loop(ORTX_ACT_CLIP, p0, p1, x, y, n); break;
        case ORTX_ACT_SIGMOID: unary_loop(ORTX_ACT_SIGMOID, p0, p1, x, y, n); break;
        case ORTX_ACT_HARD_SIGMOID: unary_loop(ORTX_ACT_HARD_SIGMOID, p0, p1, x, y, n); break;
        case ORTX_ACT_HARD_SWISH: unary_loop(ORTX_ACT_HARD_SWISH, p0, p1, x, y, n); break;
        case ORTX_ACT_TANH: unary_loop(ORTX_ACT_TANH, p0, p1, x, y, n); break;
        case ORTX_UNARY_EXP: unary_loop(ORTX_UNARY_EXP, p0, p1, x, y, n); break;
        case ORTX_UNARY_LOG: unary_loop(ORTX_UNARY_LOG, p0, p1, x, y, n); break;
        case ORTX_UNARY_ERF: unary_loop(ORTX_UNARY_ERF, p0, p1, x, y, n); break;
        case ORTX_UNARY_GELU: unary_loop(ORTX_UNARY_GELU, p0, p1, x, y, n); break;
        case ORTX_UNARY_GELU_TANH: unary_loop(ORTX_UNARY_GELU_TANH, p0, p1, x, y, n); break;
        case ORTX_UNARY_SILU: unary_loop(ORTX_UNARY_SILU, p0, p1, x, y, n); break;
        case ORTX_UNARY_NEG: unary_loop(ORTX_UNARY_NEG, p0, p1, x, y, n); break;
        default: unary_loop(ORTX_UNARY_ABS, p0, p1, x, y, n); break;
    }
}

ORTX_TARGET_AVX512 __attribute__((always_inline)) static inline __m512 binary_vector(int op, __m512 a, __m512 b) {
    switch (op) {
        case ORTX_BINARY_ADD: return _mm512_add_ps(a, b);
        case ORTX_BINARY_SUB: return _mm512_sub_ps(a, b);
        case ORTX_BINARY_MUL: return _mm512_mul_ps(a, b);
        case ORTX_BINARY_DIV: return _mm512_div_ps(a, b);
        case ORTX_BINARY_MAX:
            return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), _mm512_max_ps(a, b), a);
        default:
            return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), _mm512_min_ps(a, b), a);
    }
}

ORTX_TARGET_AVX512 __attribute__((always_inline)) static inline void binary_loop(int op, const float *a,
                                                                                 int64_t a_stride, const float *b,
                                                                                 int64_t b_stride, float *y,
                                                                                 int64_t n) {
    __m512 a_scalar = _mm512_set1_ps(a[0]), b_scalar = _mm512_set1_ps(b[0]);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 va = a_stride ? _mm512_loadu_ps(a + i) : a_scalar;
        __m512 vb = b_stride ? _mm512_loadu_ps(b + i) : b_scalar;
        _mm512_storeu_ps(y + i, binary_vector(op, va, vb));
    }
    if (i < n) {
        __mmask16 mask = tail_mask(n - i);
        __m512 va = a_stride ? _mm512_maskz_loadu_ps(mask, a + i) : a_scalar;
        __m512 vb = b_stride ? _mm512_maskz_loadu_ps(mask, b + i) : b_scalar;
        _mm512_mask_storeu_ps(y + i, mask, binary_vector(op, va, vb));
    }
}

ORTX_TARGET_AVX512 __attribute__((always_inline)) static inline void binary_strides(int op, const float *a,
                                                                                    int64_t a_stride,
                                                                                    const float *b,
                                                                                    int64_t b_stride, float *y,
                                                                                    int64_t n) {
    if (a_stride && b_stride) binary_loop(op, a, 1, b, 1, y, n);
    else if (a_stride) binary_loop(op, a, 1, b, 0, y, n);
    else if (b_stride) binary_loop(op, a, 0, b, 1, y, n);
    else binary_loop(op, a, 0, b, 0, y, n);
}

ORTX_TARGET_AVX512 void ortx_binary_f32_avx512(int op, const float *a, int64_t a_stride, const float *b,
                                               int64_t b_stride, float *y, int64_t n) {
    switch (op) {
        case ORTX_BINARY_ADD: binary_strides(ORTX_BINARY_ADD, a, a_stride, b, b_stride, y, n); break;
        case ORTX_BINARY_SUB: binary_strides(ORTX_BINARY_SUB, a, a_stride, b, b_stride, y, n); break;
        case ORTX_BINARY_MUL: binary_strides(ORTX_BINARY_MUL, a, a_stride, b, b_stride, y, n); break;
        case ORTX_BINARY_DIV: binary_strides(ORTX_BINARY_DIV, a, a_stride, b, b_stride, y, n); break;
        case ORTX_BINARY_MAX: binary_strides(ORTX_BINARY_MAX, a, a_stride, b, b_stride, y, n); break;
        default: binary_strides(ORTX_BINARY_MIN, a, a_stride, b, b_stride, y, n); break;
    }
}

ORTX_TARGET_AVX512 void ortx_affine_f32_avx512(const float *x, float scale, float shift, float *y, int64_t n) {
    __m512 vs = _mm512_set1_ps(scale), vt = _mm512_set1_ps(shift);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), vs), vt));
    if (i < n) {
        __mmask16 mask = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, mask,
                              _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(mask, x + i), vs), vt));
    }
}

/* One op over a chunk: a, b are operand rows (or broadcast values), EXPR the op on vectors va, vb. */
#define CHAIN_LOOP(EXPR)                                                                                          \
    do {                                                                                                          \
        for (int64_t v = 0; v < full; v++) {                                                                      \
            __m512 va = a_broadcast ? a_value : _mm512_loadu_ps(a_ptr + 16 * v);                            \
            __m512 vb = b_broadcast ? b_value : _mm512_loadu_ps(b_ptr + 16 * v);                            \
            (void)vb;                                                                                             \
            _mm512_storeu_ps(target + 16 * v, (EXPR));                                                       \
        }                                                                                                         \
        if (full * 16 < n) {                                                                                 \
            __mmask16 mask = tail_mask(n - 16 * full);                                                                                   \
            __m512 va = a_broadcast ? a_value : _mm512_maskz_loadu_ps(mask, a_ptr + 16 * full);                                       \
            __m512 vb = b_broadcast ? b_value : _mm512_maskz_loadu_ps(mask, b_ptr + 16 * full);                                       \
            (void)vb;                                                                                             \
            _mm512_mask_storeu_ps(target + 16 * full, mask, (EXPR));                                                                     \
        }                                                                                                         \
    } while (0)

ORTX_TARGET_AVX512 void ortx_chain_chunk_f32_avx512(const ortx_chain_op *ops, int count, int inputs,
                                                         const float *const *starts, const int64_t *inner, float *y, int64_t n) {
    float temps[ORTX_CHAIN_MAX_TEMPS][ORTX_CHAIN_CHUNK] __attribute__((aligned(64)));
    int64_t full = n / 16;
    for (int index = 0; index < count; index++) {
        const ortx_chain_op *op = &ops[index];
        __m512 p0 = _mm512_set1_ps(op->p0), p1 = _mm512_set1_ps(op->p1);
        const float *a_ptr = op->a >= inputs ? temps[op->a - inputs] : starts[op->a];
        int a_broadcast = op->a < inputs && !inner[op->a];
        const float *b_ptr = a_ptr;
        int b_broadcast = a_broadcast;
        if (op->kind == 1) {
            b_ptr = op->b >= inputs ? temps[op->b - inputs] : starts[op->b];
            b_broadcast = op->b < inputs && !inner[op->b];
        }
        __m512 a_value = _mm512_set1_ps(a_ptr[0]), b_value = _mm512_set1_ps(b_ptr[0]);
        float *target = op->dst < 0 ? y : temps[op->dst - inputs];
        if (op->kind == 1) {
            switch (op->code) {
                case ORTX_BINARY_ADD: CHAIN_LOOP(binary_vector(ORTX_BINARY_ADD, va, vb)); break;
                case ORTX_BINARY_SUB: CHAIN_LOOP(binary_vector(ORTX_BINARY_SUB, va, vb)); break;
                case ORTX_BINARY_MUL: CHAIN_LOOP(binary_vector(ORTX_BINARY_MUL, va, vb)); break;
                case ORTX_BINARY_DIV: CHAIN_LOOP(binary_vector(ORTX_BINARY_DIV, va, vb)); break;
                case ORTX_BINARY_MAX: CHAIN_LOOP(binary_vector(ORTX_BINARY_MAX, va, vb)); break;
                default: CHAIN_LOOP(binary_vector(ORTX_BINARY_MIN, va, vb)); break;
            }
        } else {
            switch (op->code) {
                case ORTX_ACT_RELU: CHAIN_LOOP(unary_vector(ORTX_ACT_RELU, va, p0, p1)); break;
                case ORTX_ACT_LEAKY_RELU: CHAIN_LOOP(unary_vector(ORTX_ACT_LEAKY_RELU, va, p0, p1)); break;
                case ORTX_ACT_CLIP: CHAIN_LOOP(unary_vector(ORTX_ACT_CLIP, va, p0, p1)); break;
                case ORTX_ACT_SIGMOID: CHAIN_LOOP(unary_vector(ORTX_ACT_SIGMOID, va, p0, p1)); break;
                case ORTX_ACT_HARD_SIGMOID: CHAIN_LOOP(unary_vector(ORTX_ACT_HARD_SIGMOID, va, p0, p1)); break;
                case ORTX_ACT_HARD_SWISH: CHAIN_LOOP(unary_vector(ORTX_ACT_HARD_SWISH, va, p0, p1)); break;
                case ORTX_ACT_TANH: CHAIN_LOOP(unary_vector(ORTX_ACT_TANH, va, p0, p1)); break;
                case ORTX_UNARY_EXP: CHAIN_LOOP(unary_vector(ORTX_UNARY_EXP, va, p0, p1)); break;
                case ORTX_UNARY_LOG: CHAIN_LOOP(unary_vector(ORTX_UNARY_LOG, va, p0, p1)); break;
                case ORTX_UNARY_ERF: CHAIN_LOOP(unary_vector(ORTX_UNARY_ERF, va, p0, p1)); break;
                case ORTX_UNARY_GELU: CHAIN_LOOP(unary_vector(ORTX_UNARY_GELU, va, p0, p1)); break;
                case ORTX_UNARY_GELU_TANH: CHAIN_LOOP(unary_vector(ORTX_UNARY_GELU_TANH, va, p0, p1)); break;
                case ORTX_UNARY_SILU: CHAIN_LOOP(unary_vector(ORTX_UNARY_SILU, va, p0, p1)); break;
                case ORTX_UNARY_NEG: CHAIN_LOOP(unary_vector(ORTX_UNARY_NEG, va, p0, p1)); break;
                default: CHAIN_LOOP(unary_vector(ORTX_UNARY_ABS, va, p0, p1)); break;
            }
        }
    }
}
#undef CHAIN_LOOP
#else
int ortx_unary_f32_avx512_supports(int op) { (void)op; return 0; }
void ortx_unary_f32_avx512(int op, float p0, float p1, const float *x, float *y, int64_t n) {
    (void)op; (void)p0; (void)p1; (void)x; (void)y; (void)n;
}
void ortx_binary_f32_avx512(int op, const float *a, int64_t a_stride, const float *b, int64_t b_stride, float *y,
                            int64_t n) {
    (void)op; (void)a; (void)a_stride; (void)b; (void)b_stride; (void)y; (void)n;
}
void ortx_affine_f32_avx512(const float *x, float scale, float shift, float *y, int64_t n) {
    (void)x; (void)scale; (void)shift; (void)y; (void)n;
}
void ortx_chain_chunk_f32_avx512(const ortx_chain_op *ops, int count, int inputs, const float *const *starts,
                               const int64_t *inner, float *y, int64_t n) {
    (void)ops; (void)count; (void)inputs; (void)starts; (void)inner; (void)y; (void)n;
}
#endif
