/* Internal interface of the packed SGEMM shared by the gemm and conv families.
 *
 * The algorithm is GotoBLAS/BLIS: C[M,N] = A[M,K] * B[K,N] is blocked as NC columns -> KC depth -> MC rows; each
 * KC x NC block of B and MC x KC block of A is packed into panels (A: MR rows, B: NR columns, k-major) so the
 * register-blocked micro-kernel streams both from cache; the epilogue (alpha, bias, residual, activation) runs on
 * each micro-tile right after its last K block, while the tile is still in L1.
 *
 * Packed-panel format (the same for every ISA, so weights packed at compile time run under any ISA variant):
 * K is cut into blocks of ORTX_GEMM_KC; block p (k0 = p*KC, kc = min(KC, K-k0)) starts at k0 * rows_padded, and
 * inside it panel i (rows i*R .. i*R+R-1, R = MR for A, NR for B) starts at i*R*kc and holds [kc][R] floats.
 * Rows past the operand's end are zero. ortx_gemm_packed_index() is the one definition of this layout.
 */
#ifndef ORTX_GEMM_H
#define ORTX_GEMM_H

#include <stddef.h>
#include <stdint.h>

#define ORTX_GEMM_MR 6
#define ORTX_GEMM_NR 16
#define ORTX_GEMM_KC 256
/* MC x KC floats of A (144 KB) sit in the 512 KB L2 of this box's cores next to B's KC x NR micro-panel (16 KB,
 * L1); NC bounds the packed B block (1 MB, in L3). MR/NR/KC/MC follow BLIS's Zen configuration; NC is smaller
 * than BLIS's because convs have few rows (M = output channels) and a smaller block keeps B's packing local. */
#define ORTX_GEMM_MC 144
#define ORTX_GEMM_NC 1024

static inline int64_t ortx_round_up(int64_t value, int64_t multiple) {
    return (value + multiple - 1) / multiple * multiple;
}

/* Index of logical element (row, k) in a packed operand with `rows` rows (A: M, B: N), depth K, panel height R. */
static inline int64_t ortx_gemm_packed_index(int64_t row, int64_t k, int64_t rows, int64_t depth, int64_t panel) {
    int64_t k0 = k / ORTX_GEMM_KC * ORTX_GEMM_KC;
    int64_t kc = depth - k0 < ORTX_GEMM_KC ? depth - k0 : ORTX_GEMM_KC;
    return k0 * ortx_round_up(rows, panel) + (row / panel) * panel * kc + (k - k0) * panel + row % panel;
}

static inline int64_t ortx_gemm_packed_a_floats(int64_t M, int64_t K) { return ortx_round_up(M, ORTX_GEMM_MR) * K; }
static inline int64_t ortx_gemm_packed_b_floats(int64_t K, int64_t N) { return ortx_round_up(N, ORTX_GEMM_NR) * K; }

/* Packs B[k0:k0+kc, n0:n0+nc] into NR-column panels at dst (nc <= ORTX_GEMM_NC); lets a B operand that is never
 * materialised (conv's im2col) be packed straight from its source. */
typedef void (*ortx_gemm_pack_b_fn)(const void *context, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst);

/* An operand: packed (format above) or raw, element (i, k) at data[i*row_stride + k*col_stride] (for B,
 * element (k, n) at data[k*row_stride + n*col_stride]), or for B only, produced by pack_b(pack_context, ...). */
typedef struct ortx_gemm_operand {
    const float *data;
    int packed;
    int64_t row_stride, col_stride;
    ortx_gemm_pack_b_fn pack_b;
    const void *pack_context;
} ortx_gemm_operand;

/* Y = act(alpha * acc + bias_row[m] + bias_col[n] + residual_scale * residual[m*rs + n*cs]).
 * bias_row/bias_col/residual may be NULL; residual strides may be 0 (broadcast). bias_row/residual are already
 * offset to the problem's first row/column. */
typedef struct ortx_gemm_epilogue {
    float alpha;
    const float *bias_row;
    const float *bias_col;
    const float *residual;
    int64_t residual_row_stride, residual_col_stride;
    float residual_scale;
    int activation;
    float param0, param1;
} ortx_gemm_epilogue;

/* The epilogue of batch element b of a step with gemm_f32's arguments (ints[10..15], floats[0..3]; bias and
 * residual are buffers 4 and 5), shared by gemm_f32, gemm_bf16 and their reference kernels. */
static inline ortx_gemm_epilogue ortx_gemm_step_epilogue(const int64_t *ints, const float *floats, const float *bias,
                                                         const float *residual, int64_t b) {
    ortx_gemm_epilogue epilogue = {
        .alpha = floats[0],
        .bias_row = ints[10] == 1 ? bias : NULL,
        .bias_col = ints[10] == 2 ? bias : NULL,
        .residual = ints[11] ? residual + b * ints[14] : NULL,
        .residual_row_stride = ints[12],
        .residual_col_stride = ints[13],
        .residual_scale = floats[1],
        .activation = (int)ints[15],
        .param0 = floats[2],
        .param1 = floats[3],
    };
    return epilogue;
}

/* Threads for a step with gemm_f32's arguments (ints[16] caps them) and whether its batch runs one problem per
 * thread, each with a one-thread workspace slice (many small problems), rather than each problem on all threads. */
static inline int ortx_gemm_step_threads(const int64_t *ints, int num_threads, int *by_batch) {
    int64_t batch = ints[3];
    int threads = num_threads < 1 ? 1 : num_threads;
    if (threads > ints[16]) threads = ints[16] < 1 ? 1 : (int)ints[16];
    *by_batch = threads > 1 && batch > 1 && (batch % threads == 0 || batch >= 4 * threads);
    return threads;
}

/* Micro-kernel: c[0..MR)[0..NR) (row stride ldc) = (accumulate ? c : 0) + a_panel * b_panel over kc, then, when
 * epilogue is not NULL, the epilogue of the tile whose first element is (row0, col0) of the problem (applied to
 * the registers before the single store where the ISA can, so the output is written once). */
typedef void (*ortx_gemm_micro_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int accumulate,
                                   const ortx_gemm_epilogue *epilogue, int64_t row0, int64_t col0);
/* Same over two adjacent B panels (b and b + NR*kc): an MR x 2NR tile; NULL when the ISA has none. */
typedef ortx_gemm_micro_fn ortx_gemm_micro_wide_fn;
/* Same as micro (micro_wide) with A read in place: element (i, k) at a[i*lda + k] (a raw row-major A, whose MR
 * rows all exist). Sums in the same order as the packed kernel, so results are bitwise equal. */
typedef void (*ortx_gemm_micro_rows_fn)(int64_t kc, const float *a, int64_t lda, const float *b, float *c,
                                        int64_t ldc, int accumulate, const ortx_gemm_epilogue *epilogue, int64_t row0,
                                        int64_t col0);
/* micro_tall without an epilogue that also prefetches `lines` cache lines from `prefetch` into L2, one per k step
 * (lines <= kc): the stream the caller reads next, fetched while the tile computes. */
typedef void (*ortx_gemm_micro_prefetching_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                               int accumulate, const char *prefetch, int64_t lines);
/* micro_wide without an epilogue over only the first `rows` (1..MR) rows of the A panel: the rest of the C tile is
 * neither read nor written. */
typedef void (*ortx_gemm_micro_partial_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                                           int accumulate, int rows);
/* Applies the epilogue to the rows x cols tile at c whose first element is (row0, col0) of the problem. */
typedef void (*ortx_gemm_epilogue_fn)(float *c, int64_t ldc, int64_t rows, int64_t cols, int64_t row0,
                                      int64_t col0, const ortx_gemm_epilogue *epilogue);
/* Applies only the activation to n contiguous floats (conv-transpose and depthwise tails). */
typedef void (*ortx_activation_fn)(float *data, int64_t count, int activation, float param0, float param1);
/* dst[c * ld_dst + i] = src[i * ld_src + c] for i < rows, c < cols <= 16: a pixel-major block of GEMM results into
 * channel planes (conv_pixel_rows.c). */
typedef void (*ortx_transpose_fn)(const float *src, int64_t ld_src, int64_t rows, int64_t cols, float *dst,
                                  int64_t ld_dst);

typedef struct ortx_gemm_isa {
    const char *name;
    ortx_gemm_micro_fn micro;
    ortx_gemm_micro_wide_fn micro_wide;
    ortx_gemm_micro_rows_fn micro_rows;       /* NULL: A is always packed */
    ortx_gemm_micro_rows_fn micro_rows_wide;  /* NULL when micro_wide is */
    /* 2*MR x 2*NR over two adjacent A panels (packed: the second MR*kc floats on; in place: MR rows down) and two B
     * panels, summing as micro_wide; NULL when the ISA has none. Used where ortx_cpu_has_two_fma_ports(). */
    ortx_gemm_micro_wide_fn micro_tall;
    ortx_gemm_micro_rows_fn micro_rows_tall;
    ortx_gemm_micro_prefetching_fn micro_tall_prefetching;  /* NULL when micro_tall is */
    ortx_gemm_micro_partial_fn micro_wide_partial;          /* NULL: the ISA has none */
    ortx_gemm_epilogue_fn epilogue;
    ortx_activation_fn activation;
    ortx_transpose_fn transpose;
} ortx_gemm_isa;

extern const ortx_gemm_isa ortx_gemm_isa_portable;
extern const ortx_gemm_isa ortx_gemm_isa_avx2;
extern const ortx_gemm_isa ortx_gemm_isa_avx512;

/* The scalar transpose, which the AVX2 entry also uses (gemm_portable.c). */
void ortx_gemm_transpose_portable(const float *src, int64_t ld_src, int64_t rows, int64_t cols, float *dst,
                                  int64_t ld_dst);

/* The ISA table entry for ortx_selected_isa(). */
const ortx_gemm_isa *ortx_gemm_select_isa(void);

/* Floats of workspace one ortx_sgemm call needs (packing buffers for num_threads threads + alignment); a_packed /
 * b_packed: whether that operand arrives prepacked (a B produced by pack_b is not prepacked). */
int64_t ortx_sgemm_workspace_floats(int64_t M, int64_t N, int64_t K, int a_packed, int b_packed, int num_threads);

/* C (row stride ldc) = epilogue(A * B). workspace: ortx_sgemm_workspace_floats(M, N, K, A->packed, B->packed,
 * num_threads) floats.
 * Safe to call from inside a parallel region with num_threads = 1. */
void ortx_sgemm(int64_t M, int64_t N, int64_t K, const ortx_gemm_operand *A, const ortx_gemm_operand *B, float *C,
                int64_t ldc, const ortx_gemm_epilogue *epilogue, float *workspace, int num_threads);

/* Packs a raw operand (rows x depth, element (r, k) at src[r*rs + k*cs]) into panels of height `panel`,
 * multiplying by scale. dst holds round_up(rows, panel) * depth floats. */
void ortx_gemm_pack(const float *src, int64_t rows, int64_t depth, int64_t row_stride, int64_t col_stride,
                    int64_t panel, float scale, float *dst);

/* Scalar epilogue of one element (the oracle's definition, also used by the portable path). */
float ortx_gemm_epilogue_scalar(const ortx_gemm_epilogue *epilogue, float acc, int64_t row, int64_t col);

/* Reference kernels (kernels/ref/gemm_ref.c). */
void ortx_gemm_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);

#endif
