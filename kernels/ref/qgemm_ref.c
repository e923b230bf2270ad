/* Oracle of qconv2d_i8: direct convolution in int32 over the raw input (no planes, no packed activations), the
 * weights read through qgemm.h's packed layout, and the scalar requantization of qgemm.h. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "../qgemm.h"

static int32_t input_u8(const ortx_qconv_params *p, const void *x, int64_t index) {
    return p->input_signed ? (int32_t)((const int8_t *)x)[index] + 128 : (int32_t)((const uint8_t *)x)[index];
}

__attribute__((optimize("fp-contract=off"))) void ortx_qconv2d_i8_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    ortx_qconv_params p = ortx_qconv_params_read(ints);
    const void *x = buffers[0];
    const int8_t *packed = buffers[1];
    const int32_t *bias = buffers[2];
    const float *multiplier = buffers[3];
    const float *residual = p.output_kind == 2 && p.has_residual ? buffers[6] : NULL;
    int64_t cin_g = p.in_channels / p.group, cout_g = p.out_channels / p.group;
    int64_t area = p.kernel_height * p.kernel_width;
    int64_t K = p.input_kind == 1 ? p.in_channels : cin_g * area, k4 = ortx_qconv_depth_quads(&p);
    int64_t panels = (cout_g + ORTX_QGEMM_MR - 1) / ORTX_QGEMM_MR, panel_bytes = k4 * ORTX_QGEMM_MR * 4;
    int64_t pixels = p.input_kind == 1 ? p.out_width : p.out_height * p.out_width;
    int32_t zero_u = (int32_t)p.x_zero_point + (p.input_signed ? 128 : 0);
    float low = (float)(p.qmin - p.y_zero_point), high = (float)(p.qmax - p.y_zero_point);
    for (int64_t n = 0; n < p.batch; n++) {
        for (int64_t m = 0; m < p.out_channels; m++) {
            int64_t g = m / cout_g, mg = m % cout_g;
            const int8_t *panel = packed + (g * panels + mg / ORTX_QGEMM_MR) * panel_bytes + (mg % ORTX_QGEMM_MR) * 4;
            for (int64_t pixel = 0; pixel < pixels; pixel++) {
                int32_t acc = bias[m];
                for (int64_t k = 0; k < K; k++) {
                    int64_t packed_k = p.input_kind == 1 ? k : ortx_qconv_weight_k(&p, k / area, k % area);
                    int32_t w = panel[(packed_k / 4) * ORTX_QGEMM_MR * 4 + packed_k % 4], u;
                    if (p.input_kind == 1) {
                        u = input_u8(&p, x, (n * pixels + pixel) * K + k);
                    } else {
                        int64_t c = g * cin_g + k / area, kh = k % area / p.kernel_width, kw = k % p.kernel_width;
                        int64_t oh = pixel / p.out_width, ow = pixel % p.out_width;
                        int64_t ih = oh * p.stride_height - p.pad_top + kh * p.dilation_height;
                        int64_t iw = ow * p.stride_width - p.pad_left + kw * p.dilation_width;
                        u = ih < 0 || ih >= p.in_height || iw < 0 || iw >= p.in_width ? zero_u :
                            input_u8(&p, x, ((n * p.in_channels + c) * p.in_height + ih) * p.in_width + iw);
                    }
                    acc += u * w;
                }
                int64_t index = ortx_qconv_output_index(&p, n, m, pixel);
                float value = (float)acc * multiplier[m];
                if (p.output_kind == 2) {
                    if (residual) value += residual[index];
                    ((float *)buffers[4])[index] = ortx_qconv_activation(&p, value, floats[0], floats[1]);
                    continue;
                }
                value = value < low ? low : (value > high ? high : value);
                int32_t q = (int32_t)lrintf(value) + (int32_t)p.y_zero_point;
                if (p.output_kind == 0) ((uint8_t *)buffers[4])[index] = (uint8_t)q;
                else ((int8_t *)buffers[4])[index] = (int8_t)q;
            }
        }
    }
}

/* sparse_qconv2d_i8's oracle: every stored quad of every K panel written element by element into the dense packed
 * layout (qgemm.h), then the dense oracle on it (buffers 7 cols and 8 row_ptr, as the fast kernel). */
void ortx_sparse_qconv2d_i8_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    ortx_qconv_params p = ortx_qconv_params_read(ints);
    const int8_t *values = buffers[1];
    const int32_t *cols = buffers[7], *row_ptr = buffers[8];
    int64_t cout_g = p.out_channels / p.group, k4 = ortx_qconv_depth_quads(&p);
    int64_t panels = (cout_g + ORTX_QGEMM_MR - 1) / ORTX_QGEMM_MR, panel_bytes = k4 * ORTX_QGEMM_MR * 4;
    int8_t *packed = calloc((size_t)(p.group * panels * panel_bytes + 1), 1);
    if (!packed) return;
    int64_t k_panels = ortx_qsparse_panels(k4);
    for (int64_t m = 0; m < p.out_channels; m++) {
        int64_t g = m / cout_g, mg = m % cout_g;
        int8_t *panel = packed + (g * panels + mg / ORTX_QGEMM_MR) * panel_bytes + (mg % ORTX_QGEMM_MR) * 4;
        for (int64_t k_panel = 0; k_panel < k_panels; k_panel++) {
            const int32_t *range = row_ptr + k_panel * p.out_channels + m;
            for (int32_t e = range[0]; e < range[1]; e++)
                for (int i = 0; i < 4; i++)
                    panel[(int64_t)cols[e] * ORTX_QGEMM_MR * 4 + i] = values[4 * (int64_t)e + i];
        }
    }
    void *dense_buffers[9];
    for (int i = 0; i < 9; i++) dense_buffers[i] = buffers[i];
    dense_buffers[1] = packed;
    ortx_qconv2d_i8_ref(ints, floats, dense_buffers, num_threads);
    free(packed);
}
