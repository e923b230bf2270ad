/* Internal interface of the conv family: the parameter block every conv kernel shares and the depthwise
 * kernels per ISA. */
#ifndef ORTX_CONV_H
#define ORTX_CONV_H

#include <stdint.h>

#include "gemm.h"

/* The shared ints layout of conv2d_f32, conv2d_depthwise_f32 and conv_transpose2d_f32 (see conv.c). */
typedef struct ortx_conv_params {
    int64_t batch, in_channels, in_height, in_width, out_channels, out_height, out_width;
    int64_t kernel_height, kernel_width, stride_height, stride_width, pad_top, pad_left;
    int64_t dilation_height, dilation_width, group, has_bias, has_residual, activation, workspace_threads;
    float param0, param1;
} ortx_conv_params;

#define ORTX_CONV_INTS 20

static inline ortx_conv_params ortx_conv_params_read(const int64_t *ints, const float *floats) {
    ortx_conv_params p = {
        ints[0], ints[1], ints[2], ints[3], ints[4], ints[5], ints[6], ints[7], ints[8], ints[9], ints[10],
        ints[11], ints[12], ints[13], ints[14], ints[15], ints[16], ints[17], ints[18], ints[19],
        floats[0], floats[1],
    };
    return p;
}

/* Depthwise conv (conv_depthwise.c) in blocks of `lanes` channels, one vector of lanes floats per pixel: per ISA,
 * pack transposes NCHW input rows into a zero-padded pixel-major tile, rows computes output rows from the tile and
 * unpack transposes them back to NCHW with the residual and activation. */
typedef struct ortx_depthwise_isa {
    int64_t lanes;
    /* rows * width pixels of `channels` (<= lanes) planes at x (plane floats apart; the rows consecutive in each
     * plane) -> pixel (r, c) at dst + r * dst_row + c * lanes, lanes channels each (missing channels 0). */
    void (*pack)(const float *x, int64_t plane, int64_t channels, int64_t rows, int64_t width, float *dst,
                 int64_t dst_row);
    /* Output rows [0, rows) of a band: out[(r * OW + ox) * lanes + l] = bias[l] + the sum over taps (ky, kx), in
     * that order, of weights[(ky * KW + kx) * lanes + l] * tile[(r * sh + ky * dh) * tile_row + (ox * sw + kx * dw)
     * * lanes + l]; the tile's column 0 is padded input column -pad_left. */
    void (*rows)(const ortx_conv_params *p, const float *tile, int64_t tile_row, int64_t rows, const float *weights,
                 const float *bias, float *out);
    /* count pixels of `out` (lanes floats each) -> y[l * plane + i] = act(out[i * lanes + l] + residual[l * plane +
     * i]) for l < channels (no residual when NULL), plane = OH * OW. */
    void (*unpack)(const ortx_conv_params *p, const float *out, int64_t count, int64_t channels,
                   const float *residual, float *y);
    /* Or, for 3x3 stride-1 "same" and stride-2 convs at least 16 columns wide (ortx_depthwise_in_plane; NULL
     * where the ISA has none): output rows [oy0, oy0 + rows) of one channel plane straight from the NCHW plane x
     * (no tiles), in the operation order of rows + unpack, so the results are bitwise those of the tiled path. */
    void (*plane_rows)(const ortx_conv_params *p, const float *x, const float *weights, float bias,
                       const float *residual, float *y, int64_t oy0, int64_t rows);
    /* Lanes-16 ISAs only (NULL on AVX2): count pixels of a blocked (NCHWc) output in place, y[i * 16 + l] =
     * act(y[i * 16 + l] + residual[i * 16 + l]) (no residual when NULL): conv2d_depthwise_nchwc_f32's epilogue. */
    void (*finish)(const ortx_conv_params *p, float *y, int64_t count, const float *residual);
    /* Or, where the ISA has it (NULL: the tiled path), conv2d_depthwise_nchwc_f32's output rows [oy0, oy0 + rows)
     * of one blocked channel block straight from its blocked input x (no tile), with the 16 biases, the residual
     * (NULL: none) and the activation; returns 0 without writing when it does not take the conv's shape (with
     * rows == 0 only that question is answered; no buffer is read). */
    int (*blocked_rows)(const ortx_conv_params *p, const float *x, const float *weights, const float *bias,
                        const float *residual, float *y, int64_t oy0, int64_t rows);
    /* The same from a pair-rows input (kernels/pair_rows.h): x at the block's half of its chunk plane, read as 64
     * bytes a pixel whose first 32 are the block's 16 bf16 values (NULL where the ISA has none). */
    int (*blocked_rows_bf16)(const ortx_conv_params *p, const float *x, const float *weights, const float *bias,
                             const float *residual, float *y, int64_t oy0, int64_t rows);
    /* Or, into a pair-rows output (out_rows 1), one chunk (32 channels, `channels` of them real) at once: x its
     * chunk plane of a pair-rows input (in_rows 1) or the first of its two blocks' planes of a blocked input (the
     * second hi_offset bytes on; the same plane again when the chunk has one block), y its chunk plane; weights and
     * bias as two vectors a tap: for a pair-rows input the even channels then the odd (tap t's at weights + t * 32
     * and + 16), for a blocked one the two blocks'. With out_rows 0, y is the chunk's first block plane of a
     * blocked fp32 output, its second y_hi bytes on (written where channels > 16). Returns
     * 0 without writing when it does not take the conv (no residual; rows == 0: only that question). NULL where
     * the ISA has none. */
    int (*pair_rows)(const ortx_conv_params *p, const void *x, int in_rows, int64_t hi_offset, const float *weights,
                     const float *bias, int64_t channels, void *y, int out_rows, int64_t y_hi, int64_t oy0,
                     int64_t rows);
} ortx_depthwise_isa;

/* Whether plane_rows applies: 3x3, dilation 1, pad_left 1, at least 16 output columns, and stride 1 with
 * OW == W (one column of padding each side) or stride 2 (any right padding). */
static inline int ortx_depthwise_in_plane(const ortx_conv_params *p) {
    int stride_1 = p->stride_height == 1 && p->stride_width == 1 && p->out_width == p->in_width;
    int stride_2 = p->stride_height == 2 && p->stride_width == 2;
    return p->kernel_height == 3 && p->kernel_width == 3 && p->dilation_height == 1 && p->dilation_width == 1 &&
           p->pad_left == 1 && p->out_width >= 16 && (stride_1 || stride_2);
}

extern const ortx_depthwise_isa ortx_depthwise_portable, ortx_depthwise_avx2, ortx_depthwise_avx512;

/* Workspace floats of conv2d_depthwise_f32 for `threads` threads (any ISA). */
int64_t ortx_depthwise_workspace_floats(const ortx_conv_params *p, int threads);
void ortx_conv2d_depthwise_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);

/* The blocked layout (NCHWc, conv_nchwc.c): a [N, C, H, W] tensor stored as [N][ceil(C / 16)][H][W][16], channel
 * c of pixel i at ((n * blocks + c / 16) * H * W + i) * 16 + c % 16. The lanes of the last block past C ("pad
 * lanes") hold anything: every kernel that reads a blocked tensor ignores them. Kernels on it keep 16 channels in
 * one vector, so pointwise and depthwise convs need no transposes between them (ONNX Runtime's NCHWc idea). */
#define ORTX_NCHWC_LANES 16
static inline int64_t ortx_nchwc_blocks(int64_t channels) { return (channels + 15) / 16; }
/* The depthwise table whose lanes are 16 (AVX-512 when selected, else portable) for the blocked kernels. */
const ortx_depthwise_isa *ortx_nchwc_depthwise_isa(void);
void ortx_conv2d_depthwise_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers,
                                     int num_threads);
void ortx_reorder_to_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_reorder_from_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_global_avgpool_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers,
                                   int num_threads);
void ortx_global_avgpool_nchwc_f32_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                       int num_threads);
/* The pointwise conv on blocked tensors (conv_pointwise_nchwc.c). Weights are packed as [ceil(Cout / 64)][Cin][64]
 * (64 output channels, 4 blocks, per input channel; zeros past Cout) and the bias as ceil(Cout / 64) * 64 floats. A
 * tile computes `pixels` (1..ortx_pointwise_tile_pixels(blocks)) consecutive pixels x `blocks` (1..4) output blocks
 * over all Cin input channels: y[b][i] = act(bias[b] + sum over c of w[c][b] * x[c / 16][i][c % 16] (c ascending, one
 * multiply-add each) + residual[b][i]); x, y and residual point at the tile's first pixel in their first block, x's
 * blocks x_plane pixels apart, y's and the residual's y_plane (both H * W in the conv; the fused expand and depthwise
 * conv, conv_expand_depthwise.c, writes a band of rows: y_plane is the band's pixels). */
#define ORTX_POINTWISE_PIXELS 6
/* Tiles of 1-3 blocks take up to 24, 12 or 8 pixels (24 accumulators, as 6 x 4); the AVX-512 tiles run such a count
 * as one long tile, any other as tiles of at most 6. */
#define ORTX_POINTWISE_LONG_PIXELS 24
static inline int64_t ortx_pointwise_tile_pixels(int64_t blocks) {
    return blocks >= 4 ? ORTX_POINTWISE_PIXELS : ORTX_POINTWISE_LONG_PIXELS / blocks;
}
typedef void (*ortx_pointwise_nchwc_tile_fn)(int64_t pixels, int64_t blocks, int64_t in_channels, int64_t x_plane,
                                             int64_t y_plane, const float *x, const void *w, const float *bias,
                                             const float *residual, float *y, int activation, float param0,
                                             float param1, uint32_t *scratch);
extern const ortx_pointwise_nchwc_tile_fn ortx_pointwise_nchwc_tile_avx512, ortx_pointwise_nchwc_tile_avx512_bf16;
/* The AVX512_BF16 tile of conv_pointwise_pair_rows_bf16 off AMX: X (in_rows) and/or Y (out_rows) in pair rows
 * (pair_rows.h). x, y, residual at the tile's first pixel: pair rows in their first chunk (uint16_t, chunks x_plane
 * or y_plane pixels apart; Y's first chunk is the tile's first block's), else as ortx_pointwise_nchwc_tile_fn's;
 * the residual blocked fp32 always. out_lanes: the output channels of the tile's blocks that are real (the rest of
 * a pair-rows pixel is zeroed). NULL where not compiled. */
typedef void (*ortx_pointwise_rows_tile_fn)(int64_t pixels, int64_t blocks, int64_t in_channels, int64_t x_plane,
                                            int64_t y_plane, const void *x, int in_rows, const void *w,
                                            const float *bias, const float *residual, void *y, int out_rows,
                                            int64_t out_lanes, int activation, float param0, float param1,
                                            uint32_t *scratch);
extern const ortx_pointwise_rows_tile_fn ortx_pointwise_rows_tile_avx512_bf16;
extern const ortx_pointwise_nchwc_tile_fn ortx_pointwise_nchwc_tile_portable, ortx_pointwise_nchwc_tile_portable_bf16;
/* The fp32 AVX-512 tile over input channels [c_begin, c_begin + c_count) only (c_begin a multiple of 16), so a
 * conv can run its sums a chunk of channels at a time over many tiles: started at the bias when `first`, else at
 * the partial sums in y; finished (residual, activation) when `last`, else storing the partial sums to y. The same
 * multiply-adds in the same order as the whole tile, so the same bits. The tile's pixels are x_step floats apart
 * in x and y_step in y and the residual (16 and 16 for the 1x1 conv's consecutive pixels; conv2d_nchwc_f32 also
 * walks strided pixels and columns). NULL where not compiled. */
typedef void (*ortx_pointwise_nchwc_chunk_fn)(int64_t pixels, int64_t blocks, int64_t c_begin, int64_t c_count,
                                              int64_t x_plane, int64_t x_step, int64_t y_plane, int64_t y_step,
                                              const float *x, const float *w, const float *bias,
                                              const float *residual, float *y, int first, int last, int activation,
                                              float param0, float param1);
extern const ortx_pointwise_nchwc_chunk_fn ortx_pointwise_nchwc_chunk_avx512;
/* conv2d_nchwc_f32's tile (conv_nchwc_direct_avx512.c): `pixels` (1..6) output pixels x `blocks` (1..4) output
 * blocks over taps_y x taps_x taps and input channels [c_begin, c_begin + c_count), summed tap by tap, channels
 * ascending within a tap; started at the bias when `first`, else at the partial sums in y; finished (residual,
 * activation) when `last`. x and w point at the first tap (x at the tile's first pixel, blocks x_plane pixels
 * apart, pixels x_step floats apart; w at that tap's [Cin][64] slice); the next tap along a row is x_tap_col and
 * w_tap_col floats on, the next row of taps x_tap_row and w_tap_row. NULL where not compiled. */
typedef struct ortx_direct_nchwc_tile {
    int64_t c_begin, c_count, x_plane, x_step, y_plane, y_step;
    int64_t taps_y, taps_x, x_tap_row, x_tap_col, w_tap_row, w_tap_col;
    const float *bias;
    int first, last, activation;
    float param0, param1;
} ortx_direct_nchwc_tile;
typedef void (*ortx_direct_nchwc_taps_fn)(const ortx_direct_nchwc_tile *t, int64_t pixels, int64_t blocks,
                                          const float *x, const float *w, const float *residual, float *y);
extern const ortx_direct_nchwc_taps_fn ortx_direct_nchwc_taps_avx512;
/* A 1x1 conv and the depthwise conv reading its output, fused over bands of rows (conv_expand_depthwise.c); _bf16:
 * the 1x1 conv as conv_pointwise_nchwc_bf16 computes it (its weights packed so), the depthwise conv fp32. */
void ortx_conv_expand_depthwise_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers,
                                          int num_threads);
void ortx_conv_expand_depthwise_nchwc_bf16(const int64_t *ints, const float *floats, void *const *buffers,
                                           int num_threads);
void ortx_conv_pointwise_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
/* conv_pointwise_nchwc_bf16: the same conv with bf16 operands and fp32 sums (ortx/ep/precision.py's bf16): weights
 * packed as [ceil(Cout / 64)][ortx_pointwise_bf16_pair_words(Cin)][64][2] bf16 (input channels 2q, 2q + 1 of an
 * output channel adjacent; pair rows a multiple of 16, so the AMX path reads whole B tiles; zeros past Cin and
 * Cout), each tile's input rounded to bf16 pairs in `scratch` (ORTX_POINTWISE_LONG_PIXELS x
 * ortx_pointwise_bf16_pair_words(Cin) words per thread, buffers[5]); per pair, the odd product then the even one
 * (vdpbf16ps's order). On AMX CPUs (while ortx_allow_amx has not turned AMX off) it runs
 * ortx_conv_pointwise_nchwc_bf16_amx (conv_pointwise_nchwc_amx.c: tdpbf16ps, its own scratch), which returns 0
 * where it was not compiled. */
static inline int64_t ortx_pointwise_bf16_pair_words(int64_t in_channels) { return (in_channels + 31) / 32 * 16; }
void ortx_conv_pointwise_nchwc_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
int ortx_conv_pointwise_nchwc_bf16_amx(const int64_t *ints, const float *floats, void *const *buffers,
                                       int num_threads);
/* The same kernels on bf16 pair rows (pair_rows.h) in place of blocked fp32 tensors, where a bf16 session on AMX
 * keeps a tensor so (ortx/ep/lowering/blocked_layout.py's pair_rows_values): conv_pointwise_pair_rows_bf16 (ints
 * conv_pointwise_nchwc_bf16's, then in_rows, out_rows) and conv2d_depthwise_pair_rows (conv2d_depthwise_nchwc_f32's
 * 20 ints, then in_rows, out_rows, chunk_weights: conv_depthwise.c); 1 puts that side in pair rows. */
void ortx_conv_pointwise_pair_rows_bf16(const int64_t *ints, const float *floats, void *const *buffers,
                                        int num_threads);
int ortx_conv_pointwise_pair_rows_bf16_amx(const int64_t *ints, const float *floats, void *const *buffers,
                                           int num_threads);
void ortx_conv_pointwise_pair_rows_bf16_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                            int num_threads);
/* conv_pointwise_bf16x3 (conv_pointwise_nchwc.c): fp32_nodes' 1x1 convs in a bf16 session on AMX, fp32-accurate. */
void ortx_conv_pointwise_bf16x3(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
int ortx_conv_pointwise_bf16x3_amx(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv_pointwise_bf16x3_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
/* Whether conv_pointwise_bf16x3 runs its AMX steps here; those steps over one band on the calling thread. */
int ortx_conv_pointwise_bf16x3_applies(void);
void ortx_pointwise_bf16x3_band_amx(const int64_t *ints, const float *floats, void *const *buffers, int64_t n,
                                    int64_t pixels, int64_t y_plane, int64_t y_offset, int thread);
/* A depthwise conv and conv_pointwise_bf16x3 reading its output, over bands of rows (conv_depthwise_bf16x3.c). */
void ortx_conv_depthwise_bf16x3(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv_depthwise_bf16x3_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv2d_depthwise_pair_rows(const int64_t *ints, const float *floats, void *const *buffers,
                                     int num_threads);
void ortx_conv2d_depthwise_pair_rows_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                         int num_threads);
/* A dense conv from NCHW input to a blocked output (conv_to_nchwc.c), for the few-channel stem in front of a run
 * of blocked convs. Weights packed as [Cin * KH * KW][ceil(Cout / 16) * 16] (tap-major, zeros past Cout), bias as
 * ceil(Cout / 16) * 16 floats. Per ISA: `tile` computes `pixels` consecutive output pixels of one output row x
 * `blocks` (1..4) output blocks whose taps all lie inside the input, from x at the tile's first tap (input pixel
 * (oy * sh - pad_top, ox * sw - pad_left) of channel 0), tap k reading x + tap_offsets[k] + i * sw for pixel i;
 * w and bias at the first block, ldw floats per weight row; y at the tile's first pixel in its first block. `border`
 * computes one output pixel (oy, ox) of all blocks, skipping taps outside the input. A tile sums `taps` taps, tap k
 * reading x + tap_offsets[k] + i * sw and weight row tap_rows[k] (w + tap_rows[k] * ldw): every tap in (c, ky, kx)
 * order, or in a border row only those whose ky lands inside the input, in the same order. */
#define ORTX_TO_NCHWC_ACCUMULATORS 24
typedef struct ortx_to_nchwc_isa {
    void (*tile)(const ortx_conv_params *p, int64_t pixels, int64_t blocks, const float *x, const int32_t *tap_offsets,
                 const int32_t *tap_rows, int64_t taps, const float *w, int64_t ldw, const float *bias, float *y);
    void (*border)(const ortx_conv_params *p, const float *x, const float *w, const float *bias, int64_t oy,
                   int64_t ox, float *y);
} ortx_to_nchwc_isa;
extern const ortx_to_nchwc_isa ortx_to_nchwc_avx512;
/* Pixels per tile for `blocks` output blocks: ORTX_TO_NCHWC_ACCUMULATORS / blocks (24, 12, 8, 6). */
static inline int64_t ortx_to_nchwc_tile_pixels(int64_t blocks) { return ORTX_TO_NCHWC_ACCUMULATORS / blocks; }
void ortx_conv2d_to_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
/* conv2d_nchwc_f32 (conv_nchwc_direct.c): a dense one-group conv on blocked X, Y and residual; ints = the conv ints
 * (ORTX_CONV_INTS - 1 of them, workspace_threads left out) then threads; buffers = [X, W, bias, Y, residual (Y when
 * none)]; W packed per group of 64 output channels and chunk of 128 input channels [KH * KW][the chunk's
 * channels][64] (zeros past Cout), bias ceil(Cout / 64) * 64 floats. */
void ortx_conv2d_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
/* conv2d_nchwc_bf16 (conv_nchwc_bf16.c): conv2d_nchwc_f32's conv with bf16 operands and fp32 sums on vdpbf16ps;
 * ints the conv ints, threads, X's layout (1 blocked, 0 NCHW: x-unfolded); buffers [X, W, bias, Y, residual (Y when
 * none), workspace (conv_nchwc_bf16_sizes)]. Its input rounded into a bf16 image (plane: bf16 values per block of
 * one image): blocked, [N][ceil(Cin / 16)][padded_height][padded_width][16], pairs 8 a block 2 values apart; or
 * x-unfolded, [N][padded_height][pairs][OW][2], one block of `pairs` pairs pair_stride = 2 * OW values apart. */
typedef struct ortx_nchwc_bf16_geometry {
    int64_t padded_height, padded_width, in_blocks, plane, pairs, pair_stride;
    int unfolded;
} ortx_nchwc_bf16_geometry;
ortx_nchwc_bf16_geometry ortx_nchwc_bf16_geometry_of(const ortx_conv_params *p, int unfolded);
#define ORTX_NCHWC_BF16_MAX_TAPS 64 /* larger kernels run the reference (the lowering does not pick them) */
#define ORTX_NCHWC_BF16_MAX_PAIRS 32 /* ... and x-unfolded convs of more pairs */
#define ORTX_NCHWC_BF16_SUMS 24      /* a tile's accumulators: pixels x blocks */
/* A tile's pixels for `blocks` output blocks: 6 for 4 blocks, else ORTX_NCHWC_BF16_SUMS / blocks (24, 12, 8), so a
 * conv to 16-48 channels still has 24 sums in flight: such long tiles lie along one output row with a pixel step of
 * 2, 16 or 32 values (x-unfolded; blocked at stride 1 or 2), elsewhere tiles take 1..6 pixels. */
static inline int64_t ortx_nchwc_bf16_tile_pixels(int64_t blocks) {
    return blocks >= 4 ? 6 : ORTX_NCHWC_BF16_SUMS / blocks;
}
/* A tile: `pixels` (1..6, or a long tile's ortx_nchwc_bf16_tile_pixels) output pixels, consecutive in Y (16 floats
 * apart, y and residual at the first), pixel i reading the image at x[i] (its first tap, first block of the chunk) +
 * tap_offsets[k] + block * x_plane + pair * pair_stride; `blocks` (1..4) output blocks (y_plane floats apart) over
 * taps 0..taps-1 and block_count blocks of `pairs` pairs, the weights of tap k at w + k * w_tap (w at the chunk's
 * first pair, 128 values a pair); started at the bias when `first`, else at the partial sums in y; finished
 * (residual, activation) when `last`. */
typedef struct ortx_nchwc_bf16_tile {
    int64_t blocks, block_count, pairs, pair_stride, taps, x_plane, y_plane, w_tap;
    int64_t pixel_step;  /* long tiles (1-3 blocks): along one output row, pixel i at x[0] + i * pixel_step */
    const int64_t *tap_offsets;
    const float *bias;
    int first, last, activation;
    float param0, param1;
} ortx_nchwc_bf16_tile;
typedef struct ortx_nchwc_bf16_isa {
    /* count blocked pixels (16 floats each) rounded to bf16 (16 values each), lanes >= `lanes` zero */
    void (*round_pixels)(const float *src, int64_t count, int64_t lanes, uint16_t *dst);
    /* One x-unfolded pair row: word ox of dst (ox < out_width) = bf16(src[e][ox * stride + offset[e]]) in half e
     * (0 low), 0 where that column is outside [0, width) or src[e] is NULL. */
    void (*unfold_pair)(const float *const *src, const int64_t *offset, int64_t stride, int64_t width,
                        int64_t out_width, uint16_t *dst);
    void (*tile)(const ortx_nchwc_bf16_tile *t, int64_t pixels, const uint16_t *const *x, const uint16_t *w,
                 const float *residual, float *y);
} ortx_nchwc_bf16_isa;
extern const ortx_nchwc_bf16_isa ortx_nchwc_bf16_avx512; /* members NULL where not compiled */
void ortx_conv2d_nchwc_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv_nchwc_bf16_sizes(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);

/* Direct (implicit-GEMM) dense conv, conv.c Case 1b. The input of one image and group is copied once into
 * zero-padded phase planes: phase (qy, qx) of channel c, row r, column j holds padded input (r*sh + qy,
 * j*sw + qx). With output pixel (oy, ox) numbered v = oy*phase_width + ox ("virtual" pixels; columns
 * ox >= OW are computed and discarded), patch-matrix row k = (c, ky, kx) of pixel v is planes[offset[k] + v]:
 * 16 consecutive virtual pixels are one contiguous load, so the GEMM's B operand is read in place. */
typedef struct ortx_conv_direct_geometry {
    int64_t phase_rows, phase_width, phases_y, phases_x, channel_floats, virtual_pixels;
} ortx_conv_direct_geometry;

static inline ortx_conv_direct_geometry ortx_conv_direct_geometry_of(const ortx_conv_params *p) {
    ortx_conv_direct_geometry g;
    g.phases_y = p->stride_height;
    g.phases_x = p->stride_width;
    g.phase_rows = p->out_height + ((p->kernel_height - 1) * p->dilation_height) / p->stride_height;
    g.phase_width = p->out_width + ((p->kernel_width - 1) * p->dilation_width) / p->stride_width;
    g.channel_floats = g.phases_y * g.phases_x * g.phase_rows * g.phase_width;
    g.virtual_pixels = p->out_height * g.phase_width;
    return g;
}

/* Zeroed floats after the last plane: the discarded lanes of the last direct tile (up to 32 virtual pixels) may
 * read up to tile width + 1 floats past the planes, a staging copy of packing up to 32. */
#define ORTX_CONV_PLANES_SLACK 64

/* Workspace floats of the direct path: the planes of one image and group, their zeroed slack and the int32 offset
 * table (K entries). */
static inline int64_t ortx_conv_direct_floats(const ortx_conv_params *p) {
    ortx_conv_direct_geometry g = ortx_conv_direct_geometry_of(p);
    int64_t K = p->in_channels / p->group * p->kernel_height * p->kernel_width;
    return (p->in_channels / p->group * g.channel_floats + ORTX_CONV_PLANES_SLACK + 15) / 16 * 16 + (K + 15) / 16 * 16;
}

/* One tile of the direct conv over depth [k_begin, k_end) (multiples of ORTX_GEMM_KC, or K), `rows` output
 * channels from row0 (at most the tile's: 6 for the portable and AVX2 tiles, 12 for AVX-512's; row0 a multiple of
 * 6) x the tile's virtual pixels (16; AVX-512's 32): acc[i][j] = sum over k of A[row0 + i][k] * x[offsets[k] + j]
 * with A the prepacked weights (gemm.h panels, m_padded rows, depth K), in registers; then partial[i][j] +
 * acc[i][j] when partial (row stride: the tile's pixels) is not NULL (the gemm micro-kernel's accumulate order);
 * stores `rows` rows of the tile's pixels at c (row stride ldc), applying the epilogue of (row0 + i, col0 + j)
 * first when it is not NULL. */
struct ortx_gemm_epilogue;
typedef void (*ortx_conv_direct_tile_fn)(int64_t K, int64_t k_begin, int64_t k_end, const float *weights,
                                         int64_t m_padded, int64_t row0, const float *x, const int32_t *offsets,
                                         const float *partial, float *c, int64_t ldc, int64_t rows,
                                         const struct ortx_gemm_epilogue *epilogue, int64_t col0);

void ortx_conv_direct_tile_portable(int64_t K, int64_t k_begin, int64_t k_end, const float *weights, int64_t m_padded,
                                    int64_t row0, const float *x, const int32_t *offsets, const float *partial,
                                    float *c, int64_t ldc, int64_t rows, const struct ortx_gemm_epilogue *epilogue,
                                    int64_t col0);
void ortx_conv_direct_tile_avx2(int64_t K, int64_t k_begin, int64_t k_end, const float *weights, int64_t m_padded,
                                int64_t row0, const float *x, const int32_t *offsets, const float *partial, float *c,
                                int64_t ldc, int64_t rows, const struct ortx_gemm_epilogue *epilogue, int64_t col0);
/* conv_transpose2d_f32's tiling case (kernel == stride, no padding) with KW == 2 on AVX-512, straight from X
 * (conv_transpose_avx512.c): returns 0 (nothing written) where it does not apply; workspace: at least
 * ortx_conv_transpose_tiling_floats floats (its unpacked weights). */
int ortx_conv_transpose_tiling_avx512(const ortx_conv_params *p, const float *x, const float *packed,
                                      const float *bias, const float *residual, float *y, float *workspace,
                                      int threads);
int64_t ortx_conv_transpose_tiling_floats(const ortx_conv_params *p);

/* 12 x 32 (conv_avx512.c); x86 only. */
void ortx_conv_direct_tile_avx512(int64_t K, int64_t k_begin, int64_t k_end, const float *weights,
                                  int64_t m_padded, int64_t row0, const float *x, const int32_t *offsets,
                                  const float *partial, float *c, int64_t ldc, int64_t rows,
                                  const struct ortx_gemm_epilogue *epilogue, int64_t col0);

/* The padded (unphased) input planes of conv_bf16.c: padded_rows x padded_width per channel (plane floats), every
 * tap of every output pixel inside; floats = all channels' planes rounded to 16. */
typedef struct ortx_conv_planes_geometry {
    int64_t padded_rows, padded_width, plane, floats;
} ortx_conv_planes_geometry;

ortx_conv_planes_geometry ortx_conv_planes_geometry_of(const ortx_conv_params *p);
/* pixel_offsets[n] (OH*OW entries): output pixel n's offset in a padded plane; panel_offsets[n / NR] (one per
 * 16-pixel panel): the first pixel's offset when the panel's 16 pixels lie in one output row (so pixel j of the
 * panel is at that offset + j * stride_width), else -1. */
void ortx_conv_planes_offsets(const ortx_conv_params *p, int32_t *pixel_offsets, int32_t *panel_offsets);

/* The fp32 convs' packing source (conv_planes.c): the direct geometry's phase planes of one image and group, their
 * zeroed slack and the K tap offsets (ortx_conv_direct_floats floats in all), from which every output
 * row's pixels are consecutive floats for every tap. */
typedef struct ortx_conv_planes_context {
    const ortx_conv_params *params;
    ortx_conv_direct_geometry geometry;
    float *planes;
    const int32_t *tap_offsets;  /* patch-matrix row k = (c, ky, kx) of pixel v is planes[tap_offsets[k] + v] */
} ortx_conv_planes_context;

/* The shape rule shared by conv2d_f32 and the generated GEMM's conv source: whether the patch matrix is packed from
 * the phase planes (every conv but a 1x1 stride-1 unpadded one, whose patch matrix is X, while the int32 tap
 * offsets can address the planes). */
int ortx_conv_packs_from_planes(const ortx_conv_params *p);
/* ortx_conv_direct_floats: the planes, the slack and the tap offsets. */
int64_t ortx_conv_planes_source_floats(const ortx_conv_params *p);
/* Points context at params and at the planes and tap offsets in scratch (ortx_conv_planes_source_floats floats,
 * 64-byte aligned), fills the tap offsets and zeroes the slack; the planes are filled per image and group. */
void ortx_conv_planes_context_init(ortx_conv_planes_context *context, const ortx_conv_params *params, float *scratch);
/* Fills the phase planes of the group's input channels [begin, end); x is the group's first input channel. */
void ortx_conv_fill_phase_planes(const ortx_conv_params *p, const float *x, float *planes, int64_t begin,
                                 int64_t end);
/* The same for phase rows [row_begin, row_end) of every phase only (clamped to the planes' rows): a thread that
 * packs a band of output rows fills the rows its taps read. */
void ortx_conv_fill_phase_plane_rows(const ortx_conv_params *p, const float *x, float *planes, int64_t begin,
                                     int64_t end, int64_t row_begin, int64_t row_end);
/* The same with the input channels split over threads. */
/* The GEMM epilogue of one image and group's output: the conv's bias rows, its residual at y_offset (rows of
 * out_height * out_width), its activation. conv2d_f32, conv2d_pixel_rows_f32 and conv2d_bf16 each run one. */
static inline ortx_gemm_epilogue ortx_conv_group_epilogue(const ortx_conv_params *p, const float *bias,
                                                          const float *residual, int64_t group, int64_t y_offset) {
    ortx_gemm_epilogue epilogue = {
        .alpha = 1.0f,
        .bias_row = p->has_bias ? bias + group * (p->out_channels / p->group) : NULL,
        .residual = p->has_residual ? residual + y_offset : NULL,
        .residual_row_stride = p->out_height * p->out_width,
        .residual_col_stride = 1,
        .residual_scale = 1.0f,
        .activation = (int)p->activation,
        .param0 = p->param0,
        .param1 = p->param1,
    };
    return epilogue;
}

void ortx_conv_fill_planes_parallel(const ortx_conv_params *p, const float *x, float *planes, int threads);

/* ortx_gemm_pack_b_fn of the (Cin/g*KH*KW) x (OH*OW) patch matrix from the planes (n0 a multiple of 16). */
void ortx_conv_planes_pack_b(const void *context, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst);
/* One MR-row A panel of the transposed patch matrix (conv_pixel_rows.c): dst[k * MR + r] = patch-matrix row
 * k0 + k of output pixel `pixel` + r for k < kc, 0 for pixels past the output's end. */
void ortx_conv_planes_pack_rows(const ortx_conv_planes_context *context, int64_t k0, int64_t kc, int64_t pixel,
                                float *dst);

/* The pack_b context of the patch matrix built row by row from X (conv.c's im2col). */
typedef struct ortx_im2col_context {
    const ortx_conv_params *params;
    const float *input;  /* the group's first input channel */
} ortx_im2col_context;

/* ortx_gemm_pack_b_fn of the (Cin/g*KH*KW) x (OH*OW) patch matrix from X. */
void ortx_conv_im2col_pack_b(const void *context, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst);

/* The pixels-as-rows form of a dense conv (conv_pixel_rows.c): per image and group, the phase planes and their
 * tap offsets (ortx_conv_planes_source_floats), the packed im2col^T A operand (pixels x depth) and the
 * [pixels, Cout/g] GEMM result, each rounded to 16 floats, in the workspace. */
typedef struct ortx_pixel_rows_geometry {
    int64_t pixels, depth, planes_floats, packed_floats, scratch_floats;
} ortx_pixel_rows_geometry;

ortx_pixel_rows_geometry ortx_pixel_rows_geometry_of(const ortx_conv_params *p);
int64_t ortx_pixel_rows_workspace_floats(const ortx_conv_params *p);
void ortx_conv2d_pixel_rows_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);

/* A dense conv's patch matrix as a generated GEMM's B operand (conv_source.c): the scratch and opaque source sizes
 * (a kernel entry of the conv family), the per-call preparation and the ortx_gemm_pack_b_fn over it. */
void ortx_conv_source_sizes_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv_source_prepare(const int64_t *ints, const float *floats, const float *x, float *scratch,
                              int num_threads, void *source);
void ortx_conv_source_pack_b(const void *source, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst);

/* Reference kernels (kernels/ref/conv_ref.c). */
void ortx_conv2d_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv2d_pixel_rows_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv2d_depthwise_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv_transpose2d_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv2d_depthwise_nchwc_f32_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                         int num_threads);
void ortx_conv_pointwise_nchwc_f32_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                       int num_threads);
void ortx_conv_expand_depthwise_nchwc_f32_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                              int num_threads);
void ortx_conv_expand_depthwise_nchwc_bf16_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                               int num_threads);
void ortx_conv_pointwise_nchwc_bf16_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                        int num_threads);
void ortx_conv2d_to_nchwc_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv2d_nchwc_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv2d_nchwc_bf16_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv2d_winograd_nchwc_f32_ref(const int64_t *ints, const float *floats, void *const *buffers,
                                        int num_threads);

#endif
