/* Oracles of the "reduce" family: plain loops in float, no threads; layouts in kernels/reduce.c. */
#include <math.h>

#include "elementwise.h"

void ortx_reduce_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    int op = (int)ints[0], post = (int)ints[4];
    int64_t outer = ints[1], length = ints[2], inner = ints[3];
    const float *x = buffers[0];
    float *y = buffers[1];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            float acc = op == ORTX_REDUCE_MAX ? -INFINITY : (op == ORTX_REDUCE_MIN ? INFINITY : 0.0f);
            for (int64_t r = 0; r < length; r++) {
                float v = x[(o * length + r) * inner + i];
                if (op == ORTX_REDUCE_SUM) acc += v;
                else if (op == ORTX_REDUCE_SUM_SQUARE) acc += v * v;
                else if (op == ORTX_REDUCE_MAX) acc = fmaxf(acc, v);
                else acc = fminf(acc, v);
            }
            if (post == ORTX_REDUCE_POST_SCALE) acc *= floats[0];
            if (post == ORTX_REDUCE_POST_SQRT) acc = sqrtf(acc);
            y[o * inner + i] = acc;
        }
}

void ortx_softmax_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    int64_t outer = ints[0], length = ints[1], inner = ints[2];
    const float *x = buffers[0];
    float *y = buffers[1];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *xs = x + o * length * inner + i;
            float *ys = y + o * length * inner + i;
            float max = -INFINITY, sum = 0.0f;
            for (int64_t r = 0; r < length; r++) max = fmaxf(max, xs[r * inner]);
            for (int64_t r = 0; r < length; r++) sum += expf(xs[r * inner] - max);
            for (int64_t r = 0; r < length; r++)
                ys[r * inner] = ints[3] ? xs[r * inner] - max - logf(sum) : expf(xs[r * inner] - max) / sum;
        }
}

void ortx_layer_norm_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    int64_t rows = ints[0], length = ints[1];
    const float *x = buffers[0], *scale = buffers[1], *bias = buffers[2];
    float *y = buffers[3];
    for (int64_t row = 0; row < rows; row++) {
        const float *xr = x + row * length;
        float mean = 0.0f, variance = 0.0f;
        for (int64_t i = 0; i < length; i++) mean += xr[i];
        mean /= (float)length;
        for (int64_t i = 0; i < length; i++) variance += (xr[i] - mean) * (xr[i] - mean);
        variance /= (float)length;
        for (int64_t i = 0; i < length; i++)
            y[row * length + i] = (xr[i] - mean) / sqrtf(variance + floats[0]) * scale[i] + (ints[2] ? bias[i] : 0.0f);
    }
}

/* Scans every element (no early exit at a NaN): the first NaN's index, else the first (or last) extreme's. */
void ortx_arg_extreme_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    int64_t outer = ints[0], length = ints[1], inner = ints[2];
    const float *x = buffers[0];
    int64_t *y = buffers[1];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t best_index = -1, nan_index = -1;
            for (int64_t r = 0; r < length; r++) {
                float v = x[(o * length + r) * inner + i];
                if (v != v) {
                    if (nan_index < 0) nan_index = r;
                    continue;
                }
                float best = best_index < 0 ? v : x[(o * length + best_index) * inner + i];
                if (best_index < 0 || (ints[3] ? v < best : v > best) || (ints[4] && v == best)) best_index = r;
            }
            y[o * inner + i] = nan_index >= 0 ? nan_index : best_index;
        }
}
