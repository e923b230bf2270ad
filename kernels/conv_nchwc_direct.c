/* conv2d_nchwc_f32: a dense one-group conv read from and written to blocked tensors (conv.h's NCHWc), so the
 * strided 3x3 convs of ResNet-style bottlenecks join the blocked runs of their 1x1 convs instead of cutting them
 * with two reorders (ortx/ep/lowering/blocked_layout.py).
 *
 * ints = the conv ints (conv.h, workspace_threads left out) then threads; floats = [param0, param1];
 * buffers = [X, W, bias, Y, residual (Y when has_residual is 0)]; W packed per group of 64 output channels, per
 * chunk of CHUNK input channels, [KH * KW][the chunk's channels][64] (zeros past Cout; a chunk's weights one run of
 * memory, which the hardware prefetcher streams, as conv2d_nchwc_bf16's), bias ceil(Cout / 64) * 64 floats (zeros
 * past Cout).
 *
 * The multiply-adds are the 1x1 conv's AVX-512 tile over taps (conv_nchwc_direct_avx512.c): up to 6 output pixels x
 * 4 output blocks in 24 registers, per tap (ky, kx) and input channel 4 weight vectors and one broadcast per pixel,
 * the pixels x_step floats apart in X, the sums held in registers across the taps of a channel chunk. Taps that fall
 * in the padding are skipped, not multiplied by zeros: the output is cut into strips whose pixels share their valid
 * taps, a row's interior columns (tiles along the row), each border column of the interior rows (tiles down the
 * column: x_step is a row of X), and a border row's border pixels one by one. (Until session 41 the tile was the 1x1
 * conv's chunk form called once per tap, storing and reloading its sums at every tap; the kernel alone on
 * ResNet-18's 3x3 shapes, 2 threads, one process, interleaved, AMD Zen 5 host: 0.87-0.93x that. The same sums in
 * the same order, so the same bits.)
 * Tasks are (image, group of 4 output blocks, run of output rows); a task sums CHUNK input channels at a time over
 * all its strips, so the chunk's weights (KH * KW * CHUNK * 256 bytes: 288 KB for a 3x3) come from memory once per
 * task and from L2 for its other tiles; they are one run of memory, all the chunk's taps together (session 42; tap
 * slices Cin * 256 bytes apart before), which the hardware prefetcher streams: AMD Zen 5, 2 threads, in-process A/B,
 * both build orders: ResNet-18-style 0.98x, ResNet-50 0.99x, Inception v2 0.955x, SqueezeNet 0.99x, DenseNet-121
 * 1.03x (0.997 and 1.065: noise). Every output is summed in one order (chunk, then tap, then channel)
 * whatever the split, so results do not depend on threads.
 * Without AVX-512 the reference runs (the lowering plans blocked tensors on AVX-512 only).
 */
#include <stdlib.h>

#include "conv.h"
#include "ortx_kernels.h"
#include "threadpool.h"

enum { CHUNK = 128, TILE = ORTX_POINTWISE_PIXELS };

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Taps [*first, *last) of output position o that land inside the input along one axis. */
static void valid_taps(int64_t o, int64_t stride, int64_t pad, int64_t dilation, int64_t kernel, int64_t in,
                       int64_t *first, int64_t *last) {
    const int64_t start = o * stride - pad;
    int64_t lo = 0, hi = kernel;
    if (start < 0) lo = (-start + dilation - 1) / dilation;
    if (start + (kernel - 1) * dilation >= in) hi = start >= in ? 0 : (in - 1 - start) / dilation + 1;
    *first = lo;
    *last = max64(lo, hi);
}

/* `count` output pixels from (oy, ox), along the row or (down) down the column, all with the taps [ky0, ky1) x
 * [kx0, kx1) inside X. */
typedef struct strip {
    int64_t oy, ox, count, ky0, ky1, kx0, kx1;
    int down;
} strip;

typedef struct direct_job {
    ortx_conv_params p;
    const float *X, *W, *bias, *residual;
    float *Y;
    int64_t groups, runs, rows_per_run;
} direct_job;

/* One strip per border column (outside [ox_lo, ox_hi)) of `rows` output rows from oy, with taps [ky0, ky1) x the
 * column's valid kx, down the rows when `down`; returns how many. */
static int64_t border_strips(const ortx_conv_params *p, int64_t ox_lo, int64_t ox_hi, int64_t oy, int64_t rows,
                             int64_t ky0, int64_t ky1, int down, strip *strips) {
    const int64_t ranges[2][2] = {{0, ox_lo}, {max64(ox_lo, ox_hi), p->out_width}};
    int64_t count = 0;
    for (int r = 0; r < 2; r++)
        for (int64_t ox = ranges[r][0]; ox < ranges[r][1]; ox++) {
            int64_t kx0, kx1;
            valid_taps(ox, p->stride_width, p->pad_left, p->dilation_width, p->kernel_width, p->in_width, &kx0,
                       &kx1);
            strips[count++] = (strip){oy, ox, rows, ky0, ky1, kx0, kx1, down};
        }
    return count;
}

/* Strips covering output rows [row0, row1): interior columns [ox_lo, ox_hi) have every kx inside X. */
static int64_t make_strips(const ortx_conv_params *p, int64_t row0, int64_t row1, strip *strips) {
    int64_t count = 0, ox_lo = 0, ox_hi = p->out_width;
    while (ox_lo < p->out_width) {
        int64_t first, last;
        valid_taps(ox_lo, p->stride_width, p->pad_left, p->dilation_width, p->kernel_width, p->in_width, &first,
                   &last);
        if (first == 0 && last == p->kernel_width) break;
        ox_lo++;
    }
    while (ox_hi > ox_lo) {
        int64_t first, last;
        valid_taps(ox_hi - 1, p->stride_width, p->pad_left, p->dilation_width, p->kernel_width, p->in_width, &first,
                   &last);
        if (first == 0 && last == p->kernel_width) break;
        ox_hi--;
    }
    int64_t interior0 = -1, interior1 = -1;  /* rows with every ky inside X, [interior0, interior1) */
    for (int64_t oy = row0; oy < row1; oy++) {
        int64_t ky0, ky1;
        valid_taps(oy, p->stride_height, p->pad_top, p->dilation_height, p->kernel_height, p->in_height, &ky0, &ky1);
        const int full = ky0 == 0 && ky1 == p->kernel_height;
        if (full && interior0 < 0) interior0 = oy;
        if (full) interior1 = oy + 1;
        if (ox_hi > ox_lo) strips[count++] = (strip){oy, ox_lo, ox_hi - ox_lo, ky0, ky1, 0, p->kernel_width, 0};
        if (!full)  /* the interior rows (a contiguous range) have their border columns as down strips below */
            count += border_strips(p, ox_lo, ox_hi, oy, 1, ky0, ky1, 0, strips + count);
    }
    if (interior0 >= 0)
        count += border_strips(p, ox_lo, ox_hi, interior0, interior1 - interior0, 0, p->kernel_height, 1,
                               strips + count);
    return count;
}

static void direct_task(void *context, int64_t task, int thread) {
    (void)thread;
    const direct_job *job = context;
    const ortx_conv_params *p = &job->p;
    const int64_t group = task % job->groups, run = task / job->groups % job->runs;
    const int64_t n = task / (job->groups * job->runs);
    const int64_t row0 = run * job->rows_per_run, row1 = min64(p->out_height, row0 + job->rows_per_run);
    if (row0 >= row1) return;
    const int64_t in_blocks = ortx_nchwc_blocks(p->in_channels), out_blocks = ortx_nchwc_blocks(p->out_channels);
    const int64_t blocks = min64(4, out_blocks - group * 4), taps = p->kernel_height * p->kernel_width;
    const int64_t x_plane = p->in_height * p->in_width, y_plane = p->out_height * p->out_width;
    const float *x = job->X + n * in_blocks * x_plane * 16;
    const int64_t y_base = ((n * out_blocks + group * 4) * y_plane) * 16;
    float *y = job->Y + y_base;
    const float *residual = job->residual ? job->residual + y_base : NULL;
    const float *w = job->W + group * taps * p->in_channels * 64, *bias = job->bias + group * 64;
    /* at most: per row its interior strip and its border pixels, plus the border columns of the interior rows */
    const int64_t most = (row1 - row0) * (p->out_width + 1) + p->out_width;
    strip *strips = malloc(sizeof(strip) * (size_t)most);
    if (!strips) return;  /* (a few KB) */
    const int64_t count = make_strips(p, row0, row1, strips);
    const int64_t last_chunk = (max64(p->in_channels, 1) - 1) / CHUNK * CHUNK;
    ortx_direct_nchwc_tile tile = {0};
    tile.x_plane = x_plane;
    tile.y_plane = y_plane;
    tile.x_tap_row = p->dilation_height * p->in_width * 16;
    tile.x_tap_col = p->dilation_width * 16;
    tile.bias = bias;
    tile.activation = (int)p->activation;
    tile.param0 = p->param0;
    tile.param1 = p->param1;
    for (int64_t c0 = 0; c0 < max64(p->in_channels, 1); c0 += CHUNK) {
        tile.c_begin = c0;
        tile.c_count = min64(CHUNK, p->in_channels - c0);
        tile.w_tap_col = tile.c_count * 64;  /* the chunk's weights: [tap][its channels][64], one run */
        tile.w_tap_row = p->kernel_width * tile.w_tap_col;
        const float *w_chunk = w + c0 * taps * 64;
        for (int64_t s = 0; s < count; s++) {
            const strip *st = &strips[s];
            const int64_t x_step = 16 * (st->down ? p->stride_height * p->in_width : p->stride_width);
            const int64_t y_step = 16 * (st->down ? p->out_width : 1);
            for (int64_t t = 0; t < st->count; t += TILE) {
                const int64_t pixels = min64(TILE, st->count - t);
                const int64_t oy = st->oy + (st->down ? t : 0), ox = st->ox + (st->down ? 0 : t);
                const int64_t at = (oy * p->out_width + ox) * 16;
                if (st->ky0 == st->ky1 || st->kx0 == st->kx1) {  /* no tap inside X: the bias alone */
                    if (c0 == 0)
                        ortx_pointwise_nchwc_chunk_avx512(pixels, blocks, 0, 0, x_plane, x_step, y_plane, y_step, x,
                                                          w, bias, residual ? residual + at : NULL, y + at, 1, 1,
                                                          (int)p->activation, p->param0, p->param1);
                    continue;
                }
                const int64_t iy = oy * p->stride_height - p->pad_top + st->ky0 * p->dilation_height;
                const int64_t ix = ox * p->stride_width - p->pad_left + st->kx0 * p->dilation_width;
                tile.first = c0 == 0;
                tile.last = c0 == last_chunk;
                tile.x_step = x_step;
                tile.y_step = y_step;
                tile.taps_y = st->ky1 - st->ky0;
                tile.taps_x = st->kx1 - st->kx0;
                ortx_direct_nchwc_taps_avx512(&tile, pixels, blocks, x + (iy * p->in_width + ix) * 16,
                                              w_chunk + (st->ky0 * p->kernel_width + st->kx0) * tile.w_tap_col,
                                              residual ? residual + at : NULL, y + at);
            }
        }
    }
    free(strips);
}

void ortx_conv2d_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    if (ortx_selected_isa() != ORTX_ISA_AVX512 || ortx_pointwise_nchwc_chunk_avx512 == NULL
        || ortx_direct_nchwc_taps_avx512 == NULL) {
        ortx_conv2d_nchwc_f32_ref(ints, floats, buffers, num_threads);
        return;
    }
    direct_job job = {ortx_conv_params_read(ints, floats), buffers[0], buffers[1], buffers[2], NULL, buffers[3],
                      0, 0, 0};
    const ortx_conv_params *p = &job.p;
    if (p->has_residual) job.residual = buffers[4];
    const int threads = (int)max64(1, min64(num_threads, ints[ORTX_CONV_INTS - 1]));
    job.groups = (ortx_nchwc_blocks(p->out_channels) + 3) / 4;
    /* the fewest row runs that give every thread two tasks: each run reads its groups' weights once */
    const int64_t pieces = p->batch * job.groups, wanted = 2 * (int64_t)threads;
    job.runs = threads > 1 ? min64(p->out_height, max64(1, (wanted + pieces - 1) / pieces)) : 1;
    job.rows_per_run = (p->out_height + job.runs - 1) / job.runs;
    job.runs = (p->out_height + job.rows_per_run - 1) / job.rows_per_run;
    ortx_parallel_for(threads, p->batch * job.groups * job.runs, direct_task, &job);
}
