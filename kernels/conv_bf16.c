/* conv2d_bf16: dense and grouped 2-D convolution with bf16 operands and fp32 accumulation (gemm_bf16.h's
 * numerics), float32 NCHW in and out, with conv2d_f32's fused epilogue Y = act(conv(X, W) + bias + residual).
 *
 * Per image and group, ortx_bgemm multiplies the prepacked bf16 weights (A, M = Cout/g, K = Cin/g*KH*KW) by the
 * K x OH*OW patch matrix (B), whose fp32 KC x NC blocks come from conv.c's producers and are rounded to bf16 K pairs
 * in each thread's buffer:
 *   Case 1: a 1x1, stride-1, unpadded conv reads X as B;
 *   Case 2: stride-1 convs with outputs >= 32 columns pack from zero-padded input planes (conv_planes.c);
 *   Case 3: every other conv builds its patch rows from X (conv.c's im2col).
 * Known limits: depthwise and transposed convs have no bf16 kernel (the lowering keeps them fp32); conv2d_f32's
 * direct and pixel-rows forms have no bf16 counterpart.
 *
 * ints, floats, buffers: conv2d_f32's (kernels/conv.c); weights: per group, gemm_pack_bf16 A panels of W_g as a
 * (Cout/g) x (Cin/g*KH*KW) matrix, groups consecutive (each ortx_bgemm_packed_elements(Cout/g, K, MR) values).
 * conv_sizes_bf16: ints the 20 conv ints; buffers [0] int64[3] out: workspace bytes, packed weight elements, 0.
 */
#include "conv.h"
#include "gemm_bf16.h"
#include "ortx_kernels.h"
#include "threadpool.h"

static int is_pointwise(const ortx_conv_params *p) {
    return p->kernel_height == 1 && p->kernel_width == 1 && p->stride_height == 1 && p->stride_width == 1 &&
           p->pad_top == 0 && p->pad_left == 0 && p->out_height == p->in_height && p->out_width == p->in_width;
}

/* Case 2's rule, as conv.c's use_planes: stride 1 makes a panel row inside an output row one 64-byte copy. */
static int use_planes(const ortx_conv_params *p) {
    return !is_pointwise(p) && p->stride_width == 1 && p->out_width >= 2 * ORTX_GEMM_NR;
}

static int64_t gemm_floats(const ortx_conv_params *p, int threads) {
    int64_t K = p->in_channels / p->group * p->kernel_height * p->kernel_width;
    return ortx_round_up(ortx_bgemm_workspace_floats(p->out_channels / p->group, p->out_height * p->out_width, K,
                                                     threads), 16);
}

/* The planes and their offset tables (pixel offsets, one per pixel, and panel offsets, one per 16 pixels). */
static int64_t planes_floats(const ortx_conv_params *p) {
    int64_t N = p->out_height * p->out_width;
    return ortx_conv_planes_geometry_of(p).floats + ortx_round_up(N + N / ORTX_GEMM_NR + 1, 16);
}

typedef struct fill_job {
    const ortx_conv_params *p;
    const float *x;
    float *planes;
} fill_job;

static void fill_channels(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const fill_job *job = context;
    ortx_conv_fill_planes(job->p, job->x, job->planes, begin, end);
}

void ortx_conv2d_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    int threads = num_threads < 1 ? 1 : num_threads;
    if (threads > p.workspace_threads) threads = p.workspace_threads < 1 ? 1 : (int)p.workspace_threads;
    const float *X = buffers[0], *bias = buffers[4], *residual = buffers[5];
    const uint16_t *weights = buffers[1];
    float *Y = buffers[2], *workspace = buffers[3];
    int64_t cin_g = p.in_channels / p.group, cout_g = p.out_channels / p.group;
    int64_t K = cin_g * p.kernel_height * p.kernel_width, N = p.out_height * p.out_width;
    int64_t plane = p.in_height * p.in_width;
    int pointwise = is_pointwise(&p), from_planes = use_planes(&p);
    ortx_conv_planes_context planes = {&p, ortx_conv_planes_geometry_of(&p), NULL, NULL, NULL};
    if (from_planes) {
        float *planes_data = workspace + gemm_floats(&p, threads);
        int32_t *pixel_offsets = (int32_t *)(planes_data + planes.geometry.floats);
        planes.planes = planes_data;
        planes.pixel_offsets = pixel_offsets;
        planes.panel_offsets = pixel_offsets + N;
        ortx_conv_planes_offsets(&p, pixel_offsets, pixel_offsets + N);
    }
    for (int64_t n = 0; n < p.batch; n++) {
        for (int64_t g = 0; g < p.group; g++) {
            const float *x = X + (n * p.in_channels + g * cin_g) * plane;
            ortx_bgemm_operand B = {NULL, x, plane, 1, NULL, NULL};  /* Case 1 */
            ortx_im2col_context im2col = {&p, x};
            if (from_planes) {  /* Case 2 */
                fill_job fill = {&p, x, (float *)planes.planes};
                ortx_parallel_range(threads, cin_g, (int64_t)ORTX_TASKS_PER_THREAD * threads, fill_channels, &fill);
                B.pack_b = ortx_conv_planes_pack_b;
                B.pack_context = &planes;
            } else if (!pointwise) {  /* Case 3 */
                B.pack_b = ortx_conv_im2col_pack_b;
                B.pack_context = &im2col;
            }
            ortx_bgemm_operand A = {weights + g * ortx_bgemm_packed_elements(cout_g, K, ORTX_GEMM_MR), NULL, 0, 0,
                                    NULL, NULL};
            int64_t y_offset = (n * p.out_channels + g * cout_g) * N;
            ortx_gemm_epilogue epilogue = {
                .alpha = 1.0f,
                .bias_row = p.has_bias ? bias + g * cout_g : NULL,
                .residual = p.has_residual ? residual + y_offset : NULL,
                .residual_row_stride = N,
                .residual_col_stride = 1,
                .residual_scale = 1.0f,
                .activation = (int)p.activation,
                .param0 = p.param0,
                .param1 = p.param1,
            };
            ortx_bgemm(cout_g, N, K, &A, &B, Y + y_offset, N, &epilogue, workspace, threads);
        }
    }
}

void ortx_conv_sizes_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    float unused[2] = {0.0f, 0.0f};
    ortx_conv_params p = ortx_conv_params_read(ints, unused);
    int64_t *out = buffers[0];
    int threads = p.workspace_threads < 1 ? 1 : (int)p.workspace_threads;
    int64_t K = p.in_channels / p.group * p.kernel_height * p.kernel_width;
    int64_t floats_needed = gemm_floats(&p, threads) + (use_planes(&p) ? planes_floats(&p) : 0);
    out[0] = floats_needed * (int64_t)sizeof(float);
    out[1] = p.group * ortx_bgemm_packed_elements(p.out_channels / p.group, K, ORTX_GEMM_MR);
    out[2] = 0;
}
