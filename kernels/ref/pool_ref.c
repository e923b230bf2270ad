/* Reference pool kernels: plain loops over every output and window tap, no threading; the oracle for
 * kernels/pool.c (same ints/buffers layout, documented in kernels/pool_internal.h). */
#include <float.h>

#include "conv.h"
#include "ortx_kernels.h"
#include "pool_internal.h"

static void pool_ref(const int64_t *ints, void *const *buffers, int is_max) {
    const ortx_pool_params p = ortx_pool_params_read(ints);
    const float *x = (const float *)buffers[0];
    float *y = (float *)buffers[1];
    for (int64_t c = 0; c < p.channels; c++)
        for (int64_t od = 0; od < p.out[0]; od++)
            for (int64_t oh = 0; oh < p.out[1]; oh++)
                for (int64_t ow = 0; ow < p.out[2]; ow++) {
                    const int64_t o[3] = {od, oh, ow};
                    int64_t first[3], last[3], padded[3], start[3];
                    for (int a = 0; a < 3; a++) {
                        ortx_pool_taps(&p, a, o[a], &first[a], &last[a], &padded[a]);
                        start[a] = o[a] * p.stride[a] - p.pad_begin[a];
                    }
                    float best = -FLT_MAX, sum = 0.0f;
                    int64_t count = 0;
                    for (int64_t i = first[0]; i < last[0]; i++)
                        for (int64_t j = first[1]; j < last[1]; j++)
                            for (int64_t l = first[2]; l < last[2]; l++) {
                                int64_t d = start[0] + i * p.dilation[0];
                                int64_t h = start[1] + j * p.dilation[1];
                                int64_t w = start[2] + l * p.dilation[2];
                                float v = x[((c * p.in[0] + d) * p.in[1] + h) * p.in[2] + w];
                                best = v > best ? v : best;
                                sum += v;
                                count++;
                            }
                    if (p.count_include_pad) count = padded[0] * padded[1] * padded[2];
                    float *dst = &y[((c * p.out[0] + od) * p.out[1] + oh) * p.out[2] + ow];
                    *dst = is_max ? best : (count > 0 ? sum / (float)count : 0.0f);
                }
}

void ortx_maxpool_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    pool_ref(ints, buffers, 1);
}

void ortx_avgpool_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    pool_ref(ints, buffers, 0);
}

static void global_ref(const int64_t *ints, void *const *buffers, int is_max) {
    const float *x = (const float *)buffers[0];
    float *y = (float *)buffers[1];
    for (int64_t c = 0; c < ints[0]; c++) {
        float best = -FLT_MAX, sum = 0.0f;
        for (int64_t i = 0; i < ints[1]; i++) {
            float v = x[c * ints[1] + i];
            best = v > best ? v : best;
            sum += v;
        }
        y[c] = is_max ? best : sum / (float)ints[1];
    }
}

void ortx_global_avgpool_f32_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                 int num_threads) {
    (void)floats;
    (void)num_threads;
    global_ref(ints, buffers, 0);
}

void ortx_global_maxpool_f32_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                 int num_threads) {
    (void)floats;
    (void)num_threads;
    global_ref(ints, buffers, 1);
}

/* global_avgpool_nchwc_f32 (kernels/conv_nchwc.c): each block's lanes averaged over its pixels, summed in double. */
void ortx_global_avgpool_nchwc_f32_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                       int num_threads) {
    (void)floats;
    (void)num_threads;
    const float *x = buffers[0];
    float *y = buffers[1];
    for (int64_t block = 0; block < ints[0]; block++)
        for (int64_t l = 0; l < 16; l++) {
            double sum = 0.0;
            for (int64_t i = 0; i < ints[1]; i++) sum += x[(block * ints[1] + i) * 16 + l];
            y[block * 16 + l] = (float)(sum / (double)ints[1]);
        }
}
