/* Family "sparse": blocked-CSR weights (sparse.h) times dense activations, fp32 (issue #9).
 *
 * sparse_conv2d_f32: a group-1 conv whose weights (Cout x Cin*KH*KW) are blocked CSR.
 *   ints: the 20 conv ints of conv.h (workspace_threads unused), [20] block rows R (1 or 4).
 *   floats: activation param0, param1. buffers: X, values, cols, row_ptr, Y, workspace, bias, residual.
 *   Per image, the patch matrix B (Cin*KH*KW x OH*OW) is read
 *   Case 1x1 (stride 1, unpadded): as X is stored;
 *   Case direct (other stride-1 convs): in place from zero-padded input planes (see conv_direct);
 *   Case im2col (strided): built per 64-pixel tile in the thread's workspace slice when every thread gets two tiles
 *   or more, else for the whole image, in parallel over its rows.
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

typedef struct conv_job {
    const ortx_conv_params *p;
    const float *input;  /* one image */
    float *patches;
    const float *b;      /* the patch matrix (patches, or the input itself) */
    ortx_sparse_matrix w;
    float *output;       /* one image */
    const float *residual;
    ortx_sparse_epilogue epilogue;
    int64_t pixels, tiles, chunks;
    ortx_sparse_rows_fn rows;
    /* Case direct (stride 1): the zero-padded input planes, the tap offsets and per-thread result tiles */
    int64_t padded_rows, padded_width, padded_plane, virtual_pixels, temp_rows;
    float *padded, *temps;
    int32_t *offsets;
} conv_job;

/* Patch-matrix rows [k_begin, k_end), columns (pixels) [p0, p0 + count), into dst with row stride ldd.
 * The pixel range is cut once into runs along output rows; per kernel column kx, the output columns whose tap lands
 * inside the input row are one range [first[kx], last[kx]), so each run is zeros, a (strided) copy of the input row
 * and zeros again, with no division or branch per element (at 64-pixel tiles the per-run overhead dominated). */
static void patch_block(const ortx_conv_params *p, const float *input, int64_t k_begin, int64_t k_end, int64_t p0,
                        int64_t count, float *dst, int64_t ldd) {
    const int64_t s = p->stride_width, kw = p->kernel_width, taps = p->kernel_height * kw;
    int64_t runs = count / p->out_width + 2;
    int64_t run_row[runs], run_begin[runs], run_end[runs], run_offset[runs], first[kw], last[kw];
    int64_t run_count = 0;
    for (int64_t pixel = p0; pixel < p0 + count; run_count++) {
        int64_t oy = pixel / p->out_width, ox = pixel % p->out_width;
        int64_t end = p->out_width - ox < p0 + count - pixel ? p->out_width : ox + (p0 + count - pixel);
        run_row[run_count] = oy, run_begin[run_count] = ox, run_end[run_count] = end;
        run_offset[run_count] = pixel - p0;
        pixel += end - ox;
    }
    for (int64_t kx = 0; kx < kw; kx++) {  /* valid ox: 0 <= ox*s + offset < in_width */
        int64_t offset = kx * p->dilation_width - p->pad_left;
        first[kx] = offset >= 0 ? 0 : (-offset + s - 1) / s;
        last[kx] = p->in_width - 1 - offset < 0 ? 0 : (p->in_width - 1 - offset) / s + 1;
        if (last[kx] < first[kx]) last[kx] = first[kx];
    }
    int64_t channel = k_begin / taps, ky = k_begin % taps / kw, kx = k_begin % kw;
    for (int64_t k = k_begin; k < k_end; k++) {
        const float *plane = input + channel * p->in_height * p->in_width;
        const int64_t offset = kx * p->dilation_width - p->pad_left;
        float *row_dst = dst + (k - k_begin) * ldd;
        for (int64_t run = 0; run < run_count; run++) {
            int64_t iy = run_row[run] * p->stride_height - p->pad_top + ky * p->dilation_height;
            int64_t ox0 = run_begin[run], ox1 = run_end[run];
            float *out = row_dst + run_offset[run] - ox0;  /* out[ox] for ox in [ox0, ox1) */
            if (iy < 0 || iy >= p->in_height) {
                for (int64_t ox = ox0; ox < ox1; ox++) out[ox] = 0.0f;
                continue;
            }
            const float *row = plane + iy * p->in_width + offset;
            int64_t lo = first[kx] > ox0 ? first[kx] : ox0, hi = last[kx] < ox1 ? last[kx] : ox1;
            if (hi < lo) hi = lo;
            for (int64_t ox = ox0; ox < lo; ox++) out[ox] = 0.0f;
            if (s == 1) {
                for (int64_t ox = lo; ox < hi; ox++) out[ox] = row[ox];
            } else {
                for (int64_t ox = lo; ox < hi; ox++) out[ox] = row[ox * s];
            }
            for (int64_t ox = hi; ox < ox1; ox++) out[ox] = 0.0f;
        }
        if (++kx == kw) {
            kx = 0;
            if (++ky == p->kernel_height) ky = 0, channel++;
        }
    }
}

static void im2col_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const conv_job *job = context;
    patch_block(job->p, job->input, begin, end, 0, job->pixels, job->patches + begin * job->pixels, job->pixels);
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
    job->rows(&job->w, begin, end, job->b + p0, job->pixels, ncols, job->output + first_row * job->pixels + p0,
              job->pixels, &epilogue);
}

/* Case tiled patches: each task builds its own tile's patch columns (K x ORTX_SPARSE_TILE, in L2) in its thread's
 * slice of the workspace, then runs every row over it; used when there are tiles enough for every thread. */
static void conv_tile_task(void *context, int64_t tile, int thread_index) {
    const conv_job *job = context;
    int64_t p0 = tile * ORTX_SPARSE_TILE;
    int64_t ncols = job->pixels - p0 < ORTX_SPARSE_TILE ? job->pixels - p0 : ORTX_SPARSE_TILE;
    float *patches = job->patches + (int64_t)thread_index * job->w.depth * ORTX_SPARSE_TILE;
    patch_block(job->p, job->input, 0, job->w.depth, p0, ncols, patches, ORTX_SPARSE_TILE);
    ortx_sparse_epilogue epilogue = job->epilogue;
    epilogue.residual = job->residual ? job->residual + p0 : NULL;
    int64_t block_rows = ortx_round_up(job->w.rows, job->w.block_rows) / job->w.block_rows;
    job->rows(&job->w, 0, block_rows, patches, ORTX_SPARSE_TILE, ncols, job->output + p0, job->pixels, &epilogue);
}

static int conv_pointwise(const ortx_conv_params *p) {
    return p->kernel_height == 1 && p->kernel_width == 1 && p->stride_height == 1 && p->stride_width == 1 &&
           p->pad_top == 0 && p->pad_left == 0 && p->out_height == p->in_height && p->out_width == p->in_width;
}

/* Case direct: a stride-1 conv reads its patch matrix in place from zero-padded input planes (padded_rows x
 * padded_width per channel). Output pixel (oy, ox) is "virtual pixel" v = oy * padded_width + ox, and patch row
 * k = (c, ky, kx) of virtual pixel v is padded[offsets[k] + v] with offsets[k] = c * plane + ky*dh * padded_width +
 * kx*dw: a tile of 64 consecutive virtual pixels is 64 consecutive floats of every patch row, so no im2col runs.
 * Columns ox >= out_width are computed into the per-thread tile and not stored (waste (kw-1)*dw / padded_width). */
static int conv_direct(const ortx_conv_params *p) {
    return !conv_pointwise(p) && p->stride_height == 1 && p->stride_width == 1;
}

static void direct_geometry(const ortx_conv_params *p, conv_job *job) {
    job->padded_rows = p->out_height + (p->kernel_height - 1) * p->dilation_height;
    job->padded_width = p->out_width + (p->kernel_width - 1) * p->dilation_width;
    job->padded_plane = job->padded_rows * job->padded_width;
    job->virtual_pixels = p->out_height * job->padded_width;
}

/* Floats of the direct case's workspace before the per-thread tiles: planes (+ a tile of slack), offsets. */
static int64_t direct_shared_floats(const ortx_conv_params *p, const conv_job *job) {
    int64_t depth = p->in_channels * p->kernel_height * p->kernel_width;
    return ortx_round_up(p->in_channels * job->padded_plane + ORTX_SPARSE_TILE, 16) + ortx_round_up(depth, 16);
}

static void direct_fill(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const conv_job *job = context;
    const ortx_conv_params *p = job->p;
    for (int64_t channel = begin; channel < end; channel++) {
        const float *plane = job->input + channel * p->in_height * p->in_width;
        float *dst = job->padded + channel * job->padded_plane;
        /* padded columns [lo, hi) hold input columns [lo - pad_left, hi - pad_left); the rest are zeros */
        int64_t lo = p->pad_left < job->padded_width ? p->pad_left : job->padded_width;
        int64_t hi = p->pad_left + p->in_width < job->padded_width ? p->pad_left + p->in_width : job->padded_width;
        for (int64_t r = 0; r < job->padded_rows; r++, dst += job->padded_width) {
            int64_t iy = r - p->pad_top;
            if (iy < 0 || iy >= p->in_height || hi <= lo) {
                memset(dst, 0, sizeof(float) * job->padded_width);
                continue;
            }
            memset(dst, 0, sizeof(float) * lo);
            memcpy(dst + lo, plane + iy * p->in_width, sizeof(float) * (hi - lo));
            memset(dst + hi, 0, sizeof(float) * (job->padded_width - hi));
        }
    }
}

static void direct_task(void *context, int64_t task, int thread_index) {
    const conv_job *job = context;
    const ortx_conv_params *p = job->p;
    const int64_t R = job->w.block_rows;
    int64_t tile = task % job->tiles, begin, end;
    chunk_range(ortx_round_up(job->w.rows, R) / R, job->chunks, task / job->tiles, &begin, &end);
    if (begin == end) return;
    int64_t v0 = tile * ORTX_SPARSE_TILE;
    int64_t ncols = job->virtual_pixels - v0 < ORTX_SPARSE_TILE ? job->virtual_pixels - v0 : ORTX_SPARSE_TILE;
    float *temp = job->temps + (int64_t)thread_index * job->temp_rows * ORTX_SPARSE_TILE;
    ortx_sparse_epilogue none = {NULL, NULL, 0, ORTX_ACT_NONE, 0.0f, 0.0f};
    job->rows(&job->w, begin, end, job->padded + v0, 1, ncols, temp, ORTX_SPARSE_TILE, &none);
    int64_t row_end = end * R < job->w.rows ? end * R : job->w.rows;
    for (int64_t v = v0; v < v0 + ncols;) {  /* runs of valid output columns */
        int64_t oy = v / job->padded_width, ox = v % job->padded_width;
        int64_t run_end = (oy + 1) * job->padded_width < v0 + ncols ? (oy + 1) * job->padded_width : v0 + ncols;
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

/* Tiled patches (conv_tile_task) when every thread gets at least two tiles, else the whole patch matrix. */
static int conv_tiled(const ortx_conv_params *p, int threads) {
    int64_t tiles = (p->out_height * p->out_width + ORTX_SPARSE_TILE - 1) / ORTX_SPARSE_TILE;
    return tiles >= 2 * (int64_t)threads;
}

static int conv_threads(const ortx_conv_params *p, int num_threads) {
    int threads = num_threads < 1 ? 1 : num_threads;
    int limit = p->workspace_threads < 1 ? 1 : (int)p->workspace_threads;
    return threads < limit ? threads : limit;
}

static int64_t conv_workspace_bytes(const ortx_conv_params *p) {
    if (conv_pointwise(p)) return 0;
    if (conv_direct(p)) {
        conv_job job = {0};
        direct_geometry(p, &job);
        int64_t threads = p->workspace_threads < 1 ? 1 : p->workspace_threads;
        /* per-thread tiles: every row of the layer at most (4 rows of padding for 4x1 blocks) */
        return (int64_t)sizeof(float) * (direct_shared_floats(p, &job) +
                                         threads * ortx_round_up(p->out_channels, 4) * ORTX_SPARSE_TILE);
    }
    int64_t depth = p->in_channels * p->kernel_height * p->kernel_width;
    int64_t whole = depth * p->out_height * p->out_width;
    int64_t tiles = 0;
    for (int64_t threads = 1; threads <= (p->workspace_threads < 1 ? 1 : p->workspace_threads); threads++)
        if (conv_tiled(p, (int)threads)) tiles = threads * depth * ORTX_SPARSE_TILE;
    return (int64_t)sizeof(float) * (whole > tiles ? whole : tiles);
}

static void sparse_conv2d_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    int threads = conv_threads(&p, num_threads);
    conv_job job = {.p = &p, .patches = buffers[5], .rows = select_rows()};
    job.w = (ortx_sparse_matrix){p.out_channels, p.in_channels * p.kernel_height * p.kernel_width,
                                 ints[ORTX_SPARSE_CONV_BLOCK], buffers[1], buffers[2], buffers[3], NULL};
    job.epilogue = (ortx_sparse_epilogue){p.has_bias ? buffers[6] : NULL, NULL, 0, (int)p.activation, p.param0,
                                          p.param1};
    job.pixels = p.out_height * p.out_width;
    job.epilogue.ldr = job.pixels;
    job.tiles = (job.pixels + ORTX_SPARSE_TILE - 1) / ORTX_SPARSE_TILE;
    int64_t block_rows = ortx_round_up(p.out_channels, job.w.block_rows) / job.w.block_rows;
    job.chunks = chunk_count(job.tiles, block_rows, threads);
    int pointwise = conv_pointwise(&p);
    if (conv_direct(&p)) {
        direct_geometry(&p, &job);
        job.padded = buffers[5];
        job.offsets = (int32_t *)((float *)buffers[5] + ortx_round_up(p.in_channels * job.padded_plane +
                                                                      ORTX_SPARSE_TILE, 16));
        job.temps = (float *)buffers[5] + direct_shared_floats(&p, &job);
        job.temp_rows = ortx_round_up(p.out_channels, 4);
        int64_t taps = p.kernel_height * p.kernel_width;
        for (int64_t k = 0; k < job.w.depth; k++)
            job.offsets[k] = (int32_t)(k / taps * job.padded_plane +
                                       k % taps / p.kernel_width * p.dilation_height * job.padded_width +
                                       k % p.kernel_width * p.dilation_width);
        job.w.offsets = job.offsets;
        job.tiles = (job.virtual_pixels + ORTX_SPARSE_TILE - 1) / ORTX_SPARSE_TILE;
        job.chunks = chunk_count(job.tiles, block_rows, threads);
    }
    for (int64_t image = 0; image < p.batch; image++) {
        job.input = (const float *)buffers[0] + image * p.in_channels * p.in_height * p.in_width;
        job.output = (float *)buffers[4] + image * p.out_channels * job.pixels;
        job.residual = p.has_residual ? (const float *)buffers[7] + image * p.out_channels * job.pixels : NULL;
        if (conv_direct(&p)) {
            ortx_parallel_range(threads, p.in_channels, (int64_t)ORTX_TASKS_PER_THREAD * threads, direct_fill, &job);
            ortx_parallel_for(threads, job.tiles * job.chunks, direct_task, &job);
            continue;
        } else if (pointwise) {
            job.b = job.input;
        } else if (conv_tiled(&p, threads)) {
            ortx_parallel_for(threads, job.tiles, conv_tile_task, &job);
            continue;
        } else {
            ortx_parallel_range(threads, job.w.depth, (int64_t)ORTX_TASKS_PER_THREAD * threads, im2col_rows, &job);
            job.b = job.patches;
        }
        ortx_parallel_for(threads, job.tiles * job.chunks, conv_task, &job);
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
    for (int64_t k0 = begin * TRANSPOSE_K; k0 < end * TRANSPOSE_K && k0 < job->K; k0 += TRANSPOSE_K) {
        int64_t k1 = k0 + TRANSPOSE_K < job->K ? k0 + TRANSPOSE_K : job->K;
        for (int64_t i = 0; i < job->M; i++) {
            const float *src = job->a + i * job->lda;
            for (int64_t k = k0; k < k1; k++) job->transposed[k * job->ldt + i] = src[k];
        }
    }
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
        for (int64_t t = 0; t < ncols; t++) {
            float *dst = job->y + (i0 + t) * job->N + n0;
            for (int64_t r = 0; r < valid; r++) dst[r] = block[r * ORTX_SPARSE_TILE + t];
        }
    }
}

static int64_t gemm_workspace_bytes(int64_t M, int64_t K) {
    return (int64_t)sizeof(float) * K * gemm_transposed_stride(M);
}

static void sparse_gemm_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    int threads = num_threads < 1 ? 1 : num_threads;
    gemm_job job = {.a = buffers[0], .M = ints[0], .N = ints[1], .K = ints[2], .lda = ints[3],
                    .transposed = buffers[5], .y = buffers[4], .rows = select_rows()};
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
