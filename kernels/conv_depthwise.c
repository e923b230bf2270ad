/* conv2d_depthwise_f32 (conv.c Case 2): depthwise conv, group == Cin == Cout, NCHW, fused bias, residual and
 * activation, vectorised across channels (what ORT's NCHWc kernels do, without changing the tensors' layout).
 *
 * 1. Tasks are (image, block of `lanes` channels, band of output rows); lanes is the ISA's vector width (AVX-512
 *    16, AVX2 8, portable 16). Bands are sized so the band's two tiles fit in TILE_BUDGET floats, and split
 *    further when there are fewer than ORTX_TASKS_PER_THREAD tasks per thread.
 * 2. pack transposes the band's input rows (its output rows' taps) from the block's NCHW planes into a pixel-major
 *    tile, one vector of lanes channels per pixel, at the padded position; pad columns and rows outside the
 *    image stay zero, so every tap is a plain vector load.
 * 3. rows computes each output pixel as bias + KH*KW full-vector FMAs (weights transposed per block: one vector of
 *    lanes channels per tap) into a pixel-major output tile.
 * 4. unpack transposes the output tile back to the block's NCHW planes 16 (or 8) pixels at a time, flattened over
 *    the band's rows (consecutive in each plane), adding the residual and activating before the store.
 * Case in-plane (an ISA's plane_rows, AVX-512 only): 3x3 convs with pad_left 1 and >= 16 output columns, at stride 1
 *    with OW == W or at stride 2, skip both transposes: tasks are (band of output rows, image and channel), band-major
 *    with a band per thread, 16 output columns x 4 output rows at a time from the 6 (stride 2: 9) input rows they read,
 *    each input row's three column-shifted vectors built once (stride 1: masked unaligned loads; stride 2: two loads
 *    split into even and odd columns by two permutes) and used by every output row that reads it.
 * Every output pixel is computed the same way whatever the band split, so results do not depend on the threads;
 * the in-plane form runs each output's operations in the tiled form's order, so the ISAs agree bit for bit.
 * Known limits: a band re-packs the (KH-1)*dh halo rows its neighbour packed; with < lanes channels the tail
 * block's missing lanes are computed and discarded (C = 3: 13 of 16 lanes wasted).
 */
#include <string.h>

#include "activation.h"
#include "conv.h"
#include "ortx_kernels.h"
#include "pair_rows.h"
#include "threadpool.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t round16(int64_t floats) { return (floats + 15) / 16 * 16; }

/* Floats of one band's input and output tiles together: 128 KB, an eighth of this Zen 4's 1 MB L2, so both tiles
 * and the streamed planes stay in L2 (bands of 8 rows at 112x112, 15 at 56x56, whole planes from 28x28). */
#define TILE_BUDGET (32 * 1024)

/* Portable path: plain loops over 16 lanes (the compiler vectorises them for the baseline ISA). */
static void pack_portable(const float *x, int64_t plane, int64_t channels, int64_t rows, int64_t width, float *dst,
                          int64_t dst_row) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < width; c++) {
            float *pixel = dst + r * dst_row + c * 16;
            for (int64_t l = 0; l < 16; l++) pixel[l] = l < channels ? x[l * plane + r * width + c] : 0.0f;
        }
}

static void rows_portable(const ortx_conv_params *p, const float *tile, int64_t tile_row, int64_t rows,
                          const float *weights, const float *bias, float *out) {
    int64_t OW = p->out_width, KH = p->kernel_height, KW = p->kernel_width;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t ox = 0; ox < OW; ox++) {
            float acc[16];
            for (int l = 0; l < 16; l++) acc[l] = bias[l];
            for (int64_t ky = 0; ky < KH; ky++)
                for (int64_t kx = 0; kx < KW; kx++) {
                    const float *in = tile + (r * p->stride_height + ky * p->dilation_height) * tile_row +
                                      (ox * p->stride_width + kx * p->dilation_width) * 16;
                    const float *w = weights + (ky * KW + kx) * 16;
                    for (int l = 0; l < 16; l++) acc[l] += w[l] * in[l];
                }
            memcpy(out + (r * OW + ox) * 16, acc, sizeof(acc));
        }
}

static void unpack_portable(const ortx_conv_params *p, const float *out, int64_t count, int64_t channels,
                            const float *residual, float *y) {
    int64_t plane = p->out_height * p->out_width;
    for (int64_t l = 0; l < channels; l++)
        for (int64_t i = 0; i < count; i++) {
            float value = out[i * 16 + l];
            if (residual) value += residual[l * plane + i];
            y[l * plane + i] = ortx_activation_scalar((int)p->activation, value, p->param0, p->param1);
        }
}

static void finish_portable(const ortx_conv_params *p, float *y, int64_t count, const float *residual) {
    for (int64_t i = 0; i < count * 16; i++) {
        float value = y[i];
        if (residual) value += residual[i];
        y[i] = ortx_activation_scalar((int)p->activation, value, p->param0, p->param1);
    }
}

const ortx_depthwise_isa ortx_depthwise_portable = {16, pack_portable, rows_portable, unpack_portable, NULL,
                                                    finish_portable};

static const ortx_depthwise_isa *const isa_table[] = {
    [ORTX_ISA_PORTABLE] = &ortx_depthwise_portable,
    [ORTX_ISA_AVX2] = &ortx_depthwise_avx2,
    [ORTX_ISA_AVX512] = &ortx_depthwise_avx512,
};

const ortx_depthwise_isa *ortx_nchwc_depthwise_isa(void) {
    return ortx_selected_isa() == ORTX_ISA_AVX512 ? &ortx_depthwise_avx512 : &ortx_depthwise_portable;
}

/* The tiles of one task: padded input width (pixels), output rows per band, floats of each tile at that band. */
typedef struct depthwise_layout {
    int64_t lanes, blocks, tile_width, band_rows, bands, in_floats, out_floats;
} depthwise_layout;

static int64_t band_input_rows(const ortx_conv_params *p, int64_t band_rows) {
    return (band_rows - 1) * p->stride_height + (p->kernel_height - 1) * p->dilation_height + 1;
}

/* Bands of at most TILE_BUDGET floats (at least one row), and at least min_bands of them where OH allows. */
static depthwise_layout layout_of(const ortx_conv_params *p, int64_t lanes, int64_t min_bands) {
    depthwise_layout t;
    int64_t OH = p->out_height, OW = p->out_width;
    t.lanes = lanes;
    t.blocks = (p->in_channels + lanes - 1) / lanes;
    /* every tap of every output column, and every input column (pack writes whole rows) */
    t.tile_width = max64((OW - 1) * p->stride_width + (p->kernel_width - 1) * p->dilation_width + 1,
                         p->pad_left + p->in_width);
    int64_t per_row = p->stride_height * t.tile_width + OW, fixed = band_input_rows(p, 1) * t.tile_width;
    t.band_rows = min64(OH, max64(1, (TILE_BUDGET / lanes - fixed) / per_row + 1));
    t.band_rows = min64(t.band_rows, (OH + min_bands - 1) / min_bands);
    t.bands = (OH + t.band_rows - 1) / t.band_rows;
    t.in_floats = round16(band_input_rows(p, t.band_rows) * t.tile_width * lanes);
    t.out_floats = round16(t.band_rows * OW * lanes);
    return t;
}

/* One thread's scratch: input tile, output tile, the block's weights (a vector per tap) and bias. */
static int64_t scratch_floats(const ortx_conv_params *p, const depthwise_layout *t) {
    return t->in_floats + t->out_floats + round16(p->kernel_height * p->kernel_width * t->lanes) + round16(t->lanes);
}

int64_t ortx_depthwise_workspace_floats(const ortx_conv_params *p, int threads) {
    depthwise_layout wide = layout_of(p, 16, 1), narrow = layout_of(p, 8, 1);
    return max64(1, threads) * max64(scratch_floats(p, &wide), scratch_floats(p, &narrow));
}

typedef struct depthwise_job {
    const ortx_conv_params *p;
    const ortx_depthwise_isa *isa;
    depthwise_layout layout;
    const float *X, *W, *bias, *residual;
    float *Y, *workspace;
    int64_t scratch;
    int *tile_cleared;  /* per thread: its input tile's pad columns are zero */
    int in_rows, out_rows;  /* conv2d_depthwise_pair_rows: X, Y in pair rows; whether blocked_rows takes the shape */
    int in_place;
    int pair_in_place;  /* the ISA's pair_rows makes the output (pair rows, or blocked from a pair-rows input) */
    void (*pair_load)(const uint16_t *src, int64_t count, float *dst);
    void (*pair_store)(const float *lo, const float *hi, int64_t count, int64_t channels, uint16_t *dst);
    int band_major;  /* pair_rows tasks (image, band, chunk): a thread's share is rows of every chunk */
    const float *chunk_weights;  /* pair_rows_chunk_band's weights and biases per chunk, packed (NULL: made per task) */
} depthwise_job;

static void depthwise_task(void *context, int64_t task, int thread) {
    const depthwise_job *job = context;
    const ortx_conv_params *p = job->p;
    const depthwise_layout *t = &job->layout;
    const int64_t lanes = t->lanes, C = p->in_channels, H = p->in_height, W = p->in_width;
    const int64_t taps = p->kernel_height * p->kernel_width, tile_row = t->tile_width * lanes;
    const int64_t in_plane = H * W, out_plane = p->out_height * p->out_width;
    int64_t band = task % t->bands, block = task / t->bands % t->blocks, n = task / (t->bands * t->blocks);
    int64_t c0 = block * lanes, channels = min64(lanes, C - c0);
    int64_t oy0 = band * t->band_rows, rows = min64(t->band_rows, p->out_height - oy0);
    int64_t first = oy0 * p->stride_height - p->pad_top, in_rows = band_input_rows(p, rows);
    int64_t lo = min64(in_rows, max64(0, -first)), hi = max64(lo, min64(in_rows, H - first));
    float *tile = job->workspace + thread * job->scratch, *out = tile + t->in_floats;
    float *weights = out + t->out_floats, *bias = weights + round16(taps * lanes);
    /* Pad columns are never written by pack: zero the tile once per call and thread; rows outside the image are
     * zeroed per task (a row may hold an in-image row of this thread's previous task). */
    if (!job->tile_cleared[thread]) {
        memset(tile, 0, t->in_floats * sizeof(float));
        job->tile_cleared[thread] = 1;
    }
    memset(tile, 0, lo * tile_row * sizeof(float));
    memset(tile + hi * tile_row, 0, (in_rows - hi) * tile_row * sizeof(float));
    for (int64_t tap = 0; tap < taps; tap++)
        for (int64_t l = 0; l < lanes; l++)
            weights[tap * lanes + l] = l < channels ? job->W[(c0 + l) * taps + tap] : 0.0f;
    for (int64_t l = 0; l < lanes; l++) bias[l] = l < channels && p->has_bias ? job->bias[c0 + l] : 0.0f;
    int64_t x_offset = (n * C + c0) * in_plane, y_offset = (n * C + c0) * out_plane + oy0 * p->out_width;
    if (hi > lo)
        job->isa->pack(job->X + x_offset + (first + lo) * W, in_plane, channels, hi - lo, W,
                       tile + lo * tile_row + p->pad_left * lanes, tile_row);
    job->isa->rows(p, tile, tile_row, rows, weights, bias, out);
    job->isa->unpack(p, out, rows * p->out_width, channels, p->has_residual ? job->residual + y_offset : NULL,
                     job->Y + y_offset);
}

/* The in-plane form: tasks are (band of output rows, image and channel), band-major. */
typedef struct plane_job {
    const ortx_conv_params *p;
    const ortx_depthwise_isa *isa;
    const float *X, *W, *bias, *residual;
    float *Y;
    int64_t band_rows, bands;
} plane_job;

static void plane_task(void *context, int64_t task, int thread) {
    (void)thread;
    const plane_job *job = context;
    const ortx_conv_params *p = job->p;
    int64_t planes = p->batch * p->in_channels;
    int64_t band = task / planes, index = task % planes, c = index % p->in_channels;
    int64_t oy0 = band * job->band_rows, rows = min64(job->band_rows, p->out_height - oy0);
    int64_t in_plane = p->in_height * p->in_width, out_plane = p->out_height * p->out_width;
    job->isa->plane_rows(p, job->X + index * in_plane, job->W + c * 9, p->has_bias ? job->bias[c] : 0.0f,
                         p->has_residual ? job->residual + index * out_plane : NULL, job->Y + index * out_plane, oy0,
                         rows);
}

void ortx_conv2d_depthwise_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    int threads = (int)max64(1, min64(num_threads, p.workspace_threads));
    const ortx_depthwise_isa *isa = isa_table[ortx_selected_isa()];
    /* small convs (< 256K multiply-adds, ~10 us on one core) stay on one thread */
    double macs = (double)p.batch * p.in_channels * p.out_height * p.out_width * p.kernel_height * p.kernel_width;
    if (macs < 256.0 * 1024) threads = 1;
    if (isa->plane_rows && ortx_depthwise_in_plane(&p)) {
        /* Case in-plane: tasks are band-major, a band (of >= 4 rows) per thread, more when there are fewer planes
         * than tasks wanted: thread t's segment of the tasks (threadpool.h) is then the t-th band of rows of every
         * plane, the rows a pixel-split GEMM before and after it (a 1x1 conv) runs on the same thread */
        int64_t planes = p.batch * p.in_channels, wanted = ORTX_TASKS_PER_THREAD * threads;
        int64_t bands = threads > 1 ? max64(threads, (wanted + planes - 1) / planes) : 1;
        bands = max64(1, min64(bands, p.out_height / 4));
        int64_t band_rows = (p.out_height + bands - 1) / bands;
        plane_job job = {&p, isa, buffers[0], buffers[1], buffers[4], buffers[5], buffers[2], band_rows,
                         (p.out_height + band_rows - 1) / band_rows};
        ortx_parallel_for(threads, planes * job.bands, plane_task, &job);
        return;
    }
    int64_t blocks = (p.in_channels + isa->lanes - 1) / isa->lanes;
    int64_t wanted = ORTX_TASKS_PER_THREAD * threads, pieces = p.batch * blocks;
    depthwise_layout layout = layout_of(&p, isa->lanes, threads > 1 ? (wanted + pieces - 1) / pieces : 1);
    int tile_cleared[threads];
    memset(tile_cleared, 0, sizeof(tile_cleared));
    depthwise_job job = {&p, isa, layout, buffers[0], buffers[1], buffers[4], buffers[5], buffers[2], buffers[3],
                         scratch_floats(&p, &layout), tile_cleared};
    ortx_parallel_for(threads, p.batch * layout.blocks * layout.bands, depthwise_task, &job);
}

/* conv2d_depthwise_nchwc_f32 on blocked tensors (conv.h's NCHWc), with conv2d_depthwise_f32's tasks and bands and
 * buffers ([X, W, Y, workspace, bias, residual]; X, Y and the residual blocked, W and bias as given). Where the ISA's
 * blocked_rows takes the shape (AVX-512: 3x3 and 5x5 at stride 1 or 2), each band is computed from the blocked
 * input rows in place; otherwise the tiled form, whose "pack" is one copy per input row (a blocked row already
 * holds 16 channels per pixel), with `rows` writing the band straight into Y's block and `finish` adding the
 * residual and activating in place. Both sum each output's taps in the same order (out-of-image taps skipped or
 * added as zero products). */
static void depthwise_nchwc_task(void *context, int64_t task, int thread) {
    const depthwise_job *job = context;
    const ortx_conv_params *p = job->p;
    const depthwise_layout *t = &job->layout;
    const int64_t C = p->in_channels, H = p->in_height, W = p->in_width, OH = p->out_height, OW = p->out_width;
    const int64_t taps = p->kernel_height * p->kernel_width, tile_row = t->tile_width * 16;
    int64_t band = task % t->bands, block = task / t->bands % t->blocks, n = task / (t->bands * t->blocks);
    int64_t c0 = block * 16, channels = min64(16, C - c0);
    int64_t oy0 = band * t->band_rows, rows = min64(t->band_rows, OH - oy0);
    int64_t first = oy0 * p->stride_height - p->pad_top, in_rows = band_input_rows(p, rows);
    int64_t lo = min64(in_rows, max64(0, -first)), hi = max64(lo, min64(in_rows, H - first));
    float *tile = job->workspace + thread * job->scratch, *weights = tile + t->in_floats + t->out_floats;
    float *bias = weights + round16(taps * 16);
    for (int64_t tap = 0; tap < taps; tap++)
        for (int64_t l = 0; l < 16; l++) weights[tap * 16 + l] = l < channels ? job->W[(c0 + l) * taps + tap] : 0.0f;
    for (int64_t l = 0; l < 16; l++) bias[l] = l < channels && p->has_bias ? job->bias[c0 + l] : 0.0f;
    int64_t y_offset = ((n * t->blocks + block) * OH + oy0) * OW * 16;
    const float *residual = p->has_residual ? job->residual + y_offset : NULL;
    if (job->isa->blocked_rows &&  /* straight from the blocked rows: no tile */
        job->isa->blocked_rows(p, job->X + (n * t->blocks + block) * H * W * 16, weights, bias,
                               residual ? residual - oy0 * OW * 16 : NULL, job->Y + y_offset - oy0 * OW * 16, oy0,
                               rows))
        return;
    if (!job->tile_cleared[thread]) {
        memset(tile, 0, t->in_floats * sizeof(float));
        job->tile_cleared[thread] = 1;
    }
    memset(tile, 0, lo * tile_row * sizeof(float));
    memset(tile + hi * tile_row, 0, (in_rows - hi) * tile_row * sizeof(float));
    const float *x = job->X + ((n * t->blocks + block) * H + first) * W * 16;
    for (int64_t r = lo; r < hi; r++)
        memcpy(tile + r * tile_row + p->pad_left * 16, x + r * W * 16, W * 16 * sizeof(float));
    job->isa->rows(p, tile, tile_row, rows, weights, bias, job->Y + y_offset);
    job->isa->finish(p, job->Y + y_offset, rows * OW, residual);
}

/* conv2d_depthwise_pair_rows: conv2d_depthwise_nchwc_f32 whose X, or Y, or both are in pair rows (pair_rows.h)
 * instead of the blocked layout: ints are its 20 conv ints, then in_rows, out_rows (1: that side in pair rows),
 * then chunk_weights; buffers as its ([X, W, Y, workspace, bias, residual]; the residual, when there is one, blocked
 * fp32), then with chunk_weights 1 a seventh: each 32-channel chunk's weights and biases as pair_rows_chunk_band
 * hands them to the ISA's pair_rows ([chunk][tap][32] then [chunk]'s 32 biases, lanes in the input's order: for a
 * pair-rows input the chunk's even channels, then its odd; 0 past C), packed once by the lowering
 * (blocked_layout.pack_depthwise_chunks). Made per task instead (a scalar gather of taps x 32 weights), the whole
 * models ran, in-process, 2 threads, same bits: MobileNetV2-style 1.02x, rec 1.01x, det 1.00x (MobileNetV2's 7x7
 * convs, 30 chunks of one band each, spent about a third of their time on it).
 * Why: in a bf16 session on AMX the 1x1 conv that reads a depthwise conv's output rounds it to these rows anyway,
 * and the 1x1 conv before it can write them; the depthwise conv reading and writing half the bytes is most of the
 * gain (its multiply-adds are few; it is memory-bound).
 * Where the ISA's pair_rows takes the conv (AVX-512 with AVX512_BF16: 3x3 and 5x5, stride 1 or 2, no residual), a
 * pair-rows output is made a chunk at a time in registers from either input (pair_rows_chunk_band), and so is a
 * blocked fp32 output from a pair-rows input (a 1x1 conv that fp32_nodes keeps fp32 reads it: the chunk's two
 * vectors de-interleaved into its two blocks; read a block at a time by blocked_rows_bf16, MobileNetV2-style's
 * 96-channel 112x112 s2 conv took 2.2x its pair-rows-output time in a bf16 session's profile); else a pair-rows
 * input is read in place by blocked_rows_bf16 (each pixel's values widened as loaded), or widened into the tiled
 * form's tile, and a pair-rows output is computed into band buffers and rounded from there
 * (depthwise_pair_rows_task). In-process, 2 threads, this Emerald Rapids host (bits unchanged): MobileNetV2-style
 * bf16 0.909x, det 0.963x, rec 0.965x against the band buffers (kernel alone, blocked input, MobileNetV2's ten
 * depthwise shapes: 411 -> 357 us; pair-rows input 491 -> 328 us).
 * The sums are the blocked kernel's (same code, same order), so each output is that kernel's on the widened input,
 * then rounded. */
/* One block's band of output rows, from its blocked or pair-rows input, into y_band (the band's first output pixel:
 * Y's block plane, or a thread's band buffer for a pair-rows output) with the bias, residual and activation. */
static void depthwise_block_band(const depthwise_job *job, int64_t n, int64_t block, int64_t band, int thread,
                                 float *y_band) {
    const ortx_conv_params *p = job->p;
    const depthwise_layout *t = &job->layout;
    const int64_t C = p->in_channels, H = p->in_height, W = p->in_width, OH = p->out_height, OW = p->out_width;
    const int64_t taps = p->kernel_height * p->kernel_width, tile_row = t->tile_width * 16;
    int64_t c0 = block * 16, channels = min64(16, C - c0);
    int64_t oy0 = band * t->band_rows, rows = min64(t->band_rows, OH - oy0);
    int64_t first = oy0 * p->stride_height - p->pad_top, in_rows = band_input_rows(p, rows);
    int64_t lo = min64(in_rows, max64(0, -first)), hi = max64(lo, min64(in_rows, H - first));
    float *tile = job->workspace + thread * job->scratch;
    float *weights = tile + t->in_floats + t->out_floats, *bias = weights + round16(taps * 16);
    for (int64_t tap = 0; tap < taps; tap++)
        for (int64_t l = 0; l < 16; l++) weights[tap * 16 + l] = l < channels ? job->W[(c0 + l) * taps + tap] : 0.0f;
    for (int64_t l = 0; l < 16; l++) bias[l] = l < channels && p->has_bias ? job->bias[c0 + l] : 0.0f;
    const int64_t chunk = n * ortx_pair_rows_chunks(C) + block / 2;
    const uint16_t *x_rows = (const uint16_t *)job->X + chunk * H * W * ORTX_PAIR_ROWS_CHUNK + block % 2 * 16;
    const float *x_plane = job->X + (n * t->blocks + block) * H * W * 16;  /* blocked input */
    const float *residual = p->has_residual ? job->residual + ((n * t->blocks + block) * OH + oy0) * OW * 16 : NULL;
    if (job->in_place && job->in_rows)  /* straight from the chunk plane: pixels of 64 bytes, as blocked ones */
        job->isa->blocked_rows_bf16(p, (const float *)x_rows, weights, bias,
                                    residual ? residual - oy0 * OW * 16 : NULL, y_band - oy0 * OW * 16, oy0, rows);
    else if (job->in_place)
        job->isa->blocked_rows(p, x_plane, weights, bias, residual ? residual - oy0 * OW * 16 : NULL,
                               y_band - oy0 * OW * 16, oy0, rows);
    else {
        /* the tiled form: pad columns zeroed once per call and thread, rows outside the image per task */
        if (!job->tile_cleared[thread]) {
            memset(tile, 0, t->in_floats * sizeof(float));
            job->tile_cleared[thread] = 1;
        }
        memset(tile, 0, lo * tile_row * sizeof(float));
        memset(tile + hi * tile_row, 0, (in_rows - hi) * tile_row * sizeof(float));
        for (int64_t r = lo; r < hi; r++) {
            float *dst = tile + r * tile_row + p->pad_left * 16;
            if (job->in_rows)
                job->pair_load(x_rows + (first + r) * W * ORTX_PAIR_ROWS_CHUNK, W, dst);
            else
                memcpy(dst, x_plane + (first + r) * W * 16, W * 16 * sizeof(float));
        }
        job->isa->rows(p, tile, tile_row, rows, weights, bias, y_band);
        job->isa->finish(p, y_band, rows * OW, residual);
    }
}

/* A chunk's band of output rows by the ISA's pair_rows: its weights and biases split as the input's layout asks
 * (channels past C zero; packed by the lowering, or made here), then the rows read and written in place. */
static void pair_rows_chunk_band(const depthwise_job *job, int64_t n, int64_t chunk, int64_t oy0, int64_t rows) {
    const ortx_conv_params *p = job->p;
    const int64_t C = p->in_channels, taps = p->kernel_height * p->kernel_width, blocks = job->layout.blocks;
    const int64_t chunks = ortx_pair_rows_chunks(C), c0 = chunk * ORTX_PAIR_ROWS_CHUNK;
    const int64_t plane_in = p->in_height * p->in_width, plane_out = p->out_height * p->out_width;
    float local[25 * 32 + 32] __attribute__((aligned(64)));  /* 5x5 at most */
    const float *weights = local;
    if (job->chunk_weights) {
        weights = job->chunk_weights + chunk * (taps * 32 + 32);
    } else {
        float *bias = local + taps * 32;
        for (int64_t l = 0; l < 32; l++) {
            int64_t c = c0 + l, lane = job->in_rows ? l / 2 + (l % 2) * 16 : l;  /* pair rows: even, then odd */
            for (int64_t tap = 0; tap < taps; tap++) local[tap * 32 + lane] = c < C ? job->W[c * taps + tap] : 0.0f;
            bias[lane] = c < C && p->has_bias ? job->bias[c] : 0.0f;
        }
    }
    const float *bias = weights + taps * 32;
    const void *x = (const uint16_t *)job->X + (n * chunks + chunk) * plane_in * ORTX_PAIR_ROWS_CHUNK;
    int64_t hi_offset = 0;
    if (!job->in_rows) {
        x = job->X + (n * blocks + 2 * chunk) * plane_in * 16;
        hi_offset = 2 * chunk + 1 < blocks ? plane_in * 16 * (int64_t)sizeof(float) : 0;
    }
    void *y = (uint16_t *)job->Y + (n * chunks + chunk) * plane_out * ORTX_PAIR_ROWS_CHUNK;
    if (!job->out_rows) y = job->Y + (n * blocks + 2 * chunk) * plane_out * 16;  /* blocked: the chunk's two blocks */
    job->isa->pair_rows(p, x, job->in_rows, hi_offset, weights, bias, C - c0, y, job->out_rows,
                        plane_out * 16 * (int64_t)sizeof(float), oy0, rows);
}

/* A task of conv2d_depthwise_pair_rows: (image, block, band) for a blocked output; for a pair-rows output (image,
 * chunk, band; image, band, chunk where job->band_major), both blocks of the chunk computed into band buffers (the
 * thread's output tile and its scratch) and each pixel's 64 bytes stored at once (whole cache lines: a block's half
 * lines stored by separate tasks cost a read of each line). */
static void depthwise_pair_rows_task(void *context, int64_t task, int thread) {
    const depthwise_job *job = context;
    const ortx_conv_params *p = job->p;
    const depthwise_layout *t = &job->layout;
    const int64_t OH = p->out_height, OW = p->out_width;
    if (!job->out_rows && !job->pair_in_place) {
        int64_t band = task % t->bands, block = task / t->bands % t->blocks, n = task / (t->bands * t->blocks);
        depthwise_block_band(job, n, block, band, thread,
                             job->Y + ((n * t->blocks + block) * OH + band * t->band_rows) * OW * 16);
        return;
    }
    const int64_t chunks = ortx_pair_rows_chunks(p->in_channels);
    int64_t band = task % t->bands, chunk = task / t->bands % chunks, n = task / (t->bands * chunks);
    if (job->band_major) band = task / chunks % t->bands, chunk = task % chunks;
    int64_t oy0 = band * t->band_rows, rows = min64(t->band_rows, OH - oy0);
    if (job->pair_in_place) {
        pair_rows_chunk_band(job, n, chunk, oy0, rows);
        return;
    }
    float *lo = job->workspace + thread * job->scratch + t->in_floats, *hi = NULL;
    depthwise_block_band(job, n, 2 * chunk, band, thread, lo);
    if (2 * chunk + 1 < t->blocks) {
        hi = ortx_thread_scratch(t->out_floats);
        depthwise_block_band(job, n, 2 * chunk + 1, band, thread, hi);
    }
    job->pair_store(lo, hi, rows * OW, p->in_channels - 32 * chunk,
                    (uint16_t *)job->Y + ((n * chunks + chunk) * OH * OW + oy0 * OW) * ORTX_PAIR_ROWS_CHUNK);
}

/* The blocked kernels' job (conv2d_depthwise_nchwc_f32's and conv2d_depthwise_pair_rows's): threads (one below
 * 256K multiply-adds), bands, buffers; `tile_cleared` has one flag per thread. */
static depthwise_job blocked_job(const ortx_conv_params *p, void *const *buffers, int num_threads, int *threads,
                                 int *tile_cleared) {
    *threads = (int)max64(1, min64(num_threads, p->workspace_threads));
    double macs = (double)p->batch * p->in_channels * p->out_height * p->out_width * p->kernel_height *
                  p->kernel_width;
    if (macs < 256.0 * 1024) *threads = 1;
    const ortx_depthwise_isa *isa = ortx_nchwc_depthwise_isa();
    int64_t wanted = ORTX_TASKS_PER_THREAD * *threads, pieces = p->batch * ortx_nchwc_blocks(p->in_channels);
    depthwise_layout layout = layout_of(p, 16, *threads > 1 ? (wanted + pieces - 1) / pieces : 1);
    memset(tile_cleared, 0, (size_t)*threads * sizeof(int));
    depthwise_job job = {p, isa, layout, buffers[0], buffers[1], buffers[4], buffers[5], buffers[2], buffers[3],
                         scratch_floats(p, &layout), tile_cleared};
    return job;
}

void ortx_conv2d_depthwise_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers,
                                     int num_threads) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    int threads, tile_cleared[num_threads < 1 ? 1 : num_threads];
    depthwise_job job = blocked_job(&p, buffers, num_threads, &threads, tile_cleared);
    ortx_parallel_for(threads, p.batch * job.layout.blocks * job.layout.bands, depthwise_nchwc_task, &job);
}

void ortx_conv2d_depthwise_pair_rows(const int64_t *ints, const float *floats, void *const *buffers,
                                     int num_threads) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    int threads, tile_cleared[num_threads < 1 ? 1 : num_threads];
    depthwise_job job = blocked_job(&p, buffers, num_threads, &threads, tile_cleared);
    const ortx_depthwise_isa *isa = job.isa;
    job.in_rows = (int)ints[ORTX_CONV_INTS];
    job.out_rows = (int)ints[ORTX_CONV_INTS + 1];
    job.chunk_weights = ints[ORTX_CONV_INTS + 2] ? buffers[6] : NULL;
    job.pair_load = ortx_pair_rows_load_portable;
    job.pair_store = ortx_pair_rows_store_portable;
    job.in_place = isa->blocked_rows && isa->blocked_rows(&p, NULL, NULL, NULL, NULL, NULL, 0, 0) &&
                   (!job.in_rows || isa->blocked_rows_bf16);
    job.pair_in_place = (job.in_rows || job.out_rows) && isa->pair_rows && p.kernel_height * p.kernel_width <= 25 &&
                        isa->pair_rows(&p, NULL, job.in_rows, 0, NULL, NULL, 0, NULL, job.out_rows, 0, 0, 0);
#if ORTX_HAVE_X86
    if (isa == &ortx_depthwise_avx512) job.pair_load = ortx_pair_rows_load_avx512;
    if (isa == &ortx_depthwise_avx512 && ortx_cpu_has_avx512_bf16()) job.pair_store = ortx_pair_rows_store_avx512_bf16;
#endif
    const int chunk_tasks = job.out_rows || job.pair_in_place;
    int64_t units = chunk_tasks ? ortx_pair_rows_chunks(p.in_channels) : job.layout.blocks;
    if (chunk_tasks && threads > 1) {  /* a task per chunk, not per block: split the bands for that many */
        int64_t wanted = ORTX_TASKS_PER_THREAD * threads, pieces = p.batch * units;
        job.layout = layout_of(&p, 16, (wanted + pieces - 1) / pieces);
        job.scratch = scratch_floats(&p, &job.layout);
        /* Where there are bands for every thread, tasks go band-major, so a thread's static share of them is rows
         * (pixels), as the 1x1 convs before and after split theirs, and a thread mostly reads what it wrote.
         * In-process, 2 threads, against chunk-major (bits unchanged): MobileNetV2-style 0.991 and 0.988, det 0.987,
         * rec 0.996. Forcing two bands on the 7x7 and 14x14 maps (one band there) lost: 1.004 and 0.991 against
         * chunk-major with the per-task weight setup left out of both. */
        job.band_major = job.pair_in_place && job.layout.bands >= threads;
    }
    ortx_parallel_for(threads, p.batch * units * job.layout.bands, depthwise_pair_rows_task, &job);
}
