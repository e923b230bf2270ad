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
    {NULL, NULL, NULL},
};
