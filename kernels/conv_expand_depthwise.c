/* conv_expand_depthwise_nchwc_f32: a 1x1 conv (the "expand") and the depthwise conv that alone reads its output, in
 * one pass over bands of output rows, on blocked tensors (conv.h's NCHWc): MobileNetV2's inverted residual block
 * (Cin -> t * Cin 1x1, then 3x3 depthwise) and PP-LCNet's 1x1 -> next block's depthwise.
 *
 * conv_expand_depthwise_nchwc_bf16 is the same step under precision bf16: the expand as conv_pointwise_nchwc_bf16
 * computes it (bf16 operands, fp32 sums; its weights packed so), the depthwise conv fp32 as in the unfused run.
 *
 * ints = [the depthwise conv's ORTX_CONV_INTS (conv.h; Cin = Cout = the expanded channels, no residual),
 *         expand_in_channels, expand_activation, blocks per task (1, 2, 4; 0: auto_group_blocks's choice)];
 * floats = [depthwise param0, param1, expand param0, param1];
 * buffers = [X (blocked, expand_in_channels), expand W (packed as conv_pointwise_nchwc_f32's or _bf16's), expand
 *            bias (packed likewise), depthwise W (C, 1, KH, KW), Y (blocked), depthwise bias (C; any buffer when
 *            has_bias 0)].
 *
 * Why: unfused, the expand writes its whole output and the depthwise conv reads it back (MobileNetV2's 96 x 112 x
 * 112: 4.8 MB, past L2), and with the two vCPUs far apart (ortx.host_contention) every line of it that one thread
 * wrote and the other reads costs ~400 ns. Fused, the expanded rows live only in the thread's scratch
 * (ortx_thread_scratch), written and read by the one thread.
 * 1. Tasks are (image, band of output rows, group of 1, 2 or 4 expanded blocks), band-major: with at least as many
 *    bands as threads, thread t's segment of the tasks (threadpool.h) is the t-th band of rows of every block, the
 *    rows conv_pointwise_nchwc_f32's pixel runs before and after it give the same thread. plan_bands picks the
 *    count.
 * 2. A task walks its band in steps of output rows whose input rows fit SCRATCH_BUDGET floats a block: the expand
 *    of the step's new input rows (the 1x1 conv's 6 x B tile over the task's B blocks, y_plane a block's window)
 *    lands after the rows the last step also read, moved to the front; then each block's depthwise rows from its
 *    window (the ISA's blocked_rows, its input pointer standing at image row 0; band_portable where it declines).
 *    Only a band's first step recomputes the (KH - stride) halo rows the band above it also expanded.
 * Blocks per task (auto_group_blocks): the tile's 6 x B accumulators are 6 multiply-add chains at B = 1, enough for a
 * core that issues one zmm multiply-add a cycle (the Zen 4 host: one block ran 3-16% faster than four on MobileNetV2's
 * pairs, whose windows then stay in L1/L2) but not for one that issues two (Intel's server cores: 4-cycle latency x 2 =
 * 8 chains). Measured on an Emerald Rapids VM, pair alone: from 240 and 480 input channels (PP-OCR rec) B = 1 ran
 * 1.28-1.50x the unfused kernels' time and B = 4 0.93-0.98x (1 thread); from 16 to 32 channels (MobileNetV2's first
 * expands) B = 4 4-9% faster than B = 1 at 1 thread, alike at 2. So with two ports (ortx_fma_ports) B = 1 from at most
 * 32 input channels, else the largest B that left 4 tasks a thread; with one port B = 1, as measured on the Zen 4. On
 * the Zen 5 host (two ports; session 44, pair alone, MobileNetV2's seven shapes) that rule cost 20-45%: under bf16 B =
 * 4 ran 0.63-0.88x B = 1's time at 2 threads (24 multiply-add chains, and the tile rounds its input pixels once for B
 * blocks), 0.67-0.72x from 16-32 channels at 1; in fp32 B = 2 0.79-0.83x from 16-32 channels, where B = 4 ran 4-12%
 * behind it, and alike with 4 above; 64 -> 384 at 14x14 (24 blocks, 1 band) ran faster at B = 4 with 3 tasks a thread
 * than at B = 2 with 6. So with two ports B is at most 4 under bf16, 2 in fp32 from at most 32 input channels, else 4,
 * the largest that leaves a task a thread (paired in one process against the old rule, 2 threads: MobileNetV2-style
 * bf16 0.93-0.97x, fp32 0.99x, PP-OCR cls bf16 0.96x, fp32 0.98x). On Emerald Rapids B = 4 had not been slower than B =
 * 1 on any measured pair. Each output is computed as the two kernels unfused compute it (the same tile sums per pixel,
 * the same depthwise tap order), so on the blocked_rows path the results are bitwise theirs.
 */
#include <stdlib.h>
#include <string.h>

#include "activation.h"
#include "conv.h"
#include "ortx_kernels.h"
#include "threadpool.h"

/* floats of a block's window of expanded rows: 128 KB (16K-256K floats measured alike within 2%, Zen 4) */
#define SCRATCH_BUDGET (32 * 1024)
#define MAX_SPLIT_HALO 0.1

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The input rows [lo, hi) that output rows [oy0, oy0 + rows) read, clipped to the image. */
static void input_rows(const ortx_conv_params *p, int64_t oy0, int64_t rows, int64_t *lo, int64_t *hi) {
    int64_t first = oy0 * p->stride_height - p->pad_top;
    int64_t last = (oy0 + rows - 1) * p->stride_height - p->pad_top + (p->kernel_height - 1) * p->dilation_height;
    *lo = max64(0, first);
    *hi = max64(*lo, min64(p->in_height, last + 1));
}

/* The depthwise rows where the ISA has no blocked_rows for the shape: x is the block's input at row 0 (only rows
 * the band reads are addressed), taps in blocked_rows' order, out-of-image taps skipped. */
static void band_portable(const ortx_conv_params *p, const float *x, const float *weights, const float *bias,
                          float *y, int64_t oy0, int64_t rows) {
    const int64_t H = p->in_height, W = p->in_width, OW = p->out_width, KH = p->kernel_height, KW = p->kernel_width;
    for (int64_t oy = oy0; oy < oy0 + rows; oy++)
        for (int64_t ox = 0; ox < OW; ox++)
            for (int64_t l = 0; l < 16; l++) {
                float acc = bias[l];
                for (int64_t ky = 0; ky < KH; ky++)
                    for (int64_t kx = 0; kx < KW; kx++) {
                        int64_t iy = oy * p->stride_height - p->pad_top + ky * p->dilation_height;
                        int64_t ix = ox * p->stride_width - p->pad_left + kx * p->dilation_width;
                        if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                        acc += weights[(ky * KW + kx) * 16 + l] * x[(iy * W + ix) * 16 + l];
                    }
                y[(oy * OW + ox) * 16 + l] = ortx_activation_scalar((int)p->activation, acc, p->param0, p->param1);
            }
}

typedef struct expand_job {
    ortx_conv_params p;  /* the depthwise conv */
    ortx_pointwise_nchwc_tile_fn tile;
    const ortx_depthwise_isa *isa;
    int64_t expand_in_channels, blocks, group_blocks, groups, bands, band_rows, step_rows, window, block_floats,
        scratch_floats;
    int64_t group_bytes, pair_words;  /* the expand weights' bytes per 4 blocks; bf16: the tile's words, else 0 */
    const char *expand_weights;
    const float *X, *expand_bias, *weights, *bias;
    float *Y;
    int expand_activation;
    float expand_param0, expand_param1;
} expand_job;

static void expand_task(void *context, int64_t task, int thread) {
    (void)thread;
    const expand_job *job = context;
    const ortx_conv_params *p = &job->p;
    const int64_t H = p->in_height, W = p->in_width, OH = p->out_height, OW = p->out_width;
    const int64_t taps = p->kernel_height * p->kernel_width, C = p->in_channels, blocks = job->blocks;
    const int64_t cin = job->expand_in_channels, in_blocks = ortx_nchwc_blocks(cin);
    int64_t group = task % job->groups, band = task / job->groups % job->bands, n = task / (job->groups * job->bands);
    int64_t oy0 = band * job->band_rows, end = min64(OH, oy0 + job->band_rows);
    int64_t block = group * job->group_blocks, count = min64(job->group_blocks, blocks - block);
    /* per block j of the task: its window of expanded rows at mid + j * block_floats, then its taps and bias */
    float *mid = ortx_thread_scratch(job->scratch_floats), *taps_of = mid + count * job->block_floats;
    uint32_t *pairs = job->pair_words ? (uint32_t *)(taps_of + count * (taps + 1) * 16) : NULL;  /* bf16 tiles */
    for (int64_t j = 0; j < count; j++) {
        int64_t c0 = (block + j) * 16, channels = min64(16, C - c0);
        float *weights = taps_of + j * (taps + 1) * 16, *bias = weights + taps * 16;
        for (int64_t tap = 0; tap < taps; tap++)  /* the block's taps, 16 channels per vector */
            for (int64_t l = 0; l < 16; l++)
                weights[tap * 16 + l] = l < channels ? job->weights[(c0 + l) * taps + tap] : 0.0f;
        for (int64_t l = 0; l < 16; l++) bias[l] = l < channels && p->has_bias ? job->bias[c0 + l] : 0.0f;
    }
    /* the packed expand weights hold 4 blocks of output channels per input channel (bf16: per pair of them), a
     * block's 16 channels 64 bytes from the next's */
    const float *x = job->X + n * in_blocks * H * W * 16;
    const char *w = job->expand_weights + block / 4 * job->group_bytes + block % 4 * 64;
    int64_t held_lo = 0, held_hi = 0;  /* the expanded input rows in `mid`, row held_lo first */
    for (int64_t oy = oy0; oy < end; oy += job->step_rows) {
        int64_t rows = min64(job->step_rows, end - oy), lo, hi, kept = 0;
        input_rows(p, oy, rows, &lo, &hi);
        if (lo >= held_lo && lo < held_hi) {  /* the rows the last step also read move to the front */
            kept = held_hi - lo;
            for (int64_t j = 0; j < count; j++)
                memmove(mid + j * job->block_floats, mid + j * job->block_floats + (lo - held_lo) * W * 16,
                        (size_t)(kept * W * 16) * sizeof(float));
        }
        /* the expand of input rows [lo + kept, hi) for the task's blocks: block j's row r at mid + j * block_floats
         * + (r - lo) * W * 16 (the tile's y_plane is a window) */
        int64_t pixels = max64(0, hi - lo - kept) * W;
        for (int64_t i = 0, step = ortx_pointwise_tile_pixels(count); i < pixels; i += step)
            job->tile(min64(step, pixels - i), count, cin, H * W, job->block_floats / 16,
                      x + ((lo + kept) * W + i) * 16, w, job->expand_bias + block * 16, NULL,
                      mid + (kept * W + i) * 16, job->expand_activation, job->expand_param0, job->expand_param1,
                      pairs);
        held_lo = lo;
        held_hi = hi;
        for (int64_t j = 0; j < count; j++) {
            /* stands at image row 0: only rows [lo, hi) are read */
            const float *rows_in = mid + j * job->block_floats - lo * W * 16;
            const float *weights = taps_of + j * (taps + 1) * 16, *bias = weights + taps * 16;
            float *y = job->Y + (n * blocks + block + j) * OH * OW * 16;
            if (!job->isa->blocked_rows || !job->isa->blocked_rows(p, rows_in, weights, bias, NULL, y, oy, rows))
                band_portable(p, rows_in, weights, bias, y, oy, rows);
        }
    }
}

/* Blocks per task (1, 2 or 4: the 1x1 tile's 6 x B accumulators, B blocks of one packed group of 4), where the
 * caller wants none (0): ORTX_EXPAND_GROUP_BLOCKS from the environment when set at the first call (measurements),
 * else 1 on a core with one zmm multiply-add port (ortx_fma_ports: the Zen 4's measured choice); with two, at most
 * 4 under bf16 and 2 in fp32 from at most 32 input channels (else 4), the largest that still leaves a task a
 * thread over `bands` bands. */
static int64_t auto_group_blocks(const expand_job *job, int64_t bands, int threads) {
    static _Atomic int forced = -1;  /* the environment, read once: -1 not yet, 0 not set */
    if (forced < 0) {
        const char *text = getenv("ORTX_EXPAND_GROUP_BLOCKS");
        forced = text ? atoi(text) : 0;
    }
    if (forced > 0) return forced;
    if (ortx_fma_ports() < 2) return 1;
    int64_t g = job->pair_words == 0 && job->expand_in_channels <= 32 ? 2 : 4;
    while (g > 1 && job->p.batch * bands * ((job->blocks + g - 1) / g) < (int64_t)threads) g /= 2;
    return g;
}

/* The input rows `bands` bands expand, halos included. */
static int64_t expanded_rows(const ortx_conv_params *p, int64_t bands) {
    int64_t band_rows = (p->out_height + bands - 1) / bands, total = 0, lo, hi;
    for (int64_t oy = 0; oy < p->out_height; oy += band_rows) {
        input_rows(p, oy, min64(band_rows, p->out_height - oy), &lo, &hi);
        total += hi - lo;
    }
    return total;
}

/* Bands of rows for `threads` (step 1): the count, up to 8, whose estimated finish, tasks dealt in order to the
 * least loaded thread (as the pool's stealing roughly does), is earliest; a task's cost is its expand (its input
 * rows, halo included) plus its depthwise rows. At least one band per thread where their halos add at most
 * MAX_SPLIT_HALO of the expand's rows (the split the kernels around it share: MobileNetV2-style 0.96x far apart);
 * not on short maps, where they cost more (PP-OCR rec's 12-row maps: 1.16x with the vCPUs close). One thread:
 * one band. */
static int64_t plan_bands(const expand_job *job, int threads) {
    const ortx_conv_params *p = &job->p;
    const int64_t OH = p->out_height, tasks_per_band = p->batch * job->groups;
    const double expand_row = (double)job->expand_in_channels * p->in_width;
    const double depthwise_row = (double)p->out_width * p->kernel_height * p->kernel_width;
    double best = -1.0;
    int64_t chosen = 1;
    if (threads <= 1) return 1;
    int64_t first = min64(OH, threads), whole = expanded_rows(p, 1);
    if ((double)(expanded_rows(p, first) - whole) > MAX_SPLIT_HALO * (double)whole) first = 1;
    for (int64_t bands = first; bands <= min64(OH, 8); bands++) {
        int64_t band_rows = (OH + bands - 1) / bands;
        double load[threads];
        memset(load, 0, sizeof(load));
        for (int64_t band = 0; band * band_rows < OH; band++) {
            int64_t rows = min64(band_rows, OH - band * band_rows), lo, hi;
            input_rows(p, band * band_rows, rows, &lo, &hi);
            double cost = ((hi - lo) * expand_row + rows * depthwise_row) * (double)job->group_blocks;
            for (int64_t task = 0; task < tasks_per_band; task++) {
                int least = 0;
                for (int t = 1; t < threads; t++) least = load[t] < load[least] ? t : least;
                load[least] += cost;
            }
        }
        double finish = 0.0;
        for (int t = 0; t < threads; t++) finish = load[t] > finish ? load[t] : finish;
        if (best < 0.0 || finish < best * 0.999) {
            best = finish;
            chosen = bands;
        }
    }
    return chosen;
}

static void expand_depthwise(const int64_t *ints, const float *floats, void *const *buffers, int num_threads,
                             int bf16) {
    expand_job job = {.p = ortx_conv_params_read(ints, floats)};
    ortx_conv_params *p = &job.p;
    const int64_t OH = p->out_height, W = p->in_width, taps = p->kernel_height * p->kernel_width;
    job.expand_in_channels = ints[ORTX_CONV_INTS];
    job.expand_activation = (int)ints[ORTX_CONV_INTS + 1];
    job.expand_param0 = floats[2];
    job.expand_param1 = floats[3];
    int avx512 = ortx_selected_isa() == ORTX_ISA_AVX512;
    if (bf16) {
        job.tile = avx512 && ortx_cpu_has_avx512_bf16() ? ortx_pointwise_nchwc_tile_avx512_bf16
                                                        : ortx_pointwise_nchwc_tile_portable_bf16;
        job.group_bytes = ortx_pointwise_bf16_pair_words(job.expand_in_channels) * 128 * (int64_t)sizeof(uint16_t);
        job.pair_words = ORTX_POINTWISE_LONG_PIXELS * ortx_pointwise_bf16_pair_words(job.expand_in_channels);
    } else {
        job.tile = avx512 ? ortx_pointwise_nchwc_tile_avx512 : ortx_pointwise_nchwc_tile_portable;
        job.group_bytes = job.expand_in_channels * 64 * (int64_t)sizeof(float);
    }
    job.isa = ortx_nchwc_depthwise_isa();
    int threads = (int)max64(1, min64(num_threads, p->workspace_threads));
    double macs = (double)p->batch * p->in_channels *
                  (p->in_height * W * job.expand_in_channels + OH * p->out_width * taps);
    if (macs < 256.0 * 1024) threads = 1;  /* ~10 us on one core */
    job.blocks = ortx_nchwc_blocks(p->in_channels);
    int64_t wanted = ints[ORTX_CONV_INTS + 2];
    job.group_blocks = job.groups = 1;
    if (wanted == 0) {  /* the bands one block a task would take, then as many blocks a task as they leave room for */
        job.groups = job.blocks;
        wanted = auto_group_blocks(&job, plan_bands(&job, threads), threads);
    }
    job.group_blocks = wanted == 2 || wanted == 4 ? wanted : 1;
    job.groups = (job.blocks + job.group_blocks - 1) / job.group_blocks;
    job.bands = plan_bands(&job, threads);
    job.band_rows = (OH + job.bands - 1) / job.bands;
    job.bands = (OH + job.band_rows - 1) / job.band_rows;
    int64_t budget_rows = max64(1, SCRATCH_BUDGET / (W * 16));
    int64_t step = (budget_rows - (p->kernel_height - 1) * p->dilation_height - 1) / p->stride_height + 1;
    job.step_rows = max64(1, min64(step, job.band_rows));
    job.window = min64(p->in_height, (job.step_rows - 1) * p->stride_height +
                                         (p->kernel_height - 1) * p->dilation_height + 1);
    job.block_floats = job.window * W * 16;
    job.scratch_floats = job.group_blocks * (job.block_floats + (taps + 1) * 16) + job.pair_words;
    job.X = buffers[0];
    job.expand_weights = buffers[1];
    job.expand_bias = buffers[2];
    job.weights = buffers[3];
    job.Y = buffers[4];
    job.bias = buffers[5];
    ortx_parallel_for(threads, p->batch * job.bands * job.groups, expand_task, &job);
}

void ortx_conv_expand_depthwise_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers,
                                          int num_threads) {
    expand_depthwise(ints, floats, buffers, num_threads, 0);
}

/* The expand's weights packed as conv_pointwise_nchwc_bf16's; its tiles round their input pixels to bf16 pairs in
 * the thread's scratch, after the window. */
void ortx_conv_expand_depthwise_nchwc_bf16(const int64_t *ints, const float *floats, void *const *buffers,
                                           int num_threads) {
    expand_depthwise(ints, floats, buffers, num_threads, 1);
}
