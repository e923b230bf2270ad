/* Internal interface of the bf16 GEMM (family "bf16"): operands rounded to bfloat16, products and sums in fp32.
 *
 * Numerics (the definition ortx/ep/precision.py states and tests check): every operand element is rounded to
 * bf16 as vcvtne2ps2bf16 does (round to nearest even; NaN stays NaN, quieted; fp32 denormals become signed zero),
 * each product of two bf16 values is exact in fp32, and the sums are fp32 additions. Per output element the fast
 * kernels add, for each k pair (2p, 2p+1) in order, first the odd product then the even one (vdpbf16ps's order);
 * the portable path does the same additions, so both ISAs give the same bits (products whose fp32 result is
 * denormal are flushed to zero by vdpbf16ps only).
 *
 * Packed format ("K pairs", the layout vdpbf16ps reads): K is cut into equal blocks of at most ORTX_BGEMM_KC_MAX,
 * KB = ortx_bgemm_block_depth(K) deep (even; the last block may be shorter); block p (k0 = p*KB,
 * kc = min(KB, K-k0), pairs = ceil(kc/2)) starts at element k0 * rows_padded, and inside it panel i
 * (rows i*R .. i*R+R-1, R = ORTX_BGEMM_MR for A, NR for B) starts at i*R*2*pairs and holds [pairs][R][2] bf16 values: the
 * two values of row r at depth k0+2q and k0+2q+1 are adjacent (one 32-bit word). Rows past the operand's end and
 * the missing half of an odd last pair are zero. ortx_bgemm_packed_index() is the one definition.
 */
#ifndef ORTX_GEMM_BF16_H
#define ORTX_GEMM_BF16_H

#include <stdint.h>
#include <string.h>

#include "gemm.h"
#include "ortx_kernels.h"

/* Rows of the bf16 micro-tile (A panels' height): 8 x 32 outputs are 16 zmm accumulators, and 8 divides the
 * channel counts of most CNNs (64, 96, 128, ...), where 6 (the fp32 tile's) leaves a partial panel. */
#define ORTX_BGEMM_MR 8

/* fp32 -> bf16, round to nearest even, as vcvtne2ps2bf16: NaN quieted, denormals to signed zero. */
static inline uint16_t ortx_bf16_from_float(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof(bits));
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u);
    if ((bits & 0x7f800000u) == 0) return (uint16_t)((bits >> 16) & 0x8000u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

static inline float ortx_bf16_to_float(uint16_t value) {
    uint32_t bits = (uint32_t)value << 16;
    float result;
    memcpy(&result, &bits, sizeof(result));
    return result;
}

/* Depth of the K blocks: K split into ceil(K / KC_MAX) equal even blocks. Deeper than the fp32 GEMM's 256 so the
 * output tiles are reloaded fewer times (a bf16 k step is half the fp32 one's bytes), and equal so no thin last
 * block runs the micro-kernel for a few pairs (ResNet's K = 576: 288 + 288, not 256 + 256 + 64). */
#define ORTX_BGEMM_KC_MAX 512

static inline int64_t ortx_bgemm_block_depth(int64_t depth) {
    int64_t blocks = depth > 0 ? (depth + ORTX_BGEMM_KC_MAX - 1) / ORTX_BGEMM_KC_MAX : 1;
    int64_t per_block = (depth + blocks - 1) / blocks;
    return per_block < 2 ? 2 : (per_block + 1) / 2 * 2;
}

static inline int64_t ortx_bgemm_packed_index(int64_t row, int64_t k, int64_t rows, int64_t depth, int64_t panel) {
    int64_t block = ortx_bgemm_block_depth(depth), k0 = k / block * block;
    int64_t kc = depth - k0 < block ? depth - k0 : block;
    int64_t pairs = (kc + 1) / 2, q = (k - k0) / 2;
    return k0 * ortx_round_up(rows, panel) + (row / panel) * panel * 2 * pairs + (q * panel + row % panel) * 2 +
           (k - k0) % 2;
}

/* bf16 elements of a packed operand with `rows` rows (A: M, B: N) and depth K. */
static inline int64_t ortx_bgemm_packed_elements(int64_t rows, int64_t depth, int64_t panel) {
    return ortx_round_up(rows, panel) * ortx_round_up(depth, 2);
}

/* The AMX path's A format ("tiles", gemm_bf16_amx.c): the same K blocks, each with its pairs padded to a multiple
 * of ORTX_BGEMM_TILE_PAIRS and its rows to a multiple of ORTX_BGEMM_TILE_ROWS (zeros), stored row-major: row r of
 * block p at the block's start + r * 2 * padded_pairs, then its values in k order. A 16-row, 32-value slice is one
 * tileloadd (row stride 4 * padded_pairs bytes), and no tile ever reads past its block. */
#define ORTX_BGEMM_TILE_ROWS 16
#define ORTX_BGEMM_TILE_PAIRS 16

static inline int64_t ortx_bgemm_tile_pairs(int64_t kc) { return ortx_round_up((kc + 1) / 2, ORTX_BGEMM_TILE_PAIRS); }

/* Element offset of the K block starting at k0 (every block before the last is ortx_bgemm_block_depth deep). */
static inline int64_t ortx_bgemm_tiles_block_offset(int64_t k0, int64_t rows, int64_t depth) {
    int64_t block = ortx_bgemm_block_depth(depth);
    return k0 / block * ortx_round_up(rows, ORTX_BGEMM_TILE_ROWS) * 2 * ortx_bgemm_tile_pairs(block);
}

static inline int64_t ortx_bgemm_tiles_index(int64_t row, int64_t k, int64_t rows, int64_t depth) {
    int64_t block = ortx_bgemm_block_depth(depth), k0 = k / block * block;
    int64_t kc = depth - k0 < block ? depth - k0 : block;
    return ortx_bgemm_tiles_block_offset(k0, rows, depth) + row * 2 * ortx_bgemm_tile_pairs(kc) + (k - k0);
}

static inline int64_t ortx_bgemm_tiles_elements(int64_t rows, int64_t depth) {
    int64_t block = ortx_bgemm_block_depth(depth), k0 = depth > 0 ? (depth - 1) / block * block : 0;
    return ortx_bgemm_tiles_block_offset(k0, rows, depth) +
           ortx_round_up(rows, ORTX_BGEMM_TILE_ROWS) * 2 * ortx_bgemm_tile_pairs(depth - k0);
}

/* Writes B[k0:k0+kc, n0:n0+nc] as bf16 K-pair panels at dst (B operands already rounded, e.g. conv's bf16 planes),
 * panel i at dst + i * NR * 2 * panel_pairs (panel_pairs >= ceil(kc / 2); rows past ceil(kc / 2) are not written). */
typedef void (*ortx_bgemm_pack_pairs_fn)(const void *context, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                                         int64_t panel_pairs, uint16_t *dst);

/* An operand of ortx_bgemm: bf16 K-pair panels over the whole operand (packed != NULL), or for B panels written by
 * pack_pairs(pack_context, ...), or fp32 read as in ortx_gemm_operand (raw with strides, or for B produced in
 * gemm.h's fp32 panels by pack_b) and rounded to bf16 while it is packed. */
typedef struct ortx_bgemm_operand {
    const uint16_t *packed;
    const float *data;
    int64_t row_stride, col_stride;
    ortx_gemm_pack_b_fn pack_b;
    const void *pack_context;
    ortx_bgemm_pack_pairs_fn pack_pairs;
} ortx_bgemm_operand;

/* Micro-kernel over `pairs` k pairs: c[0..MR)[0..NR*vectors) (row stride ldc) = (accumulate ? c : 0) + a * b,
 * a: one A panel ([pairs][MR][2]), b: `vectors` adjacent B panels ([pairs][NR][2] each, b + v*NR*2*pairs), then
 * the epilogue of the tile at (row0, col0) when epilogue is not NULL. */
typedef void (*ortx_bgemm_micro_fn)(int64_t pairs, const uint16_t *a, const uint16_t *b, float *c, int64_t ldc,
                                    int accumulate, const ortx_gemm_epilogue *epilogue, int64_t row0, int64_t col0);
/* dst[2j] = bf16(first[j]), dst[2j+1] = bf16(second[j]) (0 when second is NULL) for j < count; count <= NR. */
typedef void (*ortx_bf16_pair_rows_fn)(const float *first, const float *second, int64_t count, uint16_t *dst);
/* pair_rows over a run of any length: for each chunk c of NR columns, dst + c * chunk_stride receives chunk c's
 * words (first[16c + j], second[16c + j]); pad: the last chunk is written whole (zero words past count), else only
 * its count % NR words are written. */
typedef void (*ortx_bf16_pair_run_fn)(const float *first, const float *second, int64_t count, uint16_t *dst,
                                      int64_t chunk_stride, int pad);
/* dst[2j] = bf16(first[j * step]), dst[2j+1] = bf16(second[j * step]) (0 when second is NULL) for j < count, the
 * words contiguous: a strided phase row of the direct conv's planes (reads only the elements it uses). */
typedef void (*ortx_bf16_pair_run_strided_fn)(const float *first, const float *second, int64_t count, int64_t step,
                                              uint16_t *dst);
/* dst[j] = bf16(src[j]) for j < count. */
typedef void (*ortx_bf16_convert_fn)(const float *src, int64_t count, uint16_t *dst);
/* One K pair of a 16-pixel panel of a conv's patch matrix from two rows of bf16 values: dst[2j] = first[at[j]],
 * dst[2j+1] = second[at[j]] (0 when second is NULL) for j < NR. The pixels run along output rows of `width`
 * pixels, the first at column `column`: inside a row at[j+1] = at[j] + stride (1 or 2), so each row's run is one
 * masked load; reads only the elements it uses. */
typedef void (*ortx_bf16_interleave_fn)(const uint16_t *first, const uint16_t *second, const int32_t *at,
                                        int64_t column, int64_t width, int64_t stride, uint16_t *dst);

/* The direct conv's tile (conv_bf16_direct.c): for i < MR, j < 16 * vectors, acc[i][j] = sum over the `pairs` k
 * pairs q of the products of A pair a[q][i][0..1] and the bf16 pair x[offsets[q] + j] (one 32-bit word: two input
 * channels of one pixel), in vdpbf16ps's order (per pair, the odd product then the even one). Then, for each vector
 * v, the lanes set in masks[v] are packed together in lane order and, for rows i < rows, written to
 * c[i * ldc + at[v] ...] after the epilogue of (row0 + i, at[v] + lane) (alpha, bias_row, residual with column
 * stride 1, activation); a vector whose mask is 0 is not stored. prefetch > 0: also fetch the words at
 * x + offsets[q] + prefetch (the next tile's) into L1. */
typedef void (*ortx_bf16_direct_tile_fn)(int64_t pairs, const uint16_t *a, const uint32_t *x, const int32_t *offsets,
                                         int vectors, const uint32_t *masks, const int64_t *at, float *c, int64_t ldc,
                                         int64_t rows, const ortx_gemm_epilogue *epilogue, int64_t row0,
                                    int64_t prefetch);

/* The AMX block (a_tiles paths; inside tiles_begin/tiles_end): C[0..mc)[0..nc) (row stride ldc) = (accumulate ?
 * C : 0) + A * B over `pairs` k pairs, a: the block's A rows in the tiles format (row stride 2 *
 * ortx_bgemm_tile_pairs(2 * pairs), at least round_up(mc, 16) rows readable), b: ceil(nc / NR) K-pair B panels of
 * b_panel_pairs rows each ([b_panel_pairs][NR][2]; when that is a whole number of 16-pair chunks its rows past
 * `pairs` must be zero, else the last partial chunk is copied zero-padded into tail: ceil(nc / NR) * NR * 2 *
 * TILE_PAIRS bf16 of scratch), then the epilogue of the block at (row0, col0) when epilogue is not NULL. */
typedef void (*ortx_bgemm_block_fn)(int64_t pairs, const uint16_t *a, const uint16_t *b, int64_t b_panel_pairs,
                                    int64_t mc, int64_t nc, float *c, int64_t ldc, int accumulate,
                                    const ortx_gemm_epilogue *epilogue, int64_t row0, int64_t col0, uint16_t *tail);

/* The AMX direct conv's step (conv_bf16_direct.c, tiles path; inside tiles_begin/tiles_end): for rows i < rows
 * (<= 32) and the 16 * vectors virtual pixels j of x (input planes: the 16 words of pairs 16h .. 16h+15 at virtual
 * pixel j of tap t are the 64 bytes at x + h * chunk_bytes + (tap_offsets[t] + j) * position_bytes; chunk planes
 * have 64-byte positions, the windowed stem form's overlap), acc[i][j] = sum over 16-pair chunks h and taps t of
 * those words times the weights' tile a + (h * taps + t) * 512 ([16 pairs][16 rows][2]; rows 16..31: + a_panel),
 * in tdpbf16ps's order; then per vector v the lanes set in masks[v] are packed together in lane order and written
 * to c[i * ldc + at[v] ...] after the epilogue of (row0 + i, at[v] + lane), as ortx_bf16_direct_tile_fn stores. */
typedef struct ortx_bf16_direct_pending ortx_bf16_direct_pending;
typedef void (*ortx_bf16_direct_tiles_fn)(int64_t taps, int64_t chunks, const uint16_t *a, int64_t a_panel,
                                          const uint8_t *x, const int32_t *tap_offsets, int64_t chunk_bytes,
                                          int64_t position_bytes, int vectors, const uint32_t *masks,
                                          const int64_t *at, float *c, int64_t ldc, int64_t rows,
                                          const ortx_gemm_epilogue *epilogue, int64_t row0,
                                          ortx_bf16_direct_pending *pending);

/* The store of an AMX direct step is deferred: a step's products are left in `scratch` and its store runs during
 * the next step's tile products (or at direct_finish), so the vector units work while the tile unit does.
 * direct_tiles runs `pending`'s store (when `valid`) after issuing its own products, then makes its own step the
 * pending one in the other scratch. A thread's steps share one pending record; direct_finish stores the last. */
struct ortx_bf16_direct_pending {
    float scratch[2][32 * 32] __attribute__((aligned(64)));  /* [pixel][row], alternating */
    int valid, which, vectors, mt;
    int blocked;  /* c is NCHWc (conv.h's blocked layout, 16 channels a vector): row blocks 16 * ldc apart */
    int pair_rows;  /* or c is the step's chunk plane of bf16 pair rows (row0 a multiple of 32) */
    int residual_pair_rows;  /* the epilogue's residual is bf16 pair rows (of c's channels), not blocked fp32 */
    uint32_t masks[2];
    int64_t at[2], ldc, rows, row0;
    float *c;
    const ortx_gemm_epilogue *epilogue;
};

/* The AMX direct conv's chunk planes (a_tiles paths): for k < count, the 64 bytes at dst + 16k are the 16 words
 * (bf16(channels[2j][k * step]) low, bf16(channels[2j + 1][k * step]) high), j < 16; a NULL channel reads zeros. */
typedef void (*ortx_bf16_chunk_run_fn)(const float *const *channels, int64_t step, int64_t count, uint32_t *dst);
/* The same from blocked input (conv.h's NCHWc): the 16 words at dst + 16k hold channels 0-15 of lo[k * step] and
 * 0-15 of hi[k * step] (16 floats each) as consecutive pairs; channels past lo_channels / hi_channels (and all
 * of a NULL hi) read zeros. */
typedef void (*ortx_bf16_chunk_run_blocked_fn)(const float *lo, const float *hi, int64_t step, int64_t count,
                                               int lo_channels, int hi_channels, uint32_t *dst);
/* The windowed stem form's rows (conv_bf16_direct.c): dst[j * channels + c] = bf16(x[c * channel_stride + j]) for
 * j < count, c < channels (<= 8): a row of pixels with their channels side by side. Returns nonzero when any of
 * the values read is an infinity or a NaN. */
typedef int (*ortx_bf16_pixel_row_fn)(const float *x, int64_t channel_stride, int64_t channels, int64_t count,
                                      uint16_t *dst);

/* The tile configuration a thread had before a tiles task (64 bytes, sttilecfg's; palette 0: none). */
typedef struct ortx_tile_state {
    uint8_t bytes[64];
} ortx_tile_state;

typedef struct ortx_bgemm_isa {
    const char *name;
    int a_tiles;                     /* A in the tiles format, products by `block` (else MR-row K-pair panels) */
    ortx_bgemm_block_fn block;
    ortx_bgemm_micro_fn micro;       /* MR x NR */
    ortx_bgemm_micro_fn micro_wide;  /* MR x 2NR */
    ortx_bf16_pair_rows_fn pair_rows;
    ortx_bf16_pair_run_fn pair_run;
    ortx_bf16_pair_run_strided_fn pair_run_strided;
    ortx_bf16_convert_fn convert;
    ortx_bf16_interleave_fn interleave;
    ortx_bf16_direct_tile_fn direct_tile;
    ortx_bf16_direct_tiles_fn direct_tiles;  /* a_tiles paths: the direct conv's AMX step */
    void (*direct_finish)(ortx_bf16_direct_pending *pending);  /* ... and the store of its last step */
    ortx_bf16_chunk_run_fn chunk_run;        /* a_tiles paths: its input planes */
    ortx_bf16_chunk_run_blocked_fn chunk_run_blocked;  /* ... from blocked input */
    ortx_bf16_pixel_row_fn pixel_row;        /* ... the windowed stem form's */
    /* a_tiles paths: around each task that runs block or direct_tiles on a thread, load our tile configuration
     * (saving the thread's) and then give the thread its own back (or release the tiles): other AMX code on the
     * caller's thread (ONNX Runtime's, OpenVINO's kernels) may cache its configuration or have released it. */
    void (*tiles_begin)(ortx_tile_state *saved);
    void (*tiles_end)(const ortx_tile_state *saved);
} ortx_bgemm_isa;

void ortx_bf16_direct_tile_portable(int64_t pairs, const uint16_t *a, const uint32_t *x, const int32_t *offsets,
                                    int vectors, const uint32_t *masks, const int64_t *at, float *c, int64_t ldc,
                                    int64_t rows, const ortx_gemm_epilogue *epilogue, int64_t row0,
                                    int64_t prefetch);

extern const ortx_bgemm_isa ortx_bgemm_isa_portable;
extern const ortx_bgemm_isa ortx_bgemm_isa_avx512_bf16;
extern const ortx_bgemm_isa ortx_bgemm_isa_amx_bf16;

/* gemm_bf16_avx512.c's pieces, shared by the AMX table. */
void ortx_bf16_pair_rows_avx512_bf16(const float *first, const float *second, int64_t count, uint16_t *dst);
void ortx_bf16_pair_run_avx512_bf16(const float *first, const float *second, int64_t count, uint16_t *dst,
                                    int64_t chunk_stride, int pad);
void ortx_bf16_pair_run_strided_avx512_bf16(const float *first, const float *second, int64_t count, int64_t step,
                                            uint16_t *dst);
void ortx_bf16_convert_avx512_bf16(const float *src, int64_t count, uint16_t *dst);
void ortx_bf16_interleave_avx512_bf16(const uint16_t *first, const uint16_t *second, const int32_t *at,
                                      int64_t column, int64_t width, int64_t stride, uint16_t *dst);
void ortx_bf16_direct_tile_avx512_bf16(int64_t pairs, const uint16_t *a, const uint32_t *x, const int32_t *offsets,
                                       int vectors, const uint32_t *masks, const int64_t *at, float *c, int64_t ldc,
                                       int64_t rows, const ortx_gemm_epilogue *epilogue, int64_t row0,
                                       int64_t prefetch);
void ortx_bgemm_micro_avx512_bf16(int64_t pairs, const uint16_t *a, const uint16_t *b, float *c, int64_t ldc,
                                  int accumulate, const ortx_gemm_epilogue *epilogue, int64_t row0, int64_t col0);
void ortx_bgemm_micro_wide_avx512_bf16(int64_t pairs, const uint16_t *a, const uint16_t *b, float *c, int64_t ldc,
                                       int accumulate, const ortx_gemm_epilogue *epilogue, int64_t row0,
                                       int64_t col0);

/* The AMX table when the CPU has AMX-BF16 (and it is allowed), else the AVX-512 BF16 table when the CPU has
 * AVX512_BF16 and the selected ISA is AVX-512, else the portable one. */
const ortx_bgemm_isa *ortx_bgemm_select_isa(void);

/* A operands (gemm_pack_bf16 which=0, conv_pack_bf16's gemm weights) are packed in the format of the path selected
 * when they are packed (tiles on AMX, else MR-row K-pair panels) and must run on that path: these follow it. */
int64_t ortx_bgemm_a_elements(int64_t rows, int64_t depth);
int64_t ortx_bgemm_a_index(int64_t row, int64_t k, int64_t rows, int64_t depth);
int64_t ortx_bgemm_a_block_offset(int64_t k0, int64_t rows, int64_t depth);
void ortx_bgemm_pack_a(const float *src, int64_t rows, int64_t depth, int64_t row_stride, int64_t col_stride,
                       float scale, uint16_t *dst);

int64_t ortx_bgemm_workspace_floats(int64_t M, int64_t N, int64_t K, int num_threads);

/* C (row stride ldc) = epilogue(bf16(A) * bf16(B)); workspace: ortx_bgemm_workspace_floats floats. */
void ortx_bgemm(int64_t M, int64_t N, int64_t K, const ortx_bgemm_operand *A, const ortx_bgemm_operand *B, float *C,
                int64_t ldc, const ortx_gemm_epilogue *epilogue, float *workspace, int num_threads);

/* Packs a raw fp32 operand (rows x depth, element (r, k) at src[r*rs + k*cs]) times scale into bf16 K-pair
 * panels of height `panel`; dst holds ortx_bgemm_packed_elements(rows, depth, panel) values. */
void ortx_bgemm_pack(const float *src, int64_t rows, int64_t depth, int64_t row_stride, int64_t col_stride,
                     int64_t panel, float scale, uint16_t *dst);

/* The direct form of conv2d_bf16 (conv_bf16_direct.c): whether a conv takes it (weights then packed by
 * ortx_conv_direct_pack_bf16, not as gemm panels), its workspace floats, its packed weight elements per group and
 * the weights' packing; ortx_conv_direct_bf16 runs one image and group (x: its first input channel, y: its first
 * output channel, weights: its panels). ortx_conv_direct_weight_index: element (m, c, tap) of a group's panels. */
struct ortx_conv_params;
int ortx_conv_direct_bf16_applies(const struct ortx_conv_params *p);
int64_t ortx_conv_direct_bf16_floats(const struct ortx_conv_params *p);
int64_t ortx_conv_direct_bf16_elements(const struct ortx_conv_params *p);
int64_t ortx_conv_direct_weight_index(const struct ortx_conv_params *p, int64_t m, int64_t c, int64_t tap);
void ortx_conv_direct_pack_bf16(const struct ortx_conv_params *p, const float *weights, uint16_t *dst);
/* The packed weights of conv2d_bf16's direct form in the format of the selected path (the AMX form's tiles, else
 * ortx_conv_direct_weight_index's panels): elements per group, element (m, c, tap). */
int64_t ortx_conv_direct_bf16_packed_elements(const struct ortx_conv_params *p);
int64_t ortx_conv_direct_bf16_packed_index(const struct ortx_conv_params *p, int64_t m, int64_t c, int64_t tap);
void ortx_conv_direct_bf16(const struct ortx_conv_params *p, const float *x, const uint16_t *weights, float *y,
                           const ortx_gemm_epilogue *epilogue, float *workspace, int threads,
                           const struct ortx_conv_params *transposed, int layout);
/* ortx_conv_direct_bf16's layout bits (the AMX form only, one group): x, and y with the residual, in conv.h's
 * blocked NCHWc layout instead of NCHW; or x, or y (its residual blocked), in bf16 pair rows (kernels/pair_rows.h:
 * a pixel's 64 bytes in a chunk are exactly a chunk plane's position, so the fill copies them, and a step's two
 * 16-row halves are rounded into them). */
#define ORTX_DIRECT_X_BLOCKED 1
#define ORTX_DIRECT_Y_BLOCKED 2
#define ORTX_DIRECT_X_PAIR_ROWS 4
#define ORTX_DIRECT_Y_PAIR_ROWS 8
#define ORTX_DIRECT_RESIDUAL_PAIR_ROWS 16  /* with a blocked or pair-rows y: its residual in pair rows */
/* Whether conv2d_bf16_nchwc runs p on the AMX direct form (else through NCHW copies, reorders around
 * conv2d_bf16: correct everywhere, never chosen by the lowering). */
int ortx_conv_direct_bf16_blocked_applies(const struct ortx_conv_params *p);
/* conv2d_bf16_nchwc's other convs and its reference: `conv` (conv2d_bf16 or its reference) on NCHW copies. */
void ortx_conv2d_bf16_nchwc_through_nchw(const int64_t *ints, const float *floats, void *const *buffers,
                                         int num_threads, ortx_kernel_fn conv);

/* conv2d_bf16's pixel-rows form (conv_bf16_rows.c): small output maps, vectors along output channels. */
int ortx_conv_rows_bf16_applies(const struct ortx_conv_params *p);
int64_t ortx_conv_rows_bf16_floats(const struct ortx_conv_params *p);
int64_t ortx_conv_rows_bf16_elements(const struct ortx_conv_params *p);
int64_t ortx_conv_rows_bf16_index(const struct ortx_conv_params *p, int64_t m, int64_t c, int64_t tap);
/* conv_bf16_rows_off (tests; not thread-safe): ints [1 = the form never applies, 0 = as its rule says]. */
void ortx_conv_rows_bf16_off(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv_rows_bf16(const struct ortx_conv_params *p, const float *x, const uint16_t *weights, float *y,
                         const ortx_gemm_epilogue *epilogue, float *workspace, int threads);

/* conv_transpose2d_bf16 (conv_transpose_bf16.c): a ConvTranspose whose kernel equals its stride (no overlap, no
 * padding), as ortx_conv_direct_bf16 of a 1x1 conv with Cout*KH*KW outputs whose tiles scatter into Y. */
int ortx_conv_transpose_bf16_applies(const struct ortx_conv_params *p);
void ortx_conv_transpose2d_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv_transpose_sizes_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv_transpose_pack_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv_transpose2d_bf16_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);

void ortx_conv2d_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv2d_bf16_nchwc(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv_bf16_nchwc_applies(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv_sizes_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv_pack_bf16(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);

/* Reference kernels (kernels/ref/gemm_bf16_ref.c). */
void ortx_gemm_bf16_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv2d_bf16_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv2d_bf16_nchwc_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);

#endif
