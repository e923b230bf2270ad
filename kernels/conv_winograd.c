/* Dense 3x3 stride-1 conv by Winograd's minimal filtering, F(m x m, 3 x 3) for m = 2 and 4 (Lavin and Gray, "Fast
 * Algorithms for Convolutional Neural Networks", 2015).
 *
 * Why: a direct conv spends 9 multiply-adds per output pixel, input channel and output channel; F(4x4, 3x3) spends
 * 36 per 16 output pixels (2.25 per pixel), F(2x2, 3x3) 16 per 4 (4 per pixel), plus transforms that cost one pass
 * over the input and the output per tile. ONNX Runtime's CPU EP runs 3x3 convs direct (MLAS NCHWc) near the FMA
 * ports' limit, so at the same hardware limit only fewer multiply-adds make OrtxEP faster there.
 *
 * Per image, with T output tiles of m x m pixels (n = m + 2 input pixels a side) and P = n * n positions:
 *   U[q] (Cout x Cin) = the position-q element of G g G^T per (output, input) channel, packed once at compile time
 *                       as the GEMM's A panels (conv_winograd_pack_f32, in double, rounded once);
 *   V[q] (Cin x T)    = the position-q element of B^T d B per input channel and tile (input transform over runs
 *                       of a tile row, zero outside the image), written straight in packed B panels;
 *   M[q] = U[q] V[q]  (P GEMMs with the gemm family's micro-kernels, columns in groups of 32 tiles);
 *   Y tile            = A^T M A per output channel and tile (output transform) with conv.h's group epilogue (bias,
 *                       residual, activation) applied in registers before the one store.
 * Threads: see wino_schedule (jobs by column group for large outputs, by block of output channels for small ones).
 * Accuracy: the transforms' constants (1/6, 1/24 in G; 2, 4, 8 in A^T) make fp32 results differ from a direct conv
 * by about 1e-6 (m = 2) to 1e-5 (m = 4) relative to the output's magnitude; tests/kernels/test_conv_winograd.py
 * states and checks the bound per m.
 * The weights buffer starts with conv2d_f32's packed weights, so conv2d_f32's reference kernel is this kernel's
 * oracle, then holds U. Cost: the weights are held twice over (raw, for the oracle, and U, P/9 their size).
 * Only the AVX-512 transforms are vectorised; the portable ones exist so every ISA runs (and tests) the kernel, and
 * the shape rule takes Winograd only on AVX-512.
 */
#include <string.h>

#include "conv_winograd.h"
#include "ortx_kernels.h"
#include "threadpool.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The transform matrices (Lavin and Gray; points 0, 1, -1 for m = 2 and 0, 1, -1, 2, -2 for m = 4): n x n B^T and
 * m x n A^T in the top-left corner of 6 x 6 arrays, for the portable transforms (conv_winograd_avx512.c writes the
 * same sums out factored); G, n x 3, in double for the weight transform (1/6 and 1/24 are not floats). */
typedef struct wino_matrices {
    float bt[6][6], at[4][6];
} wino_matrices;

static const wino_matrices matrices_2 = {
    .bt = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}},
    .at = {{1, 1, 1, 0}, {0, 1, -1, -1}},
};

static const wino_matrices matrices_4 = {
    .bt = {{4, 0, -5, 0, 1, 0}, {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
           {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}},
    .at = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}},
};

static const wino_matrices *matrices_of(int m) { return m == 4 ? &matrices_4 : &matrices_2; }

/* G in double for the weight transform (1/6 and 1/24 are not floats). */
static const double g_exact_4[6][3] = {{1.0 / 4, 0, 0}, {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                       {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
static const double g_exact_2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};

ortx_wino_geometry ortx_wino_geometry_of(const ortx_conv_params *p, int m) {
    ortx_wino_geometry g;
    g.p = p;
    g.m = m;
    g.n = m + 2;
    g.positions = (int64_t)g.n * g.n;
    g.tiles_y = ceil_div(p->out_height, m);
    g.tiles_x = ceil_div(p->out_width, m);
    g.tiles = g.tiles_y * g.tiles_x;
    g.panels = ceil_div(g.tiles, ORTX_WINO_LANES);
    g.column_groups = ceil_div(g.panels, 2);
    g.group_floats = g.positions * p->in_channels * ORTX_WINO_GROUP_COLUMNS;
    g.u_floats = ortx_gemm_packed_a_floats(p->out_channels, p->in_channels);
    return g;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Portable transforms: one tile at a time, the matrices' sums term by term.
 * ------------------------------------------------------------------------------------------------------------- */

/* The V offset of (input channel ic, group column `column`): ortx_gemm_packed_index's B layout with 32 columns. */
static inline int64_t v_index(int64_t ic, int64_t column, int64_t cin) {
    return ortx_gemm_packed_index(column, ic, ORTX_WINO_GROUP_COLUMNS, cin, ORTX_GEMM_NR);
}

static void input_portable(const ortx_wino_geometry *g, const ortx_wino_run *run, const float *x, int64_t ic0,
                           int64_t ic1, float *v) {
    const ortx_conv_params *p = g->p;
    const wino_matrices *w = matrices_of(g->m);
    int n = g->n, m = g->m;
    int64_t plane = p->in_height * p->in_width, cin = p->in_channels;
    for (int64_t ic = ic0; ic < ic1; ic++) {
        const float *xp = x + ic * plane;
        for (int64_t lane = 0; lane < run->count; lane++) {
            int64_t iy = run->ty * m - p->pad_top, ix = (run->tx0 + lane) * m - p->pad_left;
            float d[6][6], t[6][6];
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++) {
                    int inside = iy + i >= 0 && iy + i < p->in_height && ix + j >= 0 && ix + j < p->in_width;
                    d[i][j] = inside ? xp[(iy + i) * p->in_width + ix + j] : 0.0f;
                }
            for (int r = 0; r < n; r++)
                for (int j = 0; j < n; j++) {
                    float acc = 0.0f;
                    for (int i = 0; i < n; i++)
                        if (w->bt[r][i] != 0.0f) acc += w->bt[r][i] * d[i][j];
                    t[r][j] = acc;
                }
            for (int r = 0; r < n; r++)
                for (int c = 0; c < n; c++) {
                    float acc = 0.0f;
                    for (int j = 0; j < n; j++)
                        if (w->bt[c][j] != 0.0f) acc += w->bt[c][j] * t[r][j];
                    v[(r * n + c) * cin * ORTX_WINO_GROUP_COLUMNS + v_index(ic, run->column0 + lane, cin)] = acc;
                }
        }
    }
}

static void output_portable(const ortx_wino_geometry *g, const ortx_wino_run *run, const float *c_local,
                            int64_t position_stride, int64_t rows, int64_t row0, float *y,
                            const ortx_gemm_epilogue *epilogue) {
    const ortx_conv_params *p = g->p;
    const wino_matrices *w = matrices_of(g->m);
    int n = g->n, m = g->m;
    int64_t plane = p->out_height * p->out_width;
    for (int64_t r_oc = 0; r_oc < rows; r_oc++) {
        for (int64_t lane = 0; lane < run->count; lane++) {
            const float *c = c_local + r_oc * ORTX_WINO_GROUP_COLUMNS + run->column0 + lane;
            float s[4][6];
            for (int i = 0; i < m; i++)
                for (int cc = 0; cc < n; cc++) {
                    float acc = 0.0f;
                    for (int r = 0; r < n; r++)
                        if (w->at[i][r] != 0.0f) acc += w->at[i][r] * c[(r * n + cc) * position_stride];
                    s[i][cc] = acc;
                }
            int64_t oy = run->ty * m, ox = (run->tx0 + lane) * m;
            for (int i = 0; i < m && oy + i < p->out_height; i++)
                for (int j = 0; j < m && ox + j < p->out_width; j++) {
                    float acc = 0.0f;
                    for (int cc = 0; cc < n; cc++)
                        if (w->at[j][cc] != 0.0f) acc += w->at[j][cc] * s[i][cc];
                    int64_t pixel = (oy + i) * p->out_width + ox + j;
                    if (epilogue) acc = ortx_gemm_epilogue_scalar(epilogue, acc, row0 + r_oc, pixel);
                    y[(row0 + r_oc) * plane + pixel] = acc;
                }
        }
    }
}

const ortx_wino_isa ortx_wino_portable = {input_portable, output_portable};

/* ---------------------------------------------------------------------------------------------------------------
 * Shape rule, sizes and weight packing.
 * ------------------------------------------------------------------------------------------------------------- */

static int applies(const ortx_conv_params *p) {
    int64_t plane = max64(p->in_height * p->in_width, p->out_height * p->out_width);
    return p->group == 1 && p->kernel_height == 3 && p->kernel_width == 3 && p->stride_height == 1 &&
           p->stride_width == 1 && p->dilation_height == 1 && p->dilation_width == 1 && plane < INT32_MAX / 4;
}

static int winograd_allowed = 1;

int ortx_allow_winograd(int allow) {
    int previous = winograd_allowed;
    winograd_allowed = allow != 0;
    return previous;
}

/* The m the shape rule picks (0: keep the direct kernels): AVX-512 only (the transforms are vectorised there alone),
 * 16 or more channels each way (fewer: the transforms outweigh the saved multiply-adds), then the larger m that
 * still gives a full column group (32 tiles). Fewer tiles give each element of U (P/9 times the weights' bytes) fewer
 * than 32 multiply-adds, and reading U becomes the bound: in ResNet-18 at 2 threads, measured with ORT's runs
 * interleaved, 512 @7x7 (16 tiles of 2) ran 1.15-1.20 ms as m = 2 against 1.07 direct, and 256 @14x14 0.74-0.76
 * as m = 4 (16 tiles) against 0.60-0.64 as m = 2 (49 tiles). */
static int chosen_m(const ortx_conv_params *p) {
    if (!winograd_allowed || !applies(p) || ortx_selected_isa() != ORTX_ISA_AVX512) return 0;
    if (p->in_channels < 16 || p->out_channels < 16) return 0;
    for (int m = 4; m >= 2; m -= 2)
        if (ceil_div(p->out_height, m) * ceil_div(p->out_width, m) >= ORTX_WINO_GROUP_COLUMNS) return m;
    return 0;
}

/* How a call splits its work (from the workspace's thread count, so sizes and kernel agree):
 *   group-major, with a column group for every thread: a job is one column group; it transforms the group's input
 *     into its thread's V, then for each block of at most 128 output channels (multiples of 12 for micro_tall)
 *     multiplies and transforms the block's output, so a thread reads only what it wrote and the same lines stay
 *     in its core's L2;
 *   channel-major, with fewer groups (small outputs, where U, the transformed weights, is the big operand): the
 *     input transform runs first into a V per group, then jobs are blocks of output channels (one per thread, at
 *     most 256, multiples of 6) over every group, position by position, so each U[q] block is read once from
 *     memory and reused from L1 for every group.
 * Group-major from one group per thread, not two (ResNet-18-style's 128 @ 28x28: 2 groups at 2 threads): each
 * thread transforms, multiplies and writes back the pixels of its own tiles, where channel-major hands every
 * thread's V and outputs to the other. In-process A/B of the whole model at 2 threads, fp32, on the Zen 4 VM, same
 * bits: 0.98-0.99x its time with the vCPUs close (a cache line's round trip ~60 ns) and 0.93x with them far apart
 * (~330 ns, ortx.host_contention), where every exchange between the threads is slow. A group's blocks in one job
 * (not a job per (group, block) over a shared V, where a thread that finished its group early took the other's
 * second block and read that V from the other core): ResNet-18-style in-process 0.988x close, 0.976x far apart;
 * its 256 @ 14x14 alone 1.00x close, 0.88x far apart. */
typedef struct wino_schedule {
    int channel_major;
    int64_t blocks, block_rows, local_groups;
} wino_schedule;

static wino_schedule schedule_of(const ortx_wino_geometry *g, int threads) {
    wino_schedule s = {0, 0, 0, 1};
    int64_t cout = g->p->out_channels;
    if (g->column_groups < threads) {
        s.channel_major = 1;
        s.block_rows = ortx_round_up(ceil_div(cout, max64(2 * threads, ceil_div(cout, 256))), ORTX_GEMM_MR);
        s.local_groups = g->column_groups;
    } else {
        s.block_rows = ortx_round_up(ceil_div(cout, ceil_div(cout, 128)), 2 * ORTX_GEMM_MR);
    }
    s.blocks = ceil_div(cout, s.block_rows);
    return s;
}

/* Per thread, in its ortx_thread_scratch: M of a block for its groups (readable 16 floats past its end), then
 * group-major its column group's V. */
static int64_t local_floats(const ortx_wino_geometry *g, const wino_schedule *s) {
    return ortx_round_up(s->local_groups * g->positions * s->block_rows * ORTX_WINO_GROUP_COLUMNS + 16, 16);
}

/* The arena workspace: channel-major, every group's V (every thread reads them). */
static int64_t workspace_floats(const ortx_wino_geometry *g, int threads) {
    wino_schedule s = schedule_of(g, threads);
    return (s.channel_major ? g->column_groups * g->group_floats : 0) + 16;
}

/* ints: conv.h's 20 then [20] m wanted (0: the shape rule's choice; 2 or 4: that m where the conv is 3x3 stride 1
 * dense). buffers [0] int64[3] out: workspace bytes, packed weight floats, the m the kernel runs with (0: Winograd
 * does not apply; the lowering keeps the direct kernels). */
void ortx_conv_winograd_sizes_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    float unused[2] = {0.0f, 0.0f};
    ortx_conv_params p = ortx_conv_params_read(ints, unused);
    int64_t *out = buffers[0];
    int m = ints[20] == 0 ? chosen_m(&p) : (applies(&p) && (ints[20] == 2 || ints[20] == 4) ? (int)ints[20] : 0);
    out[0] = out[1] = 0;
    out[2] = m;
    if (m == 0) return;
    ortx_wino_geometry g = ortx_wino_geometry_of(&p, m);
    out[0] = workspace_floats(&g, (int)max64(1, p.workspace_threads)) * (int64_t)sizeof(float);
    out[1] = ortx_gemm_packed_a_floats(p.out_channels, p.in_channels * 9) + g.positions * g.u_floats;
}

/* ints: as conv2d_winograd_f32's; buffers [0] W (Cout, Cin, 3, 3) [1] out: the packed weights (sizes' out[1]
 * floats): conv2d_f32's A panels of W as (Cout) x (Cin * 9), then per position q the A panels of U[q]. */
void ortx_conv_winograd_pack_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    ortx_wino_geometry g = ortx_wino_geometry_of(&p, (int)ints[20]);
    const float *W = buffers[0];
    float *packed = buffers[1];
    int64_t cout = p.out_channels, cin = p.in_channels, n = g.n;
    ortx_gemm_pack(W, cout, cin * 9, cin * 9, 1, ORTX_GEMM_MR, 1.0f, packed);
    float *u = packed + ortx_gemm_packed_a_floats(cout, cin * 9);
    memset(u, 0, (size_t)(g.positions * g.u_floats) * sizeof(float));  /* the panels' padding rows */
    const double(*G)[3] = g.m == 4 ? g_exact_4 : g_exact_2;
    for (int64_t oc = 0; oc < cout; oc++)
        for (int64_t ic = 0; ic < cin; ic++) {
            const float *w = W + (oc * cin + ic) * 9;
            int64_t index = ortx_gemm_packed_index(oc, ic, cout, cin, ORTX_GEMM_MR);  /* the same in every U[q] */
            double t[6][3];
            for (int r = 0; r < n; r++)
                for (int b = 0; b < 3; b++) t[r][b] = G[r][0] * w[b] + G[r][1] * w[3 + b] + G[r][2] * w[6 + b];
            for (int r = 0; r < n; r++)
                for (int c = 0; c < n; c++)
                    u[(r * n + c) * g.u_floats + index] =
                        (float)(t[r][0] * G[c][0] + t[r][1] * G[c][1] + t[r][2] * G[c][2]);
        }
}

/* ---------------------------------------------------------------------------------------------------------------
 * The kernel.
 * ------------------------------------------------------------------------------------------------------------- */

typedef struct wino_job {
    const ortx_wino_geometry *g;
    const ortx_wino_isa *transforms;
    const ortx_gemm_isa *isa;
    const float *x, *u;
    float *v, *y;  /* v: every group's V (channel-major) */
    wino_schedule schedule;
    int64_t local_floats, input_parts;
    int tall;
    const ortx_gemm_epilogue *epilogue;
    int has_epilogue;
} wino_job;

/* The runs of column group `group`'s tiles (consecutive tiles of one tile row, at most 16 each) into runs (room for
 * 32); returns their count. */
static int64_t group_runs(const ortx_wino_geometry *g, int64_t group, ortx_wino_run *runs) {
    int64_t first = group * ORTX_WINO_GROUP_COLUMNS, last = min64(first + ORTX_WINO_GROUP_COLUMNS, g->tiles);
    int64_t count = 0;
    for (int64_t tile = first; tile < last; count++) {
        ortx_wino_run run = {tile / g->tiles_x, tile % g->tiles_x, 0, tile - first};
        run.count = min64(min64(ORTX_WINO_LANES, last - tile), g->tiles_x - run.tx0);
        runs[count] = run;
        tile += run.count;
    }
    return count;
}

/* The V of column group `group` as thread `thread` sees it. */
/* Group `group`'s V, channel-major (the workspace's). */
static float *group_v(const wino_job *job, int64_t group) { return job->v + group * job->g->group_floats; }

static void transform_input(const wino_job *job, int64_t group, int64_t ic0, int64_t ic1, float *v) {
    const ortx_wino_geometry *g = job->g;
    ortx_wino_run runs[ORTX_WINO_GROUP_COLUMNS];
    int64_t count = group_runs(g, group, runs);
    for (int64_t i = 0; i < count; i++) job->transforms->input(g, &runs[i], job->x, ic0, ic1, v);
    /* The last panel's columns past the last tile: zeros, not the workspace's old bits (a denormal or NaN there would
     * only reach discarded columns, but denormals slow every FMA that reads them). */
    int64_t used = g->tiles - group * ORTX_WINO_GROUP_COLUMNS, cin = g->p->in_channels;
    if (used < ORTX_WINO_GROUP_COLUMNS && used % ORTX_GEMM_NR)
        for (int64_t q = 0; q < g->positions; q++)
            for (int64_t ic = ic0; ic < ic1; ic++)  /* the panel's columns of one channel are contiguous */
                memset(v + q * cin * ORTX_WINO_GROUP_COLUMNS + v_index(ic, used, cin), 0,
                       (size_t)(ortx_round_up(used, ORTX_GEMM_NR) - used) * sizeof(float));}

static void input_task(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const wino_job *job = context;
    int64_t cin = job->g->p->in_channels;
    for (int64_t index = begin; index < end; index++) {
        int64_t group = index / job->input_parts, part = index % job->input_parts;
        transform_input(job, group, cin * part / job->input_parts, cin * (part + 1) / job->input_parts,
                        group_v(job, group));
    }
}

/* M[q] rows [r0, r1) of a column group with `panels` (1 or 2) panels into c_q (rows of 32 columns from r0): the
 * packed micro-kernels over U[q]'s A panels and V[q]'s B panels, KC blocks accumulated in order. */
static void multiply_position(const wino_job *job, int64_t q, const float *v_group, int64_t panels, int64_t r0,
                              int64_t r1, float *c_q) {
    const ortx_wino_geometry *g = job->g;
    const ortx_gemm_isa *isa = job->isa;
    int64_t cin = g->p->in_channels, m_padded = ortx_round_up(g->p->out_channels, ORTX_GEMM_MR);
    int64_t r_end = ortx_round_up(r1, ORTX_GEMM_MR);
    const float *u = job->u + q * g->u_floats, *v = v_group + q * cin * ORTX_WINO_GROUP_COLUMNS;
    for (int64_t k0 = 0; k0 < cin; k0 += ORTX_GEMM_KC) {
        int64_t kc = min64(ORTX_GEMM_KC, cin - k0);
        const float *a_block = u + k0 * m_padded, *b = v + k0 * ORTX_WINO_GROUP_COLUMNS;
        int accumulate = k0 > 0;
        for (int64_t row = r0; row < r_end;) {
            const float *a = a_block + row * kc;  /* panel row / MR, MR * kc floats each */
            float *c = c_q + (row - r0) * ORTX_WINO_GROUP_COLUMNS;
            if (panels == 2 && job->tall && row + 2 * ORTX_GEMM_MR <= r_end) {
                /* U streams from beyond L2 in a whole model (128@28: 2.4 MB, 256@14: 4.2 MB), each float used by
                 * only 32 tiles: the next tile's A panels (this depth block's, else the next block's first) are
                 * prefetched during this one, a line per k step */
                int64_t next_kc = row + 4 * ORTX_GEMM_MR <= r_end ? kc : min64(ORTX_GEMM_KC, cin - k0 - ORTX_GEMM_KC);
                const float *next = row + 4 * ORTX_GEMM_MR <= r_end ? a + 2 * ORTX_GEMM_MR * kc
                                                                    : u + (k0 + ORTX_GEMM_KC) * m_padded + r0 * next_kc;
                if (isa->micro_tall_prefetching != NULL && next_kc > 0)
                    isa->micro_tall_prefetching(kc, a, b, c, ORTX_WINO_GROUP_COLUMNS, accumulate, (const char *)next,
                                                min64(kc, (2 * ORTX_GEMM_MR * next_kc * 4 + 63) / 64));
                else
                    isa->micro_tall(kc, a, b, c, ORTX_WINO_GROUP_COLUMNS, accumulate, NULL, 0, 0);
                row += 2 * ORTX_GEMM_MR;
                continue;
            }
            if (panels == 2 && isa->micro_wide) {
                isa->micro_wide(kc, a, b, c, ORTX_WINO_GROUP_COLUMNS, accumulate, NULL, 0, 0);
            } else {
                isa->micro(kc, a, b, c, ORTX_WINO_GROUP_COLUMNS, accumulate, NULL, 0, 0);
                if (panels == 2)
                    isa->micro(kc, a, b + ORTX_GEMM_NR * kc, c + ORTX_GEMM_NR, ORTX_WINO_GROUP_COLUMNS, accumulate,
                               NULL, 0, 0);
            }
            row += ORTX_GEMM_MR;
        }
    }
}

static int64_t group_panels(const ortx_wino_geometry *g, int64_t group) { return min64(2, g->panels - 2 * group); }

/* Output transform and epilogue of a column group's tiles, output channels [r0, r1), M at local. */
static void transform_output(const wino_job *job, int64_t group, int64_t r0, int64_t r1, const float *local) {
    ortx_wino_run runs[ORTX_WINO_GROUP_COLUMNS];
    int64_t count = group_runs(job->g, group, runs);
    for (int64_t i = 0; i < count; i++)
        job->transforms->output(job->g, &runs[i], local, job->schedule.block_rows * ORTX_WINO_GROUP_COLUMNS, r1 - r0,
                                r0, job->y, job->has_epilogue ? job->epilogue : NULL);
}

/* Group-major jobs: one column group, every channel block. */
static void group_task(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;  /* per-thread buffers: ortx_thread_scratch */
    const wino_job *job = context;
    const ortx_wino_geometry *g = job->g;
    const wino_schedule *s = &job->schedule;
    float *local = ortx_thread_scratch(job->local_floats + g->group_floats);
    int64_t position_stride = s->block_rows * ORTX_WINO_GROUP_COLUMNS;
    for (int64_t group = begin; group < end; group++) {
        float *v = local + job->local_floats;
        transform_input(job, group, 0, g->p->in_channels, v);
        for (int64_t block = 0; block < s->blocks; block++) {
            int64_t r0 = block * s->block_rows, r1 = min64(g->p->out_channels, r0 + s->block_rows);
            for (int64_t q = 0; q < g->positions; q++)
                multiply_position(job, q, v, group_panels(g, group), r0, r1, local + q * position_stride);
            transform_output(job, group, r0, r1, local);
        }
    }
}

/* Channel-major jobs: one channel block over every column group, position by position. */
static void channel_task(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;  /* per-thread buffers: ortx_thread_scratch */
    const wino_job *job = context;
    const ortx_wino_geometry *g = job->g;
    const wino_schedule *s = &job->schedule;
    float *local = ortx_thread_scratch(job->local_floats);
    int64_t position_stride = s->block_rows * ORTX_WINO_GROUP_COLUMNS, group_stride = g->positions * position_stride;
    for (int64_t block = begin; block < end; block++) {
        int64_t r0 = block * s->block_rows, r1 = min64(g->p->out_channels, r0 + s->block_rows);
        for (int64_t q = 0; q < g->positions; q++)
            for (int64_t group = 0; group < g->column_groups; group++)
                multiply_position(job, q, group_v(job, group), group_panels(g, group), r0, r1,
                                  local + group * group_stride + q * position_stride);
        for (int64_t group = 0; group < g->column_groups; group++)
            transform_output(job, group, r0, r1, local + group * group_stride);
    }
}

/* Kernel conv2d_winograd_f32: conv.c's ints (20) plus [20] m (2 or 4, conv_winograd_sizes_f32's out[2]), floats
 * and buffers; weights from conv_winograd_pack_f32, workspace conv_winograd_sizes_f32's out[0] bytes. */
void ortx_conv2d_winograd_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    ortx_wino_geometry g = ortx_wino_geometry_of(&p, (int)ints[20]);
    int workspace_threads = (int)max64(1, p.workspace_threads);
    int threads = num_threads < 1 ? 1 : (num_threads > workspace_threads ? workspace_threads : num_threads);
    const float *X = buffers[0], *packed = buffers[1], *bias = buffers[4], *residual = buffers[5];
    float *Y = buffers[2], *workspace = buffers[3];
    wino_schedule schedule = schedule_of(&g, workspace_threads);
    int64_t in_plane = p.in_height * p.in_width, out_plane = p.out_height * p.out_width;
    wino_job job = {
        .g = &g,
        .transforms = ortx_selected_isa() == ORTX_ISA_AVX512 ? &ortx_wino_avx512 : &ortx_wino_portable,
        .isa = ortx_gemm_select_isa(),
        .u = packed + ortx_gemm_packed_a_floats(p.out_channels, p.in_channels * 9),
        .schedule = schedule,
        .local_floats = local_floats(&g, &schedule),
        .v = workspace,
        .input_parts = min64(p.in_channels, ceil_div(ORTX_TASKS_PER_THREAD * threads, g.column_groups)),
        .has_epilogue = p.has_bias || p.has_residual || p.activation != 0,
    };
    job.tall = job.isa->micro_tall != NULL && ortx_cpu_has_two_fma_ports();
    for (int64_t n = 0; n < p.batch; n++) {
        int64_t y_offset = n * p.out_channels * out_plane;
        ortx_gemm_epilogue epilogue = ortx_conv_group_epilogue(&p, bias, residual, 0, y_offset);
        job.x = X + n * p.in_channels * in_plane;
        job.y = Y + y_offset;
        job.epilogue = &epilogue;
        if (schedule.channel_major)
            ortx_parallel_range(threads, g.column_groups * job.input_parts, ORTX_TASKS_PER_THREAD * threads,
                                input_task, &job);
        if (schedule.channel_major)
            ortx_parallel_range(threads, schedule.blocks, schedule.blocks, channel_task, &job);
        else
            ortx_parallel_range(threads, g.column_groups, g.column_groups, group_task, &job);
    }
}
