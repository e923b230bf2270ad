/* conv2d_winograd_nchwc_f32: a 3x3 stride-1 dense conv by Winograd's F(4x4, 3x3) on blocked tensors (conv.h's
 * NCHWc), so the 3x3 convs of ResNet-style networks spend 2.25 multiply-adds per output instead of 9 without leaving
 * the blocked runs (conv_winograd.c's NCHW form costs a reorder each way there; the blocked direct conv,
 * conv2d_nchwc_f32, runs near the multiply-add ports' limit, where only fewer multiply-adds go faster).
 *
 * ints = the conv ints (conv.h, workspace_threads left out) then threads; floats = [param0, param1];
 * buffers = [X, U, bias, Y, residual (Y when has_residual is 0), workspace (conv_winograd_nchwc_sizes_f32)];
 * X, Y and the residual blocked; U the transformed weights, per position q (36) conv_pointwise_nchwc_f32's packing
 * of the Cout x Cin matrix U[q] = (G g G^T)[q] ([ceil(Cout / 64)][Cin][64], zeros past Cout: made in float64 and
 * rounded once, blocked_layout.pack_winograd_nchwc); bias ceil(Cout / 64) * 64 floats.
 *
 * Per band of tile rows (band_rows), with T output tiles of 4x4 pixels in the band, three parallel phases:
 * 1. V[q] = B^T d B per tile and input block (conv_winograd_avx512.c's nchwc_input: 36 input pixel vectors in, 36
 *    out), stored as 36 blocked tensors of T "pixels" [36][Cin / 16][T][16];
 * 2. M[q] = V[q] U[q] for every position: a 1x1 conv of T pixels (conv_pointwise_nchwc_f32's AVX-512 tile, 6 tiles
 *    x 64 output channels in registers, the whole Cin summed), so U[q] (Cin x 64 floats a task) stays in cache
 *    while all tiles stream past it;
 * 3. Y = act(A^T M A + bias + residual) per tile and output block (nchwc_output), stored inside the output only.
 * Accuracy: the transforms' constants make results differ from a direct conv by about 1e-5 of the output's
 * magnitude, as conv_winograd.c's m = 4 (tests/kernels/test_conv_winograd.py's bound for it).
 * Without AVX-512 the reference runs (the lowering plans blocked tensors on AVX-512 only).
 * Known limits: V and M are workspace, 36 / 16 = 2.25 times the input's and the output's floats; U is 4 times W.
 */
#include <string.h>

#include "conv.h"
#include "conv_winograd.h"
#include "isa.h"
#include "ortx_kernels.h"
#include "threadpool.h"

enum { POSITIONS = 36, TILE = ORTX_POINTWISE_PIXELS };

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* A band's V and M at most this many bytes, unless U is the larger stream (bands re-read U) */
#define BAND_BYTES (2 << 20)

typedef struct wn_job {
    ortx_conv_params p;
    int64_t tiles_y, tiles_x, in_blocks, out_blocks, groups;
    int64_t row0, rows, tiles;  /* the band: tile rows [row0, row0 + rows), tiles = rows * tiles_x */
    const float *X, *U, *bias, *residual, *zeros;
    float *Y, *V, *M;
} wn_job;

/* Tile rows a band: the phases run band by band so V and M stay in cache (64@112: 14 MB of them in one band ran
 * 1.4 ms, more than four times 64@56's 0.2), in as many bands as keep them within BAND_BYTES, but no more than
 * V and M outweigh U, which every band reads again. */
static int64_t band_rows(const ortx_conv_params *p) {
    const int64_t tiles_y = (p->out_height + 3) / 4, tiles_x = (p->out_width + 3) / 4;
    const int64_t blocks = ortx_nchwc_blocks(p->in_channels) + ortx_nchwc_blocks(p->out_channels);
    const int64_t vm_bytes = p->batch * POSITIONS * blocks * 16 * tiles_x * tiles_y * (int64_t)sizeof(float);
    const int64_t groups = (ortx_nchwc_blocks(p->out_channels) + 3) / 4;
    const int64_t u_bytes = POSITIONS * p->in_channels * groups * 64 * (int64_t)sizeof(float);
    int64_t bands = (vm_bytes + BAND_BYTES - 1) / BAND_BYTES;
    bands = min64(bands, max64(1, vm_bytes / max64(u_bytes, 1)));
    bands = max64(1, min64(bands, tiles_y));
    return (tiles_y + bands - 1) / bands;
}

static void sizes_of(const ortx_conv_params *p, int64_t *v_floats, int64_t *m_floats) {
    const int64_t tiles = band_rows(p) * ((p->out_width + 3) / 4);
    *v_floats = p->batch * POSITIONS * ortx_nchwc_blocks(p->in_channels) * tiles * 16;
    *m_floats = p->batch * POSITIONS * ortx_nchwc_blocks(p->out_channels) * tiles * 16;
}

/* conv_winograd_nchwc_sizes_f32: ints conv2d_winograd_nchwc_f32's; buffers [0] int64[1] out: workspace bytes (V,
 * M and 64 zero floats). */
void ortx_conv_winograd_nchwc_sizes_f32(const int64_t *ints, const float *floats, void *const *buffers,
                                        int num_threads) {
    (void)floats;
    (void)num_threads;
    const float zero[2] = {0.0f, 0.0f};
    const ortx_conv_params p = ortx_conv_params_read(ints, zero);
    int64_t v_floats, m_floats;
    sizes_of(&p, &v_floats, &m_floats);
    ((int64_t *)buffers[0])[0] = (v_floats + m_floats + 64) * (int64_t)sizeof(float);
}

/* Phase 1, task (image, input block, tile row). */
static void input_task(void *context, int64_t task, int thread) {
    (void)thread;
    const wn_job *job = context;
    const int64_t row = task % job->rows, block = task / job->rows % job->in_blocks;
    const int64_t n = task / (job->rows * job->in_blocks);
    const float *x = job->X + (n * job->in_blocks + block) * job->p.in_height * job->p.in_width * 16;
    const int64_t stride = job->in_blocks * job->tiles * 16;  /* floats between positions */
    float *v = job->V + (n * POSITIONS * job->in_blocks + block) * job->tiles * 16;
    for (int64_t tx = 0; tx < job->tiles_x; tx++)
        ortx_wino_nchwc_avx512.input(&job->p, x, job->row0 + row, tx, v + (row * job->tiles_x + tx) * 16, stride);
}

/* Phase 2, task (image, position, group of 4 output blocks): M[q] = V[q] U[q] over all tiles. */
static void multiply_task(void *context, int64_t task, int thread) {
    (void)thread;
    const wn_job *job = context;
    const int64_t group = task % job->groups, q = task / job->groups % POSITIONS;
    const int64_t n = task / (job->groups * POSITIONS);
    const int64_t cin = job->p.in_channels, blocks = min64(4, job->out_blocks - group * 4);
    const float *v = job->V + (n * POSITIONS + q) * job->in_blocks * job->tiles * 16;
    const float *u = job->U + (q * job->groups + group) * cin * 64;
    float *m = job->M + ((n * POSITIONS + q) * job->out_blocks + group * 4) * job->tiles * 16;
    for (int64_t t = 0; t < job->tiles; t += TILE)
        ortx_pointwise_nchwc_chunk_avx512(min64(TILE, job->tiles - t), blocks, 0, cin, job->tiles, 16, job->tiles,
                                          16, v + t * 16, u, job->zeros, NULL, m + t * 16, 1, 1, 0, 0.0f, 0.0f);
}

/* Phase 3, task (image, output block, tile row). */
static void output_task(void *context, int64_t task, int thread) {
    (void)thread;
    const wn_job *job = context;
    const int64_t row = task % job->rows, block = task / job->rows % job->out_blocks;
    const int64_t n = task / (job->rows * job->out_blocks);
    const int64_t plane = (n * job->out_blocks + block) * job->p.out_height * job->p.out_width * 16;
    const int64_t stride = job->out_blocks * job->tiles * 16;
    const float *m = job->M + (n * POSITIONS * job->out_blocks + block) * job->tiles * 16;
    for (int64_t tx = 0; tx < job->tiles_x; tx++)
        ortx_wino_nchwc_avx512.output(&job->p, m + (row * job->tiles_x + tx) * 16, stride, job->row0 + row, tx,
                                      job->bias + block * 16, job->residual ? job->residual + plane : NULL,
                                      job->Y + plane);
}

void ortx_conv2d_winograd_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers,
                                    int num_threads) {
    const ortx_conv_params p = ortx_conv_params_read(ints, floats);
    if (ortx_selected_isa() != ORTX_ISA_AVX512 || ortx_wino_nchwc_avx512.input == NULL
        || ortx_pointwise_nchwc_chunk_avx512 == NULL) {
        ortx_conv2d_winograd_nchwc_f32_ref(ints, floats, buffers, num_threads);
        return;
    }
    const int threads = (int)max64(1, min64(num_threads, ints[ORTX_CONV_INTS - 1]));
    int64_t v_floats, m_floats;
    sizes_of(&p, &v_floats, &m_floats);
    float *workspace = buffers[5];
    wn_job job = {p, (p.out_height + 3) / 4, (p.out_width + 3) / 4, ortx_nchwc_blocks(p.in_channels),
                  ortx_nchwc_blocks(p.out_channels), 0, 0, 0, 0, buffers[0], buffers[1], buffers[2],
                  p.has_residual ? buffers[4] : NULL, workspace + v_floats + m_floats, buffers[3], workspace,
                  workspace + v_floats};
    job.groups = (job.out_blocks + 3) / 4;
    memset(workspace + v_floats + m_floats, 0, 64 * sizeof(float));
    const int64_t rows = band_rows(&p);
    for (job.row0 = 0; job.row0 < job.tiles_y; job.row0 += rows) {
        job.rows = min64(rows, job.tiles_y - job.row0);
        job.tiles = job.rows * job.tiles_x;
        ortx_parallel_for(threads, p.batch * job.in_blocks * job.rows, input_task, &job);
        ortx_parallel_for(threads, p.batch * POSITIONS * job.groups, multiply_task, &job);
        ortx_parallel_for(threads, p.batch * job.out_blocks * job.rows, output_task, &job);
    }
}
