/* Family "reduce": reductions over one axis group, Softmax/LogSoftmax, LayerNormalization, ArgMax/ArgMin.
 *
 * Every kernel sees its input as [outer, length, inner] (C order) and works along `length`. Rows with inner == 1
 * (the innermost axis is reduced) use the ISA's contiguous row functions, or for rows of at most
 * ORTX_REDUCE_SHORT_ROW (e.g. |X|^2 of a complex spectrum's [re, im] pairs) fold 8 or 16 rows at once with
 * gathered lanes (Case short rows); inner > 1 accumulates whole
 * contiguous inner rows, r = 0, 1, ..., so each output is folded in the same order on any thread split.
 * Threads split over outer rows (and inner blocks for reduce_f32); results are bitwise deterministic run to run.
 *
 * reduce_f32: ints = [op, outer, length, inner, post]; floats = [post_scale]; buffers = [x, y[outer, inner]].
 *   op: ORTX_REDUCE_SUM, SUM_SQUARE (sum of x^2), MAX, MIN; post: ORTX_REDUCE_POST_NONE, SCALE (y *= post_scale,
 *   ReduceMean), SQRT (ReduceL2). A multi-axis reduction is a chain of these steps (see lowering/reduce.py).
 * softmax_f32: ints = [outer, length, inner, log]; buffers = [x, y]; y = exp(x - max) / sum exp(x - max) along
 *   length (log != 0: y = x - max - log(sum)).
 * layer_norm_f32: ints = [rows, length, has_bias]; floats = [epsilon]; buffers = [x, scale[length],
 *   bias[length] (ignored unless has_bias), y]; per row y = (x - mean) / sqrt(var + epsilon) * scale + bias with
 *   the biased variance, computed in two passes (mean, then squared deviations).
 * arg_extreme_f32: ints = [outer, length, inner, is_min, select_last_index]; buffers = [x, y (int64)[outer,
 *   inner]]; the index along length of the max (is_min: min); ties give the first index unless
 *   select_last_index. A NaN counts as the extreme: its first occurrence wins, like numpy's argmax.
 */
#include <math.h>
#include <stdlib.h>

#include "elementwise.h"
#include "isa.h"
#include "ortx_kernels.h"
#include "threadpool.h"

#define ORTX_REDUCE_BLOCK 4096
#define ORTX_REDUCE_PARALLEL_MIN 32768

extern void ortx_reduce_f32_ref(const int64_t *, const float *, void *const *, int);
extern void ortx_softmax_f32_ref(const int64_t *, const float *, void *const *, int);
extern void ortx_layer_norm_f32_ref(const int64_t *, const float *, void *const *, int);
extern void ortx_arg_extreme_f32_ref(const int64_t *, const float *, void *const *, int);

static int threads_for(int64_t work, int num_threads) {
    return work >= ORTX_REDUCE_PARALLEL_MIN && num_threads > 1 ? num_threads : 1;
}

/* Splits `items` work items over threads_for(work) threads. Each output is computed by one item, in an order
 * that does not depend on the split, so results are the same for any thread count. */
static void split_items(int64_t work, int num_threads, int64_t items, ortx_range_fn fn, void *job) {
    int threads = threads_for(work, num_threads);
    ortx_parallel_range(threads, items, (int64_t)ORTX_TASKS_PER_THREAD * threads, fn, job);
}

/* The step's own arguments: the tasks read their sizes from ints like the kernel does. */
typedef struct step_job {
    const int64_t *ints;
    const float *floats;
    void *const *buffers;
    int isa;
} step_job;

/* Portable rows ------------------------------------------------------------------------------------------- */
static float fold_portable(int op, const float *x, int64_t n) {
    float acc = op == ORTX_REDUCE_SUM_SQUARE ? x[0] * x[0] : x[0];
    for (int64_t i = 1; i < n; i++) {
        float v = x[i];
        switch (op) {
            case ORTX_REDUCE_SUM: acc += v; break;
            case ORTX_REDUCE_SUM_SQUARE: acc += v * v; break;
            case ORTX_REDUCE_MAX: acc = v > acc || v != v ? v : acc; break;
            default: acc = v < acc || v != v ? v : acc; break;
        }
    }
    return acc;
}

static void accumulate_portable(int op, int first, const float *x, float *into, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        if (first) {
            into[i] = op == ORTX_REDUCE_SUM_SQUARE ? v * v : v;
            continue;
        }
        switch (op) {
            case ORTX_REDUCE_SUM: into[i] += v; break;
            case ORTX_REDUCE_SUM_SQUARE: into[i] += v * v; break;
            case ORTX_REDUCE_MAX: into[i] = v > into[i] || v != v ? v : into[i]; break;
            default: into[i] = v < into[i] || v != v ? v : into[i]; break;
        }
    }
}

static void softmax_row_portable(const float *x, float *y, int64_t n, int log) {
    float max = fold_portable(ORTX_REDUCE_MAX, x, n);
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        y[i] = expf(x[i] - max);
        sum += y[i];
    }
    if (log) {
        float log_sum = logf(sum);
        for (int64_t i = 0; i < n; i++) y[i] = x[i] - max - log_sum;
    } else {
        for (int64_t i = 0; i < n; i++) y[i] /= sum;
    }
}

static void layer_norm_row_portable(const float *x, const float *scale, const float *bias, float epsilon, float *y,
                                    int64_t n) {
    float mean = fold_portable(ORTX_REDUCE_SUM, x, n) / (float)n;
    float variance = 0.0f;
    for (int64_t i = 0; i < n; i++) variance += (x[i] - mean) * (x[i] - mean);
    float inverse = 1.0f / sqrtf(variance / (float)n + epsilon);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - mean) * inverse * scale[i] + (bias ? bias[i] : 0.0f);
}

/* ISA choice ---------------------------------------------------------------------------------------------- */
static float fold(int isa, int op, const float *x, int64_t n) {
#if ORTX_HAVE_X86
    if (isa >= ORTX_ISA_AVX512) return ortx_reduce_fold_f32_avx512(op, x, n);
    if (isa >= ORTX_ISA_AVX2) return ortx_reduce_fold_f32_avx2(op, x, n);
#endif
    (void)isa;
    return fold_portable(op, x, n);
}

static void accumulate(int isa, int op, int first, const float *x, float *into, int64_t n) {
#if ORTX_HAVE_X86
    if (isa >= ORTX_ISA_AVX512) { ortx_reduce_accumulate_f32_avx512(op, first, x, into, n); return; }
    if (isa >= ORTX_ISA_AVX2) { ortx_reduce_accumulate_f32_avx2(op, first, x, into, n); return; }
#endif
    (void)isa;
    accumulate_portable(op, first, x, into, n);
}

static void softmax_row(int isa, const float *x, float *y, int64_t n, int log) {
#if ORTX_HAVE_X86
    if (isa >= ORTX_ISA_AVX512) { ortx_softmax_row_f32_avx512(x, y, n, log); return; }
    if (isa >= ORTX_ISA_AVX2) { ortx_softmax_row_f32_avx2(x, y, n, log); return; }
#endif
    (void)isa;
    softmax_row_portable(x, y, n, log);
}

void ortx_softmax_row_f32(const float *x, float *y, int64_t n, int log) {
    softmax_row(ortx_selected_isa(), x, y, n, log);
}

static void layer_norm_row(int isa, const float *x, const float *scale, const float *bias, float epsilon, float *y,
                           int64_t n) {
#if ORTX_HAVE_X86
    if (isa >= ORTX_ISA_AVX512) { ortx_layer_norm_row_f32_avx512(x, scale, bias, epsilon, y, n); return; }
    if (isa >= ORTX_ISA_AVX2) { ortx_layer_norm_row_f32_avx2(x, scale, bias, epsilon, y, n); return; }
#endif
    (void)isa;
    layer_norm_row_portable(x, scale, bias, epsilon, y, n);
}

static float post_op(int post, float scale, float value) {
    switch (post) {
        case ORTX_REDUCE_POST_SCALE: return value * scale;
        case ORTX_REDUCE_POST_SQRT: return sqrtf(value);
        default: return value;
    }
}

/* Kernels ------------------------------------------------------------------------------------------------- */
static void reduce_rows(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const step_job *job = context;
    int op = (int)job->ints[0], post = (int)job->ints[4];
    int64_t length = job->ints[2];
    const float *x = job->buffers[0];
    float *y = job->buffers[1];
#if ORTX_HAVE_X86
    if (length <= ORTX_REDUCE_SHORT_ROW && job->isa >= ORTX_ISA_AVX2) {  /* Case short rows */
        if (job->isa >= ORTX_ISA_AVX512)
            ortx_reduce_short_rows_f32_avx512(op, x + begin * length, y + begin, end - begin, length);
        else
            ortx_reduce_short_rows_f32_avx2(op, x + begin * length, y + begin, end - begin, length);
        if (post != ORTX_REDUCE_POST_NONE)
            for (int64_t o = begin; o < end; o++) y[o] = post_op(post, job->floats[0], y[o]);
        return;
    }
#endif
    for (int64_t o = begin; o < end; o++) y[o] = post_op(post, job->floats[0], fold(job->isa, op, x + o * length, length));
}

/* Items [begin, end) of outer x inner blocks: whole inner rows accumulated r = 0, 1, ... */
static void reduce_blocks(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const step_job *job = context;
    int op = (int)job->ints[0], post = (int)job->ints[4];
    int64_t length = job->ints[2], inner = job->ints[3];
    int64_t blocks = (inner + ORTX_REDUCE_BLOCK - 1) / ORTX_REDUCE_BLOCK;
    const float *x = job->buffers[0];
    float *y = job->buffers[1];
    for (int64_t item = begin; item < end; item++) {
        int64_t o = item / blocks, start = (item % blocks) * ORTX_REDUCE_BLOCK;
        int64_t n = inner - start < ORTX_REDUCE_BLOCK ? inner - start : ORTX_REDUCE_BLOCK;
        float *into = y + o * inner + start;
        for (int64_t r = 0; r < length; r++)
            accumulate(job->isa, op, r == 0, x + (o * length + r) * inner + start, into, n);
        if (post != ORTX_REDUCE_POST_NONE)
            for (int64_t i = 0; i < n; i++) into[i] = post_op(post, job->floats[0], into[i]);
    }
}

static void ortx_reduce_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    int64_t outer = ints[1], length = ints[2], inner = ints[3];
    step_job job = {ints, floats, buffers, ortx_selected_isa()};
    if (inner == 1) {
        /* Short rows fold ~50k elements per us on one thread (24929 rows of 2: 1 us, 2 threads 7 us with the
         * pool's wake-up), so they count a sixteenth of their size towards the threading threshold. */
        int short_rows = length <= ORTX_REDUCE_SHORT_ROW && job.isa >= ORTX_ISA_AVX2;
        split_items(short_rows ? outer * length / 16 : outer * length, num_threads, outer, reduce_rows, &job);
        return;
    }
    int64_t blocks = (inner + ORTX_REDUCE_BLOCK - 1) / ORTX_REDUCE_BLOCK;
    split_items(outer * length * inner, num_threads, outer * blocks, reduce_blocks, &job);
}

/* Softmax along a strided axis (inner > 1): per outer slab, max over r, y = x - max, exp on the whole slab with
 * the vectorised unary row, sum over r, then normalise. */
static void softmax_strided(int isa, const float *x, float *y, int64_t length, int64_t inner, int log,
                            float *scratch) {
    for (int64_t r = 0; r < length; r++) accumulate(isa, ORTX_REDUCE_MAX, r == 0, x + r * inner, scratch, inner);
    for (int64_t r = 0; r < length; r++)
        for (int64_t i = 0; i < inner; i++) y[r * inner + i] = x[r * inner + i] - scratch[i];
    float *sums = scratch + inner;
    ortx_unary_f32_range(ORTX_UNARY_EXP, 0.0f, 0.0f, y, y, length * inner);
    for (int64_t r = 0; r < length; r++) accumulate(isa, ORTX_REDUCE_SUM, r == 0, y + r * inner, sums, inner);
    if (log) {
        for (int64_t i = 0; i < inner; i++) sums[i] = logf(sums[i]);
        for (int64_t r = 0; r < length; r++)
            for (int64_t i = 0; i < inner; i++) y[r * inner + i] = x[r * inner + i] - scratch[i] - sums[i];
    } else {
        for (int64_t r = 0; r < length; r++)
            for (int64_t i = 0; i < inner; i++) y[r * inner + i] /= sums[i];
    }
}

static void softmax_rows(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const step_job *job = context;
    int64_t length = job->ints[1];
    const float *x = job->buffers[0];
    float *y = job->buffers[1];
    for (int64_t o = begin; o < end; o++) softmax_row(job->isa, x + o * length, y + o * length, length, (int)job->ints[3]);
}

/* Outer slabs [begin, end), with one scratch of 2 * inner floats per range. */
static void softmax_slabs(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const step_job *job = context;
    int64_t length = job->ints[1], inner = job->ints[2];
    const float *x = job->buffers[0];
    float *y = job->buffers[1];
    float *scratch = malloc(sizeof(float) * (size_t)(2 * inner));
    if (!scratch) return;
    for (int64_t o = begin; o < end; o++)
        softmax_strided(job->isa, x + o * length * inner, y + o * length * inner, length, inner, (int)job->ints[3],
                        scratch);
    free(scratch);
}

static void ortx_softmax_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    int64_t outer = ints[0], length = ints[1], inner = ints[2];
    step_job job = {ints, floats, buffers, ortx_selected_isa()};
    split_items(outer * length * inner, num_threads, outer, inner == 1 ? softmax_rows : softmax_slabs, &job);
}

static void layer_norm_rows(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const step_job *job = context;
    int64_t length = job->ints[1];
    const float *x = job->buffers[0], *scale = job->buffers[1], *bias = job->ints[2] ? job->buffers[2] : NULL;
    float *y = job->buffers[3];
    for (int64_t row = begin; row < end; row++)
        layer_norm_row(job->isa, x + row * length, scale, bias, job->floats[0], y + row * length, length);
}

static void ortx_layer_norm_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    step_job job = {ints, floats, buffers, ortx_selected_isa()};
    split_items(ints[0] * ints[1], num_threads, ints[0], layer_norm_rows, &job);
}

static void arg_extreme_rows(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const step_job *job = context;
    int64_t length = job->ints[1], inner = job->ints[2];
    int is_min = (int)job->ints[3], last = (int)job->ints[4];
    const float *x = job->buffers[0];
    int64_t *y = job->buffers[1];
    for (int64_t o = begin; o < end; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *column = x + o * length * inner + i;
            float best = column[0];
            int64_t best_index = 0;
            for (int64_t r = 1; r < length && best == best; r++) {
                float v = column[r * inner];
                int better = v != v || (is_min ? v < best : v > best) || (last && v == best);
                if (better) {
                    best = v;
                    best_index = r;
                }
            }
            y[o * inner + i] = best_index;
        }
}

static void ortx_arg_extreme_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    step_job job = {ints, floats, buffers, ORTX_ISA_PORTABLE};
    split_items(ints[0] * ints[1] * ints[2], num_threads, ints[0], arg_extreme_rows, &job);
}

const ortx_kernel_entry ortx_family_reduce[] = {
    {"reduce_f32", ortx_reduce_f32, ortx_reduce_f32_ref},
    {"softmax_f32", ortx_softmax_f32, ortx_softmax_f32_ref},
    {"layer_norm_f32", ortx_layer_norm_f32, ortx_layer_norm_f32_ref},
    {"arg_extreme_f32", ortx_arg_extreme_f32, ortx_arg_extreme_f32_ref},
    {NULL, NULL, NULL},
};
