/* Phase planes of a dense conv's input and the patch matrix's packed panels built from them (conv.c Cases 1 and
 * 1b, conv_pixel_rows.c, and the generated GEMM's conv source, conv_source.c).
 *
 * A group's input is copied once per call into the zero-padded phase planes of conv.h's direct geometry: phase
 * (qy, qx) of channel c, row r, column j holds padded input (r*sh + qy, j*sw + qx). Patch-matrix element
 * (k = (c, ky, kx), output pixel (oy, ox)) is then planes[tap_offset[k] + oy*phase_width + ox] with no bounds checks
 * and, whatever the stride, consecutive output pixels of one output row are consecutive floats there. So packing
 * 16 pixels of one output row (a B panel row) or 6 (a pixel-rows A panel row) is one contiguous copy per tap; a
 * panel that crosses output row ends is one contiguous copy per row it touches, into a staging row. Building each
 * row from the unpadded input instead (clipping every output row against the image, gathering every stride-th
 * float) cost ~1 cycle per float, 15% of a 64-channel 3x3 conv's time and more for the stride-2 stem.
 * Limits: the planes are an extra copy of the input (Cin/g * phases * phase area floats of workspace); phases no
 * tap reads (a 1x1/2 conv's odd rows and columns) are left unfilled.
 */
#include <string.h>

#include "conv.h"
#include "conv_planes_pack.h"
#include "gemm.h"
#include "ortx_kernels.h"
#include "threadpool.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* Floats past the last plane that a tile or a staging copy may read (conv.h). */
enum { PLANES_SLACK = ORTX_CONV_PLANES_SLACK };

static int is_pointwise(const ortx_conv_params *p) {
    return p->kernel_height == 1 && p->kernel_width == 1 && p->stride_height == 1 && p->stride_width == 1 &&
           p->pad_top == 0 && p->pad_left == 0 && p->out_height == p->in_height && p->out_width == p->in_width;
}

int ortx_conv_packs_from_planes(const ortx_conv_params *p) {
    ortx_conv_direct_geometry g = ortx_conv_direct_geometry_of(p);
    int64_t cin_g = p->in_channels / p->group;
    if (is_pointwise(p)) return 0;
    return cin_g * g.channel_floats + g.virtual_pixels + PLANES_SLACK < INT32_MAX;
}

int64_t ortx_conv_planes_source_floats(const ortx_conv_params *p) { return ortx_conv_direct_floats(p); }

/* Whether some tap t < taps (at t * dilation) falls in phase `phase` of `stride`. */
static int phase_read(int64_t phase, int64_t taps, int64_t dilation, int64_t stride) {
    for (int64_t t = 0; t < taps && t < stride; t++)
        if (t * dilation % stride == phase) return 1;
    return 0;
}

void ortx_conv_fill_phase_planes(const ortx_conv_params *p, const float *x, float *planes, int64_t begin,
                                 int64_t end) {
    ortx_conv_fill_phase_plane_rows(p, x, planes, begin, end, 0, ortx_conv_direct_geometry_of(p).phase_rows);
}

void ortx_conv_fill_phase_plane_rows(const ortx_conv_params *p, const float *x, float *planes, int64_t begin,
                                     int64_t end, int64_t row_begin, int64_t row_end) {
    const ortx_conv_direct_geometry g = ortx_conv_direct_geometry_of(p);
    int64_t H = p->in_height, W = p->in_width, sh = p->stride_height, sw = p->stride_width;
    row_begin = max64(0, row_begin);
    row_end = min64(g.phase_rows, row_end);
    if (row_begin >= row_end) return;
    for (int64_t c = begin; c < end; c++) {
        const float *channel = x + c * H * W;
        float *out = planes + c * g.channel_floats;
        for (int64_t qy = 0; qy < g.phases_y; qy++)
            for (int64_t qx = 0; qx < g.phases_x; qx++) {
                if (!phase_read(qy, p->kernel_height, p->dilation_height, sh) ||
                    !phase_read(qx, p->kernel_width, p->dilation_width, sw)) {
                    out += g.phase_rows * g.phase_width;  /* no tap reads it (a kernel smaller than the stride) */
                    continue;
                }
                /* columns j with 0 <= j*sw + qx - pl < W read the input */
                int64_t offset = qx - p->pad_left;
                int64_t lo = min64(g.phase_width, max64(0, floor_div(-offset + sw - 1, sw)));
                int64_t hi = min64(g.phase_width, max64(lo, floor_div(W - 1 - offset, sw) + 1));
                float *phase_end = out + g.phase_rows * g.phase_width;
                out += row_begin * g.phase_width;
                for (int64_t r = row_begin; r < row_end; r++, out += g.phase_width) {
                    int64_t iy = r * sh + qy - p->pad_top;
                    if (iy < 0 || iy >= H || lo >= hi) {
                        memset(out, 0, g.phase_width * sizeof(float));
                        continue;
                    }
                    const float *in = channel + iy * W + offset;
                    for (int64_t j = 0; j < lo; j++) out[j] = 0.0f;
                    if (sw == 1) {
                        memcpy(out + lo, in + lo, (hi - lo) * sizeof(float));
                    } else if (sw == 2) {  /* a constant stride the compiler vectorises */
                        for (int64_t j = lo; j < hi; j++) out[j] = in[2 * j];
                    } else {
                        for (int64_t j = lo; j < hi; j++) out[j] = in[j * sw];
                    }
                    for (int64_t j = hi; j < g.phase_width; j++) out[j] = 0.0f;
                }
                out = phase_end;
            }
    }
}

void ortx_conv_planes_context_init(ortx_conv_planes_context *context, const ortx_conv_params *params, float *scratch) {
    const ortx_conv_direct_geometry g = ortx_conv_direct_geometry_of(params);
    const ortx_conv_params *p = params;
    int64_t cin_g = p->in_channels / p->group, area = p->kernel_height * p->kernel_width;
    int32_t *taps = (int32_t *)(scratch + ortx_round_up(cin_g * g.channel_floats + PLANES_SLACK, 16));
    memset(scratch + cin_g * g.channel_floats, 0, PLANES_SLACK * sizeof(float));
    /* one channel's taps, then every channel's as that plus the channel's offset (no divisions per tap: 512 input
     * channels of a 3x3 conv made this 3% of a 512@7x7 conv's time) */
    for (int64_t ky = 0; ky < p->kernel_height; ky++)
        for (int64_t kx = 0; kx < p->kernel_width; kx++) {
            int64_t dy = ky * p->dilation_height, dx = kx * p->dilation_width;
            int64_t phase = (dy % g.phases_y) * g.phases_x + dx % g.phases_x;
            taps[ky * p->kernel_width + kx] =
                (int32_t)((phase * g.phase_rows + dy / g.phases_y) * g.phase_width + dx / g.phases_x);
        }
    for (int64_t c = 1; c < cin_g; c++)
        for (int64_t t = 0; t < area; t++) taps[c * area + t] = (int32_t)(c * g.channel_floats) + taps[t];
    context->params = params;
    context->geometry = g;
    context->planes = scratch;
    context->tap_offsets = taps;
}

typedef struct fill_job {
    const ortx_conv_params *p;
    const float *x;
    float *planes;
} fill_job;

static void fill_channels(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const fill_job *job = context;
    ortx_conv_fill_phase_planes(job->p, job->x, job->planes, begin, end);
}

void ortx_conv_fill_planes_parallel(const ortx_conv_params *p, const float *x, float *planes, int threads) {
    threads = threads < 1 ? 1 : threads;
    fill_job fill = {p, x, planes};
    ortx_parallel_range(threads, p->in_channels / p->group, (int64_t)ORTX_TASKS_PER_THREAD * threads, fill_channels,
                        &fill);
}

void ortx_conv_planes_pack_b_portable(const void *context, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst) {
    ortx_planes_pack_b(context, k0, kc, n0, nc, dst);
}

void ortx_conv_planes_pack_rows_portable(const ortx_conv_planes_context *context, int64_t k0, int64_t kc,
                                         int64_t pixel, float *dst) {
    ortx_planes_pack_rows(context, k0, kc, pixel, dst);
}

/* The AVX2 entries run the portable copies (16-byte moves): no AVX2 instance yet. */
static const ortx_gemm_pack_b_fn pack_b_table[] = {
    [ORTX_ISA_PORTABLE] = ortx_conv_planes_pack_b_portable,
    [ORTX_ISA_AVX2] = ortx_conv_planes_pack_b_portable,
    [ORTX_ISA_AVX512] = ortx_conv_planes_pack_b_avx512,
};

typedef void (*pack_rows_fn)(const ortx_conv_planes_context *, int64_t, int64_t, int64_t, float *);
static const pack_rows_fn pack_rows_table[] = {
    [ORTX_ISA_PORTABLE] = ortx_conv_planes_pack_rows_portable,
    [ORTX_ISA_AVX2] = ortx_conv_planes_pack_rows_portable,
    [ORTX_ISA_AVX512] = ortx_conv_planes_pack_rows_avx512,
};

void ortx_conv_planes_pack_b(const void *context, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst) {
    pack_b_table[ortx_selected_isa()](context, k0, kc, n0, nc, dst);
}

void ortx_conv_planes_pack_rows(const ortx_conv_planes_context *context, int64_t k0, int64_t kc, int64_t pixel,
                                float *dst) {
    pack_rows_table[ortx_selected_isa()](context, k0, kc, pixel, dst);
}

/* The padded (unphased) planes geometry and pixel offsets of conv_bf16.c. */
ortx_conv_planes_geometry ortx_conv_planes_geometry_of(const ortx_conv_params *p) {
    ortx_conv_planes_geometry g;
    g.padded_rows = (p->out_height - 1) * p->stride_height + (p->kernel_height - 1) * p->dilation_height + 1;
    g.padded_width = (p->out_width - 1) * p->stride_width + (p->kernel_width - 1) * p->dilation_width + 1;
    g.plane = g.padded_rows * g.padded_width;
    g.floats = ortx_round_up(p->in_channels / p->group * g.plane, 16);
    return g;
}

void ortx_conv_planes_offsets(const ortx_conv_params *p, int32_t *pixel_offsets, int32_t *panel_offsets) {
    ortx_conv_planes_geometry g = ortx_conv_planes_geometry_of(p);
    const int64_t OW = p->out_width, N = p->out_height * OW, NR = ORTX_GEMM_NR;
    for (int64_t n = 0; n < N; n++)
        pixel_offsets[n] = (int32_t)(n / OW * p->stride_height * g.padded_width + n % OW * p->stride_width);
    for (int64_t n0 = 0; n0 < N; n0 += NR)
        panel_offsets[n0 / NR] = n0 % OW + NR <= OW ? pixel_offsets[n0] : -1;
}
