/* conv_depthwise_bf16x3: a depthwise conv and the 1x1 conv that alone reads its output, when provider option
 * fp32_nodes keeps the 1x1 conv fp32 in a bf16 session on AMX (conv_pointwise_bf16x3, conv_pointwise_nchwc_amx.c step
 * 5), in one pass over bands of output rows: MobileNetV2's depthwise -> projection.
 *
 * ints = [the depthwise conv's ORTX_CONV_INTS (conv.h; no residual), in_rows (X in pair rows), the 1x1 conv's
 *         out_channels, has_residual, activation, out_rows (Y in pair rows), form (conv_pointwise_bf16x3's),
 *         band floats (the workspace's floats a thread)];
 * floats = [depthwise param0, param1, 1x1 param0, param1];
 * buffers = [X, depthwise W (C, taps), depthwise bias (C; any buffer when has_bias 0), the depthwise chunk weights
 *            (blocked_layout.pack_depthwise_chunks for X's layout), 1x1 W, 1x1 bias, Y, residual (blocked fp32;
 *            any buffer without), workspace (threads x band floats), 1x1 W remainders].
 *
 * Why: the 1x1 conv reads its input unrounded (fp32), so unfused the depthwise conv writes its whole output in fp32
 * and the 1x1 conv reads it back (MobileNetV2-style's 32 x 112 x 112: 1.6 MB each way, where the bf16 session's pair
 * rows move half). Fused, a band's depthwise rows stay in the thread's workspace and the 1x1 conv's AMX steps read
 * them there.
 * 1. Tasks are (image, band of output rows); a band's rows fit the thread's band floats (all of the conv's channels,
 *    blocked) and the bands are at least 4 a thread where the map allows.
 * 2. Per 32-channel chunk, the ISA's pair_rows (conv_depthwise_avx512.c) computes the band's rows from pair rows or
 *    blocked input into the chunk's two blocked planes of the workspace (the band's pixels apart), each output the
 *    blocked kernel's sums; then ortx_pointwise_bf16x3_band_amx runs conv_pointwise_bf16x3's steps over the band
 *    into Y. So each output is bitwise the two kernels' unfused.
 * Elsewhere (no AMX, or a shape pair_rows does not take) the oracle's loops run it. */
#include <stdlib.h>

#include "conv.h"
#include "isa.h"
#include "ortx_kernels.h"
#include "pair_rows.h"
#include "threadpool.h"

enum { PW_INTS = 9 };

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

typedef struct fused_job {
    ortx_conv_params p;
    const ortx_depthwise_isa *isa;
    int in_rows;
    const void *X;
    const float *chunk_weights;
    float *workspace;
    int64_t band_floats, band_rows, bands;
    int64_t pw_ints[PW_INTS];
    float pw_floats[2];
    void *pw_buffers[7];
} fused_job;

/* The 1x1 conv's ints, floats and buffers as conv_pointwise_bf16x3 takes them, X the depthwise output `x`. */
static void pointwise_call(const int64_t *ints, const float *floats, void *const *buffers, int num_threads,
                           const float *x, int64_t pw_ints[PW_INTS], float pw_floats[2], void *pw_buffers[7]) {
    const ortx_conv_params p = ortx_conv_params_read(ints, floats);
    const int64_t extra[PW_INTS] = {p.batch, p.in_channels, ints[ORTX_CONV_INTS + 1],
                                    p.out_height * p.out_width, ints[ORTX_CONV_INTS + 2], ints[ORTX_CONV_INTS + 3],
                                    num_threads, ints[ORTX_CONV_INTS + 4], ints[ORTX_CONV_INTS + 5]};
    for (int i = 0; i < PW_INTS; i++) pw_ints[i] = extra[i];
    pw_floats[0] = floats[2];
    pw_floats[1] = floats[3];
    void *const list[7] = {(void *)x, buffers[4], buffers[5], buffers[6], buffers[7], NULL, buffers[9]};
    for (int i = 0; i < 7; i++) pw_buffers[i] = list[i];
}

static void fused_task(void *context, int64_t task, int thread) {
    const fused_job *job = context;
    const ortx_conv_params *p = &job->p;
    const int64_t C = p->in_channels, OH = p->out_height, OW = p->out_width, taps = p->kernel_height * p->kernel_width;
    const int64_t chunks = ortx_pair_rows_chunks(C), blocks = ortx_nchwc_blocks(C);
    const int64_t plane_in = p->in_height * p->in_width;
    const int64_t n = task / job->bands, oy0 = task % job->bands * job->band_rows;
    const int64_t rows = min64(job->band_rows, OH - oy0), pixels = rows * OW;
    float *band = job->workspace + thread * job->band_floats;
    for (int64_t chunk = 0; chunk < chunks; chunk++) {
        const float *weights = job->chunk_weights + chunk * (taps * 32 + 32);
        const void *x = (const uint16_t *)job->X + (n * chunks + chunk) * plane_in * ORTX_PAIR_ROWS_CHUNK;
        int64_t hi_offset = 0;
        if (!job->in_rows) {
            x = (const float *)job->X + (n * blocks + 2 * chunk) * plane_in * 16;
            hi_offset = 2 * chunk + 1 < blocks ? plane_in * 16 * (int64_t)sizeof(float) : 0;
        }
        /* the chunk's blocks' planes in the band, its first row standing at image row oy0 */
        float *y = band + 2 * chunk * pixels * 16 - oy0 * OW * 16;
        job->isa->pair_rows(p, x, job->in_rows, hi_offset, weights, weights + taps * 32, C - chunk * 32, y, 0,
                            pixels * 16 * (int64_t)sizeof(float), oy0, rows);
    }
    void *buffers[7];
    for (int i = 0; i < 7; i++) buffers[i] = job->pw_buffers[i];
    buffers[0] = band;
    ortx_pointwise_bf16x3_band_amx(job->pw_ints, job->pw_floats, buffers, n, pixels, OH * OW, oy0 * OW, thread);
}

void ortx_conv_depthwise_bf16x3_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    const ortx_conv_params p = ortx_conv_params_read(ints, floats);
    const int64_t out_floats = p.batch * ortx_nchwc_blocks(p.in_channels) * 16 * p.out_height * p.out_width;
    float *between = malloc((size_t)out_floats * sizeof(float));
    if (!between) abort();
    int64_t dw_ints[ORTX_CONV_INTS + 3];
    for (int i = 0; i < ORTX_CONV_INTS; i++) dw_ints[i] = ints[i];
    dw_ints[ORTX_CONV_INTS] = ints[ORTX_CONV_INTS];  /* in_rows */
    dw_ints[ORTX_CONV_INTS + 1] = dw_ints[ORTX_CONV_INTS + 2] = 0;
    void *const dw_buffers[6] = {buffers[0], buffers[1], between, NULL, buffers[2], between};
    ortx_conv2d_depthwise_pair_rows_ref(dw_ints, floats, dw_buffers, num_threads);
    int64_t pw_ints[PW_INTS];
    float pw_floats[2];
    void *pw_buffers[7];
    pointwise_call(ints, floats, buffers, num_threads, between, pw_ints, pw_floats, pw_buffers);
    ortx_conv_pointwise_bf16x3_ref(pw_ints, pw_floats, pw_buffers, num_threads);
    free(between);
}

void ortx_conv_depthwise_bf16x3(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    fused_job job = {.p = ortx_conv_params_read(ints, floats)};
    const ortx_conv_params *p = &job.p;
    job.isa = ortx_nchwc_depthwise_isa();
    job.in_rows = (int)ints[ORTX_CONV_INTS];
    const int64_t row_floats = ortx_nchwc_blocks(p->in_channels) * 16 * p->out_width;
    job.band_floats = ints[ORTX_CONV_INTS + 6];
    int fits = ortx_conv_pointwise_bf16x3_applies() && job.isa->pair_rows && !p->has_residual &&
               p->kernel_height * p->kernel_width <= 25 && row_floats <= job.band_floats &&
               job.isa->pair_rows(p, NULL, job.in_rows, 0, NULL, NULL, 0, NULL, 0, 0, 0, 0);
    if (!fits) {
        ortx_conv_depthwise_bf16x3_ref(ints, floats, buffers, num_threads);
        return;
    }
    int threads = (int)max64(1, min64(num_threads, p->workspace_threads));
    /* bands: as many rows as the band floats hold, and at least 4 bands a thread where the rows allow */
    const int64_t OH = p->out_height, wanted = max64(1, (4 * threads + p->batch - 1) / p->batch);
    job.band_rows = max64(1, min64(job.band_floats / row_floats, (OH + wanted - 1) / wanted));
    job.bands = (OH + job.band_rows - 1) / job.band_rows;
    job.X = buffers[0];
    job.chunk_weights = buffers[3];
    job.workspace = buffers[8];
    pointwise_call(ints, floats, buffers, threads, NULL, job.pw_ints, job.pw_floats, job.pw_buffers);
    ortx_parallel_for(threads, p->batch * job.bands, fused_task, &job);
}
