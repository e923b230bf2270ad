/* conv2d_to_nchwc_f32: a dense, ungrouped conv reading NCHW and writing the blocked layout (conv.h's NCHWc).
 *
 * ints = conv.h's 20 conv ints (group 1, has_residual 0); floats = [param0, param1]; buffers = [X (NCHW),
 * W (packed, conv.h), Y (blocked), bias (packed)].
 * Why: a network's stem (3 -> 32 channels, 3x3 stride 2) feeds a run of blocked convs; writing its output blocked
 * saves the reorder pass over its largest activation, and with 27 taps the conv is a short sum per output that
 * vectorises over 16 output channels with no packing of the input.
 * 1. Tasks are (image, band of output rows); per output row, the columns whose taps all lie inside the input
 *    along x are cut into tiles of ortx_to_nchwc_tile_pixels(blocks) pixels for each group of up to 4 output
 *    blocks (the last tile of a row is moved left to end at the row's last such column, recomputing a few pixels
 *    with the same operations, so no tile size other than the full one is needed; rows with fewer than 24 such
 *    columns have no tiles); in a border row (some ky outside the input) the tiles sum only the taps whose ky lies
 *    inside (until session 41 such rows went through `border` whole: ResNet's 7x7/2 stem from 224 pixels has 3 of
 *    112, and `border` ran one accumulator chain at a time);
 * 2. every other pixel (the pad columns, or rows too short for a tile) goes through `border`, which skips the taps
 *    outside the input and sums the others in the same order.
 * Every output is bias + the taps in (c, ky, kx) order, one multiply-add each, then the activation, so results do
 * not depend on the split or on which path computed a pixel.
 */
#include "activation.h"
#include "conv.h"
#include "ortx_kernels.h"
#include "threadpool.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static void tile_portable(const ortx_conv_params *p, int64_t pixels, int64_t blocks, const float *x,
                          const int32_t *tap_offsets, const int32_t *tap_rows, int64_t taps, const float *w,
                          int64_t ldw, const float *bias, float *y) {
    const int64_t plane = p->out_height * p->out_width;
    for (int64_t i = 0; i < pixels; i++)
        for (int64_t l = 0; l < 16 * blocks; l++) {
            float acc = bias[l];
            for (int64_t k = 0; k < taps; k++)
                acc += w[(int64_t)tap_rows[k] * ldw + l] * x[tap_offsets[k] + i * p->stride_width];
            y[(l / 16 * plane + i) * 16 + l % 16] = ortx_activation_scalar((int)p->activation, acc, p->param0,
                                                                            p->param1);
        }
}

static void border_portable(const ortx_conv_params *p, const float *x, const float *w, const float *bias, int64_t oy,
                            int64_t ox, float *y) {
    const int64_t blocks = ortx_nchwc_blocks(p->out_channels), ldw = blocks * 16;
    const int64_t plane = p->out_height * p->out_width, H = p->in_height, W = p->in_width;
    for (int64_t l = 0; l < ldw; l++) {
        float acc = bias[l];
        for (int64_t c = 0, k = 0; c < p->in_channels; c++)
            for (int64_t ky = 0; ky < p->kernel_height; ky++)
                for (int64_t kx = 0; kx < p->kernel_width; kx++, k++) {
                    int64_t iy = oy * p->stride_height - p->pad_top + ky * p->dilation_height;
                    int64_t ix = ox * p->stride_width - p->pad_left + kx * p->dilation_width;
                    if (iy >= 0 && iy < H && ix >= 0 && ix < W) acc += w[k * ldw + l] * x[(c * H + iy) * W + ix];
                }
        y[(l / 16 * plane + oy * p->out_width + ox) * 16 + l % 16] =
            ortx_activation_scalar((int)p->activation, acc, p->param0, p->param1);
    }
}

static const ortx_to_nchwc_isa to_nchwc_portable = {tile_portable, border_portable};

typedef struct to_nchwc_job {
    const ortx_conv_params *p;
    const ortx_to_nchwc_isa *isa;
    const float *X, *W, *bias;
    float *Y;
    const int32_t *tap_offsets, *tap_rows;
    int64_t band_rows, bands, x_lo, x_hi;  /* interior output columns [x_lo, x_hi) */
} to_nchwc_job;

static void to_nchwc_task(void *context, int64_t task, int thread) {
    (void)thread;
    const to_nchwc_job *job = context;
    const ortx_conv_params *p = job->p;
    const int64_t H = p->in_height, W = p->in_width, OH = p->out_height, OW = p->out_width;
    const int64_t KH = p->kernel_height, KW = p->kernel_width, dh = p->dilation_height;
    const int64_t blocks = ortx_nchwc_blocks(p->out_channels), ldw = blocks * 16;
    const int64_t all_taps = p->in_channels * KH * KW;
    int32_t row_offsets[all_taps], row_rows[all_taps];  /* a border row's taps inside the input */
    int64_t n = task / job->bands, band = task % job->bands;
    const float *x = job->X + n * p->in_channels * H * W;
    float *y = job->Y + n * blocks * OH * OW * 16;
    for (int64_t oy = band * job->band_rows; oy < min64(OH, (band + 1) * job->band_rows); oy++) {
        const int64_t iy = oy * p->stride_height - p->pad_top;
        int64_t ky0 = 0, ky1 = KH;  /* the taps [ky0, ky1) whose input row lies inside X */
        if (iy < 0) ky0 = (-iy + dh - 1) / dh;
        if (iy + (KH - 1) * dh >= H) ky1 = iy >= H ? 0 : (H - 1 - iy) / dh + 1;
        ky1 = max64(ky0, ky1);
        const int32_t *offsets = job->tap_offsets, *rows = job->tap_rows;
        int64_t taps = all_taps;
        if (ky0 > 0 || ky1 < KH) {  /* a border row: its interior columns as tiles over the taps inside */
            taps = 0;
            for (int64_t c = 0; c < p->in_channels; c++)
                for (int64_t ky = ky0; ky < ky1; ky++)
                    for (int64_t kx = 0; kx < KW; kx++, taps++) {
                        row_offsets[taps] = (int32_t)((c * H + (ky - ky0) * dh) * W + kx * p->dilation_width);
                        row_rows[taps] = (int32_t)((c * KH + ky) * KW + kx);
                    }
            offsets = row_offsets;
            rows = row_rows;
        }
        int64_t lo = job->x_lo, hi = job->x_hi;
        if (hi - lo < ORTX_TO_NCHWC_ACCUMULATORS) lo = hi = OW;  /* too short for every group's tile: border */
        for (int64_t b0 = 0; b0 < blocks && hi > lo; b0 += 4) {
            int64_t group = min64(4, blocks - b0), pixels = ortx_to_nchwc_tile_pixels(group);
            for (int64_t ox = lo; ox < hi; ox += pixels) {
                int64_t start = min64(ox, hi - pixels);
                const float *xt = x + (iy + ky0 * dh) * W + start * p->stride_width - p->pad_left;
                job->isa->tile(p, pixels, group, xt, offsets, rows, taps, job->W + b0 * 16, ldw,
                               job->bias + b0 * 16, y + (b0 * OH * OW + oy * OW + start) * 16);
            }
        }
        for (int64_t ox = 0; ox < OW; ox++)
            if (ox < lo || ox >= hi) job->isa->border(p, x, job->W, job->bias, oy, ox, y);
    }
}

void ortx_conv2d_to_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    int threads = (int)max64(1, min64(num_threads, p.workspace_threads));
    const int64_t taps = p.in_channels * p.kernel_height * p.kernel_width;
    if ((double)p.batch * p.out_channels * p.out_height * p.out_width * taps < 256.0 * 1024) threads = 1;
    int32_t tap_offsets[taps], tap_rows[taps];
    for (int64_t c = 0, k = 0; c < p.in_channels; c++)
        for (int64_t ky = 0; ky < p.kernel_height; ky++)
            for (int64_t kx = 0; kx < p.kernel_width; kx++, k++) {
                tap_offsets[k] = (int32_t)((c * p.in_height + ky * p.dilation_height) * p.in_width +
                                           kx * p.dilation_width);
                tap_rows[k] = (int32_t)k;
            }
    /* interior columns: ox * sw - pad_left >= 0 and ox * sw - pad_left + (KW - 1) * dw < W */
    int64_t x_lo = (p.pad_left + p.stride_width - 1) / p.stride_width;
    int64_t last = p.in_width - 1 - (p.kernel_width - 1) * p.dilation_width + p.pad_left;
    int64_t x_hi = last < 0 ? 0 : min64(p.out_width, last / p.stride_width + 1);
    x_hi = max64(x_hi, x_lo);
    int64_t wanted = ORTX_TASKS_PER_THREAD * threads;
    int64_t bands = threads > 1 ? min64(p.out_height, (wanted + p.batch - 1) / p.batch) : 1;
    int64_t band_rows = (p.out_height + bands - 1) / bands;
    to_nchwc_job job = {&p, ortx_selected_isa() == ORTX_ISA_AVX512 ? &ortx_to_nchwc_avx512 : &to_nchwc_portable,
                        buffers[0], buffers[1], buffers[3], buffers[2], tap_offsets, tap_rows, band_rows,
                        (p.out_height + band_rows - 1) / band_rows, x_lo, x_hi};
    ortx_parallel_for(threads, p.batch * job.bands, to_nchwc_task, &job);
}
