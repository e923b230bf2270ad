/* conv2d_nchwc_bf16: conv2d_nchwc_f32's dense one-group conv on blocked tensors (conv.h's NCHWc) with bf16
 * operands and fp32 sums (ortx/ep/precision.py's bf16) on vdpbf16ps, so bf16 sessions on CPUs without AMX run
 * ResNet-style networks on blocked tensors as fp32 ones do, at twice the multiply-adds per instruction.
 *
 * ints = the conv ints (conv.h, workspace_threads left out) then threads; floats = [param0, param1];
 * buffers = [X, W, bias, Y, residual (Y when has_residual is 0), workspace (conv_nchwc_bf16_sizes' bytes)];
 * X, Y and the residual blocked fp32; W bf16 packed [ceil(Cout / 64)][KH * KW][ceil(Cin / 16) * 8][64][2] (input
 * channels 2q and 2q + 1 of an output channel adjacent, vdpbf16ps's pair; zeros past Cin and Cout), bias
 * ceil(Cout / 64) * 64 floats (zeros past Cout).
 *
 * 1. X is rounded once (vcvtneps2bf16: round to nearest even) into the workspace as a zero-padded blocked bf16
 *    image: [N][ceil(Cin / 16)][Hp][Wp][16], row r and column c holding input (r - pad_top, c - pad_left), lanes
 *    past Cin zero (a blocked tensor's pad lanes hold anything). Every output pixel then has all its taps inside,
 *    so there are no border cases, and a tap of any pixel is one address: its base plus the tap's offset.
 * 2. Tiles of up to 6 output pixels (consecutive in the output, so across row ends too: the pixel bases are
 *    separate pointers) x 4 output blocks hold 24 sums in registers over the taps and pairs of a chunk of input
 *    channels; per tap and pair 4 weight vectors (16 output channels x 2 input channels) and one broadcast pair
 *    word per pixel (conv_nchwc_bf16_avx512.c). A task's pixel range is cut into tiles of equal size (49 pixels:
 *    4 x 6 + 5 x 5), so no short tile waits on its accumulators' latency.
 * Tasks are (image, group of 4 output blocks, run of pixels); a task sums CHUNK_BLOCKS blocks of input channels at
 * a time over all its tiles (partial sums in Y between chunks), so the chunk's weights (KH * KW * 128 channels *
 * 128 bytes: 144 KB for a 3x3) come from memory once per task. Every output is summed in one order (chunk, then
 * tap, then pair; per pair the odd product first, as vdpbf16ps) whatever the split, so results do not depend on
 * the threads.
 * Without AVX512_BF16 the reference runs (the lowering picks this kernel on the avx512_bf16 path only).
 * Known limits: the padded image is workspace (2 bytes per padded input value); channels are padded to 16, so a
 * conv from 3 channels (a stem) multiplies 13 zero channels per pixel.
 */
#include <string.h>

#include "conv.h"
#include "gemm_bf16.h"
#include "isa.h"
#include "ortx_kernels.h"
#include "threadpool.h"

enum { CHUNK_BLOCKS = 8, TILE = ORTX_POINTWISE_PIXELS };

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

ortx_nchwc_bf16_geometry ortx_nchwc_bf16_geometry_of(const ortx_conv_params *p) {
    ortx_nchwc_bf16_geometry g;
    g.padded_height = (p->out_height - 1) * p->stride_height + (p->kernel_height - 1) * p->dilation_height + 1;
    g.padded_width = (p->out_width - 1) * p->stride_width + (p->kernel_width - 1) * p->dilation_width + 1;
    g.in_blocks = ortx_nchwc_blocks(p->in_channels);
    g.plane = g.padded_height * g.padded_width * 16;
    return g;
}

/* conv_nchwc_bf16_sizes: ints conv2d_nchwc_bf16's; buffers [0] int64[1] out: the workspace bytes. */
void ortx_conv_nchwc_bf16_sizes(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    const float zero[2] = {0.0f, 0.0f};
    const ortx_conv_params p = ortx_conv_params_read(ints, zero);
    const ortx_nchwc_bf16_geometry g = ortx_nchwc_bf16_geometry_of(&p);
    ((int64_t *)buffers[0])[0] = p.batch * g.in_blocks * g.plane * (int64_t)sizeof(uint16_t);
}

typedef struct fill_job {
    const ortx_conv_params *p;
    ortx_nchwc_bf16_geometry g;
    const float *X;
    uint16_t *padded;
} fill_job;

/* Padded row (image, block, row) of step 1. */
static void fill_task(void *context, int64_t task, int thread) {
    (void)thread;
    const fill_job *job = context;
    const ortx_conv_params *p = job->p;
    const int64_t rows = job->g.padded_height, width = job->g.padded_width;
    const int64_t r = task % rows, block = task / rows;  /* block: image * in_blocks + channel block */
    uint16_t *dst = job->padded + block * job->g.plane + r * width * 16;
    const int64_t iy = r - p->pad_top;
    if (iy < 0 || iy >= p->in_height) {
        memset(dst, 0, (size_t)(width * 16) * sizeof(uint16_t));
        return;
    }
    const int64_t lanes = min64(16, p->in_channels - block % job->g.in_blocks * 16);
    const int64_t x0 = max64(0, min64(width, p->pad_left)), x1 = max64(x0, min64(width, p->pad_left + p->in_width));
    memset(dst, 0, (size_t)(x0 * 16) * sizeof(uint16_t));
    memset(dst + x1 * 16, 0, (size_t)((width - x1) * 16) * sizeof(uint16_t));
    const float *src = job->X + (block * p->in_height + iy) * p->in_width * 16 + (x0 - p->pad_left) * 16;
    ortx_nchwc_bf16_avx512.round_pixels(src, x1 - x0, lanes, dst + x0 * 16);
}

typedef struct conv_job {
    ortx_conv_params p;
    ortx_nchwc_bf16_geometry g;
    const uint16_t *padded, *W;
    const float *bias, *residual;
    float *Y;
    int64_t groups, runs, pixels_per_run;
} conv_job;

static void conv_task(void *context, int64_t task, int thread) {
    (void)thread;
    const conv_job *job = context;
    const ortx_conv_params *p = &job->p;
    const int64_t group = task % job->groups, run = task / job->groups % job->runs;
    const int64_t n = task / (job->groups * job->runs);
    const int64_t pixels = p->out_height * p->out_width;
    const int64_t first = run * job->pixels_per_run, end = min64(pixels, first + job->pixels_per_run);
    if (first >= end) return;
    const int64_t out_blocks = ortx_nchwc_blocks(p->out_channels), in_blocks = job->g.in_blocks;
    const int64_t taps = p->kernel_height * p->kernel_width;
    const int64_t y_base = (n * out_blocks + group * 4) * pixels * 16;
    ortx_nchwc_bf16_tile t = {0};
    t.blocks = min64(4, out_blocks - group * 4);
    t.y_plane = pixels * 16;
    t.w_tap = in_blocks * 8 * 128;
    t.x_plane = job->g.plane;
    t.bias = job->bias + group * 64;
    t.activation = (int)p->activation;
    t.param0 = p->param0;
    t.param1 = p->param1;
    int64_t tap_offsets[ORTX_NCHWC_BF16_MAX_TAPS];
    for (int64_t ky = 0, k = 0; ky < p->kernel_height; ky++)
        for (int64_t kx = 0; kx < p->kernel_width; kx++, k++)
            tap_offsets[k] = (ky * p->dilation_height * job->g.padded_width + kx * p->dilation_width) * 16;
    t.tap_offsets = tap_offsets;
    t.taps = taps;
    const uint16_t *image = job->padded + n * in_blocks * job->g.plane;
    const uint16_t *w = job->W + group * taps * t.w_tap;
    const int64_t count = end - first, tiles = (count + TILE - 1) / TILE;
    for (int64_t b0 = 0; b0 < in_blocks; b0 += CHUNK_BLOCKS) {
        t.block_count = min64(CHUNK_BLOCKS, in_blocks - b0);
        t.first = b0 == 0;
        t.last = b0 + CHUNK_BLOCKS >= in_blocks;
        const uint16_t *x_chunk = image + b0 * job->g.plane, *w_chunk = w + b0 * 8 * 128;
        for (int64_t k = 0; k < tiles; k++) {  /* tiles of equal size: their sizes differ by at most one */
            const int64_t i0 = first + count * k / tiles, i1 = first + count * (k + 1) / tiles;
            const uint16_t *x[TILE];
            for (int64_t i = i0; i < i1; i++) {
                const int64_t oy = i / p->out_width, ox = i % p->out_width;
                x[i - i0] = x_chunk + (oy * p->stride_height * job->g.padded_width + ox * p->stride_width) * 16;
            }
            ortx_nchwc_bf16_avx512.tile(&t, i1 - i0, x, w_chunk,
                                        job->residual ? job->residual + y_base + i0 * 16 : NULL,
                                        job->Y + y_base + i0 * 16);
        }
    }
}

void ortx_conv2d_nchwc_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    const ortx_conv_params p = ortx_conv_params_read(ints, floats);
    if (ortx_selected_isa() != ORTX_ISA_AVX512 || !ortx_cpu_has_avx512_bf16() || ortx_nchwc_bf16_avx512.tile == NULL
        || p.kernel_height * p.kernel_width > ORTX_NCHWC_BF16_MAX_TAPS) {
        ortx_conv2d_nchwc_bf16_ref(ints, floats, buffers, num_threads);
        return;
    }
    const int threads = (int)max64(1, min64(num_threads, ints[ORTX_CONV_INTS - 1]));
    fill_job fill = {&p, ortx_nchwc_bf16_geometry_of(&p), buffers[0], buffers[5]};
    ortx_parallel_for(threads, p.batch * fill.g.in_blocks * fill.g.padded_height, fill_task, &fill);
    conv_job job = {p, fill.g, buffers[5], buffers[1], buffers[2], p.has_residual ? buffers[4] : NULL, buffers[3],
                    0, 0, 0};
    job.groups = (ortx_nchwc_blocks(p.out_channels) + 3) / 4;
    /* the fewest pixel runs that give every thread two tasks: each run reads its group's weights once */
    const int64_t pixels = p.out_height * p.out_width, pieces = p.batch * job.groups, wanted = 2 * (int64_t)threads;
    job.runs = threads > 1 ? min64(max64(1, pixels / TILE), max64(1, (wanted + pieces - 1) / pieces)) : 1;
    job.pixels_per_run = (pixels + job.runs - 1) / job.runs;
    job.runs = (pixels + job.pixels_per_run - 1) / job.pixels_per_run;
    ortx_parallel_for(threads, p.batch * job.groups * job.runs, conv_task, &job);
}
