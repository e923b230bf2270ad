/* Family "gemm": the packed, cache-blocked SGEMM driver, operand packing and the gemm kernels.
 *
 * The driver (ortx_sgemm) follows GotoBLAS/BLIS, see gemm.h for the blocking and the packed-panel format:
 *   1. split the output between threads: over N in NR-column units when N has enough panels (each thread then
 *      packs only its own B columns), else over M in MR-row units;
 *   2. per thread: for each NC block of columns, for each KC block of depth, pack B's KC x NC block (or use the
 *      prepacked panels), for each MC block of rows pack A's block (or use prepacked panels, or read a raw
 *      row-major A in place: the micro-kernels broadcast from its rows, and only a last partial panel is packed),
 *      then run the micro-kernel over every MR x NR tile, B micro-panel outer so it stays in L1;
 *   3. after a tile's last KC block, apply the epilogue to it: in the micro-kernel's registers before its only
 *      store where the ISA supports it (so each output line is written once), else on the tile while in L1.
 * Each output element is summed in the same order whatever the thread split, so results are bitwise identical
 * run to run (and across thread counts). Edge tiles run the full micro-kernel on a scratch tile.
 * The ISA-specific pieces (micro-kernels, epilogue) come from one table indexed by ortx_selected_isa().
 */
#include <string.h>

#include "activation.h"
#include "gemm.h"
#include "ortx_kernels.h"
#include "threadpool.h"

static const ortx_gemm_isa *const isa_table[] = {
    [ORTX_ISA_PORTABLE] = &ortx_gemm_isa_portable,
    [ORTX_ISA_AVX2] = &ortx_gemm_isa_avx2,
    [ORTX_ISA_AVX512] = &ortx_gemm_isa_avx512,
};

const ortx_gemm_isa *ortx_gemm_select_isa(void) { return isa_table[ortx_selected_isa()]; }

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Width of the B blocks sgemm_range packs: NC, or for few rows (a task's rows fit one MC block: the B block is not
 * reused across row blocks) an L2-sized width of at most 128 KB, at least one panel pair. */
static int64_t b_block_width(int few_rows, int64_t K) {
    if (!few_rows) return ORTX_GEMM_NC;
    int64_t kc_max = min64(ORTX_GEMM_KC, K > 0 ? K : 1);
    /* whole panel pairs, so every tile of the block is a wide one (K = 147, ResNet's stem: 13 panels left a lone
     * one per block, run by the 6x16 tile at half the wide tile's rate: 7% of the conv's time) */
    return min64(ORTX_GEMM_NC, max64(2 * ORTX_GEMM_NR, (32768 / kc_max) / (2 * ORTX_GEMM_NR) * (2 * ORTX_GEMM_NR)));
}

/* Per thread: the MC x KC block of A unless A is prepacked (a raw A read in place still packs its tail panel
 * there), then the KC x width block of B unless B is prepacked, plus 64 bytes to align each thread's slice.
 * With M <= MC every task has few rows, so the B block is the narrow one. */
static int64_t a_block_floats(int64_t M, int64_t K, int a_packed) {
    if (a_packed) return 0;
    int64_t mc = min64(ORTX_GEMM_MC, ortx_round_up(M, ORTX_GEMM_MR));
    return (mc * min64(ORTX_GEMM_KC, K > 0 ? K : 1) + 15) & ~(int64_t)15;
}

static int64_t thread_floats(int64_t M, int64_t N, int64_t K, int a_packed, int b_packed) {
    int64_t kc = min64(ORTX_GEMM_KC, K > 0 ? K : 1);
    int64_t nc = min64(b_block_width(ortx_round_up(M, ORTX_GEMM_MR) <= ORTX_GEMM_MC, K), ortx_round_up(N, ORTX_GEMM_NR));
    return a_block_floats(M, K, a_packed) + (b_packed ? 0 : kc * nc) + 16;
}

int64_t ortx_sgemm_workspace_floats(int64_t M, int64_t N, int64_t K, int a_packed, int b_packed, int num_threads) {
    return (num_threads < 1 ? 1 : num_threads) * thread_floats(M, N, K, a_packed, b_packed) + 16;
}

float ortx_gemm_epilogue_scalar(const ortx_gemm_epilogue *e, float acc, int64_t row, int64_t col) {
    float value = e->alpha * acc;
    if (e->bias_row) value += e->bias_row[row];
    if (e->bias_col) value += e->bias_col[col];
    if (e->residual) value += e->residual_scale * e->residual[row * e->residual_row_stride + col * e->residual_col_stride];
    return ortx_activation_scalar(e->activation, value, e->param0, e->param1);
}

void ortx_gemm_pack(const float *src, int64_t rows, int64_t depth, int64_t row_stride, int64_t col_stride,
                    int64_t panel, float scale, float *dst) {
    int64_t rows_padded = ortx_round_up(rows, panel);
    for (int64_t k0 = 0; k0 < depth; k0 += ORTX_GEMM_KC) {
        int64_t kc = min64(ORTX_GEMM_KC, depth - k0);
        float *block = dst + k0 * rows_padded;
        for (int64_t r0 = 0; r0 < rows_padded; r0 += panel) {
            float *out = block + r0 * kc;
            for (int64_t r = 0; r < panel; r++) {
                if (r0 + r >= rows) {
                    for (int64_t k = 0; k < kc; k++) out[k * panel + r] = 0.0f;
                    continue;
                }
                const float *in = src + (r0 + r) * row_stride + k0 * col_stride;
                for (int64_t k = 0; k < kc; k++) out[k * panel + r] = scale * in[k * col_stride];
            }
        }
    }
}

/* Packs B[k0:k0+kc, n0:n0+nc] (raw) into NR-column panels. Row-major B (col_stride 1) is read row by row, so
 * reads stream along memory and each write is one whole 64-byte panel row. A transposed B (row_stride 1: column n's
 * k values are consecutive, as attention's K^T) goes through the ISA's 16 x 16 transpose, 16 k at a time: the
 * scalar loop below wrote one float per iteration (BERT-like attention, 1 thread: 0.185 -> 0.171 ms a call). */
static void pack_b_block(const ortx_gemm_isa *isa, const ortx_gemm_operand *B, int64_t k0, int64_t kc, int64_t n0,
                         int64_t nc, float *dst) {
    const int64_t NR = ORTX_GEMM_NR;
    int64_t full = nc / NR * NR;
    if (B->row_stride == 1 && B->col_stride != 1 && isa->transpose != NULL) {
        for (int64_t j0 = 0; j0 < nc; j0 += NR) {
            float *out = dst + j0 * kc;
            int64_t width = min64(NR, nc - j0);
            const float *in = B->data + k0 + (n0 + j0) * B->col_stride;
            for (int64_t k = 0; k < kc; k += 16)
                isa->transpose(in + k, B->col_stride, width, min64(16, kc - k), out + k * NR, NR);
            for (int64_t k = 0; width < NR && k < kc; k++)
                memset(out + k * NR + width, 0, (NR - width) * sizeof(float));
        }
        return;
    }
    if (B->col_stride == 1) {
        for (int64_t k = 0; k < kc; k++) {
            const float *in = B->data + (k0 + k) * B->row_stride + n0;
            for (int64_t j0 = 0; j0 < full; j0 += NR) memcpy(dst + j0 * kc + k * NR, in + j0, NR * sizeof(float));
            if (full < nc) {
                float *out = dst + full * kc + k * NR;
                for (int64_t j = 0; j < NR; j++) out[j] = full + j < nc ? in[full + j] : 0.0f;
            }
        }
        return;
    }
    for (int64_t j0 = 0; j0 < nc; j0 += NR) {
        float *out = dst + j0 * kc;
        int64_t width = min64(NR, nc - j0);
        const float *in = B->data + k0 * B->row_stride + (n0 + j0) * B->col_stride;
        for (int64_t j = 0; j < NR; j++) {
            if (j >= width) {
                for (int64_t k = 0; k < kc; k++) out[k * NR + j] = 0.0f;
                continue;
            }
            const float *column = in + j * B->col_stride;
            for (int64_t k = 0; k < kc; k++) out[k * NR + j] = column[k * B->row_stride];
        }
    }
}

/* Packs A[m0:m0+mc, k0:k0+kc] (raw) into MR-row panels. */
static void pack_a_block(const ortx_gemm_operand *A, int64_t m0, int64_t mc, int64_t k0, int64_t kc, float *dst) {
    const int64_t MR = ORTX_GEMM_MR;
    for (int64_t i0 = 0; i0 < mc; i0 += MR) {
        float *out = dst + i0 * kc;
        int64_t height = min64(MR, mc - i0);
        for (int64_t i = 0; i < MR; i++) {
            if (i >= height) {
                for (int64_t k = 0; k < kc; k++) out[k * MR + i] = 0.0f;
                continue;
            }
            const float *row = A->data + (m0 + i0 + i) * A->row_stride + k0 * A->col_stride;
            if (A->col_stride == 1) {
                for (int64_t k = 0; k < kc; k++) out[k * MR + i] = row[k];
            } else {
                for (int64_t k = 0; k < kc; k++) out[k * MR + i] = row[k * A->col_stride];
            }
        }
    }
}

/* A's block for the micro-kernels: packed MR-row panels, or (a raw row-major A) its rows read in place with
 * only the last partial panel packed, since its missing rows do not exist to be read. */
typedef struct a_block {
    const float *panels;  /* packed: panel ir at panels + ir*kc; NULL when read in place */
    const float *rows;    /* in place: element (ir + i, k) of the block at rows[(ir + i)*lda + k] */
    int64_t lda;
    const float *tail;    /* in place: the packed last panel when it has fewer than MR rows */
} a_block;

/* One tile at c (rows x cols valid) from A (packed panel a, or in place at a with row stride lda > 0) and panel
 * b (kc x NR); epilogue (or NULL) after the last K block. Edge tiles run the full micro-kernel on a scratch tile. */
static inline void run_tile(const ortx_gemm_isa *isa, int64_t kc, const float *a, int64_t lda, const float *b,
                            float *c, int64_t ldc, int64_t rows, int64_t cols, int accumulate,
                            const ortx_gemm_epilogue *epilogue, int64_t row0, int64_t col0) {
    const int64_t MR = ORTX_GEMM_MR, NR = ORTX_GEMM_NR;
    if (rows == MR && cols == NR) {
        if (lda > 0) {
            isa->micro_rows(kc, a, lda, b, c, ldc, accumulate, epilogue, row0, col0);
        } else {
            isa->micro(kc, a, b, c, ldc, accumulate, epilogue, row0, col0);
        }
        return;
    }
    float tile[ORTX_GEMM_MR * ORTX_GEMM_NR] __attribute__((aligned(64)));
    if (accumulate) {
        memset(tile, 0, sizeof(tile));
        for (int64_t i = 0; i < rows; i++) memcpy(tile + i * NR, c + i * ldc, cols * sizeof(float));
    }
    if (lda > 0) {
        isa->micro_rows(kc, a, lda, b, tile, NR, accumulate, NULL, 0, 0);
    } else {
        isa->micro(kc, a, b, tile, NR, accumulate, NULL, 0, 0);
    }
    for (int64_t i = 0; i < rows; i++) memcpy(c + i * ldc, tile + i * NR, cols * sizeof(float));
    if (epilogue) isa->epilogue(c, ldc, rows, cols, row0, col0, epilogue);
}

/* A wide tile of the block's last, partial row panel (rows < MR; A is a zero-padded packed panel there): one wide
 * micro-kernel call on a scratch tile, then the valid rows are copied out and the epilogue applied. Each element is
 * summed as the two narrow edge tiles summed it (same k order, same accumulate step), so results are unchanged;
 * two narrow calls cost ~2x a wide one per row panel (ResNet-18's 64-channel convs: 11 row panels, one partial). */
static void wide_edge_tile(const ortx_gemm_isa *isa, int64_t kc, const float *a, const float *b, float *c,
                           int64_t ldc, int64_t rows, int accumulate, const ortx_gemm_epilogue *epilogue,
                           int64_t row0, int64_t col0) {
    enum { MR = ORTX_GEMM_MR, WIDTH = 2 * ORTX_GEMM_NR };
    if (isa->micro_wide_partial != NULL) {  /* only the valid rows, straight into C */
        isa->micro_wide_partial(kc, a, b, c, ldc, accumulate, (int)rows);
        if (epilogue) isa->epilogue(c, ldc, rows, WIDTH, row0, col0, epilogue);
        return;
    }
    float tile[MR * WIDTH] __attribute__((aligned(64)));
    if (accumulate) {
        memset(tile, 0, sizeof(tile));
        for (int64_t i = 0; i < rows; i++) memcpy(tile + i * WIDTH, c + i * ldc, WIDTH * sizeof(float));
    }
    isa->micro_wide(kc, a, b, tile, WIDTH, accumulate, NULL, 0, 0);
    for (int64_t i = 0; i < rows; i++) memcpy(c + i * ldc, tile + i * WIDTH, WIDTH * sizeof(float));
    if (epilogue) isa->epilogue(c, ldc, rows, WIDTH, row0, col0, epilogue);
}

/* The tile at (ir, jr) of the current (ic, jc, pc) block; `wide` tiles span two B panels. */
static inline void block_tile(const ortx_gemm_isa *isa, int64_t kc, const a_block *A, const float *b_block,
                              float *C, int64_t ldc, int64_t ic, int64_t jc, int64_t ir, int64_t jr, int64_t mc,
                              int64_t cols, int wide, int accumulate, const ortx_gemm_epilogue *tile_epilogue) {
    const int64_t MR = ORTX_GEMM_MR;
    int64_t rows = min64(MR, mc - ir), row0 = ic + ir, col0 = jc + jr;
    float *c = C + row0 * ldc + col0;
    const float *b = b_block + jr * kc;
    int in_place = A->rows != NULL && rows == MR;
    const float *a = in_place ? A->rows + ir * A->lda : A->panels ? A->panels + ir * kc : A->tail;
    int64_t lda = in_place ? A->lda : 0;
    if (wide && rows == MR) {
        if (in_place) {
            isa->micro_rows_wide(kc, a, lda, b, c, ldc, accumulate, tile_epilogue, row0, col0);
        } else {
            isa->micro_wide(kc, a, b, c, ldc, accumulate, tile_epilogue, row0, col0);
        }
    } else if (wide) {
        wide_edge_tile(isa, kc, a, b, c, ldc, rows, accumulate, tile_epilogue, row0, col0);
    } else {
        run_tile(isa, kc, a, lda, b, c, ldc, rows, cols, accumulate, tile_epilogue, row0, col0);
    }
}

/* The 2*MR x 2*NR tile at (ir, jr) of the current block over two full row panels (micro_tall). */
static inline void tall_tile(const ortx_gemm_isa *isa, int64_t kc, const a_block *A, const float *b_block, float *C,
                             int64_t ldc, int64_t ic, int64_t jc, int64_t ir, int64_t jr, int accumulate,
                             const ortx_gemm_epilogue *tile_epilogue) {
    int64_t row0 = ic + ir, col0 = jc + jr;
    float *c = C + row0 * ldc + col0;
    const float *b = b_block + jr * kc;
    if (A->rows != NULL) {
        isa->micro_rows_tall(kc, A->rows + ir * A->lda, A->lda, b, c, ldc, accumulate, tile_epilogue, row0, col0);
    } else {
        isa->micro_tall(kc, A->panels + ir * kc, b, c, ldc, accumulate, tile_epilogue, row0, col0);
    }
}

/* Step 2 of the algorithm for output rows [m0, m1) x columns [n0, n1); m0 % MR == 0 and n0 % NR == 0.
 * Few rows (at most one MC block, typical of convs: M = output channels) means the B block is never reused
 * across row blocks, so it is cut to an L2-sized width and the tiles are swept row panel by row panel: each
 * output row is then written in long sequential runs instead of one 64-byte line per row per tile (rows_outer),
 * except on CPUs with two FMA ports (below). */
static void sgemm_range(const ortx_gemm_isa *isa, int64_t M, int64_t N, int64_t K, const ortx_gemm_operand *A,
                        const ortx_gemm_operand *B, float *C, int64_t ldc, const ortx_gemm_epilogue *epilogue,
                        int64_t m0, int64_t m1, int64_t n0, int64_t n1, float *a_buffer, float *b_buffer) {
    const int64_t MR = ORTX_GEMM_MR, NR = ORTX_GEMM_NR;
    int64_t m_padded = ortx_round_up(M, MR), n_padded = ortx_round_up(N, NR);
    int few_rows = m1 - m0 <= ORTX_GEMM_MC;
    /* With two 512-bit FMA ports a 6x32 tile consumes its 32 KB B panel pair faster than L2 delivers it, so there
     * the pair stays in L1 across the row panels (column tiles outer, the many-rows order): 1-6% faster on
     * Sapphire Rapids (M 24..144, N 784..12544, K 24..1152). The tile order does not change any sum. */
    int rows_outer = few_rows && !ortx_cpu_has_two_fma_ports();
    /* and there wide tiles take two row panels at once where both are full (micro_tall: 1-7% faster with K >= 576,
     * even with K 24..160) */
    int tall = isa->micro_tall != NULL && ortx_cpu_has_two_fma_ports();
    /* A raw row-major A is read in place (no packing, which every task splitting N would repeat). */
    int a_in_place = !A->packed && A->col_stride == 1 && isa->micro_rows != NULL &&
                     (isa->micro_wide == NULL || isa->micro_rows_wide != NULL);
    int64_t block_width = b_block_width(few_rows, K);
    for (int64_t jc = n0; jc < n1; jc += block_width) {
        int64_t nc = min64(block_width, n1 - jc);
        for (int64_t pc = 0; pc < K; pc += ORTX_GEMM_KC) {
            int64_t kc = min64(ORTX_GEMM_KC, K - pc);
            int accumulate = pc > 0;
            const ortx_gemm_epilogue *tile_epilogue = pc + kc == K ? epilogue : NULL;
            const float *b_block;
            if (B->packed) {
                b_block = B->data + pc * n_padded + jc * kc;
            } else if (B->pack_b) {
                B->pack_b(B->pack_context, pc, kc, jc, nc, b_buffer);
                b_block = b_buffer;
            } else {
                pack_b_block(isa, B, pc, kc, jc, nc, b_buffer);
                b_block = b_buffer;
            }
            for (int64_t ic = m0; ic < m1; ic += ORTX_GEMM_MC) {
                int64_t mc = min64(ORTX_GEMM_MC, m1 - ic);
                a_block a_view = {NULL, NULL, 0, NULL};
                if (A->packed) {
                    a_view.panels = A->data + pc * m_padded + ic * kc;
                } else if (a_in_place) {
                    int64_t full = mc / MR * MR;
                    a_view.rows = A->data + ic * A->row_stride + pc;
                    a_view.lda = A->row_stride;
                    if (full < mc) {
                        pack_a_block(A, ic + full, mc - full, pc, kc, a_buffer);
                        a_view.tail = a_buffer;
                    }
                } else {
                    pack_a_block(A, ic, mc, pc, kc, a_buffer);
                    a_view.panels = a_buffer;
                }
                if (rows_outer) {
                    for (int64_t ir = 0; ir < mc; ir += MR)
                        for (int64_t jr = 0; jr < nc;) {
                            int wide = isa->micro_wide != NULL && nc - jr >= 2 * NR;
                            int64_t cols = wide ? 2 * NR : min64(NR, nc - jr);
                            block_tile(isa, kc, &a_view, b_block, C, ldc, ic, jc, ir, jr, mc, cols, wide,
                                       accumulate, tile_epilogue);
                            jr += cols;
                        }
                } else {
                    for (int64_t jr = 0; jr < nc;) {
                        int wide = isa->micro_wide != NULL && nc - jr >= 2 * NR;
                        int64_t cols = wide ? 2 * NR : min64(NR, nc - jr);
                        for (int64_t ir = 0; ir < mc;) {
                            if (tall && wide && ir + 2 * MR <= mc) {
                                tall_tile(isa, kc, &a_view, b_block, C, ldc, ic, jc, ir, jr, accumulate,
                                          tile_epilogue);
                                ir += 2 * MR;
                            } else {
                                block_tile(isa, kc, &a_view, b_block, C, ldc, ic, jc, ir, jr, mc, cols, wide,
                                           accumulate, tile_epilogue);
                                ir += MR;
                            }
                        }
                        jr += cols;
                    }
                }
            }
        }
    }
}

/* Task t of `parts` takes the t-th slice of N (in NR panels) or of M (in MR panels); the
 * slice depends only on t, and every output element is summed in the same order in any slice. */
typedef struct sgemm_job {
    const ortx_gemm_isa *isa;
    int64_t M, N, K;
    const ortx_gemm_operand *A, *B;
    float *C;
    int64_t ldc;
    const ortx_gemm_epilogue *epilogue;
    uintptr_t base;
    int64_t per_thread, m_panels, n_panels;
    int split_n;
    int64_t parts;
} sgemm_job;

static void sgemm_task(void *context, int64_t task, int thread) {
    const sgemm_job *job = context;
    int64_t M = job->M, N = job->N, K = job->K;
    float *a_buffer = (float *)job->base + thread * job->per_thread;
    float *b_buffer = a_buffer + a_block_floats(M, K, job->A->packed);
    int64_t m0 = 0, m1 = M, n0 = 0, n1 = N;
    if (job->split_n) {
        n0 = job->n_panels * task / job->parts * ORTX_GEMM_NR;
        n1 = min64(N, job->n_panels * (task + 1) / job->parts * ORTX_GEMM_NR);
    } else {
        m0 = job->m_panels * task / job->parts * ORTX_GEMM_MR;
        m1 = min64(M, job->m_panels * (task + 1) / job->parts * ORTX_GEMM_MR);
    }
    if (m0 < m1 && n0 < n1)
        sgemm_range(job->isa, M, N, K, job->A, job->B, job->C, job->ldc, job->epilogue, m0, m1, n0, n1, a_buffer,
                    b_buffer);
}

void ortx_sgemm(int64_t M, int64_t N, int64_t K, const ortx_gemm_operand *A, const ortx_gemm_operand *B, float *C,
                int64_t ldc, const ortx_gemm_epilogue *epilogue, float *workspace, int num_threads) {
    const ortx_gemm_isa *isa = ortx_gemm_select_isa();
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {  /* empty reduction: the epilogue of zero */
        for (int64_t i = 0; i < M; i++) {
            memset(C + i * ldc, 0, N * sizeof(float));
            isa->epilogue(C + i * ldc, ldc, 1, N, i, 0, epilogue);
        }
        return;
    }
    int64_t m_panels = ortx_round_up(M, ORTX_GEMM_MR) / ORTX_GEMM_MR;
    int64_t n_panels = ortx_round_up(N, ORTX_GEMM_NR) / ORTX_GEMM_NR;
    int64_t per_thread = thread_floats(M, N, K, A->packed, B->packed);
    uintptr_t base = ((uintptr_t)workspace + 63) & ~(uintptr_t)63;
    int threads = num_threads < 1 ? 1 : num_threads;
    /* Below 512K multiply-adds waking a second thread costs more than it saves; splitting N needs a few panels per
     * thread for balance. (The bound was 2M, ~60 us on one core at peak; but such small products run far below
     * peak, 25-67 us for 0.8M-2M multiply-adds on one Intel model 167 core, and 14 shapes of 0.8M-2M took 7-37%
     * less time on two threads, none more.) Except when a large operand streams from memory (a classifier's GEMV,
     * M = 1: 1280 x 1000 weights took 0.23 ms on one core): a second core adds bandwidth. */
    if ((double)M * N * K < 512.0 * 1024 && (double)(M + N) * K < 256.0 * 1024) threads = 1;
    int split_n = n_panels >= 4 * threads || n_panels >= m_panels;
    /* Up to ORTX_TASKS_PER_THREAD tasks per thread, so a preempted thread's share is picked up in pieces; each task
     * keeps >= 4 N panels (it repacks A per task when A is raw) or >= 8 M panels (it repacks all of B). */
    int64_t parts = split_n ? n_panels / 4 : m_panels / 8;
    parts = max64(threads, min64(parts, (int64_t)ORTX_TASKS_PER_THREAD * threads));
    parts = parts / threads * threads;  /* equal shares: 3 parts on 2 threads would take 2/3 of the 1-thread time */
    sgemm_job job = {isa, M, N, K, A, B, C, ldc, epilogue, base, per_thread, m_panels, n_panels, split_n, parts};
    ortx_parallel_for(threads, parts, sgemm_task, &job);
}

/* ---------------------------------------------------------------------------------------------------------------
 * Kernels.
 *
 * gemm_f32: batched Y[b] = act(alpha * A[b] * B[b] + bias + residual_scale * R[b]), Y contiguous [batch, M, N].
 *   ints:    [0] M [1] N [2] K [3] batch [4] a_packed [5] a_row_stride [6] a_col_stride [7] b_packed
 *            [8] b_row_stride [9] b_col_stride [10] bias_mode (0 none, 1 per row of Y, 2 per column)
 *            [11] has_residual [12] r_row_stride [13] r_col_stride [14] r_batch_stride [15] activation
 *            [16] workspace_threads (the thread count the workspace was sized for; more threads are not used)
 *            [17 .. 17+batch) A element offsets per batch, [17+batch .. 17+2*batch) B element offsets per batch
 *   floats:  [0] alpha [1] residual_scale [2] activation param0 [3] param1
 *   buffers: [0] A [1] B [2] Y [3] workspace (gemm_sizes_f32 bytes) [4] bias (any buffer when bias_mode 0)
 *            [5] residual (any buffer when has_residual 0)
 *   Packed operands use gemm.h's format over the whole operand (offsets then point at each batch's packing).
 *
 * gemm_pack_f32: packs a raw matrix for use as a prepacked operand.
 *   ints:    [0] rows (A: M, B: N) [1] depth K [2] row_stride [3] col_stride [4] which (0: A panels, 1: B panels)
 *   floats:  [0] scale;   buffers: [0] source [1] destination (gemm_sizes_f32's packed size)
 *
 * gemm_sizes_f32: sizes the lowering allocates.
 *   ints:    [0] M [1] N [2] K [3] num_threads [4] a_packed [5] b_packed (prepacked operands need no packing buffer)
 *   buffers: [0] int64[3] out: workspace bytes, packed-A floats, packed-B floats
 * ------------------------------------------------------------------------------------------------------------- */

/* One task per batch problem; with by_batch each runs on one thread in that thread's workspace slice. */
typedef struct gemm_batch_job {
    const int64_t *ints;
    const float *floats;
    void *const *buffers;
    int64_t slice;
    int by_batch, threads;
} gemm_batch_job;

static void gemm_batch_task(void *context, int64_t b, int thread) {
    const gemm_batch_job *job = context;
    const int64_t *ints = job->ints;
    const float *floats = job->floats;
    int64_t M = ints[0], N = ints[1], K = ints[2], batch = ints[3];
    const float *a_data = job->buffers[0], *b_data = job->buffers[1];
    float *Y = job->buffers[2], *workspace = job->buffers[3];
    const float *bias = job->buffers[4], *residual = job->buffers[5];
    const int64_t *a_offsets = ints + 17, *b_offsets = ints + 17 + batch;
    ortx_gemm_operand A = {a_data + a_offsets[b], (int)ints[4], ints[5], ints[6], NULL, NULL};
    ortx_gemm_operand B = {b_data + b_offsets[b], (int)ints[7], ints[8], ints[9], NULL, NULL};
    ortx_gemm_epilogue epilogue = ortx_gemm_step_epilogue(ints, floats, bias, residual, b);
    float *scratch = job->by_batch ? workspace + thread * job->slice : workspace;
    ortx_sgemm(M, N, K, &A, &B, Y + b * M * N, N, &epilogue, scratch, job->by_batch ? 1 : job->threads);
}

static void gemm_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    int64_t M = ints[0], N = ints[1], K = ints[2], batch = ints[3];
    int by_batch;
    int threads = ortx_gemm_step_threads(ints, num_threads, &by_batch);
    int64_t slice = ortx_sgemm_workspace_floats(M, N, K, (int)ints[4], (int)ints[7], 1);
    gemm_batch_job job = {ints, floats, buffers, slice, by_batch, threads};
    ortx_parallel_for(by_batch ? threads : 1, batch, gemm_batch_task, &job);
}

static void gemm_pack_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    ortx_gemm_pack(buffers[0], ints[0], ints[1], ints[2], ints[3], ints[4] ? ORTX_GEMM_NR : ORTX_GEMM_MR, floats[0],
                   buffers[1]);
}

static void gemm_sizes_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    int64_t *out = buffers[0];
    /* gemm_f32 may run one problem per thread, each with a one-thread slice: the larger of the two layouts. */
    int a_packed = (int)ints[4], b_packed = (int)ints[5];
    int64_t shared = ortx_sgemm_workspace_floats(ints[0], ints[1], ints[2], a_packed, b_packed, (int)ints[3]);
    int64_t sliced = ints[3] * ortx_sgemm_workspace_floats(ints[0], ints[1], ints[2], a_packed, b_packed, 1);
    out[0] = (shared > sliced ? shared : sliced) * (int64_t)sizeof(float);
    out[1] = ortx_gemm_packed_a_floats(ints[0], ints[2]);
    out[2] = ortx_gemm_packed_b_floats(ints[2], ints[1]);
}

const ortx_kernel_entry ortx_family_gemm[] = {
    {"gemm_f32", gemm_f32, ortx_gemm_f32_ref},
    {"gemm_pack_f32", gemm_pack_f32, gemm_pack_f32},
    {"gemm_sizes_f32", gemm_sizes_f32, gemm_sizes_f32},
    {NULL, NULL, NULL},
};
