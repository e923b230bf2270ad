/* The direct form of conv2d_bf16: an implicit GEMM whose B operand is read in place from bf16 channel-pair planes,
 * so no patch matrix is ever packed (conv_bf16.c's other cases pack one, K pair by K pair, per thread).
 *
 * 1. The input of one image and group is rounded once into channel-pair phase planes: word (32 bits) j of row r of
 *    phase (qy, qx) of pair cp holds the bf16 values of channels 2cp and 2cp+1 (0 past the last channel) at padded
 *    input (r*sh + qy, j*sw + qx): conv.h's direct geometry (ortx_conv_direct_geometry_of) with two channels per
 *    word, the layout vdpbf16ps reads. Only phases some tap reads are filled.
 * 2. Output pixel (oy, ox) is "virtual" pixel v = oy*phase_width + ox; columns ox >= OW are computed and dropped.
 *    K pair q = (cp, tap) of virtual pixel v is the word at offsets[q] + v, so 16 consecutive virtual pixels are
 *    one load: the weights (A, prepacked per group as MR-row panels of all K pairs, K ordered (cp, tap, channel
 *    parity)) times those words accumulate in registers over the whole K (no K blocks, no partial sums stored).
 * 3. Tiles of 32 virtual pixels x MR rows; per 16-pixel vector the kept lanes are packed together (vcompressps)
 *    and stored after the fp32 epilogue: the kept pixels of a vector are consecutive in Y.
 * Threads split (tile, row group) units, tile-major, after the planes are filled in parallel; every output is
 * summed by one tile over the whole K, so results do not depend on the split.
 * Applies (ortx_conv_direct_bf16_applies) to convs with at least 8 input channels per group (after unfolds_x's
 * unfolding), other than 1x1 stride 1, when the dropped columns and the zero channel of an odd Cin cost at most
 * ~35% more multiply-adds.
 * conv_transpose2d_bf16 (conv_transpose_bf16.c) runs it as a 1x1 conv whose step 3 scatters each tile (through a
 * per-thread scratch tile) into the ConvTranspose's output instead.
 * The AMX form (bf16 paths with a_tiles; not the transposed one): chunk planes, the channel pairs in chunks of 16
 * (zero pairs past the last) and each position (phase, row, column) of a chunk holding its 16 pairs' words in 64
 * bytes (isa->chunk_run), so an A tile of 16 virtual pixels at one tap's offset is 1 KB of whole cache lines one
 * pixel apart; the weights per group are 16-row panels of [chunk][tap] 1 KB B tiles ([16 pairs][16 rows][2]);
 * steps of 32 rows x 32 virtual pixels (isa->direct_tiles), C tiles transposed to rows x pixels for the store.
 * With `layout` (conv2d_bf16_nchwc, one group) x and/or y are blocked (conv.h's NCHWc): a chunk's 32 channels are
 * two blocked vectors per position, converted to its 16 words without a transpose (isa->chunk_run_blocked), and a C
 * tile row is one pixel's 16 channels, stored as that pixel's vector (gemm_bf16_amx.c's direct_store_rows).
 * (Channel-pair planes read as B tiles put a tap's 16 words 4 or 8 bytes off the cache lines: every tile row
 * straddled two lines.) Known limits: the padding costs up to 15 zero pairs per tap (Cin = 8: 3/4 of the work);
 * the planes of a group are workspace (2 bytes per input value and phase); a 1x1 conv at stride 2 fills one phase
 * of four; small images waste lanes on the dropped columns (7x7 outputs of a 3x3 conv: 64 lanes for 49 pixels).
 */
#include <string.h>

#include "activation.h"
#include "conv.h"
#include "gemm_bf16.h"
#include "ortx_kernels.h"
#include "threadpool.h"

#define TILE_PIXELS (2 * ORTX_GEMM_NR)
#define SLACK_WORDS (2 * TILE_PIXELS)  /* the last tile's dropped lanes read up to 31 words past the planes */
#define CHUNK_WORDS 16                 /* the AMX form: one position of a chunk plane */

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int64_t channel_pairs(const ortx_conv_params *p) { return (p->in_channels / p->group + 1) / 2; }

static int64_t taps(const ortx_conv_params *p) { return p->kernel_height * p->kernel_width; }

/* The AMX form's 16-pair chunks per tap, and whether the selected bf16 path is that form's. */
static int64_t tile_chunks(const ortx_conv_params *p) {
    return (channel_pairs(p) + ORTX_BGEMM_TILE_PAIRS - 1) / ORTX_BGEMM_TILE_PAIRS;
}

static int use_tiles(void) { return ortx_bgemm_select_isa()->a_tiles; }

/* Channel pairs with planes: padded to whole chunks on the AMX form. */
static int64_t plane_pairs(const ortx_conv_params *p) {
    return use_tiles() ? tile_chunks(p) * ORTX_BGEMM_TILE_PAIRS : channel_pairs(p);
}

/* Words past the planes that the last tile may read: on the AMX form up to 31 positions of 16 words. */
static int64_t slack_words(void) { return use_tiles() ? SLACK_WORDS * CHUNK_WORDS : SLACK_WORDS; }

/* x-unfolded convs: from fewer than 8 input channels (one group), the conv is run as the KH x 1 conv, stride
 * (sh, 1), of an input whose Cin x KW channels at output column ox are the values its taps kx read, value
 * j = kx * Cin + c being X[c][iy][ox * sw + kx * dw - pad_left] (0 outside): pixels with their channels side by
 * side, as the AMX form's windows (below) hold them; so no column is dropped and the pairs hold a row of the
 * patch. The AMX form unfolds when Cin x KW fills 16 to 32 values (one 16-pair chunk instead of 2-7 of its 16
 * pairs): ResNet's 3 -> 64 7x7/2 stem (21 values of 32) took the packed patch-matrix path before, its packing
 * (im2col in bf16) most of the time. The vdpbf16ps form unfolds from 8 values: in-process A/B at 2 threads on
 * Zen 4 against that path, 3 -> 64 7x7/2 at 224x224 0.87 -> 0.78 ms, 3 -> 32 3x3/2 0.184 -> 0.162 ms. */
static int unfolds_x(const ortx_conv_params *p) {
    int64_t values = p->in_channels * p->kernel_width;
    if (p->group != 1 || p->in_channels >= 8 || p->kernel_width < 2) return 0;
    if (use_tiles()) return values >= ORTX_BGEMM_TILE_PAIRS && values <= 2 * ORTX_BGEMM_TILE_PAIRS;
    return values >= 8;  /* the vdpbf16ps form: ortx_conv_direct_bf16_applies's least channels */
}

/* The conv the direct form runs: p itself, or its unfolded form (unfolds_x). */
static ortx_conv_params effective(const ortx_conv_params *p) {
    ortx_conv_params q = *p;
    if (unfolds_x(p)) {
        q.in_channels = p->in_channels * p->kernel_width;
        q.in_width = p->out_width;
        q.kernel_width = q.stride_width = q.dilation_width = 1;
        q.pad_left = 0;
    }
    return q;
}

/* The AMX form's windowed x-unfolded convs (dilation 1 in x): the unfolded values of output column ox are one run,
 * pixels ox * sw .. ox * sw + KW - 1 of a padded input row whose pixels hold their Cin channels side by side
 * (value j = kx * Cin + c), so the planes are those rows (pixel_row) and an A tile's 16 rows are 64-byte windows
 * sw * Cin * 2 bytes apart (ResNet's stem: 12), read in place. The values past a window's Cin x KW are the next
 * pixels', which the weights' zero rows take to 0 unless one is infinite or NaN: then (pixel_row says so) the
 * windows are copied into the chunk planes, zero past the values, as the unwindowed form has them. The planes'
 * rows hold window_width(p) positions, pixels 0 .. window_width * sw - 1 from pad_left before the input, so the
 * columns past OW are computed and dropped (ResNet's stem: 115 positions a row for 112 outputs). Against its chunk
 * planes (11 words a position filled by 16-word transposes), kernel alone, 2 threads, in-process: ResNet-18's
 * 3 -> 64 7x7/2 stem into pair rows 0.83x; with this change's other step mends (deferred stores, tile_lanes by
 * row segments, the epilogue's fields read once) 0.77x. */
static int windowed(const ortx_conv_params *original) {
    return use_tiles() && unfolds_x(original) && original->dilation_width == 1;
}

static int64_t window_width(const ortx_conv_params *o) {
    const int64_t sw = o->stride_width, last = (o->out_width - 1) * sw + o->kernel_width;
    const int64_t pixels = o->pad_left + o->in_width > last ? o->pad_left + o->in_width : last;
    return (pixels + sw - 1) / sw;
}

/* conv.h's direct geometry of the conv the direct form runs (effective), with the windowed form's row width. */
static ortx_conv_direct_geometry geometry(const ortx_conv_params *original) {
    const ortx_conv_params q = effective(original);
    ortx_conv_direct_geometry g = ortx_conv_direct_geometry_of(&q);
    if (windowed(original)) {
        g.phase_width = window_width(original);
        g.channel_floats = g.phases_y * g.phases_x * g.phase_rows * g.phase_width;
        g.virtual_pixels = q.out_height * g.phase_width;
    }
    return g;
}

/* Bytes of the windowed form's planes and their zeroed slack (the last tile's dropped rows read up to 32 positions
 * and a window past them); 0 for other convs. */
static int64_t window_bytes(const ortx_conv_params *original) {
    if (!windowed(original)) return 0;
    const int64_t position = original->stride_width * original->in_channels * 2;
    return ortx_round_up(geometry(original).channel_floats * position + TILE_PIXELS * position + 64, 64);
}

/* Virtual pixels up to the last output pixel (the last row's dropped columns are not computed). */
static int64_t virtual_pixels(const ortx_conv_params *p, const ortx_conv_direct_geometry *g) {
    return (p->out_height - 1) * g->phase_width + p->out_width;
}

int ortx_conv_direct_bf16_applies(const ortx_conv_params *original) {
    const ortx_conv_params q = effective(original), *p = &q;
    if (p->stride_height * p->stride_width > 64) return 0;  /* direct_job.used_phase */
    int64_t cin_g = p->in_channels / p->group;
    /* a 1x1 stride-1 conv is one GEMM on X as stored (Case 1 reads it in place) and a few input channels give
     * few k pairs per tile: both measured faster through ortx_bgemm */
    if ((taps(p) == 1 && p->stride_height == 1 && p->stride_width == 1) || cin_g < 8) return 0;
    ortx_conv_direct_geometry g = geometry(original);
    double computed = (double)ortx_round_up(virtual_pixels(p, &g), ORTX_GEMM_NR) * 2 * channel_pairs(p);
    double needed = (double)p->out_height * p->out_width * cin_g;
    return computed <= 1.35 * needed;
}

int ortx_conv_direct_bf16_blocked_applies(const ortx_conv_params *p) {
    return p->group == 1 && use_tiles() && !ortx_conv_rows_bf16_applies(p) && ortx_conv_direct_bf16_applies(p);
}

int64_t ortx_conv_direct_bf16_floats(const ortx_conv_params *original) {
    const ortx_conv_params q = effective(original), *p = &q;
    ortx_conv_direct_geometry g = geometry(original);
    return ortx_round_up(plane_pairs(p) * g.channel_floats + slack_words(), 16) +
           ortx_round_up(channel_pairs(p) * taps(p), 16) + window_bytes(original) / (int64_t)sizeof(float);
}

int64_t ortx_conv_direct_bf16_elements(const ortx_conv_params *original) {
    const ortx_conv_params q = effective(original), *p = &q;
    return ortx_round_up(p->out_channels / p->group, ORTX_BGEMM_MR) * channel_pairs(p) * taps(p) * 2;
}

static inline int64_t weight_index(int64_t pairs, int64_t area, int64_t m, int64_t c, int64_t tap) {
    int64_t q = c / 2 * area + tap;
    return m / ORTX_BGEMM_MR * pairs * ORTX_BGEMM_MR * 2 + (q * ORTX_BGEMM_MR + m % ORTX_BGEMM_MR) * 2 + c % 2;
}

int64_t ortx_conv_direct_weight_index(const ortx_conv_params *p, int64_t m, int64_t c, int64_t tap) {
    return weight_index(channel_pairs(p) * taps(p), taps(p), m, c, tap);
}

/* The AMX form's weights: per 16-row panel, tile (chunk, tap) of 16 pairs x 16 rows (a B tile). */
static int64_t tiles_panel_elements(const ortx_conv_params *p) {
    return taps(p) * tile_chunks(p) * ORTX_BGEMM_TILE_ROWS * ORTX_BGEMM_TILE_PAIRS * 2;
}

int64_t ortx_conv_direct_bf16_packed_elements(const ortx_conv_params *original) {
    if (!use_tiles()) return ortx_conv_direct_bf16_elements(original);
    const ortx_conv_params q = effective(original), *p = &q;
    return ortx_round_up(p->out_channels / p->group, ORTX_BGEMM_TILE_ROWS) / ORTX_BGEMM_TILE_ROWS *
           tiles_panel_elements(p);
}

int64_t ortx_conv_direct_bf16_packed_index(const ortx_conv_params *original, int64_t m, int64_t c, int64_t tap) {
    const ortx_conv_params q = effective(original), *p = &q;
    if (unfolds_x(original)) {  /* channel c at tap (ky, kx) is unfolded channel kx * Cin + c at tap ky */
        c = tap % original->kernel_width * original->in_channels + c;
        tap /= original->kernel_width;
    }
    if (!use_tiles()) return ortx_conv_direct_weight_index(p, m, c, tap);
    const int64_t rows = ORTX_BGEMM_TILE_ROWS, pairs = ORTX_BGEMM_TILE_PAIRS, pair = c / 2;
    return m / rows * tiles_panel_elements(p) + ((pair / pairs * taps(p) + tap) * pairs + pair % pairs) * rows * 2 +
           m % rows * 2 + c % 2;
}

void ortx_conv_direct_pack_bf16(const ortx_conv_params *p, const float *weights, uint16_t *dst) {
    int64_t cout_g = p->out_channels / p->group, cin_g = p->in_channels / p->group, area = taps(p);
    int64_t each = ortx_conv_direct_bf16_packed_elements(p);
    memset(dst, 0, p->group * each * sizeof(uint16_t));
    for (int64_t g = 0; g < p->group; g++)
        for (int64_t m = 0; m < cout_g; m++)
            for (int64_t c = 0; c < cin_g; c++)
                for (int64_t tap = 0; tap < area; tap++)
                    dst[g * each + ortx_conv_direct_bf16_packed_index(p, m, c, tap)] =
                        ortx_bf16_from_float(weights[((g * cout_g + m) * cin_g + c) * area + tap]);
}

typedef struct direct_job {
    const ortx_conv_params *params;
    ortx_conv_direct_geometry geometry;
    const ortx_bgemm_isa *isa;
    const float *x;
    uint32_t *planes;
    const int32_t *offsets;
    const uint16_t *weights;
    float *y;
    const ortx_gemm_epilogue *epilogue;
    int used_phase[64];  /* [qy * sw + qx], strides up to 8 */
    int64_t pixels, tiles, row_groups, panels_per_group;
    int group_major;  /* the AMX form: unit u is row group u / tiles, tile u % tiles */
    const ortx_conv_params *unfolded;    /* not NULL: params is this conv's x-unfolded form (unfolds_x) */
    const ortx_conv_params *transposed;  /* not NULL: step 3 scatters into this ConvTranspose's output */
    float *scratch;                      /* per thread, MR x TILE_PIXELS (transposed only) */
    int layout;                          /* ORTX_DIRECT_* bits (the AMX form) */
    /* x-unfolded: value j of a position reads channel unfold_channel[j] at column ox * sw + unfold_shift[j]
     * (computed once: per row they cost divisions); columns [unfold_lo, unfold_hi) read inside the row */
    int64_t unfold_channel[2 * ORTX_BGEMM_TILE_PAIRS], unfold_shift[2 * ORTX_BGEMM_TILE_PAIRS];
    int64_t unfold_lo, unfold_hi;
    /* the AMX form's A planes: virtual pixel v of tap t of chunk h at a_planes + h * chunk_bytes + (offsets[t] + v)
     * * position_bytes (the chunk planes, or the windowed form's rows: windows) */
    const uint8_t *a_planes;
    int64_t chunk_bytes, position_bytes;
    uint16_t *windows;  /* the windowed form's rows (windowed) */
    int *special;       /* set when a windowed row read an infinity or a NaN */
} direct_job;

/* Columns [lo, hi) of a phase row `width` wide whose input column j * sw + shift lies in [0, W). */
static void input_columns(int64_t shift, int64_t sw, int64_t W, int64_t width, int64_t *lo, int64_t *hi) {
    int64_t first = (-shift + sw - 1) / sw, last = W - 1 - shift;
    *lo = first < 0 ? 0 : min64(first, width);
    *hi = last < 0 ? 0 : min64(last / sw + 1, width);
    if (*hi < *lo) *hi = *lo;
}

/* One row of an x-unfolded conv's channel-pair plane (the vdpbf16ps form): word ox holds unfolded values 2cp and
 * 2cp + 1, value j = kx * Cin + c being X[c][iy][ox * sw + kx * dw - pad_left] (0 outside the row or past the
 * values). The columns where both read inside the row go through isa->pair_run_strided, the few at the edges one
 * value at a time. */
static void fill_unfolded_pair_row(const direct_job *job, int64_t cp, int64_t iy, uint32_t *out) {
    const ortx_conv_params *o = job->unfolded;
    const int64_t H = o->in_height, W = o->in_width, KW = o->kernel_width, OW = o->out_width;
    const int64_t sw = o->stride_width, dw = o->dilation_width, values = o->in_channels * KW;
    int64_t shift[2] = {0, 0}, lo = 0, hi = OW;
    const float *row[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        int64_t j = 2 * cp + k, first, end;
        if (j >= values) continue;
        shift[k] = j / o->in_channels * dw - o->pad_left;
        input_columns(shift[k], sw, W, OW, &first, &end);
        lo = first > lo ? first : lo;
        hi = end < hi ? end : hi;
        row[k] = job->x + (j % o->in_channels * H + iy) * W;
    }
    if (hi < lo) hi = lo;
    if (hi > lo)
        job->isa->pair_run_strided(row[0] + lo * sw + shift[0], row[1] ? row[1] + lo * sw + shift[1] : NULL, hi - lo,
                                   sw, (uint16_t *)(out + lo));
    for (int64_t ox = 0; ox < OW; ox++) {
        if (ox == lo && hi > lo) {  /* pair_run_strided's */
            ox = hi - 1;
            continue;
        }
        uint16_t half[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            int64_t ix = ox * sw + shift[k];
            if (row[k] && ix >= 0 && ix < W) half[k] = ortx_bf16_from_float(row[k][ix]);
        }
        out[ox] = (uint32_t)half[0] | (uint32_t)half[1] << 16;
    }
}

/* Step 1 for channel pairs [begin, end). */
static void fill_pairs(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const direct_job *job = context;
    const ortx_conv_params *p = job->params;
    const ortx_conv_direct_geometry *g = &job->geometry;
    const int64_t H = p->in_height, W = p->in_width, cin_g = p->in_channels / p->group, NR = ORTX_GEMM_NR;
    const int64_t sh = p->stride_height, sw = p->stride_width, width = g->phase_width;
    if (job->unfolded) {  /* one phase in x (stride 1, no padding): the unfolding took both */
        for (int64_t cp = begin; cp < end; cp++)
            for (int64_t qy = 0; qy < sh; qy++) {
                if (!job->used_phase[qy * sw]) continue;
                uint32_t *phase = job->planes + cp * g->channel_floats + qy * sw * g->phase_rows * width;
                for (int64_t r = 0; r < g->phase_rows; r++) {
                    int64_t iy = r * sh + qy - p->pad_top;
                    if (iy < 0 || iy >= H)
                        memset(phase + r * width, 0, width * sizeof(uint32_t));
                    else
                        fill_unfolded_pair_row(job, cp, iy, phase + r * width);
                }
            }
        return;
    }
    for (int64_t cp = begin; cp < end; cp++) {
        const float *first = job->x + 2 * cp * H * W;
        const float *second = 2 * cp + 1 < cin_g ? first + H * W : NULL;
        for (int64_t qy = 0; qy < sh; qy++)
            for (int64_t qx = 0; qx < sw; qx++) {
                if (!job->used_phase[qy * sw + qx]) continue;
                uint32_t *phase = job->planes + cp * g->channel_floats + (qy * sw + qx) * g->phase_rows * width;
                for (int64_t r = 0; r < g->phase_rows; r++) {
                    uint32_t *out = phase + r * width;
                    int64_t iy = r * sh + qy - p->pad_top;
                    if (iy < 0 || iy >= H) {
                        memset(out, 0, width * sizeof(uint32_t));
                        continue;
                    }
                    int64_t lo, hi;  /* columns [lo, hi) read the input; the rest is zero */
                    input_columns(qx - p->pad_left, sw, W, width, &lo, &hi);
                    const float *row_first = first + iy * W, *row_second = second ? second + iy * W : NULL;
                    if (sw == 1 && hi > lo) {  /* the row's input columns in one run */
                        int64_t ix0 = lo + qx - p->pad_left;
                        job->isa->pair_run(row_first + ix0, second ? row_second + ix0 : NULL, hi - lo,
                                           (uint16_t *)(out + lo), 2 * NR, 0);
                    }
                    if (sw != 1 && hi > lo) {  /* a strided phase: every sw-th input column */
                        int64_t ix0 = lo * sw + qx - p->pad_left;
                        job->isa->pair_run_strided(row_first + ix0, second ? row_second + ix0 : NULL, hi - lo, sw,
                                                   (uint16_t *)(out + lo));
                    }
                    memset(out, 0, lo * sizeof(uint32_t));
                    memset(out + hi, 0, (width - hi) * sizeof(uint32_t));
                }
            }
    }
}

/* One row of an x-unfolded conv's chunk plane (one chunk: at most 32 values): position ox, value j = kx * Cin + c
 * is X[c][iy][ox * sw + kx * dw - pad_left] (0 outside the input or past the channels). The positions where every
 * tap reads inside the row go through isa->chunk_run (strided reads), the few at the edges one value at a time. */
static void fill_unfolded_row(const direct_job *job, int64_t iy, uint32_t *out) {
    const ortx_conv_params *o = job->unfolded;
    const int64_t H = o->in_height, W = o->in_width, OW = o->out_width, sw = o->stride_width;
    const int64_t values = o->in_channels * o->kernel_width, lo = job->unfold_lo, hi = job->unfold_hi;
    const float *channels[2 * ORTX_BGEMM_TILE_PAIRS];
    for (int64_t j = 0; j < 2 * ORTX_BGEMM_TILE_PAIRS; j++)
        channels[j] = j < values ? job->x + (job->unfold_channel[j] * H + iy) * W + lo * sw + job->unfold_shift[j]
                                 : NULL;
    if (hi > lo) job->isa->chunk_run(channels, sw, hi - lo, out + lo * CHUNK_WORDS);
    for (int64_t ox = 0; ox < OW; ox++) {
        if (ox == lo && hi > lo) {  /* chunk_run's */
            ox = hi - 1;
            continue;
        }
        for (int64_t pair = 0; pair < ORTX_BGEMM_TILE_PAIRS; pair++) {
            uint16_t half[2] = {0, 0};
            for (int64_t k = 0; k < 2; k++) {
                int64_t j = 2 * pair + k, ix = j < values ? ox * sw + job->unfold_shift[j] : -1;
                if (ix >= 0 && ix < W) half[k] = ortx_bf16_from_float(job->x[(job->unfold_channel[j] * H + iy) * W + ix]);
            }
            out[ox * CHUNK_WORDS + pair] = (uint32_t)half[0] | (uint32_t)half[1] << 16;
        }
    }
}

/* The x-unfolded conv's per-value channels and column shifts, and the columns every tap reads inside the row. */
static void plan_unfolding(direct_job *job) {
    const ortx_conv_params *o = job->unfolded;
    const int64_t W = o->in_width, KW = o->kernel_width, OW = o->out_width, sw = o->stride_width;
    const int64_t dw = o->dilation_width;
    int64_t lo = 0, hi = OW;
    for (int64_t kx = 0; kx < KW; kx++) {  /* ox whose every tap kx reads inside the row */
        int64_t first, end;
        input_columns(kx * dw - o->pad_left, sw, W, OW, &first, &end);
        lo = first > lo ? first : lo;
        hi = end < hi ? end : hi;
    }
    job->unfold_lo = lo;
    job->unfold_hi = hi < lo ? lo : hi;
    for (int64_t j = 0; j < 2 * ORTX_BGEMM_TILE_PAIRS; j++) {
        job->unfold_channel[j] = j % o->in_channels;
        job->unfold_shift[j] = j / o->in_channels * dw - o->pad_left;
    }
}

/* Step 1 of the AMX form for units [begin, end): unit u is row u / (chunks * phases), chunk and phase the rest;
 * each fills one row of one phase of a chunk plane (16 words per position). Row-major, so a thread's share of the
 * units (a contiguous range, kernels/threadpool.c) is the band of rows its tile-major steps then read, from its
 * own L2: chunk-major, half of every thread's A tiles came from the other core's (in-process A/B, 2 threads:
 * ResNet-18's 3 -> 64 7x7/2 stem 0.925x, its 64 -> 64 3x3 conv at 56x56 0.943x, the bf16 model 0.985x). */
static void fill_chunks(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const direct_job *job = context;
    const ortx_conv_params *p = job->params;
    const ortx_conv_direct_geometry *g = &job->geometry;
    const int64_t H = p->in_height, W = p->in_width, cin_g = p->in_channels / p->group;
    const int64_t sh = p->stride_height, sw = p->stride_width, width = g->phase_width, rows = g->phase_rows;
    const int64_t chunks = tile_chunks(p);
    for (int64_t unit = begin; unit < end; unit++) {
        const int64_t r = unit / (chunks * sh * sw), h = unit / (sh * sw) % chunks, phase = unit % (sh * sw);
        const int64_t qy = phase / sw, qx = phase % sw;
        if (!job->used_phase[phase]) continue;
        uint32_t *out = job->planes + (h * g->channel_floats + phase * rows * width + r * width) * CHUNK_WORDS;
        const int64_t iy = r * sh + qy - p->pad_top;
        if (iy < 0 || iy >= H) {
            memset(out, 0, width * CHUNK_WORDS * sizeof(uint32_t));
            continue;
        }
        if (job->unfolded) {
            fill_unfolded_row(job, iy, out);
            continue;
        }
        int64_t lo, hi;  /* columns [lo, hi) read the input; the rest is zero */
        input_columns(qx - p->pad_left, sw, W, width, &lo, &hi);
        if (job->layout & ORTX_DIRECT_X_PAIR_ROWS) {  /* chunk h's pixels are the positions, as they lie */
            const int64_t column = lo * sw + qx - p->pad_left;
            const uint16_t *src = (const uint16_t *)job->x + ((h * H + iy) * W + column) * 32;
            memset(out, 0, lo * CHUNK_WORDS * sizeof(uint32_t));
            if (sw == 1)
                memcpy(out + lo * CHUNK_WORDS, src, (hi - lo) * CHUNK_WORDS * sizeof(uint32_t));
            else
                for (int64_t k = 0; k < hi - lo; k++)
                    memcpy(out + (lo + k) * CHUNK_WORDS, src + k * sw * 32, CHUNK_WORDS * sizeof(uint32_t));
            memset(out + hi * CHUNK_WORDS, 0, (width - hi) * CHUNK_WORDS * sizeof(uint32_t));
            continue;
        }
        if (job->layout & ORTX_DIRECT_X_BLOCKED) {  /* blocks 2h and 2h + 1 hold the chunk's 32 channels */
            const int64_t first = 2 * ORTX_BGEMM_TILE_PAIRS * h, column = lo * sw + qx - p->pad_left;
            const float *even = job->x + ((2 * h * H + iy) * W + column) * 16;
            const int64_t rest = cin_g - first - 16;
            memset(out, 0, lo * CHUNK_WORDS * sizeof(uint32_t));
            if (hi > lo)
                job->isa->chunk_run_blocked(even, rest > 0 ? even + H * W * 16 : NULL, sw * 16, hi - lo,
                                            (int)min64(cin_g - first, 16), (int)min64(rest > 0 ? rest : 0, 16),
                                            out + lo * CHUNK_WORDS);
            memset(out + hi * CHUNK_WORDS, 0, (width - hi) * CHUNK_WORDS * sizeof(uint32_t));
            continue;
        }
        const float *channels[2 * ORTX_BGEMM_TILE_PAIRS];
        for (int64_t j = 0; j < 2 * ORTX_BGEMM_TILE_PAIRS; j++) {
            int64_t channel = 2 * ORTX_BGEMM_TILE_PAIRS * h + j;
            channels[j] = channel < cin_g ? job->x + (channel * H + iy) * W + lo * sw + qx - p->pad_left : NULL;
        }
        memset(out, 0, lo * CHUNK_WORDS * sizeof(uint32_t));
        if (hi > lo) job->isa->chunk_run(channels, sw, hi - lo, out + lo * CHUNK_WORDS);
        memset(out + hi * CHUNK_WORDS, 0, (width - hi) * CHUNK_WORDS * sizeof(uint32_t));
    }
}

/* Step 1 of the windowed form for units [begin, end): unit u is row u / sh of phase u % sh, the padded input row
 * r * sh + qy - pad_top, pixel-major (pixel_row), zeros outside the input. */
static void fill_windows(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const direct_job *job = context;
    const ortx_conv_params *o = job->unfolded, *p = job->params;
    const ortx_conv_direct_geometry *g = &job->geometry;
    const int64_t Cin = o->in_channels, H = o->in_height, W = o->in_width, sh = p->stride_height;
    const int64_t row_values = g->phase_width * o->stride_width * Cin, left = o->pad_left * Cin;
    for (int64_t unit = begin; unit < end; unit++) {
        const int64_t r = unit / sh, qy = unit % sh, iy = r * sh + qy - p->pad_top;
        if (!job->used_phase[qy]) continue;
        uint16_t *out = job->windows + (qy * g->phase_rows + r) * row_values;
        if (iy < 0 || iy >= H) {
            memset(out, 0, row_values * sizeof(uint16_t));
            continue;
        }
        memset(out, 0, left * sizeof(uint16_t));
        if (job->isa->pixel_row(job->x + iy * W, H * W, Cin, W, out + left))
            __atomic_store_n(job->special, 1, __ATOMIC_RELAXED);
        memset(out + left + W * Cin, 0, (row_values - left - W * Cin) * sizeof(uint16_t));
    }
}

/* The windowed form's rows as chunk planes (an infinite or NaN input): each position's window, zeros past its
 * Cin x KW values. Units as fill_windows's. */
static void copy_windows(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const direct_job *job = context;
    const ortx_conv_params *o = job->unfolded, *p = job->params;
    const ortx_conv_direct_geometry *g = &job->geometry;
    const int64_t Cin = o->in_channels, values = Cin * o->kernel_width, sh = p->stride_height;
    const int64_t width = g->phase_width, step = o->stride_width * Cin, row_values = width * step;
    for (int64_t unit = begin; unit < end; unit++) {
        const int64_t r = unit / sh, qy = unit % sh, row = qy * g->phase_rows + r;
        if (!job->used_phase[qy]) continue;
        const uint16_t *windows = job->windows + row * row_values;
        uint16_t *out = (uint16_t *)(job->planes + row * width * CHUNK_WORDS);
        for (int64_t ox = 0; ox < width; ox++) {
            memcpy(out + 2 * CHUNK_WORDS * ox, windows + ox * step, values * sizeof(uint16_t));
            memset(out + 2 * CHUNK_WORDS * ox + values, 0, (2 * CHUNK_WORDS - values) * sizeof(uint16_t));
        }
    }
}

/* The transposed form's step 3: rows [row0, row0 + rows) of the tile at c (row stride TILE_PIXELS), pixels
 * [n0, n0 + count), to ConvTranspose output element (co, iy*KH + ky, ix*KW + kx) of row m = (co, ky, kx) and pixel
 * (iy, ix), with bias, residual and activation. */
static void scatter_tile(const direct_job *job, const float *c, int64_t rows, int64_t row0, int64_t n0,
                         int64_t count) {
    const ortx_conv_params *t = job->transposed;
    const ortx_gemm_epilogue *e = job->epilogue;
    const int64_t W = t->in_width, KW = t->kernel_width, area = t->kernel_height * KW, OW = t->out_width;
    if (KW == 2 && !e->residual && e->activation == ORTX_ACT_NONE) {  /* rows (kx 0, kx 1) interleaved, by runs */
        for (int64_t i = 0; i + 1 < rows; i += 2) {
            int64_t m = row0 + i, co = m / area, ky = m % area / KW;
            float bias = e->bias_row ? e->bias_row[co] : 0.0f;
            const float *even = c + i * TILE_PIXELS, *odd = even + TILE_PIXELS;
            for (int64_t j = 0; j < count;) {
                int64_t iy = (n0 + j) / W, ix = (n0 + j) % W, run = W - ix < count - j ? W - ix : count - j;
                float *out = job->y + (co * t->out_height + iy * t->kernel_height + ky) * OW + ix * 2;
                for (int64_t r = 0; r < run; r++) {
                    out[2 * r] = even[j + r] + bias;
                    out[2 * r + 1] = odd[j + r] + bias;
                }
                j += run;
            }
        }
        return;
    }
    for (int64_t i = 0; i < rows; i++) {
        int64_t m = row0 + i, co = m / area, ky = m % area / KW, kx = m % area % KW;
        int64_t iy = n0 / W, ix = n0 % W;
        float bias = e->bias_row ? e->bias_row[co] : 0.0f;
        for (int64_t j = 0; j < count; j++, ix++) {
            if (ix == W) iy++, ix = 0;
            int64_t at = (co * t->out_height + iy * t->kernel_height + ky) * OW + ix * KW + kx;
            float value = c[i * TILE_PIXELS + j] + bias;
            if (e->residual) value += e->residual[at];
            job->y[at] = ortx_activation_scalar(e->activation, value, e->param0, e->param1);
        }
    }
}

/* The vectors (1 or 2) of the tile at virtual pixel n0, each one's kept lanes and its first kept output: a vector's
 * lanes run along virtual rows, the first OW columns of each row kept (a segment per row the vector touches). */
static int tile_lanes(const direct_job *job, int64_t n0, uint32_t masks[2], int64_t at[2]) {
    const int64_t width = job->geometry.phase_width, OW = job->params->out_width, OH = job->params->out_height;
    int vectors = job->pixels - n0 > ORTX_GEMM_NR ? 2 : 1;
    masks[0] = masks[1] = 0;
    at[0] = at[1] = 0;
    for (int v = 0; v < vectors; v++) {
        const int64_t first = n0 + v * ORTX_GEMM_NR;
        int64_t row = first / width, column = first % width, found = 0;
        for (int64_t lane = 0; lane < ORTX_GEMM_NR && row < OH; row++, column = 0) {
            const int64_t run = min64(ORTX_GEMM_NR - lane, width - column);
            const int64_t kept = OW > column ? min64(run, OW - column) : 0;
            if (kept) {
                masks[v] |= (uint32_t)((1u << kept) - 1u) << lane;
                if (!found) at[v] = row * OW + column;
                found = 1;
            }
            lane += run;
        }
    }
    return vectors;
}

/* Steps 2-3 for units [begin, end): unit u is tile u / row_groups, row group u % row_groups. */
static void run_units(void *context, int64_t begin, int64_t end, int thread) {
    const direct_job *job = context;
    const ortx_conv_params *p = job->params;
    const int64_t N = p->out_height * p->out_width;
    const int64_t cout_g = p->out_channels / p->group, pairs = channel_pairs(p) * taps(p);
    const ortx_gemm_epilogue identity = {.alpha = 1.0f};
    float *scratch = job->scratch + thread * ORTX_BGEMM_MR * TILE_PIXELS;
    for (int64_t unit = begin; unit < end; unit++) {
        int64_t n0 = unit / job->row_groups * TILE_PIXELS, group = unit % job->row_groups;
        uint32_t masks[2];
        int64_t at[2];
        int vectors = tile_lanes(job, n0, masks, at);
        int64_t panel_end = min64((group + 1) * job->panels_per_group * ORTX_BGEMM_MR, cout_g);
        for (int64_t row0 = group * job->panels_per_group * ORTX_BGEMM_MR; row0 < panel_end; row0 += ORTX_BGEMM_MR) {
            /* the last panel of a tile fetches the next tile's words: the planes' rows are too many streams for the
             * hardware prefetcher (PP-OCR det's 96-channel 160x160 3x3 conv, 1 thread: 8.5 -> 6.1 ms) */
            int last = row0 + ORTX_BGEMM_MR >= panel_end && group == job->row_groups - 1;
            int64_t rows = min64(ORTX_BGEMM_MR, cout_g - row0), prefetch = last ? TILE_PIXELS : 0;
            const uint16_t *a = job->weights + row0 * pairs * 2;
            if (!job->transposed) {
                job->isa->direct_tile(pairs, a, job->planes + n0, job->offsets, vectors, masks, at,
                                      job->y + row0 * N, N, rows, job->epilogue, row0, prefetch);
                continue;
            }
            int64_t stored[2] = {0, ORTX_GEMM_NR};  /* a 1x1 stride-1 "conv": every lane is kept */
            job->isa->direct_tile(pairs, a, job->planes + n0, job->offsets, vectors, masks, stored, scratch,
                                  TILE_PIXELS, rows, &identity, row0, prefetch);
            scatter_tile(job, scratch, rows, row0, n0, min64(TILE_PIXELS, job->pixels - n0));
        }
    }
}

/* The AMX form's steps 2-3 for units [begin, end): 32 rows (two 16-row panels) at a time. Group-major units (the
 * weights outweigh the planes) read each group's weights from memory once and from L2 for the group's other tiles,
 * and give each thread its own rows: tile-major units on few tiles streamed all the weights per tile and thread
 * (ResNet's 512 @7x7: 4.7 MB of weights for 2 tiles). */
static void run_tile_units(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const direct_job *job = context;
    const ortx_conv_params *p = job->params;
    const int64_t N = p->out_height * p->out_width, cout_g = p->out_channels / p->group;
    const int64_t rows_per_group = job->panels_per_group * ORTX_BGEMM_TILE_ROWS, panel = tiles_panel_elements(p);
    ortx_tile_state saved;
    ortx_bf16_direct_pending pending;  /* each step's store runs during the next one's products */
    pending.valid = 0;
    pending.blocked = (job->layout & ORTX_DIRECT_Y_BLOCKED) != 0;
    pending.pair_rows = (job->layout & ORTX_DIRECT_Y_PAIR_ROWS) != 0;
    pending.residual_pair_rows = (job->layout & ORTX_DIRECT_RESIDUAL_PAIR_ROWS) != 0;
    job->isa->tiles_begin(&saved);
    for (int64_t unit = begin; unit < end; unit++) {
        int64_t n0 = unit / job->row_groups * TILE_PIXELS, group = unit % job->row_groups;
        if (job->group_major) n0 = unit % job->tiles * TILE_PIXELS, group = unit / job->tiles;
        uint32_t masks[2];
        int64_t at[2];
        int vectors = tile_lanes(job, n0, masks, at);
        int64_t row_end = min64((group + 1) * rows_per_group, cout_g);
        for (int64_t row0 = group * rows_per_group; row0 < row_end; row0 += 2 * ORTX_BGEMM_TILE_ROWS)
            job->isa->direct_tiles(taps(p), tile_chunks(p), job->weights + row0 / ORTX_BGEMM_TILE_ROWS * panel, panel,
                                   job->a_planes + n0 * job->position_bytes, job->offsets, job->chunk_bytes,
                                   job->position_bytes, vectors, masks, at,
                                   pending.pair_rows ? (float *)((uint16_t *)job->y + row0 * N) : job->y + row0 * N,
                                   N, min64(2 * ORTX_BGEMM_TILE_ROWS, row_end - row0),
                                   job->epilogue, row0, &pending);
    }
    job->isa->direct_finish(&pending);
    job->isa->tiles_end(&saved);
}

void ortx_conv_direct_bf16(const ortx_conv_params *original, const float *x, const uint16_t *weights, float *y,
                           const ortx_gemm_epilogue *epilogue, float *workspace, int threads,
                           const ortx_conv_params *transposed, int layout) {
    const ortx_conv_params q = effective(original), *p = &q;
    int special = 0;
    direct_job job = {.layout = layout, .params = p, .unfolded = unfolds_x(original) ? original : NULL,
                      .geometry = geometry(original), .isa = ortx_bgemm_select_isa(), .x = x,
                      .planes = (uint32_t *)workspace, .weights = weights, .y = y, .epilogue = epilogue,
                      .transposed = transposed, .scratch = workspace + ortx_conv_direct_bf16_floats(original),
                      .special = &special};
    const ortx_conv_direct_geometry *g = &job.geometry;
    const int64_t sh = p->stride_height, sw = p->stride_width, area = taps(p), cps = channel_pairs(p);
    const int tiles = !transposed && job.isa->a_tiles;
    int32_t *offsets = (int32_t *)(workspace + ortx_round_up(plane_pairs(p) * g->channel_floats + slack_words(), 16));
    memset(job.used_phase, 0, sizeof(job.used_phase));
    if (job.unfolded) plan_unfolding(&job);
    for (int64_t q = 0; q < (tiles ? area : cps * area); q++) {  /* the AMX form: one offset per tap */
        int64_t tap = q % area, dy = tap / p->kernel_width * p->dilation_height;
        int64_t dx = tap % p->kernel_width * p->dilation_width;
        int64_t phase = dy % sh * sw + dx % sw;
        job.used_phase[phase] = 1;
        offsets[q] = (int32_t)(q / area * g->channel_floats + (phase * g->phase_rows + dy / sh) * g->phase_width +
                               dx / sw);
    }
    job.offsets = offsets;
    /* past the planes (and, on the vdpbf16ps form, nothing else: its pairs are exactly the channel pairs) */
    memset(job.planes + plane_pairs(p) * g->channel_floats, 0, slack_words() * sizeof(uint32_t));
    /* below ~2M multiply-adds one thread (ortx_sgemm's bound until it was measured lower for fp32 GEMMs) */
    int64_t cout_g = p->out_channels / p->group;
    if ((double)cout_g * p->out_height * p->out_width * cps * 2 * area < 128.0 * 128 * 128) threads = 1;
    job.a_planes = (const uint8_t *)job.planes;
    job.position_bytes = CHUNK_WORDS * sizeof(uint32_t);
    job.chunk_bytes = g->channel_floats * job.position_bytes;
    if (windowed(original)) {
        const int64_t position = original->stride_width * original->in_channels * 2;
        job.windows = (uint16_t *)(offsets + ortx_round_up(cps * area, 16));
        ortx_parallel_range(threads, sh * g->phase_rows, (int64_t)ORTX_TASKS_PER_THREAD * threads, fill_windows,
                            &job);
        memset((uint8_t *)job.windows + g->channel_floats * position, 0,
               window_bytes(original) - g->channel_floats * position);
        if (special)  /* the windows would carry it into other pixels' products: chunk planes instead */
            ortx_parallel_range(threads, sh * g->phase_rows, (int64_t)ORTX_TASKS_PER_THREAD * threads, copy_windows,
                                &job);
        else {
            job.a_planes = (const uint8_t *)job.windows;
            job.position_bytes = position;
            job.chunk_bytes = g->channel_floats * position;
        }
    } else if (tiles)
        ortx_parallel_range(threads, tile_chunks(p) * sh * sw * g->phase_rows, (int64_t)ORTX_TASKS_PER_THREAD * threads,
                            fill_chunks, &job);
    else
        ortx_parallel_range(threads, cps, (int64_t)ORTX_TASKS_PER_THREAD * threads, fill_pairs, &job);
    job.pixels = virtual_pixels(p, g);
    job.tiles = (job.pixels + TILE_PIXELS - 1) / TILE_PIXELS;
    int64_t panel_rows = tiles ? ORTX_BGEMM_TILE_ROWS : ORTX_BGEMM_MR;
    int64_t panels = ortx_round_up(cout_g, panel_rows) / panel_rows;
    /* row groups so that every thread has a few units when the tiles are few (small images, many channels) */
    int64_t groups = (2 * (int64_t)ORTX_TASKS_PER_THREAD * threads + job.tiles - 1) / job.tiles;
    groups = groups < 1 ? 1 : (groups > panels ? panels : groups);
    job.group_major = tiles && cout_g * channel_pairs(p) * area > plane_pairs(p) * g->channel_floats;
    if (job.group_major) groups = (panels + 1) / 2;  /* one 32-row step each: its weights stay in L2 */
    job.panels_per_group = (panels + groups - 1) / groups;
    /* a pair-rows output: every step two 16-row panels of one chunk (a chunk's half lines stored by two steps
     * would cost a read of each line, and the halves are rounded together) */
    if (layout & ORTX_DIRECT_Y_PAIR_ROWS) job.panels_per_group += job.panels_per_group & 1;
    job.row_groups = (panels + job.panels_per_group - 1) / job.panels_per_group;
    int64_t units = job.tiles * job.row_groups;
    /* the AMX form: 2 tasks a thread (each task's first step starts the deferred stores and its last ends them;
     * ResNet-18's 3x3 convs alone, 2 threads, against 4: 0.988-0.995, 16: 1.03-1.06) */
    ortx_parallel_range(threads, units, (int64_t)(tiles ? 2 : ORTX_TASKS_PER_THREAD) * threads,
                        tiles ? run_tile_units : run_units, &job);
}

/* ---------------------------------------------------------------------------------------------------------------
 * The portable tile: vdpbf16ps's additions with fp32 multiply-adds (products of bf16 values are exact), the packed
 * lanes stored raw, then the fp32 ISA's epilogue on the stored span (as the gemm's portable micro-kernel).
 * ------------------------------------------------------------------------------------------------------------- */

void ortx_bf16_direct_tile_portable(int64_t pairs, const uint16_t *a, const uint32_t *x, const int32_t *offsets,
                                    int vectors, const uint32_t *masks, const int64_t *at, float *c, int64_t ldc,
                                    int64_t rows, const ortx_gemm_epilogue *epilogue, int64_t row0,
                                    int64_t prefetch) {
    (void)prefetch;
    enum { MR = ORTX_BGEMM_MR, NR = ORTX_GEMM_NR };
    float acc[MR][2 * NR] = {{0}};
    for (int64_t q = 0; q < pairs; q++) {
        const uint32_t *words = x + offsets[q];
        const uint16_t *aq = a + q * MR * 2;
        for (int i = 0; i < MR; i++) {
            float a0 = ortx_bf16_to_float(aq[2 * i]), a1 = ortx_bf16_to_float(aq[2 * i + 1]);
            for (int j = 0; j < vectors * NR; j++) {
                float even = ortx_bf16_to_float((uint16_t)(words[j] & 0xffffu));
                float odd = ortx_bf16_to_float((uint16_t)(words[j] >> 16));
                float sum = acc[i][j] + a1 * odd;
                acc[i][j] = sum + a0 * even;
            }
        }
    }
    for (int v = 0; v < vectors; v++) {
        int64_t count = 0;
        for (int64_t i = 0; i < rows; i++) {
            count = 0;
            for (int lane = 0; lane < NR; lane++)
                if (masks[v] >> lane & 1u) c[i * ldc + at[v] + count++] = acc[i][v * NR + lane];
        }
        if (count) ortx_gemm_select_isa()->epilogue(c + at[v], ldc, rows, count, row0, at[v], epilogue);
    }
}
