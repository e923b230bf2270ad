/* Oracles for the bf16 family: the textbook loops of the fp32 oracles (gemm_ref.c, conv_ref.c) with every operand
 * element rounded to bf16 (ortx_bf16_from_float; packed operands read through ortx_bgemm_packed_index()), the
 * products and the running sum in fp32, k in ascending order. The fast kernels sum in another order (k pairs,
 * odd product first), so they agree with these within a bf16-product tolerance, not bitwise. */
#include "../activation.h"
#include "../conv.h"
#include "../gemm_bf16.h"

/* A: (row=m, k); B: (row=n, k) in packed form but (k, n) with its strides when raw. A packed A is in the format of
 * the selected bf16 path (ortx_bgemm_a_index), a packed B in NR-row K-pair panels. */
static float operand_at(const void *data, int packed, int64_t row_stride, int64_t col_stride, int64_t rows,
                        int64_t depth, int64_t row, int64_t k, int transposed) {
    if (packed) {
        int64_t at = transposed ? ortx_bgemm_packed_index(row, k, rows, depth, ORTX_GEMM_NR)
                                : ortx_bgemm_a_index(row, k, rows, depth);
        return ortx_bf16_to_float(((const uint16_t *)data)[at]);
    }
    const float *raw = data;
    float value = transposed ? raw[k * row_stride + row * col_stride] : raw[row * row_stride + k * col_stride];
    return ortx_bf16_to_float(ortx_bf16_from_float(value));
}

/* Layout: see gemm_bf16 in kernels/gemm_bf16.c (gemm_f32's). */
void ortx_gemm_bf16_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    int64_t M = ints[0], N = ints[1], K = ints[2], batch = ints[3];
    const float *bias = buffers[4], *residual = buffers[5];
    float *Y = buffers[2];
    for (int64_t b = 0; b < batch; b++) {
        /* packed operands are uint16 elements, raw ones floats: offsets count elements of their own type */
        const void *A = ints[4] ? (const void *)((const uint16_t *)buffers[0] + ints[17 + b])
                                : (const void *)((const float *)buffers[0] + ints[17 + b]);
        const void *B = ints[7] ? (const void *)((const uint16_t *)buffers[1] + ints[17 + batch + b])
                                : (const void *)((const float *)buffers[1] + ints[17 + batch + b]);
        ortx_gemm_epilogue epilogue = ortx_gemm_step_epilogue(ints, floats, bias, residual, b);
        for (int64_t m = 0; m < M; m++) {
            for (int64_t n = 0; n < N; n++) {
                float acc = 0.0f;
                for (int64_t k = 0; k < K; k++)
                    acc += operand_at(A, (int)ints[4], ints[5], ints[6], M, K, m, k, 0) *
                           operand_at(B, (int)ints[7], ints[8], ints[9], N, K, n, k, 1);
                Y[(b * M + m) * N + n] = ortx_gemm_epilogue_scalar(&epilogue, acc, m, n);
            }
        }
    }
}

/* Layout: see kernels/conv_bf16.c. */
void ortx_conv2d_bf16_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    const float *X = buffers[0], *bias = buffers[4], *residual = buffers[5];
    const uint16_t *packed = buffers[1];
    float *Y = buffers[2];
    int64_t cin_g = p.in_channels / p.group, cout_g = p.out_channels / p.group;
    int64_t K = cin_g * p.kernel_height * p.kernel_width, area = p.kernel_height * p.kernel_width;
    int rows = ortx_conv_rows_bf16_applies(&p);  /* the weights' layout (conv_pack_bf16): rows, direct or GEMM */
    int direct = !rows && ortx_conv_direct_bf16_applies(&p);
    int64_t each = rows ? ortx_conv_rows_bf16_elements(&p) :
                   direct ? ortx_conv_direct_bf16_packed_elements(&p) : ortx_bgemm_a_elements(cout_g, K);
    for (int64_t n = 0; n < p.batch; n++)
        for (int64_t co = 0; co < p.out_channels; co++) {
            int64_t g = co / cout_g, local = co - g * cout_g;
            const uint16_t *weights = packed + g * each;
            for (int64_t oy = 0; oy < p.out_height; oy++)
                for (int64_t ox = 0; ox < p.out_width; ox++) {
                    float acc = 0.0f;
                    for (int64_t ci = 0; ci < cin_g; ci++)
                        for (int64_t ky = 0; ky < p.kernel_height; ky++)
                            for (int64_t kx = 0; kx < p.kernel_width; kx++) {
                                int64_t iy = oy * p.stride_height - p.pad_top + ky * p.dilation_height;
                                int64_t ix = ox * p.stride_width - p.pad_left + kx * p.dilation_width;
                                if (iy < 0 || iy >= p.in_height || ix < 0 || ix >= p.in_width) continue;
                                int64_t k = (ci * p.kernel_height + ky) * p.kernel_width + kx;
                                int64_t at = rows ? ortx_conv_rows_bf16_index(&p, local, ci, k % area) :
                                             direct ? ortx_conv_direct_bf16_packed_index(&p, local, ci, k % area)
                                                    : ortx_bgemm_a_index(local, k, cout_g, K);
                                float w = ortx_bf16_to_float(weights[at]);
                                float x = X[((n * p.in_channels + g * cin_g + ci) * p.in_height + iy) * p.in_width + ix];
                                acc += w * ortx_bf16_to_float(ortx_bf16_from_float(x));
                            }
                    if (p.has_bias) acc += bias[co];
                    int64_t index = ((n * p.out_channels + co) * p.out_height + oy) * p.out_width + ox;
                    if (p.has_residual) acc += residual[index];
                    Y[index] = ortx_activation_scalar((int)p.activation, acc, p.param0, p.param1);
                }
        }
}

/* Layout: see kernels/conv_transpose_bf16.c (only kernels equal to their strides, no padding or dilation). */
void ortx_conv_transpose2d_bf16_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                    int num_threads) {
    (void)num_threads;
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    ortx_conv_params q = p;  /* the 1x1 conv whose weight layout conv_transpose_pack_bf16 writes */
    q.out_channels = p.out_channels * p.kernel_height * p.kernel_width;
    q.kernel_height = q.kernel_width = 1;
    const float *X = buffers[0], *bias = buffers[4], *residual = buffers[5];
    const uint16_t *packed = buffers[1];
    float *Y = buffers[2];
    int64_t cin_g = p.in_channels / p.group, cout_g = p.out_channels / p.group;
    for (int64_t n = 0; n < p.batch; n++)
        for (int64_t co = 0; co < p.out_channels; co++) {
            int64_t g = co / cout_g, local = co - g * cout_g;
            const uint16_t *weights = packed + g * ortx_conv_direct_bf16_elements(&q);
            for (int64_t oy = 0; oy < p.out_height; oy++)
                for (int64_t ox = 0; ox < p.out_width; ox++) {
                    int64_t iy = oy / p.stride_height, ky = oy % p.stride_height;
                    int64_t ix = ox / p.stride_width, kx = ox % p.stride_width;
                    int64_t m = (local * p.kernel_height + ky) * p.kernel_width + kx;
                    float acc = 0.0f;
                    for (int64_t ci = 0; ci < cin_g; ci++) {
                        float w = ortx_bf16_to_float(weights[ortx_conv_direct_weight_index(&q, m, ci, 0)]);
                        float x = X[((n * p.in_channels + g * cin_g + ci) * p.in_height + iy) * p.in_width + ix];
                        acc += w * ortx_bf16_to_float(ortx_bf16_from_float(x));
                    }
                    if (p.has_bias) acc += bias[co];
                    int64_t index = ((n * p.out_channels + co) * p.out_height + oy) * p.out_width + ox;
                    if (p.has_residual) acc += residual[index];
                    Y[index] = ortx_activation_scalar((int)p.activation, acc, p.param0, p.param1);
                }
        }
}

/* conv2d_bf16_nchwc's oracle: the reference conv on NCHW copies (kernels/conv_bf16.c). */
void ortx_conv2d_bf16_nchwc_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    ortx_conv2d_bf16_nchwc_through_nchw(ints, floats, buffers, num_threads, ortx_conv2d_bf16_ref);
}
