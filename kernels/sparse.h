/* Internal interface of the sparse family: weights in blocked CSR times dense activations (issue #9).
 *
 * Blocked CSR with block height R (1 = plain CSR; 4 = 4x1 blocks sharing one column): the weight matrix W has
 * `rows` rows (output channels / output features) and `depth` columns (the reduction dimension K). Its rows are
 * grouped R at a time into ceil(rows / R) block rows; block row i owns blocks row_ptr[i] .. row_ptr[i+1]-1, block b
 * sits in column cols[b] and holds values[b*R + r] for row i*R + r (rows past `rows` are zero). Blocks of a block
 * row are sorted by column. ortx/ep/lowering/sparse.py packs this layout; kernels/ref/sparse_ref.c reads it
 * element by element.
 *
 * The fast kernels vectorise along the dense dimension (pixels of a conv, tokens of a GEMM): a tile of up to
 * ORTX_SPARSE_TILE columns of the dense operand B (K x tile, row stride ldb) is kept in registers per output row
 * while the row's nonzeros stream past, one broadcast weight times one row of B per nonzero.
 */
#ifndef ORTX_SPARSE_H
#define ORTX_SPARSE_H

#include <stddef.h>
#include <stdint.h>

#define ORTX_SPARSE_TILE 64

typedef struct ortx_sparse_matrix {
    int64_t rows, depth, block_rows;  /* block_rows: R */
    const float *values;
    const int32_t *cols;
    const int32_t *row_ptr;
    const int32_t *offsets;  /* NULL: row k of B starts at b + k*ldb; else at b + offsets[k] (the direct conv) */
} ortx_sparse_matrix;

/* C[m, 0:ncols] = act(sum_k W[m, k] * B[k, 0:ncols] + bias[m] + residual[m, 0:ncols]) for the rows of block rows
 * [block_begin, block_end). C and residual (may be NULL; row stride ldr) point at the range's first row
 * (block_begin * R); bias (may be NULL) is indexed by the absolute row. ncols <= ORTX_SPARSE_TILE. */
typedef struct ortx_sparse_epilogue {
    const float *bias;
    const float *residual;
    int64_t ldr;
    int activation;
    float param0, param1;
} ortx_sparse_epilogue;

typedef void (*ortx_sparse_rows_fn)(const ortx_sparse_matrix *w, int64_t block_begin, int64_t block_end,
                                    const float *b, int64_t ldb, int64_t ncols, float *c, int64_t ldc,
                                    const ortx_sparse_epilogue *epilogue);

void ortx_sparse_rows_portable(const ortx_sparse_matrix *w, int64_t block_begin, int64_t block_end, const float *b,
                               int64_t ldb, int64_t ncols, float *c, int64_t ldc, const ortx_sparse_epilogue *e);
void ortx_sparse_rows_avx2(const ortx_sparse_matrix *w, int64_t block_begin, int64_t block_end, const float *b,
                           int64_t ldb, int64_t ncols, float *c, int64_t ldc, const ortx_sparse_epilogue *e);
void ortx_sparse_rows_avx512(const ortx_sparse_matrix *w, int64_t block_begin, int64_t block_end, const float *b,
                             int64_t ldb, int64_t ncols, float *c, int64_t ldc, const ortx_sparse_epilogue *e);

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

/* dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols (sparse_gemm_f32's A^T and its transposed stores). */
typedef void (*ortx_sparse_transpose_fn)(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst,
                                         int64_t ldd);

void ortx_sparse_transpose_portable(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst,
                                    int64_t ldd);
void ortx_sparse_transpose_avx512(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst,
                                  int64_t ldd);

/* The ints of sparse_conv2d_f32: the 20 conv ints of conv.h, then block rows R at ORTX_SPARSE_CONV_BLOCK. */
#define ORTX_SPARSE_CONV_BLOCK 20
/* The ints of sparse_gemm_f32: M, N, K, lda, R, has_bias, activation, threads. */

/* Reference kernels (kernels/ref/sparse_ref.c). */
void ortx_sparse_conv2d_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_sparse_gemm_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);

#endif
