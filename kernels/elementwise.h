/* Internal declarations shared by the elementwise and reduce families: op codes, the scalar definition of every
 * unary op (the oracle's and the portable path's), and the per-ISA row functions that the dispatchers in
 * elementwise.c / reduce.c call.
 *
 * Unary codes 1..7 are kernels/activation.h's activation codes, so a fused epilogue and a standalone unary step
 * name an activation the same way; codes from 16 on are the remaining ONNX unary ops.
 */
#ifndef ORTX_ELEMENTWISE_H
#define ORTX_ELEMENTWISE_H

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "activation.h"

enum {
    ORTX_UNARY_IDENTITY = 0, /* copy (Cast float32 -> float32, single-input Sum/Max/Min/Mean) */
    /* 1..7: ORTX_ACT_* (Relu, LeakyRelu(alpha), Clip(min, max), Sigmoid, HardSigmoid(alpha, beta), HardSwish,
     * Tanh) */
    ORTX_UNARY_EXP = 16,
    ORTX_UNARY_LOG = 17,
    ORTX_UNARY_SQRT = 18,
    ORTX_UNARY_NEG = 19,
    ORTX_UNARY_ABS = 20,
    ORTX_UNARY_RECIPROCAL = 21,
    ORTX_UNARY_ERF = 22,
    ORTX_UNARY_FLOOR = 23,
    ORTX_UNARY_CEIL = 24,
    ORTX_UNARY_SOFTPLUS = 25,
    ORTX_UNARY_ELU = 26,       /* p0 = alpha */
    ORTX_UNARY_SELU = 27,      /* p0 = alpha, p1 = gamma */
    ORTX_UNARY_GELU = 28,      /* 0.5 x (1 + erf(x / sqrt 2)) */
    ORTX_UNARY_GELU_TANH = 29, /* 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) */
    ORTX_UNARY_SIGN = 30,
    ORTX_UNARY_SILU = 31,      /* p0 = alpha: x * sigmoid(alpha x) (ONNX Swish, onnxruntime's QuickGelu) */
    ORTX_UNARY_COUNT = 32,
};

enum {
    ORTX_BINARY_ADD = 0,
    ORTX_BINARY_SUB = 1,
    ORTX_BINARY_MUL = 2,
    ORTX_BINARY_DIV = 3,
    ORTX_BINARY_POW = 4,
    ORTX_BINARY_MAX = 5,
    ORTX_BINARY_MIN = 6,
    ORTX_BINARY_COUNT = 7,
};

/* elementwise_chain_f32's limits (the lowering fuses no more than this). */
#define ORTX_CHAIN_MAX_INPUTS 8
#define ORTX_CHAIN_MAX_TEMPS 8
#define ORTX_CHAIN_MAX_OPS 32
/* Elements per chunk of a chain: 8 KiB of temps stay in L1, and every input is read in short bursts that keep its
 * stream going (1024 measured 1.6x slower on 10 MB tensors, 128 slower on tensors that fit L2). */
#define ORTX_CHAIN_CHUNK 256

/* One op of an elementwise chain, decoded from the step's ints (layout in elementwise.c). */
typedef struct ortx_chain_op {
    int kind, code, dst, a, b; /* kind 0 unary, 1 binary; operands index [inputs..., temps...]; dst -1 = y */
    float p0, p1;
} ortx_chain_op;

enum {
    ORTX_COMPARE_EQUAL = 0,
    ORTX_COMPARE_LESS = 1,
    ORTX_COMPARE_GREATER = 2,
    ORTX_COMPARE_LESS_OR_EQUAL = 3,
    ORTX_COMPARE_GREATER_OR_EQUAL = 4,
};

/* Generic over float/int64/int32 (the comparisons are the same expressions for all three). */
#define ortx_compare(op, a, b)                                                                               \
    (uint8_t)((op) == ORTX_COMPARE_EQUAL ? (a) == (b)                                                      \
              : (op) == ORTX_COMPARE_LESS ? (a) < (b)                                                      \
              : (op) == ORTX_COMPARE_GREATER ? (a) > (b)                                                   \
              : (op) == ORTX_COMPARE_LESS_OR_EQUAL ? (a) <= (b) : (a) >= (b))

/* Reductions: the first op folds the input row, later steps of a multi-axis reduction fold partial results
 * (sum for Sum/SumSquare/Mean/L2, max, min); the post op runs on the final value. */
enum { ORTX_REDUCE_SUM = 0, ORTX_REDUCE_SUM_SQUARE = 1, ORTX_REDUCE_MAX = 2, ORTX_REDUCE_MIN = 3 };
enum { ORTX_REDUCE_POST_NONE = 0, ORTX_REDUCE_POST_SCALE = 1, ORTX_REDUCE_POST_SQRT = 2 };

/* The ONNX definitions, in float with libm; Softplus and Gelu follow onnxruntime's formulation. */
static inline float ortx_unary_scalar(int op, float x, float p0, float p1) {
    switch (op) {
        case ORTX_UNARY_IDENTITY: return x;
        case ORTX_UNARY_EXP: return expf(x);
        case ORTX_UNARY_LOG: return logf(x);
        case ORTX_UNARY_SQRT: return sqrtf(x);
        case ORTX_UNARY_NEG: return -x;
        case ORTX_UNARY_ABS: return fabsf(x);
        case ORTX_UNARY_RECIPROCAL: return 1.0f / x;
        case ORTX_UNARY_ERF: return erff(x);
        case ORTX_UNARY_FLOOR: return floorf(x);
        case ORTX_UNARY_CEIL: return ceilf(x);
        case ORTX_UNARY_SOFTPLUS: return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x));
        case ORTX_UNARY_ELU: return x >= 0.0f ? x : p0 * (expf(x) - 1.0f);
        case ORTX_UNARY_SELU: return x > 0.0f ? p1 * x : p1 * (p0 * expf(x) - p0);
        case ORTX_UNARY_GELU: return 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2));
        case ORTX_UNARY_GELU_TANH: {
            const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
            return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
        }
        case ORTX_UNARY_SIGN: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x);
        case ORTX_UNARY_SILU: return x * ortx_activation_scalar(ORTX_ACT_SIGMOID, p0 * x, 0.0f, 0.0f);
        default: return ortx_activation_scalar(op, x, p0, p1);
    }
}

static inline float ortx_binary_scalar(int op, float a, float b) {
    switch (op) {
        case ORTX_BINARY_ADD: return a + b;
        case ORTX_BINARY_SUB: return a - b;
        case ORTX_BINARY_MUL: return a * b;
        case ORTX_BINARY_DIV: return a / b;
        case ORTX_BINARY_POW: return powf(a, b);
        case ORTX_BINARY_MAX: return a >= b ? a : (a < b ? b : (a != a ? a : b));
        default: return a <= b ? a : (a > b ? b : (a != a ? a : b));
    }
}

/* Integer division truncates toward zero as onnxruntime does (C++ '/'); x / 0 and INT_MIN / -1, undefined in
 * C, give 0 and INT_MIN instead of trapping. */
#define ORTX_INT_BINARY(type, name)                                                                  \
    static inline type name(int op, type a, type b) {                                                \
        switch (op) {                                                                                \
            case ORTX_BINARY_ADD: return (type)((uint64_t)a + (uint64_t)b);                          \
            case ORTX_BINARY_SUB: return (type)((uint64_t)a - (uint64_t)b);                          \
            case ORTX_BINARY_MUL: return (type)((uint64_t)a * (uint64_t)b);                          \
            case ORTX_BINARY_DIV: return b == 0 ? 0 : (b == -1 ? (type)(0 - (uint64_t)a) : a / b);   \
            case ORTX_BINARY_MAX: return a > b ? a : b;                                              \
            default: return a < b ? a : b;                                                           \
        }                                                                                            \
    }
ORTX_INT_BINARY(int64_t, ortx_binary_scalar_i64)
ORTX_INT_BINARY(int32_t, ortx_binary_scalar_i32)
#undef ORTX_INT_BINARY

/* The unary op over n contiguous floats with the selected ISA's row (elementwise.c); softmax uses it for exp. */
void ortx_unary_f32_range(int op, float p0, float p1, const float *x, float *y, int64_t n);

/* Per-ISA row functions (elementwise_avx2.c / elementwise_avx512.c). A unary variant handles the ops its
 * *_supports() accepts; the dispatcher falls back to the portable loop for the others. Binary rows take element
 * strides 0 or 1 for each operand (0: that operand is broadcast along the row). */
int ortx_unary_f32_avx2_supports(int op);
void ortx_unary_f32_avx2(int op, float p0, float p1, const float *x, float *y, int64_t n);
void ortx_binary_f32_avx2(int op, const float *a, int64_t a_stride, const float *b, int64_t b_stride, float *y,
                          int64_t n);
void ortx_affine_f32_avx2(const float *x, float scale, float shift, float *y, int64_t n);
/* n <= ORTX_CHAIN_CHUNK elements of a chain whose unary ops all pass _supports: starts[k] is input k at the chunk,
 * inner[k] its stride (1, or 0: one value broadcast); every op runs on registers, y is written once. */
void ortx_chain_chunk_f32_avx2(const ortx_chain_op *ops, int count, int inputs, const float *const *starts,
                               const int64_t *inner, float *y, int64_t n);

int ortx_unary_f32_avx512_supports(int op);
void ortx_unary_f32_avx512(int op, float p0, float p1, const float *x, float *y, int64_t n);
void ortx_binary_f32_avx512(int op, const float *a, int64_t a_stride, const float *b, int64_t b_stride, float *y,
                            int64_t n);
void ortx_affine_f32_avx512(const float *x, float scale, float shift, float *y, int64_t n);
void ortx_chain_chunk_f32_avx512(const ortx_chain_op *ops, int count, int inputs, const float *const *starts,
                                 const int64_t *inner, float *y, int64_t n);

/* One softmax row (log != 0: LogSoftmax) with the selected ISA's row function (reduce.c); x may equal y. */
void ortx_softmax_row_f32(const float *x, float *y, int64_t n, int log);

/* Reduce-family rows (reduce_avx2.c / reduce_avx512.c).
 * fold: the op over n contiguous floats (sum, sum of squares, max, min).
 * accumulate: into[j] = op(into[j], x[j]) for j < n (fold_first: into[j] = first-op(x[j]), e.g. x^2).
 * softmax: one contiguous row of n, max-subtracted; log != 0 gives LogSoftmax.
 * layer_norm: one row: y = (x - mean) / sqrt(var + eps) * scale (+ bias when bias != NULL).
 * short_rows: y[i] = fold of row i (x[i * length], ..., in order r = 0, 1, ...) for i < rows; for
 *   length <= ORTX_REDUCE_SHORT_ROW, where a vector fold per row would hold mostly masked-off lanes. */
#define ORTX_REDUCE_SHORT_ROW 8
float ortx_reduce_fold_f32_avx2(int op, const float *x, int64_t n);
void ortx_reduce_short_rows_f32_avx2(int op, const float *x, float *y, int64_t rows, int64_t length);
void ortx_reduce_accumulate_f32_avx2(int op, int first, const float *x, float *into, int64_t n);
void ortx_softmax_row_f32_avx2(const float *x, float *y, int64_t n, int log);
void ortx_layer_norm_row_f32_avx2(const float *x, const float *scale, const float *bias, float epsilon, float *y,
                                  int64_t n);

float ortx_reduce_fold_f32_avx512(int op, const float *x, int64_t n);
void ortx_reduce_short_rows_f32_avx512(int op, const float *x, float *y, int64_t rows, int64_t length);
void ortx_reduce_accumulate_f32_avx512(int op, int first, const float *x, float *into, int64_t n);
void ortx_softmax_row_f32_avx512(const float *x, float *y, int64_t n, int log);
void ortx_layer_norm_row_f32_avx512(const float *x, const float *scale, const float *bias, float epsilon, float *y,
                                    int64_t n);

#endif
