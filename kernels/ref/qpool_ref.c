/* Reference int8 average pools: plain loops over every output and window tap, no threading, no column sums; the
 * oracle for kernels/qpool.c (same ints/buffers, arithmetic in kernels/qpool.h). */
#include "ortx_kernels.h"
#include "qpool.h"

void ortx_qavgpool_i8_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    const ortx_pool_params p = ortx_pool_params_read(ints);
    const ortx_qpool_quant q = ortx_qpool_quant_read(ints + ORTX_POOL_INTS);
    const int64_t zero = q.x_zero;
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
                    int64_t acc = 0, taps = 0;
                    for (int64_t i = first[0]; i < last[0]; i++)
                        for (int64_t j = first[1]; j < last[1]; j++)
                            for (int64_t l = first[2]; l < last[2]; l++) {
                                int64_t d = start[0] + i * p.dilation[0];
                                int64_t h = start[1] + j * p.dilation[1];
                                int64_t w = start[2] + l * p.dilation[2];
                                int64_t index = ((c * p.in[0] + d) * p.in[1] + h) * p.in[2] + w;
                                int64_t x = q.input_signed ? ((const int8_t *)buffers[0])[index] :
                                            ((const uint8_t *)buffers[0])[index];
                                acc += x - zero;
                                taps++;
                            }
                    int64_t divisor = p.count_include_pad ? padded[0] * padded[1] * padded[2] : taps;
                    ortx_qpool_store(&q, buffers[1], acc, divisor, buffers[2],
                                     ((c * p.out[0] + od) * p.out[1] + oh) * p.out[2] + ow);
                }
}

void ortx_qglobal_avgpool_i8_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    const ortx_qpool_quant q = ortx_qpool_quant_read(ints + 2);
    for (int64_t c = 0; c < ints[0]; c++) {
        int64_t acc = 0;
        for (int64_t i = 0; i < ints[1]; i++) {
            int64_t index = c * ints[1] + i;
            acc += (q.input_signed ? ((const int8_t *)buffers[0])[index] : ((const uint8_t *)buffers[0])[index]) -
                   q.x_zero;
        }
        ortx_qpool_store(&q, buffers[1], acc, ints[1], buffers[2], c);
    }
}
