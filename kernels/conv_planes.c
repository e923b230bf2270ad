/* Zero-padded input planes and the patch matrix's packed B panels built from them (conv.c Case 1 and
 * conv_pixel_rows.c).
 *
 * A group's input is copied once per call into planes of padded_rows x padded_width per channel, holding
 * x[r - pad_top][j - pad_left] or 0, large enough that every tap of every output pixel lands inside. Patch-matrix
 * element (k = (c, ky, kx), pixel n = (oy, ox)) is then planes[tap_offset(k) + pixel_offset(n)] with no bounds
 * checks, and with stride 1 a 16-pixel panel inside one output row is 16 contiguous floats: packing a KC x NC
 * block of B is one 64-byte copy per panel row, where building each row from the unpadded input (clipping every
 * output row against the image) cost ~1 cycle per float, a fifth of a 64-channel 3x3 conv's time.
 * Limit: the planes are an extra copy of the input (Cin/g * padded area floats of workspace).
 */
#include <string.h>

#include "conv.h"
#include "gemm.h"
#include "threadpool.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

ortx_conv_planes_geometry ortx_conv_planes_geometry_of(const ortx_conv_params *p) {
    ortx_conv_planes_geometry g;
    g.padded_rows = (p->out_height - 1) * p->stride_height + (p->kernel_height - 1) * p->dilation_height + 1;
    g.padded_width = (p->out_width - 1) * p->stride_width + (p->kernel_width - 1) * p->dilation_width + 1;
    g.plane = g.padded_rows * g.padded_width;
    g.floats = ortx_round_up(p->in_channels / p->group * g.plane, 16);
    return g;
}

void ortx_conv_fill_planes(const ortx_conv_params *p, const float *x, float *planes, int64_t begin, int64_t end) {
    ortx_conv_planes_geometry g = ortx_conv_planes_geometry_of(p);
    const int64_t H = p->in_height, W = p->in_width, width = g.padded_width;
    /* input columns [first, last) land inside the plane row */
    int64_t first = min64(W, max64(0, -p->pad_left)), last = max64(first, min64(W, width - p->pad_left));
    for (int64_t c = begin; c < end; c++) {
        const float *channel = x + c * H * W;
        float *out = planes + c * g.plane;
        for (int64_t r = 0; r < g.padded_rows; r++, out += width) {
            int64_t iy = r - p->pad_top;
            if (iy < 0 || iy >= H || first >= last) {
                memset(out, 0, width * sizeof(float));
                continue;
            }
            int64_t lo = first + p->pad_left, hi = last + p->pad_left;
            memset(out, 0, lo * sizeof(float));
            memcpy(out + lo, channel + iy * W + first, (hi - lo) * sizeof(float));
            memset(out + hi, 0, (width - hi) * sizeof(float));
        }
    }
}

void ortx_conv_planes_offsets(const ortx_conv_params *p, int32_t *pixel_offsets, int32_t *panel_offsets) {
    ortx_conv_planes_geometry g = ortx_conv_planes_geometry_of(p);
    const int64_t OW = p->out_width, N = p->out_height * OW, NR = ORTX_GEMM_NR;
    for (int64_t n = 0; n < N; n++)
        pixel_offsets[n] = (int32_t)(n / OW * p->stride_height * g.padded_width + n % OW * p->stride_width);
    for (int64_t n0 = 0; n0 < N; n0 += NR)
        panel_offsets[n0 / NR] = n0 % OW + NR <= OW ? pixel_offsets[n0] : -1;
}

/* ortx_gemm_pack_b_fn; n0 is a multiple of NR (ortx_sgemm's column blocks start on panels). */
int64_t ortx_conv_planes_source_floats(const ortx_conv_params *p) {
    int64_t N = p->out_height * p->out_width;
    return ortx_conv_planes_geometry_of(p).floats + ortx_round_up(N + N / ORTX_GEMM_NR + 1, 16);
}

typedef struct fill_job {
    const ortx_conv_params *p;
    const float *x;
    float *planes;
} fill_job;

static void fill_channels(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const fill_job *job = context;
    ortx_conv_fill_planes(job->p, job->x, job->planes, begin, end);
}

void ortx_conv_fill_planes_parallel(const ortx_conv_params *p, const float *x, float *planes, int threads) {
    threads = threads < 1 ? 1 : threads;
    fill_job fill = {p, x, planes};
    ortx_parallel_range(threads, p->in_channels / p->group, (int64_t)ORTX_TASKS_PER_THREAD * threads, fill_channels,
                        &fill);
}

void ortx_conv_planes_context_init(ortx_conv_planes_context *context, const ortx_conv_params *params, float *scratch) {
    int64_t N = params->out_height * params->out_width;
    context->params = params;
    context->geometry = ortx_conv_planes_geometry_of(params);
    context->planes = scratch;
    int32_t *pixel_offsets = (int32_t *)(scratch + context->geometry.floats);
    context->pixel_offsets = pixel_offsets;
    context->panel_offsets = pixel_offsets + N;
    ortx_conv_planes_offsets(params, pixel_offsets, pixel_offsets + N);
}

void ortx_conv_planes_pack_b(const void *context, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst) {
    const ortx_conv_planes_context *ctx = context;
    const ortx_conv_params *p = ctx->params;
    const int64_t NR = ORTX_GEMM_NR, area = p->kernel_height * p->kernel_width;
    const int64_t N = p->out_height * p->out_width, width = ctx->geometry.padded_width, sw = p->stride_width;
    int64_t channel = k0 / area, tap = k0 % area;
    for (int64_t k = 0; k < kc; k++) {
        const float *in = ctx->planes + channel * ctx->geometry.plane +
                          tap / p->kernel_width * p->dilation_height * width + tap % p->kernel_width * p->dilation_width;
        for (int64_t j0 = 0; j0 < nc; j0 += NR) {
            int64_t n = n0 + j0;
            float *out = dst + j0 * kc + k * NR;
            int32_t base = ctx->panel_offsets[n / NR];
            if (base >= 0 && j0 + NR <= nc && sw == 1) {
                memcpy(out, in + base, NR * sizeof(float));
            } else if (base >= 0 && j0 + NR <= nc && sw == 2) {  /* a constant stride the compiler vectorises */
                for (int64_t j = 0; j < NR; j++) out[j] = in[base + 2 * j];
            } else if (base >= 0 && j0 + NR <= nc) {
                for (int64_t j = 0; j < NR; j++) out[j] = in[base + j * sw];
            } else if (j0 + NR <= nc && n + NR <= N) {  /* crosses an output row end */
                const int32_t *offsets = ctx->pixel_offsets + n;
                for (int64_t j = 0; j < NR; j++) out[j] = in[offsets[j]];
            } else {
                for (int64_t j = 0; j < NR; j++)
                    out[j] = j0 + j < nc && n + j < N ? in[ctx->pixel_offsets[n + j]] : 0.0f;
            }
        }
        if (++tap == area) {
            tap = 0;
            channel++;
        }
    }
}
