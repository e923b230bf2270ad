/* Family "elementwise": unary ops, broadcasting binary ops, per-channel affine (folded BatchNormalization), Cast.
 *
 * Each kernel here is the dispatcher: it splits the work into fixed blocks (ranges of blocks are tasks of the
 * thread pool when large; every element is computed independently, so any split gives bitwise the same result)
 * and runs the selected ISA's row function on each block, or the portable loop for ops that ISA does not
 * vectorise.
 *
 * unary_f32: ints = [op, count]; floats = [p0, p1]; buffers = [x, y]. op: ORTX_UNARY_* / ORTX_ACT_* codes
 *   (elementwise.h), p0/p1 their parameters (LeakyRelu alpha, Clip min/max, HardSigmoid alpha/beta, Elu alpha,
 *   Selu alpha/gamma).
 * binary_f32, binary_i64, binary_i32: ints = [op, rank, dims[rank], a_strides[rank], b_strides[rank]];
 *   buffers = [a, b, y]. y is C-contiguous with shape dims; strides are in elements, 0 along broadcast axes. The
 *   lowering collapses axes first, so the innermost strides are 0 or 1 and the row loop covers every broadcast
 *   pattern (same shape, scalar, per-channel [N,C,H,W] op [1,C,1,1], last axis [.., D] op [D]). op: ORTX_BINARY_*
 *   (Pow only for f32).
 * channel_affine_f32: ints = [outer, channels, inner]; buffers = [x, scale[channels], shift[channels], y];
 *   y[o, c, i] = x[o, c, i] * scale[c] + shift[c].
 * compare_f32, compare_i64, compare_i32: the binary layout, op ORTX_COMPARE_* (Equal, Less, Greater, LessOrEqual,
 *   GreaterOrEqual); y is bool (one byte, 0 or 1).
 * where: ints = [element_bytes (1, 4 or 8), rank, dims[rank], condition_strides[rank], x_strides[rank],
 *   y_strides[rank]]; buffers = [condition (bool), x, y, out]; out = condition ? x : y, three-way broadcast.
 * elementwise_chain_f32: several unary/binary ops fused into one pass over memory (ai.ortx ElementwiseChain).
 *   ints = [inputs, ops, temps, rank, dims[rank], strides[inputs][rank], program[ops][5]]; floats = [p0, p1] per op;
 *   buffers = [input 0 .. input inputs-1, y]. Each op is (kind, code, dst, a, b): kind 0 unary (ORTX_UNARY_* code,
 *   b unused) or 1 binary (ORTX_BINARY_*); operands a, b index [inputs..., temps...]; dst is a temp index
 *   (>= inputs) or -1 for y, which the last op writes. Strides are the binary layout's (0 along broadcast axes,
 *   innermost 0 or 1). The dims are walked in chunks of ORTX_CHAIN_CHUNK elements whose temps stay in L1, and each
 *   op runs the same ISA row function as its standalone step, so the result is bitwise the unfused steps'.
 * cast: ints = [from, to, count]; buffers = [x, y]; from/to are ONNX TensorProto codes 1 float32, 6 int32,
 *   7 int64, 9 bool. Float to integer truncates toward zero; to bool is x != 0.
 */
#include <string.h>

#include "elementwise.h"
#include "isa.h"
#include "ortx_kernels.h"
#include "threadpool.h"

/* Block of one parallel work item: large enough to amortise a task, a multiple of every vector width. */
#define ORTX_ELEMENTWISE_BLOCK 16384
/* Below this many elements the whole op runs on the calling thread. */
#define ORTX_ELEMENTWISE_PARALLEL_MIN 65536

extern void ortx_unary_f32_ref(const int64_t *, const float *, void *const *, int);
extern void ortx_binary_f32_ref(const int64_t *, const float *, void *const *, int);
extern void ortx_binary_i64_ref(const int64_t *, const float *, void *const *, int);
extern void ortx_binary_i32_ref(const int64_t *, const float *, void *const *, int);
extern void ortx_channel_affine_f32_ref(const int64_t *, const float *, void *const *, int);
extern void ortx_cast_ref(const int64_t *, const float *, void *const *, int);
extern void ortx_compare_f32_ref(const int64_t *, const float *, void *const *, int);
extern void ortx_compare_i64_ref(const int64_t *, const float *, void *const *, int);
extern void ortx_compare_i32_ref(const int64_t *, const float *, void *const *, int);
extern void ortx_where_ref(const int64_t *, const float *, void *const *, int);
extern void ortx_elementwise_chain_f32_ref(const int64_t *, const float *, void *const *, int);

static int threads_for(int64_t count, int num_threads) {
    return count >= ORTX_ELEMENTWISE_PARALLEL_MIN && num_threads > 1 ? num_threads : 1;
}

/* Splits `items` work items over threads_for(elements) threads, ORTX_TASKS_PER_THREAD chunks per thread. */
static void split_items(int64_t elements, int num_threads, int64_t items, ortx_range_fn fn, void *job) {
    int threads = threads_for(elements, num_threads);
    ortx_parallel_range(threads, items, (int64_t)ORTX_TASKS_PER_THREAD * threads, fn, job);
}

/* The step's own arguments: most kernels' tasks need nothing else. */
typedef struct step_job {
    const int64_t *ints;
    const float *floats;
    void *const *buffers;
    int isa;
} step_job;

/* Unary ---------------------------------------------------------------------------------------------------- */
__attribute__((always_inline)) static inline void unary_loop_portable(int op, float p0, float p1, const float *x,
                                                                      float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = ortx_unary_scalar(op, x[i], p0, p1);
}

/* Cheap ops get a loop with a constant op code, so the compiler drops the switch and vectorises with SSE2. */
static void unary_range_portable(int op, float p0, float p1, const float *x, float *y, int64_t n) {
    switch (op) {
        case ORTX_UNARY_IDENTITY:
            if (x != y) memmove(y, x, (size_t)n * sizeof(float));
            break;
        case ORTX_ACT_RELU: unary_loop_portable(ORTX_ACT_RELU, p0, p1, x, y, n); break;
        case ORTX_ACT_LEAKY_RELU: unary_loop_portable(ORTX_ACT_LEAKY_RELU, p0, p1, x, y, n); break;
        case ORTX_ACT_CLIP: unary_loop_portable(ORTX_ACT_CLIP, p0, p1, x, y, n); break;
        case ORTX_ACT_HARD_SIGMOID: unary_loop_portable(ORTX_ACT_HARD_SIGMOID, p0, p1, x, y, n); break;
        case ORTX_ACT_HARD_SWISH: unary_loop_portable(ORTX_ACT_HARD_SWISH, p0, p1, x, y, n); break;
        case ORTX_UNARY_NEG: unary_loop_portable(ORTX_UNARY_NEG, p0, p1, x, y, n); break;
        case ORTX_UNARY_ABS: unary_loop_portable(ORTX_UNARY_ABS, p0, p1, x, y, n); break;
        case ORTX_UNARY_SQRT: unary_loop_portable(ORTX_UNARY_SQRT, p0, p1, x, y, n); break;
        case ORTX_UNARY_RECIPROCAL: unary_loop_portable(ORTX_UNARY_RECIPROCAL, p0, p1, x, y, n); break;
        default: unary_loop_portable(op, p0, p1, x, y, n); break;
    }
}

static void unary_range(int isa, int op, float p0, float p1, const float *x, float *y, int64_t n) {
#if ORTX_HAVE_X86
    if (isa >= ORTX_ISA_AVX512 && ortx_unary_f32_avx512_supports(op)) {
        ortx_unary_f32_avx512(op, p0, p1, x, y, n);
        return;
    }
    if (isa >= ORTX_ISA_AVX2 && ortx_unary_f32_avx2_supports(op)) {
        ortx_unary_f32_avx2(op, p0, p1, x, y, n);
        return;
    }
#endif
    (void)isa;
    unary_range_portable(op, p0, p1, x, y, n);
}

void ortx_unary_f32_range(int op, float p0, float p1, const float *x, float *y, int64_t n) {
    unary_range(ortx_selected_isa(), op, p0, p1, x, y, n);
}

static void unary_blocks(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const step_job *job = context;
    int64_t count = job->ints[1];
    const float *x = job->buffers[0];
    float *y = job->buffers[1];
    for (int64_t block = begin; block < end; block++) {
        int64_t start = block * ORTX_ELEMENTWISE_BLOCK;
        int64_t length = count - start < ORTX_ELEMENTWISE_BLOCK ? count - start : ORTX_ELEMENTWISE_BLOCK;
        unary_range(job->isa, (int)job->ints[0], job->floats[0], job->floats[1], x + start, y + start, length);
    }
}

static void ortx_unary_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    int64_t count = ints[1];
    int64_t blocks = (count + ORTX_ELEMENTWISE_BLOCK - 1) / ORTX_ELEMENTWISE_BLOCK;
    step_job job = {ints, floats, buffers, ortx_selected_isa()};
    split_items(count, num_threads, blocks, unary_blocks, &job);
}

/* Binary --------------------------------------------------------------------------------------------------- */
typedef struct {
    int op, rank;
    const int64_t *dims, *a_strides, *b_strides;
    int64_t rows, row_length, blocks_per_row;
} broadcast_walk;

static broadcast_walk walk_from(const int64_t *ints) {
    broadcast_walk walk;
    walk.op = (int)ints[0];
    walk.rank = (int)ints[1];
    walk.dims = ints + 2;
    walk.a_strides = ints + 2 + walk.rank;
    walk.b_strides = ints + 2 + 2 * walk.rank;
    walk.rows = 1;
    for (int axis = 0; axis + 1 < walk.rank; axis++) walk.rows *= walk.dims[axis];
    walk.row_length = walk.dims[walk.rank - 1];
    walk.blocks_per_row = (walk.row_length + ORTX_ELEMENTWISE_BLOCK - 1) / ORTX_ELEMENTWISE_BLOCK;
    if (walk.blocks_per_row == 0) walk.rows = 0;
    return walk;
}

/* Element offsets of row `row` (an index over all axes but the last) in a and b. */
static void row_offsets(const broadcast_walk *walk, int64_t row, int64_t *a_offset, int64_t *b_offset) {
    int64_t a = 0, b = 0;
    for (int axis = walk->rank - 2; axis >= 0; axis--) {
        int64_t index = row % walk->dims[axis];
        row /= walk->dims[axis];
        a += index * walk->a_strides[axis];
        b += index * walk->b_strides[axis];
    }
    *a_offset = a;
    *b_offset = b;
}

static void binary_row_f32_portable(int op, const float *a, int64_t sa, const float *b, int64_t sb, float *y,
                                    int64_t n) {
    switch (op) {
        case ORTX_BINARY_ADD: for (int64_t i = 0; i < n; i++) y[i] = a[i * sa] + b[i * sb]; break;
        case ORTX_BINARY_SUB: for (int64_t i = 0; i < n; i++) y[i] = a[i * sa] - b[i * sb]; break;
        case ORTX_BINARY_MUL: for (int64_t i = 0; i < n; i++) y[i] = a[i * sa] * b[i * sb]; break;
        case ORTX_BINARY_DIV: for (int64_t i = 0; i < n; i++) y[i] = a[i * sa] / b[i * sb]; break;
        default: for (int64_t i = 0; i < n; i++) y[i] = ortx_binary_scalar(op, a[i * sa], b[i * sb]);
    }
}

static void binary_row_f32(int isa, int op, const float *a, int64_t sa, const float *b, int64_t sb, float *y,
                           int64_t n) {
#if ORTX_HAVE_X86
    if (op != ORTX_BINARY_POW) {
        if (isa >= ORTX_ISA_AVX512) { ortx_binary_f32_avx512(op, a, sa, b, sb, y, n); return; }
        if (isa >= ORTX_ISA_AVX2) { ortx_binary_f32_avx2(op, a, sa, b, sb, y, n); return; }
    }
#endif
    (void)isa;
    binary_row_f32_portable(op, a, sa, b, sb, y, n);
}

/* A broadcasting kernel's walk and buffers, for its tasks. */
typedef struct walk_job {
    broadcast_walk walk;
    void *const *buffers;
    int isa;
} walk_job;

static void binary_f32_items(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const walk_job *job = context;
    const broadcast_walk *walk = &job->walk;
    const float *a = job->buffers[0], *b = job->buffers[1];
    float *y = job->buffers[2];
    int64_t sa = walk->a_strides[walk->rank - 1], sb = walk->b_strides[walk->rank - 1];
    for (int64_t item = begin; item < end; item++) {
        int64_t row = item / walk->blocks_per_row, start = (item % walk->blocks_per_row) * ORTX_ELEMENTWISE_BLOCK;
        int64_t length = walk->row_length - start < ORTX_ELEMENTWISE_BLOCK ? walk->row_length - start
                                                                            : ORTX_ELEMENTWISE_BLOCK;
        int64_t a_offset, b_offset;
        row_offsets(walk, row, &a_offset, &b_offset);
        binary_row_f32(job->isa, walk->op, a + a_offset + start * sa, sa, b + b_offset + start * sb, sb,
                       y + row * walk->row_length + start, length);
    }
}

static void ortx_binary_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    walk_job job = {walk_from(ints), buffers, ortx_selected_isa()};
    split_items(job.walk.rows * job.walk.row_length, num_threads, job.walk.rows * job.walk.blocks_per_row,
                binary_f32_items, &job);
}

#define ORTX_BINARY_INT_KERNEL(name, type, scalar)                                                            \
    static void name##_items(void *context, int64_t begin, int64_t end, int thread) {                        \
        (void)thread;                                                                                         \
        const walk_job *job = context;                                                                        \
        const broadcast_walk *walk = &job->walk;                                                              \
        const type *a = job->buffers[0], *b = job->buffers[1];                                                \
        type *y = job->buffers[2];                                                                            \
        int64_t sa = walk->a_strides[walk->rank - 1], sb = walk->b_strides[walk->rank - 1];                   \
        for (int64_t item = begin; item < end; item++) {                                                      \
            int64_t row = item / walk->blocks_per_row;                                                        \
            int64_t start = (item % walk->blocks_per_row) * ORTX_ELEMENTWISE_BLOCK;                           \
            int64_t length = walk->row_length - start < ORTX_ELEMENTWISE_BLOCK ? walk->row_length - start     \
                                                                                : ORTX_ELEMENTWISE_BLOCK;     \
            int64_t a_offset, b_offset;                                                                       \
            row_offsets(walk, row, &a_offset, &b_offset);                                                     \
            const type *ar = a + a_offset + start * sa, *br = b + b_offset + start * sb;                      \
            type *yr = y + row * walk->row_length + start;                                                    \
            for (int64_t i = 0; i < length; i++) yr[i] = scalar(walk->op, ar[i * sa], br[i * sb]);            \
        }                                                                                                     \
    }                                                                                                         \
    static void name(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {       \
        (void)floats;                                                                                         \
        walk_job job = {walk_from(ints), buffers, ORTX_ISA_PORTABLE};                                         \
        split_items(job.walk.rows * job.walk.row_length, num_threads, job.walk.rows * job.walk.blocks_per_row, \
                    name##_items, &job);                                                                      \
    }
ORTX_BINARY_INT_KERNEL(ortx_binary_i64, int64_t, ortx_binary_scalar_i64)
ORTX_BINARY_INT_KERNEL(ortx_binary_i32, int32_t, ortx_binary_scalar_i32)
#undef ORTX_BINARY_INT_KERNEL

/* Elementwise chains ----------------------------------------------------------------------------------------- */
typedef struct chain_job {
    int inputs, count, rank, isa;
    ortx_chain_op ops[ORTX_CHAIN_MAX_OPS];
    const int64_t *dims, *strides;
    void *const *buffers;
    int64_t rows, row_length, blocks_per_row;
} chain_job;

/* The ISA whose chunk function runs every op of the chain (its unary ops all vectorised there), else portable. */
static int chain_isa(const chain_job *job) {
    int isa = ortx_selected_isa();
#if ORTX_HAVE_X86
    for (int op = 0; op < job->count; op++) {
        if (job->ops[op].kind == 0 && isa >= ORTX_ISA_AVX512 && !ortx_unary_f32_avx512_supports(job->ops[op].code))
            isa = ORTX_ISA_AVX2;
        if (job->ops[op].kind == 0 && isa >= ORTX_ISA_AVX2 && !ortx_unary_f32_avx2_supports(job->ops[op].code))
            isa = ORTX_ISA_PORTABLE;
    }
    for (int op = 0; op < job->count; op++)
        if (job->ops[op].kind == 1 && job->ops[op].code == ORTX_BINARY_POW) isa = ORTX_ISA_PORTABLE;
#endif
    return isa;
}

/* 0, or -1 when the ints break the kernel's limits (the lowering never emits such a step). */
static int chain_from(const int64_t *ints, const float *floats, void *const *buffers, chain_job *job) {
    job->inputs = (int)ints[0];
    job->count = (int)ints[1];
    int temps = (int)ints[2];
    job->rank = (int)ints[3];
    if (job->inputs < 1 || job->inputs > ORTX_CHAIN_MAX_INPUTS || temps > ORTX_CHAIN_MAX_TEMPS ||
        job->count < 1 || job->count > ORTX_CHAIN_MAX_OPS || job->rank < 1)
        return -1;
    job->dims = ints + 4;
    job->strides = job->dims + job->rank;
    const int64_t *program = job->strides + (int64_t)job->inputs * job->rank;
    for (int op = 0; op < job->count; op++) {
        const int64_t *code = program + 5 * (int64_t)op;
        job->ops[op] = (ortx_chain_op){(int)code[0], (int)code[1], (int)code[2], (int)code[3], (int)code[4],
                                       floats[2 * op], floats[2 * op + 1]};
    }
    job->buffers = buffers;
    job->isa = chain_isa(job);
    job->rows = 1;
    for (int axis = 0; axis + 1 < job->rank; axis++) job->rows *= job->dims[axis];
    job->row_length = job->dims[job->rank - 1];
    job->blocks_per_row = (job->row_length + ORTX_ELEMENTWISE_BLOCK - 1) / ORTX_ELEMENTWISE_BLOCK;
    if (job->blocks_per_row == 0) job->rows = 0;
    return 0;
}

/* A chunk on the portable path: each op is one call of the row functions, temps in memory. */
static void chain_chunk_portable(const chain_job *job, const float *const *starts, const int64_t *inner, float *y,
                                 int64_t n) {
    float temps[ORTX_CHAIN_MAX_TEMPS][ORTX_CHAIN_CHUNK];
    for (int index = 0; index < job->count; index++) {
        const ortx_chain_op *op = &job->ops[index];
        const float *operand[2] = {NULL, NULL};
        int64_t stride[2] = {0, 0};
        for (int side = 0; side < 1 + op->kind; side++) {
            int which = side ? op->b : op->a;
            operand[side] = which < job->inputs ? starts[which] : temps[which - job->inputs];
            stride[side] = which < job->inputs ? inner[which] : 1;
        }
        float *target = op->dst < 0 ? y : temps[op->dst - job->inputs];
        if (op->kind == 1) {
            binary_row_f32_portable(op->code, operand[0], stride[0], operand[1], stride[1], target, n);
        } else if (stride[0] == 1) {
            unary_range_portable(op->code, op->p0, op->p1, operand[0], target, n);
        } else {  /* a broadcast operand: one value for the whole chunk */
            float value = ortx_unary_scalar(op->code, operand[0][0], op->p0, op->p1);
            for (int64_t i = 0; i < n; i++) target[i] = value;
        }
    }
}

static void chain_items(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const chain_job *job = context;
    const float *starts[ORTX_CHAIN_MAX_INPUTS];
    int64_t inner[ORTX_CHAIN_MAX_INPUTS];
    float *y = job->buffers[job->inputs];
    for (int k = 0; k < job->inputs; k++) inner[k] = job->strides[(int64_t)k * job->rank + job->rank - 1];
    for (int64_t item = begin; item < end; item++) {
        int64_t row = item / job->blocks_per_row, start = (item % job->blocks_per_row) * ORTX_ELEMENTWISE_BLOCK;
        int64_t length = job->row_length - start < ORTX_ELEMENTWISE_BLOCK ? job->row_length - start
                                                                          : ORTX_ELEMENTWISE_BLOCK;
        const float *row_starts[ORTX_CHAIN_MAX_INPUTS];
        for (int k = 0; k < job->inputs; k++) {
            const int64_t *strides = job->strides + (int64_t)k * job->rank;
            int64_t offset = 0, rest = row;
            for (int axis = job->rank - 2; axis >= 0; axis--) {
                offset += (rest % job->dims[axis]) * strides[axis];
                rest /= job->dims[axis];
            }
            row_starts[k] = (const float *)job->buffers[k] + offset + start * inner[k];
        }
        float *y_row = y + row * job->row_length + start;
        for (int64_t done = 0; done < length; done += ORTX_CHAIN_CHUNK) {
            int64_t n = length - done < ORTX_CHAIN_CHUNK ? length - done : ORTX_CHAIN_CHUNK;
            for (int k = 0; k < job->inputs; k++) starts[k] = row_starts[k] + done * inner[k];
#if ORTX_HAVE_X86
            if (job->isa >= ORTX_ISA_AVX512) {
                ortx_chain_chunk_f32_avx512(job->ops, job->count, job->inputs, starts, inner, y_row + done, n);
                continue;
            }
            if (job->isa >= ORTX_ISA_AVX2) {
                ortx_chain_chunk_f32_avx2(job->ops, job->count, job->inputs, starts, inner, y_row + done, n);
                continue;
            }
#endif
            chain_chunk_portable(job, starts, inner, y_row + done, n);
        }
    }
}

static void ortx_elementwise_chain_f32(const int64_t *ints, const float *floats, void *const *buffers,
                                       int num_threads) {
    chain_job job;
    if (chain_from(ints, floats, buffers, &job) != 0) return;
    split_items(job.rows * job.row_length, num_threads, job.rows * job.blocks_per_row, chain_items, &job);
}

/* Comparisons and Where ------------------------------------------------------------------------------------ */
#define ORTX_COMPARE_KERNEL(name, type)                                                                       \
    static void name##_rows(void *context, int64_t begin, int64_t end, int thread) {                         \
        (void)thread;                                                                                         \
        const walk_job *job = context;                                                                        \
        const broadcast_walk *walk = &job->walk;                                                              \
        const type *a = job->buffers[0], *b = job->buffers[1];                                                \
        uint8_t *y = job->buffers[2];                                                                         \
        int64_t sa = walk->a_strides[walk->rank - 1], sb = walk->b_strides[walk->rank - 1];                   \
        for (int64_t row = begin; row < end; row++) {                                                         \
            int64_t a_offset, b_offset;                                                                       \
            row_offsets(walk, row, &a_offset, &b_offset);                                                     \
            const type *ar = a + a_offset, *br = b + b_offset;                                                \
            uint8_t *yr = y + row * walk->row_length;                                                         \
            for (int64_t i = 0; i < walk->row_length; i++) yr[i] = ortx_compare(walk->op, ar[i * sa], br[i * sb]); \
        }                                                                                                     \
    }                                                                                                         \
    static void name(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {       \
        (void)floats;                                                                                         \
        walk_job job = {walk_from(ints), buffers, ORTX_ISA_PORTABLE};                                         \
        split_items(job.walk.rows * job.walk.row_length, num_threads, job.walk.rows, name##_rows, &job);      \
    }
ORTX_COMPARE_KERNEL(ortx_compare_f32, float)
ORTX_COMPARE_KERNEL(ortx_compare_i64, int64_t)
ORTX_COMPARE_KERNEL(ortx_compare_i32, int32_t)
#undef ORTX_COMPARE_KERNEL

static void where_rows(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const step_job *job = context;
    const int64_t *ints = job->ints;
    int64_t bytes = ints[0];
    int rank = (int)ints[1];
    const int64_t *dims = ints + 2, *strides[3] = {ints + 2 + rank, ints + 2 + 2 * rank, ints + 2 + 3 * rank};
    const uint8_t *condition = job->buffers[0];
    const char *x = job->buffers[1], *y = job->buffers[2];
    char *out = job->buffers[3];
    int64_t length = dims[rank - 1];
    int64_t sc = strides[0][rank - 1], sx = strides[1][rank - 1], sy = strides[2][rank - 1];
    for (int64_t row = begin; row < end; row++) {
        int64_t offsets[3] = {0, 0, 0}, rest = row;
        for (int axis = rank - 2; axis >= 0; axis--) {
            int64_t index = rest % dims[axis];
            rest /= dims[axis];
            for (int k = 0; k < 3; k++) offsets[k] += index * strides[k][axis];
        }
        const uint8_t *cr = condition + offsets[0];
        const char *xr = x + offsets[1] * bytes, *yr = y + offsets[2] * bytes;
        char *outr = out + row * length * bytes;
        for (int64_t i = 0; i < length; i++) {
            const char *source = cr[i * sc] ? xr + i * sx * bytes : yr + i * sy * bytes;
            switch (bytes) {
                case 1: outr[i] = *source; break;
                case 4: memcpy(outr + 4 * i, source, 4); break;
                default: memcpy(outr + 8 * i, source, 8); break;
            }
        }
    }
}

static void ortx_where(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    int rank = (int)ints[1];
    int64_t rows = 1, length = ints[2 + rank - 1];
    for (int axis = 0; axis + 1 < rank; axis++) rows *= ints[2 + axis];
    step_job job = {ints, floats, buffers, ORTX_ISA_PORTABLE};
    split_items(rows * length, num_threads, rows, where_rows, &job);
}

/* Channel affine ------------------------------------------------------------------------------------------- */
static void affine_row(int isa, const float *x, float scale, float shift, float *y, int64_t n) {
#if ORTX_HAVE_X86
    if (isa >= ORTX_ISA_AVX512) { ortx_affine_f32_avx512(x, scale, shift, y, n); return; }
    if (isa >= ORTX_ISA_AVX2) { ortx_affine_f32_avx2(x, scale, shift, y, n); return; }
#endif
    (void)isa;
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale + shift;
}

static void affine_rows(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const step_job *job = context;
    int64_t channels = job->ints[1], inner = job->ints[2];
    const float *x = job->buffers[0], *scale = job->buffers[1], *shift = job->buffers[2];
    float *y = job->buffers[3];
    for (int64_t row = begin; row < end; row++) {
        int64_t channel = row % channels;
        affine_row(job->isa, x + row * inner, scale[channel], shift[channel], y + row * inner, inner);
    }
}

static void ortx_channel_affine_f32(const int64_t *ints, const float *floats, void *const *buffers,
                                    int num_threads) {
    int64_t rows = ints[0] * ints[1];
    step_job job = {ints, floats, buffers, ortx_selected_isa()};
    split_items(rows * ints[2], num_threads, rows, affine_rows, &job);
}

/* Cast ----------------------------------------------------------------------------------------------------- */
enum { ONNX_FLOAT = 1, ONNX_INT32 = 6, ONNX_INT64 = 7, ONNX_BOOL = 9 };

static double load_as_double(int type, const void *x, int64_t i) {
    switch (type) {
        case ONNX_FLOAT: return ((const float *)x)[i];
        case ONNX_INT32: return ((const int32_t *)x)[i];
        case ONNX_BOOL: return ((const uint8_t *)x)[i] != 0;
        default: return (double)((const int64_t *)x)[i];
    }
}

/* int64 <-> int32 go through integers (wrap like a C cast) rather than double, which would round above 2^53. */
static void cast_elements(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const step_job *job = context;
    int from = (int)job->ints[0], to = (int)job->ints[1];
    const void *x = job->buffers[0];
    void *y = job->buffers[1];
    for (int64_t i = begin; i < end; i++) {
        if (from == ONNX_INT64 && to == ONNX_INT32) {
            ((int32_t *)y)[i] = (int32_t)((const int64_t *)x)[i];
        } else if (from == ONNX_INT64 && to == ONNX_BOOL) {
            ((uint8_t *)y)[i] = ((const int64_t *)x)[i] != 0;
        } else if (from == ONNX_INT64 && to == ONNX_FLOAT) {
            ((float *)y)[i] = (float)((const int64_t *)x)[i];
        } else {
            double value = load_as_double(from, x, i);
            switch (to) {
                case ONNX_FLOAT: ((float *)y)[i] = (float)value; break;
                case ONNX_INT32: ((int32_t *)y)[i] = (int32_t)value; break;
                case ONNX_INT64: ((int64_t *)y)[i] = (int64_t)value; break;
                default: ((uint8_t *)y)[i] = value != 0.0; break;
            }
        }
    }
}

static void ortx_cast(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    int from = (int)ints[0], to = (int)ints[1];
    int64_t count = ints[2];
    const void *x = buffers[0];
    void *y = buffers[1];
    if (from == to) {
        size_t width = from == ONNX_BOOL ? 1 : (from == ONNX_INT64 ? 8 : 4);
        if (x != y) memmove(y, x, (size_t)count * width);
        return;
    }
    step_job job = {ints, floats, buffers, ORTX_ISA_PORTABLE};
    split_items(count, num_threads, count, cast_elements, &job);
}

const ortx_kernel_entry ortx_family_elementwise[] = {
    {"unary_f32", ortx_unary_f32, ortx_unary_f32_ref},
    {"binary_f32", ortx_binary_f32, ortx_binary_f32_ref},
    {"binary_i64", ortx_binary_i64, ortx_binary_i64_ref},
    {"binary_i32", ortx_binary_i32, ortx_binary_i32_ref},
    {"channel_affine_f32", ortx_channel_affine_f32, ortx_channel_affine_f32_ref},
    {"compare_f32", ortx_compare_f32, ortx_compare_f32_ref},
    {"compare_i64", ortx_compare_i64, ortx_compare_i64_ref},
    {"compare_i32", ortx_compare_i32, ortx_compare_i32_ref},
    {"where", ortx_where, ortx_where_ref},
    {"cast", ortx_cast, ortx_cast_ref},
    {"elementwise_chain_f32", ortx_elementwise_chain_f32, ortx_elementwise_chain_f32_ref},
    {NULL, NULL, NULL},
};
