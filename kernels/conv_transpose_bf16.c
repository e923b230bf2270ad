/* conv_transpose2d_bf16: a ConvTranspose whose kernel equals its stride, without padding, dilation or output
 * padding (each input pixel writes its own KH x KW output block: PP-OCR det's 2x2 stride-2 upsamplings), with bf16
 * operands and fp32 accumulation (gemm_bf16.h's numerics) and conv_transpose2d_f32's epilogue.
 *
 * Per image and group it is the direct form (conv_bf16_direct.c) of a 1x1 conv with M = Cout/g*KH*KW outputs,
 * row m = (co, ky, kx), over the input's pixels: the input is rounded once into channel-pair planes, and each
 * MR x 32 tile is scattered to output (co, iy*KH + ky, ix*KW + kx) with bias, residual and activation, so no
 * column buffer is written and read back and the output is written once (conv_transpose2d_f32 zeroes it, then
 * adds its col2im). Other ConvTransposes keep conv_transpose2d_f32, and so do those with fewer than 64 input
 * channels per group: their GEMM is too shallow for bf16 to pay, and rounding there costs accuracy right before
 * the output (PP-OCR det's two 24-channel upsamplings in bf16: cosine to fp32 0.99897, in fp32 0.99925).
 *
 * ints, floats, buffers: conv_transpose2d_f32's (kernels/conv.c); weights: per group, the panels of
 * ortx_conv_direct_weight_index for the 1x1 conv, element (m, ci) = W[g*Cin/g + ci][m].
 * conv_transpose_sizes_bf16: ints the 20 conv ints; buffers [0] int64[3] out: workspace bytes, packed weight
 * elements, 1 when this kernel applies (else 0 and nothing else is meaningful).
 * conv_transpose_pack_bf16: ints the 20 conv ints; buffers [0] the fp32 weights (Cin, Cout/g, KH, KW) [1] the
 * packed weights.
 */
#include <string.h>

#include "activation.h"
#include "conv.h"
#include "gemm_bf16.h"
#include "ortx_kernels.h"

int ortx_conv_transpose_bf16_applies(const ortx_conv_params *p) {
    return p->kernel_height == p->stride_height && p->kernel_width == p->stride_width && p->pad_top == 0 &&
           p->pad_left == 0 && p->dilation_height == 1 && p->dilation_width == 1 &&
           p->out_height == p->in_height * p->stride_height && p->out_width == p->in_width * p->stride_width &&
           p->in_channels / p->group >= 64;
}

/* The 1x1 conv of one group's GEMM: the input's geometry, M = Cout/g*KH*KW outputs per group. */
static ortx_conv_params pointwise_of(const ortx_conv_params *p) {
    ortx_conv_params q = *p;
    q.out_channels = p->out_channels * p->kernel_height * p->kernel_width;
    q.out_height = p->in_height;
    q.out_width = p->in_width;
    q.kernel_height = q.kernel_width = q.stride_height = q.stride_width = 1;
    q.pad_top = q.pad_left = 0;
    q.has_residual = 0;
    q.activation = 0;
    return q;
}

static int64_t workspace_floats(const ortx_conv_params *p) {
    ortx_conv_params q = pointwise_of(p);
    int64_t threads = p->workspace_threads < 1 ? 1 : p->workspace_threads;
    return ortx_conv_direct_bf16_floats(&q) + threads * ORTX_BGEMM_MR * 2 * ORTX_GEMM_NR;
}

void ortx_conv_transpose_sizes_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    float unused[2] = {0.0f, 0.0f};
    ortx_conv_params p = ortx_conv_params_read(ints, unused);
    int64_t *out = buffers[0];
    ortx_conv_params q = pointwise_of(&p);
    int applies = ortx_conv_transpose_bf16_applies(&p);
    out[0] = applies ? workspace_floats(&p) * (int64_t)sizeof(float) : 0;
    out[1] = applies ? p.group * ortx_conv_direct_bf16_elements(&q) : 0;
    out[2] = applies;
}

void ortx_conv_transpose_pack_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    float unused[2] = {0.0f, 0.0f};
    ortx_conv_params p = ortx_conv_params_read(ints, unused);
    ortx_conv_params q = pointwise_of(&p);
    const float *weights = buffers[0];
    uint16_t *dst = buffers[1];
    int64_t cin_g = p.in_channels / p.group, M = q.out_channels / q.group, each = ortx_conv_direct_bf16_elements(&q);
    memset(dst, 0, p.group * each * sizeof(uint16_t));
    for (int64_t g = 0; g < p.group; g++)
        for (int64_t ci = 0; ci < cin_g; ci++)
            for (int64_t m = 0; m < M; m++)
                dst[g * each + ortx_conv_direct_weight_index(&q, m, ci, 0)] =
                    ortx_bf16_from_float(weights[(g * cin_g + ci) * M + m]);
}

void ortx_conv_transpose2d_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    ortx_conv_params q = pointwise_of(&p);
    int threads = num_threads < 1 ? 1 : num_threads;
    if (threads > p.workspace_threads) threads = p.workspace_threads < 1 ? 1 : (int)p.workspace_threads;
    const float *X = buffers[0], *bias = buffers[4], *residual = buffers[5];
    const uint16_t *weights = buffers[1];
    float *Y = buffers[2], *workspace = buffers[3];
    int64_t cin_g = p.in_channels / p.group, cout_g = p.out_channels / p.group;
    int64_t plane = p.in_height * p.in_width, out_plane = p.out_height * p.out_width;
    for (int64_t n = 0; n < p.batch; n++)
        for (int64_t g = 0; g < p.group; g++) {
            int64_t y_offset = (n * p.out_channels + g * cout_g) * out_plane;
            ortx_gemm_epilogue epilogue = {
                .alpha = 1.0f,
                .bias_row = p.has_bias ? bias + g * cout_g : NULL,
                .residual = p.has_residual ? residual + y_offset : NULL,
                .residual_scale = 1.0f,
                .activation = (int)p.activation,
                .param0 = p.param0,
                .param1 = p.param1,
            };
            ortx_conv_direct_bf16(&q, X + (n * p.in_channels + g * cin_g) * plane,
                                  weights + g * ortx_conv_direct_bf16_elements(&q), Y + y_offset, &epilogue,
                                  workspace, threads, &p, 0);
        }
}
