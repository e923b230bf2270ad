/* ${symbol}: C = epilogue(A * B) for one fixed shape, M=${m} N=${n} K=${k}.
 *
 * Rendered by ortx.codegen.gemm from ortx/codegen/templates/gemm.c and gemm_${isa}.c (the vector primitives).
 * Schedule: ${schedule}
 *
 * The algorithm is GotoBLAS/BLIS with every size a literal:
 *   1. Pack (one parallel_for): B into NR-column panels when PACK_B, A into MR-row panels when PACK_A; each
 *      KC-deep block p of a packed operand starts at p*KC*rows_padded and holds its panels one after another,
 *      [kc][NR] (or [kc][MR]) floats each, rows past the operand's end zero. Unpacked operands are read in place:
 *      a tile broadcasts its MR rows' elements straight from A's rows, and loads B's rows (row-major B only,
 *      the last vector of the last column panel masked). B_PREPACKED: B arrives in kernels/gemm.h's packed
 *      format (16-column panels, KC 256, as the lowering packs constant weights), read where it is.
 *   2. Compute (one parallel_for): the output is cut into TASKS_M x TASKS_N blocks of whole tiles; a task walks
 *      its block NC columns -> KC depth -> MC rows -> (JR_OUTER: B micro-panel outer, A micro-panel inner, else
 *      the other way round) and runs the MR x NR register tile on each; tiles on the last row or column panel
 *      are the same code instantiated for the tail's rows and lanes (masked loads and stores), never a scratch
 *      copy.
 *   3. A tile accumulates its K block in registers and adds C once per block; after the last block the epilogue
 *      (alpha, bias, residual, activation) runs on the registers before the store.
 * Conv mode (CONV_MODE 1, a dense conv2d_f32 of one image and one group): A is the conv's weights in
 * kernels/gemm.h's 6-row panels (KC 256, packed by the lowering), read where they are when MR is 6 and KC 256,
 * else repacked by step 1; B is the (Cin*KH*KW) x (OH*OW) patch matrix, never stored whole: before the call the
 * conv source (kernels/conv_source.c, passed in as pointers) fills its zero-padded input planes, and in step 2
 * each task packs each KC x NC block of B it walks, through the source's pack_b, into the running thread's slice
 * of the workspace (16-column panels, read like B_PREPACKED's), then runs its tiles over it.
 * Every output element sums its products in the same order (K blocks in order, k in order inside a block) in any
 * task split and on any thread count, so results are bitwise repeatable.
 *
 * ABI: ${symbol}(a, b, c, bias, residual, workspace, num_threads, parallel_for). workspace holds ${workspace_floats}
 * floats, 64-byte aligned (${symbol}_workspace_floats() returns the count); bias is NULL unless BIAS_MODE != 0,
 * residual unless RESIDUAL_ROW_STRIDE != 0.
 * parallel_for may be NULL (tasks run in order on the caller); ortx passes its thread pool's ortx_parallel_for,
 * so this object never links against ortx.
 * ${symbol}_step is the same as an ortx step function (kernels/ortx_kernels.h) taking gemm_f32's ints and buffers
 * (kernels/gemm.c; the batch offsets are read from ints), after ${symbol}_init(parallel_for) was called once.
 * Conv mode: a is the packed weights, b the image X; ${symbol}_init_conv(prepare, pack_b) is called once too, and
 * ${symbol}_step takes conv2d_f32's ints and buffers (kernels/conv.c) instead.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef void (*ortx_task_fn)(void *context, int64_t task_index, int thread_index);
typedef void (*ortx_parallel_for_fn)(int num_threads, int64_t num_tasks, ortx_task_fn task, void *context);

/* The problem. A element (i, k) at a[i*A_ROW_STRIDE + k*A_COL_STRIDE], B element (k, j) at
 * b[k*B_ROW_STRIDE + j*B_COL_STRIDE], C element (i, j) at c[i*C_ROW_STRIDE + j]. */
#define GEMM_M ((int64_t)${m})
#define GEMM_N ((int64_t)${n})
#define GEMM_K ((int64_t)${k})
#define A_ROW_STRIDE ((int64_t)${a_row_stride})
#define A_COL_STRIDE ((int64_t)${a_col_stride})
#define B_ROW_STRIDE ((int64_t)${b_row_stride})
#define B_COL_STRIDE ((int64_t)${b_col_stride})
#define C_ROW_STRIDE ((int64_t)${c_row_stride})
#define ALPHA ${alpha}
#define BIAS_MODE ${bias_mode} /* 0 none, 1 bias[i] per row of C, 2 bias[j] per column */
#define ACTIVATION ${activation} /* kernels/activation.h codes: 0 none, 1 relu, 2 leaky relu, 3 clip, 5 hard
                                 * sigmoid, 6 hard swish */
#define PARAM0 ${param0}
#define PARAM1 ${param1}
/* 0: no residual; else C(i, j) += RESIDUAL_SCALE * R[i * RESIDUAL_ROW_STRIDE + j] after the bias, before the
 * activation (gemm_f32's order, kernels/gemm.c ortx_gemm_epilogue_scalar) */
#define RESIDUAL_ROW_STRIDE ((int64_t)${residual_row_stride})
#define RESIDUAL_SCALE ${residual_scale}

/* The schedule. */
#define MR ${mr}
#define NV ${nv} /* vectors per tile row: NR = NV * VL */
#define KC ((int64_t)${kc})
#define MC ((int64_t)${mc})
#define NC ((int64_t)${nc})
#define UNROLL ${unroll}
#define PREFETCH ${prefetch} /* k steps ahead that the tile prefetches its A and B panels; 0: none */
#define PACK_A ${pack_a}
#define PACK_B ${pack_b}
#define B_PREPACKED ${b_prepacked} /* B in kernels/gemm.h's panels (PREPACKED_NR columns, KC deep blocks) */
#define PREPACKED_NR ((int64_t)${prepacked_nr})
#define JR_OUTER ${jr_outer}
#define TASKS_M ${tasks_m}
#define TASKS_N ${tasks_n}

/* Conv mode (see the top): conv2d_f32's ints and activation parameters, the threads the workspace holds a B
 * block for (ints[19]), and the scratch floats and source bytes the conv source needs (conv_source_sizes_f32). */
#define CONV_MODE ${conv_mode}
#define CONV_THREADS ${conv_threads}
#define CONV_SOURCE_FLOATS ((int64_t)${conv_source_floats})
#define CONV_SOURCE_BYTES ${conv_source_bytes}
#define PREPACKED_MR ((int64_t)${prepacked_mr}) /* kernels/gemm.h's A panels: ORTX_GEMM_MR rows, KC deep blocks */
#define PREPACKED_KC ((int64_t)${prepacked_kc})
__attribute__((unused)) static const int64_t conv_ints[] = {${conv_ints}};
__attribute__((unused)) static const float conv_floats[2] = {PARAM0, PARAM1};

/* ---- vector primitives (gemm_${isa}.c) ------------------------------------------------------------------------ */
${isa_source}
/* ---- driver --------------------------------------------------------------------------------------------------- */

#define NR (NV * VL)
#define M_PANELS ((GEMM_M + MR - 1) / MR)
#define N_PANELS ((GEMM_N + NR - 1) / NR)
#define M_PADDED (M_PANELS * MR)
#define N_PADDED (N_PANELS * NR)
#define N_PREPACKED_PADDED ((GEMM_N + PREPACKED_NR - 1) / PREPACKED_NR * PREPACKED_NR)
#define M_TAIL (GEMM_M - (M_PANELS - 1) * MR)     /* rows of the last row panel, 1..MR */
#define N_TAIL (GEMM_N - (N_PANELS - 1) * NR)     /* columns of the last column panel, 1..NR */
#define N_TAIL_VECTORS ((N_TAIL + VL - 1) / VL)
#define N_TAIL_LANES (N_TAIL - (N_TAIL_VECTORS - 1) * VL) /* lanes of its last vector, 1..VL */
#define PACKED_B_FLOATS (PACK_B && !CONV_MODE ? N_PADDED * GEMM_K : 0)
#define PACKED_A_FLOATS (PACK_A ? M_PADDED * GEMM_K : 0)
#define ROUND16(floats) (((floats) + 15) / 16 * 16)
/* Conv mode: per thread, one B block of at most KC rows x NC columns (16-column panels, so N rounded to 16) */
#define N_PANELS16 ((GEMM_N + 15) / 16 * 16)
#define B_BLOCK_FLOATS ROUND16((KC < GEMM_K ? KC : GEMM_K) * (NC < N_PANELS16 ? NC : N_PANELS16))
#define CONV_B_FLOATS (CONV_MODE ? CONV_THREADS * B_BLOCK_FLOATS : 0)
#define CONV_PACK_COLUMNS ((int64_t)1024) /* most columns per pack_b call (im2col's row buffer, ORTX_GEMM_NC) */
/* GEMM: [packed B][packed A]; conv mode: [packed A][B blocks of each thread][the conv source's scratch] */
#define WORKSPACE_FLOATS (CONV_MODE ? ROUND16(PACKED_A_FLOATS) + CONV_B_FLOATS + CONV_SOURCE_FLOATS + 16 \
                                    : PACKED_B_FLOATS + PACKED_A_FLOATS + 16)

#define ORTX_STRINGIFY(x) #x
#define ORTX_UNROLL(n) _Pragma(ORTX_STRINGIFY(GCC unroll n))
#define ORTX_INLINE static inline __attribute__((always_inline)) ORTX_TARGET

typedef void (*conv_pack_b_fn)(const void *source, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst);
typedef void (*conv_prepare_fn)(const int64_t *ints, const float *floats, const float *x, float *scratch,
                                int num_threads, void *source);
static conv_prepare_fn conv_prepare; /* conv mode: set by ${symbol}_init_conv */
static conv_pack_b_fn conv_pack_b;

typedef struct gemm_job {
    const float *a, *b, *bias, *residual;
    float *c, *packed_a, *packed_b;
    const void *source; /* conv mode: the prepared conv source */
    float *conv_blocks; /* conv mode: thread t's B block at conv_blocks + t * B_BLOCK_FLOATS */
} gemm_job;

static inline int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }

/* Step 1: panels [first, last) of B (column panels) over every K block. */
ORTX_TARGET static void pack_b_panels(const float *b, float *packed, int64_t first, int64_t last) {
    for (int64_t k0 = 0; k0 < GEMM_K; k0 += KC) {
        int64_t kc = min64(KC, GEMM_K - k0);
        for (int64_t panel = first; panel < last; panel++) {
            float *out = packed + k0 * N_PADDED + panel * NR * kc;
            int64_t j0 = panel * NR, width = min64(NR, GEMM_N - j0);
            if (B_COL_STRIDE == 1 && width == NR) {
                for (int64_t k = 0; k < kc; k++) {
                    const float *row = b + (k0 + k) * B_ROW_STRIDE + j0;
                    ORTX_UNROLL(8) for (int v = 0; v < NV; v++)
                        vec_store(out + k * NR + v * VL, vec_load(row + v * VL));
                }
            } else {
                for (int64_t k = 0; k < kc; k++)
                    for (int64_t j = 0; j < NR; j++)
                        out[k * NR + j] = j < width ? b[(k0 + k) * B_ROW_STRIDE + (j0 + j) * B_COL_STRIDE] : 0.0f;
            }
        }
    }
}

/* Element (i, k) of A: in its row-major strides, or in conv mode in the lowering's 6-row panels. */
ORTX_INLINE float a_element(const float *a, int64_t i, int64_t k) {
    if (CONV_MODE) {
        int64_t k0 = k / PREPACKED_KC * PREPACKED_KC, kc = min64(PREPACKED_KC, GEMM_K - k0);
        int64_t rows_padded = (GEMM_M + PREPACKED_MR - 1) / PREPACKED_MR * PREPACKED_MR;
        return a[k0 * rows_padded + i / PREPACKED_MR * PREPACKED_MR * kc + (k - k0) * PREPACKED_MR + i % PREPACKED_MR];
    }
    return a[i * A_ROW_STRIDE + k * A_COL_STRIDE];
}

/* Step 1: row panels [first, last) of A over every K block. */
ORTX_TARGET static void pack_a_panels(const float *a, float *packed, int64_t first, int64_t last) {
    for (int64_t k0 = 0; k0 < GEMM_K; k0 += KC) {
        int64_t kc = min64(KC, GEMM_K - k0);
        for (int64_t panel = first; panel < last; panel++) {
            float *out = packed + k0 * M_PADDED + panel * MR * kc;
            int64_t i0 = panel * MR, height = min64(MR, GEMM_M - i0);
            for (int64_t i = 0; i < MR; i++) {
                if (i >= height) {
                    for (int64_t k = 0; k < kc; k++) out[k * MR + i] = 0.0f;
                } else {
                    for (int64_t k = 0; k < kc; k++) out[k * MR + i] = a_element(a, i0 + i, k0 + k);
                }
            }
        }
    }
}

/* Pack tasks: the first PACK_TASKS_B take equal shares of B's panels, the rest equal shares of A's. */
#define PACK_TASKS_B (PACK_B && !CONV_MODE ? (N_PANELS < 8 ? 1 : 8) : 0)
#define PACK_TASKS_A (PACK_A ? (M_PANELS < 8 ? 1 : 8) : 0)
#define DIVISOR(count) ((count) > 0 ? (count) : 1) /* an operand that is not packed has no tasks to divide */

ORTX_TARGET static void pack_task(void *context, int64_t task, int thread) {
    (void)thread;
    const gemm_job *job = context;
    if (task < PACK_TASKS_B) {
        pack_b_panels(job->b, job->packed_b, N_PANELS * task / DIVISOR(PACK_TASKS_B),
                      N_PANELS * (task + 1) / DIVISOR(PACK_TASKS_B));
    } else {
        task -= PACK_TASKS_B;
        pack_a_panels(job->a, job->packed_a, M_PANELS * task / DIVISOR(PACK_TASKS_A),
                      M_PANELS * (task + 1) / DIVISOR(PACK_TASKS_A));
    }
}

/* Step 3: one tile row's vector after the last K block: alpha, bias, residual, activation. */
ORTX_INLINE vec_t epilogue_vector(vec_t value, const float *bias, const float *residual, int64_t row, int64_t col,
                                  int lanes) {
    if (ALPHA != 1.0f) value = vec_mul(value, vec_set1(ALPHA));
    if (BIAS_MODE == 1) value = vec_add(value, vec_set1(bias[row]));
    if (BIAS_MODE == 2) value = vec_add(value, lanes == VL ? vec_load(bias + col) : vec_load_part(bias + col, lanes));
    if (RESIDUAL_ROW_STRIDE) {
        const float *r = residual + row * RESIDUAL_ROW_STRIDE + col;
        vec_t term = lanes == VL ? vec_load(r) : vec_load_part(r, lanes);
        if (RESIDUAL_SCALE != 1.0f) term = vec_mul(term, vec_set1(RESIDUAL_SCALE));
        value = vec_add(value, term);
    }
    if (ACTIVATION == 1) value = vec_max(value, vec_zero());
    if (ACTIVATION == 2) value = vec_where_negative(value, vec_mul(value, vec_set1(PARAM0)));
    if (ACTIVATION == 3) value = vec_min(vec_max(value, vec_set1(PARAM0)), vec_set1(PARAM1));
    if (ACTIVATION == 5)  /* HardSigmoid: clip(alpha x + beta, 0, 1), as kernels/gemm_avx2.h */
        value = vec_min(vec_max(vec_fma(value, vec_set1(PARAM0), vec_set1(PARAM1)), vec_zero()), vec_set1(1.0f));
    if (ACTIVATION == 6)  /* HardSwish: x clip(x / 6 + 1 / 2, 0, 1) */
        value = vec_mul(value, vec_min(vec_max(vec_fma(value, vec_set1(1.0f / 6.0f), vec_set1(0.5f)), vec_zero()),
                                       vec_set1(1.0f)));
    return value;
}

/* Vector v of step k of the B micro-panel that starts at b (run_tile), in B's layout (conv mode: 16-column
 * panels as B_PREPACKED's). */
ORTX_INLINE const float *b_vector(const float *b, int64_t k, int v, int64_t kc) {
    if (B_PREPACKED || CONV_MODE)
        return b + v * VL / PREPACKED_NR * PREPACKED_NR * kc + k * PREPACKED_NR + v * VL % PREPACKED_NR;
    if (PACK_B) return b + k * NR + v * VL;
    return b + k * B_ROW_STRIDE + v * VL;
}

/* The register tile: ROWS x (VECTORS vectors, the last with LANES lanes) of C at c, from the A micro-panel at a
 * (packed: [kc][MR]; in place: rows of A) and the B micro-panel at b (b_vector). ROWS, VECTORS and LANES are
 * literals at every call, so each instance keeps its accumulators in registers. */
ORTX_INLINE void tile(const int rows, const int vectors, const int lanes, int64_t kc, const float *a, const float *b,
                      float *c, int accumulate, int last, const gemm_job *job, int64_t row0, int64_t col0) {
    vec_t acc[MR][NV];
    ORTX_UNROLL(32) for (int i = 0; i < rows; i++)
        ORTX_UNROLL(8) for (int v = 0; v < vectors; v++) acc[i][v] = vec_zero();
    ORTX_UNROLL(UNROLL) for (int64_t k = 0; k < kc; k++) {
        vec_t bv[NV];
        ORTX_UNROLL(8) for (int v = 0; v < vectors; v++) {  /* packed panels are zero-padded: no masks needed */
            int whole = PACK_B || B_PREPACKED || CONV_MODE || v < vectors - 1 || lanes == VL;
            bv[v] = whole ? vec_load(b_vector(b, k, v, kc)) : vec_load_part(b_vector(b, k, v, kc), lanes);
        }
        if (PREFETCH) {
            ORTX_UNROLL(8) for (int v = 0; v < vectors; v++) vec_prefetch(b_vector(b, k + PREFETCH, v, kc));
            if (PACK_A || CONV_MODE) vec_prefetch(a + (k + PREFETCH) * MR);
        }
        ORTX_UNROLL(32) for (int i = 0; i < rows; i++) {
            vec_t broadcast = vec_broadcast(PACK_A || CONV_MODE ? a + k * MR + i
                                                                : a + i * A_ROW_STRIDE + k * A_COL_STRIDE);
            ORTX_UNROLL(8) for (int v = 0; v < vectors; v++) acc[i][v] = vec_fma(broadcast, bv[v], acc[i][v]);
        }
    }
    ORTX_UNROLL(32) for (int i = 0; i < rows; i++) {
        float *out = c + i * C_ROW_STRIDE;
        ORTX_UNROLL(8) for (int v = 0; v < vectors; v++) {
            int width = v == vectors - 1 ? lanes : VL;
            vec_t value = acc[i][v];
            if (accumulate)
                value = vec_add(width == VL ? vec_load(out + v * VL) : vec_load_part(out + v * VL, width), value);
            if (last) value = epilogue_vector(value, job->bias, job->residual, row0 + i, col0 + v * VL, width);
            if (width == VL) {
                vec_store(out + v * VL, value);
            } else {
                vec_store_part(out + v * VL, value, width);
            }
        }
    }
}

/* The tile of row panel `row_panel` and column panel `col_panel` in K block [k0, k0 + kc); in conv mode B is
 * the packed block whose first column is block_col0. (Conv mode with A in place: MR is 6 and KC 256, so the
 * lowering's panels are laid out as PACK_A's.) */
ORTX_TARGET static void run_tile(const gemm_job *job, int64_t row_panel, int64_t col_panel, int64_t k0, int64_t kc,
                                 const float *block, int64_t block_col0) {
    int64_t row0 = row_panel * MR, col0 = col_panel * NR;
    const float *a = PACK_A      ? job->packed_a + k0 * M_PADDED + row0 * kc
                     : CONV_MODE ? job->a + k0 * M_PADDED + row0 * kc
                                 : job->a + row0 * A_ROW_STRIDE + k0 * A_COL_STRIDE;
    const float *b = CONV_MODE     ? block + (col0 - block_col0) * kc
                     : B_PREPACKED ? job->b + k0 * N_PREPACKED_PADDED + col0 * kc
                     : PACK_B      ? job->packed_b + k0 * N_PADDED + col0 * kc
                                   : job->b + k0 * B_ROW_STRIDE + col0;
    float *c = job->c + row0 * C_ROW_STRIDE + col0;
    int accumulate = k0 > 0, last = k0 + kc == GEMM_K;
    int row_tail = M_TAIL != MR && row_panel == M_PANELS - 1, col_tail = N_TAIL != NR && col_panel == N_PANELS - 1;
    if (!row_tail && !col_tail) {
        tile(MR, NV, VL, kc, a, b, c, accumulate, last, job, row0, col0);
    } else if (!row_tail) {
        tile(MR, N_TAIL_VECTORS, N_TAIL_LANES, kc, a, b, c, accumulate, last, job, row0, col0);
    } else if (!col_tail) {
        tile(M_TAIL, NV, VL, kc, a, b, c, accumulate, last, job, row0, col0);
    } else {
        tile(M_TAIL, N_TAIL_VECTORS, N_TAIL_LANES, kc, a, b, c, accumulate, last, job, row0, col0);
    }
}

/* Conv mode: B[k0:k0+kc, columns [first, end)) into the thread's block, pack_b call by call. */
static float *pack_conv_block(const gemm_job *job, int thread, int64_t k0, int64_t kc, int64_t first, int64_t end) {
    float *block = job->conv_blocks + thread * B_BLOCK_FLOATS;
    for (int64_t column = first; column < end; column += CONV_PACK_COLUMNS)
        conv_pack_b(job->source, k0, kc, column, min64(CONV_PACK_COLUMNS, end - column),
                    block + (column - first) * kc);
    return block;
}

/* Step 2: task t owns row panels [m0, m1) x column panels [n0, n1). */
ORTX_TARGET static void compute_task(void *context, int64_t task, int thread) {
    const gemm_job *job = context;
    int64_t task_m = task / TASKS_N, task_n = task % TASKS_N;
    int64_t m0 = M_PANELS * task_m / TASKS_M, m1 = M_PANELS * (task_m + 1) / TASKS_M;
    int64_t n0 = N_PANELS * task_n / TASKS_N, n1 = N_PANELS * (task_n + 1) / TASKS_N;
    const int64_t nc_panels = NC / NR, mc_panels = MC / MR;
    for (int64_t jc = n0; jc < n1; jc += nc_panels) {
        int64_t jc_end = min64(jc + nc_panels, n1);
        for (int64_t k0 = 0; k0 < GEMM_K; k0 += KC) {
            int64_t kc = min64(KC, GEMM_K - k0);
            const float *block = CONV_MODE ? pack_conv_block(job, thread, k0, kc, jc * NR, min64(jc_end * NR, GEMM_N))
                                           : NULL;
            for (int64_t ic = m0; ic < m1; ic += mc_panels) {
                int64_t ic_end = min64(ic + mc_panels, m1);
                if (JR_OUTER) {
                    for (int64_t jr = jc; jr < jc_end; jr++)
                        for (int64_t ir = ic; ir < ic_end; ir++) run_tile(job, ir, jr, k0, kc, block, jc * NR);
                } else {
                    for (int64_t ir = ic; ir < ic_end; ir++)
                        for (int64_t jr = jc; jr < jc_end; jr++) run_tile(job, ir, jr, k0, kc, block, jc * NR);
                }
            }
        }
    }
}

static void run_tasks(int num_threads, int64_t tasks, ortx_task_fn task, void *context,
                      ortx_parallel_for_fn parallel_for) {
    if (tasks == 0) return;
    if (parallel_for) {
        parallel_for(num_threads, tasks, task, context);
    } else {
        for (int64_t t = 0; t < tasks; t++) task(context, t, 0);
    }
}

int64_t ${symbol}_workspace_floats(void) { return WORKSPACE_FLOATS; }

void ${symbol}(const float *a, const float *b, float *c, const float *bias, const float *residual, float *workspace,
               int num_threads, ortx_parallel_for_fn parallel_for) {
    float *aligned = (float *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    _Alignas(64) unsigned char source[CONV_SOURCE_BYTES];
    float *conv_blocks = aligned + ROUND16(PACKED_A_FLOATS);
    gemm_job job = {a, b, bias, residual, c, aligned + PACKED_B_FLOATS, aligned, source, conv_blocks};
    if (CONV_MODE) {  /* b is the image: the source fills its planes (on the pool) before anything reads B */
        if (num_threads > CONV_THREADS) num_threads = CONV_THREADS;
        conv_prepare(conv_ints, conv_floats, b, conv_blocks + CONV_B_FLOATS, num_threads, source);
    }
    run_tasks(num_threads, PACK_TASKS_B + PACK_TASKS_A, pack_task, &job, parallel_for);
    run_tasks(num_threads, TASKS_M * TASKS_N, compute_task, &job, parallel_for);
}

/* The ortx step ABI (kernels/ortx_kernels.h) over gemm_f32's parameters (kernels/gemm.c): ints [3] batch, [14] the
 * residual's batch stride and, from [17], the A then the B element offsets of each batch; buffers [0] A [1] B [2] Y
 * (contiguous [batch, M, N]), [3] workspace, [4] bias, [5] residual. Everything else in ints and floats is a
 * literal of this file. */
static ortx_parallel_for_fn step_parallel_for;

void ${symbol}_init(ortx_parallel_for_fn parallel_for) { step_parallel_for = parallel_for; }

/* Conv mode: the conv source's functions (kernels/conv_source.c), before any call. */
void ${symbol}_init_conv(conv_prepare_fn prepare, conv_pack_b_fn pack_b) {
    conv_prepare = prepare;
    conv_pack_b = pack_b;
}

void ${symbol}_step(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    if (CONV_MODE) {  /* conv2d_f32's buffers: [0] X [1] packed weights [2] Y [3] workspace [4] bias [5] residual */
        ${symbol}((const float *)buffers[1], (const float *)buffers[0], (float *)buffers[2],
                  BIAS_MODE ? (const float *)buffers[4] : NULL, RESIDUAL_ROW_STRIDE ? (const float *)buffers[5] : NULL,
                  buffers[3], num_threads, step_parallel_for);
        return;
    }
    int64_t batch = ints[3];
    for (int64_t index = 0; index < batch; index++)
        ${symbol}((const float *)buffers[0] + ints[17 + index], (const float *)buffers[1] + ints[17 + batch + index],
                  (float *)buffers[2] + index * GEMM_M * C_ROW_STRIDE, buffers[4],
                  RESIDUAL_ROW_STRIDE ? (const float *)buffers[5] + index * ints[14] : NULL, buffers[3],
                  num_threads, step_parallel_for);
}
