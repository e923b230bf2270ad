/* Family "conv": 2-D convolution (dense and grouped via im2col + the packed SGEMM, depthwise direct),
 * and 2-D transposed convolution (SGEMM + col2im), float32 NCHW, all with the fused epilogue
 * Y = act(conv(X, W) + bias + residual).
 *
 * Case 1, conv2d_f32: per image and group, ortx_sgemm multiplies the prepacked weights (the A operand,
 *   M = Cout/g, K = Cin/g*KH*KW) by the Cin/g*KH*KW x OH*OW patch matrix (im2col), adding bias per row and the
 *   residual in its epilogue. The patch matrix is never stored: its KC x NC blocks are packed straight into the
 *   GEMM's B panels in each thread's workspace, from zero-padded phase planes of the input (conv_planes.c,
 *   use_planes: one contiguous copy per panel row and output row at any stride), else (planes too large for int32
 *   offsets) row by row from X (im2col_pack_b); a 1x1, stride-1, unpadded conv uses X.
 * Case 1b, conv2d_f32 with stride 1 and few output channels (use_direct): the same phase planes, where every
 *   patch-matrix row is a constant offset from the output pixel, and 6x16 tiles (12x32 AVX-512 ones where the CPU
 *   has two FMA ports, conv_avx512.c) read B in place from there (no per-task packing), epilogue fused.
 * Case 1c, conv2d_pixel_rows_f32 (conv_pixel_rows.c), chosen by the lowering through use_pixel_rows for few
 *   output pixels and many output channels: the transposed product, pixels as rows, output channels on the vector
 *   dimension, weights prepacked as the GEMM's B panels.
 * Case 2, conv2d_depthwise_f32 (group == Cin == Cout, conv_depthwise.c): in blocks of 16 (AVX-512) or 8 (AVX2)
 *   channels, vectorised across the channels: input rows are transposed into a zero-padded pixel-major tile, each
 *   output pixel is KH*KW full-vector FMAs, and the output is transposed back with residual and activation;
 *   3x3 convs (stride 1 "same", or stride 2) at least 16 output columns wide run straight on the NCHW planes
 *   (AVX-512).
 * Case 3, conv_transpose2d_f32: per image and group, ortx_sgemm computes col = W_g^T X_g (M = Cout/g*KH*KW,
 *   K = Cin/g, N = H*W) and col2im scatters it into Y (initialised with the bias), one output channel per
 *   thread so the sums keep a fixed order; residual and activation follow. When kernel == stride without padding
 *   (upsampling: one tap per output pixel), col is computed for blocks of input rows that fit in cache and each
 *   output row is written once from it (the same sums): PP-OCR det's 24->24 2x2/2 at 160x160 went 1.33 ->
 *   1.08 ms in the model, its 24->1 at 320x320 0.61 -> 0.39 (a full col and four read-modify-write passes over Y).
 * Known limits: 2-D only (1-D convs are lowered with H = 1); transposed conv has no depthwise fast path.
 */
#include <stdint.h>
#include <string.h>

#include "activation.h"
#include "conv.h"
#include "conv_winograd.h"
#include "gemm.h"
#include "isa.h"
#include "ortx_kernels.h"
#include "threadpool.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* Most output channels (per group) for which conv2d_f32 takes the direct path (Case 1b, see use_direct): with
 * the 6x16 tile, and with the 12x32 AVX-512 tile on CPUs with two FMA ports. */
#define ORTX_DIRECT_MAX_CHANNELS 32
#define ORTX_DIRECT_WIDE_MAX_CHANNELS 64

static int clamp_threads(int num_threads, const ortx_conv_params *p) {
    int threads = num_threads < 1 ? 1 : num_threads;
    return threads > p->workspace_threads ? (int)max64(1, p->workspace_threads) : threads;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Case 1: im2col + SGEMM.
 * ------------------------------------------------------------------------------------------------------------- */

static int is_pointwise(const ortx_conv_params *p) {
    return p->kernel_height == 1 && p->kernel_width == 1 && p->stride_height == 1 && p->stride_width == 1 &&
           p->pad_top == 0 && p->pad_left == 0 && p->out_height == p->in_height && p->out_width == p->in_width;
}

typedef ortx_im2col_context im2col_context;

/* Columns [n0, n0+count) of patch-matrix row (c, ky, kx): out[j] = x[c][oy*sh - pt + ky*dh][ox*sw - pl + kx*dw]
 * for output pixel n0 + j = oy*OW + ox, or 0 outside the image. */
static void im2col_segment(const ortx_conv_params *p, const float *channel, int64_t ky, int64_t kx, int64_t n0,
                           int64_t count, float *out) {
    int64_t OW = p->out_width, H = p->in_height, W = p->in_width, sw = p->stride_width;
    int64_t offset = kx * p->dilation_width - p->pad_left;
    /* output columns with 0 <= ox*sw + offset < W */
    int64_t first = min64(OW, max64(0, floor_div(-offset + sw - 1, sw)));
    int64_t end = min64(OW, max64(first, floor_div(W - 1 - offset, sw) + 1));
    int64_t oy = n0 / OW, ox = n0 % OW;
    for (int64_t done = 0; done < count; oy++, ox = 0) {
        int64_t stop = min64(OW, ox + count - done);  /* this output row's columns: [ox, stop) */
        float *row = out + done - ox;                 /* row[ox'] is output column ox' of this output row */
        done += stop - ox;
        int64_t iy = oy * p->stride_height - p->pad_top + ky * p->dilation_height;
        if (iy < 0 || iy >= H) {
            memset(row + ox, 0, (stop - ox) * sizeof(float));
            continue;
        }
        const float *in = channel + iy * W + offset;
        int64_t lo = max64(ox, first), hi = min64(stop, end);
        if (lo >= hi) {
            memset(row + ox, 0, (stop - ox) * sizeof(float));
            continue;
        }
        for (int64_t j = ox; j < lo; j++) row[j] = 0.0f;
        if (sw == 1) {
            memcpy(row + lo, in + lo, (hi - lo) * sizeof(float));
        } else if (sw == 2) {  /* a constant stride the compiler vectorises (stride-2 stems spend most time here) */
            for (int64_t j = lo; j < hi; j++) row[j] = in[2 * j];
        } else {
            for (int64_t j = lo; j < hi; j++) row[j] = in[j * sw];
        }
        for (int64_t j = hi; j < stop; j++) row[j] = 0.0f;
    }
}

/* ortx_gemm_pack_b_fn of the patch matrix: each row segment is built in L1 and copied panel by panel, so the
 * Cin/g*KH*KW x OH*OW matrix is never written to memory. */
void ortx_conv_im2col_pack_b(const void *context, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst) {
    const im2col_context *ctx = context;
    const ortx_conv_params *p = ctx->params;
    const int64_t NR = ORTX_GEMM_NR, area = p->kernel_height * p->kernel_width;
    const int64_t plane = p->in_height * p->in_width, full = nc / NR * NR;
    float segment[ORTX_GEMM_NC + ORTX_GEMM_NR] __attribute__((aligned(64)));
    for (int64_t k = 0; k < kc; k++) {
        int64_t row = k0 + k, channel = row / area, tap = row % area;
        im2col_segment(p, ctx->input + channel * plane, tap / p->kernel_width, tap % p->kernel_width, n0, nc,
                       segment);
        for (int64_t j0 = 0; j0 < full; j0 += NR) memcpy(dst + j0 * kc + k * NR, segment + j0, NR * sizeof(float));
        if (full < nc) {
            float *out = dst + full * kc + k * NR;
            for (int64_t j = 0; j < NR; j++) out[j] = full + j < nc ? segment[full + j] : 0.0f;
        }
    }
}

/* Whether Case 1 packs B from the phase planes (conv_planes.c): a panel row is one contiguous copy per output row
 * it touches there, where im2col_pack_b clips every output row against the image and gathers strided columns
 * (~1 cycle per float: 15% of ResNet-18's 64 @56x56 3x3 at 1 thread, more for the 7x7/2 stem). */
static int use_direct(const ortx_conv_params *p);

static int use_planes(const ortx_conv_params *p) { return ortx_conv_packs_from_planes(p) && !use_direct(p); }


/* ---------------------------------------------------------------------------------------------------------------
 * Case 1b: direct (implicit GEMM) over phase planes, see conv.h.
 * ------------------------------------------------------------------------------------------------------------- */

/* The direct tile per ISA: its function, virtual pixels per tile and output channels per call (at most two A
 * panels). AVX-512 CPUs run the AVX2 6x16 tile unless ortx_cpu_has_two_fma_ports(), where the 12x32 AVX-512 tile
 * wins (conv_avx512.c). */
typedef struct direct_kernel {
    ortx_conv_direct_tile_fn tile;
    int64_t pixels, rows;
} direct_kernel;

static direct_kernel direct_kernel_selected(void) {
    switch (ortx_selected_isa()) {
#if ORTX_HAVE_X86
        case ORTX_ISA_AVX512:
            if (ortx_cpu_has_two_fma_ports())
                return (direct_kernel){ortx_conv_direct_tile_avx512, 32, 2 * ORTX_GEMM_MR};
            return (direct_kernel){ortx_conv_direct_tile_avx2, ORTX_GEMM_NR, ORTX_GEMM_MR};
        case ORTX_ISA_AVX2:
            return (direct_kernel){ortx_conv_direct_tile_avx2, ORTX_GEMM_NR, ORTX_GEMM_MR};
#endif
        default:
            return (direct_kernel){ortx_conv_direct_tile_portable, ORTX_GEMM_NR, ORTX_GEMM_MR};
    }
}

void ortx_conv_direct_tile_portable(int64_t K, int64_t k_begin, int64_t k_end, const float *weights, int64_t m_padded,
                                    int64_t row0, const float *x, const int32_t *offsets, const float *partial,
                                    float *c, int64_t ldc, int64_t rows, const ortx_gemm_epilogue *epilogue,
                                    int64_t col0) {
    enum { MR = ORTX_GEMM_MR, NR = ORTX_GEMM_NR };
    float acc[MR][NR] = {{0}};
    for (int64_t k0 = k_begin; k0 < k_end; k0 += ORTX_GEMM_KC) {
        int64_t kc = min64(ORTX_GEMM_KC, K - k0);
        const float *a = weights + k0 * m_padded + row0 * kc;
        for (int64_t k = 0; k < kc; k++) {
            const float *b = x + offsets[k0 + k];
            for (int i = 0; i < MR; i++)
                for (int j = 0; j < NR; j++) acc[i][j] += a[k * MR + i] * b[j];
        }
    }
    for (int64_t i = 0; i < rows; i++)
        for (int j = 0; j < NR; j++) {
            float value = partial ? partial[i * NR + j] + acc[i][j] : acc[i][j];
            c[i * ldc + j] = epilogue ? ortx_gemm_epilogue_scalar(epilogue, value, row0 + i, col0 + j) : value;
        }
}

/* Whether conv2d_f32 takes the direct path: it reads B in place instead of packing an im2col block per task,
 * which is what dominates when few output channels share each packed block (PP-OCRv4 det's 96 -> 24 3x3 convs:
 * 1.45x -> ~1.3x onnxruntime's time); it pays for the discarded virtual columns (phase_width - OW of every
 * phase_width), one copy of the input and B loads that straddle cache lines, which lose to the packed GEMM with
 * 64 output channels or more, with stride 2 and with short K (measured on a Zen 2 EPYC, benchmarks/kernels.py).
 * On CPUs with two 512-bit FMA ports (ortx_cpu_has_two_fma_ports) the 12x32 AVX-512 tile takes it up to
 * ORTX_DIRECT_WIDE_MAX_CHANNELS: there the packed GEMM's B panels stream from L2 at twice the FMA rate and its
 * packing is ~10% of the conv (see BENCHMARKS.md "Dense conv layers"). Depends on the shape and the CPU only, so
 * the choice (and the sums) are the same for every thread count. */
static int use_direct(const ortx_conv_params *p) {
    if (is_pointwise(p) || p->stride_height != 1 || p->stride_width != 1) return 0;
    ortx_conv_direct_geometry g = ortx_conv_direct_geometry_of(p);
    int64_t cin_g = p->in_channels / p->group, cout_g = p->out_channels / p->group;
    int64_t K = cin_g * p->kernel_height * p->kernel_width;
    if (cin_g * g.channel_floats + g.virtual_pixels + 64 > INT32_MAX) return 0;
    /* the last tile's discarded lanes read at most 32 pixels + the widest tap past the planes (conv.h's slack) */
    if ((p->kernel_width - 1) * p->dilation_width + 32 > ORTX_CONV_PLANES_SLACK) return 0;
    int wide = ortx_cpu_isa() == ORTX_ISA_AVX512 && ortx_cpu_has_two_fma_ports();
    int64_t most = wide ? ORTX_DIRECT_WIDE_MAX_CHANNELS : ORTX_DIRECT_MAX_CHANNELS;
    /* discarded columns cost at most 1/8 of the work */
    return cout_g <= most && K >= 64 && 8 * (g.phase_width - p->out_width) <= g.phase_width;
}

typedef struct direct_job {
    const ortx_conv_params *p;
    ortx_conv_direct_geometry g;
    const float *planes;  /* filled phase planes (conv_planes.c) */
    const int32_t *offsets;
    const float *weights; /* the group's packed A */
    float *y;             /* the group's first output channel */
    const ortx_gemm_epilogue *epilogue;
    const ortx_gemm_isa *isa;
    direct_kernel kernel;
    int64_t K, M;
} direct_job;

/* Copies the valid columns of a scratch tile (rows x the kernel's pixels) starting at virtual pixel (oy, ox) into
 * Y, then applies the epilogue to them in place. */
static void direct_scatter(const direct_job *job, const float *tile, int64_t rows, int64_t m0, int64_t oy,
                           int64_t ox) {
    const ortx_conv_params *p = job->p;
    const int64_t width = job->kernel.pixels, OW = p->out_width, Wq = job->g.phase_width, N = p->out_height * OW;
    for (int64_t j = 0, row = oy, column = ox; j < width && row < p->out_height; row++, column = 0) {
        int64_t run = min64(width - j, OW - column);  /* valid columns of this output row */
        if (run > 0) {
            int64_t col0 = row * OW + column;
            float *out = job->y + m0 * N + col0;
            for (int64_t i = 0; i < rows; i++) memcpy(out + i * N, tile + i * width + j, run * sizeof(float));
            job->isa->epilogue(out, N, rows, run, m0, col0, job->epilogue);
        }
        j += Wq - column;  /* skip the discarded columns to the next row's start */
    }
}

/* Largest direct tile (12 x 32) and the most channels whose partial sums wait between KC blocks. */
enum { DIRECT_TILE_FLOATS = 2 * ORTX_GEMM_MR * 32,
       DIRECT_PARTIAL_FLOATS = (ORTX_DIRECT_WIDE_MAX_CHANNELS + 2 * ORTX_GEMM_MR) * 32 };

/* Virtual-pixel tiles [begin, end) (the kernel's pixels each). Each KC block of depth runs over every row group
 * before the next block, so the tile's B lines (KC scattered plane rows) stay in L1 across the groups; partial
 * sums wait in a scratch column block. After the last block, a tile inside one output row is stored straight into
 * Y with the fused epilogue; one that crosses a row end (or the last row) goes through direct_scatter. */
static void direct_tiles(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const direct_job *job = context;
    const ortx_conv_params *p = job->p;
    const int64_t width = job->kernel.pixels, group = job->kernel.rows, KC = ORTX_GEMM_KC, OW = p->out_width;
    const int64_t Wq = job->g.phase_width, N = p->out_height * OW, M = job->M, K = job->K;
    const int64_t m_padded = ortx_round_up(M, ORTX_GEMM_MR);
    const ortx_conv_direct_tile_fn run = job->kernel.tile;
    float tile[DIRECT_TILE_FLOATS] __attribute__((aligned(64)));
    float partial[DIRECT_PARTIAL_FLOATS] __attribute__((aligned(64)));
    for (int64_t t = begin; t < end; t++) {
        int64_t v0 = t * width, oy = v0 / Wq, ox = v0 % Wq, col0 = oy * OW + ox;
        int clean = ox + width <= OW;
        const float *x = job->planes + v0;
        for (int64_t k0 = 0; k0 < K; k0 += KC) {
            int64_t k1 = min64(K, k0 + KC);
            for (int64_t m0 = 0; m0 < M; m0 += group) {
                int64_t rows = min64(group, M - m0);
                const float *in = k0 > 0 ? partial + m0 * width : NULL;
                if (k1 < K) {
                    run(K, k0, k1, job->weights, m_padded, m0, x, job->offsets, in, partial + m0 * width, width, rows,
                        NULL, 0);
                } else if (clean) {
                    run(K, k0, k1, job->weights, m_padded, m0, x, job->offsets, in, job->y + m0 * N + col0, N, rows,
                        job->epilogue, col0);
                } else {
                    run(K, k0, k1, job->weights, m_padded, m0, x, job->offsets, in, tile, width, rows, NULL, 0);
                    direct_scatter(job, tile, rows, m0, oy, ox);
                }
            }
        }
    }
}

/* One image and group over filled planes: the tiles, split over pixels. */
static void conv2d_direct(const ortx_conv_params *p, const ortx_conv_planes_context *planes, const float *weights,
                          float *y, const ortx_gemm_epilogue *epilogue, int threads) {
    ortx_conv_direct_geometry g = planes->geometry;
    int64_t K = p->in_channels / p->group * p->kernel_height * p->kernel_width, M = p->out_channels / p->group;
    direct_job job = {p, g, planes->planes, planes->tap_offsets, weights, y, epilogue, ortx_gemm_select_isa(),
                      direct_kernel_selected(), K, M};
    int64_t tiles = (g.virtual_pixels + job.kernel.pixels - 1) / job.kernel.pixels;
    ortx_parallel_range(threads, tiles, (int64_t)ORTX_TASKS_PER_THREAD * threads, direct_tiles, &job);
}

/* Case 1g: a grouped 1x1 conv whose groups' products are small (ShuffleNet's: 6-136 channels a group) as tasks of
 * (image, group, column range), each a one-thread ortx_sgemm on the calling thread's scratch. Through Case 1 every
 * group's product was split over the threads in turn, a fork and join and a packing per group of a few
 * microseconds' work: light ShuffleNet's 33 grouped 1x1 convs (group 4) took 1.3-2x ORT's time each. Every output is
 * summed as ortx_sgemm sums it on one thread whatever the split, so the bits do not depend on threads. */
enum { GROUP_TASK_MULTIPLY_ADDS = 8 << 20, GROUP_TASK_MIN_COLUMNS = 64 };

typedef struct group_task_job {
    const ortx_conv_params *p;
    const float *X, *packed, *bias, *residual;
    float *Y;
    int64_t chunks, columns;  /* column ranges per group, columns per range */
} group_task_job;

static int use_group_tasks(const ortx_conv_params *p, int threads) {
    const int64_t cin_g = p->in_channels / p->group, cout_g = p->out_channels / p->group;
    return threads > 1 && p->group > 1 && is_pointwise(p) &&
           (double)cin_g * cout_g * p->out_height * p->out_width < GROUP_TASK_MULTIPLY_ADDS;
}

static void group_task(void *context, int64_t task, int thread) {
    (void)thread;
    const group_task_job *job = context;
    const ortx_conv_params *p = job->p;
    const int64_t cin_g = p->in_channels / p->group, cout_g = p->out_channels / p->group;
    const int64_t N = p->out_height * p->out_width, chunk = task % job->chunks;
    const int64_t g = task / job->chunks % p->group, n = task / (job->chunks * p->group);
    const int64_t c0 = chunk * job->columns, columns = min64(job->columns, N - c0);
    if (columns <= 0) return;
    const float *x = job->X + (n * p->in_channels + g * cin_g) * N + c0;
    ortx_gemm_operand A = {job->packed + g * ortx_gemm_packed_a_floats(cout_g, cin_g), 1, 0, 0, NULL, NULL};
    ortx_gemm_operand B = {x, 0, N, 1, NULL, NULL};
    const int64_t y_offset = (n * p->out_channels + g * cout_g) * N + c0;
    ortx_gemm_epilogue epilogue = ortx_conv_group_epilogue(p, job->bias, job->residual, g, y_offset);
    float *workspace = ortx_thread_scratch(ortx_sgemm_workspace_floats(cout_g, columns, cin_g, 1, 0, 1));
    ortx_sgemm(cout_g, columns, cin_g, &A, &B, job->Y + y_offset, N, &epilogue, workspace, 1);
}

static void conv2d_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    int threads = clamp_threads(num_threads, &p);
    const float *X = buffers[0], *packed = buffers[1], *bias = buffers[4], *residual = buffers[5];
    float *Y = buffers[2], *workspace = buffers[3];
    int64_t cin_g = p.in_channels / p.group, cout_g = p.out_channels / p.group;
    int64_t K = cin_g * p.kernel_height * p.kernel_width, N = p.out_height * p.out_width;
    int64_t plane = p.in_height * p.in_width;
    if (use_group_tasks(&p, threads)) {  /* Case 1g */
        const int64_t pieces = p.batch * p.group;
        int64_t chunks = min64(max64(1, (4 * (int64_t)threads + pieces - 1) / pieces),
                               max64(1, N / GROUP_TASK_MIN_COLUMNS));
        const int64_t columns = (N + chunks - 1) / chunks;
        chunks = (N + columns - 1) / columns;
        group_task_job job = {&p, X, packed, bias, residual, Y, chunks, columns};
        ortx_parallel_for(threads, pieces * chunks, group_task, &job);
        return;
    }
    int direct = use_direct(&p), from_planes = use_planes(&p);
    /* Case 1b: the planes and tap offsets at the workspace's start; Case 1 with planes: after the GEMM's workspace */
    ortx_conv_planes_context planes = {&p, ortx_conv_direct_geometry_of(&p), NULL, NULL};
    if (direct || from_planes)
        ortx_conv_planes_context_init(
            &planes, &p,
            direct ? workspace
                   : workspace + ortx_round_up(ortx_sgemm_workspace_floats(cout_g, N, K, 1, 0, threads), 16));
    for (int64_t n = 0; n < p.batch; n++) {
        for (int64_t g = 0; g < p.group; g++) {
            const float *x = X + (n * p.in_channels + g * cin_g) * plane;
            ortx_gemm_operand B = {x, 0, plane, 1, NULL, NULL};  /* Case 1x1: X is the patch matrix */
            im2col_context context = {&p, x};
            if (direct || from_planes) ortx_conv_fill_planes_parallel(&p, x, planes.planes, threads);
            if (from_planes) {
                B.pack_b = ortx_conv_planes_pack_b;
                B.pack_context = &planes;
            } else if (!is_pointwise(&p)) {
                B.pack_b = ortx_conv_im2col_pack_b;
                B.pack_context = &context;
            }
            ortx_gemm_operand A = {packed + g * ortx_gemm_packed_a_floats(cout_g, K), 1, 0, 0, NULL, NULL};
            int64_t y_offset = (n * p.out_channels + g * cout_g) * N;
            ortx_gemm_epilogue epilogue = ortx_conv_group_epilogue(&p, bias, residual, g, y_offset);
            if (direct) {
                conv2d_direct(&p, &planes, A.data, Y + y_offset, &epilogue, threads);
            } else {
                ortx_sgemm(cout_g, N, K, &A, &B, Y + y_offset, N, &epilogue, workspace, threads);
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------------
 * Case 3: transposed conv.
 * ------------------------------------------------------------------------------------------------------------- */

static int64_t transpose_col_floats(const ortx_conv_params *p) {
    return (p->out_channels / p->group) * p->kernel_height * p->kernel_width * p->in_height * p->in_width;
}

/* col2im for output channels [begin, end) of group g, image n: each channel is summed by one task, in a fixed
 * tap order, so results do not depend on the split. */
typedef struct col2im_job {
    const ortx_conv_params *p;
    const ortx_gemm_isa *isa;
    const float *col, *bias, *residual;
    float *Y;
    int64_t n, g;
} col2im_job;

static void col2im_channels(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const col2im_job *job = context;
    const ortx_conv_params p = *job->p;
    const ortx_gemm_isa *isa = job->isa;
    const float *col = job->col, *bias = job->bias, *residual = job->residual;
    float *Y = job->Y;
    int64_t n = job->n, g = job->g, cout_g = p.out_channels / p.group;
    int64_t in_plane = p.in_height * p.in_width, out_plane = p.out_height * p.out_width;
    for (int64_t co = begin; co < end; co++) {
        int64_t channel = g * cout_g + co, y_offset = (n * p.out_channels + channel) * out_plane;
        float *y = Y + y_offset;
        float start = p.has_bias ? bias[channel] : 0.0f;
        for (int64_t i = 0; i < out_plane; i++) y[i] = start;
        for (int64_t ky = 0; ky < p.kernel_height; ky++) {
            for (int64_t kx = 0; kx < p.kernel_width; kx++) {
                const float *source = col + ((co * p.kernel_height + ky) * p.kernel_width + kx) * in_plane;
                int64_t offset = kx * p.dilation_width - p.pad_left, sw = p.stride_width;
                /* input columns with 0 <= ix*sw + offset < OW */
                int64_t first = min64(p.in_width, max64(0, floor_div(-offset + sw - 1, sw)));
                int64_t end = min64(p.in_width, max64(first, floor_div(p.out_width - 1 - offset, sw) + 1));
                for (int64_t iy = 0; iy < p.in_height; iy++) {
                    int64_t oy = iy * p.stride_height - p.pad_top + ky * p.dilation_height;
                    if (oy < 0 || oy >= p.out_height) continue;
                    float *out = y + oy * p.out_width + offset;
                    const float *in = source + iy * p.in_width;
                    for (int64_t ix = first; ix < end; ix++) out[ix * sw] += in[ix];
                }
            }
        }
        if (p.has_residual)
            for (int64_t i = 0; i < out_plane; i++) y[i] += residual[y_offset + i];
        isa->activation(y, out_plane, (int)p.activation, p.param0, p.param1);
    }
}

/* Whether every output pixel has exactly one tap (kernel == stride, no padding or dilation, no output padding: the
 * upsampling ConvTranspose): then Y is written once, from col blocks that stay in cache. */
static int transpose_is_tiling(const ortx_conv_params *p) {
    return p->kernel_height == p->stride_height && p->kernel_width == p->stride_width && p->pad_top == 0 &&
           p->pad_left == 0 && p->dilation_height == 1 && p->dilation_width == 1 &&
           p->out_height == p->in_height * p->stride_height && p->out_width == p->in_width * p->stride_width;
}

/* The tiling case's col2im for units [begin, end), unit u = (output channel u / rows, input row row0 + u % rows)
 * of group g, image n, col holding rows [row0, row0 + rows)'s columns (rows * W per (co, ky, kx) row): each output
 * row is assembled once (bias + its tap, as col2im_channels sums them), then residual and activation while it is
 * in L1. Units, not channels, so that a one-channel output (PP-OCR det's last layer) still splits. */
typedef struct tiling_job {
    const ortx_conv_params *p;
    const ortx_gemm_isa *isa;
    const float *col, *bias, *residual;
    float *Y;
    int64_t n, g, row0, rows;
} tiling_job;

static void tiling_channels(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const tiling_job *job = context;
    const ortx_conv_params *p = job->p;
    const int64_t KH = p->kernel_height, KW = p->kernel_width, W = p->in_width, OW = p->out_width;
    const int64_t cout_g = p->out_channels / p->group, block = job->rows * W;
    for (int64_t unit = begin; unit < end; unit++) {
        int64_t co = unit / job->rows, r = unit % job->rows, channel = job->g * cout_g + co;
        int64_t y_offset = (job->n * p->out_channels + channel) * p->out_height * OW;
        float start = p->has_bias ? job->bias[channel] : 0.0f;
        for (int64_t ky = 0; ky < KH; ky++) {
            int64_t at = y_offset + ((job->row0 + r) * KH + ky) * OW;
            float *out = job->Y + at;
            const float *source = job->col + (co * KH + ky) * KW * block + r * W;
            if (KW == 2) {
                const float *even = source, *odd = source + block;
                for (int64_t ix = 0; ix < W; ix++) {
                    out[2 * ix] = start + even[ix];
                    out[2 * ix + 1] = start + odd[ix];
                }
            } else {
                for (int64_t kx = 0; kx < KW; kx++)
                    for (int64_t ix = 0; ix < W; ix++) out[ix * KW + kx] = start + source[kx * block + ix];
            }
            if (p->has_residual)
                for (int64_t i = 0; i < OW; i++) out[i] += job->residual[at + i];
            job->isa->activation(out, OW, (int)p->activation, p->param0, p->param1);
        }
    }
}

static void conv_transpose2d_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    int threads = clamp_threads(num_threads, &p);
    const ortx_gemm_isa *isa = ortx_gemm_select_isa();
    const float *X = buffers[0], *packed = buffers[1], *bias = buffers[4], *residual = buffers[5];
    float *Y = buffers[2], *workspace = buffers[3];
    int64_t cin_g = p.in_channels / p.group, cout_g = p.out_channels / p.group;
    int64_t kernel_area = p.kernel_height * p.kernel_width, in_plane = p.in_height * p.in_width;
    int64_t M = cout_g * kernel_area;
    float *col = workspace;
    float *gemm_workspace = workspace + (transpose_col_floats(&p) + 15) / 16 * 16;
    ortx_gemm_epilogue plain = {.alpha = 1.0f};
    /* the tiling case with KW == 2 on AVX-512: straight from X, no col (conv_transpose_avx512.c) */
    if (transpose_is_tiling(&p) &&
        ortx_conv_transpose_tiling_avx512(&p, X, packed, bias, residual, Y, workspace, threads))
        return;
    for (int64_t n = 0; n < p.batch; n++) {
        for (int64_t g = 0; g < p.group; g++) {
            ortx_gemm_operand A = {packed + g * ortx_gemm_packed_a_floats(M, cin_g), 1, 0, 0, NULL, NULL};
            ortx_gemm_operand B = {X + (n * p.in_channels + g * cin_g) * in_plane, 0, in_plane, 1, NULL, NULL};
            if (transpose_is_tiling(&p)) {
                /* blocks of input rows whose col (M x rows*W floats) fits in about 1 MB: never written to memory */
                int64_t rows = max64(1, min64(p.in_height, (1 << 18) / max64(1, M * p.in_width)));
                for (int64_t row0 = 0; row0 < p.in_height; row0 += rows) {
                    int64_t count = min64(rows, p.in_height - row0), N = count * p.in_width;
                    ortx_gemm_operand Bblock = B;
                    Bblock.data = B.data + row0 * p.in_width;
                    ortx_sgemm(M, N, cin_g, &A, &Bblock, col, N, &plain, gemm_workspace, threads);
                    tiling_job job = {&p, isa, col, bias, residual, Y, n, g, row0, count};
                    ortx_parallel_range(threads, cout_g * count, ORTX_TASKS_PER_THREAD * threads, tiling_channels, &job);
                }
                continue;
            }
            ortx_sgemm(M, in_plane, cin_g, &A, &B, col, in_plane, &plain, gemm_workspace, threads);
            col2im_job job = {&p, isa, col, bias, residual, Y, n, g};
            ortx_parallel_range(threads, cout_g, ORTX_TASKS_PER_THREAD * threads, col2im_channels, &job);
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------------
 * Sizes and packing.
 * ------------------------------------------------------------------------------------------------------------- */

/* Whether a dense conv runs faster as conv2d_pixel_rows_f32 than as conv2d_f32 (see conv_pixel_rows.c): few
 * output pixels (<= 64: an 8x8 map; <= 256 with deep 3x3 patches) and many output channels. Measured on this Zen 4
 * EPYC at 2 threads: ResNet-18's 512 @7x7 3x3 3.1 -> 1.8 ms, 3x3/2 1.5 -> 0.8 ms, 256 @14x14 1.9 -> 1.4 ms; 1x1
 * convs with K < 1024 at 14x14 and Cout/g < 256 at 7x7 (MobileNetV2's) lose to the extra packing passes. */
static int use_pixel_rows(const ortx_conv_params *p) {
    int64_t cout_g = p->out_channels / p->group, pixels = p->out_height * p->out_width;
    int64_t K = p->in_channels / p->group * p->kernel_height * p->kernel_width;
    if (p->group != 1 || use_direct(p) || ortx_conv_planes_source_floats(p) >= INT32_MAX) return 0;
    return (pixels <= 64 && K >= 256 && cout_g >= 256) || (pixels <= 256 && K >= 1024 && cout_g >= 64);
}

/* Sizes for the lowering: ints [0] kind (0 conv2d, 1 depthwise, 2 transpose, 3 conv2d_pixel_rows) then the 20
 * conv ints; buffers [0] int64[3] out: workspace bytes, packed weight floats (0 for depthwise, which reads W as
 * is), and for kind 0 whether the lowering should emit conv2d_pixel_rows_f32 instead (the shape rule lives here,
 * next to the kernels it chooses between). */
static void conv_sizes_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    float unused[2] = {0.0f, 0.0f};
    ortx_conv_params p = ortx_conv_params_read(ints + 1, unused);
    int64_t *out = buffers[0];
    int threads = (int)max64(1, p.workspace_threads);
    int64_t cin_g = p.in_channels / p.group, cout_g = p.out_channels / p.group;
    int64_t kernel_area = p.kernel_height * p.kernel_width, floats_needed = 0;
    if (ints[0] == 0) {
        int64_t K = cin_g * kernel_area;
        floats_needed = ortx_sgemm_workspace_floats(cout_g, p.out_height * p.out_width, K, 1, 0, threads);
        if (use_direct(&p)) {
            floats_needed = max64(floats_needed, ortx_conv_direct_floats(&p));
        } else if (use_planes(&p)) {
            floats_needed = ortx_round_up(floats_needed, 16) + ortx_conv_planes_source_floats(&p);
        }
        out[1] = p.group * ortx_gemm_packed_a_floats(cout_g, K);
        out[2] = use_pixel_rows(&p);
    } else if (ints[0] == 3) {
        floats_needed = ortx_pixel_rows_workspace_floats(&p);
        out[1] = p.group * ortx_gemm_packed_b_floats(cin_g * kernel_area, cout_g);
    } else if (ints[0] == 1) {
        floats_needed = ortx_depthwise_workspace_floats(&p, threads);
        out[1] = 0;
    } else {
        int64_t M = cout_g * kernel_area;
        floats_needed = (transpose_col_floats(&p) + 15) / 16 * 16 +
                        ortx_sgemm_workspace_floats(M, p.in_height * p.in_width, cin_g, 1, 0, threads);
        floats_needed = max64(floats_needed, ortx_conv_transpose_tiling_floats(&p));
        out[1] = p.group * ortx_gemm_packed_a_floats(M, cin_g);
    }
    out[0] = floats_needed * (int64_t)sizeof(float);
}

/* Kernels. All three share the ints layout of conv.h:
 *   ints:    [0] N [1] Cin [2] H [3] W [4] Cout [5] OH [6] OW [7] KH [8] KW [9] stride_h [10] stride_w
 *            [11] pad_top [12] pad_left [13] dilation_h [14] dilation_w [15] group [16] has_bias
 *            [17] has_residual [18] activation [19] workspace_threads (thread count the workspace is sized for)
 *   floats:  [0] activation param0 [1] param1
 *   buffers: [0] X (N, Cin, H, W) [1] weights [2] Y (N, Cout, OH, OW) [3] workspace (conv_sizes_f32 bytes)
 *            [4] bias (Cout; any buffer when has_bias 0) [5] residual (Y's shape; any buffer when has_residual 0)
 * conv2d_f32 weights: per group, gemm_pack_f32 A panels of W_g as a (Cout/g) x (Cin/g*KH*KW) matrix, groups
 *   consecutive (each ortx_gemm_packed_a_floats(Cout/g, Cin/g*KH*KW) floats).
 * conv2d_pixel_rows_f32 weights: per group, gemm_pack_f32 B panels of W_g^T (NR-column panels over the output
 *   channels), groups consecutive (each ortx_gemm_packed_b_floats(Cin/g*KH*KW, Cout/g) floats).
 * conv2d_depthwise_f32 weights: W as given, (C, 1, KH, KW); requires group == Cin == Cout.
 * conv_transpose2d_f32 weights: per group, A panels of W_g^T, a (Cout/g*KH*KW) x (Cin/g) matrix, where W is
 *   ONNX's (Cin, Cout/g, KH, KW); pads are the output's top/left crop. */
const ortx_kernel_entry ortx_family_conv[] = {
    {"conv2d_f32", conv2d_f32, ortx_conv2d_f32_ref},
    {"conv2d_pixel_rows_f32", ortx_conv2d_pixel_rows_f32, ortx_conv2d_pixel_rows_f32_ref},
    {"conv2d_depthwise_f32", ortx_conv2d_depthwise_f32, ortx_conv2d_depthwise_f32_ref},
    {"conv_transpose2d_f32", conv_transpose2d_f32, ortx_conv_transpose2d_f32_ref},
    {"conv_sizes_f32", conv_sizes_f32, conv_sizes_f32},
    {"conv_source_sizes_f32", ortx_conv_source_sizes_f32, ortx_conv_source_sizes_f32},
    /* conv_winograd.c: 3x3 stride-1 dense convs; the weights start with conv2d_f32's, so its oracle serves */
    {"conv2d_winograd_f32", ortx_conv2d_winograd_f32, ortx_conv2d_f32_ref},
    {"conv_winograd_sizes_f32", ortx_conv_winograd_sizes_f32, ortx_conv_winograd_sizes_f32},
    {"conv_winograd_pack_f32", ortx_conv_winograd_pack_f32, ortx_conv_winograd_pack_f32},
    /* conv_nchwc.c, conv_pointwise_nchwc.c, conv_depthwise.c, conv_to_nchwc.c, conv_expand_depthwise.c: the blocked
     * layout (conv.h's NCHWc) */
    {"reorder_to_nchwc_f32", ortx_reorder_to_nchwc_f32, ortx_reorder_to_nchwc_f32},
    {"reorder_from_nchwc_f32", ortx_reorder_from_nchwc_f32, ortx_reorder_from_nchwc_f32},
    {"conv_pointwise_nchwc_f32", ortx_conv_pointwise_nchwc_f32, ortx_conv_pointwise_nchwc_f32_ref},
    {"conv_pointwise_nchwc_bf16", ortx_conv_pointwise_nchwc_bf16, ortx_conv_pointwise_nchwc_bf16_ref},
    {"conv2d_depthwise_nchwc_f32", ortx_conv2d_depthwise_nchwc_f32, ortx_conv2d_depthwise_nchwc_f32_ref},
    {"conv_expand_depthwise_nchwc_f32", ortx_conv_expand_depthwise_nchwc_f32,
     ortx_conv_expand_depthwise_nchwc_f32_ref},
    {"conv_expand_depthwise_nchwc_bf16", ortx_conv_expand_depthwise_nchwc_bf16,
     ortx_conv_expand_depthwise_nchwc_bf16_ref},
    {"conv_pointwise_pair_rows_bf16", ortx_conv_pointwise_pair_rows_bf16,
     ortx_conv_pointwise_pair_rows_bf16_ref},
    {"conv_pointwise_bf16x3", ortx_conv_pointwise_bf16x3, ortx_conv_pointwise_bf16x3_ref},
    {"conv_depthwise_bf16x3", ortx_conv_depthwise_bf16x3, ortx_conv_depthwise_bf16x3_ref},
    {"conv2d_depthwise_pair_rows", ortx_conv2d_depthwise_pair_rows, ortx_conv2d_depthwise_pair_rows_ref},
    {"conv2d_to_nchwc_f32", ortx_conv2d_to_nchwc_f32, ortx_conv2d_to_nchwc_f32_ref},
    {"global_avgpool_nchwc_f32", ortx_global_avgpool_nchwc_f32, ortx_global_avgpool_nchwc_f32_ref},
    {"conv2d_nchwc_f32", ortx_conv2d_nchwc_f32, ortx_conv2d_nchwc_f32_ref},  /* conv_nchwc_direct.c */
    {"conv2d_nchwc_bf16", ortx_conv2d_nchwc_bf16, ortx_conv2d_nchwc_bf16_ref},  /* conv_nchwc_bf16.c */
    {"conv_nchwc_bf16_sizes", ortx_conv_nchwc_bf16_sizes, ortx_conv_nchwc_bf16_sizes},
    {"conv2d_winograd_nchwc_f32", ortx_conv2d_winograd_nchwc_f32, ortx_conv2d_winograd_nchwc_f32_ref},
    {"conv_winograd_nchwc_sizes_f32", ortx_conv_winograd_nchwc_sizes_f32, ortx_conv_winograd_nchwc_sizes_f32},
    {NULL, NULL, NULL},
};
