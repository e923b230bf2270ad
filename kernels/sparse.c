/* Family "sparse": blocked-CSR weights (sparse.h) times dense activations, fp32 (issue #9).
 *
 * sparse_conv2d_f32: a group-1 conv whose weights (Cout x Cin*KH*KW) are blocked CSR.
 *   ints: the 20 conv ints of conv.h (workspace_threads unused), [20] block rows R (1 or 4).
 *   floats: activation param0, param1. buffers: X, values, cols, row_ptr, Y, workspace, bias, residual.
 *   Per image, the patch matrix B (Cin*KH*KW x OH*OW) is read
 *   Case 1x1 (stride 1, unpadded): as X is stored;
 *   every other conv: the input is first split into zero-padded phase planes (see conv_job), in which every patch
 *   row is, per output row, one contiguous run, whatever the stride, dilation and padding; then
 *   Case direct (planes smaller than a K x 64 tile: small maps, many channels): read in place (see conv_direct);
 *   Case tiled patches: B built per 64-pixel tile by contiguous copies in the thread's workspace slice (aligned
 *   rows, in L2) when every thread gets two tiles or more;
 *   Case whole patches: else for the whole image (rows rounded to 16 floats), in parallel over its rows.
 *   Tasks = pixel tiles of ORTX_SPARSE_TILE columns x chunks of block rows (enough chunks for ORTX_TASKS_PER_THREAD
 *   tasks per thread), each running the ISA's row kernel with the epilogue (bias, residual laid out as Y,
 *   activation) on its tile.
 * sparse_gemm_f32: Y[M, N] = act(A[M, K] @ W[K, N] + bias[N]) with W^T (N x K) blocked CSR.
 *   ints: M, N, K, lda, R, has_bias, activation, threads (unused). floats: param0, param1.
 *   buffers: A, values, cols, row_ptr, Y, workspace, bias.
 *   Steps: 1. A^T (K x M, row stride round_up(M, 16)) into the workspace; 2. tasks = token tiles x block-row
 *   chunks; each block row is computed into a stack tile [R][ORTX_SPARSE_TILE] and stored transposed into Y.
 * sparse_sizes_f32: ints [0, the 20 conv ints] or [1, M, N, K]; writes the workspace bytes to out[0].
 * Limits: fp32 only; groups > 1 are not covered (the lowering keeps them dense); R is 1 or 4.
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

void ortx_sparse_rows_portable(const ortx_sparse_matrix *w, int64_t block_begin, int64_t block_end, const float *b,
                               int64_t ldb, int64_t ncols, float *c, int64_t ldc, const ortx_sparse_epilogue *e) {
    const int64_t R = w->block_rows;
    float acc[4][ORTX_SPARSE_TILE];
    for (int64_t block_row = block_begin; block_row < block_end; block_row++) {
        for (int64_t r = 0; r < R; r++)
            for (int64_t t = 0; t < ncols; t++) acc[r][t] = 0.0f;
        for (int32_t block = w->row_ptr[block_row]; block < w->row_ptr[block_row + 1]; block++) {
            const float *x = b + (w->offsets ? (int64_t)w->offsets[w->cols[block]] : (int64_t)w->cols[block] * ldb);
            for (int64_t r = 0; r < R; r++) {
                float value = w->values[(int64_t)block * R + r];
                for (int64_t t = 0; t < ncols; t++) acc[r][t] += value * x[t];
            }
        }
        for (int64_t r = 0; r < R; r++) {
            int64_t row = block_row * R + r, local = row - block_begin * R;
            if (row >= w->rows) break;
            float bias = e->bias ? e->bias[row] : 0.0f;
            const float *residual = e->residual ? e->residual + local * e->ldr : NULL;
            float *out = c + local * ldc;
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

/* Conv ------------------------------------------------------------------------------------------------------- */

/* Phase planes: the zero-padded input P (P[y][x] = X[y - pad_top][x - pad_left], 0 outside) of each channel split
 * into stride_height x stride_width phases, phase (py, px) row a, column j holding P[a*sh + py][j*sw + px]. Tap
 * (ky, kx) of output pixel (oy, ox) reads P[oy*sh + ky*dh][ox*sw + kx*dw], i.e. phase ((ky*dh) % sh, (kx*dw) % sw)
 * at row oy + (ky*dh) / sh, column ox + (kx*dw) / sw: so every patch row is, per output row, one contiguous run of
 * one phase plane, whatever the stride, dilation and padding (stride 1: one phase, the padded plane itself). */
typedef struct conv_job {
    const ortx_conv_params *p;
    const float *input;  /* one image */
    float *patches;      /* the whole patch matrix, or per-thread tiles of K x ORTX_SPARSE_TILE */
    const float *b;      /* the patch matrix (patches, or the input itself) */
    int64_t ldb;         /* its row stride */
    ortx_sparse_matrix w;
    float *output;       /* one image */
    const float *residual;
    ortx_sparse_epilogue epilogue;
    int64_t pixels, tiles, chunks;
    ortx_sparse_rows_fn rows;
    ortx_sparse_patch_fn patch;
    int64_t phase_rows, phase_width, phase_plane;
    float *planes;
    const int32_t *taps;  /* per patch row k = (c, ky, kx): where its phase plane's (oy, ox) = (0, 0) sits */
    /* Case direct: virtual pixels v = oy * phase_width + ox, per-thread result tiles (see conv_direct) */
    int64_t virtual_pixels, temp_rows;
    float *temps;
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
                float *dst = job->planes + ((channel * sh + py) * sw + px) * job->phase_plane;
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

static void im2col_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const conv_job *job = context;
    patch_block(job, begin, end, 0, job->pixels, job->patches + begin * job->ldb, job->ldb);
}

static void conv_task(void *context, int64_t task, int thread_index) {
    (void)thread_index;
    const conv_job *job = context;
    int64_t tile = task % job->tiles, begin, end;
    chunk_range(ortx_round_up(job->w.rows, job->w.block_rows) / job->w.block_rows, job->chunks, task / job->tiles,
                &begin, &end);
    if (begin == end) return;
    int64_t p0 = tile * ORTX_SPARSE_TILE, first_row = begin * job->w.block_rows;
    int64_t ncols = job->pixels - p0 < ORTX_SPARSE_TILE ? job->pixels - p0 : ORTX_SPARSE_TILE;
    ortx_sparse_epilogue epilogue = job->epilogue;
    epilogue.residual = job->residual ? job->residual + first_row * job->pixels + p0 : NULL;
    job->rows(&job->w, begin, end, job->b + p0, job->ldb, ncols, job->output + first_row * job->pixels + p0,
              job->pixels, &epilogue);
}

/* Case tiled patches: each task builds its own tile's patch columns (K x ORTX_SPARSE_TILE, 64-byte aligned rows, in
 * L2) in its thread's slice of the workspace, then runs every row over it, storing straight into Y. */
static void conv_tile_task(void *context, int64_t tile, int thread_index) {
    const conv_job *job = context;
    int64_t p0 = tile * ORTX_SPARSE_TILE;
    int64_t ncols = job->pixels - p0 < ORTX_SPARSE_TILE ? job->pixels - p0 : ORTX_SPARSE_TILE;
    float *patches = job->patches + (int64_t)thread_index * job->w.depth * ORTX_SPARSE_TILE;
    patch_block(job, 0, job->w.depth, p0, ncols, patches, ORTX_SPARSE_TILE);
    ortx_sparse_epilogue epilogue = job->epilogue;
    epilogue.residual = job->residual ? job->residual + p0 : NULL;
    int64_t block_rows = ortx_round_up(job->w.rows, job->w.block_rows) / job->w.block_rows;
    job->rows(&job->w, 0, block_rows, patches, ORTX_SPARSE_TILE, ncols, job->output + p0, job->pixels, &epilogue);
}

/* Case direct: the row kernel reads the phase planes in place (w.offsets = taps): virtual pixel v is column v of
 * every patch row, so a tile of 64 consecutive virtual pixels needs no copy; results go to a per-thread tile and the
 * valid columns (ox < out_width; the waste is (phase_width - out_width) / phase_width) are stored with the epilogue.
 * Chosen when the phase planes are smaller than one tile of copied patch rows: small images with many channels
 * (7x7 or 14x14 at 256-512 channels), whose K x 64 patch tile would not stay in L2 but whose planes do. */
static int conv_direct(const ortx_conv_params *p, const conv_job *job) {
    return p->in_channels * p->stride_height * p->stride_width * job->phase_plane < job->w.depth * ORTX_SPARSE_TILE;
}

static void direct_task(void *context, int64_t task, int thread_index) {
    const conv_job *job = context;
    const ortx_conv_params *p = job->p;
    const int64_t R = job->w.block_rows, width = job->phase_width;
    int64_t tile = task % job->tiles, begin, end;
    chunk_range(ortx_round_up(job->w.rows, R) / R, job->chunks, task / job->tiles, &begin, &end);
    if (begin == end) return;
    int64_t v0 = tile * ORTX_SPARSE_TILE;
    int64_t ncols = job->virtual_pixels - v0 < ORTX_SPARSE_TILE ? job->virtual_pixels - v0 : ORTX_SPARSE_TILE;
    float *temp = job->temps + (int64_t)thread_index * job->temp_rows * ORTX_SPARSE_TILE;
    ortx_sparse_epilogue none = {NULL, NULL, 0, ORTX_ACT_NONE, 0.0f, 0.0f};
    job->rows(&job->w, begin, end, job->planes + v0, 1, ncols, temp, ORTX_SPARSE_TILE, &none);
    int64_t row_end = end * R < job->w.rows ? end * R : job->w.rows;
    for (int64_t v = v0; v < v0 + ncols;) {  /* runs of valid output columns */
        int64_t oy = v / width, ox = v % width;
        int64_t run_end = (oy + 1) * width < v0 + ncols ? (oy + 1) * width : v0 + ncols;
        int64_t count = ox < p->out_width ? (p->out_width - ox < run_end - v ? p->out_width - ox : run_end - v) : 0;
        for (int64_t row = begin * R; row < row_end && count > 0; row++) {
            const float *src = temp + (row - begin * R) * ORTX_SPARSE_TILE + (v - v0);
            int64_t index = row * job->pixels + oy * p->out_width + ox;
            float *out = job->output + index;
            const float *residual = job->residual ? job->residual + index : NULL;
            float bias = job->epilogue.bias ? job->epilogue.bias[row] : 0.0f;
            for (int64_t j = 0; j < count; j++) out[j] = src[j] + bias + (residual ? residual[j] : 0.0f);
            if (job->epilogue.activation == ORTX_ACT_RELU) {
                for (int64_t j = 0; j < count; j++) out[j] = out[j] > 0.0f ? out[j] : 0.0f;
            } else if (job->epilogue.activation != ORTX_ACT_NONE) {
                for (int64_t j = 0; j < count; j++)
                    out[j] = ortx_activation_scalar(job->epilogue.activation, out[j], job->epilogue.param0,
                                                    job->epilogue.param1);
            }
        }
        v = run_end;
    }
}

static int conv_pointwise(const ortx_conv_params *p) {
    return p->kernel_height == 1 && p->kernel_width == 1 && p->stride_height == 1 && p->stride_width == 1 &&
           p->pad_top == 0 && p->pad_left == 0 && p->out_height == p->in_height && p->out_width == p->in_width;
}

/* Case tiled patches (conv_tile_task) when every thread gets at least two tiles, else Case whole patches. */
static int conv_tiled(const ortx_conv_params *p, int threads) {
    int64_t tiles = (p->out_height * p->out_width + ORTX_SPARSE_TILE - 1) / ORTX_SPARSE_TILE;
    return tiles >= 2 * (int64_t)threads;
}

static int conv_threads(const ortx_conv_params *p, int num_threads) {
    int threads = num_threads < 1 ? 1 : num_threads;
    int limit = p->workspace_threads < 1 ? 1 : (int)p->workspace_threads;
    return threads < limit ? threads : limit;
}

/* Workspace floats: [phase planes][tap offsets (int64)][patches]; each part starts on 16 floats (64 bytes) from
 * the workspace's first 64-byte boundary (ORTX_SPARSE_ALIGN_SLACK floats of slack to reach it). */
#define ORTX_SPARSE_ALIGN_SLACK 16

static int64_t planes_floats(const ortx_conv_params *p, const conv_job *job) {
    /* + a tile: a direct tile's last virtual pixels read up to phase_width - out_width floats past the planes */
    return ortx_round_up(p->in_channels * p->stride_height * p->stride_width * job->phase_plane + ORTX_SPARSE_TILE,
                         16);
}

static int64_t taps_floats(const conv_job *job) { return ortx_round_up(job->w.depth, 16); }

static int64_t conv_workspace_bytes(const ortx_conv_params *p) {
    if (conv_pointwise(p)) return 0;
    conv_job job = {0};
    job.w.depth = p->in_channels * p->kernel_height * p->kernel_width;
    phase_geometry(p, &job);
    int64_t whole = job.w.depth * ortx_round_up(p->out_height * p->out_width, 16);
    int64_t tiles = 0;
    for (int64_t threads = 1; threads <= (p->workspace_threads < 1 ? 1 : p->workspace_threads); threads++)
        if (conv_tiled(p, (int)threads)) tiles = threads * job.w.depth * ORTX_SPARSE_TILE;
    int64_t temps = (p->workspace_threads < 1 ? 1 : p->workspace_threads) * ortx_round_up(p->out_channels, 4) *
                    ORTX_SPARSE_TILE;  /* Case direct: every row of the layer at most (4x1 blocks: padded to 4) */
    int64_t rest = conv_direct(p, &job) ? temps : whole > tiles ? whole : tiles;
    return (int64_t)sizeof(float) * (ORTX_SPARSE_ALIGN_SLACK + planes_floats(p, &job) + taps_floats(&job) + rest);
}

static void sparse_conv2d_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    int threads = conv_threads(&p, num_threads);
    conv_job job = {.p = &p, .rows = select_rows(), .patch = select_patch()};
    job.w = (ortx_sparse_matrix){p.out_channels, p.in_channels * p.kernel_height * p.kernel_width,
                                 ints[ORTX_SPARSE_CONV_BLOCK], buffers[1], buffers[2], buffers[3], NULL};
    job.epilogue = (ortx_sparse_epilogue){p.has_bias ? buffers[6] : NULL, NULL, 0, (int)p.activation, p.param0,
                                          p.param1};
    job.pixels = p.out_height * p.out_width;
    job.epilogue.ldr = job.pixels;
    job.tiles = (job.pixels + ORTX_SPARSE_TILE - 1) / ORTX_SPARSE_TILE;
    job.chunks = chunk_count(job.tiles, ortx_round_up(p.out_channels, job.w.block_rows) / job.w.block_rows, threads);
    int pointwise = conv_pointwise(&p), tiled = conv_tiled(&p, threads);
    if (!pointwise) {
        float *workspace = (float *)(((uintptr_t)buffers[5] + 63) & ~(uintptr_t)63);
        phase_geometry(&p, &job);
        job.planes = workspace;
        job.taps = (const int32_t *)(workspace + planes_floats(&p, &job));
        job.patches = job.temps = workspace + planes_floats(&p, &job) + taps_floats(&job);
        tap_offsets(&p, &job, (int32_t *)(workspace + planes_floats(&p, &job)));
    }
    int direct = !pointwise && conv_direct(&p, &job);
    if (direct) {
        job.w.offsets = job.taps;
        job.temp_rows = ortx_round_up(p.out_channels, 4);
        job.virtual_pixels = p.out_height * job.phase_width;
        job.tiles = (job.virtual_pixels + ORTX_SPARSE_TILE - 1) / ORTX_SPARSE_TILE;
        job.chunks = chunk_count(job.tiles, ortx_round_up(p.out_channels, job.w.block_rows) / job.w.block_rows,
                                 threads);
    }
    for (int64_t image = 0; image < p.batch; image++) {
        job.input = (const float *)buffers[0] + image * p.in_channels * p.in_height * p.in_width;
        job.output = (float *)buffers[4] + image * p.out_channels * job.pixels;
        job.residual = p.has_residual ? (const float *)buffers[7] + image * p.out_channels * job.pixels : NULL;
        if (pointwise) {
            job.b = job.input, job.ldb = job.pixels;
            ortx_parallel_for(threads, job.tiles * job.chunks, conv_task, &job);
            continue;
        }
        ortx_parallel_range(threads, p.in_channels, (int64_t)ORTX_TASKS_PER_THREAD * threads, phase_fill, &job);
        if (direct) {
            ortx_parallel_for(threads, job.tiles * job.chunks, direct_task, &job);
        } else if (tiled) {
            ortx_parallel_for(threads, job.tiles, conv_tile_task, &job);
        } else {
            job.b = job.patches, job.ldb = ortx_round_up(job.pixels, 16);
            ortx_parallel_range(threads, job.w.depth, (int64_t)ORTX_TASKS_PER_THREAD * threads, im2col_rows, &job);
            ortx_parallel_for(threads, job.tiles * job.chunks, conv_task, &job);
        }
    }
}

/* GEMM ------------------------------------------------------------------------------------------------------- */

typedef struct gemm_job {
    const float *a;
    int64_t M, N, K, lda, ldt;
    float *transposed;
    ortx_sparse_matrix w;
    float *y;
    ortx_sparse_epilogue epilogue;
    int64_t tiles, chunks;
    ortx_sparse_rows_fn rows;
    ortx_sparse_transpose_fn transpose;
} gemm_job;

#define GEMM_STORE_ROWS 16

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

static void gemm_task(void *context, int64_t task, int thread_index) {
    (void)thread_index;
    const gemm_job *job = context;
    const int64_t R = job->w.block_rows;
    int64_t tile = task % job->tiles, begin, end;
    chunk_range(ortx_round_up(job->w.rows, R) / R, job->chunks, task / job->tiles, &begin, &end);
    int64_t i0 = tile * ORTX_SPARSE_TILE;
    int64_t ncols = job->M - i0 < ORTX_SPARSE_TILE ? job->M - i0 : ORTX_SPARSE_TILE;
    /* GEMM_STORE_ROWS output features at a time, so each token's store is one contiguous 64-byte run (a store per
     * feature would hit one cache set ORTX_SPARSE_TILE times when N is a multiple of 1024). */
    float block[GEMM_STORE_ROWS * ORTX_SPARSE_TILE];
    for (int64_t group = begin; group < end; group += GEMM_STORE_ROWS / R) {
        int64_t group_end = group + GEMM_STORE_ROWS / R < end ? group + GEMM_STORE_ROWS / R : end;
        job->rows(&job->w, group, group_end, job->transposed + i0, job->ldt, ncols, block, ORTX_SPARSE_TILE,
                  &job->epilogue);
        int64_t n0 = group * R, valid = (job->N < group_end * R ? job->N : group_end * R) - n0;
        job->transpose(block, ORTX_SPARSE_TILE, valid, ncols, job->y + i0 * job->N + n0, job->N);
    }
}

static int64_t gemm_workspace_bytes(int64_t M, int64_t K) {
    return (int64_t)sizeof(float) * K * gemm_transposed_stride(M);
}

static void sparse_gemm_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    int threads = num_threads < 1 ? 1 : num_threads;
    gemm_job job = {.a = buffers[0], .M = ints[0], .N = ints[1], .K = ints[2], .lda = ints[3],
                    .transposed = buffers[5], .y = buffers[4], .rows = select_rows(),
                    .transpose = select_transpose()};
    job.ldt = gemm_transposed_stride(job.M);
    job.w = (ortx_sparse_matrix){job.N, job.K, ints[4], buffers[1], buffers[2], buffers[3], NULL};
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
    } else {
        out[0] = gemm_workspace_bytes(ints[1], ints[3]);
    }
}

const ortx_kernel_entry ortx_family_sparse[] = {
    {"sparse_conv2d_f32", sparse_conv2d_f32, ortx_sparse_conv2d_f32_ref},
    {"sparse_gemm_f32", sparse_gemm_f32, ortx_sparse_gemm_f32_ref},
    {"sparse_sizes_f32", sparse_sizes_f32, sparse_sizes_f32},
    {NULL, NULL, NULL},
};
