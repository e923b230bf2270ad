/* The pixel-rows form of conv2d_bf16: for small output maps, where the direct form (conv_bf16_direct.c) computes
 * dropped columns (a 3x3 conv's 7x7 output: 64 lanes for 49 pixels, ResNet's last stage at 146 GMAC/s against 200
 * on 56x56 maps), the vectors run along output channels instead, so every lane is an output.
 *
 * 1. The input of one image is rounded once into padded channel-pair rows: word cp of position (r, c) holds the
 *    bf16 values of channels 2cp and 2cp+1 (0 past the last channel) at padded input (r, c), positions row-major
 *    (NHWC with channel pairs); padding positions are zero.
 * 2. A tile is P <= 7 output pixels x B <= 4 blocks of 16 output channels in zmm accumulators; per k pair (cp, tap),
 *    in the direct form's K order (cp, tap), B weight vectors ([pair][64 channels][2] bf16) and one broadcast word
 *    per pixel feed P x B vdpbf16ps, so the sums are the direct form's, in its order: the same bits.
 *    K runs in blocks of channel pairs (ROWS_BLOCK_BYTES of weights), each block over a group of up to 7 tiles
 *    before the next, the sums kept in fp32 between blocks (so still the same bits): a block's weights come from
 *    memory once and from L1 for the group's other tiles, and the next block's are prefetched meanwhile. Without
 *    the blocks each tile ran the whole K, and the first tile of a panel read its weights (590 KB on 512@7) cold.
 * 3. The raw sums are scattered into Y (NCHW) and the fp32 ISA's epilogue runs over the tile's rows x P columns.
 * Threads split (channel panel of 64, tile group) tasks, panel-major. K blocks measured on the Intel model 167 host
 * with AMX off (2 threads, ResNet-18-style with its bf16 kernels): the whole model 0.97x its time (22.4 -> 21.6 ms),
 * its 512@7 convs 1.45-1.49 -> 1.22-1.23 ms.
 * Applies (ortx_conv_rows_bf16_applies) with AVX512_BF16 and without the AMX form, to ungrouped convs larger than
 * 1x1 with at least 8 input channels and at most ROWS_MAX_PIXELS outputs where the form they would take otherwise
 * computes > ROWS_WASTE lanes per output (the direct form's dropped columns, the GEMM's 16-pixel panels). Measured
 * against the direct form on the Zen 4 host (one conv, 2 threads, in-process A/B): ResNet-18-style 512@7 3x3
 * 0.78x, 256@14 0.89x, 256 -> 512 3x3/2 0.75x its time, 128@28 not taken (1.07 lanes per output).
 */
#include <string.h>

#include "activation.h"
#include "conv.h"
#include "gemm_bf16.h"
#include "isa.h"
#include "ortx_kernels.h"
#include "threadpool.h"

#define ROWS_PANEL 64     /* output channels per weight panel: 4 zmm blocks */
#define ROWS_PIXELS 7     /* 7 x 4 accumulators + 4 weight vectors: the 32 zmm registers */
#define ROWS_WASTE 1.1
#define ROWS_GROUP_TILES 7       /* tiles that share each K block's weights (7 x 7 pixels: a 7x7 map) */
#define ROWS_BLOCK_BYTES 24576   /* a K block's weights, read from L1 by the group's other tiles */
#define ROWS_PREFETCH_TILES 4    /* tiles that prefetch the next block, a quarter each */
#define ROWS_MAX_PIXELS 1024

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static int64_t pairs_of(const ortx_conv_params *p) { return (p->in_channels + 1) / 2; }
static int64_t taps_of(const ortx_conv_params *p) { return p->kernel_height * p->kernel_width; }

/* Padded input extent the taps read. */
static int64_t padded_rows(const ortx_conv_params *p) {
    return (p->out_height - 1) * p->stride_height + (p->kernel_height - 1) * p->dilation_height + 1;
}
static int64_t padded_cols(const ortx_conv_params *p) {
    return (p->out_width - 1) * p->stride_width + (p->kernel_width - 1) * p->dilation_width + 1;
}

/* Tests turn the form off (conv_bf16_rows_off) to compare it with the form the conv takes without it. */
static int rows_off = 0;

void ortx_conv_rows_bf16_off(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats, (void)buffers, (void)num_threads;
    rows_off = (int)ints[0];
}

int ortx_conv_rows_bf16_applies(const ortx_conv_params *p) {
    if (rows_off || ortx_selected_isa() != ORTX_ISA_AVX512 || !ortx_cpu_has_avx512_bf16() ||
        ortx_bgemm_select_isa()->a_tiles)
        return 0;
    int64_t pixels = p->out_height * p->out_width;
    if (p->group != 1 || p->in_channels < 8 || pixels > ROWS_MAX_PIXELS || p->out_channels < 16 ||
        p->kernel_height * p->kernel_width > 64)
        return 0;
    /* 1x1: the stride-2 downsample's rows (its input unread between strides) cost about its compute (1.19x the
     * direct form's time on ResNet's 256 -> 512 at 7x7); stride 1 is one GEMM on X as stored */
    if (p->kernel_height * p->kernel_width == 1) return 0;
    int64_t lanes = ortx_round_up(pixels, ORTX_GEMM_NR);  /* the packed GEMM's 16-pixel panels */
    if (ortx_conv_direct_bf16_applies(p)) {
        ortx_conv_direct_geometry g = ortx_conv_direct_geometry_of(p);
        lanes = ortx_round_up((p->out_height - 1) * g.phase_width + p->out_width, ORTX_GEMM_NR);
    }
    return (double)lanes > ROWS_WASTE * (double)pixels;
}

/* Workspace floats: the padded channel-pair rows (one word per pair and position). */
int64_t ortx_conv_rows_bf16_floats(const ortx_conv_params *p) {
    return ortx_round_up(padded_rows(p) * padded_cols(p) * pairs_of(p), 16);
}

int64_t ortx_conv_rows_bf16_elements(const ortx_conv_params *p) {
    return ortx_round_up(p->out_channels, ROWS_PANEL) * pairs_of(p) * taps_of(p) * 2;
}

/* Weight (m, c, tap): panel m / 64, K pair q = (c / 2) * taps + tap, [q][64][2]. */
int64_t ortx_conv_rows_bf16_index(const ortx_conv_params *p, int64_t m, int64_t c, int64_t tap) {
    int64_t q = c / 2 * taps_of(p) + tap, panel_pairs = pairs_of(p) * taps_of(p);
    return ((m / ROWS_PANEL * panel_pairs + q) * ROWS_PANEL + m % ROWS_PANEL) * 2 + c % 2;
}

typedef struct rows_job {
    const ortx_conv_params *p;
    const float *x;
    uint32_t *rows;              /* the padded channel-pair rows of the image */
    const uint16_t *weights;
    float *y;
    const ortx_gemm_epilogue *epilogue;
    int64_t tiles, panels, pairs, taps, cols;
    int64_t groups;       /* tasks per panel, each a run of at most ROWS_GROUP_TILES tiles */
    int64_t block_pairs;  /* channel pairs per K block */
    int vector_fill;
} rows_job;

#if ORTX_HAVE_X86
#include <immintrin.h>

/* Step 1's interior run of one padded row: words out[j * stride] = (bf16(first[j]), bf16(second[j])) for j < count,
 * 16 at a time (vcvtne2ps2bf16 rounds as ortx_bf16_from_float, the pairs interleaved by vpermw, scattered); returns
 * how many it wrote (the caller does the rest). */
ORTX_TARGET_AVX512_BF16 static int64_t fill_run_avx512(const float *first, const float *second, int64_t count,
                                                      uint32_t *out, int64_t stride) {
    const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                           21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i at = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32((int)stride));
    int64_t j = 0;
    for (; j + 16 <= count; j += 16) {
        __m512 a = _mm512_loadu_ps(first + j), b = second ? _mm512_loadu_ps(second + j) : _mm512_setzero_ps();
        __m512i pairs = _mm512_permutexvar_epi16(order, (__m512i)_mm512_cvtne2ps_pbh(b, a));
        _mm512_i32scatter_epi32(out + j * stride, at, pairs, 4);
    }
    return j;
}
#endif

/* Step 1 for channel pairs [begin, end). */
static void fill_pairs(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const rows_job *job = context;
    const ortx_conv_params *p = job->p;
    const int64_t H = p->in_height, W = p->in_width, rows = padded_rows(p), cols = job->cols;
    for (int64_t cp = begin; cp < end; cp++) {
        const float *first = job->x + 2 * cp * H * W;
        const float *second = 2 * cp + 1 < p->in_channels ? first + H * W : NULL;
        for (int64_t r = 0; r < rows; r++) {
            int64_t iy = r - p->pad_top;
            uint32_t *out = job->rows + r * cols * job->pairs + cp;
            /* interior columns [lo, hi): input columns 0 .. W-1 inside the padded row */
            int64_t lo = iy >= 0 && iy < H ? min64(p->pad_left, cols) : cols;
            int64_t hi = max64(lo, min64(cols, p->pad_left + W));
            int64_t done = lo;
#if ORTX_HAVE_X86
            if (job->vector_fill && hi > lo)
                done += fill_run_avx512(first + iy * W + lo - p->pad_left,
                                        second ? second + iy * W + lo - p->pad_left : NULL, hi - lo,
                                        out + lo * job->pairs, job->pairs);
#endif
            for (int64_t c = 0; c < cols; c++) {
                if (c >= lo && c < done) continue;
                uint32_t word = 0;
                if (c >= lo && c < hi) {
                    int64_t ix = c - p->pad_left;
                    word = ortx_bf16_from_float(first[iy * W + ix]);
                    if (second) word |= (uint32_t)ortx_bf16_from_float(second[iy * W + ix]) << 16;
                }
                out[c * job->pairs] = word;
            }
        }
    }
}

#if ORTX_HAVE_X86
/* One tile's channel pairs [cp0, cp1): pixels at word offsets `at[i]` of the rows (tap 0), channels
 * [m0, m0 + 16 * B) of panel `w` (the panel's first pair). The sums start from zero (cp0 = 0) or from `partial`, and
 * end in `partial` (cp1 < pairs) or scattered into Y: each output's K pairs are added in the same order either way. */
ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void tile_fixed(
    const int P, const int B, const rows_job *job, const int64_t *at, const int64_t *tap_at, const uint16_t *w,
    float *y, int64_t pixel0, int64_t m0, int64_t channels, int64_t cp0, int64_t cp1, float *partial,
    const uint16_t *next) {
    __m512 acc[ROWS_PIXELS][4];
    for (int i = 0; i < P; i++)
        for (int b = 0; b < B; b++)
            acc[i][b] = cp0 ? _mm512_load_ps(partial + (i * 4 + b) * 16) : _mm512_setzero_ps();
    const uint32_t *rows = job->rows;
    w += cp0 * job->taps * ROWS_PANEL * 2;
    for (int64_t cp = cp0; cp < cp1; cp++)
        for (int64_t t = 0; t < job->taps; t++, w += ROWS_PANEL * 2) {
            if (next) {  /* the next block's weights, a line per K pair: in L1 before its first tile reads them */
                _mm_prefetch((const char *)next, _MM_HINT_T0);
                next += 32;
            }
            __m512bh wv[4];
            for (int b = 0; b < B; b++) wv[b] = (__m512bh)_mm512_loadu_si512(w + 32 * b);
            const uint32_t *base = rows + tap_at[t] + cp;
            for (int i = 0; i < P; i++) {
                __m512bh xv = (__m512bh)_mm512_set1_epi32((int)base[at[i]]);
                for (int b = 0; b < B; b++) acc[i][b] = _mm512_dpbf16_ps(acc[i][b], xv, wv[b]);
            }
        }
    if (cp1 < job->pairs) {
        for (int i = 0; i < P; i++)
            for (int b = 0; b < B; b++) _mm512_store_ps(partial + (i * 4 + b) * 16, acc[i][b]);
        return;
    }
    const int64_t N = job->p->out_height * job->p->out_width;
    const __m512i lanes = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                             _mm512_set1_epi32((int)N));
    for (int b = 0; b < B; b++) {
        int64_t live = channels - 16 * b;
        __mmask16 mask = live >= 16 ? 0xffff : (__mmask16)((1u << (live > 0 ? live : 0)) - 1);
        for (int i = 0; i < P; i++)
            _mm512_mask_i32scatter_ps(y + (m0 + 16 * b) * N + pixel0 + i, mask, lanes, acc[i][b], 4);
    }
}

ORTX_TARGET_AVX512_BF16 static void tile_avx512_bf16(int64_t pixels, int64_t blocks, const rows_job *job,
                                                     const int64_t *at, const int64_t *tap_at, const uint16_t *w,
                                                     float *y, int64_t pixel0, int64_t m0, int64_t channels,
                                                     int64_t cp0, int64_t cp1, float *partial, const uint16_t *next) {
#define ROWS_TILE(P, B) tile_fixed(P, B, job, at, tap_at, w, y, pixel0, m0, channels, cp0, cp1, partial, next)
#define ROWS_BLOCKS(P)                                                                                            \
    switch (blocks) {                                                                                             \
        case 4: ROWS_TILE(P, 4); break;                                                                           \
        case 3: ROWS_TILE(P, 3); break;                                                                           \
        case 2: ROWS_TILE(P, 2); break;                                                                           \
        default: ROWS_TILE(P, 1);                                                                                 \
    }
    switch (pixels) {
        case 7: ROWS_BLOCKS(7) break;
        case 6: ROWS_BLOCKS(6) break;
        case 5: ROWS_BLOCKS(5) break;
        case 4: ROWS_BLOCKS(4) break;
        case 3: ROWS_BLOCKS(3) break;
        case 2: ROWS_BLOCKS(2) break;
        default: ROWS_BLOCKS(1)
    }
#undef ROWS_BLOCKS
#undef ROWS_TILE
}
#endif

/* A task: panel `task / groups`, tiles [first, end) of its group. K is run in blocks of block_pairs channel pairs,
 * each block over every tile of the group before the next (partial sums kept per tile), so a block's weights
 * (ROWS_BLOCK_BYTES) are read from memory once and then from L1 by the other tiles, and the next block's are
 * prefetched meanwhile: a panel's weights stream evenly through the task instead of in bursts at its first tile
 * (ResNet-18-style 512@7: 2.4 MB of weights per panel row; a tile's full-K pass read them cold). */
static void rows_task(void *context, int64_t task, int thread) {
    (void)thread;
    const rows_job *job = context;
    const ortx_conv_params *p = job->p;
    const int64_t N = p->out_height * p->out_width;
    int64_t panel = task / job->groups, group = task % job->groups;
    int64_t first = group * job->tiles / job->groups, end = (group + 1) * job->tiles / job->groups;
    int64_t m0 = panel * ROWS_PANEL, channels = min64(ROWS_PANEL, p->out_channels - m0);
    int64_t at[ROWS_GROUP_TILES][ROWS_PIXELS], pixel0[ROWS_GROUP_TILES], pixels[ROWS_GROUP_TILES], tap_at[64];
    float partial[ROWS_GROUP_TILES][ROWS_PIXELS * 4 * 16] __attribute__((aligned(64)));
    for (int64_t k = 0; k < end - first; k++) {
        int64_t tile = first + k;
        pixel0[k] = tile * N / job->tiles;
        pixels[k] = (tile + 1) * N / job->tiles - pixel0[k];
        for (int64_t i = 0; i < pixels[k]; i++) {
            int64_t oy = (pixel0[k] + i) / p->out_width, ox = (pixel0[k] + i) % p->out_width;
            at[k][i] = (oy * p->stride_height * job->cols + ox * p->stride_width) * job->pairs;
        }
    }
    for (int64_t t = 0; t < job->taps; t++)
        tap_at[t] = (t / p->kernel_width * p->dilation_height * job->cols + t % p->kernel_width * p->dilation_width) *
                    job->pairs;
    const uint16_t *w = job->weights + panel * job->pairs * job->taps * ROWS_PANEL * 2;
    const int64_t blocks = (channels + 15) / 16;
    for (int64_t cp0 = 0; cp0 < job->pairs; cp0 += job->block_pairs) {
        int64_t cp1 = min64(job->pairs, cp0 + job->block_pairs);
#if ORTX_HAVE_X86
        /* the next block's weights, 4 lines per K pair: tile k < ROWS_PREFETCH_TILES prefetches quarter k */
        int64_t next_pairs = min64(job->pairs, cp1 + job->block_pairs) - cp1;
        const uint16_t *next = next_pairs ? w + cp1 * job->taps * ROWS_PANEL * 2 : NULL;
        for (int64_t k = 0; k < end - first; k++)
            tile_avx512_bf16(pixels[k], blocks, job, at[k], tap_at, w, job->y, pixel0[k], m0, channels, cp0, cp1,
                             partial[k], k < ROWS_PREFETCH_TILES ? (next ? next + k * 32 * (cp1 - cp0) * job->taps
                                                                         : NULL) : NULL);
#endif
    }
    for (int64_t k = 0; k < end - first; k++)
        ortx_gemm_select_isa()->epilogue(job->y + m0 * N + pixel0[k], N, channels, pixels[k], m0, pixel0[k],
                                         job->epilogue);
}

void ortx_conv_rows_bf16(const ortx_conv_params *p, const float *x, const uint16_t *weights, float *y,
                         const ortx_gemm_epilogue *epilogue, float *workspace, int threads) {
    rows_job job = {.p = p, .x = x, .rows = (uint32_t *)workspace, .weights = weights, .y = y,
                    .epilogue = epilogue, .pairs = pairs_of(p), .taps = taps_of(p), .cols = padded_cols(p),
                    .vector_fill = ORTX_HAVE_X86};
    const int64_t N = p->out_height * p->out_width;
    job.tiles = (N + ROWS_PIXELS - 1) / ROWS_PIXELS;
    job.panels = (p->out_channels + ROWS_PANEL - 1) / ROWS_PANEL;
    /* groups of at most ROWS_GROUP_TILES tiles, and at least two tasks per thread where the tiles allow */
    job.groups = max64((job.tiles + ROWS_GROUP_TILES - 1) / ROWS_GROUP_TILES,
                       min64(job.tiles, (2 * (int64_t)threads + job.panels - 1) / job.panels));
    job.block_pairs = max64(1, ROWS_BLOCK_BYTES / (job.taps * ROWS_PANEL * 4));
    ortx_parallel_range(threads, job.pairs, (int64_t)ORTX_TASKS_PER_THREAD * threads, fill_pairs, &job);
    ortx_parallel_for(threads, job.panels * job.groups, rows_task, &job);
}
