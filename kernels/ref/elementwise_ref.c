/* Oracles of the "elementwise" family: plain loops, one element at a time, no threads, libm for every function.
 * Parameter layouts are documented in kernels/elementwise.c. */
#include <string.h>

#include "elementwise.h"

void ortx_unary_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    const float *x = buffers[0];
    float *y = buffers[1];
    for (int64_t i = 0; i < ints[1]; i++) y[i] = ortx_unary_scalar((int)ints[0], x[i], floats[0], floats[1]);
}

/* Offsets of output element `index` in a and b, from its multi-index over dims. */
static void broadcast_offsets(const int64_t *ints, int64_t index, int64_t *a_offset, int64_t *b_offset) {
    int rank = (int)ints[1];
    const int64_t *dims = ints + 2, *a_strides = ints + 2 + rank, *b_strides = ints + 2 + 2 * rank;
    *a_offset = 0;
    *b_offset = 0;
    for (int axis = rank - 1; axis >= 0; axis--) {
        int64_t coordinate = index % dims[axis];
        index /= dims[axis];
        *a_offset += coordinate * a_strides[axis];
        *b_offset += coordinate * b_strides[axis];
    }
}

static int64_t element_count(const int64_t *ints) {
    int64_t count = 1;
    for (int axis = 0; axis < ints[1]; axis++) count *= ints[2 + axis];
    return count;
}

void ortx_binary_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    const float *a = buffers[0], *b = buffers[1];
    float *y = buffers[2];
    for (int64_t i = 0, count = element_count(ints); i < count; i++) {
        int64_t a_offset, b_offset;
        broadcast_offsets(ints, i, &a_offset, &b_offset);
        y[i] = ortx_binary_scalar((int)ints[0], a[a_offset], b[b_offset]);
    }
}

void ortx_binary_i64_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    const int64_t *a = buffers[0], *b = buffers[1];
    int64_t *y = buffers[2];
    for (int64_t i = 0, count = element_count(ints); i < count; i++) {
        int64_t a_offset, b_offset;
        broadcast_offsets(ints, i, &a_offset, &b_offset);
        y[i] = ortx_binary_scalar_i64((int)ints[0], a[a_offset], b[b_offset]);
    }
}

void ortx_binary_i32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    const int32_t *a = buffers[0], *b = buffers[1];
    int32_t *y = buffers[2];
    for (int64_t i = 0, count = element_count(ints); i < count; i++) {
        int64_t a_offset, b_offset;
        broadcast_offsets(ints, i, &a_offset, &b_offset);
        y[i] = ortx_binary_scalar_i32((int)ints[0], a[a_offset], b[b_offset]);
    }
}

void ortx_channel_affine_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    const float *x = buffers[0], *scale = buffers[1], *shift = buffers[2];
    float *y = buffers[3];
    for (int64_t o = 0; o < ints[0]; o++)
        for (int64_t c = 0; c < ints[1]; c++)
            for (int64_t i = 0; i < ints[2]; i++) {
                int64_t index = (o * ints[1] + c) * ints[2] + i;
                y[index] = x[index] * scale[c] + shift[c];
            }
}

void ortx_cast_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    int from = (int)ints[0], to = (int)ints[1];
    for (int64_t i = 0; i < ints[2]; i++) {
        float f = 0.0f;
        int64_t integer = 0;
        int is_float = from == 1;
        switch (from) {
            case 1: f = ((const float *)buffers[0])[i]; break;
            case 6: integer = ((const int32_t *)buffers[0])[i]; break;
            case 7: integer = ((const int64_t *)buffers[0])[i]; break;
            default: integer = ((const uint8_t *)buffers[0])[i] != 0; break;
        }
        switch (to) {
            case 1: ((float *)buffers[1])[i] = is_float ? f : (float)integer; break;
            case 6: ((int32_t *)buffers[1])[i] = is_float ? (int32_t)f : (int32_t)integer; break;
            case 7: ((int64_t *)buffers[1])[i] = is_float ? (int64_t)f : integer; break;
            default: ((uint8_t *)buffers[1])[i] = is_float ? f != 0.0f : integer != 0; break;
        }
    }
}

#define ORTX_COMPARE_REF(name, type)                                                                         \
    void name(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {             \
        (void)floats;                                                                                        \
        (void)num_threads;                                                                                   \
        const type *a = buffers[0], *b = buffers[1];                                                         \
        uint8_t *y = buffers[2];                                                                             \
        for (int64_t i = 0, count = element_count(ints); i < count; i++) {                                   \
            int64_t a_offset, b_offset;                                                                      \
            broadcast_offsets(ints, i, &a_offset, &b_offset);                                                \
            y[i] = ortx_compare((int)ints[0], a[a_offset], b[b_offset]);                                     \
        }                                                                                                    \
    }
ORTX_COMPARE_REF(ortx_compare_f32_ref, float)
ORTX_COMPARE_REF(ortx_compare_i64_ref, int64_t)
ORTX_COMPARE_REF(ortx_compare_i32_ref, int32_t)

void ortx_where_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    int64_t bytes = ints[0];
    int rank = (int)ints[1];
    const int64_t *dims = ints + 2;
    int64_t count = 1;
    for (int axis = 0; axis < rank; axis++) count *= dims[axis];
    for (int64_t i = 0; i < count; i++) {
        int64_t offsets[3] = {0, 0, 0}, rest = i;
        for (int axis = rank - 1; axis >= 0; axis--) {
            int64_t index = rest % dims[axis];
            rest /= dims[axis];
            for (int k = 0; k < 3; k++) offsets[k] += index * ints[2 + (k + 1) * rank + axis];
        }
        const char *source = ((const uint8_t *)buffers[0])[offsets[0]] ? (const char *)buffers[1] + offsets[1] * bytes
                                                                        : (const char *)buffers[2] + offsets[2] * bytes;
        memcpy((char *)buffers[3] + i * bytes, source, (size_t)bytes);
    }
}

/* Each output element evaluates the chain's program on scalars, as written (see elementwise.c for the layout). */
void ortx_elementwise_chain_f32_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                    int num_threads) {
    (void)num_threads;
    int inputs = (int)ints[0], ops = (int)ints[1], temps = (int)ints[2], rank = (int)ints[3];
    const int64_t *dims = ints + 4, *strides = dims + rank, *program = strides + (int64_t)inputs * rank;
    float *y = buffers[inputs];
    float values[ORTX_CHAIN_MAX_INPUTS + ORTX_CHAIN_MAX_TEMPS];
    if (inputs > ORTX_CHAIN_MAX_INPUTS || temps > ORTX_CHAIN_MAX_TEMPS) return;
    int64_t count = 1;
    for (int axis = 0; axis < rank; axis++) count *= dims[axis];
    for (int64_t index = 0; index < count; index++) {
        for (int k = 0; k < inputs; k++) {
            int64_t offset = 0, rest = index;
            for (int axis = rank - 1; axis >= 0; axis--) {
                offset += (rest % dims[axis]) * strides[(int64_t)k * rank + axis];
                rest /= dims[axis];
            }
            values[k] = ((const float *)buffers[k])[offset];
        }
        float result = 0.0f;
        for (int op = 0; op < ops; op++) {
            const int64_t *code = program + 5 * (int64_t)op;
            float a = values[code[3]];
            result = code[0] == 1 ? ortx_binary_scalar((int)code[1], a, values[code[4]])
                                  : ortx_unary_scalar((int)code[1], a, floats[2 * op], floats[2 * op + 1]);
            if (code[2] >= 0) values[code[2]] = result;
        }
        y[index] = result;
    }
}
