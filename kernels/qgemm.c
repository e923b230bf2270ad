/* Family "qgemm": int8 convolution and GEMM with int32 accumulation and fused requantization (issue #5).
 *
 * qconv2d_i8 runs Conv, Gemm and MatMul whose activations are uint8/int8 and whose weights are constant
 * symmetric int8 (arithmetic and packed layouts: kernels/qgemm.h):
 *   1. NCHW inputs that need padding or the int8 -> uint8 shift are first copied into padded uint8 planes (the pad
 *      value is the zero point), so the packing below never checks bounds;
 *   2. the output is cut into tasks of (image, group, block of NB pixels, chunk of MR-row weight panels); chunks
 *      split M only when there are too few pixel blocks to keep the threads busy (a classifier's one pixel);
 *   3. per task: pack the block's im2col columns as [K4][NB][4] uint8 (one quad of k per 32-bit lane), then for
 *      each weight panel run the ISA's micro-kernel over all of K (no K blocking: the int32 tile stays exact)
 *      and the ISA's epilogue (requantize or scale to float, residual, activation) straight into the output.
 * Direct mode (qgemm.h; KxK stride-1 dense convs): step 1 writes planes of channel quads instead, and step 3 packs
 * nothing: the micro-kernel reads each quad of k straight from the planes (9x less copying for 3x3 than im2col's
 * packing, which took ~27% of a 3x3 conv's time), and the epilogue skips the virtual pixels past out_width.
 * Integer sums are exact, so every ISA and every thread split gives the same bits; the epilogue's float steps
 * (int32 -> float, one multiply, round-half-even through the current rounding mode) are the same instructions'
 * semantics in C and SIMD.
 * Limits: depthwise and other grouped convs run (group loop) but slowly (K is tiny); the lowering declines them.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "activation.h"
#include "gemm.h"
#include "ortx_kernels.h"
#include "qgemm.h"
#include "threadpool.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* ISA choice: VNNI needs avx512vnni on top of the AVX-512 level dispatch.c selects; VBMI packing also avx512vbmi,
 * unless a test turned it off (qgemm_isa with ints[0] = 1) to check the unpack packing on the same CPU. */
static int vbmi_off = 0;

static const ortx_qgemm_isa *select_isa(void) {
    int isa = ortx_selected_isa();
#if defined(__x86_64__) || defined(__i386__)
    if (isa >= ORTX_ISA_AVX512 && __builtin_cpu_supports("avx512vnni")) {
        if (!vbmi_off && __builtin_cpu_supports("avx512vbmi")) return &ortx_qgemm_isa_avx512_vbmi;
        return &ortx_qgemm_isa_avx512_vnni;
    }
#endif
    if (isa >= ORTX_ISA_AVX2) return &ortx_qgemm_isa_avx2;
    return &ortx_qgemm_isa_portable;
}

float ortx_qconv_activation(const ortx_qconv_params *p, float value, float p0, float p1) {
    return ortx_activation_scalar((int)p->activation, value, p0, p1);
}

/* Portable pieces ------------------------------------------------------------------------------------------------ */

void ortx_qgemm_micro_portable(int64_t k4, const int8_t *a, const uint8_t *b, const int64_t *quad_offsets,
                               int32_t *acc) {
    const int MR = ORTX_QGEMM_MR, NB = ORTX_QGEMM_NB;
    memset(acc, 0, sizeof(int32_t) * MR * NB);
    for (int64_t q = 0; q < k4; q++) {
        const int8_t *aq = a + q * MR * 4;
        const uint8_t *bq = b + quad_offsets[q];
        for (int m = 0; m < MR; m++) {
            const int8_t *w = aq + m * 4;
            int32_t *row = acc + m * NB;
            for (int j = 0; j < NB; j++) {
                const uint8_t *x = bq + j * 4;
                row[j] += x[0] * w[0] + x[1] * w[1] + x[2] * w[2] + x[3] * w[3];
            }
        }
    }
}

void ortx_qgemm_sparse_micro_portable(const ortx_qsparse *w, int64_t panel, int64_t m0, int64_t rows,
                                      const uint8_t *b, int64_t block_stride, int64_t blocks,
                                      const int64_t *quad_offsets, int accumulate, int32_t *acc) {
    const int NB = ORTX_QGEMM_NB;
    const int32_t *row_ptr = w->row_ptr + panel * w->rows + m0;
    for (int64_t i = 0; i < blocks; i++)
        for (int64_t r = 0; r < rows; r++) {
            int32_t *row = acc + (i * ORTX_QGEMM_MR + r) * NB;
            if (!accumulate)
                for (int j = 0; j < NB; j++) row[j] = 0;
            for (int32_t e = row_ptr[r]; e < row_ptr[r + 1]; e++) {
                const int8_t *q = w->values + 4 * (int64_t)e;
                const uint8_t *bq = b + i * block_stride + quad_offsets[w->cols[e]];
                for (int j = 0; j < NB; j++) {
                    const uint8_t *x = bq + j * 4;
                    row[j] += x[0] * q[0] + x[1] * q[1] + x[2] * q[2] + x[3] * q[3];
                }
            }
        }
}

void ortx_qgemm_pack_run_portable(const uint8_t *const source[4], int64_t stride, int64_t count, int64_t readable,
                                  uint8_t *out) {
    (void)readable;
    ortx_qgemm_pack_scalar(source, stride, 0, count, out);
}

__attribute__((optimize("fp-contract=off"))) void ortx_qgemm_epilogue_portable(const ortx_qconv_params *p, const int32_t *acc, int64_t rows, int64_t cols, const int32_t *bias,
                     const float *multiplier, void *output, int64_t offset, const float *residual, float p0,
                     float p1) {
    float low = (float)(p->qmin - p->y_zero_point), high = (float)(p->qmax - p->y_zero_point);
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t j = 0; j < cols; j++) {
            int64_t index = offset + i * p->out_channel_stride + j * p->out_pixel_stride;
            float value = (float)(acc[i * ORTX_QGEMM_NB + j] + bias[i]) * multiplier[i];
            if (p->output_kind == 2) {
                if (residual) value += residual[index];
                ((float *)output)[index] = ortx_qconv_activation(p, value, p0, p1);
                continue;
            }
            value = value < low ? low : (value > high ? high : value);
            int32_t q = (int32_t)lrintf(value) + (int32_t)p->y_zero_point;
            if (p->output_kind == 0) ((uint8_t *)output)[index] = (uint8_t)q;
            else ((int8_t *)output)[index] = (int8_t)q;
        }
    }
}

void ortx_qdepthwise_row_portable(const ortx_qconv_params *p, const uint8_t *plane, int64_t plane_width,
                                  const int32_t *taps, int64_t oh, int32_t *acc) {
    for (int64_t ow = 0; ow < p->out_width; ow++) acc[ow] = 0;
    for (int64_t kh = 0; kh < p->kernel_height; kh++) {
        const uint8_t *row = plane + (oh * p->stride_height + kh * p->dilation_height) * plane_width;
        for (int64_t kw = 0; kw < p->kernel_width; kw++) {
            int32_t w = taps[kh * p->kernel_width + kw];
            const uint8_t *x = row + kw * p->dilation_width;
            for (int64_t ow = 0; ow < p->out_width; ow++) acc[ow] += (int32_t)x[ow * p->stride_width] * w;
        }
    }
}

const ortx_qgemm_isa ortx_qgemm_isa_portable = {.name = "portable", .micro = ortx_qgemm_micro_portable,
                                                .sparse_micro = ortx_qgemm_sparse_micro_portable,
                                                .pack_run = ortx_qgemm_pack_run_portable,
                                                .epilogue = ortx_qgemm_epilogue_portable,
                                                .depthwise_row = ortx_qdepthwise_row_portable};

/* Geometry ------------------------------------------------------------------------------------------------------- */

typedef struct geometry {
    int64_t cin_g, cout_g, K, k4, pixels, blocks, panels, m_chunks;
    int64_t span, units;  /* blocks per task (1; the sparse kernel ORTX_QSPARSE_SPAN) and tasks' block groups */
    int64_t plane_height, plane_width;  /* the planes packing reads: padded copies, or the input itself */
    int planes_copied, direct;
    int64_t planes_bytes, thread_bytes, packed_bytes;
    int64_t planes_end;  /* bytes packing may read from the start of the planes (copies have 64-byte slack) */
    int64_t tap_bytes;   /* the tap offset table (packing) and the quad offset table (micro-kernel) */
    int64_t image_bytes; /* direct mode: one image's channel-quad planes */
} geometry;

static geometry geometry_of(const ortx_qconv_params *p, int threads, int64_t span) {
    geometry g;
    g.span = span;
    g.cin_g = p->in_channels / p->group;
    g.cout_g = p->out_channels / p->group;
    g.K = p->input_kind == 1 ? p->in_channels : g.cin_g * p->kernel_height * p->kernel_width;
    g.k4 = (g.K + 3) / 4;
    g.pixels = p->input_kind == 1 ? p->out_width : p->out_height * p->out_width;
    g.blocks = (g.pixels + ORTX_QGEMM_NB - 1) / ORTX_QGEMM_NB;
    g.units = (g.blocks + span - 1) / span;
    g.panels = (g.cout_g + ORTX_QGEMM_MR - 1) / ORTX_QGEMM_MR;
    int64_t tasks = p->batch * p->group * g.units;
    g.m_chunks = tasks >= 2 * threads ? 1 : min64(g.panels, (2 * threads + tasks - 1) / tasks);
    g.plane_height = p->in_height;
    g.plane_width = p->in_width;
    g.planes_copied = 0;
    if (p->input_kind == 0) {
        int64_t need_h = (p->out_height - 1) * p->stride_height + (p->kernel_height - 1) * p->dilation_height + 1;
        int64_t need_w = (p->out_width - 1) * p->stride_width + (p->kernel_width - 1) * p->dilation_width + 1;
        g.plane_height = max64(p->in_height + p->pad_top, need_h);
        g.plane_width = max64(p->in_width + p->pad_left, need_w);
        g.planes_copied = p->input_signed || p->pad_top || p->pad_left || g.plane_height > p->in_height ||
                          g.plane_width > p->in_width;
        if (!g.planes_copied) g.plane_height = p->in_height, g.plane_width = p->in_width;
    }
    g.planes_bytes = g.planes_copied ? ortx_round_up(p->batch * p->in_channels * g.plane_height * g.plane_width, 64)
                                     : 0;
    g.planes_end = g.planes_copied ? g.planes_bytes : p->batch * p->in_channels * g.plane_height * g.plane_width;
    g.direct = ortx_qconv_direct(p);
    g.image_bytes = 0;
    if (g.direct) {  /* channel-quad planes; reads run past the last one by < NB + (KW-1)*DW pixels (qgemm.h) */
        g.k4 = ortx_qconv_depth_quads(p);
        g.pixels = p->out_height * g.plane_width;  /* virtual pixels */
        g.blocks = (g.pixels + ORTX_QGEMM_NB - 1) / ORTX_QGEMM_NB;
        g.units = (g.blocks + span - 1) / span;
        tasks = p->batch * g.units;
        g.m_chunks = tasks >= 2 * threads ? 1 : min64(g.panels, (2 * threads + tasks - 1) / tasks);
        g.planes_copied = 1;
        g.image_bytes = (p->in_channels + 3) / 4 * g.plane_height * g.plane_width * 4;
        g.planes_bytes = ortx_round_up(p->batch * g.image_bytes +
                                       4 * (ORTX_QGEMM_NB + (p->kernel_width - 1) * p->dilation_width) + 64, 64);
        g.planes_end = g.planes_bytes;
    }
    g.tap_bytes = ortx_round_up(8 * g.K, 64) + ortx_round_up(8 * g.k4, 64);
    /* per thread: the packed blocks (+ pack_run's 64-byte spill, into the next block or the tile), the tile of
     * span blocks, and 64 bytes that the epilogue's 16-lane loads may read past a tile row started mid-row (direct
     * mode) */
    g.packed_bytes = g.direct ? 0 : ortx_round_up(g.k4 * ORTX_QGEMM_NB * 4, 64);
    g.thread_bytes = span * (g.packed_bytes + 4 * ORTX_QGEMM_MR * ORTX_QGEMM_NB) + 128;
    if (span > 1)  /* the sparse kernel's tile holds every row panel of the task's chunk (sums between K panels) */
        g.thread_bytes = span * (g.packed_bytes + 4 * g.panels * ORTX_QGEMM_MR * ORTX_QGEMM_NB) + 128;
    return g;
}

static int64_t workspace_bytes(const ortx_qconv_params *p, int64_t span) {
    int threads = (int)max64(1, p->num_threads);
    geometry g = geometry_of(p, threads, span);
    return g.planes_bytes + g.tap_bytes + threads * g.thread_bytes + 64;
}

/* Step 1: padded uint8 planes ------------------------------------------------------------------------------------ */

typedef struct job {
    const ortx_qconv_params *p;
    const ortx_qgemm_isa *isa;
    geometry g;
    const uint8_t *x;        /* the input's bytes */
    const uint8_t *planes;   /* what packing reads: the copied planes or x */
    uint8_t *planes_out;
    uint8_t mask;            /* xor applied while packing (int8 input read in place: matrix input) */
    uint8_t zero_u;          /* the input zero point as uint8 */
    const int8_t *weights;
    const ortx_qsparse *sparse; /* sparse_qconv2d_i8: the CSR weights (weights unused); NULL for the dense kernel */
    const int32_t *bias;
    const float *multiplier;
    void *output;
    const float *residual;
    float p0, p1;
    uint8_t *thread_space;
    const int64_t *tap_offsets;  /* image inputs: byte offset of k's tap in its group's planes, k < K */
    const int64_t *quad_offsets; /* the micro-kernel's: quad q of B at + quad_offsets[q] */
} job;

static void fill_planes(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const job *j = context;
    const ortx_qconv_params *p = j->p;
    int64_t height = j->g.plane_height, width = j->g.plane_width;
    uint8_t mask = p->input_signed ? 0x80 : 0;
    for (int64_t plane = begin; plane < end; plane++) {
        uint8_t *out = j->planes_out + plane * height * width;
        const uint8_t *in = j->x + plane * p->in_height * p->in_width;
        for (int64_t row = 0; row < height; row++) {
            uint8_t *line = out + row * width;
            int64_t source_row = row - p->pad_top;
            if (source_row < 0 || source_row >= p->in_height) {
                memset(line, j->zero_u, (size_t)width);
                continue;
            }
            int64_t left = min64(p->pad_left, width), right = min64(width, p->pad_left + p->in_width);
            memset(line, j->zero_u, (size_t)left);
            const uint8_t *source = in + source_row * p->in_width - p->pad_left;
            if (mask) {
                for (int64_t column = left; column < right; column++) line[column] = source[column] ^ mask;
            } else {
                memcpy(line + left, source + left, (size_t)(right - left));
            }
            if (right < width) memset(line + right, j->zero_u, (size_t)(width - right));
        }
    }
}

/* Direct mode: planes of channel quads, (image, quad) planes [begin, end), rows interleaved by the ISA's pack_run
 * (read exactly: no spill past the row). Missing channels of the last quad read as 0 (their weights are 0). */
static void fill_quad_planes(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const job *j = context;
    const ortx_qconv_params *p = j->p;
    int64_t height = j->g.plane_height, width = j->g.plane_width, quads = (p->in_channels + 3) / 4;
    int64_t right = p->pad_left + p->in_width;
    for (int64_t plane = begin; plane < end; plane++) {
        int64_t n = plane / quads, cq = plane % quads;
        uint8_t *out = j->planes_out + plane * height * width * 4;
        for (int64_t row = 0; row < height; row++) {
            uint8_t *line = out + row * width * 4;
            int64_t source_row = row - p->pad_top;
            if (source_row < 0 || source_row >= p->in_height) {
                memset(line, j->zero_u, (size_t)(width * 4));
                continue;
            }
            memset(line, j->zero_u, (size_t)(p->pad_left * 4));
            const uint8_t *source[4];
            for (int i = 0; i < 4; i++) {
                int64_t c = 4 * cq + i;
                source[i] = c < p->in_channels ? j->x + ((n * p->in_channels + c) * p->in_height + source_row) *
                            p->in_width : NULL;
            }
            uint8_t *interior = line + p->pad_left * 4;
            j->isa->pack_run(source, 1, p->in_width, p->in_width, interior);
            if (j->mask)
                for (int64_t b = 0; b < p->in_width * 4; b++) interior[b] ^= j->mask;
            memset(line + right * 4, j->zero_u, (size_t)((width - right) * 4));
        }
    }
}

/* Step 3a: one block's packed columns ---------------------------------------------------------------------------- */

static void pack_image_block(const job *j, int64_t n, int64_t group, int64_t p0, int64_t cols, uint8_t *dst) {
    const ortx_qconv_params *p = j->p;
    const geometry *g = &j->g;
    const int NB = ORTX_QGEMM_NB;
    int64_t plane = g->plane_height * g->plane_width;
    const uint8_t *image = j->planes + (n * p->in_channels + group * g->cin_g) * plane;
    /* the block's runs along output rows: at most NB, found once for every k */
    int64_t run_offset[ORTX_QGEMM_NB], run_start[ORTX_QGEMM_NB], run_length[ORTX_QGEMM_NB], runs = 0;
    for (int64_t oh = p0 / p->out_width, ow = p0 % p->out_width, done = 0; done < cols; ow = 0, oh++, runs++) {
        run_length[runs] = min64(p->out_width - ow, cols - done);
        run_offset[runs] = oh * p->stride_height * g->plane_width + ow * p->stride_width;
        run_start[runs] = done;
        done += run_length[runs];
    }
    const uint8_t *end = j->planes + g->planes_end;
    for (int64_t q = 0; q < g->k4; q++) {
        const uint8_t *source[4];
        for (int i = 0; i < 4; i++) source[i] = 4 * q + i < g->K ? image + j->tap_offsets[4 * q + i] : NULL;
        uint8_t *out = dst + q * NB * 4;
        for (int64_t r = 0; r < runs; r++) {
            const uint8_t *run_source[4];
            int64_t readable = INT64_MAX;
            for (int i = 0; i < 4; i++) {
                run_source[i] = source[i] ? source[i] + run_offset[r] : NULL;
                if (source[i]) readable = min64(readable, end - run_source[i]);
            }
            j->isa->pack_run(run_source, p->stride_width, run_length[r], readable, out + run_start[r] * 4);
        }
    }
}

/* Matrix input: pixel j's quad q is bytes 4q..4q+3 of its row (zero past K), xor the int8 shift. */
static void pack_matrix_block(const job *j, int64_t p0, int64_t cols, uint8_t *dst) {
    const geometry *g = &j->g;
    const int NB = ORTX_QGEMM_NB;
    int64_t K = g->K, full = K / 4;
    uint32_t mask = j->mask * 0x01010101u;
    for (int64_t t = 0; t < cols; t++) {
        const uint8_t *row = j->x + (p0 + t) * K;
        for (int64_t q = 0; q < full; q++) {
            uint32_t quad;
            memcpy(&quad, row + 4 * q, 4);
            quad ^= mask;
            memcpy(dst + (q * NB + t) * 4, &quad, 4);
        }
        if (full < g->k4) {
            uint8_t *out = dst + (full * NB + t) * 4;
            for (int i = 0; i < 4; i++) out[i] = 4 * full + i < K ? row[4 * full + i] ^ j->mask : 0;
        }
    }
    for (int64_t q = 0; q < g->k4 && cols < NB; q++) memset(dst + (q * NB + cols) * 4, 0, (size_t)(NB - cols) * 4);
    /* (image blocks leave columns past `cols` as they are: each column's sums are its own, and those are never
     * stored) */
}

/* Steps 2-3: one task ---------------------------------------------------------------------------------------------- */

/* One block's runs of real output pixels: (tile column, output pixel, length); one unless direct mode, whose
 * virtual pixels past out_width are dropped. */
typedef struct block_runs {
    int64_t column[ORTX_QGEMM_NB], pixel[ORTX_QGEMM_NB], length[ORTX_QGEMM_NB], count;
} block_runs;

static void runs_of_block(const job *j, int64_t p0, int64_t cols, block_runs *runs) {
    const ortx_qconv_params *p = j->p;
    const geometry *g = &j->g;
    runs->count = 0;
    if (!g->direct) {
        runs->column[0] = 0, runs->pixel[0] = p0, runs->length[0] = cols, runs->count = 1;
        return;
    }
    for (int64_t v = p0; v < p0 + cols;) {
        int64_t oh = v / g->plane_width, ow = v % g->plane_width;
        int64_t length = min64(g->plane_width - ow, p0 + cols - v);
        if (ow < p->out_width) {
            runs->column[runs->count] = v - p0;
            runs->pixel[runs->count] = oh * p->out_width + ow;
            runs->length[runs->count++] = min64(length, p->out_width - ow);
        }
        v += length;
    }
}

static void run_task(void *context, int64_t task, int thread_index) {
    const job *j = context;
    const ortx_qconv_params *p = j->p;
    const geometry *g = &j->g;
    int64_t chunk = task % g->m_chunks, rest = task / g->m_chunks;
    int64_t unit = rest % g->units;
    rest /= g->units;
    int64_t group = rest % p->group, n = rest / p->group;
    int64_t first_block = unit * g->span, blocks = min64(g->span, g->blocks - first_block);
    uint8_t *packed = j->thread_space + thread_index * g->thread_bytes;
    int32_t *tile = (int32_t *)(packed + g->span * g->packed_bytes);
    /* block i's B: packed + i * block_stride, or (direct mode) the planes at its first virtual pixel */
    const uint8_t *b = g->direct ? j->planes + n * g->image_bytes + first_block * ORTX_QGEMM_NB * 4 : packed;
    int64_t block_stride = g->direct ? ORTX_QGEMM_NB * 4 : g->packed_bytes;
    block_runs runs[ORTX_QSPARSE_SPAN];
    for (int64_t i = 0; i < blocks; i++) {
        int64_t p0 = (first_block + i) * ORTX_QGEMM_NB, cols = min64(ORTX_QGEMM_NB, g->pixels - p0);
        if (!g->direct && p->input_kind == 1) pack_matrix_block(j, n * g->pixels + p0, cols, packed + i * block_stride);
        else if (!g->direct) pack_image_block(j, n, group, p0, cols, packed + i * block_stride);
        runs_of_block(j, p0, cols, &runs[i]);
    }
    int64_t first = chunk * g->panels / g->m_chunks, last = (chunk + 1) * g->panels / g->m_chunks;
    int64_t panel_bytes = g->k4 * ORTX_QGEMM_MR * 4, tile_ints = ORTX_QGEMM_MR * ORTX_QGEMM_NB;
    if (j->sparse) {  /* every row panel over one K panel of B, then the next (qgemm.h), then the epilogues */
        for (int64_t k_panel = 0; k_panel < ortx_qsparse_panels(g->k4); k_panel++)
            for (int64_t panel = first; panel < last; panel++) {
                int64_t m0 = group * g->cout_g + panel * ORTX_QGEMM_MR;
                int64_t rows = min64(ORTX_QGEMM_MR, g->cout_g - panel * ORTX_QGEMM_MR);
                j->isa->sparse_micro(j->sparse, k_panel, m0, rows, b, block_stride, blocks, j->quad_offsets,
                                     k_panel > 0, tile + (panel - first) * g->span * tile_ints);
            }
    }
    for (int64_t panel = first; panel < last; panel++) {
        int64_t m0 = group * g->cout_g + panel * ORTX_QGEMM_MR;
        int64_t rows = min64(ORTX_QGEMM_MR, g->cout_g - panel * ORTX_QGEMM_MR);
        int32_t *tiles = tile;
        if (j->sparse) tiles = tile + (panel - first) * g->span * tile_ints;
        else j->isa->micro(g->k4, j->weights + (group * g->panels + panel) * panel_bytes, b, j->quad_offsets, tile);
        for (int64_t i = 0; i < blocks; i++)
            for (int64_t r = 0; r < runs[i].count; r++)
                j->isa->epilogue(p, tiles + i * tile_ints + runs[i].column[r], rows, runs[i].length[r], j->bias + m0,
                                 j->multiplier + m0, j->output, ortx_qconv_output_index(p, n, m0, runs[i].pixel[r]),
                                 j->residual, j->p0, j->p1);
    }
}

/* qconv2d_i8: ints ORTX_QCONV_INTS (qgemm.h's ortx_qconv_params, in order); floats: activation p0, p1;
 * buffers: 0 x (uint8/int8), 1 packed weights, 2 bias_eff int32 [Cout], 3 multiplier f32 [Cout], 4 output,
 * 5 workspace (qconv_sizes_i8), 6 residual (float output with has_residual). */
static void run_qconv(const int64_t *ints, const float *floats, void *const *buffers, int num_threads,
                      const ortx_qsparse *sparse) {
    ortx_qconv_params p = ortx_qconv_params_read(ints);
    int threads = (int)max64(1, min64(num_threads, max64(1, p.num_threads)));
    job j;
    j.p = &p;
    j.isa = select_isa();
    j.g = geometry_of(&p, (int)max64(1, p.num_threads), sparse ? ORTX_QSPARSE_SPAN : 1);
    j.x = buffers[0];
    j.weights = buffers[1];
    j.sparse = sparse;
    j.bias = buffers[2];
    j.multiplier = buffers[3];
    j.output = buffers[4];
    j.residual = p.output_kind == 2 && p.has_residual ? buffers[6] : NULL;
    j.p0 = floats[0];
    j.p1 = floats[1];
    j.zero_u = (uint8_t)(p.x_zero_point + (p.input_signed ? 128 : 0));
    j.mask = p.input_signed ? 0x80 : 0;
    uint8_t *workspace = (uint8_t *)(((uintptr_t)buffers[5] + 63) & ~(uintptr_t)63);
    j.planes_out = workspace;
    int64_t *tap_offsets = (int64_t *)(workspace + j.g.planes_bytes);
    int64_t *quad_offsets = (int64_t *)(workspace + j.g.planes_bytes + ortx_round_up(8 * j.g.K, 64));
    j.tap_offsets = tap_offsets;
    j.quad_offsets = quad_offsets;
    j.thread_space = workspace + j.g.planes_bytes + j.g.tap_bytes;
    int64_t area = p.kernel_height * p.kernel_width;
    for (int64_t q = 0; q < j.g.k4; q++) {
        int64_t cq = q / area, tap = q % area, kh = tap / p.kernel_width, kw = tap % p.kernel_width;
        quad_offsets[q] = !j.g.direct ? q * ORTX_QGEMM_NB * 4 :
                          (cq * j.g.plane_height * j.g.plane_width + kh * p.dilation_height * j.g.plane_width +
                           kw * p.dilation_width) * 4;
    }
    if (j.g.direct) {
        ortx_parallel_range(threads, p.batch * ((p.in_channels + 3) / 4), (int64_t)ORTX_TASKS_PER_THREAD * threads,
                            fill_quad_planes, &j);
        j.planes = j.planes_out;
    } else if (p.input_kind == 0) {
        int64_t plane = j.g.plane_height * j.g.plane_width;
        for (int64_t k = 0; k < j.g.K; k++) {
            int64_t c = k / area, r = k % area, kh = r / p.kernel_width, kw = r % p.kernel_width;
            tap_offsets[k] = c * plane + kh * p.dilation_height * j.g.plane_width + kw * p.dilation_width;
        }
    }
    if (!j.g.direct) j.planes = j.x;
    if (j.g.planes_copied && !j.g.direct) {
        ortx_parallel_range(threads, p.batch * p.in_channels, (int64_t)ORTX_TASKS_PER_THREAD * threads, fill_planes,
                            &j);
        j.planes = j.planes_out;
    }
    int64_t tasks = p.batch * p.group * j.g.units * j.g.m_chunks;
    ortx_parallel_for(threads, tasks, run_task, &j);
}

static void qconv2d_i8(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    run_qconv(ints, floats, buffers, num_threads, NULL);
}

/* sparse_qconv2d_i8 (issue #9): qconv2d_i8 with the weights as quad CSR (qgemm.h's ortx_qsparse) instead of packed
 * panels; the same ints, workspace (qconv_sizes_i8) and arithmetic, so the same bits. Buffers: 0 x, 1 values
 * (int8 [4 * stored quads]), 2 bias_eff, 3 multiplier, 4 output, 5 workspace, 6 residual, 7 cols (int32 [stored
 * quads]), 8 row_ptr (int32 [Cout + 1]). */
static void sparse_qconv2d_i8(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    ortx_qsparse sparse = {.values = buffers[1], .cols = buffers[7], .row_ptr = buffers[8], .rows = ints[4]};
    run_qconv(ints, floats, buffers, num_threads, &sparse);
}

/* qdepthwise2d_i8: qconv2d_i8's ints and buffers for group == in == out channels (weights in qgemm.h's packed
 * layout, one row per group: tap k of channel c at c * K4*MR*4 + (k/4)*MR*4 + k%4; the same oracle). Tasks are
 * (image, channel) planes: copy the plane padded with the zero point into the thread's workspace, then per output
 * row the ISA's depthwise_row, and one epilogue call for the whole plane's sums (NCHW output: the plane's pixels
 * are contiguous; one call per row otherwise; per-row calls cost a third of the epilogue's time at 56x56). */
typedef struct depthwise_job {
    const ortx_qconv_params *p;
    const ortx_qgemm_isa *isa;
    const uint8_t *x;
    const int8_t *weights;
    const int32_t *bias;
    const float *multiplier;
    void *output;
    const float *residual;
    float p0, p1;
    uint8_t *thread_space;
    int64_t plane_height, plane_width, thread_bytes, k4;
} depthwise_job;

static void depthwise_geometry(const ortx_qconv_params *p, int64_t *height, int64_t *width, int64_t *thread_bytes) {
    *height = max64(p->in_height + p->pad_top,
                    (p->out_height - 1) * p->stride_height + (p->kernel_height - 1) * p->dilation_height + 1);
    *width = max64(p->in_width + p->pad_left,
                   (p->out_width - 1) * p->stride_width + (p->kernel_width - 1) * p->dilation_width + 1);
    /* plane + 64 bytes of read slack, then the taps and the plane's int32 sums (+ 16 lanes of slack) */
    *thread_bytes = ortx_round_up(*height * *width + 64, 64) + 4 * ortx_round_up(p->kernel_height * p->kernel_width, 16)
                    + 4 * ortx_round_up(p->out_height * p->out_width + 16, 16);
}

static void depthwise_plane(void *context, int64_t task, int thread_index) {
    const depthwise_job *j = context;
    const ortx_qconv_params *p = j->p;
    int64_t c = task % p->in_channels, n = task / p->in_channels;
    uint8_t *plane = j->thread_space + thread_index * j->thread_bytes;
    int32_t *taps = (int32_t *)(plane + ortx_round_up(j->plane_height * j->plane_width + 64, 64));
    int32_t *acc = taps + ortx_round_up(p->kernel_height * p->kernel_width, 16);
    uint8_t mask = p->input_signed ? 0x80 : 0, zero_u = (uint8_t)(p->x_zero_point + (p->input_signed ? 128 : 0));
    const uint8_t *in = j->x + (n * p->in_channels + c) * p->in_height * p->in_width;
    int copied = ortx_selected_isa() >= ORTX_ISA_AVX512 &&
                 ortx_qdepthwise_pad_plane_avx512(in, p->in_height, p->in_width, p->pad_top, p->pad_left,
                                                  j->plane_height, j->plane_width, zero_u, mask, plane);
    for (int64_t row = 0; !copied && row < j->plane_height; row++) {
        uint8_t *line = plane + row * j->plane_width;
        int64_t source_row = row - p->pad_top;
        if (source_row < 0 || source_row >= p->in_height) {
            memset(line, zero_u, (size_t)j->plane_width);
            continue;
        }
        int64_t left = min64(p->pad_left, j->plane_width), right = min64(j->plane_width, p->pad_left + p->in_width);
        memset(line, zero_u, (size_t)left);
        const uint8_t *source = in + source_row * p->in_width - p->pad_left;
        if (mask) {
            for (int64_t column = left; column < right; column++) line[column] = source[column] ^ mask;
        } else {
            memcpy(line + left, source + left, (size_t)(right - left));
        }
        if (right < j->plane_width) memset(line + right, zero_u, (size_t)(j->plane_width - right));
    }
    memset(plane + j->plane_height * j->plane_width, zero_u, 64);
    int64_t area = p->kernel_height * p->kernel_width;
    const int8_t *w = j->weights + c * j->k4 * ORTX_QGEMM_MR * 4;
    for (int64_t k = 0; k < area; k++) taps[k] = w[(k / 4) * ORTX_QGEMM_MR * 4 + k % 4];
    int whole_plane = p->out_pixel_stride == 1;
    int done = whole_plane && j->isa->depthwise_plane && j->isa->depthwise_plane(p, plane, j->plane_width, taps, acc);
    for (int64_t oh = 0; !done && oh < p->out_height; oh++) {
        int32_t *row = whole_plane ? acc + oh * p->out_width : acc;  /* a row's 16-lane spill lands on the next */
        j->isa->depthwise_row(p, plane, j->plane_width, taps, oh, row);
        if (!whole_plane)
            j->isa->epilogue(p, row, 1, p->out_width, j->bias + c, j->multiplier + c, j->output,
                             ortx_qconv_output_index(p, n, c, oh * p->out_width), j->residual, j->p0, j->p1);
    }
    if (whole_plane)
        j->isa->epilogue(p, acc, 1, p->out_height * p->out_width, j->bias + c, j->multiplier + c, j->output,
                         ortx_qconv_output_index(p, n, c, 0), j->residual, j->p0, j->p1);
}

static void qdepthwise2d_i8(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    ortx_qconv_params p = ortx_qconv_params_read(ints);
    int threads = (int)max64(1, min64(num_threads, max64(1, p.num_threads)));
    depthwise_job j;
    j.p = &p;
    j.isa = select_isa();
    j.x = buffers[0];
    j.weights = buffers[1];
    j.bias = buffers[2];
    j.multiplier = buffers[3];
    j.output = buffers[4];
    j.residual = p.output_kind == 2 && p.has_residual ? buffers[6] : NULL;
    j.p0 = floats[0];
    j.p1 = floats[1];
    j.k4 = (p.kernel_height * p.kernel_width + 3) / 4;
    depthwise_geometry(&p, &j.plane_height, &j.plane_width, &j.thread_bytes);
    j.thread_space = (uint8_t *)(((uintptr_t)buffers[5] + 63) & ~(uintptr_t)63);
    ortx_parallel_for(threads, p.batch * p.in_channels, depthwise_plane, &j);
}

/* qconv_sizes_i8: ints as qconv2d_i8; buffers: 0 int64[4] out: workspace bytes, packed weight bytes, the
 * workspace bytes of sparse_qconv2d_i8 (its tasks hold ORTX_QSPARSE_SPAN blocks) and its quads per K panel. */
static void qconv_sizes_i8(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    ortx_qconv_params p = ortx_qconv_params_read(ints);
    geometry g = geometry_of(&p, (int)max64(1, p.num_threads), 1);
    int64_t *out = buffers[0];
    out[0] = workspace_bytes(&p, 1);
    out[2] = workspace_bytes(&p, ORTX_QSPARSE_SPAN);
    out[3] = ORTX_QSPARSE_PANEL_QUADS;
    if (p.group > 1 && p.group == p.in_channels && p.group == p.out_channels && p.input_kind == 0) {
        int64_t height, width, thread_bytes;
        depthwise_geometry(&p, &height, &width, &thread_bytes);
        out[0] = max64(out[0], max64(1, p.num_threads) * thread_bytes + 64);
    }
    out[1] = p.group * g.panels * g.k4 * ORTX_QGEMM_MR * 4;
}

/* qconv_pack_weights_i8: ints as qconv2d_i8; buffers: 0 int8 weights [groups][M/groups][K] (Conv: K ordered
 * (channel, kh, kw); Gemm: [M][K]), 1 packed int8 (qconv_sizes_i8's size). The one writer of qgemm.h's weight
 * layout, including direct mode's K order. */
static void qconv_pack_weights_i8(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    ortx_qconv_params p = ortx_qconv_params_read(ints);
    int64_t groups = p.group, M = p.out_channels / groups;
    int64_t area = p.input_kind == 1 ? 1 : p.kernel_height * p.kernel_width;
    int64_t K = (p.input_kind == 1 ? p.in_channels : p.in_channels / groups) * area;
    const int8_t *weights = buffers[0];
    int8_t *packed = buffers[1];
    int64_t k4 = ortx_qconv_depth_quads(&p), panels = (M + ORTX_QGEMM_MR - 1) / ORTX_QGEMM_MR;
    int64_t panel_bytes = k4 * ORTX_QGEMM_MR * 4;
    memset(packed, 0, (size_t)(groups * panels * panel_bytes));
    for (int64_t g = 0; g < groups; g++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t k = 0; k < K; k++) {
                int64_t packed_k = ortx_qconv_weight_k(&p, k / area, k % area);
                packed[(g * panels + m / ORTX_QGEMM_MR) * panel_bytes + (packed_k / 4) * ORTX_QGEMM_MR * 4 +
                       (m % ORTX_QGEMM_MR) * 4 + packed_k % 4] = weights[(g * M + m) * K + k];
            }
}

void ortx_quantize_linear(const float *x, int64_t count, float scale, float low, float high, int32_t zero,
                          int is_signed, void *y) {
    int64_t i = ortx_selected_isa() >= ORTX_ISA_AVX512 ? ortx_quantize_avx512(x, count, scale, low, high, zero, y) : 0;
    for (; i < count; i++) {
        float value = x[i] / scale;
        value = value >= low ? value : low;  /* NaN -> low, as MLAS's max */
        value = value <= high ? value : high;
        int32_t q = (int32_t)lrintf(value) + zero;
        if (is_signed) ((int8_t *)y)[i] = (int8_t)q;
        else ((uint8_t *)y)[i] = (uint8_t)q;
    }
}

void ortx_dequantize_linear(const void *q, int64_t count, int kind, int32_t zero, float scale, float *y) {
    int64_t i = kind < 2 && ortx_selected_isa() >= ORTX_ISA_AVX512 ?
                ortx_dequantize_avx512(q, count, kind, zero, scale, y) : 0;
    if (kind == 0) {
        const uint8_t *u = q;
        for (; i < count; i++) y[i] = (float)((int32_t)u[i] - zero) * scale;
    } else if (kind == 1) {
        const int8_t *s = q;
        for (; i < count; i++) y[i] = (float)((int32_t)s[i] - zero) * scale;
    } else {
        const int32_t *w = q;
        for (; i < count; i++) y[i] = (float)(w[i] - zero) * scale;
    }
}

/* quantize_linear_f32: ints [count, zero_point, qmin, qmax, signed output]; floats [scale]; buffers: x f32, y.
 * y = clamp(round_half_even(x / scale), qmin - zp, qmax - zp) + zp, as ORT's MLAS (divide, clamp, round). */
static void quantize_linear_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    ortx_quantize_linear(buffers[0], ints[0], floats[0], (float)(ints[2] - ints[1]), (float)(ints[3] - ints[1]),
                         (int32_t)ints[1], (int)ints[4], buffers[1]);
}

/* dequantize_linear_f32: ints [count, zero_point, input kind 0 uint8 / 1 int8 / 2 int32]; floats [scale];
 * buffers: q, y f32. y = float(q - zp) * scale. */
static void dequantize_linear_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    ortx_dequantize_linear(buffers[0], ints[0], (int)ints[2], (int32_t)ints[1], floats[0], buffers[1]);
}

/* qgemm_isa (tests): ints [VBMI packing off (0/1)]; buffers 0 int64[1] out: what qconv2d_i8 runs now: 0 portable,
 * 1 avx2, 2 avx512 VNNI, 3 avx512 VNNI with VBMI packing. Not thread-safe: tests only. */
static void qgemm_isa(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    vbmi_off = (int)ints[0];
    const ortx_qgemm_isa *isa = select_isa();
    ((int64_t *)buffers[0])[0] = isa == &ortx_qgemm_isa_avx512_vbmi ? 3 : isa == &ortx_qgemm_isa_avx512_vnni ? 2 :
                                 isa == &ortx_qgemm_isa_avx2 ? 1 : 0;
}

const ortx_kernel_entry ortx_family_qgemm[] = {
    {"qconv2d_i8", qconv2d_i8, ortx_qconv2d_i8_ref},
    {"sparse_qconv2d_i8", sparse_qconv2d_i8, ortx_sparse_qconv2d_i8_ref},
    {"qdepthwise2d_i8", qdepthwise2d_i8, ortx_qconv2d_i8_ref},
    {"qconv_sizes_i8", qconv_sizes_i8, qconv_sizes_i8},
    {"qconv_pack_weights_i8", qconv_pack_weights_i8, qconv_pack_weights_i8},
    {"quantize_linear_f32", quantize_linear_f32, quantize_linear_f32},
    {"dequantize_linear_f32", dequantize_linear_f32, dequantize_linear_f32},
    {"qgemm_isa", qgemm_isa, qgemm_isa},
    {NULL, NULL, NULL},
};
