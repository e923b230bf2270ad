/* Oracle of the "lrn" family (kernels/lrn.c): ONNX's LRN in plain float loops, no threads. */
#include <math.h>
#include <stdint.h>

void ortx_lrn_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    const int64_t N = ints[0], C = ints[1], P = ints[2], size = ints[3];
    const int64_t before = (size - 1) / 2, after = size / 2;  /* floor and ceil of (size - 1) / 2 */
    const float alpha = floats[0], beta = floats[1], bias = floats[2];
    const float *x = buffers[0];
    float *y = buffers[1];
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t p = 0; p < P; p++) {
                float sum = 0.0f;
                for (int64_t i = c - before; i <= c + after; i++)
                    if (i >= 0 && i < C) sum += x[(n * C + i) * P + p] * x[(n * C + i) * P + p];
                y[(n * C + c) * P + p] = x[(n * C + c) * P + p] / powf(bias + alpha / (float)size * sum, beta);
            }
}
