/* Family "bf16": the bf16 GEMM driver (operands rounded to bf16, fp32 accumulation), its packing, the portable
 * micro-kernel and the gemm_bf16 kernels; conv2d_bf16 is in conv_bf16.c, the AVX-512 BF16 pieces in
 * gemm_bf16_avx512.c. Numerics and the packed K-pair format: gemm_bf16.h.
 *
 * The driver (ortx_bgemm) is ortx_sgemm's (gemm.c) with bf16 panels:
 *   1. split the output between threads over N (NR-column units) or M (ORTX_BGEMM_MR-row units), as ortx_sgemm
 *      does; an operand every task would round again (raw A when N is split, B when M is) is rounded once,
 *      in parallel, into a shared K-pair copy first (plan_of);
 *   2. per thread: for each NC block of columns and K block (ortx_bgemm_block_depth), take B's panels (prepacked
 *      bf16, written by pack_pairs, or fp32 produced by pack_b / read raw and rounded to bf16 K pairs into the
 *      thread's buffer), then for each MC block of rows A's panels (prepacked, or raw fp32 rounded into K pairs),
 *      and run the micro-kernel over every MR x NR (or MR x 2NR) tile;
 *   3. after a tile's last K block, the fp32 epilogue (bias, residual, activation) on its fp32 accumulators.
 * Every output element is summed in the same order whatever the thread split. Edge tiles run the full
 * micro-kernel on a scratch tile. Known limits: A is always packed (no in-place read: rounding needs a copy).
 */
#include <string.h>

#include "activation.h"
#include "gemm_bf16.h"
#include "ortx_kernels.h"
#include "threadpool.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

const ortx_bgemm_isa *ortx_bgemm_select_isa(void) {
    if (ortx_selected_isa() == ORTX_ISA_AVX512 && ortx_cpu_has_avx512_bf16()) {
        if (ortx_amx_allowed() && ortx_cpu_has_amx_bf16()) return &ortx_bgemm_isa_amx_bf16;
        return &ortx_bgemm_isa_avx512_bf16;
    }
    return &ortx_bgemm_isa_portable;
}

/* Rows of the units that split M between tasks: a 2x2 step of C tiles on AMX, else an A panel. */
static int64_t row_unit(const ortx_bgemm_isa *isa) { return isa->a_tiles ? 2 * ORTX_BGEMM_TILE_ROWS : ORTX_BGEMM_MR; }

const char *ortx_bf16_isa_name(void) { return ortx_bgemm_select_isa()->name; }

/* ---------------------------------------------------------------------------------------------------------------
 * Packing.
 * ------------------------------------------------------------------------------------------------------------- */

void ortx_bgemm_pack(const float *src, int64_t rows, int64_t depth, int64_t row_stride, int64_t col_stride,
                     int64_t panel, float scale, uint16_t *dst) {
    int64_t rows_padded = ortx_round_up(rows, panel);
    const int64_t block = ortx_bgemm_block_depth(depth);
    for (int64_t k0 = 0; k0 < depth; k0 += block) {
        int64_t kc = min64(block, depth - k0), pairs = (kc + 1) / 2;
        for (int64_t r = 0; r < rows_padded; r++) {
            uint16_t *out = dst + k0 * rows_padded + (r / panel) * panel * 2 * pairs + (r % panel) * 2;
            for (int64_t k = 0; k < 2 * pairs; k++) {
                float value = r < rows && k < kc ? scale * src[r * row_stride + (k0 + k) * col_stride] : 0.0f;
                out[(k / 2) * panel * 2 + k % 2] = ortx_bf16_from_float(value);
            }
        }
    }
}

/* A in the tiles format (gemm_bf16.h): rows [0, rows) of src, rounded, row-major per K block, zero-padded. */
static void pack_a_tiles(const float *src, int64_t rows, int64_t depth, int64_t row_stride, int64_t col_stride,
                         float scale, uint16_t *dst) {
    const int64_t block = ortx_bgemm_block_depth(depth), rows_padded = ortx_round_up(rows, ORTX_BGEMM_TILE_ROWS);
    for (int64_t k0 = 0; k0 < depth; k0 += block) {
        int64_t kc = min64(block, depth - k0), width = 2 * ortx_bgemm_tile_pairs(kc);
        uint16_t *out = dst + ortx_bgemm_tiles_block_offset(k0, rows, depth);
        for (int64_t r = 0; r < rows_padded; r++)
            for (int64_t k = 0; k < width; k++)
                out[r * width + k] =
                    r < rows && k < kc ? ortx_bf16_from_float(scale * src[r * row_stride + (k0 + k) * col_stride]) : 0;
    }
}

int64_t ortx_bgemm_a_elements(int64_t rows, int64_t depth) {
    if (ortx_bgemm_select_isa()->a_tiles) return ortx_bgemm_tiles_elements(rows, depth);
    return ortx_bgemm_packed_elements(rows, depth, ORTX_BGEMM_MR);
}

int64_t ortx_bgemm_a_index(int64_t row, int64_t k, int64_t rows, int64_t depth) {
    if (ortx_bgemm_select_isa()->a_tiles) return ortx_bgemm_tiles_index(row, k, rows, depth);
    return ortx_bgemm_packed_index(row, k, rows, depth, ORTX_BGEMM_MR);
}

int64_t ortx_bgemm_a_block_offset(int64_t k0, int64_t rows, int64_t depth) {
    if (ortx_bgemm_select_isa()->a_tiles) return ortx_bgemm_tiles_block_offset(k0, rows, depth);
    return k0 * ortx_round_up(rows, ORTX_BGEMM_MR);
}

void ortx_bgemm_pack_a(const float *src, int64_t rows, int64_t depth, int64_t row_stride, int64_t col_stride,
                       float scale, uint16_t *dst) {
    if (ortx_bgemm_select_isa()->a_tiles)
        pack_a_tiles(src, rows, depth, row_stride, col_stride, scale, dst);
    else
        ortx_bgemm_pack(src, rows, depth, row_stride, col_stride, ORTX_BGEMM_MR, scale, dst);
}

/* gemm.h's fp32 B panels ([panels][kc][NR], as pack_b writes them) -> bf16 K-pair panels. */
static void pair_panels(const ortx_bgemm_isa *isa, const float *src, int64_t kc, int64_t nc, int64_t panel_pairs,
                        uint16_t *dst) {
    const int64_t NR = ORTX_GEMM_NR, pairs = (kc + 1) / 2;
    for (int64_t j0 = 0; j0 < nc; j0 += NR) {
        const float *panel = src + j0 * kc;
        uint16_t *out = dst + j0 * 2 * panel_pairs;
        for (int64_t q = 0; q < pairs; q++)
            isa->pair_rows(panel + 2 * q * NR, 2 * q + 1 < kc ? panel + (2 * q + 1) * NR : NULL, NR,
                           out + q * NR * 2);
    }
}

/* Raw fp32 B[k0:k0+kc, n0:n0+nc] (element (k, n) at data[k*rs + n*cs]) -> bf16 K-pair panels of panel_pairs rows. */
static void pack_b_raw(const ortx_bgemm_isa *isa, const ortx_bgemm_operand *B, int64_t k0, int64_t kc, int64_t n0,
                       int64_t nc, int64_t panel_pairs, uint16_t *dst) {
    const int64_t NR = ORTX_GEMM_NR, pairs = (kc + 1) / 2;
    if (B->col_stride == 1) {  /* each pair of rows in one run over the panels */
        for (int64_t q = 0; q < pairs; q++) {
            const float *first = B->data + (k0 + 2 * q) * B->row_stride + n0;
            isa->pair_run(first, 2 * q + 1 < kc ? first + B->row_stride : NULL, nc, dst + q * NR * 2,
                          2 * panel_pairs * NR, 1);
        }
        return;
    }
    for (int64_t j0 = 0; j0 < nc; j0 += NR) {
        int64_t width = min64(NR, nc - j0);
        uint16_t *out = dst + j0 * 2 * panel_pairs;
        for (int64_t q = 0; q < pairs; q++) {
            const float *first = B->data + (k0 + 2 * q) * B->row_stride + (n0 + j0) * B->col_stride;
            const float *second = 2 * q + 1 < kc ? first + B->row_stride : NULL;
            for (int64_t j = 0; j < NR; j++) {
                out[q * NR * 2 + 2 * j] = j < width ? ortx_bf16_from_float(first[j * B->col_stride]) : 0;
                out[q * NR * 2 + 2 * j + 1] =
                    j < width && second ? ortx_bf16_from_float(second[j * B->col_stride]) : 0;
            }
        }
    }
}

/* Raw fp32 A[m0:m0+mc, k0:k0+kc] -> bf16 K-pair panels of MR rows: each row is rounded in one pass, then its
 * 32-bit pairs are dealt out with the panel's stride. */
static void pack_a_raw(const ortx_bgemm_isa *isa, const ortx_bgemm_operand *A, int64_t m0, int64_t mc, int64_t k0,
                       int64_t kc, uint16_t *dst) {
    const int64_t MR = ORTX_BGEMM_MR, pairs = (kc + 1) / 2;
    uint16_t row_bf16[ORTX_BGEMM_KC_MAX + 2] __attribute__((aligned(64)));
    if (isa->a_tiles) {  /* rows of the tiles format, rounded in place */
        int64_t width = 2 * ortx_bgemm_tile_pairs(kc);
        for (int64_t i = 0; i < ortx_round_up(mc, ORTX_BGEMM_TILE_ROWS); i++) {
            uint16_t *out = dst + i * width;
            int64_t done = 0;
            if (i < mc) {
                const float *row = A->data + (m0 + i) * A->row_stride + k0 * A->col_stride;
                if (A->col_stride == 1) {
                    isa->convert(row, kc, out);
                } else {
                    for (int64_t k = 0; k < kc; k++) out[k] = ortx_bf16_from_float(row[k * A->col_stride]);
                }
                done = kc;
            }
            memset(out + done, 0, (width - done) * sizeof(uint16_t));
        }
        return;
    }
    for (int64_t i0 = 0; i0 < mc; i0 += MR) {
        uint16_t *out = dst + i0 * 2 * pairs;
        for (int64_t i = 0; i < MR; i++) {
            if (i0 + i >= mc) {
                for (int64_t q = 0; q < pairs; q++) out[(q * MR + i) * 2] = out[(q * MR + i) * 2 + 1] = 0;
                continue;
            }
            const float *row = A->data + (m0 + i0 + i) * A->row_stride + k0 * A->col_stride;
            if (A->col_stride == 1) {
                isa->convert(row, kc, row_bf16);
            } else {
                for (int64_t k = 0; k < kc; k++) row_bf16[k] = ortx_bf16_from_float(row[k * A->col_stride]);
            }
            row_bf16[kc] = 0;
            for (int64_t q = 0; q < pairs; q++) memcpy(out + (q * MR + i) * 2, row_bf16 + 2 * q, 2 * sizeof(uint16_t));
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------------
 * Driver.
 * ------------------------------------------------------------------------------------------------------------- */

/* Per thread, in floats: A's MC x KC block and B's KC x NC block in bf16 (A big enough for either format), B's
 * fp32 block (pack_b's output), the AMX block's B tails, and 64 bytes of alignment slack for each. */
typedef struct thread_layout {
    int64_t a_floats, b_floats, stage_floats, tail_floats;
} thread_layout;

static thread_layout layout_of(int64_t M, int64_t N, int64_t K) {
    int64_t mc = min64(ORTX_GEMM_MC, ortx_round_up(M, ORTX_BGEMM_MR));
    int64_t nc = min64(ORTX_GEMM_NC, ortx_round_up(N, ORTX_GEMM_NR));
    int64_t kc = ortx_bgemm_block_depth(K);
    int64_t a_tiles = ortx_round_up(mc, ORTX_BGEMM_TILE_ROWS) * ortx_bgemm_tile_pairs(kc);
    thread_layout layout = {ortx_round_up(max64(mc * kc / 2, a_tiles), 16),
                            ortx_round_up(max64(kc * nc / 2, ortx_bgemm_tile_pairs(kc) * nc), 16),
                            ortx_round_up(kc * nc, 16), nc * ORTX_BGEMM_TILE_PAIRS};
    return layout;
}

static int64_t thread_floats(int64_t M, int64_t N, int64_t K) {
    thread_layout layout = layout_of(M, N, K);
    return layout.a_floats + layout.b_floats + layout.stage_floats + layout.tail_floats + 16;
}

/* How ortx_bgemm splits the work on `num_threads` threads (step 1). When tasks split M and B is produced at run
 * time, each task would round all of B again (8 tasks: 8 times; ResNet-18's 512 @7x7 3x3 convs, whose im2col
 * gathers are slow): B is then rounded once, in parallel, into one shared K-pair copy (up to SHARED_MAX
 * elements) that every task reads as prepacked. Likewise a raw A when tasks split N (the activations of a
 * Gemm/MatMul: BERT's 128 x 256 x 1024 rounded A 8 times). */
#define SHARED_MAX (4 << 20)

typedef struct bgemm_plan {
    int threads, split_n, shared_a, shared_b;
    int64_t parts;
} bgemm_plan;

static bgemm_plan plan_of(int64_t M, int64_t N, int64_t K, int num_threads, int a_is_packed, int b_is_packed) {
    int64_t m_panels = ortx_round_up(M, ORTX_BGEMM_MR) / ORTX_BGEMM_MR;
    int64_t n_panels = ortx_round_up(N, ORTX_GEMM_NR) / ORTX_GEMM_NR;
    bgemm_plan plan;
    plan.threads = num_threads < 1 ? 1 : num_threads;
    /* one thread below ~2M multiply-adds unless a large operand streams from memory (ortx_sgemm's rule until its
     * fp32 bound was measured lower; not re-measured for bf16) */
    if ((double)M * N * K < 128.0 * 128 * 128 && (double)(M + N) * K < 256.0 * 1024) plan.threads = 1;
    plan.split_n = n_panels >= 4 * plan.threads || n_panels >= m_panels;
    int64_t parts = plan.split_n ? n_panels / 4 : m_panels / 8;
    parts = max64(plan.threads, min64(parts, (int64_t)ORTX_TASKS_PER_THREAD * plan.threads));
    plan.parts = parts / plan.threads * plan.threads;
    plan.shared_b = !b_is_packed && !plan.split_n && plan.parts > 1 &&
                    ortx_bgemm_packed_elements(N, K, ORTX_GEMM_NR) <= SHARED_MAX;
    plan.shared_a = !a_is_packed && plan.split_n && plan.parts > 1 && ortx_bgemm_a_elements(M, K) <= SHARED_MAX;
    return plan;
}

static int64_t shared_floats(int64_t elements) { return ortx_round_up(elements / 2 + 1, 16); }

int64_t ortx_bgemm_workspace_floats(int64_t M, int64_t N, int64_t K, int num_threads) {
    int threads = num_threads < 1 ? 1 : num_threads, shared_a = 0, shared_b = 0;
    for (int t = 1; t <= threads; t++) {  /* a kernel may run on fewer threads than it was sized for */
        bgemm_plan plan = plan_of(M, N, K, t, 0, 0);
        shared_a |= plan.shared_a;
        shared_b |= plan.shared_b;
    }
    return threads * thread_floats(M, N, K) + (shared_a ? shared_floats(ortx_bgemm_a_elements(M, K)) : 0) +
           (shared_b ? shared_floats(ortx_bgemm_packed_elements(N, K, ORTX_GEMM_NR)) : 0) + 16;
}

/* One tile at c (rows x cols valid; `vectors` B panels); edge tiles through a scratch tile. */
static inline void run_tile(const ortx_bgemm_isa *isa, int64_t pairs, const uint16_t *a, const uint16_t *b, float *c,
                            int64_t ldc, int64_t rows, int64_t cols, int vectors, int accumulate,
                            const ortx_gemm_epilogue *epilogue, int64_t row0, int64_t col0) {
    const int64_t MR = ORTX_BGEMM_MR, width = vectors * ORTX_GEMM_NR;
    ortx_bgemm_micro_fn micro = vectors == 2 ? isa->micro_wide : isa->micro;
    if (rows == MR && cols == width) {
        micro(pairs, a, b, c, ldc, accumulate, epilogue, row0, col0);
        return;
    }
    float tile[ORTX_BGEMM_MR * 2 * ORTX_GEMM_NR] __attribute__((aligned(64)));
    if (accumulate) {
        memset(tile, 0, sizeof(tile));
        for (int64_t i = 0; i < rows; i++) memcpy(tile + i * width, c + i * ldc, cols * sizeof(float));
    }
    micro(pairs, a, b, tile, width, accumulate, NULL, 0, 0);
    for (int64_t i = 0; i < rows; i++) memcpy(c + i * ldc, tile + i * width, cols * sizeof(float));
    if (epilogue) ortx_gemm_select_isa()->epilogue(c, ldc, rows, cols, row0, col0, epilogue);
}

typedef struct bgemm_job {
    const ortx_bgemm_isa *isa;
    int64_t M, N, K;
    const ortx_bgemm_operand *A, *B;
    float *C;
    int64_t ldc;
    const ortx_gemm_epilogue *epilogue;
    uintptr_t base;
    int64_t per_thread, m_panels, n_panels;
    int split_n;
    int64_t parts;
} bgemm_job;

/* The tile at (ir, jr) of the current (ic, jc, pc) block. */
static inline void block_tile(const bgemm_job *job, int64_t pairs, const uint16_t *a_block, const uint16_t *b_block,
                              int64_t ic, int64_t jc, int64_t ir, int64_t jr, int64_t mc, int64_t cols, int vectors,
                              int accumulate, const ortx_gemm_epilogue *tile_epilogue) {
    int64_t rows = min64(ORTX_BGEMM_MR, mc - ir);
    run_tile(job->isa, pairs, a_block + ir * 2 * pairs, b_block + jr * 2 * pairs,
             job->C + (ic + ir) * job->ldc + jc + jr, job->ldc, rows, cols, vectors, accumulate, tile_epilogue,
             ic + ir, jc + jr);
}

/* Step 2 for output rows [m0, m1) x columns [n0, n1); m0 % MR == 0 and n0 % NR == 0. As in ortx_sgemm, few rows
 * (at most one MC block) cut B's block to an L2-sized width and sweep the tiles row panel by row panel. */
static void bgemm_range(const bgemm_job *job, int64_t m0, int64_t m1, int64_t n0, int64_t n1, uint16_t *a_buffer,
                        uint16_t *b_buffer, float *stage, uint16_t *tail) {
    const ortx_bgemm_isa *isa = job->isa;
    const ortx_bgemm_operand *A = job->A, *B = job->B;
    const int64_t MR = ORTX_BGEMM_MR, NR = ORTX_GEMM_NR, M = job->M, N = job->N, K = job->K;
    int64_t n_padded = ortx_round_up(N, NR);
    int few_rows = m1 - m0 <= ORTX_GEMM_MC;
    int64_t block_width = ORTX_GEMM_NC;
    const int64_t block = ortx_bgemm_block_depth(K);
    if (few_rows) block_width = min64(ORTX_GEMM_NC, max64(2 * NR, (65536 / block) / NR * NR));  /* 128 KB of B */
    for (int64_t jc = n0; jc < n1; jc += block_width) {
        int64_t nc = min64(block_width, n1 - jc);
        for (int64_t pc = 0; pc < K; pc += block) {
            int64_t kc = min64(block, K - pc), pairs = (kc + 1) / 2;
            int accumulate = pc > 0;
            const ortx_gemm_epilogue *tile_epilogue = pc + kc == K ? job->epilogue : NULL;
            const uint16_t *b_block = b_buffer;
            /* panels packed here hold whole 16-pair chunks on AMX (zero rows past the last pair: no tail copies) */
            int64_t panel_pairs = isa->a_tiles && !B->packed ? ortx_bgemm_tile_pairs(kc) : pairs;
            if (B->packed) {
                b_block = B->packed + pc * n_padded + jc * 2 * pairs;
            } else if (B->pack_pairs) {
                B->pack_pairs(B->pack_context, pc, kc, jc, nc, panel_pairs, b_buffer);
            } else if (B->pack_b) {
                B->pack_b(B->pack_context, pc, kc, jc, nc, stage);
                pair_panels(isa, stage, kc, nc, panel_pairs, b_buffer);
            } else {
                pack_b_raw(isa, B, pc, kc, jc, nc, panel_pairs, b_buffer);
            }
            if (panel_pairs > pairs)
                for (int64_t j0 = 0; j0 < nc; j0 += NR)
                    memset(b_buffer + (j0 * panel_pairs + pairs * NR) * 2, 0,
                           (panel_pairs - pairs) * NR * 2 * sizeof(uint16_t));
            for (int64_t ic = m0; ic < m1; ic += ORTX_GEMM_MC) {
                int64_t mc = min64(ORTX_GEMM_MC, m1 - ic);
                const uint16_t *a_block = a_buffer;
                if (A->packed) {
                    a_block = A->packed + ortx_bgemm_a_block_offset(pc, M, K) +
                              ic * 2 * (isa->a_tiles ? ortx_bgemm_tile_pairs(kc) : pairs);
                } else {
                    pack_a_raw(isa, A, ic, mc, pc, kc, a_buffer);
                }
                if (isa->a_tiles) {
                    isa->block(pairs, a_block, b_block, panel_pairs, mc, nc, job->C + ic * job->ldc + jc, job->ldc,
                               accumulate, tile_epilogue, ic, jc, tail);
                } else if (few_rows) {
                    for (int64_t ir = 0; ir < mc; ir += MR)
                        for (int64_t jr = 0; jr < nc;) {
                            int vectors = nc - jr >= 2 * NR ? 2 : 1;
                            int64_t cols = min64(vectors * NR, nc - jr);
                            block_tile(job, pairs, a_block, b_block, ic, jc, ir, jr, mc, cols, vectors, accumulate,
                                       tile_epilogue);
                            jr += cols;
                        }
                } else {
                    for (int64_t jr = 0; jr < nc;) {
                        int vectors = nc - jr >= 2 * NR ? 2 : 1;
                        int64_t cols = min64(vectors * NR, nc - jr);
                        for (int64_t ir = 0; ir < mc; ir += MR)
                            block_tile(job, pairs, a_block, b_block, ic, jc, ir, jr, mc, cols, vectors, accumulate,
                                       tile_epilogue);
                        jr += cols;
                    }
                }
            }
        }
    }
}

static void bgemm_task(void *context, int64_t task, int thread) {
    const bgemm_job *job = context;
    thread_layout layout = layout_of(job->M, job->N, job->K);
    float *base = (float *)job->base + thread * job->per_thread;
    uint16_t *a_buffer = (uint16_t *)base, *b_buffer = (uint16_t *)(base + layout.a_floats);
    float *stage = base + layout.a_floats + layout.b_floats;
    uint16_t *tail = (uint16_t *)(stage + layout.stage_floats);
    int64_t m0 = 0, m1 = job->M, n0 = 0, n1 = job->N, unit = row_unit(job->isa);
    if (job->split_n) {
        n0 = job->n_panels * task / job->parts * ORTX_GEMM_NR;
        n1 = min64(job->N, job->n_panels * (task + 1) / job->parts * ORTX_GEMM_NR);
    } else {
        m0 = min64(job->M, ortx_round_up(job->m_panels * task / job->parts * ORTX_BGEMM_MR, unit));
        m1 = min64(job->M, ortx_round_up(job->m_panels * (task + 1) / job->parts * ORTX_BGEMM_MR, unit));
    }
    if (m0 >= m1 || n0 >= n1) return;
    ortx_tile_state saved;
    if (job->isa->a_tiles) job->isa->tiles_begin(&saved);
    bgemm_range(job, m0, m1, n0, n1, a_buffer, b_buffer, stage, tail);
    if (job->isa->a_tiles) job->isa->tiles_end(&saved);
}

/* Rounds B's (K block, NC block) `task` into the shared K-pair copy, through the thread's staging buffer. */
typedef struct shared_job {
    const bgemm_job *job;
    uint16_t *packed;
    int64_t n_blocks;
} shared_job;

static void shared_b_task(void *context, int64_t task, int thread) {
    const shared_job *pack = context;
    const bgemm_job *job = pack->job;
    const ortx_bgemm_operand *B = job->B;
    thread_layout layout = layout_of(job->M, job->N, job->K);
    float *stage = (float *)job->base + thread * job->per_thread + layout.a_floats + layout.b_floats;
    int64_t block = ortx_bgemm_block_depth(job->K);
    int64_t pc = task / pack->n_blocks * block, jc = task % pack->n_blocks * ORTX_GEMM_NC;
    int64_t kc = min64(block, job->K - pc), nc = min64(ORTX_GEMM_NC, job->N - jc);
    uint16_t *dst = pack->packed + pc * ortx_round_up(job->N, ORTX_GEMM_NR) + jc * 2 * ((kc + 1) / 2);
    int64_t pairs = (kc + 1) / 2;  /* the shared copy is read as prepacked: the standard panels */
    if (B->pack_pairs) {
        B->pack_pairs(B->pack_context, pc, kc, jc, nc, pairs, dst);
    } else if (B->pack_b) {
        B->pack_b(B->pack_context, pc, kc, jc, nc, stage);
        pair_panels(job->isa, stage, kc, nc, pairs, dst);
    } else {
        pack_b_raw(job->isa, B, pc, kc, jc, nc, pairs, dst);
    }
}

/* Rounds A's (K block, MC block) `task` into the shared K-pair copy. */
static void shared_a_task(void *context, int64_t task, int thread) {
    (void)thread;
    const shared_job *pack = context;  /* n_blocks counts MC blocks here */
    const bgemm_job *job = pack->job;
    int64_t block = ortx_bgemm_block_depth(job->K);
    int64_t pc = task / pack->n_blocks * block, ic = task % pack->n_blocks * ORTX_GEMM_MC;
    int64_t kc = min64(block, job->K - pc), mc = min64(ORTX_GEMM_MC, job->M - ic);
    int64_t row_pairs = job->isa->a_tiles ? ortx_bgemm_tile_pairs(kc) : (kc + 1) / 2;
    pack_a_raw(job->isa, job->A, ic, mc, pc, kc,
               pack->packed + ortx_bgemm_a_block_offset(pc, job->M, job->K) + ic * 2 * row_pairs);
}

void ortx_bgemm(int64_t M, int64_t N, int64_t K, const ortx_bgemm_operand *A, const ortx_bgemm_operand *B, float *C,
                int64_t ldc, const ortx_gemm_epilogue *epilogue, float *workspace, int num_threads) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {  /* empty reduction: the epilogue of zero */
        for (int64_t i = 0; i < M; i++) {
            memset(C + i * ldc, 0, N * sizeof(float));
            ortx_gemm_select_isa()->epilogue(C + i * ldc, ldc, 1, N, i, 0, epilogue);
        }
        return;
    }
    int64_t m_panels = ortx_round_up(M, ORTX_BGEMM_MR) / ORTX_BGEMM_MR;
    int64_t n_panels = ortx_round_up(N, ORTX_GEMM_NR) / ORTX_GEMM_NR;
    bgemm_plan plan = plan_of(M, N, K, num_threads, A->packed != NULL, B->packed != NULL);
    bgemm_job job = {ortx_bgemm_select_isa(), M, N, K, A, B, C, ldc, epilogue,
                     ((uintptr_t)workspace + 63) & ~(uintptr_t)63, thread_floats(M, N, K), m_panels, n_panels,
                     plan.split_n, plan.parts};
    ortx_bgemm_operand shared_a = {NULL, NULL, 0, 0, NULL, NULL, NULL}, shared_b = shared_a;
    float *shared = (float *)job.base + plan.threads * job.per_thread;
    int64_t block = ortx_bgemm_block_depth(K), k_blocks = (K + block - 1) / block;
    if (plan.shared_b) {
        int64_t n_blocks = (N + ORTX_GEMM_NC - 1) / ORTX_GEMM_NC;
        shared_job pack = {&job, (uint16_t *)shared, n_blocks};
        ortx_parallel_for(plan.threads, k_blocks * n_blocks, shared_b_task, &pack);
        shared_b.packed = (uint16_t *)shared;
        job.B = &shared_b;
        shared += shared_floats(ortx_bgemm_packed_elements(N, K, ORTX_GEMM_NR));
    }
    if (plan.shared_a) {
        int64_t m_blocks = (M + ORTX_GEMM_MC - 1) / ORTX_GEMM_MC;
        shared_job pack = {&job, (uint16_t *)shared, m_blocks};
        ortx_parallel_for(plan.threads, k_blocks * m_blocks, shared_a_task, &pack);
        shared_a.packed = (uint16_t *)shared;
        job.A = &shared_a;
    }
    ortx_parallel_for(plan.threads, plan.parts, bgemm_task, &job);
}

/* ---------------------------------------------------------------------------------------------------------------
 * Kernels.
 *
 * gemm_bf16: gemm_f32's ints, floats and buffers (kernels/gemm.c), with bf16 numerics; a packed A or B is in
 *   gemm_bf16.h's K-pair format (uint16 elements; its batch offsets count elements), a raw one is fp32.
 * gemm_pack_bf16: ints [0] rows (A: M, B: N) [1] depth K [2] row_stride [3] col_stride [4] which (0: A, 1: B);
 *   floats [0] scale; buffers [0] fp32 source [1] destination (gemm_sizes_bf16's packed elements, uint16).
 * gemm_sizes_bf16: ints [0] M [1] N [2] K [3] num_threads; buffers [0] int64[3] out: workspace bytes, packed-A
 *   elements, packed-B elements.
 * conv2d_bf16, conv_sizes_bf16, conv_pack_bf16: conv_bf16.c; conv_transpose2d_bf16, conv_transpose_sizes_bf16,
 *   conv_transpose_pack_bf16: conv_transpose_bf16.c.
 * ------------------------------------------------------------------------------------------------------------- */

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
    float *Y = job->buffers[2], *workspace = job->buffers[3];
    const float *bias = job->buffers[4], *residual = job->buffers[5];
    int64_t a_offset = ints[17 + b], b_offset = ints[17 + batch + b];
    ortx_bgemm_operand A = {NULL, (const float *)job->buffers[0] + a_offset, ints[5], ints[6], NULL, NULL, NULL};
    ortx_bgemm_operand B = {NULL, (const float *)job->buffers[1] + b_offset, ints[8], ints[9], NULL, NULL, NULL};
    if (ints[4]) A.packed = (const uint16_t *)job->buffers[0] + a_offset;
    if (ints[7]) B.packed = (const uint16_t *)job->buffers[1] + b_offset;
    ortx_gemm_epilogue epilogue = ortx_gemm_step_epilogue(ints, floats, bias, residual, b);
    float *scratch = job->by_batch ? workspace + thread * job->slice : workspace;
    ortx_bgemm(M, N, K, &A, &B, Y + b * M * N, N, &epilogue, scratch, job->by_batch ? 1 : job->threads);
}

static void gemm_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    int64_t M = ints[0], N = ints[1], K = ints[2], batch = ints[3];
    int by_batch;
    int threads = ortx_gemm_step_threads(ints, num_threads, &by_batch);
    gemm_batch_job job = {ints, floats, buffers, ortx_bgemm_workspace_floats(M, N, K, 1), by_batch, threads};
    ortx_parallel_for(by_batch ? threads : 1, batch, gemm_batch_task, &job);
}

static void gemm_pack_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    if (ints[4])
        ortx_bgemm_pack(buffers[0], ints[0], ints[1], ints[2], ints[3], ORTX_GEMM_NR, floats[0], buffers[1]);
    else
        ortx_bgemm_pack_a(buffers[0], ints[0], ints[1], ints[2], ints[3], floats[0], buffers[1]);
}

static void gemm_sizes_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    int64_t *out = buffers[0];
    int64_t shared = ortx_bgemm_workspace_floats(ints[0], ints[1], ints[2], (int)ints[3]);
    int64_t sliced = ints[3] * ortx_bgemm_workspace_floats(ints[0], ints[1], ints[2], 1);
    out[0] = (shared > sliced ? shared : sliced) * (int64_t)sizeof(float);
    out[1] = ortx_bgemm_a_elements(ints[0], ints[2]);
    out[2] = ortx_bgemm_packed_elements(ints[1], ints[2], ORTX_GEMM_NR);
}

const ortx_kernel_entry ortx_family_bf16[] = {
    {"gemm_bf16", gemm_bf16, ortx_gemm_bf16_ref},
    {"gemm_pack_bf16", gemm_pack_bf16, gemm_pack_bf16},
    {"gemm_sizes_bf16", gemm_sizes_bf16, gemm_sizes_bf16},
    {"conv2d_bf16", ortx_conv2d_bf16, ortx_conv2d_bf16_ref},
    {"conv2d_bf16_nchwc", ortx_conv2d_bf16_nchwc, ortx_conv2d_bf16_nchwc_ref},
    {"conv_bf16_nchwc_applies", ortx_conv_bf16_nchwc_applies, ortx_conv_bf16_nchwc_applies},
    {"conv_sizes_bf16", ortx_conv_sizes_bf16, ortx_conv_sizes_bf16},
    {"conv_pack_bf16", ortx_conv_pack_bf16, ortx_conv_pack_bf16},
    {"conv_bf16_rows_off", ortx_conv_rows_bf16_off, ortx_conv_rows_bf16_off},
    {"conv_transpose2d_bf16", ortx_conv_transpose2d_bf16, ortx_conv_transpose2d_bf16_ref},
    {"conv_transpose_sizes_bf16", ortx_conv_transpose_sizes_bf16, ortx_conv_transpose_sizes_bf16},
    {"conv_transpose_pack_bf16", ortx_conv_transpose_pack_bf16, ortx_conv_transpose_pack_bf16},
    {NULL, NULL, NULL},
};
