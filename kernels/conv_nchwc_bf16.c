/* conv2d_nchwc_bf16: conv2d_nchwc_f32's dense one-group conv on blocked tensors (conv.h's NCHWc) with bf16
 * operands and fp32 sums (ortx/ep/precision.py's bf16) on vdpbf16ps, so bf16 sessions on CPUs without AMX run
 * ResNet-style networks on blocked tensors as fp32 ones do, at twice the multiply-adds per instruction.
 *
 * ints = the conv ints (conv.h, workspace_threads left out), threads, then X's layout: 1 blocked, 0 NCHW (a stem:
 * the x-unfolded form below); floats = [param0, param1];
 * buffers = [X, W, bias, Y, residual (Y when has_residual is 0), workspace (conv_nchwc_bf16_sizes' bytes)];
 * Y and the residual blocked fp32; W bf16 packed [ceil(Cout / 64)][chunk][taps][the chunk's pairs][64][2] (blocked X:
 * taps KH * KW, chunks of CHUNK_BLOCKS * 8 pairs over ceil(Cin / 16) * 8, input channels 2q and 2q + 1 of an output
 * channel adjacent, vdpbf16ps's pair; NCHW X: one chunk, taps KH, pairs ceil(Cin * KW / 2) over the values
 * j = kx * Cin + c; zeros past Cin and Cout), bias ceil(Cout / 64) * 64 floats (zeros past Cout).
 *
 * 1. X is rounded once (vcvtneps2bf16: round to nearest even) into the workspace as a zero-padded blocked bf16
 *    image: [N][ceil(Cin / 16)][Hp][Wp][16], row r and column c holding input (r - pad_top, c - pad_left), lanes
 *    past Cin zero (a blocked tensor's pad lanes hold anything). Every output pixel then has all its taps inside,
 *    so there are no border cases, and a tap of any pixel is one address: its base plus the tap's offset.
 *    A stem (NCHW X, few channels) is unfolded along x instead: [N][Hp][pairs][OW][2], pair q of output column ox
 *    holding values 2q and 2q + 1 of the Cin x KW its taps read in row r (value j = kx * Cin + c: X[c][r -
 *    pad_top][ox * sw + kx * dw - pad_left], 0 outside), so the conv is a KH x 1 conv over those pairs: ResNet's
 *    3 -> 64 7x7/2 sums 7 taps x 11 pairs, 154 products for 147, where a blocked image would pad 3 channels to 16.
 * 2. Tiles of up to 6 output pixels (consecutive in the output, so across row ends too: the pixel bases are
 *    separate pointers) x 4 output blocks hold 24 sums in registers over the taps and pairs of a chunk of input
 *    channels; per tap and pair 4 weight vectors (16 output channels x 2 input channels) and one broadcast pair
 *    word per pixel (conv_nchwc_bf16_avx512.c). A task's pixel range is cut into tiles of equal size (49 pixels:
 *    4 x 6 + 5 x 5), so no short tile waits on its accumulators' latency. Groups of 1-3 blocks (convs to 16-48
 *    channels) take tiles of 24, 12 or 8 pixels while whole ones fit, so 24 sums are in flight still. (They did not
 *    make small stems pay: a 3 -> 16 stem at 640x640, 2 threads, ran 0.71 ms with 6-pixel tiles and 0.82 with
 *    long ones against conv2d_to_nchwc_f32's 0.36, bound by its unfolded rows and output bytes; such stems stay
 *    fp32, blocked_layout.dense_bf16_stem. Not measured apart on the blocked convs to few channels they serve.)
 * Tasks are (image, group of 4 output blocks, run of pixels); a task sums CHUNK_BLOCKS blocks of input channels at
 * a time over all its tiles (partial sums in Y between chunks), so the chunk's weights (KH * KW * 128 channels *
 * 128 bytes: 144 KB for a 3x3) come from memory once per task. Every output is summed in one order (chunk, then
 * tap, then pair; per pair the odd product first, as vdpbf16ps) whatever the split, so results do not depend on
 * the threads. (Chunks of 4, 2 or 1 blocks, whose weights stay in L1, measured slower on ResNet-18's 3x3 shapes;
 * 16 and 32 alike.) A chunk's weights are one run of memory, all its taps together, which the hardware prefetcher
 * streams: with each tap's slice apart (the tap-major order of conv2d_nchwc_f32) ResNet-18-style's 256 -> 256
 * convs took 0.35-0.40 ms in the model against 0.25-0.27 ms with their weights cached, and software prefetches of
 * the next chunk (into L1 on this AMD CPU, whatever the hint) cost 6-20% where the weights were cached.
 * Without AVX512_BF16 the reference runs (the lowering picks this kernel on the avx512_bf16 path only).
 * Known limits: the padded image is workspace (2 bytes per padded input value); channels are padded to 16 (a
 * blocked X) and a stem's values to a whole pair.
 */
#include <stdlib.h>
#include <string.h>

#include "conv.h"
#include "gemm_bf16.h"
#include "isa.h"
#include "ortx_kernels.h"
#include "threadpool.h"

enum { CHUNK_BLOCKS = 8, TILE = ORTX_POINTWISE_PIXELS };

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

ortx_nchwc_bf16_geometry ortx_nchwc_bf16_geometry_of(const ortx_conv_params *p, int unfolded) {
    ortx_nchwc_bf16_geometry g;
    g.unfolded = unfolded;
    g.padded_height = (p->out_height - 1) * p->stride_height + (p->kernel_height - 1) * p->dilation_height + 1;
    if (unfolded) {
        g.padded_width = p->out_width;
        g.in_blocks = 1;
        g.pairs = (p->in_channels * p->kernel_width + 1) / 2;
        g.pair_stride = 2 * p->out_width;
        g.plane = g.padded_height * g.pairs * g.pair_stride;
    } else {
        g.padded_width = (p->out_width - 1) * p->stride_width + (p->kernel_width - 1) * p->dilation_width + 1;
        g.in_blocks = ortx_nchwc_blocks(p->in_channels);
        g.pairs = 8;
        g.pair_stride = 2;
        g.plane = g.padded_height * g.padded_width * 16;
    }
    return g;
}

/* conv_nchwc_bf16_sizes: ints conv2d_nchwc_bf16's; buffers [0] int64[1] out: the workspace bytes. */
void ortx_conv_nchwc_bf16_sizes(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    const float zero[2] = {0.0f, 0.0f};
    const ortx_conv_params p = ortx_conv_params_read(ints, zero);
    const ortx_nchwc_bf16_geometry g = ortx_nchwc_bf16_geometry_of(&p, ints[ORTX_CONV_INTS] == 0);
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

/* Padded row (image, row) of step 1's x-unfolded form: per pair, its two values' columns rounded together. */
static void unfold_task(void *context, int64_t task, int thread) {
    (void)thread;
    const fill_job *job = context;
    const ortx_conv_params *p = job->p;
    const ortx_nchwc_bf16_geometry *g = &job->g;
    const int64_t rows = g->padded_height, r = task % rows, n = task / rows;
    uint16_t *dst = job->padded + n * g->plane + r * g->pairs * g->pair_stride;
    const int64_t iy = r - p->pad_top;
    if (iy < 0 || iy >= p->in_height) {
        memset(dst, 0, (size_t)(g->pairs * g->pair_stride) * sizeof(uint16_t));
        return;
    }
    const int64_t values = p->in_channels * p->kernel_width;
    for (int64_t q = 0; q < g->pairs; q++) {
        const float *src[2] = {NULL, NULL};
        int64_t offset[2] = {0, 0};
        for (int e = 0; e < 2; e++) {
            const int64_t j = 2 * q + e, kx = j / p->in_channels, c = j % p->in_channels;
            if (j >= values) continue;
            src[e] = job->X + ((n * p->in_channels + c) * p->in_height + iy) * p->in_width;
            offset[e] = kx * p->dilation_width - p->pad_left;
        }
        ortx_nchwc_bf16_avx512.unfold_pair(src, offset, p->stride_width, p->in_width, p->out_width,
                                           dst + q * g->pair_stride);
    }
}

typedef struct conv_job {
    ortx_conv_params p;
    ortx_nchwc_bf16_geometry g;
    const uint16_t *padded, *W;
    const float *bias, *residual;
    float *Y;
    int64_t groups, runs, pixels_per_run;
} conv_job;

/* Pixels [first, end) cut into tiles of equal size, at most TILE pixels: starts[k] .. starts[k + 1]; returns how
 * many (starts holds one more). */
static int64_t cut_tiles(int64_t first, int64_t end, int64_t *starts) {
    const int64_t count = end - first, tiles = (count + TILE - 1) / TILE;
    for (int64_t k = 0; k <= tiles; k++) starts[k] = first + count * k / tiles;
    return tiles;
}

/* A task's tiles: starts[k] .. starts[k + 1] pixels, long[k] whether a long tile. Tiles of equal size of at most 6
 * pixels; with fewer than 4 blocks, where the pixel step allows, long tiles (ortx_nchwc_bf16_tile_pixels) along each
 * output row while whole ones fit, the row's rest cut so. */
static int64_t task_tiles(const ortx_conv_params *p, int64_t first, int64_t end, int64_t long_pixels,
                          int64_t *starts, char *is_long) {
    if (!long_pixels) {
        const int64_t tiles = cut_tiles(first, end, starts);
        memset(is_long, 0, (size_t)tiles);
        return tiles;
    }
    int64_t tiles = 0;
    for (int64_t row = first / p->out_width * p->out_width; row < end; row += p->out_width) {
        int64_t a = max64(first, row);
        const int64_t b = min64(end, row + p->out_width);
        for (; a + long_pixels <= b; a += long_pixels, tiles++) {
            starts[tiles] = a;
            is_long[tiles] = 1;
        }
        if (a < b) {
            const int64_t rest = cut_tiles(a, b, starts + tiles);
            memset(is_long + tiles, 0, (size_t)rest);
            tiles += rest;
        }
    }
    starts[tiles] = end;
    return tiles;
}

static void conv_task(void *context, int64_t task, int thread) {
    (void)thread;
    const conv_job *job = context;
    const ortx_conv_params *p = &job->p;
    const ortx_nchwc_bf16_geometry *g = &job->g;
    const int64_t group = task % job->groups, run = task / job->groups % job->runs;
    const int64_t n = task / (job->groups * job->runs);
    const int64_t pixels = p->out_height * p->out_width;
    const int64_t first = run * job->pixels_per_run, end = min64(pixels, first + job->pixels_per_run);
    if (first >= end) return;
    const int64_t out_blocks = ortx_nchwc_blocks(p->out_channels), in_blocks = g->in_blocks;
    const int64_t y_base = (n * out_blocks + group * 4) * pixels * 16;
    ortx_nchwc_bf16_tile t = {0};
    t.blocks = min64(4, out_blocks - group * 4);
    t.y_plane = pixels * 16;
    t.x_plane = g->plane;
    t.pairs = g->pairs;
    t.pair_stride = g->pair_stride;
    t.pixel_step = g->unfolded ? 2 : p->stride_width * 16;
    t.bias = job->bias + group * 64;
    t.activation = (int)p->activation;
    t.param0 = p->param0;
    t.param1 = p->param1;
    int64_t tap_offsets[ORTX_NCHWC_BF16_MAX_TAPS];
    if (g->unfolded) {
        for (int64_t ky = 0; ky < p->kernel_height; ky++)
            tap_offsets[ky] = ky * p->dilation_height * g->pairs * g->pair_stride;
    } else {
        for (int64_t ky = 0, k = 0; ky < p->kernel_height; ky++)
            for (int64_t kx = 0; kx < p->kernel_width; kx++, k++)
                tap_offsets[k] = (ky * p->dilation_height * g->padded_width + kx * p->dilation_width) * 16;
    }
    t.tap_offsets = tap_offsets;
    t.taps = g->unfolded ? p->kernel_height : p->kernel_height * p->kernel_width;
    const int64_t long_pixels = t.blocks < 4 && (t.pixel_step == 2 || t.pixel_step == 16 || t.pixel_step == 32)
                                    ? ortx_nchwc_bf16_tile_pixels(t.blocks) : 0;
    const int64_t most = end - first + 1;  /* tiles a task can have, and one more start */
    int64_t *starts = malloc(sizeof(int64_t) * (size_t)most);
    char *is_long = malloc((size_t)most);
    if (!starts || !is_long) {  /* (a few KB) */
        free(starts);
        free(is_long);
        return;
    }
    const int64_t tiles = task_tiles(p, first, end, long_pixels, starts, is_long);
    const uint16_t *image = job->padded + n * in_blocks * g->plane;
    const uint16_t *w = job->W + group * t.taps * in_blocks * g->pairs * 128;
    const uint16_t *x[ORTX_NCHWC_BF16_SUMS];
    for (int64_t b0 = 0; b0 < in_blocks; b0 += CHUNK_BLOCKS) {
        t.block_count = min64(CHUNK_BLOCKS, in_blocks - b0);
        t.first = b0 == 0;
        t.last = b0 + CHUNK_BLOCKS >= in_blocks;
        t.w_tap = t.block_count * g->pairs * 128;  /* the chunk's weights: [tap][its pairs][64][2], one run */
        const uint16_t *x_chunk = image + b0 * g->plane, *w_chunk = w + b0 * g->pairs * 128 * t.taps;
        for (int64_t k = 0; k < tiles; k++) {
            const int64_t i0 = starts[k], i1 = starts[k + 1];
            for (int64_t i = i0; i < (is_long[k] ? i0 + 1 : i1); i++) {  /* a long tile: its first pixel's base */
                const int64_t oy = i / p->out_width, ox = i % p->out_width;
                x[i - i0] = x_chunk + (g->unfolded ? oy * p->stride_height * g->pairs * g->pair_stride + ox * 2
                                                   : (oy * p->stride_height * g->padded_width + ox * p->stride_width)
                                                         * 16);
            }
            ortx_nchwc_bf16_avx512.tile(&t, i1 - i0, x, w_chunk,
                                        job->residual ? job->residual + y_base + i0 * 16 : NULL,
                                        job->Y + y_base + i0 * 16);
        }
    }
    free(starts);
    free(is_long);
}

void ortx_conv2d_nchwc_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    const ortx_conv_params p = ortx_conv_params_read(ints, floats);
    if (ortx_selected_isa() != ORTX_ISA_AVX512 || !ortx_cpu_has_avx512_bf16() || ortx_nchwc_bf16_avx512.tile == NULL
        || p.kernel_height * p.kernel_width > ORTX_NCHWC_BF16_MAX_TAPS
        || (ints[ORTX_CONV_INTS] == 0 && p.in_channels * p.kernel_width > 2 * ORTX_NCHWC_BF16_MAX_PAIRS)) {
        ortx_conv2d_nchwc_bf16_ref(ints, floats, buffers, num_threads);
        return;
    }
    const int threads = (int)max64(1, min64(num_threads, ints[ORTX_CONV_INTS - 1]));
    fill_job fill = {&p, ortx_nchwc_bf16_geometry_of(&p, ints[ORTX_CONV_INTS] == 0), buffers[0], buffers[5]};
    ortx_parallel_for(threads, p.batch * fill.g.in_blocks * fill.g.padded_height,
                      fill.g.unfolded ? unfold_task : fill_task, &fill);
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
