/* The AMX-BF16 path of conv_pointwise_nchwc_bf16 (conv_pointwise_nchwc.c calls it on AMX CPUs): the 1x1 conv on
 * blocked tensors as tdpbf16ps steps, whose tile shapes the blocked layout fits without any reorder.
 *
 * Why: the vdpbf16ps tile (conv_pointwise_nchwc_avx512_bf16.c) does 32 multiply-adds per instruction, the fp32 tile
 * 16 on each of two ports; one tdpbf16ps does 16 x 16 x 32. On an Emerald Rapids VM the vdpbf16ps tile was slower
 * than the fp32 one, so bf16 sessions there ran NCHW programs. These steps, 2 threads, MobileNetV2-style shapes
 * against the fp32 tile: 0.36 (320 -> 1280 at 7x7) to 0.72 (32 -> 192 at 28x28), 13 layers summed 0.66; memory-bound
 * at 16 -> 96 on 112x112 (1.08 with one step a task; the runs of step 1 took 0.80x that, cold outputs), where fp32
 * activations are read and written either way.
 * 1. Tasks are (image, run of steps of STEP_PIXELS pixels, range of output groups of 64 channels), run-major (so a
 *    thread's pixels are the ones the fp32 tile's runs give it); a task loads the tile configuration once and rounds
 *    each step's input to bf16 once, in the thread's scratch (ortx_thread_scratch): row i holds pixel i's channels
 *    in pairs, zeros past Cin up to a whole 16-pair chunk (a blocked tensor's pad lanes hold anything). That is an A
 *    tile's format: 16 pixels x 16 pairs, rows a chunk stride apart. Groups split into ranges only where the runs
 *    leave fewer than 4 tasks a thread (7x7 maps: 2 steps).
 * 2. The packed weights (conv.h: [group][pair rows][64][2], pair rows a multiple of 16, zeros past Cin) are B tiles
 *    as they lie: block b's 16 pairs of chunk q are 16 rows of 64 bytes, 256 bytes apart.
 * 3. Per group, per two output blocks: 2 x 2 C tiles (32 pixels x 32 channels; fewer at the edges) sum all chunks
 *    (two A and two B tileloadd and four tdpbf16ps per chunk), then go through a 16 x 16 float scratch and the
 *    epilogue (bias, residual, activation; ortx_activation_avx512) into Y. A C tile's row is one pixel's 16
 *    channels, so a full tile could be stored straight into the block; the scratch keeps the pixel tail and the
 *    epilogue in one path.
 * 4. conv_pointwise_pair_rows_bf16 (conv.h) runs the same steps on pair rows (pair_rows.h): a step's A tiles are
 *    loaded from the input rows as they lie (a chunk's 16 pixels are 1 KB of whole lines; a partial last step is
 *    copied into the scratch with zero rows), and a chunk's two C tiles leave together, each pixel's 64 bytes of
 *    bf16 in one store.
 * 5. conv_pointwise_bf16x3 (conv.h; provider option fp32_nodes' 1x1 convs of a bf16 session,
 *    ortx/ep/precision.py): X (blocked fp32) is split per value into its bf16 rounding hi and the remainder's lo,
 *    each row holding all of hi's pairs, then lo's; the weights come twice, rounded (W) and their remainders (W_lo,
 *    buffers[6]); each chunk's sums take lo x W, hi x W and hi x W_lo (split_chunk), leaving out lo x W_lo and the
 *    remainders' remainders: about 2^-16 of each product, against bf16's 2^-8. From at most 16 channels (form 2,
 *    MobileNetV2's 16 -> 96 expand) a row's rounded values and remainders share one chunk and the weights come as
 *    [W; W] and [W_lo; 0] rows: two products per C tile instead of three. Three products a chunk on AMX cost
 *    less than fp32 multiply-adds where K is large and the same memory where it is not.
 * Numerics: tdpbf16ps's (ortx/ep/precision.py step 3), as the AMX GEMM's: not bitwise the vdpbf16ps tile.
 */
#include "conv.h"
#include "conv_pointwise_nchwc_tile.h"
#include "gemm_bf16.h"
#include "ortx_kernels.h"
#include "pair_rows.h"
#include "threadpool.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

enum { STEP_PIXELS = 32, TILE_ROWS = 16, CHUNK_PAIRS = 16 };

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

typedef struct amx_pointwise_job {
    int64_t in_channels, out_channels, pixels, steps, runs, steps_per_run, group_ranges, groups_per_range, pair_rows;
    const float *X, *bias, *residual;
    const uint16_t *W;
    float *Y;
    int activation;
    float param0, param1;
    int in_rows, out_rows;  /* conv_pointwise_pair_rows_bf16: X, Y in pair rows (pair_rows.h) */
    const uint16_t *W_lo;   /* bf16x3 (step 5): the weights' remainders, packed as W; NULL: one product */
    int split_packed;       /* bf16x3 form 2: at most 16 channels, rounded values and remainders in one chunk */
    int64_t y_plane, y_offset;  /* Y's and the residual's plane (pixels) and the first pixel's index in it: a band's
                                 * steps (ortx_pointwise_bf16x3_band_amx) write into the whole map */
} amx_pointwise_job;

/* Pixels [0, rows) of x (blocks `plane` pixels apart) as bf16 pair rows of `row_words` 32-bit words; rows up to 16 or
 * 32 (a whole A tile) are written, past `rows` as zeros. */
ORTX_TARGET_AMX_BF16 static void round_step(const float *x, int64_t plane, int64_t in_channels, int64_t rows,
                                             int64_t tile_rows, int64_t row_words, uint32_t *a) {
    for (int64_t i = 0; i < tile_rows; i++)
        ortx_pointwise_round_pixel_bf16(x + i * 16, plane, i < rows ? in_channels : 0, row_words, a + i * row_words);
}

/* bf16x3: each row's `pair_rows` words of rounded pairs, then as many of their remainders (2 * pair_rows a row). */
ORTX_TARGET_AMX_BF16 static void split_step(const float *x, int64_t plane, int64_t in_channels, int64_t rows,
                                             int64_t tile_rows, int64_t pair_rows, uint32_t *a) {
    for (int64_t i = 0; i < tile_rows; i++)
        ortx_pointwise_split_pixel_bf16(x + i * 16, plane, i < rows ? in_channels : 0, pair_rows,
                                        a + i * 2 * pair_rows, a + i * 2 * pair_rows + pair_rows);
}

/* bf16x3 packed (form 2, at most 16 input channels): row i one chunk, [rounded | remainders] (16 words). */
ORTX_TARGET_AMX_BF16 static void split_packed_step(const float *x, int64_t in_channels, int64_t rows,
                                                    int64_t tile_rows, uint32_t *a) {
    for (int64_t i = 0; i < tile_rows; i++)
        ortx_pointwise_split_packed_bf16(x + i * 16, i < rows ? in_channels : 0, a + i * CHUNK_PAIRS);
}

/* A tiles a0 (and a1 for a second pixel tile) into tiles 4 (5), each times the B tiles in 6 (and 7 for a second
 * output block) into C tiles 0-3. */
ORTX_TARGET_AMX_BF16 static inline __attribute__((always_inline)) void a_times_loaded_b(
    const uint32_t *a0, const uint32_t *a1, int64_t a_bytes, int two, int pixel_tiles) {
    _tile_loadd(4, a0, a_bytes);
    _tile_dpbf16ps(0, 4, 6);
    if (two) _tile_dpbf16ps(1, 4, 7);
    if (pixel_tiles == 2) {
        _tile_loadd(5, a1, a_bytes);
        _tile_dpbf16ps(2, 5, 6);
        if (two) _tile_dpbf16ps(3, 5, 7);
    }
}

/* The weights w (a chunk's B tiles, the second block 32 values on) into tiles 6 (7), times the A tiles in 4 (5). */
ORTX_TARGET_AMX_BF16 static inline __attribute__((always_inline)) void loaded_a_times_b(const uint16_t *w, int two,
                                                                                       int pixel_tiles) {
    _tile_loadd(6, w, 256);
    _tile_dpbf16ps(0, 4, 6);
    if (pixel_tiles == 2) _tile_dpbf16ps(2, 5, 6);
    if (two) {
        _tile_loadd(7, w + 32, 256);
        _tile_dpbf16ps(1, 4, 7);
        if (pixel_tiles == 2) _tile_dpbf16ps(3, 5, 7);
    }
}

/* bf16x3's products of one chunk q into the four C tiles: A remainders x W rounded, A rounded x W rounded, then A
 * rounded x W remainders (the small terms first). In this order each term reloads only one side: 8 tile loads a
 * chunk for 12 products. */
ORTX_TARGET_AMX_BF16 static inline __attribute__((always_inline)) void split_chunk(
    const uint32_t *a_hi0, const uint32_t *a_hi1, const uint32_t *a_lo0, const uint32_t *a_lo1, int64_t a_bytes,
    const uint16_t *w_hi, const uint16_t *w_lo, int two, int pixel_tiles) {
    _tile_loadd(6, w_hi, 256);
    if (two) _tile_loadd(7, w_hi + 32, 256);
    a_times_loaded_b(a_lo0, a_lo1, a_bytes, two, pixel_tiles);
    a_times_loaded_b(a_hi0, a_hi1, a_bytes, two, pixel_tiles);
    loaded_a_times_b(w_lo, two, pixel_tiles);
}

/* A stored C tile (`scratch`, 16 floats a pixel): pixels [0, rows) of one output block through the epilogue into y
 * (bias and residual at that block and pixel). */
ORTX_TARGET_AMX_BF16 static inline __attribute__((always_inline)) void finish_tile_as(
    const amx_pointwise_job *job, const float *scratch, int64_t rows, const float *bias, const float *residual,
    float *y, const int activation) {
    const __m512 b = _mm512_loadu_ps(bias);
    for (int64_t i = 0; i < rows; i++) {
        __m512 v = _mm512_add_ps(_mm512_load_ps(scratch + i * 16), b);
        if (residual) v = _mm512_add_ps(v, _mm512_loadu_ps(residual + i * 16));
        _mm512_storeu_ps(y + i * 16, ortx_activation_avx512(v, activation, job->param0, job->param1));
    }
}

/* finish_tile_as with the common activations constant (as finish_chunk_rows, below) */
ORTX_TARGET_AMX_BF16 static inline __attribute__((always_inline)) void finish_tile(
    const amx_pointwise_job *job, const float *scratch, int64_t rows, const float *bias, const float *residual,
    float *y) {
    const int activation = job->activation;
#define FINISH(ACT) finish_tile_as(job, scratch, rows, bias, residual, y, ACT)
    ORTX_WITH_ACTIVATION_CONSTANT(activation, FINISH)
#undef FINISH
}

/* The two stored C tiles of one 32-channel chunk (blocks b0 and b0 + 1; `c1` NULL when b0 is the last block) into
 * pair rows: pixels [0, rows) through the epilogue, lanes past each block's channels zeroed, rounded, and each
 * pixel's 64 bytes written by one store (a whole cache line: half-line stores of one block at a time made the
 * expand convs' pair-rows outputs slower than their fp32 blocked ones). bias, residual at block b0; y at the
 * tile's first pixel in its chunk plane. */
ORTX_TARGET_AMX_BF16 static inline __attribute__((always_inline)) void finish_chunk_rows_as(
    const amx_pointwise_job *job, const float *c0, const float *c1, int64_t rows, const float *bias,
    const float *residual, int64_t plane, int64_t channels, uint16_t *y, const int activation) {
    const __m512 b_lo = _mm512_loadu_ps(bias), b_hi = _mm512_loadu_ps(bias + 16);
    const __mmask16 keep_lo = (__mmask16)(channels >= 16 ? 0xFFFF : (1u << channels) - 1u);
    const __mmask16 keep_hi = (__mmask16)(channels >= 32 ? 0xFFFF : channels <= 16 ? 0 : (1u << (channels - 16)) - 1u);
    const __mmask32 keep = (__mmask32)keep_lo | (__mmask32)keep_hi << 16;  /* zeroed by the rounding itself */
    for (int64_t i = 0; i < rows; i++) {
        __m512 lo = _mm512_add_ps(_mm512_load_ps(c0 + i * 16), b_lo), hi = _mm512_setzero_ps();
        if (residual) lo = _mm512_add_ps(lo, _mm512_loadu_ps(residual + i * 16));
        lo = ortx_activation_avx512(lo, activation, job->param0, job->param1);
        if (c1) {
            hi = _mm512_add_ps(_mm512_load_ps(c1 + i * 16), b_hi);
            if (residual) hi = _mm512_add_ps(hi, _mm512_loadu_ps(residual + (plane + i) * 16));
            hi = ortx_activation_avx512(hi, activation, job->param0, job->param1);
        }
        _mm512_storeu_si512(y + i * ORTX_PAIR_ROWS_CHUNK, (__m512i)_mm512_maskz_cvtne2ps_pbh(keep, hi, lo));
    }
}

/* finish_chunk_rows_as with the common activations constant (ORTX_WITH_ACTIVATION_CONSTANT); the channels past C
 * zeroed by the rounding (one masked instruction) instead of a masked move a half.
 * MobileNetV2's nine 1x1 shapes, kernel alone, 2 threads: 16 -> 96 at 112x112 0.65-0.90x, all nine 0.78x. */
ORTX_TARGET_AMX_BF16 static inline __attribute__((always_inline)) void finish_chunk_rows(
    const amx_pointwise_job *job, const float *c0, const float *c1, int64_t rows, const float *bias,
    const float *residual, int64_t plane, int64_t channels, uint16_t *y) {
    const int activation = job->activation;
#define FINISH(ACT) finish_chunk_rows_as(job, c0, c1, rows, bias, residual, plane, channels, y, ACT)
    ORTX_WITH_ACTIVATION_CONSTANT(activation, FINISH)
#undef FINISH
}

ORTX_TARGET_AMX_BF16 static void amx_pointwise_task(void *context, int64_t task, int thread) {
    (void)thread;
    const amx_pointwise_job *job = context;
    const int64_t plane = job->pixels, in_blocks = ortx_nchwc_blocks(job->in_channels);
    const int64_t out_blocks = ortx_nchwc_blocks(job->out_channels), groups = (out_blocks + 3) / 4;
    const int64_t range = task % job->group_ranges, run = task / job->group_ranges % job->runs;
    const int64_t n = task / (job->group_ranges * job->runs);
    /* bf16x3 (X blocked fp32): form 1 rounded values and remainders in separate chunks, form 2 in one */
    const int split = job->W_lo == NULL ? 0 : job->split_packed ? 2 : 1;
    const int64_t row_words = (split == 1 ? 2 : 1) * job->pair_rows, chunks = job->pair_rows / CHUNK_PAIRS;
    /* scratch: the A rows (STEP_PIXELS x row_words words), then two C tiles' 16 x 16 floats */
    float *scratch = ortx_thread_scratch(STEP_PIXELS * row_words + 2 * TILE_ROWS * 16);
    uint32_t *a = (uint32_t *)scratch;
    float *c = scratch + STEP_PIXELS * row_words, *c_next = c + TILE_ROWS * 16;
    const int64_t first_group = range * job->groups_per_range;
    const int64_t last_group = min64(groups, first_group + job->groups_per_range);
    const int64_t first_step = run * job->steps_per_run, last_step = min64(job->steps, first_step + job->steps_per_run);
    ortx_tile_state saved;
    ortx_bgemm_isa_amx_bf16.tiles_begin(&saved);
    for (int64_t step = first_step; step < last_step; step++) {
        const int64_t p0 = step * STEP_PIXELS, rows = min64(STEP_PIXELS, plane - p0);
        const int pixel_tiles = rows > TILE_ROWS ? 2 : 1;
        /* the step's A rows: rounded into the scratch (pixel-major, chunks `row_words` words apart), or the pair
         * rows themselves (chunk-major: a chunk's pixels 16 words apart, chunks a plane apart) */
        const uint32_t *a_step = a, *rows_at = (const uint32_t *)job->X + (n * chunks * plane + p0) * CHUNK_PAIRS;
        int64_t a_bytes = row_words * 4, chunk_words = CHUNK_PAIRS;
        if (split == 2) {
            split_packed_step(job->X + (n * in_blocks * plane + p0) * 16, job->in_channels, rows,
                              pixel_tiles * TILE_ROWS, a);
        } else if (split) {
            split_step(job->X + (n * in_blocks * plane + p0) * 16, plane, job->in_channels, rows,
                       pixel_tiles * TILE_ROWS, job->pair_rows, a);
        } else if (!job->in_rows) {
            round_step(job->X + (n * in_blocks * plane + p0) * 16, plane, job->in_channels, rows,
                       pixel_tiles * TILE_ROWS, row_words, a);
        } else if (rows == pixel_tiles * TILE_ROWS) {
            a_step = rows_at;
            a_bytes = CHUNK_PAIRS * 4;
            chunk_words = plane * CHUNK_PAIRS;
        } else {  /* a partial step: its pixels copied, zero rows up to the whole tile (not past the tensor's end) */
            for (int64_t i = 0; i < pixel_tiles * TILE_ROWS; i++)
                for (int64_t q = 0; q < chunks; q++)
                    for (int64_t k = 0; k < CHUNK_PAIRS; k++)
                        a[i * row_words + q * CHUNK_PAIRS + k] =
                            i < rows ? rows_at[(q * plane + i) * CHUNK_PAIRS + k] : 0;
        }
        const uint32_t *a_step1 = a_step + TILE_ROWS * a_bytes / 4;
        for (int64_t g = first_group; g < last_group; g++) {
            const uint16_t *w = job->W + g * job->pair_rows * 128;
            for (int64_t b0 = 4 * g; b0 < min64(4 * g + 4, out_blocks); b0 += 2) {
                const int two = b0 + 1 < out_blocks;
                const uint16_t *wb = w + (b0 - 4 * g) * 32;
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                for (int64_t q = 0; split == 1 && q < chunks; q++)
                    split_chunk(a_step + q * CHUNK_PAIRS, a_step1 + q * CHUNK_PAIRS,
                                a_step + job->pair_rows + q * CHUNK_PAIRS, a_step1 + job->pair_rows + q * CHUNK_PAIRS,
                                a_bytes, wb + q * CHUNK_PAIRS * 128, job->W_lo + (wb - job->W) + q * CHUNK_PAIRS * 128,
                                two, pixel_tiles);
                for (int64_t q = 0; split != 1 && q < chunks; q++) {
                    _tile_loadd(4, a_step + q * chunk_words, a_bytes);
                    _tile_loadd(6, wb + q * CHUNK_PAIRS * 128, 256);
                    _tile_dpbf16ps(0, 4, 6);
                    if (two) {
                        _tile_loadd(7, wb + q * CHUNK_PAIRS * 128 + 32, 256);
                        _tile_dpbf16ps(1, 4, 7);
                    }
                    if (pixel_tiles == 2) {
                        _tile_loadd(5, a_step1 + q * chunk_words, a_bytes);
                        _tile_dpbf16ps(2, 5, 6);
                        if (two) _tile_dpbf16ps(3, 5, 7);
                    }
                }
                if (split == 2)  /* then [rounded | remainders] x [W_lo; 0]: the rounded values x W's remainders */
                    loaded_a_times_b(job->W_lo + (wb - job->W), two, pixel_tiles);
                for (int64_t pt = 0; job->out_rows && pt < pixel_tiles; pt++) {  /* a chunk's two tiles at once */
                    if (pt == 0) {
                        _tile_stored(0, c, 64);
                        if (two) _tile_stored(1, c_next, 64);
                    } else {
                        _tile_stored(2, c, 64);
                        if (two) _tile_stored(3, c_next, 64);
                    }
                    const int64_t chunk = n * ortx_pair_rows_chunks(job->out_channels) + b0 / 2;
                    const int64_t pixel = job->y_offset + p0 + pt * TILE_ROWS;
                    const int64_t at = ((n * out_blocks + b0) * job->y_plane + pixel) * 16;
                    uint16_t *y = (uint16_t *)job->Y + (chunk * job->y_plane + pixel) * ORTX_PAIR_ROWS_CHUNK;
                    finish_chunk_rows(job, c, two ? c_next : NULL, min64(TILE_ROWS, rows - pt * TILE_ROWS),
                                      job->bias + b0 * 16, job->residual ? job->residual + at : NULL, job->y_plane,
                                      job->out_channels - b0 * 16, y);
                }
                for (int t = 0; !job->out_rows && t < 2 * pixel_tiles; t++) {
                    const int64_t pt = t / 2, block = b0 + t % 2;
                    if (block >= out_blocks) continue;
                    switch (t) {  /* _tile_stored takes its tile number as a constant */
                        case 0: _tile_stored(0, c, 64); break;
                        case 1: _tile_stored(1, c, 64); break;
                        case 2: _tile_stored(2, c, 64); break;
                        default: _tile_stored(3, c, 64);
                    }
                    const int64_t pixel = job->y_offset + p0 + pt * TILE_ROWS;
                    const int64_t at = ((n * out_blocks + block) * job->y_plane + pixel) * 16;
                    const int64_t count = min64(TILE_ROWS, rows - pt * TILE_ROWS);
                    finish_tile(job, c, count, job->bias + block * 16, job->residual ? job->residual + at : NULL,
                                job->Y + at);
                }
            }
        }
    }
    ortx_bgemm_isa_amx_bf16.tiles_end(&saved);
}

static int pointwise_amx(const int64_t *ints, const float *floats, void *const *buffers, int num_threads,
                         int in_rows, int out_rows, int split) {
    if (split == 2 && ints[1] > 16) return 0;  /* not a form blocked_layout.pack_pointwise_bf16x3 makes */
    int64_t batch = ints[0], in_channels = ints[1], out_channels = ints[2], pixels = ints[3];
    int threads = num_threads < 1 ? 1 : num_threads;
    if (ints[6] < threads) threads = ints[6] < 1 ? 1 : (int)ints[6];
    /* small convs (< 256K multiply-adds) stay on one thread, as the other paths' */
    if ((double)batch * in_channels * out_channels * pixels < 256.0 * 1024) threads = 1;
    int64_t groups = (ortx_nchwc_blocks(out_channels) + 3) / 4, steps = (pixels + STEP_PIXELS - 1) / STEP_PIXELS;
    /* runs of steps, 4x the pool's usual tasks a thread as conv_pointwise_nchwc_f32's (one step a task loaded the
     * tile configuration per 32 pixels: 16 -> 96 at 112x112 1.25x, 24 -> 144 at 56x56 1.18x this form's time) */
    int64_t many = 4 * ORTX_TASKS_PER_THREAD * threads;
    int64_t runs = threads > 1 ? min64(steps, (many + batch - 1) / batch) : 1;
    int64_t steps_per_run = (steps + runs - 1) / runs;
    runs = (steps + steps_per_run - 1) / steps_per_run;
    /* a step's groups split only when steps alone leave fewer than 4 tasks a thread (7x7 maps: 2 steps) */
    int64_t wanted = ORTX_TASKS_PER_THREAD * threads, pieces = batch * runs;
    int64_t ranges = threads > 1 && pieces < wanted ? min64(groups, (wanted + pieces - 1) / pieces) : 1;
    int64_t per_range = (groups + ranges - 1) / ranges;
    ranges = (groups + per_range - 1) / per_range;
    amx_pointwise_job job = {
        in_channels, out_channels, pixels, steps, runs, steps_per_run, ranges, per_range,
        ortx_pointwise_bf16_pair_words(in_channels),
        buffers[0], buffers[2], ints[4] ? buffers[4] : NULL, buffers[1], buffers[3], (int)ints[5], floats[0],
        floats[1], in_rows, out_rows, split ? buffers[6] : NULL, split == 2, pixels, 0,
    };
    ortx_parallel_for(threads, pieces * ranges, amx_pointwise_task, &job);
    return 1;
}

int ortx_conv_pointwise_nchwc_bf16_amx(const int64_t *ints, const float *floats, void *const *buffers,
                                       int num_threads) {
    return pointwise_amx(ints, floats, buffers, num_threads, 0, 0, 0);
}

int ortx_conv_pointwise_pair_rows_bf16_amx(const int64_t *ints, const float *floats, void *const *buffers,
                                           int num_threads) {
    return pointwise_amx(ints, floats, buffers, num_threads, (int)ints[7], (int)ints[8], 0);
}

int ortx_conv_pointwise_bf16x3_amx(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    return pointwise_amx(ints, floats, buffers, num_threads, 0, (int)ints[7], (int)ints[8]);
}

/* conv_pointwise_bf16x3's steps over one band on the calling thread (a task of conv_depthwise.c's
 * conv_depthwise_bf16x3): X the band's `pixels` pixels, blocked fp32 (blocks `pixels` apart); Y and the residual
 * image n's whole maps of y_plane pixels, the band from pixel y_offset on. ints, floats, buffers as
 * conv_pointwise_bf16x3's (ints[0], the batch, and ints[3], the pixels, unread). */
void ortx_pointwise_bf16x3_band_amx(const int64_t *ints, const float *floats, void *const *buffers, int64_t n,
                                    int64_t pixels, int64_t y_plane, int64_t y_offset, int thread) {
    const int64_t out_channels = ints[2], out_blocks = ortx_nchwc_blocks(out_channels);
    const int64_t steps = (pixels + STEP_PIXELS - 1) / STEP_PIXELS, groups = (out_blocks + 3) / 4;
    const int out_rows = (int)ints[7];
    void *y = out_rows ? (void *)((uint16_t *)buffers[3] + n * ortx_pair_rows_chunks(out_channels) * y_plane *
                                  ORTX_PAIR_ROWS_CHUNK)
                       : (void *)((float *)buffers[3] + n * out_blocks * y_plane * 16);
    const float *residual = ints[4] ? (const float *)buffers[4] + n * out_blocks * y_plane * 16 : NULL;
    amx_pointwise_job job = {
        ints[1], out_channels, pixels, steps, 1, steps, 1, groups, ortx_pointwise_bf16_pair_words(ints[1]),
        buffers[0], buffers[2], residual, buffers[1], y, (int)ints[5], floats[0], floats[1], 0, out_rows,
        buffers[6], ints[8] == 2, y_plane, y_offset,
    };
    amx_pointwise_task(&job, 0, thread);
}
#else
int ortx_conv_pointwise_pair_rows_bf16_amx(const int64_t *ints, const float *floats, void *const *buffers,
                                           int num_threads) {
    (void)ints, (void)floats, (void)buffers, (void)num_threads;
    return 0;
}

int ortx_conv_pointwise_nchwc_bf16_amx(const int64_t *ints, const float *floats, void *const *buffers,
                                       int num_threads) {
    (void)ints, (void)floats, (void)buffers, (void)num_threads;
    return 0;
}

int ortx_conv_pointwise_bf16x3_amx(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)ints, (void)floats, (void)buffers, (void)num_threads;
    return 0;
}

void ortx_pointwise_bf16x3_band_amx(const int64_t *ints, const float *floats, void *const *buffers, int64_t n,
                                    int64_t pixels, int64_t y_plane, int64_t y_offset, int thread) {
    (void)ints, (void)floats, (void)buffers, (void)n, (void)pixels, (void)y_plane, (void)y_offset, (void)thread;
}
#endif
