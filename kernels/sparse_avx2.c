/* AVX2 row kernel of the "sparse" family: the 64-column tile runs as two halves of 32 columns, four ymm
 * accumulators per output row each (4x1 blocks: 16, the whole register file); tails use maskload/maskstore. */
#include "isa.h"
#include "sparse.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

#include "activation.h"
#include "gemm.h"
#include "gemm_avx2.h"

/* One block row over one panel (row_ptr: the panel's slice); accumulate / final as in sparse_avx512.c. */
ORTX_TARGET_AVX2 __attribute__((always_inline)) static inline void half_rows(
    const ortx_sparse_matrix *w, const int32_t *row_ptr, int64_t block_begin, int64_t block_row, const float *b,
    int64_t ldb, int64_t ncols, const __m256i masks[4], float *c, int64_t ldc, const ortx_sparse_epilogue *e,
    const int R, const int full, int accumulate, int final) {
    __m256 acc[4][4];
    for (int r = 0; r < R; r++) {
        const float *partial = c + (block_row * R + r - block_begin * R) * ldc;
        for (int v = 0; v < 4; v++)
            acc[r][v] = !accumulate || block_row * R + r >= w->rows ? _mm256_setzero_ps()
                        : full ? _mm256_loadu_ps(partial + 8 * v) : _mm256_maskload_ps(partial + 8 * v, masks[v]);
    }
    const float *values = w->values;
    for (int32_t block = row_ptr[block_row]; block < row_ptr[block_row + 1]; block++) {
        const float *x = b + (int64_t)w->cols[block] * ldb;
        __m256 xv[4];
        for (int v = 0; v < 4; v++) xv[v] = full ? _mm256_loadu_ps(x + 8 * v) : _mm256_maskload_ps(x + 8 * v, masks[v]);
        for (int r = 0; r < R; r++) {
            __m256 weight = _mm256_broadcast_ss(values + (int64_t)block * R + r);
            for (int v = 0; v < 4; v++) acc[r][v] = _mm256_fmadd_ps(weight, xv[v], acc[r][v]);
        }
    }
    __m256 p0 = _mm256_set1_ps(e->param0), p1 = _mm256_set1_ps(e->param1), zero = _mm256_setzero_ps();
    for (int r = 0; r < R; r++) {
        int64_t row = block_row * R + r, local = row - block_begin * R;
        if (row >= w->rows) break;
        if (!final) {
            float *out = c + local * ldc;
            for (int v = 0; v < 4; v++) {
                if (full) _mm256_storeu_ps(out + 8 * v, acc[r][v]);
                else _mm256_maskstore_ps(out + 8 * v, masks[v], acc[r][v]);
            }
            continue;
        }
        __m256 bias = _mm256_set1_ps(e->bias ? e->bias[row] : 0.0f);
        const float *residual = e->residual ? e->residual + local * e->ldr : NULL;
        float *out = c + local * ldc;
        for (int v = 0; v < 4; v++) {
            __m256 value = _mm256_add_ps(acc[r][v], bias);
            if (residual)
                value = _mm256_add_ps(value, full ? _mm256_loadu_ps(residual + 8 * v)
                                                  : _mm256_maskload_ps(residual + 8 * v, masks[v]));
            if (e->activation == ORTX_ACT_RELU) value = _mm256_max_ps(value, zero);
            else if (e->activation == ORTX_ACT_CLIP) value = _mm256_min_ps(_mm256_max_ps(value, p0), p1);
            if (full) _mm256_storeu_ps(out + 8 * v, value);
            else _mm256_maskstore_ps(out + 8 * v, masks[v], value);
        }
        if (e->activation != ORTX_ACT_NONE && e->activation != ORTX_ACT_RELU && e->activation != ORTX_ACT_CLIP)
            ortx_activation_array_avx2(out, ncols, e->activation, e->param0, e->param1);
    }
}

ORTX_TARGET_AVX2 void ortx_sparse_rows_avx2(const ortx_sparse_matrix *w, int64_t panel, int64_t block_begin,
                                            int64_t block_end, const float *b, int64_t ldb, int64_t ncols, float *c,
                                            int64_t ldc, const ortx_sparse_epilogue *e) {
    int accumulate = panel > 0, final = panel == w->panels - 1;
    const int32_t *row_ptr = w->row_ptr + panel * ((w->rows + w->block_rows - 1) / w->block_rows);
    for (int64_t half = 0; half < ncols; half += 32) {
        int64_t width = ncols - half < 32 ? ncols - half : 32;
        __m256i masks[4];
        for (int v = 0; v < 4; v++) {
            __m256i lane = _mm256_add_epi32(_mm256_set1_epi32(8 * v), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            masks[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)width), lane);
        }
        ortx_sparse_epilogue epilogue = *e;
        if (epilogue.residual) epilogue.residual += half;
        const float *bh = b + half;
        float *ch = c + half;
        int full = width == 32;
        for (int64_t block_row = block_begin; block_row < block_end; block_row++) {
            if (w->block_rows == 4 && full)
                half_rows(w, row_ptr, block_begin, block_row, bh, ldb, width, masks, ch, ldc, &epilogue, 4, 1,
                          accumulate, final);
            else if (w->block_rows == 4)
                half_rows(w, row_ptr, block_begin, block_row, bh, ldb, width, masks, ch, ldc, &epilogue, 4, 0,
                          accumulate, final);
            else if (full)
                half_rows(w, row_ptr, block_begin, block_row, bh, ldb, width, masks, ch, ldc, &epilogue, 1, 1,
                          accumulate, final);
            else
                half_rows(w, row_ptr, block_begin, block_row, bh, ldb, width, masks, ch, ldc, &epilogue, 1, 0,
                          accumulate, final);
        }
    }
}

#else
void ortx_sparse_rows_avx2(const ortx_sparse_matrix *w, int64_t panel, int64_t block_begin, int64_t block_end,
                           const float *b, int64_t ldb, int64_t ncols, float *c, int64_t ldc,
                           const ortx_sparse_epilogue *e) {
    ortx_sparse_rows_portable(w, panel, block_begin, block_end, b, ldb, ncols, c, ldc, e);
}
#endif
