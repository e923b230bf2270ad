/* conv_pointwise_nchwc_f32: a 1x1, stride-1, unpadded, ungrouped conv on blocked tensors (conv.h's NCHWc).
 *
 * ints = [batch, in_channels, out_channels, pixels (H * W), has_residual, activation, threads];
 * floats = [param0, param1]; buffers = [X (blocked), W (packed, conv.h), bias (packed), Y (blocked), residual
 * (blocked; Y when has_residual is 0)].
 *
 * Why: in NCHW the 1x1 conv is a GEMM whose vector dimension runs over pixels, which 7x7 and 14x14 maps fill
 * badly (49 pixels: 64 lanes), or over output channels after a transpose (conv_pixel_rows.c, two extra passes).
 * Blocked, a tile is ORTX_POINTWISE_PIXELS pixels x 4 blocks of 16 output channels held in 24 registers: per input
 * channel, 4 weight vectors and 6 broadcast input values feed 24 multiply-adds, with no packing and no transpose.
 * Tasks are (image, run of pixel tiles, group of 4 output blocks; about 16 per thread), run-major, so thread t's
 * segment of the tasks (threadpool.h) is the t-th range of pixels of every block: the rows the fused expand and
 * depthwise conv (conv_expand_depthwise.c, band-major) and the next 1x1 conv give the same thread, so a tensor's
 * lines stay with the core that wrote them. Against group-major tasks (a thread's tiles sharing one group's
 * weights), 2 threads, in-process A/B: PP-OCR rec 0.99x with the vCPUs close, 0.96x far apart; cls 0.99x, 0.95x.
 * Every output is summed in the same order whatever the split, so results do not depend on threads.
 *
 * Large weights (over LARGE_WEIGHTS bytes, ResNet-50's 1x1 convs at 14x14 and 7x7: 1-4 MB) come from L3 or memory
 * on every call in a model, whose weights do not stay in L2, and the split above let every thread read all of them
 * once per run it held (2048 -> 512 at 7x7: 3 runs, 12 MB read for 4 MB of weights). For those:
 * - the fewest runs that still balance the threads (fewest_balanced_runs), so each weight is read about once;
 * - on the AVX-512 fp32 path, sums a CHUNK of input channels at a time over all of a task's tiles (partial sums in
 *   Y, as MLAS does), so a chunk's weights (32 KB) are read from memory once per task and from L1 by its other
 *   tiles, and their fetch overlaps fewer multiply-adds waiting on it.
 * Measured on the Intel model-167 host (2 MB L2, 2 threads; the kernel alone with weights and inputs rotated
 * over 60 copies so that both come from L3, as in a model): 2048 -> 512 at 7x7 0.71 -> 0.52 (runs) -> 0.45 ms
 * (chunks), 1024 -> 512 at 14x14 0.81 -> 0.69 -> 0.65, 1024 -> 256 at 14x14 0.375 -> 0.36 -> 0.33, 320 -> 1280 at
 * 7x7 0.18 -> 0.15, 960 -> 320 at 7x7 0.135 -> 0.14; light ResNet-50 (onnx's model zoo architecture) 1.12 -> 1.09x
 * ORT (3 alternating processes each), MobileNetV2-style and PP-OCR rec unchanged. Chunks of 64 or 256 channels
 * measured no better, nor prefetching the next chunk into L2 (1.08x on ResNet-50, within the noise).
 */
#include "activation.h"
#include "conv.h"
#include "gemm_bf16.h"
#include "pair_rows.h"
#include "ortx_kernels.h"
#include "threadpool.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

enum { LARGE_WEIGHTS = 128 << 10, CHUNK = 128 };

/* The fewest runs (pixel ranges), up to `most`, whose tasks split as ortx_parallel_for's segments give no thread
 * more than 1/0.95 of an even share of the work (tiles x output blocks): 320 -> 1280 at 7x7 is 20 groups, 1 run;
 * 960 -> 320 at 7x7 is 5 groups, where 1, 2 or 3 runs of its 9 tiles would give one thread 7-20% more than an
 * even share, so it keeps the usual 5 runs. */
static int64_t fewest_balanced_runs(int64_t batch, int64_t groups, int64_t out_blocks, int64_t tiles, int64_t most,
                                    int threads) {
    for (int64_t runs = 1; runs < most; runs++) {
        const int64_t tiles_per_run = (tiles + runs - 1) / runs, count = (tiles + tiles_per_run - 1) / tiles_per_run;
        const int64_t tasks = batch * count * groups;
        int64_t total = 0, worst = 0;
        for (int t = 0; t < threads; t++) {
            int64_t work = 0, first, end;
            ortx_task_segment(tasks, threads, t, &first, &end);
            for (int64_t task = first; task < end; task++) {
                const int64_t group = task % groups, run = task / groups % count;
                work += min64(4, out_blocks - group * 4) * min64(tiles_per_run, tiles - run * tiles_per_run);
            }
            total += work;
            worst = max64(worst, work);
        }
        if (20 * total >= 19 * threads * worst) return runs;
    }
    return most;
}

static void tile_portable(int64_t pixels, int64_t blocks, int64_t in_channels, int64_t x_plane, int64_t y_plane,
                          const float *x, const void *weights, const float *bias, const float *residual, float *y,
                          int activation, float param0, float param1, uint32_t *scratch) {
    (void)scratch;
    const float *w = weights;
    for (int64_t i = 0; i < pixels; i++)
        for (int64_t b = 0; b < blocks; b++)
            for (int64_t l = 0; l < 16; l++) {
                float acc = bias[b * 16 + l];
                for (int64_t c = 0; c < in_channels; c++)
                    acc += w[c * 64 + b * 16 + l] * x[(c / 16 * x_plane + i) * 16 + c % 16];
                int64_t at = (b * y_plane + i) * 16 + l;
                if (residual) acc += residual[at];
                y[at] = ortx_activation_scalar(activation, acc, param0, param1);
            }
}

/* The bf16 tile without AVX512_BF16: each operand rounded as vcvtne2ps2bf16 rounds, per pair the odd product then
 * the even one, in fp32 (products whose result is denormal are not flushed, as vdpbf16ps flushes them). */
static void tile_portable_bf16(int64_t pixels, int64_t blocks, int64_t in_channels, int64_t x_plane,
                               int64_t y_plane, const float *x, const void *weights, const float *bias,
                               const float *residual, float *y, int activation, float param0, float param1,
                               uint32_t *scratch) {
    (void)scratch;
    const uint16_t *w = weights;
    const int64_t pairs = (in_channels + 1) / 2;
    for (int64_t i = 0; i < pixels; i++)
        for (int64_t b = 0; b < blocks; b++)
            for (int64_t l = 0; l < 16; l++) {
                float acc = bias[b * 16 + l];
                for (int64_t q = 0; q < pairs; q++)
                    for (int64_t half = 1; half >= 0; half--) {
                        int64_t c = 2 * q + half;
                        if (c >= in_channels) continue;
                        float xv = ortx_bf16_to_float(ortx_bf16_from_float(x[(c / 16 * x_plane + i) * 16 + c % 16]));
                        acc += ortx_bf16_to_float(w[(q * 64 + b * 16 + l) * 2 + half]) * xv;
                    }
                int64_t at = (b * y_plane + i) * 16 + l;
                if (residual) acc += residual[at];
                y[at] = ortx_activation_scalar(activation, acc, param0, param1);
            }
}

const ortx_pointwise_nchwc_tile_fn ortx_pointwise_nchwc_tile_portable = tile_portable;
const ortx_pointwise_nchwc_tile_fn ortx_pointwise_nchwc_tile_portable_bf16 = tile_portable_bf16;

typedef struct pointwise_job {
    ortx_pointwise_nchwc_tile_fn tile;
    ortx_pointwise_nchwc_chunk_fn chunk;  /* non-NULL: sum CHUNK channels at a time over the task's tiles */
    int64_t in_channels, out_channels, pixels, groups, runs, tiles_per_run, weights_per_group, scratch_words;
    const float *X, *bias, *residual;
    const char *W;
    float *Y;
    uint32_t *scratch;
    int activation;
    float param0, param1;
    ortx_pointwise_rows_tile_fn rows_tile;  /* non-NULL: conv_pointwise_pair_rows_bf16 off AMX */
    int in_rows, out_rows;
} pointwise_job;

static void pointwise_task(void *context, int64_t task, int thread) {
    const pointwise_job *job = context;
    const int64_t plane = job->pixels, in_blocks = ortx_nchwc_blocks(job->in_channels);
    const int64_t out_blocks = ortx_nchwc_blocks(job->out_channels);
    int64_t group = task % job->groups, run = task / job->groups % job->runs, n = task / (job->runs * job->groups);
    int64_t blocks = min64(4, out_blocks - group * 4);
    const float *x = job->X + n * in_blocks * plane * 16;
    const char *w = job->W + group * job->weights_per_group;
    uint32_t *scratch = job->scratch ? job->scratch + thread * job->scratch_words : NULL;
    int64_t y_base = (n * out_blocks + group * 4) * plane * 16;
    int64_t first = run * job->tiles_per_run * ORTX_POINTWISE_PIXELS;
    int64_t last = min64(plane, first + job->tiles_per_run * ORTX_POINTWISE_PIXELS);
    if (job->chunk) {
        for (int64_t c0 = 0; c0 < job->in_channels; c0 += CHUNK) {
            const int64_t count = min64(CHUNK, job->in_channels - c0);
            for (int64_t i = first; i < last; i += ORTX_POINTWISE_PIXELS)
                job->chunk(min64(ORTX_POINTWISE_PIXELS, last - i), blocks, c0, count, plane, 16, plane, 16,
                           x + i * 16, (const float *)w, job->bias + group * 64,
                           job->residual ? job->residual + y_base + i * 16 : NULL, job->Y + y_base + i * 16, c0 == 0,
                           c0 + count == job->in_channels, job->activation, job->param0, job->param1);
        }
        return;
    }
    const int64_t step = ortx_pointwise_tile_pixels(blocks);
    if (job->rows_tile) {  /* pair rows: a pixel is 32 bf16 of a chunk (pair_rows.h), a group's 4 blocks 2 chunks */
        const void *x_at = job->in_rows ? (const void *)((const uint16_t *)job->X +
                                                         n * ortx_pair_rows_chunks(job->in_channels) * plane * 32)
                                        : (const void *)x;
        const int64_t y_rows = (n * ortx_pair_rows_chunks(job->out_channels) + group * 2) * plane * 32;
        for (int64_t i = first; i < last; i += step)
            job->rows_tile(min64(step, last - i), blocks, job->in_channels, plane, plane,
                           (const char *)x_at + i * 64, job->in_rows, w, job->bias + group * 64,
                           job->residual ? job->residual + y_base + i * 16 : NULL,
                           job->out_rows ? (void *)((uint16_t *)job->Y + y_rows + i * 32)
                                         : (void *)(job->Y + y_base + i * 16),
                           job->out_rows, job->out_channels - group * 64, job->activation, job->param0,
                           job->param1, scratch);
        return;
    }
    for (int64_t i = first; i < last; i += step)
        job->tile(min64(step, last - i), blocks, job->in_channels, plane, plane, x + i * 16, w,
                  job->bias + group * 64, job->residual ? job->residual + y_base + i * 16 : NULL,
                  job->Y + y_base + i * 16, job->activation, job->param0, job->param1, scratch);
}

/* weights_per_group: bytes of one group's packed weights; scratch: per-thread words (bf16) or NULL. */
static void pointwise(const int64_t *ints, const float *floats, void *const *buffers, int num_threads,
                      ortx_pointwise_nchwc_tile_fn tile, int64_t weights_per_group, uint32_t *scratch,
                      int64_t scratch_words, ortx_pointwise_rows_tile_fn rows_tile, int in_rows, int out_rows) {
    int64_t batch = ints[0], in_channels = ints[1], out_channels = ints[2], pixels = ints[3];
    int threads = (int)max64(1, min64(num_threads, ints[6]));
    /* small convs (< 256K multiply-adds, ~5 us on one core) stay on one thread */
    if ((double)batch * in_channels * out_channels * pixels < 256.0 * 1024) threads = 1;
    int64_t groups = (ortx_nchwc_blocks(out_channels) + 3) / 4;
    int64_t tiles = (pixels + ORTX_POINTWISE_PIXELS - 1) / ORTX_POINTWISE_PIXELS;
    /* 4x the pool's usual tasks per thread: a conv whose last group has 1-3 of its 4 blocks (MobileNetV2's 24 ->
     * 144: groups of 4, 4 and 1 blocks) gave tasks too unequal for stealing to even out at 4 per thread (1.76x
     * on 2 threads); in-process A/B at 2 threads, same bits: MobileNetV2-style fp32 0.97-0.98x, bf16 0.97-0.98x,
     * PP-OCR cls 0.985x, rec 0.98x, with the vCPUs near and far apart alike */
    int64_t wanted = 4 * ORTX_TASKS_PER_THREAD * threads, pieces = batch * groups;
    int64_t runs = threads > 1 ? min64(tiles, (wanted + pieces - 1) / pieces) : 1;
    /* the fp32 AVX-512 path (where it was measured) with large weights: see the file comment */
    const int large = tile == ortx_pointwise_nchwc_tile_avx512 && ortx_pointwise_nchwc_chunk_avx512 != NULL &&
                      groups * weights_per_group > LARGE_WEIGHTS;
    if (large && threads > 1)
        runs = fewest_balanced_runs(batch, groups, ortx_nchwc_blocks(out_channels), tiles, runs, threads);
    int64_t tiles_per_run = (tiles + runs - 1) / runs;
    runs = (tiles + tiles_per_run - 1) / tiles_per_run;
    pointwise_job job = {
        tile, large && in_channels > CHUNK ? ortx_pointwise_nchwc_chunk_avx512 : NULL, in_channels, out_channels,
        pixels, groups, runs, tiles_per_run, weights_per_group, scratch_words,
        buffers[0], buffers[2], ints[4] ? buffers[4] : NULL, buffers[1], buffers[3], scratch,
        (int)ints[5], floats[0], floats[1], rows_tile, in_rows, out_rows,
    };
    ortx_parallel_for(threads, batch * groups * runs, pointwise_task, &job);
}

void ortx_conv_pointwise_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    pointwise(ints, floats, buffers, num_threads,
              ortx_selected_isa() == ORTX_ISA_AVX512 ? ortx_pointwise_nchwc_tile_avx512 : tile_portable,
              ints[1] * 64 * (int64_t)sizeof(float), NULL, 0, NULL, 0, 0);
}

/* Whether the bf16 1x1 convs take the AVX512_BF16 tile, and whether their AMX steps (conv_pointwise_nchwc_amx.c). */
static int avx512_bf16_path(void) { return ortx_selected_isa() == ORTX_ISA_AVX512 && ortx_cpu_has_avx512_bf16(); }
static int amx_path(void) { return avx512_bf16_path() && ortx_amx_allowed() && ortx_cpu_has_amx_bf16(); }

void ortx_conv_pointwise_nchwc_bf16(const int64_t *ints, const float *floats, void *const *buffers,
                                    int num_threads) {
    int fast = avx512_bf16_path();
    if (amx_path() && ortx_conv_pointwise_nchwc_bf16_amx(ints, floats, buffers, num_threads)) return;
    int64_t words = ORTX_POINTWISE_LONG_PIXELS * ortx_pointwise_bf16_pair_words(ints[1]);
    pointwise(ints, floats, buffers, num_threads, fast ? ortx_pointwise_nchwc_tile_avx512_bf16 : tile_portable_bf16,
              ortx_pointwise_bf16_pair_words(ints[1]) * 128 * (int64_t)sizeof(uint16_t), buffers[5], words, NULL, 0,
              0);
}

/* conv_pointwise_pair_rows_bf16: conv_pointwise_nchwc_bf16 with X and/or Y in pair rows (pair_rows.h): ints its 7,
 * then in_rows, out_rows; buffers its (the residual, when there is one, blocked fp32). On AMX its steps load A
 * tiles from pair rows as they lie; on the AVX512_BF16 path the rows tile (conv_pointwise_nchwc_avx512_bf16.c)
 * broadcasts pair words from them as they lie and rounds its outputs into them; elsewhere the oracle's loops. */
void ortx_conv_pointwise_pair_rows_bf16(const int64_t *ints, const float *floats, void *const *buffers,
                                        int num_threads) {
    if (amx_path() && ortx_conv_pointwise_pair_rows_bf16_amx(ints, floats, buffers, num_threads)) return;
    if (!ints[7] && !ints[8]) {  /* neither side in pair rows */
        ortx_conv_pointwise_nchwc_bf16(ints, floats, buffers, num_threads);
        return;
    }
    if (avx512_bf16_path() && ortx_pointwise_rows_tile_avx512_bf16 != NULL) {
        pointwise(ints, floats, buffers, num_threads, NULL,
                  ortx_pointwise_bf16_pair_words(ints[1]) * 128 * (int64_t)sizeof(uint16_t), buffers[5],
                  ORTX_POINTWISE_LONG_PIXELS * ortx_pointwise_bf16_pair_words(ints[1]),
                  ortx_pointwise_rows_tile_avx512_bf16, (int)ints[7], (int)ints[8]);
        return;
    }
    ortx_conv_pointwise_pair_rows_bf16_ref(ints, floats, buffers, num_threads);
}

/* conv_pointwise_bf16x3: the 1x1 conv at fp32 accuracy from bf16 products (conv_pointwise_nchwc_amx.c step 5):
 * ints conv_pointwise_nchwc_bf16's 7, then out_rows (Y in pair rows), form (1: rounded values and remainders in
 * separate chunks, 2: in one, from at most 16 input channels); buffers conv_pointwise_nchwc_bf16's (X and the
 * residual blocked fp32; W packed by blocked_layout.pack_pointwise_bf16x3), then the weights' remainders. */
int ortx_conv_pointwise_bf16x3_applies(void) { return amx_path(); }

void ortx_conv_pointwise_bf16x3(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    if (amx_path() && ortx_conv_pointwise_bf16x3_amx(ints, floats, buffers, num_threads)) return;
    ortx_conv_pointwise_bf16x3_ref(ints, floats, buffers, num_threads);
}
