/* Family "sparse": blocked-CSR weights in column panels (sparse.h) times dense activations, fp32 (issue #9).
 *
 * sparse_conv2d_f32: a group-1 conv whose weights (Cout x Cin*KH*KW) are blocked CSR: sparse_conv.c.
 * sparse_gemm_f32: Y[M, N] = act(A[M, K] @ W[K, N] + bias[N] + residual[M, N]) with W^T (N x K) blocked CSR.
 *   ints: M, N, K, lda, R, has_bias, activation, threads, panels, has_residual. floats: param0, param1.
 *   buffers: A, values, cols, row_ptr, Y, workspace, bias, residual (laid out as Y; must not overlap it).
 *   Tasks = pieces, token tiles x block-row chunks in tile-major order (gemm_piece): a thread transposes the tile
 *   of A its piece needs into its own K x ORTX_SPARSE_TILE rows of A^T (unless they hold it already), runs the
 *   piece's rows over every panel into its own sums and stores them transposed into Y. Why: with A^T transposed
 *   by both threads in one parallel call and read by both in the next, half of every thread's B rows came from the
 *   other core's cache (128x1024x256 at 90% zeros, 2 threads, best of 2000 at load 2.4: 89 us, 1 thread 98;
 *   thread-owned A^T: 57 us).
 * sparse_sizes_f32: ints [0, the 20 conv ints] or [1, M, N, K, threads]; writes the workspace bytes to out[0] and
 *   the panel count to out[1] (the lowering packs W in that many panels of ceil(K / panels) columns; the conv's
 *   workspace holds panels of that width, so a conv must not be given fewer panels), and for a conv its column
 *   layout (sparse.h: ORTX_SPARSE_CONV_LAYOUT) to out[2]. ints [2, the 20 conv ints]: int32 out[k] = the shifted
 *   planes' row of patch column k (the columns the lowering packs for layout 1).
 * Limits: fp32 only; R is 1 or 4. A 64-column tile that is not full still runs whole vectors up to its last column.
 */
#include <string.h>

#include "activation.h"
#include "conv.h"
#include "gemm.h"
#include "ortx_kernels.h"
#include "sparse.h"
#include "threadpool.h"

ortx_sparse_rows_fn ortx_sparse_select_rows(void) {
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

ortx_sparse_patch_fn ortx_sparse_select_patch(void) {
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

ortx_sparse_fill_fn ortx_sparse_select_fill(void) {
    return ortx_selected_isa() == ORTX_ISA_AVX512 ? ortx_sparse_fill_avx512 : ortx_sparse_fill_portable;
}

void ortx_sparse_fill_portable(const float *row, const ortx_sparse_fill *fill, float *dst) {
    const int64_t lo = fill->lo, hi = fill->hi, stride = fill->stride;
    for (int64_t c = 0; c < fill->count; c++, row += fill->row_step, dst += fill->dst_step) {
        memset(dst, 0, sizeof(float) * lo);
        if (stride == 1) memcpy(dst + lo, row + lo, sizeof(float) * (hi - lo));
        else
            for (int64_t j = lo; j < hi; j++) dst[j] = row[j * stride];
        memset(dst + hi, 0, sizeof(float) * (fill->width - hi));
    }
}

ortx_sparse_store_fn ortx_sparse_select_store(void) {
    return ortx_selected_isa() == ORTX_ISA_AVX512 ? ortx_sparse_store_avx512 : ortx_sparse_store_portable;
}

void ortx_sparse_store_portable(const float *tile, const ortx_sparse_store *store, float *y) {
    for (int64_t r = 0; r < store->rows; r++)
        for (int64_t q = 0; q < store->sub_rows; q++) {
            const float *from = tile + r * ORTX_SPARSE_TILE + q * store->width;
            int64_t at = r * store->pixels + q * store->out_width;
            for (int64_t x = 0; x < store->out_width; x++) {
                if (!store->residual) {
                    y[at + x] = from[x];
                    continue;
                }
                float value = from[x] + store->residual[at + x];
                y[at + x] = ortx_activation_scalar(store->activation, value, store->param0, store->param1);
            }
        }
}

static ortx_sparse_transpose_fn select_transpose(void) {
    return ortx_selected_isa() == ORTX_ISA_AVX512 ? ortx_sparse_transpose_avx512 : ortx_sparse_transpose_portable;
}

void ortx_sparse_transpose_portable(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst,
                                    int64_t ldd, const float *add) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * ldd + r] = src[r * lds + c] + (add ? add[c * ldd + r] : 0.0f);
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

/* GEMM ------------------------------------------------------------------------------------------------------- */

typedef struct gemm_job {
    const float *a;
    int64_t M, N, K, lda;
    float *regions;  /* per thread: [header: the tile its A^T holds][a tile's A^T: K rows][sums] */
    int64_t region_floats;
    ortx_sparse_matrix w;
    float *y;
    const float *residual;  /* NULL, or added in the transposed store, then the activation (epilogue's is off) */
    int activation;
    float param0, param1;
    ortx_sparse_epilogue epilogue;
    int64_t tiles, chunks;
    ortx_sparse_rows_fn rows;
    ortx_sparse_transpose_fn transpose;
} gemm_job;

/* A^T's row stride in a region: a tile and one cache line, so consecutive rows do not share L1 sets with a period
 * of 16 rows as a 256-byte stride does. */
#define GEMM_TRANSPOSED_STRIDE (ORTX_SPARSE_TILE + 16)

/* 16 floats of header (the held tile, an int64, on its own cache line), the A^T rows, the sums. */
static int64_t gemm_region_floats(int64_t N, int64_t K) {
    return 16 + K * GEMM_TRANSPOSED_STRIDE + ortx_round_up(N, 4) * ORTX_SPARSE_TILE;
}

/* Piece `piece` of the tile-major pieces (one tile x one chunk of output features, every panel): unless the
 * thread's own A^T rows already hold the piece's tile (set by its previous piece in this call), it transposes that
 * tile's tokens of A into them (K rows of 64, 64-byte aligned); then it runs the chunk's rows over them into its
 * sums and stores those transposed into Y (16 x 16 blocks: each token's store one contiguous 64-byte run).
 * Pieces are claimed in order from the pool's counter, so a thread mostly meets the tile it holds. */
static void gemm_piece(void *context, int64_t piece, int thread_index) {
    const gemm_job *job = context;
    const int64_t R = job->w.block_rows;
    float *region = job->regions + (int64_t)thread_index * job->region_floats;
    int64_t *held = (int64_t *)region;
    float *transposed = region + 16, *sums = transposed + job->K * GEMM_TRANSPOSED_STRIDE;
    int64_t tile = piece / job->chunks, begin, end;
    chunk_range(ortx_round_up(job->w.rows, R) / R, job->chunks, piece % job->chunks, &begin, &end);
    if (begin == end) return;
    int64_t i0 = tile * ORTX_SPARSE_TILE;
    int64_t ncols = job->M - i0 < ORTX_SPARSE_TILE ? job->M - i0 : ORTX_SPARSE_TILE;
    if (*held != tile) {
        job->transpose(job->a + i0 * job->lda, job->lda, ncols, job->K, transposed, GEMM_TRANSPOSED_STRIDE, NULL);
        *held = tile;
    }
    for (int64_t panel = 0; panel < job->w.panels; panel++)
        job->rows(&job->w, panel, begin, end, transposed, GEMM_TRANSPOSED_STRIDE, ncols, sums, ORTX_SPARSE_TILE,
                  &job->epilogue);
    int64_t n0 = begin * R, valid = (job->N < end * R ? job->N : end * R) - n0;
    job->transpose(sums, ORTX_SPARSE_TILE, valid, ncols, job->y + i0 * job->N + n0, job->N,
                   job->residual ? job->residual + i0 * job->N + n0 : NULL);
    if (job->residual && job->activation != ORTX_ACT_NONE)  /* after the residual: a pass over the L1-hot block */
        for (int64_t t = i0; t < i0 + ncols; t++)
            for (int64_t n = n0; n < n0 + valid; n++)
                job->y[t * job->N + n] = ortx_activation_scalar(job->activation, job->y[t * job->N + n], job->param0,
                                                                job->param1);
}

/* + 64: room to start the regions on a cache line whatever the workspace's own alignment (the row kernel's B rows;
 * an arena at 16 mod 64 made every load split two lines and the kernel run 2.1x slower on the Sapphire Rapids host,
 * BERT-like FFN 128x256x1024 at 50% zeros, 2 threads: 0.82 vs 0.39 ms). */
static int64_t gemm_workspace_bytes(int64_t M, int64_t N, int64_t K, int64_t threads) {
    (void)M;
    return (int64_t)sizeof(float) * (threads < 1 ? 1 : threads) * gemm_region_floats(N, K) + 64;
}

static void sparse_gemm_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    int threads = num_threads < 1 ? 1 : num_threads;
    if (ints[7] >= 1 && threads > ints[7]) threads = (int)ints[7];  /* the workspace holds ints[7] regions */
    gemm_job job = {.a = buffers[0], .M = ints[0], .N = ints[1], .K = ints[2], .lda = ints[3],
                    .regions = (float *)(((uintptr_t)buffers[5] + 63) & ~(uintptr_t)63), .y = buffers[4],
                    .rows = ortx_sparse_select_rows(), .transpose = select_transpose()};
    job.region_floats = gemm_region_floats(job.N, job.K);
    job.w = (ortx_sparse_matrix){job.N, job.K, ints[4], ints[8], buffers[1], buffers[2], buffers[3]};
    job.residual = ints[9] ? buffers[7] : NULL;
    job.activation = (int)ints[6], job.param0 = floats[0], job.param1 = floats[1];
    job.epilogue = (ortx_sparse_epilogue){ints[5] ? buffers[6] : NULL, NULL, 0,
                                          job.residual ? ORTX_ACT_NONE : job.activation, floats[0], floats[1]};
    job.tiles = (job.M + ORTX_SPARSE_TILE - 1) / ORTX_SPARSE_TILE;
    job.chunks = chunk_count(job.tiles, ortx_round_up(job.N, ints[4]) / ints[4], threads);
    for (int thread = 0; thread < threads; thread++) *(int64_t *)(job.regions + thread * job.region_floats) = -1;
    ortx_parallel_for(threads, job.tiles * job.chunks, gemm_piece, &job);
}

static void sparse_sizes_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    int64_t *out = buffers[0];
    static const float no_params[2] = {0.0f, 0.0f};
    if (ints[0] == 0) {
        ortx_conv_params p = ortx_conv_params_read(ints + 1, no_params);
        out[0] = ortx_sparse_conv_workspace_bytes(&p);
        out[1] = ortx_sparse_panel_count(p.in_channels * p.kernel_height * p.kernel_width);
        out[2] = ortx_sparse_conv_shifted(&p);
    } else if (ints[0] == 2) {
        ortx_conv_params p = ortx_conv_params_read(ints + 1, no_params);
        int32_t *rows = buffers[0];
        for (int64_t k = 0; k < p.in_channels * p.kernel_height * p.kernel_width; k++)
            rows[k] = (int32_t)ortx_sparse_shifted_row(&p, k);
    } else {
        out[0] = gemm_workspace_bytes(ints[1], ints[2], ints[3], ints[4]);
        out[1] = ortx_sparse_panel_count(ints[3]);
    }
}

const ortx_kernel_entry ortx_family_sparse[] = {
    {"sparse_conv2d_f32", ortx_sparse_conv2d_f32, ortx_sparse_conv2d_f32_ref},
    {"sparse_gemm_f32", sparse_gemm_f32, ortx_sparse_gemm_f32_ref},
    {"sparse_sizes_f32", sparse_sizes_f32, sparse_sizes_f32},
    {NULL, NULL, NULL},
};
