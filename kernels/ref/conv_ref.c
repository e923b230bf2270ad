/* Oracles for the conv family: the convolution sums written out directly from the ONNX definitions, one output
 * element at a time, reading packed weights through ortx_gemm_packed_index() (gemm.h). */
#include "../activation.h"
#include "../conv.h"
#include "../gemm.h"
#include "../gemm_bf16.h"
#include "../pair_rows.h"

static float finish(const ortx_conv_params *p, float value, const float *residual, int64_t index) {
    if (p->has_residual) value += residual[index];
    return ortx_activation_scalar((int)p->activation, value, p->param0, p->param1);
}

/* Layouts: see conv.c. weight_panel is the packed weights' panel height: MR for conv2d_f32's A panels of W_g,
 * NR for conv2d_pixel_rows_f32's B panels of W_g^T (the same index function: row = output channel). */
static void conv2d_ref(const int64_t *ints, const float *floats, void *const *buffers, int64_t weight_panel) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    const float *X = buffers[0], *packed = buffers[1], *bias = buffers[4], *residual = buffers[5];
    float *Y = buffers[2];
    int64_t cin_g = p.in_channels / p.group, cout_g = p.out_channels / p.group;
    int64_t K = cin_g * p.kernel_height * p.kernel_width;
    for (int64_t n = 0; n < p.batch; n++)
        for (int64_t co = 0; co < p.out_channels; co++) {
            int64_t g = co / cout_g;
            const float *weights = packed + g * ortx_round_up(cout_g, weight_panel) * K;
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
                                int64_t local = co - g * cout_g;
                                float w = weights[ortx_gemm_packed_index(local, k, cout_g, K, weight_panel)];
                                acc += w * X[((n * p.in_channels + g * cin_g + ci) * p.in_height + iy) * p.in_width + ix];
                            }
                    if (p.has_bias) acc += bias[co];
                    int64_t index = ((n * p.out_channels + co) * p.out_height + oy) * p.out_width + ox;
                    Y[index] = finish(&p, acc, residual, index);
                }
        }
}

void ortx_conv2d_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    conv2d_ref(ints, floats, buffers, ORTX_GEMM_MR);
}

void ortx_conv2d_pixel_rows_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    conv2d_ref(ints, floats, buffers, ORTX_GEMM_NR);
}

/* Element (n, c, y, x) of an [N, C, H, W] tensor in NCHW, or blocked (conv.h's NCHWc). */
static int64_t tensor_index(int blocked, int64_t n, int64_t c, int64_t y, int64_t x, int64_t C, int64_t H,
                            int64_t W) {
    if (!blocked) return ((n * C + c) * H + y) * W + x;
    return (((n * ortx_nchwc_blocks(C) + c / 16) * H + y) * W + x) * 16 + c % 16;
}

/* Element (n, c, pixel) of a pair-rows tensor (pair_rows.h). */
static int64_t pair_rows_index(int64_t n, int64_t c, int64_t pixel, int64_t C, int64_t pixels) {
    return ((n * ortx_pair_rows_chunks(C) + c / 32) * pixels + pixel) * ORTX_PAIR_ROWS_CHUNK + c % 32;
}

/* Zero channels [C, its chunks' end) of pixel `pixel` of a pair-rows tensor. */
static void pair_rows_zero_pads(uint16_t *rows, int64_t n, int64_t pixel, int64_t C, int64_t pixels) {
    for (int64_t c = C; c < ortx_pair_rows_chunks(C) * 32; c++) rows[pair_rows_index(n, c, pixel, C, pixels)] = 0;
}

/* A depthwise tap's input: X's element, or with `expand` (conv_expand_depthwise_nchwc_f32's buffers: 1; _bf16's:
 * 2) the 1x1 conv's output there, act_e(bias_e[c] + sum over ci of W_e[c, ci] * X[n, ci, iy, ix]), computed where
 * read: fp32 with ci ascending, or bf16 as pointwise_ref sums it (operands rounded, per pair the odd product
 * first). */
static float tap_input(const ortx_conv_params *p, const int64_t *ints, const float *floats, void *const *buffers,
                       int blocked, int expand, int64_t n, int64_t c, int64_t iy, int64_t ix) {
    const float *X = buffers[0];
    if (blocked == 2)  /* pair rows (pair_rows.h) */
        return ortx_bf16_to_float(((const uint16_t *)X)[pair_rows_index(n, c, iy * p->in_width + ix, p->in_channels,
                                                                        p->in_height * p->in_width)]);
    if (!expand) return X[tensor_index(blocked, n, c, iy, ix, p->in_channels, p->in_height, p->in_width)];
    const int64_t cin = ints[ORTX_CONV_INTS], pairs = (cin + 1) / 2, rows = ortx_pointwise_bf16_pair_words(cin);
    const float *bias_e = buffers[2];
    float value = bias_e[c];
    for (int64_t k = 0; k < 2 * pairs; k++) {
        int64_t ci = expand == 2 ? k + 1 - 2 * (k % 2) : k;  /* bf16: 1, 0, 3, 2, ... */
        if (ci >= cin) continue;
        float x = X[tensor_index(1, n, ci, iy, ix, cin, p->in_height, p->in_width)];
        if (expand == 2) {
            const uint16_t *We = buffers[1];
            value += ortx_bf16_to_float(We[((c / 64 * rows + ci / 2) * 64 + c % 64) * 2 + ci % 2]) *
                     ortx_bf16_to_float(ortx_bf16_from_float(x));
        } else {
            const float *We = buffers[1];
            value += We[(c / 64 * cin + ci) * 64 + c % 64] * x;
        }
    }
    return ortx_activation_scalar((int)ints[ORTX_CONV_INTS + 1], value, floats[2], floats[3]);
}

/* blocked: 0 NCHW, 1 blocked; in_rows, out_rows: that side in pair rows instead (blocked only; a pair-rows output
 * rounded to bf16, zeros past the channels). */
static void depthwise_ref(const int64_t *ints, const float *floats, void *const *buffers, int blocked, int expand,
                          int in_rows, int out_rows) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    const int64_t out_pixels = p.out_height * p.out_width;
    const float *W = buffers[expand ? 3 : 1], *bias = buffers[expand ? 5 : 4], *residual = expand ? NULL : buffers[5];
    float *Y = buffers[expand ? 4 : 2];
    for (int64_t n = 0; n < p.batch; n++)
        for (int64_t c = 0; c < p.out_channels; c++)
            for (int64_t oy = 0; oy < p.out_height; oy++)
                for (int64_t ox = 0; ox < p.out_width; ox++) {
                    float acc = p.has_bias ? bias[c] : 0.0f;
                    for (int64_t ky = 0; ky < p.kernel_height; ky++)
                        for (int64_t kx = 0; kx < p.kernel_width; kx++) {
                            int64_t iy = oy * p.stride_height - p.pad_top + ky * p.dilation_height;
                            int64_t ix = ox * p.stride_width - p.pad_left + kx * p.dilation_width;
                            if (iy < 0 || iy >= p.in_height || ix < 0 || ix >= p.in_width) continue;
                            acc += W[(c * p.kernel_height + ky) * p.kernel_width + kx] *
                                   tap_input(&p, ints, floats, buffers, in_rows ? 2 : blocked, expand, n, c, iy, ix);
                        }
                    int64_t index = tensor_index(blocked, n, c, oy, ox, p.out_channels, p.out_height, p.out_width);
                    if (!out_rows) {
                        Y[index] = finish(&p, acc, residual, index);
                        continue;
                    }
                    int64_t pixel = oy * p.out_width + ox;
                    ((uint16_t *)Y)[pair_rows_index(n, c, pixel, p.out_channels, out_pixels)] =
                        ortx_bf16_from_float(finish(&p, acc, residual, index));
                    if (c == p.out_channels - 1)
                        pair_rows_zero_pads((uint16_t *)Y, n, pixel, p.out_channels, out_pixels);
                }
}

void ortx_conv2d_depthwise_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    depthwise_ref(ints, floats, buffers, 0, 0, 0, 0);
}

/* conv2d_depthwise_f32's sums on blocked X, Y and residual (pad lanes not written). */
void ortx_conv2d_depthwise_nchwc_f32_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                         int num_threads) {
    (void)num_threads;
    depthwise_ref(ints, floats, buffers, 1, 0, 0, 0);
}

/* conv2d_depthwise_pair_rows: the blocked sums with X and/or Y in pair rows (ints[20], ints[21]). */
void ortx_conv2d_depthwise_pair_rows_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                         int num_threads) {
    (void)num_threads;
    depthwise_ref(ints, floats, buffers, 1, 0, (int)ints[ORTX_CONV_INTS], (int)ints[ORTX_CONV_INTS + 1]);
}

/* conv_expand_depthwise_nchwc_f32 (its layouts): conv2d_depthwise_f32's sums on blocked tensors, each tap's input
 * the 1x1 conv's output computed where it is read (tap_input). */
void ortx_conv_expand_depthwise_nchwc_f32_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                              int num_threads) {
    (void)num_threads;
    depthwise_ref(ints, floats, buffers, 1, 1, 0, 0);
}

/* conv_expand_depthwise_nchwc_bf16: the same with the 1x1 conv's sums as conv_pointwise_nchwc_bf16's. */
void ortx_conv_expand_depthwise_nchwc_bf16_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                               int num_threads) {
    (void)num_threads;
    depthwise_ref(ints, floats, buffers, 1, 2, 0, 0);
}

/* conv_pointwise_nchwc_f32 and _bf16 (conv.h's layouts): Y[n, co, i] = act(bias[co] + sum over ci ascending of
 * W[co, ci] * X[n, ci, i] + residual[n, co, i]) on blocked X, Y and residual; pad lanes not written. bf16: both
 * operands rounded to bf16 and, per pair of input channels, the odd product added before the even one. */
static void pointwise_ref(const int64_t *ints, const float *floats, void *const *buffers, int bf16, int in_rows,
                          int out_rows, int split) {
    int64_t batch = ints[0], in_channels = ints[1], out_channels = ints[2], pixels = ints[3];
    int64_t pairs = (in_channels + 1) / 2, rows = ortx_pointwise_bf16_pair_words(in_channels);
    const float *X = buffers[0], *bias = buffers[2], *residual = ints[4] ? buffers[4] : NULL;
    float *Y = buffers[3];
    for (int64_t n = 0; n < batch; n++)
        for (int64_t co = 0; co < out_channels; co++)
            for (int64_t i = 0; i < pixels; i++) {
                float acc = bias[co];
                for (int64_t q = 0; q < pairs; q++)
                    for (int64_t step = 0; step < 2; step++) {
                        int64_t ci = 2 * q + (bf16 ? 1 - step : step);
                        if (ci >= in_channels) continue;
                        float x = in_rows ? ortx_bf16_to_float(
                                                ((const uint16_t *)X)[pair_rows_index(n, ci, i, in_channels, pixels)])
                                          : X[tensor_index(1, n, ci, 0, i, in_channels, 1, pixels)];
                        if (bf16) {
                            const uint16_t *W = buffers[1];
                            const int64_t at = ((co / 64 * rows + q) * 64 + co % 64) * 2 + ci % 2;
                            const float w = ortx_bf16_to_float(W[at]), hi = ortx_bf16_to_float(ortx_bf16_from_float(x));
                            if (split) acc += w * ortx_bf16_to_float(ortx_bf16_from_float(x - hi));  /* bf16x3 */
                            acc += w * hi;
                            if (split) acc += ortx_bf16_to_float(((const uint16_t *)buffers[6])[at]) * hi;
                        } else {
                            const float *W = buffers[1];
                            acc += W[(co / 64 * in_channels + ci) * 64 + co % 64] * x;
                        }
                    }
                int64_t index = tensor_index(1, n, co, 0, i, out_channels, 1, pixels);
                if (residual) acc += residual[index];
                float value = ortx_activation_scalar((int)ints[5], acc, floats[0], floats[1]);
                if (!out_rows) {
                    Y[index] = value;
                    continue;
                }
                ((uint16_t *)Y)[pair_rows_index(n, co, i, out_channels, pixels)] = ortx_bf16_from_float(value);
                if (co == out_channels - 1) pair_rows_zero_pads((uint16_t *)Y, n, i, out_channels, pixels);
            }
}

void ortx_conv_pointwise_nchwc_f32_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                       int num_threads) {
    (void)num_threads;
    pointwise_ref(ints, floats, buffers, 0, 0, 0, 0);
}

/* Y[n, co, oy, ox] = bias[co] + sum over (ci, iy, ix, ky, kx) with oy = iy*sh - pt + ky*dh and
 * ox = ix*sw - pl + kx*dw of X[n, ci, iy, ix] * W[ci, co % (Cout/g), ky, kx]. */
void ortx_conv_transpose2d_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    const float *X = buffers[0], *packed = buffers[1], *bias = buffers[4], *residual = buffers[5];
    float *Y = buffers[2];
    int64_t cin_g = p.in_channels / p.group, cout_g = p.out_channels / p.group;
    int64_t M = cout_g * p.kernel_height * p.kernel_width;
    for (int64_t n = 0; n < p.batch; n++)
        for (int64_t co = 0; co < p.out_channels; co++) {
            int64_t g = co / cout_g, local = co - g * cout_g;
            const float *weights = packed + g * ortx_gemm_packed_a_floats(M, cin_g);
            float *y = Y + (n * p.out_channels + co) * p.out_height * p.out_width;
            for (int64_t i = 0; i < p.out_height * p.out_width; i++) y[i] = p.has_bias ? bias[co] : 0.0f;
            for (int64_t ci = 0; ci < cin_g; ci++)
                for (int64_t iy = 0; iy < p.in_height; iy++)
                    for (int64_t ix = 0; ix < p.in_width; ix++)
                        for (int64_t ky = 0; ky < p.kernel_height; ky++)
                            for (int64_t kx = 0; kx < p.kernel_width; kx++) {
                                int64_t oy = iy * p.stride_height - p.pad_top + ky * p.dilation_height;
                                int64_t ox = ix * p.stride_width - p.pad_left + kx * p.dilation_width;
                                if (oy < 0 || oy >= p.out_height || ox < 0 || ox >= p.out_width) continue;
                                int64_t m = (local * p.kernel_height + ky) * p.kernel_width + kx;
                                float w = weights[ortx_gemm_packed_index(m, ci, M, cin_g, ORTX_GEMM_MR)];
                                y[oy * p.out_width + ox] +=
                                    w * X[((n * p.in_channels + g * cin_g + ci) * p.in_height + iy) * p.in_width + ix];
                            }
            int64_t base = (n * p.out_channels + co) * p.out_height * p.out_width;
            for (int64_t i = 0; i < p.out_height * p.out_width; i++) y[i] = finish(&p, y[i], residual, base + i);
        }
}

/* conv2d_to_nchwc_f32 (conv_to_nchwc.c's layouts): the dense conv of NCHW X with tap-major packed weights
 * ([Cin*KH*KW][ceil(Cout/16)*16]) and packed bias, written to blocked Y; pad lanes not written. */
void ortx_conv2d_to_nchwc_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    const float *X = buffers[0], *packed = buffers[1], *bias = buffers[3];
    float *Y = buffers[2];
    const int64_t ldw = ortx_nchwc_blocks(p.out_channels) * 16;
    for (int64_t n = 0; n < p.batch; n++)
        for (int64_t co = 0; co < p.out_channels; co++)
            for (int64_t oy = 0; oy < p.out_height; oy++)
                for (int64_t ox = 0; ox < p.out_width; ox++) {
                    float acc = bias[co];
                    for (int64_t ci = 0, k = 0; ci < p.in_channels; ci++)
                        for (int64_t ky = 0; ky < p.kernel_height; ky++)
                            for (int64_t kx = 0; kx < p.kernel_width; kx++, k++) {
                                int64_t iy = oy * p.stride_height - p.pad_top + ky * p.dilation_height;
                                int64_t ix = ox * p.stride_width - p.pad_left + kx * p.dilation_width;
                                if (iy < 0 || iy >= p.in_height || ix < 0 || ix >= p.in_width) continue;
                                acc += packed[k * ldw + co] *
                                       X[tensor_index(0, n, ci, iy, ix, p.in_channels, p.in_height, p.in_width)];
                            }
                    Y[tensor_index(1, n, co, oy, ox, p.out_channels, p.out_height, p.out_width)] =
                        ortx_activation_scalar((int)p.activation, acc, p.param0, p.param1);
                }
}

/* conv2d_nchwc_f32 (conv_nchwc_direct.c's layouts): per output, the bias, then the taps inside X in (ky, kx) order,
 * each over the input channels in order (the fast kernel's order when Cin <= 128, one chunk), the residual, the
 * activation; pad lanes not written. */
void ortx_conv2d_nchwc_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    const float *X = buffers[0], *W = buffers[1], *bias = buffers[2], *residual = p.has_residual ? buffers[4] : NULL;
    float *Y = buffers[3];
    const int64_t taps = p.kernel_height * p.kernel_width;
    for (int64_t n = 0; n < p.batch; n++)
        for (int64_t co = 0; co < p.out_channels; co++)
            for (int64_t oy = 0; oy < p.out_height; oy++)
                for (int64_t ox = 0; ox < p.out_width; ox++) {
                    float acc = bias[co];
                    for (int64_t ky = 0; ky < p.kernel_height; ky++)
                        for (int64_t kx = 0; kx < p.kernel_width; kx++) {
                            const int64_t iy = oy * p.stride_height - p.pad_top + ky * p.dilation_height;
                            const int64_t ix = ox * p.stride_width - p.pad_left + kx * p.dilation_width;
                            if (iy < 0 || iy >= p.in_height || ix < 0 || ix >= p.in_width) continue;
                            for (int64_t ci = 0; ci < p.in_channels; ci++) {
                                /* chunks of 128 channels, each [tap][its channels][64] */
                                const int64_t c0 = ci / 128 * 128, count = p.in_channels - c0 < 128
                                                                              ? p.in_channels - c0 : 128;
                                const int64_t row = co / 64 * taps * p.in_channels + c0 * taps +
                                                    (ky * p.kernel_width + kx) * count + ci - c0;
                                acc += W[row * 64 + co % 64] *
                                       X[tensor_index(1, n, ci, iy, ix, p.in_channels, p.in_height, p.in_width)];
                            }
                        }
                    const int64_t index = tensor_index(1, n, co, oy, ox, p.out_channels, p.out_height, p.out_width);
                    if (residual) acc += residual[index];
                    Y[index] = ortx_activation_scalar((int)p.activation, acc, p.param0, p.param1);
                }
}

void ortx_conv_pointwise_nchwc_bf16_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                        int num_threads) {
    (void)num_threads;
    pointwise_ref(ints, floats, buffers, 1, 0, 0, 0);
}

/* conv_pointwise_pair_rows_bf16: conv_pointwise_nchwc_bf16's sums with X and/or Y in pair rows (ints[7], ints[8]). */
void ortx_conv_pointwise_pair_rows_bf16_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                            int num_threads) {
    (void)num_threads;
    pointwise_ref(ints, floats, buffers, 1, (int)ints[7], (int)ints[8], 0);
}

/* conv_pointwise_bf16x3: per channel lo x W, hi x W, hi x W_lo (x's bf16 rounding hi, the remainder's lo; W_lo at
 * buffers[6]); ints[7] out_rows, ints[8] the weights' form (the terms read are the same in both). */
void ortx_conv_pointwise_bf16x3_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    pointwise_ref(ints, floats, buffers, 1, 0, (int)ints[7], 1);
}

/* conv2d_nchwc_bf16 (conv_nchwc_bf16.c's layouts): per output, the bias, then per chunk of 128 input channels the
 * taps in (ky, kx) order (taps in the padding reading zeros), each over the chunk's channel pairs in order, per pair
 * the odd channel's product first; operands rounded to bf16 (X here, W as packed); the residual, the activation;
 * pad lanes not written. With an NCHW X (ints[20] 0, the x-unfolded form) the rows ky, each over the pairs of
 * values j = kx * Cin + c, the odd value first. The fast kernel's order, so its sums where vdpbf16ps rounds each
 * product's sum in turn. */
void ortx_conv2d_nchwc_bf16_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    const int unfolded = ints[ORTX_CONV_INTS] == 0;
    const float *X = buffers[0], *bias = buffers[2], *residual = p.has_residual ? buffers[4] : NULL;
    const uint16_t *W = buffers[1];
    float *Y = buffers[3];
    const int64_t values = p.in_channels * p.kernel_width;
    const int64_t taps = unfolded ? p.kernel_height : p.kernel_height * p.kernel_width;
    const int64_t pairs = unfolded ? (values + 1) / 2 : ortx_nchwc_blocks(p.in_channels) * 8;
    for (int64_t n = 0; n < p.batch; n++)
        for (int64_t co = 0; co < p.out_channels; co++)
            for (int64_t oy = 0; oy < p.out_height; oy++)
                for (int64_t ox = 0; ox < p.out_width; ox++) {
                    float acc = bias[co];
                    for (int64_t q0 = 0; q0 < pairs; q0 += unfolded ? pairs : 64)
                        for (int64_t k = 0; k < taps; k++)
                            for (int64_t q = q0; q < (unfolded ? pairs : q0 + 64) && q < pairs; q++)
                                for (int64_t step = 0; step < 2; step++) {
                                    const int64_t j = 2 * q + 1 - step;  /* a channel, or (unfolded) a value */
                                    const int64_t ky = unfolded ? k : k / p.kernel_width;
                                    const int64_t kx = unfolded ? j / p.in_channels : k % p.kernel_width;
                                    const int64_t ci = unfolded ? j % p.in_channels : j;
                                    const int64_t iy = oy * p.stride_height - p.pad_top + ky * p.dilation_height;
                                    const int64_t ix = ox * p.stride_width - p.pad_left + kx * p.dilation_width;
                                    const int inside = iy >= 0 && iy < p.in_height && ix >= 0 && ix < p.in_width
                                                       && (unfolded ? j < values : ci < p.in_channels);
                                    const float x = inside ? ortx_bf16_to_float(ortx_bf16_from_float(X[tensor_index(
                                                                 !unfolded, n, ci, iy, ix, p.in_channels,
                                                                 p.in_height, p.in_width)]))
                                                           : 0.0f;
                                    /* chunks of 64 pairs, each [tap][its pairs] (one chunk when unfolded) */
                                    const int64_t chunk_pairs = unfolded ? pairs : (pairs - q0 < 64 ? pairs - q0 : 64);
                                    const int64_t row = co / 64 * taps * pairs + q0 * taps + k * chunk_pairs + q - q0;
                                    acc += ortx_bf16_to_float(W[row * 128 + co % 64 * 2 + j % 2]) * x;
                                }
                    const int64_t index = tensor_index(1, n, co, oy, ox, p.out_channels, p.out_height, p.out_width);
                    if (residual) acc += residual[index];
                    Y[index] = ortx_activation_scalar((int)p.activation, acc, p.param0, p.param1);
                }
}

/* conv2d_winograd_nchwc_f32 (conv_winograd_nchwc.c): the same algorithm in scalar double, F(4x4, 3x3) with
 * Lavin and Gray's points 0, 1, -1, 2, -2: per tile, V = B^T d B per input channel (0 outside the image), M = the
 * sum over input channels of V times U (the packed float weights), Y = A^T M A, then bias, residual, activation;
 * rounded to float once. The fast kernel sums in float, so the two differ by its rounding (tests bound both
 * against a direct conv). Pad lanes not written. */
void ortx_conv2d_winograd_nchwc_f32_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                        int num_threads) {
    (void)num_threads;
    static const double bt[6][6] = {{4, 0, -5, 0, 1, 0}, {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                                    {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
    static const double at[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0},
                                    {0, 1, -1, 8, -8, 1}};
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    const float *X = buffers[0], *U = buffers[1], *bias = buffers[2], *residual = p.has_residual ? buffers[4] : NULL;
    float *Y = buffers[3];
    const int64_t groups = (p.out_channels + 63) / 64, tiles_y = (p.out_height + 3) / 4;
    const int64_t tiles_x = (p.out_width + 3) / 4;
    for (int64_t n = 0; n < p.batch; n++)
        for (int64_t ty = 0; ty < tiles_y; ty++)
            for (int64_t tx = 0; tx < tiles_x; tx++)
                for (int64_t co = 0; co < p.out_channels; co++) {
                    double m[6][6] = {{0}};
                    for (int64_t ci = 0; ci < p.in_channels; ci++) {
                        double d[6][6], t[6][6];
                        for (int i = 0; i < 6; i++)
                            for (int j = 0; j < 6; j++) {
                                const int64_t iy = ty * 4 - p.pad_top + i, ix = tx * 4 - p.pad_left + j;
                                d[i][j] = iy >= 0 && iy < p.in_height && ix >= 0 && ix < p.in_width
                                              ? X[tensor_index(1, n, ci, iy, ix, p.in_channels, p.in_height,
                                                               p.in_width)]
                                              : 0.0;
                            }
                        for (int i = 0; i < 6; i++)
                            for (int j = 0; j < 6; j++) {
                                t[i][j] = 0.0;
                                for (int k = 0; k < 6; k++) t[i][j] += bt[i][k] * d[k][j];
                            }
                        for (int i = 0; i < 6; i++)
                            for (int j = 0; j < 6; j++) {
                                double v = 0.0;
                                for (int k = 0; k < 6; k++) v += t[i][k] * bt[j][k];
                                const int64_t q = i * 6 + j;
                                m[i][j] += v * U[((q * groups + co / 64) * p.in_channels + ci) * 64 + co % 64];
                            }
                    }
                    for (int a = 0; a < 4; a++)
                        for (int b = 0; b < 4; b++) {
                            const int64_t oy = ty * 4 + a, ox = tx * 4 + b;
                            if (oy >= p.out_height || ox >= p.out_width) continue;
                            double y = 0.0;
                            for (int i = 0; i < 6; i++)
                                for (int j = 0; j < 6; j++) y += at[a][i] * m[i][j] * at[b][j];
                            const int64_t index = tensor_index(1, n, co, oy, ox, p.out_channels, p.out_height,
                                                               p.out_width);
                            float value = (float)(y + bias[co]);
                            if (residual) value += residual[index];
                            Y[index] = ortx_activation_scalar((int)p.activation, value, p.param0, p.param1);
                        }
                }
}
