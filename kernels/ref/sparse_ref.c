/* Oracles of the "sparse" family: every output element summed from the blocked-CSR weights (sparse.h) one nonzero
 * at a time, the conv read directly from the input (no im2col), in double precision. */
#include "activation.h"
#include "conv.h"
#include "sparse.h"

/* The blocks of `row` in every panel: panel p's block row i is row_ptr[p * block_count + i] .. (sparse.h). */
static double row_dot_conv(const ortx_conv_params *p, const float *values, const int32_t *cols,
                           const int32_t *row_ptr, int64_t R, int64_t panels, int shifted, int64_t row,
                           const float *input, int64_t oy, int64_t ox) {
    int64_t taps = p->kernel_height * p->kernel_width, block_count = (p->out_channels + R - 1) / R;
    double sum = 0.0;
    for (int64_t panel = 0; panel < panels; panel++) {
        const int32_t *panel_rows = row_ptr + panel * block_count;
        for (int32_t block = panel_rows[row / R]; block < panel_rows[row / R + 1]; block++) {
            int64_t k = shifted ? ortx_sparse_shifted_column(p, cols[block]) : cols[block];
            int64_t channel = k / taps, ky = k % taps / p->kernel_width, kx = k % p->kernel_width;
            int64_t iy = oy * p->stride_height - p->pad_top + ky * p->dilation_height;
            int64_t ix = ox * p->stride_width - p->pad_left + kx * p->dilation_width;
            if (iy < 0 || iy >= p->in_height || ix < 0 || ix >= p->in_width) continue;
            sum += (double)values[(int64_t)block * R + row % R] *
                   input[(channel * p->in_height + iy) * p->in_width + ix];
        }
    }
    return sum;
}

void ortx_sparse_conv2d_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    int64_t R = ints[ORTX_SPARSE_CONV_BLOCK], panels = ints[ORTX_SPARSE_CONV_BLOCK + 1];
    int shifted = ints[ORTX_SPARSE_CONV_LAYOUT] == 1;
    int64_t pixels = p.out_height * p.out_width;
    const float *bias = p.has_bias ? buffers[6] : NULL;
    for (int64_t image = 0; image < p.batch; image++) {
        const float *input = (const float *)buffers[0] + image * p.in_channels * p.in_height * p.in_width;
        for (int64_t row = 0; row < p.out_channels; row++)
            for (int64_t oy = 0; oy < p.out_height; oy++)
                for (int64_t ox = 0; ox < p.out_width; ox++) {
                    int64_t index = (image * p.out_channels + row) * pixels + oy * p.out_width + ox;
                    double sum = row_dot_conv(&p, buffers[1], buffers[2], buffers[3], R, panels, shifted, row, input,
                                              oy, ox);
                    sum += bias ? bias[row] : 0.0;
                    sum += p.has_residual ? ((const float *)buffers[7])[index] : 0.0;
                    ((float *)buffers[4])[index] = ortx_activation_scalar((int)p.activation, (float)sum, p.param0,
                                                                          p.param1);
                }
    }
}

void ortx_sparse_gemm_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    int64_t M = ints[0], N = ints[1], lda = ints[3], R = ints[4], panels = ints[8], block_count = (N + R - 1) / R;
    const float *a = buffers[0], *values = buffers[1], *bias = ints[5] ? buffers[6] : NULL;
    const float *residual = ints[9] ? buffers[7] : NULL;
    const int32_t *cols = buffers[2], *row_ptr = buffers[3];
    float *y = buffers[4];
    for (int64_t i = 0; i < M; i++)
        for (int64_t n = 0; n < N; n++) {
            double sum = (bias ? bias[n] : 0.0) + (residual ? residual[i * N + n] : 0.0);
            for (int64_t panel = 0; panel < panels; panel++)
                for (int32_t block = row_ptr[panel * block_count + n / R];
                     block < row_ptr[panel * block_count + n / R + 1]; block++)
                    sum += (double)values[(int64_t)block * R + n % R] * a[i * lda + cols[block]];
            y[i * N + n] = ortx_activation_scalar((int)ints[6], (float)sum, floats[0], floats[1]);
        }
}
