/* AVX-512 row kernel of the "sparse" family: a tile of 64 columns is four zmm accumulators per output row; each
 * nonzero (block) is one broadcast per row and four loads of B shared by the block's R rows. Tails use masks.
 * Measured on the 2-core Zen 4 host (a C harness, 90% zeros, one thread): ~2.0 ns per nonzero with B rows 64-byte
 * aligned in L1 or L2, 1.4x that when every row is misaligned (each load splits two lines): callers align B. */
#include "isa.h"
#include "sparse.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

#include "activation.h"
#include "gemm.h"
#include "gemm_avx2.h"
#include "transpose_avx512.h"
#include "vector_math.h"

/* One block row over one panel (row_ptr: the panel's slice). accumulate: start from C's partial sums (panels after
 * the first); final: apply the epilogue (the last panel), else store the partial sums as they are. */
ORTX_TARGET_AVX512 __attribute__((always_inline)) static inline void block_rows(
    const ortx_sparse_matrix *w, const int32_t *row_ptr, int64_t block_begin, int64_t block_row, const float *b,
    int64_t ldb, const __mmask16 masks[4], float *c, int64_t ldc, const ortx_sparse_epilogue *e, const int R,
    const int V, const int full, int accumulate, int final) {
    __m512 acc[4][4];
    for (int r = 0; r < R; r++) {
        const float *partial = c + (block_row * R + r - block_begin * R) * ldc;
        for (int v = 0; v < V; v++)
            acc[r][v] = !accumulate || block_row * R + r >= w->rows ? _mm512_setzero_ps()
                        : full ? _mm512_loadu_ps(partial + 16 * v) : _mm512_maskz_loadu_ps(masks[v], partial + 16 * v);
    }
    const float *values = w->values;
    const int32_t *cols = w->cols;
    int32_t block = row_ptr[block_row];
    if (R == 1) {  /* two nonzeros per step into two accumulator sets: 8 independent FMA chains, not 4 */
        __m512 other[4];
        for (int v = 0; v < V; v++) other[v] = _mm512_setzero_ps();
        for (; block + 1 < row_ptr[block_row + 1]; block += 2) {
            const float *x0 = b + (int64_t)cols[block] * ldb, *x1 = b + (int64_t)cols[block + 1] * ldb;
            __m512 w0 = _mm512_set1_ps(values[block]), w1 = _mm512_set1_ps(values[block + 1]);
            for (int v = 0; v < V; v++) {
                __m512 a = full ? _mm512_loadu_ps(x0 + 16 * v) : _mm512_maskz_loadu_ps(masks[v], x0 + 16 * v);
                __m512 c = full ? _mm512_loadu_ps(x1 + 16 * v) : _mm512_maskz_loadu_ps(masks[v], x1 + 16 * v);
                acc[0][v] = _mm512_fmadd_ps(w0, a, acc[0][v]);
                other[v] = _mm512_fmadd_ps(w1, c, other[v]);
            }
        }
        for (int v = 0; v < V; v++) acc[0][v] = _mm512_add_ps(acc[0][v], other[v]);
    }
    for (; block < row_ptr[block_row + 1]; block++) {
        const float *x = b + (int64_t)cols[block] * ldb;
        __m512 xv[4];
        for (int v = 0; v < V; v++)
            xv[v] = full ? _mm512_loadu_ps(x + 16 * v) : _mm512_maskz_loadu_ps(masks[v], x + 16 * v);
        for (int r = 0; r < R; r++) {
            __m512 weight = _mm512_set1_ps(values[(int64_t)block * R + r]);
            for (int v = 0; v < V; v++) acc[r][v] = _mm512_fmadd_ps(weight, xv[v], acc[r][v]);
        }
    }
    __m512 p0 = _mm512_set1_ps(e->param0), p1 = _mm512_set1_ps(e->param1), zero = _mm512_setzero_ps();
    for (int r = 0; r < R; r++) {
        int64_t row = block_row * R + r, local = row - block_begin * R;
        if (row >= w->rows) break;
        float *out = c + local * ldc;
        if (!final) {
            for (int v = 0; v < V; v++) {
                if (full) _mm512_storeu_ps(out + 16 * v, acc[r][v]);
                else _mm512_mask_storeu_ps(out + 16 * v, masks[v], acc[r][v]);
            }
            continue;
        }
        __m512 bias = _mm512_set1_ps(e->bias ? e->bias[row] : 0.0f);
        const float *residual = e->residual ? e->residual + local * e->ldr : NULL;
        for (int v = 0; v < V; v++) {
            __m512 value = _mm512_add_ps(acc[r][v], bias);
            if (residual)
                value = _mm512_add_ps(value, full ? _mm512_loadu_ps(residual + 16 * v)
                                                  : _mm512_maskz_loadu_ps(masks[v], residual + 16 * v));
            if (e->activation == ORTX_ACT_RELU) value = _mm512_max_ps(value, zero);
            else if (e->activation == ORTX_ACT_CLIP) value = _mm512_min_ps(_mm512_max_ps(value, p0), p1);
            if (full) _mm512_storeu_ps(out + 16 * v, value);
            else _mm512_mask_storeu_ps(out + 16 * v, masks[v], value);
        }
        if (e->activation != ORTX_ACT_NONE && e->activation != ORTX_ACT_RELU && e->activation != ORTX_ACT_CLIP &&
            e->activation != ORTX_ACT_GELU) {
            int64_t count = 0;
            for (int v = 0; v < 4; v++) count += __builtin_popcount(masks[v]);
            ortx_activation_array_avx2(out, count, e->activation, e->param0, e->param1);
        }
    }
}

/* Gelu over the range's finished rows, in a pass of its own over the L1-hot sums: inside block_rows its two dozen
 * constants were hoisted out of the row loop and the accumulators spilled (the BERT-like FFN's 128x256x1024 at 90%
 * zeros ran 2.5x slower). */
ORTX_TARGET_AVX512 __attribute__((noinline)) static void gelu_rows(float *c, int64_t ldc, int64_t rows,
                                                                   int64_t ncols) {
    for (int64_t r = 0; r < rows; r++) {
        float *out = c + r * ldc;
        int64_t j = 0;
        for (; j + 16 <= ncols; j += 16) _mm512_storeu_ps(out + j, ortx_gelu_avx512(_mm512_loadu_ps(out + j)));
        if (j < ncols) {
            __mmask16 mask = (__mmask16)((1u << (ncols - j)) - 1u);
            _mm512_mask_storeu_ps(out + j, mask, ortx_gelu_avx512(_mm512_maskz_loadu_ps(mask, out + j)));
        }
    }
}

ORTX_TARGET_AVX512 void ortx_sparse_rows_avx512(const ortx_sparse_matrix *w, int64_t panel, int64_t block_begin,
                                                int64_t block_end, const float *b, int64_t ldb, int64_t ncols,
                                                float *c, int64_t ldc, const ortx_sparse_epilogue *e) {
    __mmask16 masks[4];
    for (int v = 0; v < 4; v++) {
        int64_t left = ncols - 16 * v;
        masks[v] = left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1u);
    }
    int accumulate = panel > 0, final = panel == w->panels - 1;
    const int32_t *row_ptr = w->row_ptr + panel * ((w->rows + w->block_rows - 1) / w->block_rows);
    /* Case full: 64 columns, unmasked; else (V, masked): only the ceil(ncols / 16) vectors that hold columns run, so
     * a tail tile of a few pixels (14x14: 196 = 3 x 64 + 4) costs one FMA per nonzero, not four. */
    int vectors = ncols == ORTX_SPARSE_TILE ? 0 : (int)((ncols + 15) / 16);
    for (int64_t block_row = block_begin; block_row < block_end; block_row++) {
#define ORTX_SPARSE_BLOCK_ROWS(R, V, FULL) \
    block_rows(w, row_ptr, block_begin, block_row, b, ldb, masks, c, ldc, e, R, V, FULL, accumulate, final)
        if (w->block_rows == 4) {
            switch (vectors) {
                case 0: ORTX_SPARSE_BLOCK_ROWS(4, 4, 1); break;
                case 1: ORTX_SPARSE_BLOCK_ROWS(4, 1, 0); break;
                case 2: ORTX_SPARSE_BLOCK_ROWS(4, 2, 0); break;
                case 3: ORTX_SPARSE_BLOCK_ROWS(4, 3, 0); break;
                default: ORTX_SPARSE_BLOCK_ROWS(4, 4, 0); break;
            }
        } else {
            switch (vectors) {
                case 0: ORTX_SPARSE_BLOCK_ROWS(1, 4, 1); break;
                case 1: ORTX_SPARSE_BLOCK_ROWS(1, 1, 0); break;
                case 2: ORTX_SPARSE_BLOCK_ROWS(1, 2, 0); break;
                case 3: ORTX_SPARSE_BLOCK_ROWS(1, 3, 0); break;
                default: ORTX_SPARSE_BLOCK_ROWS(1, 4, 0); break;
            }
        }
#undef ORTX_SPARSE_BLOCK_ROWS
    }
    if (final && e->activation == ORTX_ACT_GELU) {
        int64_t rows = (block_end * w->block_rows < w->rows ? block_end * w->block_rows : w->rows) -
                       block_begin * w->block_rows;
        gelu_rows(c, ldc, rows, ncols);
    }
}

/* One block of at most 16 x 16: masked loads of `rows` rows (`cols` lanes), transpose16, masked stores of `cols`
 * rows (`rows` lanes), each + the same lanes of `add` when given. */
ORTX_TARGET_AVX512 static void transpose_block(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst,
                                               int64_t ldd, const float *add) {
    __mmask16 load_mask = (__mmask16)(cols >= 16 ? 0xFFFFu : (1u << cols) - 1u);
    __mmask16 store_mask = (__mmask16)(rows >= 16 ? 0xFFFFu : (1u << rows) - 1u);
    __m512 r[16];
    for (int i = 0; i < 16; i++)
        r[i] = i < rows ? _mm512_maskz_loadu_ps(load_mask, src + i * lds) : _mm512_setzero_ps();
    transpose16(r);
    for (int j = 0; j < cols; j++) {
        __m512 value = add ? _mm512_add_ps(r[j], _mm512_maskz_loadu_ps(store_mask, add + j * ldd)) : r[j];
        _mm512_mask_storeu_ps(dst + j * ldd, store_mask, value);
    }
}

ORTX_TARGET_AVX512 void ortx_sparse_transpose_avx512(const float *src, int64_t lds, int64_t rows, int64_t cols,
                                                     float *dst, int64_t ldd, const float *add) {
    for (int64_t r0 = 0; r0 < rows; r0 += 16)
        for (int64_t c0 = 0; c0 < cols; c0 += 16)
            transpose_block(src + r0 * lds + c0, lds, rows - r0 < 16 ? rows - r0 : 16, cols - c0 < 16 ? cols - c0 : 16,
                            dst + c0 * ldd + r0, ldd, add ? add + c0 * ldd + r0 : NULL);
}

/* Patch rows of one tile: full 16-float copies, then one masked copy per run. */
ORTX_TARGET_AVX512 void ortx_sparse_patch_avx512(const float *source, const int32_t *taps, int64_t rows,
                                                 const ortx_sparse_runs *runs, float *dst, int64_t ldd) {
    for (int64_t k = 0; k < rows; k++) {
        const float *row_source = source + taps[k];
        float *row = dst + k * ldd;
        for (int64_t run = 0; run < runs->count; run++) {
            const float *from = row_source + runs->source[run];
            float *to = row + runs->target[run];
            int64_t length = runs->length[run], i = 0;
            for (; i + 16 <= length; i += 16) _mm512_storeu_ps(to + i, _mm512_loadu_ps(from + i));
            if (i < length) {
                __mmask16 mask = (__mmask16)((1u << (length - i)) - 1u);
                _mm512_mask_storeu_ps(to + i, mask, _mm512_maskz_loadu_ps(mask, from + i));
            }
        }
    }
}

/* 16 columns at a time, masked to [lo, hi) (the masks computed once for every plane): stride 1 one load, stride 2
 * two loads and an even-lane permute (the loads stop at row[2 * (hi - 1)], the last column read), other strides
 * scalar. Rows up to 256 columns wide; wider ones go scalar too. */
#define FILL_VECTORS 16
ORTX_TARGET_AVX512 void ortx_sparse_fill_avx512(const float *row, const ortx_sparse_fill *fill, float *dst) {
    const int64_t width = fill->width, stride = fill->stride, vectors = (width + 15) / 16;
    if (stride > 2 || vectors > FILL_VECTORS) {
        ortx_sparse_fill_portable(row, fill, dst);
        return;
    }
    __mmask16 store[FILL_VECTORS], valid[FILL_VECTORS], low[FILL_VECTORS], high[FILL_VECTORS];
    for (int64_t v = 0; v < vectors; v++) {
        int64_t j = 16 * v;
        store[v] = (__mmask16)(width - j >= 16 ? 0xFFFFu : (1u << (width - j)) - 1u);
        int64_t first = fill->lo > j ? fill->lo - j : 0, last = fill->hi < j + 16 ? fill->hi - j : 16;
        valid[v] = last <= first ? 0 : (__mmask16)(((1u << last) - 1u) & ~((1u << first) - 1u));
        low[v] = high[v] = 0;
        if (valid[v]) {  /* stride 2: source s = 2j + i is read for 2 * (j + first) <= s <= 2 * (j + last - 1) */
            int64_t s0 = 2 * first, s1 = 2 * (last - 1) + 1;
            uint32_t lanes = (s1 >= 32 ? 0xFFFFFFFFu : (1u << s1) - 1u) & ~((1u << s0) - 1u);
            low[v] = (__mmask16)lanes, high[v] = (__mmask16)(lanes >> 16);
        }
    }
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (int64_t c = 0; c < fill->count; c++, row += fill->row_step, dst += fill->dst_step) {
        if (stride == 1) {
            for (int64_t v = 0; v < vectors; v++)
                _mm512_mask_storeu_ps(dst + 16 * v, store[v], _mm512_maskz_loadu_ps(valid[v], row + 16 * v));
            continue;
        }
        for (int64_t v = 0; v < vectors; v++) {
            __m512 even_lanes = _mm512_maskz_loadu_ps(low[v], row + 32 * v);
            __m512 odd_lanes = _mm512_maskz_loadu_ps(high[v], row + 32 * v + 16);
            _mm512_mask_storeu_ps(dst + 16 * v, store[v],
                                  _mm512_maskz_permutex2var_ps(valid[v], even_lanes, even, odd_lanes));
        }
    }
}

/* Per row and output row, ceil(out_width / 16) masked vectors. */
ORTX_TARGET_AVX512 void ortx_sparse_store_avx512(const float *tile, const ortx_sparse_store *store, float *y) {
    const int64_t out_width = store->out_width;
    const int activation = store->activation;
    const __m512 zero = _mm512_setzero_ps(), p0 = _mm512_set1_ps(store->param0), p1 = _mm512_set1_ps(store->param1);
    for (int64_t r = 0; r < store->rows; r++)
        for (int64_t q = 0; q < store->sub_rows; q++) {
            const float *from = tile + r * ORTX_SPARSE_TILE + q * store->width;
            int64_t at = r * store->pixels + q * out_width;
            for (int64_t x = 0; x < out_width; x += 16) {
                __mmask16 mask = (__mmask16)(out_width - x >= 16 ? 0xFFFFu : (1u << (out_width - x)) - 1u);
                __m512 value = _mm512_maskz_loadu_ps(mask, from + x);
                if (store->residual) {
                    value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(mask, store->residual + at + x));
                    if (activation == ORTX_ACT_RELU) value = _mm512_max_ps(value, zero);
                    else if (activation == ORTX_ACT_CLIP) value = _mm512_min_ps(_mm512_max_ps(value, p0), p1);
                }
                _mm512_mask_storeu_ps(y + at + x, mask, value);
            }
            if (store->residual && activation != ORTX_ACT_NONE && activation != ORTX_ACT_RELU &&
                activation != ORTX_ACT_CLIP)
                ortx_activation_array_avx2(y + at, out_width, activation, store->param0, store->param1);
        }
}

#else
void ortx_sparse_store_avx512(const float *tile, const ortx_sparse_store *store, float *y) {
    ortx_sparse_store_portable(tile, store, y);
}

void ortx_sparse_fill_avx512(const float *row, const ortx_sparse_fill *fill, float *dst) {
    ortx_sparse_fill_portable(row, fill, dst);
}

void ortx_sparse_transpose_avx512(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst,
                                  int64_t ldd, const float *add) {
    ortx_sparse_transpose_portable(src, lds, rows, cols, dst, ldd, add);
}

void ortx_sparse_patch_avx512(const float *source, const int32_t *taps, int64_t rows, const ortx_sparse_runs *runs,
                              float *dst, int64_t ldd) {
    ortx_sparse_patch_portable(source, taps, rows, runs, dst, ldd);
}

void ortx_sparse_rows_avx512(const ortx_sparse_matrix *w, int64_t panel, int64_t block_begin, int64_t block_end,
                             const float *b, int64_t ldb, int64_t ncols, float *c, int64_t ldc,
                             const ortx_sparse_epilogue *e) {
    ortx_sparse_rows_portable(w, panel, block_begin, block_end, b, ldb, ncols, c, ldc, e);
}
#endif
