/* Oracle of the "attention" family: plain loops in float, no threads; layouts in kernels/attention.c. */
#include <math.h>
#include <stdlib.h>

#include "../gemm_bf16.h"
#include "ortx_kernels.h"

/* bf16: every product's operands rounded to bf16 (multi_head_attention_bf16), else as they are. */
static float operand(float value, int bf16) { return bf16 ? ortx_bf16_to_float(ortx_bf16_from_float(value)) : value; }

static void attention_ref(const int64_t *ints, const float *floats, void *const *buffers, int bf16) {
    int64_t batch = ints[0], heads = ints[1], S = ints[2], L = ints[3], D = ints[4], Dv = ints[5];
    const float *q = (const float *)buffers[0] + ints[6];
    const float *k = (const float *)buffers[1] + ints[7];
    const float *v = (const float *)buffers[2] + ints[8];
    float *y = buffers[3];
    float *scores = buffers[4];  /* the fast kernel's workspace holds at least L floats */
    for (int64_t b = 0; b < batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t s = 0; s < S; s++) {
                const float *qs = q + b * ints[13] + s * ints[9] + h * D;
                float max = -INFINITY, sum = 0.0f;
                for (int64_t l = 0; l < L; l++) {
                    const float *kl = k + b * ints[14] + l * ints[10] + h * D;
                    float dot = 0.0f;
                    for (int64_t d = 0; d < D; d++) dot += operand(qs[d], bf16) * operand(kl[d], bf16);
                    scores[l] = floats[0] * dot;
                    max = fmaxf(max, scores[l]);
                }
                for (int64_t l = 0; l < L; l++) {
                    scores[l] = expf(scores[l] - max);
                    sum += scores[l];
                }
                for (int64_t l = 0; l < L; l++) {
                    scores[l] /= sum;
                    if (ints[18]) {  /* QuantizeLinear, DequantizeLinear (kind 1 uint8, 2 int8) */
                        float low = (float)((ints[18] == 2 ? -128 : 0) - ints[19]);
                        float high = (float)((ints[18] == 2 ? 127 : 255) - ints[19]);
                        float value = fminf(fmaxf(scores[l] / floats[1], low), high);
                        scores[l] = (float)lrintf(value) * floats[1];
                    }
                }
                float *ys = y + b * ints[16] + s * ints[12] + h * Dv;
                for (int64_t e = 0; e < Dv; e++) {
                    float acc = 0.0f;
                    for (int64_t l = 0; l < L; l++)
                        acc += operand(scores[l], bf16) * operand(v[b * ints[15] + l * ints[11] + h * Dv + e], bf16);
                    ys[e] = acc;
                }
            }
}

void ortx_multi_head_attention_f32_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                       int num_threads) {
    (void)num_threads;
    attention_ref(ints, floats, buffers, 0);
}

void ortx_multi_head_attention_bf16_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                        int num_threads) {
    (void)num_threads;
    attention_ref(ints, floats, buffers, 1);
}
