/* Dense conv in the "pixels as rows" form: per image and group, C^T[pixels, Cout/g] = im2col^T * W^T, so the
 * GEMM's vector dimension (NR = 16 columns) runs over output channels instead of output pixels.
 *
 * Why: conv2d_f32 (conv.c Case 1) puts pixels on the vector dimension; a 7x7 output (49 pixels) then pads to 64
 * columns (31% of the multiply-adds wasted) and has too few column panels to split between threads, so it splits
 * rows and every task re-packs the whole im2col block. Here the weights are the GEMM's B operand, packed once at
 * compile time as NR-column panels of W^T, and the pixels are rows: 49 pixels pad to 54 (MR = 6) and the 512
 * output channels give 32 column panels for the threads to share.
 *
 * Steps, per image and group, the first two by each thread for the pixels its tasks need (pixel_rows_stage):
 *   1. copy the group's input rows into the thread's zero-padded phase planes of conv_planes.c (every tap of every
 *      output pixel lands inside, so step 2 needs no bounds checks);
 *   2. pack im2col^T into the thread's MR-row A panels (gemm.h's packed format over the whole operand): per tap, a
 *      panel row is one contiguous copy from the planes per output row its pixels lie in;
 *   3. run the packed micro-kernels over blocks of (row panels x column panel pairs) into a [pixels, Cout/g]
 *      scratch, one block per task: column pairs first, and the rows too when there are few pairs;
 *   4. each task then transposes its block into Y's channel planes and applies the epilogue (bias, residual,
 *      activation) there with the gemm family's vectorised epilogue.
 * Every output element is summed in the packed GEMM's order (KC blocks, k ascending in each), so results do not
 * depend on the thread count and equal conv2d_f32's bit for bit.
 * Known limits: steps 1, 2 and 4 are extra passes over the input and output, cheap next to the GEMM only when
 * Cout/g and the depth are large, which is when conv.c picks this form (use_pixel_rows).
 */
#include <string.h>

#include "conv.h"
#include "gemm.h"
#include "ortx_kernels.h"
#include "threadpool.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

ortx_pixel_rows_geometry ortx_pixel_rows_geometry_of(const ortx_conv_params *p) {
    ortx_pixel_rows_geometry g;
    g.pixels = p->out_height * p->out_width;
    g.depth = p->in_channels / p->group * p->kernel_height * p->kernel_width;
    int64_t cout_g = p->out_channels / p->group;
    g.planes_floats = ortx_round_up(ortx_conv_planes_source_floats(p), 16);
    g.packed_floats = ortx_round_up(ortx_gemm_packed_a_floats(g.pixels, g.depth), 16);
    g.scratch_floats = ortx_round_up(g.pixels, ORTX_GEMM_MR) * ortx_round_up(cout_g, ORTX_GEMM_NR);
    return g;
}

/* The shared scratch; each thread's planes and packed A are in its ortx_thread_scratch (pixel_rows_stage). */
int64_t ortx_pixel_rows_workspace_floats(const ortx_conv_params *p) {
    return ortx_pixel_rows_geometry_of(p).scratch_floats;
}

/* One thread's staging, in its ortx_thread_scratch: its own copy of the planes and of the packed A rows its tasks
 * read; a thread never reads what another wrote during the call. Why: with the two cores far apart (a cache line's
 * round trip ~400 ns instead of ~60, ortx.host_contention), reading the other thread's half of a 512 @ 7x7 conv's
 * 0.9 MB packed A made the conv 1.44x slower than with the cores close. Filling and packing what its own tasks read
 * costs the column split a second fill and pack and the row split its band's halo rows; close, both measured
 * 0.98-1.01x the shared staging. */
typedef struct pixel_rows_stage {
    ortx_conv_planes_context planes;
    float *region, *packed;
    int64_t lo, hi;  /* packed pixels [lo, hi), multiples of MR; planes filled for them */
    int ready;
} pixel_rows_stage;

typedef struct pixel_rows_job {
    const ortx_conv_params *p;
    ortx_pixel_rows_geometry g;
    const float *x;         /* the group's first input channel */
    const float *weights;   /* the group's packed B panels */
    pixel_rows_stage *stages;  /* one per thread */
    float *scratch;
    float *y;               /* the group's first output channel */
    const ortx_gemm_epilogue *epilogue;
    const ortx_gemm_isa *isa;
    int64_t column_parts, row_parts;  /* steps 3-4: tasks = column_parts * row_parts blocks */
    int threads;                      /* the pool's split of the tasks: thread t's segment (threadpool.h) */
} pixel_rows_job;

/* Pixels [begin, end) of the row panels of row part `part` (multiples of MR). */
static void row_part_pixels(const pixel_rows_job *job, int64_t part, int64_t *begin, int64_t *end) {
    const int64_t row_panels = ortx_round_up(job->g.pixels, ORTX_GEMM_MR) / ORTX_GEMM_MR;
    *begin = row_panels * part / job->row_parts * ORTX_GEMM_MR;
    *end = row_panels * (part + 1) / job->row_parts * ORTX_GEMM_MR;
}

/* Steps 1-2 for pixels [begin, end) (multiples of MR) into a stage: the phase-plane rows their taps read, then
 * their row panels, every depth block. */
static void stage_pixels(const pixel_rows_job *job, pixel_rows_stage *stage, int64_t begin, int64_t end) {
    enum { MR = ORTX_GEMM_MR };
    const ortx_conv_params *p = job->p;
    const int64_t m_padded = ortx_round_up(job->g.pixels, MR), last = min64(end, job->g.pixels) - 1;
    if (begin > last) return;  /* padded rows only: the packing zeroes them */
    int64_t reach = (p->kernel_height - 1) * p->dilation_height / p->stride_height;
    ortx_conv_fill_phase_plane_rows(p, job->x, stage->planes.planes, 0, p->in_channels / p->group,
                                    begin / p->out_width, last / p->out_width + reach + 1);
    for (int64_t panel = begin / MR; panel < end / MR; panel++)
        for (int64_t k0 = 0; k0 < job->g.depth; k0 += ORTX_GEMM_KC) {
            int64_t kc = min64(ORTX_GEMM_KC, job->g.depth - k0);
            ortx_conv_planes_pack_rows(&stage->planes, k0, kc, panel * MR,
                                       stage->packed + k0 * m_padded + panel * MR * kc);
        }
}

/* Makes `thread`'s stage hold the pixels of `task`'s row part. Its first task stages the pixels of the thread's
 * whole segment of tasks at once (one fill of their plane rows: a band's halo rows are filled once, not per task);
 * tasks taken from the others' segments (from their ends) extend the staged range or start it over. */
static const float *staged_a(const pixel_rows_job *job, int thread, int64_t task) {
    pixel_rows_stage *stage = &job->stages[thread];
    int64_t begin, end;
    row_part_pixels(job, task / job->column_parts, &begin, &end);
    if (!stage->ready) {
        stage->region = ortx_thread_scratch(job->g.planes_floats + job->g.packed_floats);
        stage->packed = stage->region + job->g.planes_floats;
        ortx_conv_planes_context_init(&stage->planes, job->p, stage->region);
        stage->ready = 1;
        int64_t first, last;
        ortx_task_segment(job->column_parts * job->row_parts, job->threads, thread, &first, &last);
        last--;
        if (first <= task && task <= last) {
            int64_t unused;
            row_part_pixels(job, first / job->column_parts, &begin, &unused);
            row_part_pixels(job, last / job->column_parts, &unused, &end);
        }
        stage->lo = stage->hi = begin;
    }
    if (begin >= stage->lo && end <= stage->hi) return stage->packed;
    if (end < stage->lo || begin > stage->hi) stage->lo = stage->hi = begin;  /* not adjacent: start over */
    if (begin < stage->lo) stage_pixels(job, stage, begin, stage->lo);
    if (end > stage->hi) stage_pixels(job, stage, max64(begin, stage->hi), end);
    stage->lo = min64(stage->lo, begin);
    stage->hi = max64(stage->hi, end);
    return stage->packed;
}

/* Steps 3 and 4 for task t: a block of row panels x column panels. Columns go in units of two panels (so the
 * AVX-512 6x32 tile runs), rows in row panels; few column pairs (Cout/g < 32 * tasks) also split the rows, so
 * 2 threads get even work. For each depth block, each panel pair stays in L1 while the tile runs down the block's
 * row panels (the A block, a few KB per row panel, streams from L2); the scratch holds m_padded x n_padded partial
 * sums, so padded rows and columns need no edge tiles. Then the block is transposed into Y with the epilogue. */
static void gemm_block(void *context, int64_t task, int thread) {
    const pixel_rows_job *job = context;
    const ortx_gemm_isa *isa = job->isa;
    enum { MR = ORTX_GEMM_MR, NR = ORTX_GEMM_NR, KC = ORTX_GEMM_KC };
    const int64_t P = job->g.pixels, K = job->g.depth, cout_g = job->p->out_channels / job->p->group;
    const int64_t m_padded = ortx_round_up(P, MR), n_padded = ortx_round_up(cout_g, NR);
    const int64_t pairs = (n_padded / NR + 1) / 2;
    const int64_t column_part = task % job->column_parts, row_part = task / job->column_parts;
    const int64_t first = pairs * column_part / job->column_parts * 2;
    const int64_t last = min64(n_padded / NR, pairs * (column_part + 1) / job->column_parts * 2);
    int64_t row_begin, row_end;
    row_part_pixels(job, row_part, &row_begin, &row_end);
    float *scratch = job->scratch;
    const float *packed = staged_a(job, thread, task);
    const int tall = isa->micro_tall != NULL && ortx_cpu_has_two_fma_ports();
    const int64_t task_row_panels = (row_end - row_begin) / MR;
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
        int64_t kc = min64(KC, K - k0);
        const float *a_block = packed + k0 * m_padded, *b_block = job->weights + k0 * n_padded;
        for (int64_t panel = first; panel < last; panel += 2) {
            int wide = isa->micro_wide != NULL && panel + 1 < last;
            const float *b = b_block + panel * NR * kc;
            /* The weights stream from memory once per call (512 @7x7 3x3: 9.4 MB, each float used by only a few
             * row panels): the next panel pair's lines (in this depth block, else the next one's first pair) are
             * prefetched a slice per tile, so its first tile does not wait on them. */
            int64_t next_kc = panel + 2 < last ? kc : min64(KC, K - k0 - KC);
            const char *next = (const char *)(panel + 2 < last ? b + 2 * NR * kc
                                                               : job->weights + (k0 + KC) * n_padded +
                                                                     first * NR * next_kc);
            int64_t next_lines = next_kc > 0 ? (min64(2, last - first) * NR * next_kc * 4 + 63) / 64 : 0;
            for (int64_t row = row_begin, tile = 0; row < row_end; row += MR, tile++) {
                float *c = scratch + row * n_padded + panel * NR;
                const float *a = a_block + row * kc;
                int64_t line = next_lines * tile / task_row_panels;
                if (wide && tall && row + 2 * MR <= row_end) {
                    /* the tile's share of the next lines, one per k step inside the tile (a burst of ~100
                     * prefetches before it waited on the fill buffers: 11% of 512@7x7's time) */
                    int64_t end = next_lines * (tile + 2) / task_row_panels;
                    if (isa->micro_tall_prefetching != NULL) {
                        int64_t inside = min64(end - line, kc);
                        isa->micro_tall_prefetching(kc, a, b, c, n_padded, k0 > 0, next + line * 64, inside);
                        line += inside;
                    } else {
                        isa->micro_tall(kc, a, b, c, n_padded, k0 > 0, NULL, 0, 0);
                    }
                    for (; line < end; line++) __builtin_prefetch(next + line * 64, 0, 2);
                    row += MR;
                    tile++;
                    continue;
                }
                for (; line < next_lines * (tile + 1) / task_row_panels; line++)
                    __builtin_prefetch(next + line * 64, 0, 2);
                if (wide && row + MR > P && isa->micro_wide_partial != NULL) {
                    isa->micro_wide_partial(kc, a, b, c, n_padded, k0 > 0, (int)(P - row));  /* padded rows skipped */
                } else if (wide) {
                    isa->micro_wide(kc, a, b, c, n_padded, k0 > 0, NULL, 0, 0);
                } else {
                    isa->micro(kc, a, b, c, n_padded, k0 > 0, NULL, 0, 0);
                    if (panel + 1 < last) isa->micro(kc, a, b + NR * kc, c + NR, n_padded, k0 > 0, NULL, 0, 0);
                }
            }
        }
    }
    /* Step 4: Y[c][pixel] = epilogue(scratch[pixel][c]) for the block's channels (16 at a time) and pixels. */
    int64_t pixel_end = min64(P, row_end);
    if (row_begin >= pixel_end) return;
    for (int64_t c0 = first * NR; c0 < min64(cout_g, last * NR); c0 += NR) {
        int64_t count = min64(NR, cout_g - c0);
        float *y = job->y + c0 * P;
        isa->transpose(scratch + row_begin * n_padded + c0, n_padded, pixel_end - row_begin, count, y + row_begin, P);
        isa->epilogue(y + row_begin, P, count, pixel_end - row_begin, c0, row_begin, job->epilogue);
    }
}

/* One image and group. */
static void conv2d_pixel_rows(const ortx_conv_params *p, const float *x, const float *weights, float *y,
                              const ortx_gemm_epilogue *epilogue, float *workspace, int threads) {
    ortx_pixel_rows_geometry g = ortx_pixel_rows_geometry_of(p);
    int64_t cout_g = p->out_channels / p->group;
    int stage_count = (int)max64(1, p->workspace_threads);
    pixel_rows_stage stages[stage_count];
    for (int t = 0; t < stage_count; t++) stages[t].ready = 0;
    float *scratch = workspace;
    /* below ~2M multiply-adds a second thread costs more than it saves (ortx_sgemm's bound until it was measured
     * lower for its own tiles; not re-measured here) */
    if ((double)g.pixels * cout_g * g.depth < 128.0 * 128 * 128) threads = 1;
    int64_t pairs = (ortx_round_up(cout_g, ORTX_GEMM_NR) / ORTX_GEMM_NR + 1) / 2;
    int64_t row_panels = ortx_round_up(g.pixels, ORTX_GEMM_MR) / ORTX_GEMM_MR;
    int64_t wanted = (int64_t)ORTX_TASKS_PER_THREAD * threads;
    int64_t column_parts = min64(pairs, wanted);
    int64_t row_parts = threads == 1 ? 1 : min64(row_panels, (wanted + column_parts - 1) / column_parts);
    /* When the weights are not much larger than the packed pixels, split the rows only: each task then reads its own
     * share of the pixels and all the weights (which stay in L2 across a thread's tasks), instead of all the pixels
     * per column block. 2 threads: 3x3/2 128->256 @14 (weights 1.3x the pixels) 0.539 -> 0.451 ms, 512->256 @14
     * 2.16 -> 1.83, 128->64 @14 0.213 -> 0.190; with weights 4x and 10x the pixels (256->256 @8, 256->512 @7) the
     * column split stays ahead (0.372 vs 0.508, 0.416 vs 0.960). */
    if (threads > 1 && g.depth * cout_g <= 2 * g.pixels * g.depth) {
        column_parts = 1;
        row_parts = min64(row_panels, wanted);
    }
    pixel_rows_job job = {p, g, x, weights, stages, scratch, y, epilogue, ortx_gemm_select_isa(),
                          column_parts, row_parts, threads};
    ortx_parallel_for(threads, column_parts * row_parts, gemm_block, &job);
}

/* Kernel conv2d_pixel_rows_f32: conv.c's ints, floats and buffers (see its entry table), with weights packed per
 * group as gemm_pack_f32 B panels of W_g^T, i.e. NR-column panels of the (Cout/g) x (Cin/g*KH*KW) matrix W_g,
 * groups consecutive (each ortx_gemm_packed_b_floats(Cin/g*KH*KW, Cout/g) floats). */
void ortx_conv2d_pixel_rows_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    ortx_conv_params p = ortx_conv_params_read(ints, floats);
    int threads = num_threads < 1 ? 1 : num_threads;
    if (threads > p.workspace_threads) threads = (int)max64(1, p.workspace_threads);
    const float *X = buffers[0], *packed = buffers[1], *bias = buffers[4], *residual = buffers[5];
    float *Y = buffers[2], *workspace = buffers[3];
    int64_t cin_g = p.in_channels / p.group, cout_g = p.out_channels / p.group;
    int64_t K = cin_g * p.kernel_height * p.kernel_width, N = p.out_height * p.out_width;
    int64_t plane = p.in_height * p.in_width;
    for (int64_t n = 0; n < p.batch; n++) {
        for (int64_t g = 0; g < p.group; g++) {
            int64_t y_offset = (n * p.out_channels + g * cout_g) * N;
            ortx_gemm_epilogue epilogue = ortx_conv_group_epilogue(&p, bias, residual, g, y_offset);
            conv2d_pixel_rows(&p, X + (n * p.in_channels + g * cin_g) * plane,
                              packed + g * ortx_gemm_packed_b_floats(K, cout_g), Y + y_offset, &epilogue, workspace,
                              threads);
        }
    }
}
