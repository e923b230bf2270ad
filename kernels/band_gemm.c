/* Family "band": MatMul by a constant whose nonzeros lie in one run of rows per 16-column panel (issue #7: a mel
 * filterbank, where each filter covers a contiguous run of frequency bins).
 *
 * band_gemm_f32: Y[M, N] = A[M, K] @ W[K, N].
 *   ints = [M, N, K, panels]; buffers = [A (row stride K), values, panel, Y].
 *   Panel p holds columns 16p .. 16p + 15 of W (the last one padded with zero columns) and panel[3p .. 3p + 2] =
 *   (first, count, offset): rows first .. first + count - 1 of W hold all of the panel's nonzeros, stored as
 *   count rows of 16 floats from values[16 * offset] on.
 *   Y[m, 16p + j] = sum_{i < count} A[m, first + i] * values[16 (offset + i) + j], summed in order i = 0, 1, ...
 *   (a panel with count 0 writes zeros).
 * Tasks: blocks of rows of A, each over all panels, with the row block's accumulators in registers and each W
 * row loaded once per block. Threads only from ORTX_BAND_PARALLEL_MIN vector multiply-adds; every output is
 * computed by one task in a fixed order, so results do not depend on the thread count.
 * Limits: fp32; a panel's band is one run of rows (a matrix with scattered nonzeros gains nothing: the lowering,
 * ortx/ep/lowering/band.py, only picks this kernel when the bands are narrow).
 */
#include "band_gemm.h"
#include "isa.h"
#include "ortx_kernels.h"
#include "threadpool.h"

/* 24929 x 80 outputs of a 257 x 80 mel matrix (240 band rows): ~23k vector multiply-adds, ~6 us on one Zen 4
 * core, about what waking the pool's second thread costs. */
#define ORTX_BAND_PARALLEL_MIN 65536
#define ORTX_BAND_TASK_ROWS 24

extern void ortx_band_gemm_f32_ref(const int64_t *, const float *, void *const *, int);

static void band_rows_portable(const ortx_band_job *job, int64_t row_begin, int64_t row_end) {
    for (int64_t m = row_begin; m < row_end; m++) {
        const float *a = job->a + m * job->K;
        for (int64_t p = 0; p < job->panels; p++) {
            const int64_t *panel = job->panel + 3 * p;
            const float *w = job->values + panel[2] * ORTX_BAND_PANEL;
            float acc[ORTX_BAND_PANEL] = {0.0f};
            for (int64_t i = 0; i < panel[1]; i++)
                for (int j = 0; j < ORTX_BAND_PANEL; j++) acc[j] += a[panel[0] + i] * w[i * ORTX_BAND_PANEL + j];
            int64_t n0 = p * ORTX_BAND_PANEL, valid = job->N - n0 < ORTX_BAND_PANEL ? job->N - n0 : ORTX_BAND_PANEL;
            for (int64_t j = 0; j < valid; j++) job->y[m * job->N + n0 + j] = acc[j];
        }
    }
}

static void band_task(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const ortx_band_job *job = context;
    int64_t row_begin = begin * ORTX_BAND_TASK_ROWS;
    int64_t row_end = end * ORTX_BAND_TASK_ROWS < job->M ? end * ORTX_BAND_TASK_ROWS : job->M;
    switch (ortx_selected_isa()) {
#if ORTX_HAVE_X86
        case ORTX_ISA_AVX512: ortx_band_rows_f32_avx512(job, row_begin, row_end); break;
        case ORTX_ISA_AVX2: ortx_band_rows_f32_avx2(job, row_begin, row_end); break;
#endif
        default: band_rows_portable(job, row_begin, row_end); break;
    }
}

static void ortx_band_gemm_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    ortx_band_job job = {ints[0], ints[1], ints[2], ints[3], buffers[0], buffers[1], buffers[2], buffers[3]};
    int64_t band_rows = 0;
    for (int64_t p = 0; p < job.panels; p++) band_rows += job.panel[3 * p + 1];
    int threads = job.M * band_rows >= ORTX_BAND_PARALLEL_MIN && num_threads > 1 ? num_threads : 1;
    int64_t blocks = (job.M + ORTX_BAND_TASK_ROWS - 1) / ORTX_BAND_TASK_ROWS;
    ortx_parallel_range(threads, blocks, (int64_t)ORTX_TASKS_PER_THREAD * threads, band_task, &job);
}

const ortx_kernel_entry ortx_family_band[] = {
    {"band_gemm_f32", ortx_band_gemm_f32, ortx_band_gemm_f32_ref},
    {NULL, NULL, NULL},
};
