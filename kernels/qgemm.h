/* Internal interface of the int8 convolution / GEMM (family "qgemm", kernels/qgemm.c).
 *
 * Arithmetic (the one definition; ortx/quantization/integer.py is its numpy twin and the tests' oracle):
 *   acc[m, p]  = sum_k (ux[k, p] - zx_u) * w[m, k] + bias[m]                       (int32, exact)
 *              = sum_k ux[k, p] * w[m, k] + bias_eff[m],  bias_eff = bias - zx_u * sum_k w[m, k]
 *   quantized output:  y = clamp(round_half_even(float(acc) * multiplier[m]), qmin - zy, qmax - zy) + zy
 *   float output:      y = act(float(acc) * multiplier[m] (+ residual))
 * ux is the activation as uint8: uint8 inputs as they are, int8 inputs plus 128 (x ^ 0x80), zx_u likewise, so the
 * product is always u8 x s8, VNNI's vpdpbusd; the shift cancels in (ux - zx_u). multiplier is one fp32 per output
 * channel, computed by the lowering as fp32 (sx * sw[m]) / sy exactly as ORT's MLAS does; qmin/qmax fold the output
 * type's range and a fused Relu/Clip. Spatial padding reads zx_u, so padded taps contribute 0.
 *
 * Packed layouts (the same for every ISA, so weights packed once at compile time run under any variant):
 *   weights (A): per group, ceil(M/MR) panels; panel i holds [K4][MR][4] int8, element (m, k) at
 *                panel (m / MR), quad k / 4, row m % MR, byte k % 4; K4 = ceil(K / 4), missing rows/k are 0.
 *   activations (B), packed per task: [K4][NB][4] uint8, pixel j of the block at [q][j][k % 4]; missing k are 0.
 * A micro-kernel multiplies one A panel with one B block over all of K into an MR x NB int32 tile; B's quad q starts
 * at b + quad_offsets[q] (packed blocks: q * NB * 4) and pixel j of it is the 4 bytes at + 4 * j.
 *
 * Direct mode (ortx_qconv_direct: dense KxK convs with stride 1, the 3x3 convs of ResNets) packs nothing per task:
 * the input is copied once into padded planes of channel quads, [N][C4][plane_height][plane_width][4] uint8 (C4 =
 * ceil(C / 4), pad = the zero point), and K is ordered (channel quad, kh, kw, channel % 4), so quad q = (cq, tap)
 * of 32 consecutive "virtual" pixels v = oh * plane_width + ow is one contiguous 128-byte run of the planes at
 * (cq, v + tap offset). Virtual pixels with ow >= out_width are computed and dropped (plane_width - out_width of
 * every plane_width); the weights are packed in the same K order (ortx_qconv_weight_k), missing channels are 0.
 */
#ifndef ORTX_QGEMM_H
#define ORTX_QGEMM_H

#include <stdint.h>

#define ORTX_QGEMM_MR 8
#define ORTX_QGEMM_NB 32

/* The qconv2d_i8 integer parameters, in the order of the ints array (kernels/qgemm.c documents each). */
typedef struct ortx_qconv_params {
    int64_t batch, in_channels, in_height, in_width, out_channels, out_height, out_width;
    int64_t kernel_height, kernel_width, stride_height, stride_width, pad_top, pad_left;
    int64_t dilation_height, dilation_width, group;
    int64_t input_kind;     /* 0: NCHW image; 1: row-major matrix [pixels][K] (Gemm/MatMul A; 1x1 geometry) */
    int64_t input_signed;   /* 0: uint8 activations, 1: int8 */
    int64_t output_kind;    /* 0: uint8, 1: int8, 2: float32 */
    int64_t out_channel_stride, out_pixel_stride, out_image_stride;  /* elements */
    int64_t has_residual;   /* float output only: residual in the output's layout */
    int64_t activation;     /* float output only: activation.h code */
    int64_t x_zero_point;   /* as stored (int8 or uint8 value) */
    int64_t y_zero_point, qmin, qmax;
    int64_t num_threads;    /* the thread count the workspace was sized for */
} ortx_qconv_params;

#define ORTX_QCONV_INTS 29

/* int32 tile: acc[m * NB + j] = sum over q < k4 of the u8 x s8 products of A panel a and B quad q at
 * b + quad_offsets[q] (NB pixels of 4 bytes). */
typedef void (*ortx_qgemm_micro_fn)(int64_t k4, const int8_t *a, const uint8_t *b, const int64_t *quad_offsets,
                                    int32_t *acc);

/* One run of `count` pixels of a k quad: out[t*4 + i] = source[i] ? source[i][t*stride] : 0. May read up to
 * `readable` bytes from each source and write up to 64 bytes past out + 4*count (callers leave that room). */
typedef void (*ortx_qgemm_pack_run_fn)(const uint8_t *const source[4], int64_t stride, int64_t count,
                                       int64_t readable, uint8_t *out);
/* Writes rows x cols of an int32 tile (row stride NB) to the output at element `offset` of (n, m0, p0): qgemm.h's
 * arithmetic with bias/multiplier already offset to m0. */
typedef void (*ortx_qgemm_epilogue_fn)(const ortx_qconv_params *p, const int32_t *acc, int64_t rows, int64_t cols,
                                       const int32_t *bias, const float *multiplier, void *output, int64_t offset,
                                       const float *residual, float p0, float p1);

/* Depthwise: one output row's int32 sums over a padded uint8 plane (row stride plane_width), taps as int32
 * [KH*KW]: acc[ow] = sum_{kh,kw} plane[(oh*SH + kh*DH)*plane_width + ow*SW + kw*DW] * taps[kh*KW + kw]. May read
 * up to 64 bytes past the last tap of the row (the plane buffer has that slack). */
typedef void (*ortx_qdepthwise_row_fn)(const ortx_qconv_params *p, const uint8_t *plane, int64_t plane_width,
                                       const int32_t *taps, int64_t oh, int32_t *acc);

/* Sparse weights (sparse_qconv2d_i8, issue #9): CSR over quads of k, in the packed K order of the dense layout
 * (ortx_qconv_weight_k), cut into `panels` consecutive ranges of ORTX_QSPARSE_PANEL_QUADS quads (ortx_qsparse_panels;
 * the last may be narrower). Row m (absolute output channel, of M = out_channels) owns in panel p the entries
 * row_ptr[p * M + m] .. row_ptr[p * M + m + 1] - 1 (row_ptr has panels * M + 1 entries); entry e is quad cols[e]
 * (absolute) with the four int8 weights values[4e .. 4e + 3]; a quad is stored when any of its four is nonzero.
 * A 4-wide block along k is VNNI's unit: one vpdpbusd per stored quad and 16 pixels, the B rows as the dense
 * micro-kernel reads them (b + quad_offsets[q]), so packing, direct mode and the epilogue are the dense kernel's.
 * Each B line feeds one vpdpbusd per row that stores its quad, so a task runs every row of its chunk over one panel
 * (ORTX_QSPARSE_SPAN blocks x the panel's quads, 32 KiB: L1) before the next, the int32 sums held in the task's
 * tile between panels, as the fp32 sparse kernels do (kernels/sparse.h). Measured on the 2-core Zen 4 host (one
 * thread, 90% zeros, 34% of quads stored; time / the dense qconv2d_i8's): one block per task and no K panels
 * 0.71-0.89; four blocks 0.67-0.91 (K = 1024's 128 KiB of B left L1); + 64 KiB panels 0.66-0.83; 32 KiB
 * 0.67-0.79; 24 KiB 0.72-0.95 (the sums' reloads between panels, from L2, grew). */
typedef struct ortx_qsparse {
    const int8_t *values;
    const int32_t *cols;
    const int32_t *row_ptr;
    int64_t rows;  /* M: the stride of row_ptr between panels */
} ortx_qsparse;

/* Blocks of pixels per sparse task: a stored quad's broadcast and column look-up serve 4 blocks' B loads. */
#define ORTX_QSPARSE_SPAN 4
#define ORTX_QSPARSE_PANEL_QUADS 64  /* 4 blocks x 64 quads x 128 bytes = 32 KiB of B per panel */

static inline int64_t ortx_qsparse_panels(int64_t k4) {
    return k4 <= ORTX_QSPARSE_PANEL_QUADS ? 1 : (k4 + ORTX_QSPARSE_PANEL_QUADS - 1) / ORTX_QSPARSE_PANEL_QUADS;
}

/* int32 tiles of `rows` <= MR consecutive rows from m0 for `blocks` <= ORTX_QSPARSE_SPAN blocks of NB pixels, over
 * panel `panel`'s quads: block i's B at b + i * block_stride, its tile at acc + i * MR * NB (row stride NB):
 * acc[i * MR * NB + r * NB + j] (+)= sum over row m0 + r's stored quads q in the panel of the u8 x s8 products of
 * the quad's weights and block i's B quad q, pixel j; `accumulate` adds to the tile, else overwrites it. */
typedef void (*ortx_qgemm_sparse_micro_fn)(const ortx_qsparse *w, int64_t panel, int64_t m0, int64_t rows,
                                           const uint8_t *b, int64_t block_stride, int64_t blocks,
                                           const int64_t *quad_offsets, int accumulate, int32_t *acc);

/* Every output row of a depthwise plane at once (row stride out_width, 16 lanes of slack after the last): 1 when
 * done, 0 when the ISA's function does not take this geometry (the caller then runs depthwise_row per row). */
typedef int (*ortx_qdepthwise_plane_fn)(const ortx_qconv_params *p, const uint8_t *plane, int64_t plane_width,
                                        const int32_t *taps, int32_t *acc);

typedef struct ortx_qgemm_isa {
    const char *name;
    ortx_qgemm_micro_fn micro;
    ortx_qgemm_sparse_micro_fn sparse_micro;
    ortx_qgemm_pack_run_fn pack_run;
    ortx_qgemm_epilogue_fn epilogue;
    ortx_qdepthwise_row_fn depthwise_row;
    ortx_qdepthwise_plane_fn depthwise_plane;  /* optional (NULL: per row) */
} ortx_qgemm_isa;

extern const ortx_qgemm_isa ortx_qgemm_isa_portable;
extern const ortx_qgemm_isa ortx_qgemm_isa_avx2;
extern const ortx_qgemm_isa ortx_qgemm_isa_avx512_vnni;
extern const ortx_qgemm_isa ortx_qgemm_isa_avx512_vbmi;  /* VNNI + VBMI packing */

void ortx_qgemm_micro_portable(int64_t k4, const int8_t *a, const uint8_t *b, const int64_t *quad_offsets,
                               int32_t *acc);
void ortx_qgemm_sparse_micro_portable(const ortx_qsparse *w, int64_t panel, int64_t m0, int64_t rows,
                                      const uint8_t *b, int64_t block_stride, int64_t blocks,
                                      const int64_t *quad_offsets, int accumulate, int32_t *acc);
void ortx_qdepthwise_row_portable(const ortx_qconv_params *p, const uint8_t *plane, int64_t plane_width,
                                  const int32_t *taps, int64_t oh, int32_t *acc);
void ortx_qgemm_pack_run_portable(const uint8_t *const source[4], int64_t stride, int64_t count, int64_t readable,
                                  uint8_t *out);
void ortx_qgemm_epilogue_portable(const ortx_qconv_params *p, const int32_t *acc, int64_t rows, int64_t cols,
                                  const int32_t *bias, const float *multiplier, void *output, int64_t offset,
                                  const float *residual, float p0, float p1);

/* Pixels [first, first + count) of a run, scalar (the portable path and the vector paths' tails). */
static inline void ortx_qgemm_pack_scalar(const uint8_t *const source[4], int64_t stride, int64_t first,
                                          int64_t count, uint8_t *out) {
    for (int i = 0; i < 4; i++) {
        uint8_t *lane = out + 4 * first + i;
        if (!source[i]) {
            for (int64_t t = 0; t < count; t++) lane[4 * t] = 0;
            continue;
        }
        const uint8_t *s = source[i] + first * stride;
        for (int64_t t = 0; t < count; t++) lane[4 * t] = s[t * stride];
    }
}

/* qdepthwise2d_i8's padded plane (rows of plane_width bytes: the zero point around the input, signed input flipped
 * to unsigned by `flip`) by AVX-512 (kernels/qgemm_avx512.c); 0 when a padded row does not fit in 64 bytes. */
int ortx_qdepthwise_pad_plane_avx512(const uint8_t *in, int64_t in_height, int64_t in_width, int64_t pad_top,
                                     int64_t pad_left, int64_t plane_height, int64_t plane_width, uint8_t zero_u,
                                     uint8_t flip, uint8_t *plane);
/* Vector QuantizeLinear / DequantizeLinear bodies (kernels/qgemm_avx512.c): each does a prefix of whole 16-lane
 * vectors and returns its length; the caller finishes the tail with the scalar loop (same results). */
int64_t ortx_quantize_avx512(const float *x, int64_t count, float scale, float low, float high, int32_t zero,
                             void *y);
int64_t ortx_dequantize_avx512(const void *q, int64_t count, int is_signed, int32_t zero, float scale, float *y);
/* quantize_linear_f32's and dequantize_linear_f32's bodies (the AVX-512 vector part where the CPU has it, then the
 * scalar tail), for kernels that quantize in place of those steps and must match them bit for bit.
 * ortx_quantize_linear: y = clamp(round_half_even(x / scale), low, high) + zero as int8 (is_signed) or uint8;
 * ortx_dequantize_linear: y = float(q - zero) * scale, q uint8 (kind 0), int8 (1) or int32 (2). */
void ortx_quantize_linear(const float *x, int64_t count, float scale, float low, float high, int32_t zero,
                          int is_signed, void *y);
void ortx_dequantize_linear(const void *q, int64_t count, int kind, int32_t zero, float scale, float *y);

/* Reference kernel (kernels/ref/qgemm_ref.c): the same ABI as qconv2d_i8, naive loops. */
void ortx_qconv2d_i8_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
/* sparse_qconv2d_i8's: the CSR scattered into the dense packed layout, then ortx_qconv2d_i8_ref. */
void ortx_sparse_qconv2d_i8_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);

static inline ortx_qconv_params ortx_qconv_params_read(const int64_t *ints) {
    ortx_qconv_params p;
    int64_t *fields = (int64_t *)&p;
    for (int i = 0; i < ORTX_QCONV_INTS; i++) fields[i] = ints[i];
    return p;
}

/* Direct mode (see the top): dense convs with a kernel larger than 1x1 at stride 1. */
static inline int ortx_qconv_direct(const ortx_qconv_params *p) {
    return p->input_kind == 0 && p->group == 1 && p->stride_height == 1 && p->stride_width == 1 &&
           p->kernel_height * p->kernel_width > 1;
}

/* Quads of k per output channel in the packed weights (K4). */
static inline int64_t ortx_qconv_depth_quads(const ortx_qconv_params *p) {
    int64_t area = p->kernel_height * p->kernel_width;
    if (ortx_qconv_direct(p)) return (p->in_channels + 3) / 4 * area;
    return ((p->input_kind == 1 ? p->in_channels : p->in_channels / p->group * area) + 3) / 4;
}

/* Position in the packed K order of the weight of channel c (within its group) at tap (kh * KW + kw). */
static inline int64_t ortx_qconv_weight_k(const ortx_qconv_params *p, int64_t c, int64_t tap) {
    int64_t area = p->input_kind == 1 ? 1 : p->kernel_height * p->kernel_width;
    return ortx_qconv_direct(p) ? ((c / 4) * area + tap) * 4 + c % 4 : c * area + tap;
}

/* Output element index of (image n, channel m, pixel index p). */
static inline int64_t ortx_qconv_output_index(const ortx_qconv_params *p, int64_t n, int64_t m, int64_t pixel) {
    return n * p->out_image_stride + m * p->out_channel_stride + pixel * p->out_pixel_stride;
}

/* One output value from its int32 accumulator (bias included): the arithmetic above, shared by every path. */
float ortx_qconv_activation(const ortx_qconv_params *p, float value, float p0, float p1);

#endif
