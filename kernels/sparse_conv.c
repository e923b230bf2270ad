/* sparse_conv2d_f32: a group-1 conv whose weights (Cout x Cin*KH*KW) are blocked CSR in column panels (sparse.h).
 *   ints: the 20 conv ints of conv.h ([19] workspace threads), [20] block rows R (1 or 4), [21] panels, [22] column
 *   layout (sparse.h: 1 = Case shifted, the cols packed as shifted-plane rows).
 *   floats: activation param0, param1. buffers: X, values, cols, row_ptr, Y, workspace, bias, residual.
 * Per piece of work and panel, the row kernel runs output rows over the panel's rows of the patch matrix B
 * (Cin*KH*KW x OH*OW, one 64-pixel tile of columns at a time), storing into Y (partial sums, then the epilogue:
 * bias, residual laid out as Y, activation). B's rows are
 *   Case in place (1x1, stride 1, unpadded, OH*OW a multiple of 16): X as stored, every row 64-byte aligned;
 *   Case built (every other conv): copied per tile and panel into the thread's 64-byte aligned B rows, from the
 *   input split into zero-padded phase planes (phase_fill_row), in which every patch row is, per output row, one
 *   contiguous run, whatever the stride, dilation and padding (1x1 stride 1: X itself);
 *   Case shifted (layout 1: stride 1, rows 9-64 wide, planes within ORTX_SPARSE_SHIFTED_BYTES): no B rows; the row
 *   kernel reads the thread's shifted planes (sparse.h) directly, 64 computed columns of whole output rows per tile,
 *   into the thread's sums, which ortx_sparse_store writes to Y without the columns past OW.
 * Threads (one parallel call of `threads` lanes per image):
 *   1. the work is cut into pieces: Case tiles (at least TILES_PER_THREAD tiles per thread): a piece is one tile x
 *      every output row; Case rows (small maps, 7x7 and 14x14 at 2 threads): a piece is a chunk of output rows x
 *      every tile;
 *   2. the pieces are dealt out as `threads` contiguous segments; thread t runs segment t front to back, then takes
 *      pieces from the back of the other segments, so a late or preempted thread's share is still picked up;
 *   3. every thread writes only what it owns: its own copy of the phase planes, filled row by row as its pieces
 *      need them, its own B rows (Case rows: every tile's, built once and kept for its chunks) and its pieces'
 *      part of Y. In Case tiles segment t is the same band of output rows in every conv, so a conv reads mostly
 *      input rows the same thread wrote in the conv before.
 *   Why: with planes filled by both threads in one parallel call and read by both in the next (and the small maps'
 *   B built once and shared), every call moved those cache lines between the two cores, and the kernel scaled
 *   1.3-1.45x from 1 to 2 threads on the ResNet-18-style model at 90% zeros (BENCHMARKS.md, issue #9).
 * Limits: groups > 1 are not covered (the lowering keeps them dense); Case rows repeats the plane fill and B build
 * on every thread (at 1 thread perf puts them at ~7-12% of the 3x3 256@14 and 512@7 convs); a 64-pixel tile that is
 * not full still runs whole vectors up to its last pixel; Case shifted computes width - OW wasted columns per output
 * row (12.5% at 14, 28 and 56).
 */
#include <stdatomic.h>
#include <string.h>

#include "activation.h"
#include "conv.h"
#include "gemm.h"
#include "ortx_kernels.h"
#include "sparse.h"
#include "threadpool.h"

/* Case tiles needs this many tiles per thread; below it the pieces are row chunks (a 14x14 map's 4 tiles, one of 4
 * pixels, split 2 + 2 over 2 threads would leave one thread a quarter of a tile of work). */
#define TILES_PER_THREAD 4
/* The lanes of one call: ORTX_POOL_MAX_THREADS (threadpool.c). */
#define MAX_LANES 64

/* One segment of pieces [front, back) in one word: the owner takes the front, other threads the back. */
typedef struct piece_queue {
    _Alignas(64) _Atomic uint64_t range;  /* front | back << 32 */
} piece_queue;

typedef struct conv_job {
    const ortx_conv_params *p;
    const float *input;  /* one image */
    ortx_sparse_matrix w;
    float *output;       /* one image */
    const float *residual;
    ortx_sparse_epilogue epilogue;
    int64_t pixels, tiles, block_count, panel_width, threads, pieces;
    ortx_sparse_rows_fn rows;
    ortx_sparse_patch_fn patch;
    ortx_sparse_fill_fn fill;
    ortx_sparse_store_fn store;
    int64_t phase_rows, phase_width, phase_plane, plane_count;
    int64_t band, bands, per_tile;  /* Case shifted: output rows per band, bands, output rows per tile */
    const int32_t *taps;  /* per patch row k = (c, ky, kx): where its phase plane's (oy, ox) = (0, 0) sits */
    float *regions;       /* per thread: region_floats floats (thread_region) */
    int64_t region_floats;
    int in_place, pointwise, shifted, by_rows;
    piece_queue queues[MAX_LANES];
} conv_job;

/* A thread's own part of the workspace. */
typedef struct thread_region {
    float *planes;       /* its copy of the phase planes (Case built, not pointwise) */
    unsigned char *filled;  /* per phase row: filled in this call (Case shifted: of band *band) */
    int64_t *band;       /* Case shifted: the band its planes hold, -1 for none */
    float *b;            /* Case tiles: one panel's rows of one tile; Case rows: every tile's K rows, tile after tile */
    float *sums;         /* Case shifted: per output row, its 64 columns of the tile */
    unsigned char *built;   /* Case rows: every tile's B rows built in this call (by the thread's first piece) */
} thread_region;

static int conv_pointwise(const ortx_conv_params *p) {
    return p->kernel_height == 1 && p->kernel_width == 1 && p->stride_height == 1 && p->stride_width == 1 &&
           p->pad_top == 0 && p->pad_left == 0 && p->out_height == p->in_height && p->out_width == p->in_width;
}

/* Case in place: X's rows are B's and 64-byte aligned whenever X is (unaligned rows cost ~1.4x, sparse_avx512.c). */
static int conv_in_place(const ortx_conv_params *p) {
    return conv_pointwise(p) && p->out_height * p->out_width % 16 == 0;
}

static int conv_threads(const ortx_conv_params *p, int num_threads) {
    int threads = num_threads < 1 ? 1 : num_threads;
    int limit = p->workspace_threads < 1 ? 1 : (int)p->workspace_threads;
    threads = threads < limit ? threads : limit;
    return threads < MAX_LANES ? threads : MAX_LANES;
}

/* The planes and tiles of a conv: Case shifted (ortx_sparse_conv_shifted and the lowering packed its layout) has
 * kernel_width x channels planes of width ortx_sparse_shifted_width and tiles of 64 computed columns of whole output
 * rows; the phase planes are channels x stride phases of the padded map, tiles of 64 output pixels. */
static void conv_geometry(const ortx_conv_params *p, int shifted, conv_job *job) {
    job->shifted = shifted;
    job->pointwise = conv_pointwise(p);
    job->in_place = conv_in_place(p);
    job->pixels = p->out_height * p->out_width;
    job->w.depth = p->in_channels * p->kernel_height * p->kernel_width;
    if (shifted) {
        job->phase_rows = ortx_sparse_shifted_rows(p);
        job->phase_width = ortx_sparse_shifted_width(p);
        job->plane_count = p->kernel_width * p->in_channels;
        job->band = ortx_sparse_shifted_band(p);
        job->bands = (p->out_height + job->band - 1) / job->band;
        job->per_tile = ORTX_SPARSE_TILE / job->phase_width;
    } else if (job->pointwise) {
        job->phase_rows = p->out_height, job->phase_width = p->out_width, job->plane_count = 0;
    } else {
        job->phase_rows = p->out_height + (p->kernel_height - 1) * p->dilation_height / p->stride_height;
        job->phase_width = p->out_width + (p->kernel_width - 1) * p->dilation_width / p->stride_width;
        job->plane_count = p->in_channels * p->stride_height * p->stride_width;
    }
    job->phase_plane = job->phase_rows * job->phase_width;
    int64_t columns = shifted ? p->out_height * job->phase_width : job->pixels;
    job->tiles = (columns + ORTX_SPARSE_TILE - 1) / ORTX_SPARSE_TILE;
}

static int conv_by_rows(const conv_job *job, int threads) {
    return threads > 1 && job->tiles < (int64_t)TILES_PER_THREAD * threads;
}

static int64_t bytes_as_floats(int64_t bytes) { return ortx_round_up((bytes + 3) / 4, 16); }

/* The parts of one thread's region, in floats (each a multiple of 16: 64-byte aligned when the region is): its
 * planes, their filled flags, B rows (Case tiles: one panel of one tile; Case rows: every tile), the sums of Case
 * shifted (one tile of every output row), the built flag. */
static void region_parts(const conv_job *job, int by_rows, int64_t parts[5]) {
    int has_planes = !job->in_place && !job->pointwise;
    parts[0] = has_planes ? ortx_round_up(job->plane_count * job->phase_plane, 16) : 0;
    parts[1] = has_planes ? bytes_as_floats(job->phase_rows) + 16 : 0;  /* + the band slot */
    parts[2] = job->in_place || job->shifted ? 0
               : by_rows ? job->tiles * job->w.depth * ORTX_SPARSE_TILE : job->panel_width * ORTX_SPARSE_TILE;
    parts[3] = job->shifted && job->per_tile > 1 ? ortx_round_up(job->p->out_channels, 4) * ORTX_SPARSE_TILE : 0;
    parts[4] = by_rows && !job->in_place ? bytes_as_floats(1) : 0;
}

static int64_t region_floats(const conv_job *job, int by_rows) {
    int64_t parts[5];
    region_parts(job, by_rows, parts);
    return parts[0] + parts[1] + parts[2] + parts[3] + parts[4];
}

static thread_region region_of(const conv_job *job, int thread_index) {
    thread_region region = {0};
    int64_t parts[5];
    region_parts(job, job->by_rows, parts);
    float *at = job->regions + (int64_t)thread_index * job->region_floats;
    if (parts[0]) {
        region.planes = at, region.filled = (unsigned char *)(at + parts[0]);
        region.band = (int64_t *)(at + parts[0] + parts[1] - 16);
    }
    at += parts[0] + parts[1];
    if (parts[2]) region.b = at;
    at += parts[2];
    if (parts[3]) region.sums = at;
    at += parts[3];
    if (parts[4]) region.built = (unsigned char *)at;
    return region;
}

/* Workspace floats: [slack to the first 64-byte boundary][tap offsets (int32)][one region per thread]. */
#define ALIGN_SLACK 16

static int64_t taps_floats(int64_t depth) { return ortx_round_up(depth, 16); }

int64_t ortx_sparse_conv_workspace_bytes(const ortx_conv_params *p) {
    if (conv_in_place(p)) return 0;
    conv_job job = {.p = p};
    conv_geometry(p, ortx_sparse_conv_shifted(p), &job);
    job.w.panels = ortx_sparse_panel_count(job.w.depth);
    job.panel_width = ortx_sparse_panel_width(job.w.depth, job.w.panels);
    int64_t most = 0;
    for (int threads = 1; threads <= conv_threads(p, MAX_LANES); threads++) {
        int64_t floats = threads * region_floats(&job, conv_by_rows(&job, threads));
        most = floats > most ? floats : most;
    }
    return (int64_t)sizeof(float) * (ALIGN_SLACK + taps_floats(job.w.depth) + most);
}

/* Phase planes --------------------------------------------------------------------------------------------------
 * The zero-padded input P (P[y][x] = X[y - pad_top][x - pad_left], 0 outside) of each channel split into
 * stride_height x stride_width phases, phase (py, px) row a, column j holding P[a*sh + py][j*sw + px]. Tap
 * (ky, kx) of output pixel (oy, ox) reads P[oy*sh + ky*dh][ox*sw + kx*dw], i.e. phase ((ky*dh) % sh, (kx*dw) % sw)
 * at row oy + (ky*dh) / sh, column ox + (kx*dw) / sw: so every patch row is, per output row, one contiguous run of
 * one phase plane, whatever the stride, dilation and padding (stride 1: one phase, the padded plane itself). A 1x1
 * stride-1 unpadded conv reads X itself as its one plane per channel. */

static int64_t ceil_div_clamped(int64_t numerator, int64_t divisor, int64_t limit) {
    int64_t value = numerator <= 0 ? 0 : (numerator + divisor - 1) / divisor;
    return value < limit ? value : limit;
}

/* Does some tap land in phase `phase` of a dimension (kernel size, dilation, stride)? Unused phases stay unfilled. */
static int phase_used(int64_t phase, int64_t kernel, int64_t dilation, int64_t stride) {
    for (int64_t tap = 0; tap < kernel; tap++)
        if (tap * dilation % stride == phase) return 1;
    return 0;
}

/* Row `a` of every used phase plane of every channel, into `planes`. */
static void phase_fill_row(const conv_job *job, float *planes, int64_t a) {
    const ortx_conv_params *p = job->p;
    const int64_t sh = p->stride_height, sw = p->stride_width, width = job->phase_width;
    for (int64_t py = 0; py < sh; py++) {
        if (!phase_used(py, p->kernel_height, p->dilation_height, sh)) continue;
        int64_t iy = a * sh + py - p->pad_top;
        for (int64_t px = 0; px < sw; px++) {
            if (!phase_used(px, p->kernel_width, p->dilation_width, sw)) continue;
            /* columns [lo, hi) read input columns j*sw + px - pad_left inside [0, in_width) */
            int64_t lo = ceil_div_clamped(p->pad_left - px, sw, width);
            int64_t hi = ceil_div_clamped(p->in_width + p->pad_left - px, sw, width);
            if (hi < lo) hi = lo;
            if (iy < 0 || iy >= p->in_height) lo = hi = 0;
            ortx_sparse_fill fill = {p->in_channels, p->in_height * p->in_width, sw, lo, hi,
                                     sh * sw * job->phase_plane, width};
            const float *row = job->input + iy * p->in_width + px - p->pad_left;
            job->fill(lo < hi ? row : job->input, &fill, planes + (py * sw + px) * job->phase_plane + a * width);
        }
    }
}

/* Case shifted: row `a` of every shifted plane of band `band` (sparse.h), into `planes`. */
static void shifted_fill_row(const conv_job *job, float *planes, int64_t band, int64_t a) {
    const ortx_conv_params *p = job->p;
    const int64_t width = job->phase_width, iy = band * job->band + a - p->pad_top;
    for (int64_t kx = 0; kx < p->kernel_width; kx++) {
        int64_t shift = kx * p->dilation_width - p->pad_left;  /* column j reads input column j + shift */
        int64_t lo = shift < 0 ? -shift : 0, hi = p->in_width - shift < width ? p->in_width - shift : width;
        if (iy < 0 || iy >= p->in_height || hi <= lo) lo = hi = 0;
        ortx_sparse_fill fill = {p->in_channels, p->in_height * p->in_width, 1, lo, hi, job->phase_plane, width};
        const float *row = job->input + iy * p->in_width + shift;
        job->fill(lo < hi ? row : job->input, &fill, planes + (kx * p->in_channels * job->phase_rows + a) * width);
    }
}

/* Output rows [first, last] of tile `tile`. */
static void tile_output_rows(const conv_job *job, int64_t tile, int64_t *first, int64_t *last) {
    const int64_t columns = job->shifted ? job->phase_width : job->p->out_width;
    const int64_t total = job->shifted ? job->p->out_height * columns : job->pixels;
    int64_t p0 = tile * ORTX_SPARSE_TILE, p1 = p0 + ORTX_SPARSE_TILE < total ? p0 + ORTX_SPARSE_TILE : total;
    *first = p0 / columns;
    *last = (p1 - 1) / columns;
}

/* The plane rows tile `tile`'s patch rows read, filled into the thread's planes unless it filled them before
 * (Case shifted: rows of the tile's band; a tile of another band first empties the planes). */
static void fill_for_tile(const conv_job *job, const thread_region *region, int64_t tile) {
    if (!region->planes) return;
    const ortx_conv_params *p = job->p;
    int64_t first, last;
    tile_output_rows(job, tile, &first, &last);
    int64_t band = 0;
    if (job->shifted) {
        band = first / job->band;
        if (*region->band != band) {
            memset(region->filled, 0, (size_t)job->phase_rows);
            *region->band = band;
        }
        first -= band * job->band, last -= band * job->band;
    }
    last += job->shifted ? (p->kernel_height - 1) * p->dilation_height
                         : (p->kernel_height - 1) * p->dilation_height / p->stride_height;
    for (int64_t a = first; a <= last && a < job->phase_rows; a++) {
        if (region->filled[a]) continue;
        if (job->shifted) shifted_fill_row(job, region->planes, band, a);
        else phase_fill_row(job, region->planes, a);
        region->filled[a] = 1;
    }
}

/* The taps of channel 0 once (KH x KW), then every channel's as channel 0's + its planes' offset: the caller runs
 * this before the parallel call, so it must stay cheap (a division per k was 2% of a 3x3 512@7 conv at 1 thread). */
static void tap_offsets(const ortx_conv_params *p, const conv_job *job, int32_t *taps) {
    const int64_t sh = p->stride_height, sw = p->stride_width, taps_per_channel = p->kernel_height * p->kernel_width;
    for (int64_t k = 0; k < taps_per_channel; k++) {
        int64_t dy = k / p->kernel_width * p->dilation_height, dx = k % p->kernel_width * p->dilation_width;
        taps[k] = (int32_t)(((dy % sh) * sw + dx % sw) * job->phase_plane + dy / sh * job->phase_width + dx / sw);
    }
    const int64_t channel_step = sh * sw * job->phase_plane;
    for (int64_t channel = 1; channel < p->in_channels; channel++)
        for (int64_t k = 0; k < taps_per_channel; k++)
            taps[channel * taps_per_channel + k] = (int32_t)(taps[k] + channel * channel_step);
}

/* Patch-matrix rows [k_begin, k_end) of tile `tile` from `planes` into dst with row stride ldd: per row, one copy
 * per output row the tile's pixels cross (runs computed once). */
static void patch_block(const conv_job *job, const float *planes, int64_t k_begin, int64_t k_end, int64_t tile,
                        float *dst, int64_t ldd) {
    const int64_t out_width = job->p->out_width, p0 = tile * ORTX_SPARSE_TILE;
    const int64_t count = job->pixels - p0 < ORTX_SPARSE_TILE ? job->pixels - p0 : ORTX_SPARSE_TILE;
    int64_t runs = count / out_width + 2;
    int64_t run_source[runs], run_target[runs], run_length[runs];
    int64_t run_count = 0;
    for (int64_t pixel = p0; pixel < p0 + count; run_count++) {
        int64_t oy = pixel / out_width, ox = pixel % out_width;
        int64_t length = out_width - ox < p0 + count - pixel ? out_width - ox : p0 + count - pixel;
        run_source[run_count] = oy * job->phase_width + ox;
        run_target[run_count] = pixel - p0;
        run_length[run_count] = length;
        pixel += length;
    }
    ortx_sparse_runs view = {run_count, run_source, run_target, run_length};
    job->patch(planes, job->taps + k_begin, k_end - k_begin, &view, dst, ldd);
}

/* Pieces ---------------------------------------------------------------------------------------------------------- */

static void panel_rows(const conv_job *job, int64_t panel, int64_t *k0, int64_t *k1) {
    *k0 = panel * job->panel_width;
    *k1 = *k0 + job->panel_width < job->w.depth ? *k0 + job->panel_width : job->w.depth;
}

/* Block rows [begin, end) of tile `tile`, every panel, with B's rows at b (row k at b + k * ldb) per panel. */
static void run_rows(const conv_job *job, int64_t tile, int64_t panel, int64_t begin, int64_t end, const float *b,
                     int64_t ldb) {
    int64_t p0 = tile * ORTX_SPARSE_TILE, first_row = begin * job->w.block_rows;
    int64_t ncols = job->pixels - p0 < ORTX_SPARSE_TILE ? job->pixels - p0 : ORTX_SPARSE_TILE;
    ortx_sparse_epilogue epilogue = job->epilogue;
    epilogue.residual = job->residual ? job->residual + first_row * job->pixels + p0 : NULL;
    job->rows(&job->w, panel, begin, end, b, ldb, ncols, job->output + first_row * job->pixels + p0, job->pixels,
              &epilogue);
}

/* Case shifted: block rows [begin, end) of tile `tile` over one panel, B read from the thread's planes, into its
 * sums; after the last panel the sums go to Y (ortx_sparse_store). The row kernel applies bias and, without a
 * residual, the activation; with one the store adds it and then activates. */
static void shifted_rows(const conv_job *job, const thread_region *region, int64_t tile, int64_t panel,
                         int64_t begin, int64_t end) {
    const ortx_conv_params *p = job->p;
    const int64_t R = job->w.block_rows, first_row = begin * R, width = job->phase_width;
    int64_t p0 = tile * ORTX_SPARSE_TILE, columns = p->out_height * width;
    int64_t ncols = columns - p0 < ORTX_SPARSE_TILE ? columns - p0 : ORTX_SPARSE_TILE;
    ortx_sparse_epilogue epilogue = job->epilogue;
    const float *b = region->planes + (tile * job->per_tile) % job->band * width;  /* its rows in its band's planes */
    if (job->per_tile == 1) {  /* one output row per tile: its first OW columns straight into Y, epilogue and all */
        int64_t offset = first_row * job->pixels + tile * p->out_width;
        epilogue.residual = job->residual ? job->residual + offset : NULL;
        job->rows(&job->w, panel, begin, end, b, width, p->out_width, job->output + offset, job->pixels, &epilogue);
        return;
    }
    if (job->residual) epilogue.activation = ORTX_ACT_NONE;
    float *sums = region->sums + first_row * ORTX_SPARSE_TILE;
    job->rows(&job->w, panel, begin, end, b, width, ncols, sums, ORTX_SPARSE_TILE, &epilogue);
    if (panel + 1 < job->w.panels) return;
    int64_t rows = (end * R < p->out_channels ? end * R : p->out_channels) - first_row;
    int64_t offset = first_row * job->pixels + p0 / width * p->out_width;
    ortx_sparse_store store = {rows, ncols / width, width, p->out_width, job->pixels,
                               job->residual ? job->residual + offset : NULL, (int)p->activation, p->param0,
                               p->param1};
    job->store(sums, &store, job->output + offset);
}

/* Case tiles: one tile, every row; per panel its B rows (X in place, the shifted planes, or built now into the
 * thread's rows). Case shifted in several bands: the piece is a band, its tiles one after another. */
static void tile_piece(const conv_job *job, const thread_region *region, int64_t tile) {
    if (job->shifted && job->bands > 1) {
        int64_t band_tiles = job->band / job->per_tile, last = (tile + 1) * band_tiles;
        for (int64_t band_tile = tile * band_tiles; band_tile < last && band_tile < job->tiles; band_tile++) {
            fill_for_tile(job, region, band_tile);
            for (int64_t panel = 0; panel < job->w.panels; panel++)
                shifted_rows(job, region, band_tile, panel, 0, job->block_count);
        }
        return;
    }
    fill_for_tile(job, region, tile);
    if (job->shifted) {
        for (int64_t panel = 0; panel < job->w.panels; panel++)
            shifted_rows(job, region, tile, panel, 0, job->block_count);
        return;
    }
    for (int64_t panel = 0; panel < job->w.panels; panel++) {
        int64_t k0, k1;
        panel_rows(job, panel, &k0, &k1);
        const float *b = job->input + tile * ORTX_SPARSE_TILE;
        int64_t ldb = job->pixels;
        if (!job->in_place) {
            if (k0 < k1)
                patch_block(job, job->pointwise ? job->input : region->planes, k0, k1, tile, region->b,
                            ORTX_SPARSE_TILE);
            b = region->b - k0 * ORTX_SPARSE_TILE, ldb = ORTX_SPARSE_TILE;
        }
        run_rows(job, tile, panel, 0, job->block_count, b, ldb);
    }
}

/* Case rows: one chunk of block rows, every tile and panel; the thread's first piece builds every tile's B rows,
 * its later pieces reuse them (the tiles and panels run in the same order in every piece). */
static void rows_piece(const conv_job *job, const thread_region *region, int64_t chunk) {
    int64_t begin = job->block_count * chunk / job->pieces, end = job->block_count * (chunk + 1) / job->pieces;
    if (begin == end) return;
    if (job->shifted) {
        for (int64_t tile = 0; tile < job->tiles; tile++) {
            fill_for_tile(job, region, tile);
            for (int64_t panel = 0; panel < job->w.panels; panel++)
                shifted_rows(job, region, tile, panel, begin, end);
        }
        return;
    }
    int build = !job->in_place && !*region->built;
    for (int64_t tile = 0; tile < job->tiles; tile++) {
        const float *b = job->input + tile * ORTX_SPARSE_TILE;
        int64_t ldb = job->pixels;
        float *tile_rows = region->b + tile * job->w.depth * ORTX_SPARSE_TILE;
        if (!job->in_place) b = tile_rows, ldb = ORTX_SPARSE_TILE;
        if (build) fill_for_tile(job, region, tile);
        for (int64_t panel = 0; panel < job->w.panels; panel++) {
            int64_t k0, k1;
            panel_rows(job, panel, &k0, &k1);
            if (build && k0 < k1)
                patch_block(job, job->pointwise ? job->input : region->planes, k0, k1, tile,
                            tile_rows + k0 * ORTX_SPARSE_TILE, ORTX_SPARSE_TILE);
            run_rows(job, tile, panel, begin, end, b, ldb);
        }
    }
    if (!job->in_place) *region->built = 1;
}

/* The next piece of segment `queue`: its front for the owner, its back for another thread; -1 when none is left. */
static int64_t claim_piece(piece_queue *queue, int owner) {
    uint64_t range = atomic_load(&queue->range);
    for (;;) {
        uint32_t front = (uint32_t)range, back = (uint32_t)(range >> 32);
        if (front >= back) return -1;
        uint64_t next = owner ? ((uint64_t)back << 32) | (front + 1) : ((uint64_t)(back - 1) << 32) | front;
        if (atomic_compare_exchange_weak(&queue->range, &range, next)) return owner ? front : back - 1;
    }
}

/* One lane per thread: its own segment first, then the others' leftovers (the task index is not used: which pieces
 * a thread runs changes nothing in the results, every piece is computed the same way by any thread). */
static void conv_lane(void *context, int64_t task, int thread_index) {
    (void)task;
    conv_job *job = context;
    thread_region region = region_of(job, thread_index);
    for (int64_t offset = 0; offset < job->threads; offset++) {
        piece_queue *queue = &job->queues[(thread_index + offset) % job->threads];
        for (int64_t piece; (piece = claim_piece(queue, offset == 0)) >= 0;) {
            if (job->by_rows) rows_piece(job, &region, piece);
            else tile_piece(job, &region, piece);
        }
    }
}

void ortx_sparse_conv2d_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    conv_job job = {.p = &p, .rows = ortx_sparse_select_rows(), .patch = ortx_sparse_select_patch(),
                    .fill = ortx_sparse_select_fill(), .store = ortx_sparse_select_store()};
    conv_geometry(&p, ints[ORTX_SPARSE_CONV_LAYOUT] == 1, &job);
    job.threads = conv_threads(&p, num_threads);
    job.by_rows = conv_by_rows(&job, (int)job.threads);
    job.w = (ortx_sparse_matrix){p.out_channels, job.w.depth, ints[ORTX_SPARSE_CONV_BLOCK],
                                 ints[ORTX_SPARSE_CONV_BLOCK + 1], buffers[1], buffers[2], buffers[3]};
    job.epilogue = (ortx_sparse_epilogue){p.has_bias ? buffers[6] : NULL, NULL, job.pixels, (int)p.activation,
                                          p.param0, p.param1};
    job.panel_width = ortx_sparse_panel_width(job.w.depth, job.w.panels);
    job.block_count = ortx_round_up(p.out_channels, job.w.block_rows) / job.w.block_rows;
    job.pieces = job.shifted && job.bands > 1 ? job.bands : job.tiles;
    if (job.by_rows) {
        int64_t chunks = (int64_t)ORTX_TASKS_PER_THREAD * job.threads;
        job.pieces = chunks < job.block_count ? chunks : job.block_count;
    }
    if (!job.in_place) {
        float *workspace = (float *)(((uintptr_t)buffers[5] + 63) & ~(uintptr_t)63);
        job.taps = (const int32_t *)workspace;
        if (!job.shifted) tap_offsets(&p, &job, (int32_t *)workspace);
        job.regions = workspace + taps_floats(job.w.depth);
        job.region_floats = region_floats(&job, job.by_rows);
    }
    for (int64_t image = 0; image < p.batch; image++) {
        job.input = (const float *)buffers[0] + image * p.in_channels * p.in_height * p.in_width;
        job.output = (float *)buffers[4] + image * p.out_channels * job.pixels;
        job.residual = p.has_residual ? (const float *)buffers[7] + image * p.out_channels * job.pixels : NULL;
        for (int64_t lane = 0; lane < job.threads; lane++) {
            uint64_t front = (uint64_t)(job.pieces * lane / job.threads);
            uint64_t back = (uint64_t)(job.pieces * (lane + 1) / job.threads);
            atomic_store(&job.queues[lane].range, front | back << 32);
            if (job.in_place) continue;
            thread_region region = region_of(&job, (int)lane);  /* the caller writes a few flags of each thread */
            if (region.filled) memset(region.filled, 0, (size_t)job.phase_rows);
            if (region.band) *region.band = -1;
            if (region.built) *region.built = 0;
        }
        ortx_parallel_for((int)job.threads, job.threads, conv_lane, &job);
    }
}
