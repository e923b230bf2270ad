/* Internal interface of the sparse family: weights in blocked CSR times dense activations (issue #9).
 *
 * Blocked CSR with block height R (1 = plain CSR; 4 = 4x1 blocks sharing one column), split into column panels:
 * the weight matrix W has `rows` rows (output channels / output features) and `depth` columns (the reduction
 * dimension K), cut into `panels` consecutive column ranges of ceil(depth / panels) columns (the last ones may be
 * narrower or empty). Its rows are grouped R at a time into
 * nbr = ceil(rows / R) block rows; block row i of panel p owns blocks row_ptr[p*nbr + i] .. row_ptr[p*nbr + i + 1]-1
 * (so row_ptr has panels * nbr + 1 entries), block b sits in column cols[b] (absolute, inside the panel's range) and
 * holds values[b*R + r] for row i*R + r (rows past `rows` are zero). Blocks of a block row are sorted by column.
 * ortx/ep/lowering/sparse.py packs this layout with the panel count sparse_sizes_f32 reports; kernels/ref/sparse_ref.c
 * reads it element by element.
 *
 * The fast kernels vectorise along the dense dimension (pixels of a conv, tokens of a GEMM): a tile of up to
 * ORTX_SPARSE_TILE columns of the dense operand B (K x tile, row stride ldb) is kept in registers per output row
 * while the row's nonzeros stream past, one broadcast weight times one row of B per nonzero. One call runs one panel
 * over a range of rows: the callers build (conv) or address (GEMM, 1x1 conv) one panel's 64-byte aligned rows of B
 * per tile, at most ORTX_SPARSE_PANEL_BYTES so they stay near L1, run every row over it, then the next panel; C
 * holds the partial sums between panels.
 */
#ifndef ORTX_SPARSE_H
#define ORTX_SPARSE_H

#include <stddef.h>
#include <stdint.h>

#include "conv.h"

#define ORTX_SPARSE_TILE 64
/* The bytes of one panel's B rows per tile (256 rows of 64 floats). A C harness of the row kernel on the 2-core Zen 4
 * host (90% zeros, one thread, B 64-byte aligned; ns per nonzero) found the panel height's sweet spot at 192-256
 * rows: K=4608 x 512 rows 2.58 in one panel, 2.32 at 1024 rows, 1.86 at 256, 1.95 at 128, 2.05 at 96; K=1152 x 128
 * rows 2.30 / 1.93 at 384 / 1.78 at 192 / 1.97 at 96 (taller panels spill L1 and L2's bandwidth bounds the loads;
 * shorter ones pay a load and a store of C per row and panel for fewer nonzeros). */
#define ORTX_SPARSE_PANEL_BYTES (64 * 1024)

typedef struct ortx_sparse_matrix {
    int64_t rows, depth, block_rows, panels;  /* block_rows: R */
    const float *values;
    const int32_t *cols;
    const int32_t *row_ptr;
} ortx_sparse_matrix;

/* Panel `panel` of C[m, 0:ncols] = act(sum_k W[m, k] * B[k, 0:ncols] + bias[m] + residual[m, 0:ncols]) for the rows
 * of block rows [block_begin, block_end): row k of B is at b + k * ldb (k absolute: the caller offsets b by the
 * panel's first column). Panels after the first add to C's partial sums, panels before the last store partial sums,
 * the last applies the epilogue: C must not overlap the residual. C and residual (may be NULL; row stride ldr) point
 * at the range's first row (block_begin * R); bias (may be NULL) is indexed by the absolute row.
 * ncols <= ORTX_SPARSE_TILE. */
typedef struct ortx_sparse_epilogue {
    const float *bias;
    const float *residual;
    int64_t ldr;
    int activation;
    float param0, param1;
} ortx_sparse_epilogue;

typedef void (*ortx_sparse_rows_fn)(const ortx_sparse_matrix *w, int64_t panel, int64_t block_begin,
                                    int64_t block_end, const float *b, int64_t ldb, int64_t ncols, float *c,
                                    int64_t ldc, const ortx_sparse_epilogue *epilogue);

void ortx_sparse_rows_portable(const ortx_sparse_matrix *w, int64_t panel, int64_t block_begin, int64_t block_end,
                               const float *b, int64_t ldb, int64_t ncols, float *c, int64_t ldc,
                               const ortx_sparse_epilogue *e);
void ortx_sparse_rows_avx2(const ortx_sparse_matrix *w, int64_t panel, int64_t block_begin, int64_t block_end,
                           const float *b, int64_t ldb, int64_t ncols, float *c, int64_t ldc,
                           const ortx_sparse_epilogue *e);
void ortx_sparse_rows_avx512(const ortx_sparse_matrix *w, int64_t panel, int64_t block_begin, int64_t block_end,
                             const float *b, int64_t ldb, int64_t ncols, float *c, int64_t ldc,
                             const ortx_sparse_epilogue *e);

/* One tile of conv patch rows: dst row k (stride ldd) gets, for each run r, run_length[r] floats from
 * source + taps[k] + run_source[r] at column run_target[r] (sparse.c: patch_block). */
typedef struct ortx_sparse_runs {
    int64_t count;
    const int64_t *source, *target, *length;
} ortx_sparse_runs;

typedef void (*ortx_sparse_patch_fn)(const float *source, const int32_t *taps, int64_t rows,
                                     const ortx_sparse_runs *runs, float *dst, int64_t ldd);

void ortx_sparse_patch_portable(const float *source, const int32_t *taps, int64_t rows, const ortx_sparse_runs *runs,
                                float *dst, int64_t ldd);
void ortx_sparse_patch_avx512(const float *source, const int32_t *taps, int64_t rows, const ortx_sparse_runs *runs,
                              float *dst, int64_t ldd);

/* One row of `count` planes (sparse_conv.c; plane c at row + c * row_step, dst + c * dst_step): dst[j] =
 * row[j * stride] for lo <= j < hi, 0 elsewhere in [0, width) (row is only read at those j). */
typedef struct ortx_sparse_fill {
    int64_t count, row_step, stride, lo, hi, dst_step, width;
} ortx_sparse_fill;

typedef void (*ortx_sparse_fill_fn)(const float *row, const ortx_sparse_fill *fill, float *dst);

void ortx_sparse_fill_portable(const float *row, const ortx_sparse_fill *fill, float *dst);
void ortx_sparse_fill_avx512(const float *row, const ortx_sparse_fill *fill, float *dst);

/* Case shifted's store: rows x (sub_rows output rows of `width` computed columns) of tile (row stride
 * ORTX_SPARSE_TILE) -> y (row stride pixels; y points at the first row's first output row), the first out_width
 * columns of each output row, + residual (may be NULL; laid out as y) then the activation (with a residual only:
 * without one the row kernel applied it). */
typedef struct ortx_sparse_store {
    int64_t rows, sub_rows, width, out_width, pixels;
    const float *residual;
    int activation;
    float param0, param1;
} ortx_sparse_store;

typedef void (*ortx_sparse_store_fn)(const float *tile, const ortx_sparse_store *store, float *y);

void ortx_sparse_store_portable(const float *tile, const ortx_sparse_store *store, float *y);
void ortx_sparse_store_avx512(const float *tile, const ortx_sparse_store *store, float *y);

/* dst[c * ldd + r] = src[r * lds + c] (+ add[c * ldd + r] when add is not NULL) for r < rows, c < cols
 * (sparse_gemm_f32's A^T, and its transposed stores with FusedMatMul's residual as `add`, laid out as dst). */
typedef void (*ortx_sparse_transpose_fn)(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst,
                                         int64_t ldd, const float *add);

void ortx_sparse_transpose_portable(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst,
                                    int64_t ldd, const float *add);
void ortx_sparse_transpose_avx512(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst,
                                  int64_t ldd, const float *add);

/* Panels of a depth: enough for ORTX_SPARSE_PANEL_BYTES of 64-float rows each (sparse_sizes_f32 reports it). */
static inline int64_t ortx_sparse_panel_count(int64_t depth) {
    int64_t most = ORTX_SPARSE_PANEL_BYTES / (int64_t)(sizeof(float) * ORTX_SPARSE_TILE);
    return depth <= most ? 1 : (depth + most - 1) / most;
}

/* Columns per panel, as packed: ceil(depth / panels) (the last panel may be narrower). */
static inline int64_t ortx_sparse_panel_width(int64_t depth, int64_t panels) {
    int64_t width = (depth + panels - 1) / (panels < 1 ? 1 : panels);
    return width < 1 ? 1 : width;
}

/* The ISA's row, patch and fill kernels (sparse.c). */
ortx_sparse_rows_fn ortx_sparse_select_rows(void);
ortx_sparse_patch_fn ortx_sparse_select_patch(void);
ortx_sparse_fill_fn ortx_sparse_select_fill(void);
ortx_sparse_store_fn ortx_sparse_select_store(void);

/* sparse_conv2d_f32 (sparse_conv.c) and its workspace bytes for params' workspace threads. */
void ortx_sparse_conv2d_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
int64_t ortx_sparse_conv_workspace_bytes(const ortx_conv_params *p);

/* The ints of sparse_conv2d_f32: the 20 conv ints of conv.h, then block rows R at ORTX_SPARSE_CONV_BLOCK, the
 * panel count after it and the column layout after that (ORTX_SPARSE_CONV_LAYOUT: 0 = cols are patch columns k,
 * 1 = cols are rows of the shifted planes, ortx_sparse_shifted_row(k); the lowering packs what
 * ortx_sparse_conv_shifted says). */
#define ORTX_SPARSE_CONV_BLOCK 20
#define ORTX_SPARSE_CONV_LAYOUT 22

/* Shifted planes (sparse_conv.c, Case shifted): a stride-1 conv (not 1x1 unpadded) whose output rows are 9..64
 * wide keeps, per band of output rows (ortx_sparse_shifted_band), per kernel column kx and channel c, the zero-padded
 * input rows shifted by kx * dilation and cut to `width` = 16, 32 or 64 floats (the power of two >= OW): plane
 * (kx, c) row a, column j = P[c][band start + a][j + kx * dw]. Patch row k = (c, ky, kx) of output pixel (oy, ox) is
 * then shifted row ortx_sparse_shifted_row(k) + oy - band start, column ox: a
 * 64-float tile of `64 / width` whole output rows is one 64-byte aligned run of every patch row, so the row kernel
 * reads B from the planes with no B rows built (the columns ox >= OW of each output row are computed and dropped). */
static inline int64_t ortx_sparse_shifted_width(const ortx_conv_params *p) {
    return p->out_width <= 16 ? 16 : p->out_width <= 32 ? 32 : 64;
}

/* The whole map's shifted planes per thread at most: at 1 thread (CPU time, 90% zeros, ResNet-18-style layers) they
 * beat the built B rows at 128@28 (1.47 MiB, 0.97x) and 256@14 (0.77 MiB, 0.95x) but not at 64@56 (2.85 MiB, 1.10x):
 * planes past L2 are written to and read back from L3 on every call. Larger maps are cut into bands of output rows
 * whose planes (with the KH - 1 rows below them) fit ORTX_SPARSE_BAND_BYTES; each band is filled when a thread runs
 * it (sparse_conv.c). */
#define ORTX_SPARSE_SHIFTED_BYTES (1536 * 1024)
#define ORTX_SPARSE_BAND_BYTES (384 * 1024)

/* Output rows per band (a multiple of 64 / width), the whole map when it fits; 0 when not even one tile's fits. */
static inline int64_t ortx_sparse_shifted_band(const ortx_conv_params *p) {
    int64_t width = ortx_sparse_shifted_width(p), per_tile = 64 / width;
    int64_t halo = (p->kernel_height - 1) * p->dilation_height;
    int64_t row_bytes = (int64_t)sizeof(float) * p->kernel_width * p->in_channels * width;
    if (row_bytes * (p->out_height + halo) <= ORTX_SPARSE_SHIFTED_BYTES) return p->out_height;
    int64_t band = (ORTX_SPARSE_BAND_BYTES / row_bytes - halo) / per_tile * per_tile;
    return band < per_tile ? 0 : band;
}

/* Rows of one band's shifted planes: its output rows and the KH - 1 (dilated) below them, made odd: planes whose
 * stride was a power of two (64@56's bands of 8 rows of 256 bytes, 256@14's 16 rows of 64) put a panel's B rows of
 * consecutive channels in the same few L1 sets, and the row kernel ran 1.5x slower than on built B rows. */
static inline int64_t ortx_sparse_shifted_rows(const ortx_conv_params *p) {
    return (ortx_sparse_shifted_band(p) + (p->kernel_height - 1) * p->dilation_height) | 1;
}

static inline int ortx_sparse_conv_shifted(const ortx_conv_params *p) {
    int pointwise = p->kernel_height == 1 && p->kernel_width == 1 && p->pad_top == 0 && p->pad_left == 0;
    return p->stride_height == 1 && p->stride_width == 1 && !pointwise && p->out_width >= 9 && p->out_width <= 64 &&
           ortx_sparse_shifted_band(p) > 0;
}

static inline int64_t ortx_sparse_shifted_row(const ortx_conv_params *p, int64_t k) {
    int64_t taps = p->kernel_height * p->kernel_width, channel = k / taps;
    int64_t ky = k % taps / p->kernel_width, kx = k % p->kernel_width;
    return (kx * p->in_channels + channel) * ortx_sparse_shifted_rows(p) + ky * p->dilation_height;
}

static inline int64_t ortx_sparse_shifted_column(const ortx_conv_params *p, int64_t row) {
    int64_t rows = ortx_sparse_shifted_rows(p), plane = row / rows;
    int64_t kx = plane / p->in_channels, channel = plane % p->in_channels, ky = row % rows / p->dilation_height;
    return (channel * p->kernel_height + ky) * p->kernel_width + kx;
}
/* The ints of sparse_gemm_f32: M, N, K, lda, R, has_bias, activation, threads, panels, has_residual. */

/* Reference kernels (kernels/ref/sparse_ref.c). */
void ortx_sparse_conv2d_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_sparse_gemm_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);

#endif
