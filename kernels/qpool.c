/* Family "qpool": int8/uint8 AveragePool and GlobalAveragePool with int32 sums and fixed-point requantization
 * (issue #5). Arithmetic, ints and buffers: kernels/qpool.h.
 *
 * Structure (windowed): a driver walks (channel, d, h) output rows, ranges of channels as thread-pool tasks, and
 * hands each row its valid input rows. The row function
 *   1. sums the valid rows per input column (column_sums[w] = sum_r ux[r][w], int32);
 *   2. sums each output's w taps from the column sums and subtracts (taps x zu);
 *   3. requantizes with the divisor's (m0, shift).
 * The AVX-512 row (qpool_avx512.c) vectorises step 1 over the width, step 2 over the interior outputs at strides
 * 1 and 2 and step 3 over the interior (one divisor there); the AVX2 row (qpool_avx2.c) steps 1 and 2 at stride 1;
 * edges take the portable code. Global pools sum each channel plane (vpsadbw) and requantize once. Integer sums
 * are exact, so every ISA matches the reference bit for bit.
 */
#include <stdlib.h>

#include "isa.h"
#include "ortx_kernels.h"
#include "qpool.h"
#include "threadpool.h"

void ortx_qpool_columns(const int32_t *column_sums, int64_t num_rows, int64_t padded_rows, const ortx_pool_params *p,
                        const ortx_qpool_quant *q, const int32_t *table, void *y, int64_t y_offset, int64_t begin,
                        int64_t end) {
    const int64_t zero_u = ortx_qpool_zero_u(q), dil = p->dilation[2];
    for (int64_t ow = begin; ow < end; ow++) {
        int64_t first, last, padded;
        ortx_pool_taps(p, 2, ow, &first, &last, &padded);
        const int64_t start = ow * p->stride[2] - p->pad_begin[2];
        int64_t sum = 0;
        for (int64_t j = first; j < last; j++) sum += column_sums[start + j * dil];
        int64_t taps = num_rows * (last - first);
        int64_t divisor = p->count_include_pad ? padded_rows * padded : taps;
        ortx_qpool_store(q, table, sum - taps * zero_u, divisor, y, y_offset + ow);
    }
}

void ortx_qpool_row_portable(const uint8_t *const *rows, int64_t num_rows, int64_t padded_rows,
                             const ortx_pool_params *p, const ortx_qpool_quant *q, const int32_t *table,
                             int32_t *column_sums, int32_t *accumulators, void *y, int64_t y_offset) {
    (void)accumulators;
    const uint8_t flip = q->input_signed ? 0x80 : 0;
    for (int64_t w = 0; w < p->in[2]; w++) column_sums[w] = 0;
    for (int64_t r = 0; r < num_rows; r++)
        for (int64_t w = 0; w < p->in[2]; w++) column_sums[w] += (uint8_t)(rows[r][w] ^ flip);
    ortx_qpool_columns(column_sums, num_rows, padded_rows, p, q, table, y, y_offset, 0, p->out[2]);
}

static ortx_qpool_row_fn select_row_fn(void) {
#if ORTX_HAVE_X86
    if (ortx_selected_isa() >= ORTX_ISA_AVX512) return ortx_qpool_row_avx512;
    if (ortx_selected_isa() >= ORTX_ISA_AVX2) return ortx_qpool_row_avx2;
#endif
    return ortx_qpool_row_portable;
}

typedef struct qpool_job {
    ortx_pool_params p;
    ortx_qpool_quant q;
    const uint8_t *x;
    const int32_t *table;
    void *y;
    ortx_qpool_row_fn row_fn;
} qpool_job;

/* Channels [begin, end): every output row of each, with one scratch (row pointers, column sums, accumulators)
 * per range. */
static void qpool_channels(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const qpool_job *job = context;
    const ortx_pool_params *p = &job->p;
    const int64_t in_plane = p->in[0] * p->in[1] * p->in[2];
    const int64_t out_plane = p->out[0] * p->out[1] * p->out[2];
    const int64_t max_rows = p->kernel[0] * p->kernel[1];
    /* +16 int32 of slack: the vector paths read whole 16-lane vectors with masks, never past in_w/out_w */
    const size_t slots = (size_t)(max_rows > 0 ? max_rows : 1);
    size_t scratch = (sizeof(const uint8_t *) + sizeof(int64_t)) * slots +
                     sizeof(int32_t) * (size_t)(p->in[2] + p->out[2] + 32);
    char *memory = malloc(scratch);
    if (!memory) return;
    const uint8_t **rows = (const uint8_t **)memory;
    int64_t *offsets = (int64_t *)(memory + sizeof(const uint8_t *) * slots);
    int32_t *column_sums = (int32_t *)(offsets + slots);
    int32_t *accumulators = column_sums + p->in[2] + 16;
    for (int64_t c = begin; c < end; c++) {
        const uint8_t *xc = job->x + c * in_plane;
        for (int64_t od = 0; od < p->out[0]; od++)
            for (int64_t oh = 0; oh < p->out[1]; oh++) {
                int64_t taps, num_rows = ortx_pool_window_rows(p, od, oh, offsets, &taps);
                for (int64_t r = 0; r < num_rows; r++) rows[r] = xc + offsets[r];
                job->row_fn(rows, num_rows, taps, p, &job->q, job->table, column_sums, accumulators, job->y,
                            c * out_plane + (od * p->out[1] + oh) * p->out[2]);
            }
    }
    free(memory);
}

static void qavgpool_i8(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    qpool_job job = {ortx_pool_params_read(ints), ortx_qpool_quant_read(ints + ORTX_POOL_INTS), buffers[0],
                     buffers[1], buffers[2], select_row_fn()};
    int threads = num_threads < 1 ? 1 : num_threads;
    ortx_parallel_range(threads, job.p.channels, (int64_t)ORTX_TASKS_PER_THREAD * threads, qpool_channels, &job);
}

typedef struct qglobal_job {
    ortx_qpool_quant q;
    const uint8_t *x;
    const int32_t *table;
    void *y;
    int64_t spatial;
    int isa;
} qglobal_job;

static void qglobal_channels(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const qglobal_job *job = context;
    const uint8_t flip = job->q.input_signed ? 0x80 : 0;
    const int64_t zero_u = ortx_qpool_zero_u(&job->q), spatial = job->spatial;
    for (int64_t c = begin; c < end; c++) {
        const uint8_t *xc = job->x + c * spatial;
        int64_t sum = 0;
#if ORTX_HAVE_X86
        if (job->isa >= ORTX_ISA_AVX512) sum = ortx_qpool_byte_sum_avx512(xc, spatial, flip);
        else if (job->isa >= ORTX_ISA_AVX2) sum = ortx_qpool_byte_sum_avx2(xc, spatial, flip);
        else
#endif
            for (int64_t i = 0; i < spatial; i++) sum += (uint8_t)(xc[i] ^ flip);
        ortx_qpool_store(&job->q, job->table, sum - spatial * zero_u, spatial, job->y, c);
    }
}

static void qglobal_avgpool_i8(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    qglobal_job job = {ortx_qpool_quant_read(ints + 2), buffers[0], buffers[1], buffers[2], ints[1],
                       ortx_selected_isa()};
    int threads = num_threads < 1 ? 1 : num_threads;
    ortx_parallel_range(threads, ints[0], (int64_t)ORTX_TASKS_PER_THREAD * threads, qglobal_channels, &job);
}

const ortx_kernel_entry ortx_family_qpool[] = {
    {"qavgpool_i8", qavgpool_i8, ortx_qavgpool_i8_ref},
    {"qglobal_avgpool_i8", qglobal_avgpool_i8, ortx_qglobal_avgpool_i8_ref},
    {NULL, NULL, NULL},
};
