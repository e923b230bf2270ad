/* conv2d_bf16: dense and grouped 2-D convolution with bf16 operands and fp32 accumulation (gemm_bf16.h's
 * numerics), float32 NCHW in and out, with conv2d_f32's fused epilogue Y = act(conv(X, W) + bias + residual).
 *
 * Case R: small output maps where ortx_conv_rows_bf16_applies run the pixel-rows form (conv_bf16_rows.c): vectors
 *   along output channels, so no lane computes a dropped column.
 * Case 0: convs where ortx_conv_direct_bf16_applies (few dropped columns) run the direct form
 *   (conv_bf16_direct.c): the input rounded once into channel-pair planes that the micro-kernel reads in place.
 * Otherwise, per image and group, ortx_bgemm multiplies the prepacked bf16 weights (A, M = Cout/g,
 * K = Cin/g*KH*KW) by the K x OH*OW patch matrix (B), whose fp32 KC x NC blocks come from conv.c's producers and
 * are rounded to bf16 K pairs in each thread's buffer:
 *   Case 1: a 1x1, stride-1, unpadded conv reads X as B;
 *   Case 2: convs with stride 1 or 2: the input is rounded once into zero-padded bf16 planes (conv_planes.c's
 *           geometry and offsets, 2 bytes per value), from which each K pair of a 16-pixel panel is two plane rows
 *           read with one masked load per output-row run and interleaved: each input value is rounded once, not
 *           once per tap, and the fp32 staging pass is skipped;
 *   Case 3: every other conv builds its patch rows from X (conv.c's im2col) in fp32, rounded while packed.
 * Known limits: depthwise and transposed convs have no bf16 kernel (the lowering keeps them fp32); conv2d_f32's
 * direct and pixel-rows forms have no bf16 counterpart.
 *
 * ints, floats, buffers: conv2d_f32's (kernels/conv.c); weights: per group, conv_pack_bf16's panels, groups
 * consecutive: Case 0's (ortx_conv_direct_bf16_packed_index), else gemm_pack_bf16's A operand of W_g as a
 * (Cout/g) x (Cin/g*KH*KW) matrix (each ortx_bgemm_a_elements(Cout/g, K) values, in the format of the bf16 path
 * selected when packing: tiles on AMX, else MR-row K-pair panels).
 * conv2d_bf16_nchwc: conv2d_bf16 with ints [20] X's layout [21] Y's [22] the residual's: 0 NCHW, 1 blocked (conv.h's
 *   NCHWc, pad lanes of Y written as zeros), 2 bf16 pair rows (kernels/pair_rows.h, zeros past C); a residual is
 *   NCHW when Y is, else blocked or (22 = 2) pair rows (bf16 activations: the values added are the bf16 ones).
 *   The AMX direct form reads a blocked X's vectors into its chunk planes (pair rows: copies them) and
 *   stores C tile rows (one pixel's 16 channels) as they are, without the NCHW forms' transposes (pair rows: a
 *   pixel's two halves rounded together) (ortx_conv_direct_bf16_blocked_applies); other convs run conv2d_bf16 on
 *   NCHW copies (correct, never chosen). A pair-rows X holds bf16 values, which the conv rounds its input to
 *   anyway, so the results are those of the same X in fp32; a pair-rows Y is the fp32 result rounded once.
 * conv_bf16_nchwc_applies: ints the 20 conv ints; buffers [0] int64[1] out: 1 when conv2d_bf16_nchwc runs the conv
 *   on the AMX direct form (on the bf16 path selected now), else 0.
 * conv_sizes_bf16: ints the 20 conv ints; buffers [0] int64[3] out: workspace bytes, packed weight elements, the
 * form (1: Case 0, 0: the others).
 * conv_pack_bf16: ints the 20 conv ints; buffers [0] the fp32 weights (Cout, Cin/g, KH, KW) [1] the packed
 * weights (conv_sizes_bf16's elements).
 */
#include <stdlib.h>
#include <string.h>

#include "conv.h"
#include "gemm_bf16.h"
#include "ortx_kernels.h"
#include "pair_rows.h"
#include "threadpool.h"

static int is_pointwise(const ortx_conv_params *p) {
    return p->kernel_height == 1 && p->kernel_width == 1 && p->stride_height == 1 && p->stride_width == 1 &&
           p->pad_top == 0 && p->pad_left == 0 && p->out_height == p->in_height && p->out_width == p->in_width;
}

/* Case 2's rule: inside an output row a panel's pixels are 1 or 2 apart in the planes (one masked load per run). */
static int use_planes(const ortx_conv_params *p) {
    return !is_pointwise(p) && p->stride_width <= 2;
}

static int64_t gemm_floats(const ortx_conv_params *p, int threads) {
    int64_t K = p->in_channels / p->group * p->kernel_height * p->kernel_width;
    return ortx_round_up(ortx_bgemm_workspace_floats(p->out_channels / p->group, p->out_height * p->out_width, K,
                                                     threads), 16);
}

/* Case 2's bf16 planes, in floats. */
static int64_t bf16_planes_floats(const ortx_conv_params *p) {
    return ortx_round_up((p->in_channels / p->group * ortx_conv_planes_geometry_of(p).plane + 1) / 2, 16);
}

/* The planes and their offset tables (pixel offsets, one per pixel, and panel offsets, one per 16 pixels). */
static int64_t planes_floats(const ortx_conv_params *p) {
    int64_t N = p->out_height * p->out_width;
    return bf16_planes_floats(p) + ortx_round_up(N + N / ORTX_GEMM_NR + 1, 16);
}

typedef struct planes_context {
    const ortx_conv_params *params;
    ortx_conv_planes_geometry geometry;
    uint16_t *planes;
    const int32_t *pixel_offsets, *panel_offsets;
    const ortx_bgemm_isa *isa;
    const float *x;  /* the group's first input channel, while filling */
} planes_context;

/* Channels [begin, end) of the input copied into zero-padded planes (one phase: padded_rows x padded_width per
 * channel) with every value rounded to bf16. */
static void fill_channels(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const planes_context *ctx = context;
    const ortx_conv_params *p = ctx->params;
    const int64_t H = p->in_height, W = p->in_width, width = ctx->geometry.padded_width;
    int64_t first = W < -p->pad_left ? W : (-p->pad_left > 0 ? -p->pad_left : 0);
    int64_t last = W < width - p->pad_left ? W : width - p->pad_left;
    if (last < first) last = first;
    for (int64_t c = begin; c < end; c++) {
        const float *channel = ctx->x + c * H * W;
        uint16_t *out = ctx->planes + c * ctx->geometry.plane;
        for (int64_t r = 0; r < ctx->geometry.padded_rows; r++, out += width) {
            int64_t iy = r - p->pad_top;
            if (iy < 0 || iy >= H || first >= last) {
                memset(out, 0, width * sizeof(uint16_t));
                continue;
            }
            int64_t lo = first + p->pad_left, hi = last + p->pad_left;
            memset(out, 0, lo * sizeof(uint16_t));
            ctx->isa->convert(channel + iy * W + first, hi - lo, out + lo);
            memset(out + hi, 0, (width - hi) * sizeof(uint16_t));
        }
    }
}

/* ortx_bgemm_pack_pairs_fn of the patch matrix from the bf16 planes; n0 is a multiple of NR. */
static void planes_pack_pairs(const void *context, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                              int64_t panel_pairs, uint16_t *dst) {
    const planes_context *ctx = context;
    const ortx_conv_params *p = ctx->params;
    const int64_t NR = ORTX_GEMM_NR, area = p->kernel_height * p->kernel_width, pairs = (kc + 1) / 2;
    const int64_t N = p->out_height * p->out_width, width = ctx->geometry.padded_width;
    for (int64_t q = 0; q < pairs; q++) {
        const uint16_t *rows[2] = {NULL, NULL};
        for (int half = 0; half < 2 && 2 * q + half < kc; half++) {
            int64_t k = k0 + 2 * q + half, channel = k / area, tap = k % area;
            rows[half] = ctx->planes + channel * ctx->geometry.plane +
                         tap / p->kernel_width * p->dilation_height * width +
                         tap % p->kernel_width * p->dilation_width;
        }
        for (int64_t j0 = 0; j0 < nc; j0 += NR) {
            int64_t n = n0 + j0;
            uint16_t *out = dst + j0 * 2 * panel_pairs + q * NR * 2;
            if (j0 + NR <= nc && n + NR <= N) {
                ctx->isa->interleave(rows[0], rows[1], ctx->pixel_offsets + n, n % p->out_width, p->out_width,
                                     p->stride_width, out);
                continue;
            }
            for (int64_t j = 0; j < NR; j++) {  /* the last panel of the output, or of the column block */
                int valid = j0 + j < nc && n + j < N;
                int32_t offset = valid ? ctx->pixel_offsets[n + j] : 0;
                out[2 * j] = valid ? rows[0][offset] : 0;
                out[2 * j + 1] = valid && rows[1] ? rows[1][offset] : 0;
            }
        }
    }
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
    int rows = ortx_conv_rows_bf16_applies(&p), direct = !rows && ortx_conv_direct_bf16_applies(&p);
    int pointwise = is_pointwise(&p), from_planes = !rows && !direct && use_planes(&p);
    planes_context planes = {&p, ortx_conv_planes_geometry_of(&p), NULL, NULL, NULL, ortx_bgemm_select_isa(), NULL};
    if (from_planes) {
        float *planes_data = workspace + gemm_floats(&p, threads);
        int32_t *pixel_offsets = (int32_t *)(planes_data + bf16_planes_floats(&p));
        planes.planes = (uint16_t *)planes_data;
        planes.pixel_offsets = pixel_offsets;
        planes.panel_offsets = pixel_offsets + N;
        ortx_conv_planes_offsets(&p, pixel_offsets, pixel_offsets + N);
    }
    for (int64_t n = 0; n < p.batch; n++) {
        for (int64_t g = 0; g < p.group; g++) {
            const float *x = X + (n * p.in_channels + g * cin_g) * plane;
            int64_t y_offset = (n * p.out_channels + g * cout_g) * N;
            ortx_gemm_epilogue epilogue = ortx_conv_group_epilogue(&p, bias, residual, g, y_offset);
            if (rows) {  /* Case R (ungrouped) */
                ortx_conv_rows_bf16(&p, x, weights, Y + y_offset, &epilogue, workspace, threads);
                continue;
            }
            if (direct) {  /* Case 0 */
                ortx_conv_direct_bf16(&p, x, weights + g * ortx_conv_direct_bf16_packed_elements(&p), Y + y_offset,
                                      &epilogue, workspace, threads, NULL, 0);
                continue;
            }
            ortx_bgemm_operand B = {NULL, x, plane, 1, NULL, NULL, NULL};  /* Case 1 */
            ortx_im2col_context im2col = {&p, x};
            if (from_planes) {  /* Case 2 */
                planes.x = x;
                ortx_parallel_range(threads, cin_g, (int64_t)ORTX_TASKS_PER_THREAD * threads, fill_channels, &planes);
                B.pack_pairs = planes_pack_pairs;
                B.pack_context = &planes;
            } else if (!pointwise) {  /* Case 3 */
                B.pack_b = ortx_conv_im2col_pack_b;
                B.pack_context = &im2col;
            }
            ortx_bgemm_operand A = {weights + g * ortx_bgemm_a_elements(cout_g, K), NULL, 0, 0, NULL, NULL, NULL};
            ortx_bgemm(cout_g, N, K, &A, &B, Y + y_offset, N, &epilogue, workspace, threads);
        }
    }
}

/* [N][C][pixels] float32 between NCHW and the blocked layout (conv_nchwc.c's reorders; pad lanes written as zeros);
 * to_blocked 0: blocked -> NCHW. */
static void reorder_blocked(const float *src, float *dst, int64_t batch, int64_t channels, int64_t pixels,
                            int to_blocked, int threads) {
    const int64_t ints[3] = {batch, channels, pixels};
    void *buffers[2] = {(void *)src, dst};
    (to_blocked ? ortx_reorder_to_nchwc_f32 : ortx_reorder_from_nchwc_f32)(ints, NULL, buffers, threads);
}

/* [N][C][pixels] float32 from / into bf16 pair rows ([N][ceil(C / 32)][pixels][32], zeros past C). */
static void from_pair_rows(const uint16_t *src, float *dst, int64_t batch, int64_t channels, int64_t pixels) {
    const int64_t chunks = ortx_pair_rows_chunks(channels);
    for (int64_t n = 0; n < batch; n++)
        for (int64_t c = 0; c < channels; c++)
            for (int64_t i = 0; i < pixels; i++)
                dst[(n * channels + c) * pixels + i] =
                    ortx_bf16_to_float(src[((n * chunks + c / 32) * pixels + i) * 32 + c % 32]);
}

static void to_pair_rows(const float *src, uint16_t *dst, int64_t batch, int64_t channels, int64_t pixels) {
    const int64_t chunks = ortx_pair_rows_chunks(channels);
    for (int64_t n = 0; n < batch; n++)
        for (int64_t c = 0; c < chunks * 32; c++)
            for (int64_t i = 0; i < pixels; i++)
                dst[((n * chunks + c / 32) * pixels + i) * 32 + c % 32] =
                    c < channels ? ortx_bf16_from_float(src[(n * channels + c) * pixels + i]) : 0;
}

void ortx_conv2d_bf16_nchwc_through_nchw(const int64_t *ints, const float *floats, void *const *buffers,
                                         int num_threads, ortx_kernel_fn conv) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    const int x_layout = (int)ints[20], y_layout = (int)ints[21];  /* 0 NCHW, 1 blocked, 2 pair rows */
    const int residual_rows = y_layout && ints[22] == 2;
    const int64_t in_pixels = p.in_height * p.in_width, out_pixels = p.out_height * p.out_width;
    const int64_t x_count = p.batch * p.in_channels * in_pixels, y_count = p.batch * p.out_channels * out_pixels;
    float *x = x_layout ? malloc(x_count * sizeof(float)) : (float *)buffers[0];
    float *y = y_layout ? malloc(y_count * sizeof(float)) : (float *)buffers[2];
    float *residual = y_layout && p.has_residual ? malloc(y_count * sizeof(float)) : (float *)buffers[5];
    if ((x_layout && !x) || (y_layout && !y) || (y_layout && p.has_residual && !residual)) abort();
    if (x_layout == 1) reorder_blocked(buffers[0], x, p.batch, p.in_channels, in_pixels, 0, num_threads);
    if (x_layout == 2) from_pair_rows(buffers[0], x, p.batch, p.in_channels, in_pixels);
    if (y_layout && p.has_residual && residual_rows)
        from_pair_rows(buffers[5], residual, p.batch, p.out_channels, out_pixels);
    else if (y_layout && p.has_residual)
        reorder_blocked(buffers[5], residual, p.batch, p.out_channels, out_pixels, 0, num_threads);
    void *plain[6] = {x, buffers[1], y, buffers[3], buffers[4], residual};
    conv(ints, floats, plain, num_threads);
    if (y_layout == 1) reorder_blocked(y, buffers[2], p.batch, p.out_channels, out_pixels, 1, num_threads);
    if (y_layout == 2) to_pair_rows(y, buffers[2], p.batch, p.out_channels, out_pixels);
    if (x_layout) free(x);
    if (y_layout) free(y);
    if (y_layout && p.has_residual) free(residual);
}

void ortx_conv2d_bf16_nchwc(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    const int residual_rows = ints[21] && ints[22] == 2 && p.has_residual;
    const int layout = (ints[20] == 1 ? ORTX_DIRECT_X_BLOCKED : ints[20] == 2 ? ORTX_DIRECT_X_PAIR_ROWS : 0) |
                       (ints[21] == 1 ? ORTX_DIRECT_Y_BLOCKED : ints[21] == 2 ? ORTX_DIRECT_Y_PAIR_ROWS : 0) |
                       (residual_rows ? ORTX_DIRECT_RESIDUAL_PAIR_ROWS : 0);
    if (!layout || !ortx_conv_direct_bf16_blocked_applies(&p)) {
        ortx_conv2d_bf16_nchwc_through_nchw(ints, floats, buffers, num_threads, ortx_conv2d_bf16);
        return;
    }
    int threads = num_threads < 1 ? 1 : num_threads;
    if (threads > p.workspace_threads) threads = p.workspace_threads < 1 ? 1 : (int)p.workspace_threads;
    const float *bias = buffers[4], *residual = buffers[5];
    const char *X = buffers[0];
    char *Y = buffers[2];
    float *workspace = buffers[3];
    /* bytes a pixel of one image: NCHW 4 * C, blocked 4 * C rounded up to 16, pair rows 2 * C rounded up to 32 */
    const int64_t x_pixel = ints[20] == 2 ? 2 * ortx_round_up(p.in_channels, 32)
                                          : 4 * (ints[20] ? ortx_round_up(p.in_channels, 16) : p.in_channels);
    const int64_t y_pixel = ints[21] == 2 ? 2 * ortx_round_up(p.out_channels, 32)
                                          : 4 * (ints[21] ? ortx_round_up(p.out_channels, 16) : p.out_channels);
    /* floats a pixel of one image of the residual (pair rows: half its bf16 values) */
    const int64_t residual_floats = residual_rows ? ortx_round_up(p.out_channels, 32) / 2
                                                  : (ints[21] ? ortx_round_up(p.out_channels, 16) : p.out_channels);
    const int64_t in_pixels = p.in_height * p.in_width, out_pixels = p.out_height * p.out_width;
    for (int64_t n = 0; n < p.batch; n++) {
        ortx_gemm_epilogue epilogue = ortx_conv_group_epilogue(&p, bias, residual, 0, n * residual_floats * out_pixels);
        ortx_conv_direct_bf16(&p, (const float *)(X + n * x_pixel * in_pixels), buffers[1],
                              (float *)(Y + n * y_pixel * out_pixels), &epilogue, workspace, threads, NULL, layout);
    }
}

void ortx_conv_bf16_nchwc_applies(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    float unused[2] = {0.0f, 0.0f};
    ortx_conv_params p = ortx_conv_params_read(ints, unused);
    ((int64_t *)buffers[0])[0] = ortx_conv_direct_bf16_blocked_applies(&p);
}

void ortx_conv_sizes_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    float unused[2] = {0.0f, 0.0f};
    ortx_conv_params p = ortx_conv_params_read(ints, unused);
    int64_t *out = buffers[0];
    int threads = p.workspace_threads < 1 ? 1 : (int)p.workspace_threads;
    int64_t K = p.in_channels / p.group * p.kernel_height * p.kernel_width;
    if (ortx_conv_rows_bf16_applies(&p)) {
        out[0] = ortx_conv_rows_bf16_floats(&p) * (int64_t)sizeof(float);
        out[1] = ortx_conv_rows_bf16_elements(&p);
        out[2] = 2;
        return;
    }
    if (ortx_conv_direct_bf16_applies(&p)) {
        out[0] = ortx_conv_direct_bf16_floats(&p) * (int64_t)sizeof(float);
        out[1] = p.group * ortx_conv_direct_bf16_packed_elements(&p);
        out[2] = 1;
        return;
    }
    int64_t floats_needed = gemm_floats(&p, threads) + (use_planes(&p) ? planes_floats(&p) : 0);
    out[0] = floats_needed * (int64_t)sizeof(float);
    out[1] = p.group * ortx_bgemm_a_elements(p.out_channels / p.group, K);
    out[2] = 0;
}

void ortx_conv_pack_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    float unused[2] = {0.0f, 0.0f};
    ortx_conv_params p = ortx_conv_params_read(ints, unused);
    const float *weights = buffers[0];
    uint16_t *dst = buffers[1];
    int64_t cout_g = p.out_channels / p.group, K = p.in_channels / p.group * p.kernel_height * p.kernel_width;
    if (ortx_conv_rows_bf16_applies(&p)) {
        int64_t area = p.kernel_height * p.kernel_width;
        memset(dst, 0, ortx_conv_rows_bf16_elements(&p) * sizeof(uint16_t));
        for (int64_t m = 0; m < p.out_channels; m++)
            for (int64_t c = 0; c < p.in_channels; c++)
                for (int64_t tap = 0; tap < area; tap++)
                    dst[ortx_conv_rows_bf16_index(&p, m, c, tap)] =
                        ortx_bf16_from_float(weights[(m * p.in_channels + c) * area + tap]);
        return;
    }
    if (ortx_conv_direct_bf16_applies(&p)) {
        ortx_conv_direct_pack_bf16(&p, weights, dst);
        return;
    }
    int64_t each = ortx_bgemm_a_elements(cout_g, K);
    for (int64_t g = 0; g < p.group; g++) ortx_bgemm_pack_a(weights + g * cout_g * K, cout_g, K, K, 1, 1.0f, dst + g * each);
}
