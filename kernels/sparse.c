/* Family "sparse": blocked-CSR weights in column panels (sparse.h) times dense activations, fp32 (issue #9).
 *
 * sparse_conv2d_f32: a group-1 conv whose weights (Cout x Cin*KH*KW) are blocked CSR.
 *   ints: the 20 conv ints of conv.h ([19] workspace threads), [20] block rows R (1 or 4), [21] panels.
 *   floats: activation param0, param1. buffers: X, values, cols, row_ptr, Y, workspace, bias, residual.
 *   Tasks = pixel tiles of ORTX_SPARSE_TILE columns x chunks of block rows (enough chunks for ORTX_TASKS_PER_THREAD
 *   tasks per thread); per task and panel, the row kernel runs every row of the chunk over the panel's rows of the
 *   patch matrix B (Cin*KH*KW x OH*OW), storing into Y (partial sums, then the epilogue: bias, residual laid out as
 *   Y, activation). B's rows are
 *   Case in place (1x1, stride 1, unpadded, OH*OW a multiple of 16): X as stored, every row 64-byte aligned;
 *   Case built (every other conv): copied per tile and panel into the thread's aligned slice of the workspace, from
 *   the input split into zero-padded phase planes (see conv_job), in which every patch row is, per output row, one
 *   contiguous run, whatever the stride, dilation and padding (1x1 stride 1: X itself); Case built shared (see
 *   conv_shared): when row chunks split tiles, every tile's patch rows are built once, in parallel, beforehand.
 * sparse_gemm_f32: Y[M, N] = act(A[M, K] @ W[K, N] + bias[N]) with W^T (N x K) blocked CSR.
 *   ints: M, N, K, lda, R, has_bias, activation, threads, panels. floats: param0, param1.
 *   buffers: A, values, cols, row_ptr, Y, workspace, bias.
 *   Steps: 1. A^T (K x M, row stride gemm_transposed_stride(M)) into the workspace; 2. tasks = token tiles x
 *   block-row chunks; each chunk runs every panel into the thread's tile [rows][ORTX_SPARSE_TILE], which is then
 *   stored transposed into Y.
 * sparse_sizes_f32: ints [0, the 20 conv ints] or [1, M, N, K, threads]; writes the workspace bytes to out[0] and
 *   the panel count to out[1] (the lowering packs W in that many panels of ceil(K / panels) columns; the conv's
 *   workspace holds panels of that width, so a conv must not be given fewer panels).
 * Limits: fp32 only; groups > 1 are not covered (the lowering keeps them dense); R is 1 or 4. A 64-pixel tile
 * that is not full still runs whole vectors: a 7x7 map's 49 pixels cost 4 FMAs per nonzero, as 64 would.
 */
#include <string.h>

#include "activation.h"
#include "conv.h"
#include "gemm.h"
#include "ortx_kernels.h"
#include "sparse.h"
#include "threadpool.h"

static ortx_sparse_rows_fn select_rows(void) {
    switch (ortx_selected_isa()) {
        case ORTX_ISA_AVX512: return ortx_sparse_rows_avx512;
        case ORTX_ISA_AVX2: return ortx_sparse_rows_avx2;
        default: return ortx_sparse_rows_portable;
    }
}

void ortx_sparse_rows_portable(const ortx_sparse_matrix *w, int64_t panel, int64_t block_begin, int64_t block_end,
                               const float *b, int64_t ldb, int64_t ncols, float *c, int64_t ldc,
                               const ortx_sparse_epilogue *e) {
    const int64_t R = w->block_rows;
    const int32_t *row_ptr = w->row_ptr + panel * ((w->rows + R - 1) / R);
    float acc[4][ORTX_SPARSE_TILE];
    for (int64_t block_row = block_begin; block_row < block_end; block_row++) {
        for (int64_t r = 0; r < R; r++) {
            int64_t row = block_row * R + r;
            for (int64_t t = 0; t < ncols; t++)
                acc[r][t] = panel > 0 && row < w->rows ? c[(row - block_begin * R) * ldc + t] : 0.0f;
        }
        for (int32_t block = row_ptr[block_row]; block < row_ptr[block_row + 1]; block++) {
            const float *x = b + (int64_t)w->cols[block] * ldb;
            for (int64_t r = 0; r < R; r++) {
                float value = w->values[(int64_t)block * R + r];
                for (int64_t t = 0; t < ncols; t++) acc[r][t] += value * x[t];
            }
        }
        for (int64_t r = 0; r < R; r++) {
            int64_t row = block_row * R + r, local = row - block_begin * R;
            if (row >= w->rows) break;
            float *out = c + local * ldc;
            if (panel + 1 < w->panels) {  /* partial sums */
                memcpy(out, acc[r], sizeof(float) * ncols);
                continue;
            }
            float bias = e->bias ? e->bias[row] : 0.0f;
            const float *residual = e->residual ? e->residual + local * e->ldr : NULL;
            for (int64_t t = 0; t < ncols; t++) {
                float v = acc[r][t] + bias + (residual ? residual[t] : 0.0f);
                out[t] = ortx_activation_scalar(e->activation, v, e->param0, e->param1);
            }
        }
    }
}

static ortx_sparse_patch_fn select_patch(void) {
    return ortx_selected_isa() == ORTX_ISA_AVX512 ? ortx_sparse_patch_avx512 : ortx_sparse_patch_portable;
}

void ortx_sparse_patch_portable(const float *source, const int32_t *taps, int64_t rows, const ortx_sparse_runs *runs,
                                float *dst, int64_t ldd) {
    for (int64_t k = 0; k < rows; k++) {
        const float *row_source = source + taps[k];
        float *row = dst + k * ldd;
        for (int64_t run = 0; run < runs->count; run++)
            memcpy(row + runs->target[run], row_source + runs->source[run], sizeof(float) * runs->length[run]);
    }
}

static ortx_sparse_transpose_fn select_transpose(void) {
    return ortx_selected_isa() == ORTX_ISA_AVX512 ? ortx_sparse_transpose_avx512 : ortx_sparse_transpose_portable;
}

void ortx_sparse_transpose_portable(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst,
                                    int64_t ldd) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * ldd + r] = src[r * lds + c];
}

/* Block rows [begin, end) of chunk `chunk` out of `chunks` over `block_rows`: the split depends on the sizes only. */
static void chunk_range(int64_t block_rows, int64_t chunks, int64_t chunk, int64_t *begin, int64_t *end) {
    *begin = block_rows * chunk / chunks;
    *end = block_rows * (chunk + 1) / chunks;
}

static int64_t chunk_count(int64_t tiles, int64_t block_rows, int threads) {
    int64_t wanted = ((int64_t)ORTX_TASKS_PER_THREAD * threads + tiles - 1) / tiles;
    if (threads <= 1) wanted = 1;
    return wanted < block_rows ? (wanted < 1 ? 1 : wanted) : block_rows;
}

/* Panels of a depth: enough for ORTX_SPARSE_PANEL_BYTES of 64-float rows each (sparse_sizes_f32 reports it). */
static int64_t panel_count(int64_t depth) {
    int64_t most = ORTX_SPARSE_PANEL_BYTES / (int64_t)(sizeof(float) * ORTX_SPARSE_TILE);
    return depth <= most ? 1 : (depth + most - 1) / most;
}

/* Columns per panel, as packed: ceil(depth / panels) (the last panel may be narrower). */
static int64_t panel_width(int64_t depth, int64_t panels) {
    int64_t width = (depth + panels - 1) / (panels < 1 ? 1 : panels);
    return width < 1 ? 1 : width;
}

/* Conv ------------------------------------------------------------------------------------------------------- */

/* Phase planes: the zero-padded input P (P[y][x] = X[y - pad_top][x - pad_left], 0 outside) of each channel split
 * into stride_height x stride_width phases, phase (py, px) row a, column j holding P[a*sh + py][j*sw + px]. Tap
 * (ky, kx) of output pixel (oy, ox) reads P[oy*sh + ky*dh][ox*sw + kx*dw], i.e. phase ((ky*dh) % sh, (kx*dw) % sw)
 * at row oy + (ky*dh) / sh, column ox + (kx*dw) / sw: so every patch row is, per output row, one contiguous run of
 * one phase plane, whatever the stride, dilation and padding (stride 1: one phase, the padded plane itself). A 1x1
 * stride-1 unpadded conv reads X itself as its one plane per channel. */
typedef struct conv_job {
    const ortx_conv_params *p;
    const float *input;  /* one image */
    ortx_sparse_matrix w;
    float *output;       /* one image */
    const float *residual;
    ortx_sparse_epilogue epilogue;
    int64_t pixels, tiles, chunks, panel_width;
    ortx_sparse_rows_fn rows;
    ortx_sparse_patch_fn patch;
    int64_t phase_rows, phase_width, phase_plane;
    const float *planes;  /* the phase planes (Case built) or X (1x1) */
    float *plane_buffer;  /* the workspace's planes (NULL for 1x1) */
    const int32_t *taps;  /* per patch row k = (c, ky, kx): where its phase plane's (oy, ox) = (0, 0) sits */
    float *panels;        /* Case built per task: per thread, panel_width x ORTX_SPARSE_TILE floats; Case built
                           * shared: every tile's K x ORTX_SPARSE_TILE block, tile after tile */
    int in_place, shared;
} conv_job;

static void phase_geometry(const ortx_conv_params *p, conv_job *job) {
    job->phase_rows = p->out_height + (p->kernel_height - 1) * p->dilation_height / p->stride_height;
    job->phase_width = p->out_width + (p->kernel_width - 1) * p->dilation_width / p->stride_width;
    job->phase_plane = job->phase_rows * job->phase_width;
}

static int64_t ceil_div_clamped(int64_t numerator, int64_t divisor, int64_t limit) {
    int64_t value = numerator <= 0 ? 0 : (numerator + divisor - 1) / divisor;
    return value < limit ? value : limit;
}

/* Does some tap land in phase `phase` of a dimension (kernel size, dilation, stride)? Unused phases stay unfilled. */
static int phase_used(int64_t phase, int64_t kernel, int64_t dilation, int64_t stride) {
    for (int64_t tap = 0; tap < kernel; tap++)
        if (tap * dilation % stride == phase) return 1;
    return 0;
}

static void phase_fill(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const conv_job *job = context;
    const ortx_conv_params *p = job->p;
    const int64_t sh = p->stride_height, sw = p->stride_width, width = job->phase_width;
    for (int64_t channel = begin; channel < end; channel++) {
        const float *plane = job->input + channel * p->in_height * p->in_width;
        for (int64_t py = 0; py < sh; py++) {
            if (!phase_used(py, p->kernel_height, p->dilation_height, sh)) continue;
            for (int64_t px = 0; px < sw; px++) {
                if (!phase_used(px, p->kernel_width, p->dilation_width, sw)) continue;
                float *dst = job->plane_buffer + ((channel * sh + py) * sw + px) * job->phase_plane;
                /* columns [lo, hi) read input columns j*sw + px - pad_left inside [0, in_width) */
                int64_t lo = ceil_div_clamped(p->pad_left - px, sw, width);
                int64_t hi = ceil_div_clamped(p->in_width + p->pad_left - px, sw, width);
                if (hi < lo) hi = lo;
                for (int64_t a = 0; a < job->phase_rows; a++, dst += width) {
                    int64_t iy = a * sh + py - p->pad_top;
                    if (iy < 0 || iy >= p->in_height || hi == lo) {
                        memset(dst, 0, sizeof(float) * width);
                        continue;
                    }
                    const float *row = plane + iy * p->in_width + px - p->pad_left;
                    memset(dst, 0, sizeof(float) * lo);
                    if (sw == 1) memcpy(dst + lo, row + lo, sizeof(float) * (hi - lo));
                    else
                        for (int64_t j = lo; j < hi; j++) dst[j] = row[j * sw];
                    memset(dst + hi, 0, sizeof(float) * (width - hi));
                }
            }
        }
    }
}

static void tap_offsets(const ortx_conv_params *p, const conv_job *job, int32_t *taps) {
    const int64_t sh = p->stride_height, sw = p->stride_width, kh = p->kernel_height, kw = p->kernel_width;
    for (int64_t k = 0; k < job->w.depth; k++) {
        int64_t channel = k / (kh * kw), dy = k % (kh * kw) / kw * p->dilation_height, dx = k % kw * p->dilation_width;
        taps[k] = (int32_t)(((channel * sh + dy % sh) * sw + dx % sw) * job->phase_plane + dy / sh * job->phase_width +
                            dx / sw);
    }
}

/* Patch-matrix rows [k_begin, k_end), columns (pixels) [p0, p0 + count), into dst with row stride ldd: per row, one
 * copy per output row the pixel range crosses (runs computed once). */
static void patch_block(const conv_job *job, int64_t k_begin, int64_t k_end, int64_t p0, int64_t count, float *dst,
                        int64_t ldd) {
    const int64_t out_width = job->p->out_width;
    int64_t runs = count / out_width + 2;
    int64_t run_source[runs], run_target[runs], run_length[runs];
    int64_t run_count = 0;
    for (int64_t pixel = p0; pixel < p0 + count; run_count++) {
        int64_t oy = pixel / out_width, ox = pixel % out_width;
        int64_t length = out_width - ox < p0 + count - pixel ? out_width - ox : p0 + count - pixel;
        run_source[run_count] = oy * job->phase_width + ox;
        run_target[run_count] = pixel - p0;
        run_length[run_count] = length;
        pixel += length;
    }
    ortx_sparse_runs view = {run_count, run_source, run_target, run_length};
    job->patch(job->planes, job->taps + k_begin, k_end - k_begin, &view, dst, ldd);
}

/* Case built shared: the patch rows of (tile, panel) pair `item`, into the tile's block of job->panels. */
static void build_shared(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const conv_job *job = context;
    for (int64_t item = begin; item < end; item++) {
        int64_t tile = item / job->w.panels, k0 = item % job->w.panels * job->panel_width;
        int64_t k1 = k0 + job->panel_width < job->w.depth ? k0 + job->panel_width : job->w.depth;
        int64_t p0 = tile * ORTX_SPARSE_TILE;
        int64_t ncols = job->pixels - p0 < ORTX_SPARSE_TILE ? job->pixels - p0 : ORTX_SPARSE_TILE;
        if (k0 < k1)
            patch_block(job, k0, k1, p0, ncols, job->panels + (tile * job->w.depth + k0) * ORTX_SPARSE_TILE,
                        ORTX_SPARSE_TILE);
    }
}

/* One tile x one chunk of block rows: per panel, its B rows (in place, built before for every chunk, or built now in
 * the thread's slice), then the row kernel over every row of the chunk, into Y. */
static void conv_task(void *context, int64_t task, int thread_index) {
    const conv_job *job = context;
    int64_t tile = task % job->tiles, begin, end;
    chunk_range(ortx_round_up(job->w.rows, job->w.block_rows) / job->w.block_rows, job->chunks, task / job->tiles,
                &begin, &end);
    if (begin == end) return;
    int64_t p0 = tile * ORTX_SPARSE_TILE, first_row = begin * job->w.block_rows;
    int64_t ncols = job->pixels - p0 < ORTX_SPARSE_TILE ? job->pixels - p0 : ORTX_SPARSE_TILE;
    ortx_sparse_epilogue epilogue = job->epilogue;
    epilogue.residual = job->residual ? job->residual + first_row * job->pixels + p0 : NULL;
    float *panel_rows = job->panels + (int64_t)thread_index * job->panel_width * ORTX_SPARSE_TILE;
    for (int64_t panel = 0; panel < job->w.panels; panel++) {
        int64_t k0 = panel * job->panel_width;
        int64_t k1 = k0 + job->panel_width < job->w.depth ? k0 + job->panel_width : job->w.depth;
        const float *b = job->input + p0;
        int64_t ldb = job->pixels;
        if (job->shared) {
            b = job->panels + tile * job->w.depth * ORTX_SPARSE_TILE, ldb = ORTX_SPARSE_TILE;
        } else if (!job->in_place) {
            if (k0 < k1) patch_block(job, k0, k1, p0, ncols, panel_rows, ORTX_SPARSE_TILE);
            b = panel_rows - k0 * ORTX_SPARSE_TILE, ldb = ORTX_SPARSE_TILE;
        }
        job->rows(&job->w, panel, begin, end, b, ldb, ncols, job->output + first_row * job->pixels + p0, job->pixels,
                  &epilogue);
    }
}

static int conv_pointwise(const ortx_conv_params *p) {
    return p->kernel_height == 1 && p->kernel_width == 1 && p->stride_height == 1 && p->stride_width == 1 &&
           p->pad_top == 0 && p->pad_left == 0 && p->out_height == p->in_height && p->out_width == p->in_width;
}

/* Case in place: X's rows are B's and 64-byte aligned whenever X is (unaligned rows cost ~1.4x, sparse_avx512.c). */
static int conv_in_place(const ortx_conv_params *p) {
    return conv_pointwise(p) && p->out_height * p->out_width % 16 == 0;
}

static int conv_threads(const ortx_conv_params *p, int num_threads) {
    int threads = num_threads < 1 ? 1 : num_threads;
    int limit = p->workspace_threads < 1 ? 1 : (int)p->workspace_threads;
    return threads < limit ? threads : limit;
}

/* Workspace floats: [phase planes][tap offsets (int32)][per-thread panels]; each part starts on 16 floats (64 bytes)
 * from the workspace's first 64-byte boundary (ORTX_SPARSE_ALIGN_SLACK floats of slack to reach it). */
#define ORTX_SPARSE_ALIGN_SLACK 16

static int64_t planes_floats(const ortx_conv_params *p, const conv_job *job) {
    if (conv_pointwise(p)) return 0;
    return ortx_round_up(p->in_channels * p->stride_height * p->stride_width * job->phase_plane, 16);
}

static int64_t taps_floats(const conv_job *job) { return ortx_round_up(job->w.depth, 16); }

/* Case built shared when row chunks split a tile (few tiles: 7x7 and 14x14 maps at 2 threads): each chunk building
 * its own copy would repeat the tile's K rows of copies per chunk (a 7x7 conv at 8 chunks spent as long copying as
 * multiplying). */
static int conv_shared(const ortx_conv_params *p, int threads) {
    int64_t tiles = (p->out_height * p->out_width + ORTX_SPARSE_TILE - 1) / ORTX_SPARSE_TILE;
    return !conv_in_place(p) && chunk_count(tiles, p->out_channels, threads) > 1;
}

static int64_t conv_workspace_bytes(const ortx_conv_params *p) {
    if (conv_in_place(p)) return 0;
    conv_job job = {0};
    job.w.depth = p->in_channels * p->kernel_height * p->kernel_width;
    phase_geometry(p, &job);
    int64_t tiles = (p->out_height * p->out_width + ORTX_SPARSE_TILE - 1) / ORTX_SPARSE_TILE, panels = 0;
    for (int64_t threads = 1; threads <= (p->workspace_threads < 1 ? 1 : p->workspace_threads); threads++) {
        int64_t floats = conv_shared(p, (int)threads) ? tiles * job.w.depth * ORTX_SPARSE_TILE
                         : threads * panel_width(job.w.depth, panel_count(job.w.depth)) * ORTX_SPARSE_TILE;
        panels = floats > panels ? floats : panels;
    }
    return (int64_t)sizeof(float) * (ORTX_SPARSE_ALIGN_SLACK + planes_floats(p, &job) + taps_floats(&job) + panels);
}

static void sparse_conv2d_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    int threads = conv_threads(&p, num_threads);
    conv_job job = {.p = &p, .rows = select_rows(), .patch = select_patch(), .in_place = conv_in_place(&p),
                    .shared = conv_shared(&p, threads)};
    job.w = (ortx_sparse_matrix){p.out_channels, p.in_channels * p.kernel_height * p.kernel_width,
                                 ints[ORTX_SPARSE_CONV_BLOCK], ints[ORTX_SPARSE_CONV_BLOCK + 1], buffers[1],
                                 buffers[2], buffers[3]};
    job.epilogue = (ortx_sparse_epilogue){p.has_bias ? buffers[6] : NULL, NULL, 0, (int)p.activation, p.param0,
                                          p.param1};
    job.pixels = p.out_height * p.out_width;
    job.epilogue.ldr = job.pixels;
    job.panel_width = panel_width(job.w.depth, job.w.panels);
    job.tiles = (job.pixels + ORTX_SPARSE_TILE - 1) / ORTX_SPARSE_TILE;
    job.chunks = chunk_count(job.tiles, ortx_round_up(p.out_channels, job.w.block_rows) / job.w.block_rows, threads);
    int pointwise = conv_pointwise(&p);
    if (!job.in_place) {
        float *workspace = (float *)(((uintptr_t)buffers[5] + 63) & ~(uintptr_t)63);
        phase_geometry(&p, &job);
        if (pointwise) job.phase_width = p.out_width, job.phase_plane = job.pixels;
        job.plane_buffer = pointwise ? NULL : workspace;
        job.taps = (const int32_t *)(workspace + planes_floats(&p, &job));
        job.panels = workspace + planes_floats(&p, &job) + taps_floats(&job);
        tap_offsets(&p, &job, (int32_t *)(workspace + planes_floats(&p, &job)));
    }
    for (int64_t image = 0; image < p.batch; image++) {
        job.input = (const float *)buffers[0] + image * p.in_channels * p.in_height * p.in_width;
        job.output = (float *)buffers[4] + image * p.out_channels * job.pixels;
        job.residual = p.has_residual ? (const float *)buffers[7] + image * p.out_channels * job.pixels : NULL;
        job.planes = job.plane_buffer ? job.plane_buffer : job.input;
        if (job.plane_buffer)
            ortx_parallel_range(threads, p.in_channels, (int64_t)ORTX_TASKS_PER_THREAD * threads, phase_fill, &job);
        if (job.shared)
            ortx_parallel_range(threads, job.tiles * job.w.panels, (int64_t)ORTX_TASKS_PER_THREAD * threads,
                                build_shared, &job);
        ortx_parallel_for(threads, job.tiles * job.chunks, conv_task, &job);
    }
}

/* GEMM ------------------------------------------------------------------------------------------------------- */

typedef struct gemm_job {
    const float *a;
    int64_t M, N, K, lda, ldt;
    float *transposed, *temps;  /* A^T; per-thread tiles of round_up(N, 4) x ORTX_SPARSE_TILE */
    ortx_sparse_matrix w;
    float *y;
    ortx_sparse_epilogue epilogue;
    int64_t tiles, chunks;
    ortx_sparse_rows_fn rows;
    ortx_sparse_transpose_fn transpose;
} gemm_job;

/* + 16: a row stride that is not a power of two, so TRANSPOSE_K consecutive rows fall in different cache sets. */
static int64_t gemm_transposed_stride(int64_t M) { return ortx_round_up(M, 16) + 16; }

/* A^T rows [TRANSPOSE_K * begin, TRANSPOSE_K * end): each token's run of TRANSPOSE_K features is read contiguously
 * (reading one feature of every token hits one cache set M times when lda is a multiple of 1024). */
#define TRANSPOSE_K 64

static void transpose_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const gemm_job *job = context;
    int64_t k0 = begin * TRANSPOSE_K, k1 = end * TRANSPOSE_K < job->K ? end * TRANSPOSE_K : job->K;
    if (k0 < k1) job->transpose(job->a + k0, job->lda, job->M, k1 - k0, job->transposed + k0 * job->ldt, job->ldt);
}

/* A chunk of output features for a tile of tokens, every panel, into the thread's tile; then stored transposed
 * (16 x 16 blocks: each token's store is one contiguous 64-byte run). */
static void gemm_task(void *context, int64_t task, int thread_index) {
    const gemm_job *job = context;
    const int64_t R = job->w.block_rows;
    int64_t tile = task % job->tiles, begin, end;
    chunk_range(ortx_round_up(job->w.rows, R) / R, job->chunks, task / job->tiles, &begin, &end);
    if (begin == end) return;
    int64_t i0 = tile * ORTX_SPARSE_TILE;
    int64_t ncols = job->M - i0 < ORTX_SPARSE_TILE ? job->M - i0 : ORTX_SPARSE_TILE;
    float *temp = job->temps + (int64_t)thread_index * ortx_round_up(job->N, 4) * ORTX_SPARSE_TILE;
    for (int64_t panel = 0; panel < job->w.panels; panel++)
        job->rows(&job->w, panel, begin, end, job->transposed + i0, job->ldt, ncols, temp, ORTX_SPARSE_TILE,
                  &job->epilogue);
    int64_t n0 = begin * R, valid = (job->N < end * R ? job->N : end * R) - n0;
    job->transpose(temp, ORTX_SPARSE_TILE, valid, ncols, job->y + i0 * job->N + n0, job->N);
}

static int64_t gemm_workspace_bytes(int64_t M, int64_t N, int64_t K, int64_t threads) {
    return (int64_t)sizeof(float) *
           (K * gemm_transposed_stride(M) + (threads < 1 ? 1 : threads) * ortx_round_up(N, 4) * ORTX_SPARSE_TILE);
}

static void sparse_gemm_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    int threads = num_threads < 1 ? 1 : num_threads;
    if (ints[7] >= 1 && threads > ints[7]) threads = (int)ints[7];  /* the workspace holds ints[7] thread tiles */
    gemm_job job = {.a = buffers[0], .M = ints[0], .N = ints[1], .K = ints[2], .lda = ints[3],
                    .transposed = buffers[5], .y = buffers[4], .rows = select_rows(),
                    .transpose = select_transpose()};
    job.ldt = gemm_transposed_stride(job.M);
    job.temps = job.transposed + job.K * job.ldt;
    job.w = (ortx_sparse_matrix){job.N, job.K, ints[4], ints[8], buffers[1], buffers[2], buffers[3]};
    job.epilogue = (ortx_sparse_epilogue){ints[5] ? buffers[6] : NULL, NULL, 0, (int)ints[6], floats[0], floats[1]};
    job.tiles = (job.M + ORTX_SPARSE_TILE - 1) / ORTX_SPARSE_TILE;
    job.chunks = chunk_count(job.tiles, ortx_round_up(job.N, ints[4]) / ints[4], threads);
    ortx_parallel_range(threads, (job.K + TRANSPOSE_K - 1) / TRANSPOSE_K, (int64_t)ORTX_TASKS_PER_THREAD * threads,
                        transpose_rows, &job);
    ortx_parallel_for(threads, job.tiles * job.chunks, gemm_task, &job);
}

static void sparse_sizes_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    int64_t *out = buffers[0];
    if (ints[0] == 0) {
        static const float no_params[2] = {0.0f, 0.0f};
        ortx_conv_params p = ortx_conv_params_read(ints + 1, no_params);
        out[0] = conv_workspace_bytes(&p);
        out[1] = panel_count(p.in_channels * p.kernel_height * p.kernel_width);
    } else {
        out[0] = gemm_workspace_bytes(ints[1], ints[2], ints[3], ints[4]);
        out[1] = panel_count(ints[3]);
    }
}

const ortx_kernel_entry ortx_family_sparse[] = {
    {"sparse_conv2d_f32", sparse_conv2d_f32, ortx_sparse_conv2d_f32_ref},
    {"sparse_gemm_f32", sparse_gemm_f32, ortx_sparse_gemm_f32_ref},
    {"sparse_sizes_f32", sparse_sizes_f32, sparse_sizes_f32},
    {NULL, NULL, NULL},
};
