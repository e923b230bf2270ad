/* AMX-BF16 pieces of the bf16 GEMM (gemm_bf16.h): the block function of the a_tiles path, tdpbf16ps on 16x16
 * fp32 C tiles; rounding, pairing and the direct conv's tile are gemm_bf16_avx512.c's.
 *
 * 1. Each task loads the one tile configuration (every tile 16 rows x 64 bytes: C in tmm0-3, A in tmm4-5, B in
 *    tmm6-7) in tiles_begin and gives the thread its previous one back in tiles_end: other AMX code on the
 *    caller's thread (ONNX Runtime's and OpenVINO's kernels) releases or replaces the configuration between our
 *    calls, so a thread-local "configured" flag ran tileloadd unconfigured (SIGILL in benchmarks/bf16.py), and
 *    code that caches its own must find it again. A load is ~130 cycles: per task, not per 32x32 step.
 * 2. Panels packed by the driver hold whole 16-pair chunks (zero rows past the last pair); prepacked panels' last,
 *    partial 16 pairs are copied zero-padded into `tail` once per block, so no tile reads past its panel (the next
 *    panel's values times A's zero padding would still turn an infinity into NaN).
 * 3. The block is swept in steps of 32 rows x 32 columns (2x2 C tiles; 1 at the edges), rows outer so a step's
 *    A strip (32 rows x up to 256 pairs, 32 KB) stays in L1 while B's panels stream: per 16 k pairs two A and two B
 *    tileloadd and four tdpbf16ps. Full steps accumulate in C itself (loaded when a K block follows another),
 *    edge steps in a 32x32 scratch.
 * 4. After the last K block, the epilogue: full steps go through a scratch and gemm_avx2.h's register epilogue
 *    into C (one pass), edge steps and broadcast residuals through the fp32 ISA's epilogue on the stored outputs.
 * Numerics: tdpbf16ps sums both products of a pair before adding them to the accumulator, so this path is not
 * bitwise the vdpbf16ps path; ortx/ep/precision.py states the bound the tests check.
 */
#include <string.h>

#include "activation_avx512.h"
#include "bf16_direct_store_avx512.h"
#include "gemm_avx2.h"
#include "gemm_bf16.h"
#include "isa.h"
#include "transpose_avx512.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
} tile_config;

/* A constant in memory: gcc 12 deleted a stack copy's stores as dead (ldtilecfg's builtin does not declare that it
 * reads them), and ldtilecfg faulted on the zero rows. */
static const tile_config amx_config = {
    .palette = 1,
    .bytes_per_row = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

ORTX_TARGET_AMX_BF16 static void tiles_begin_amx(ortx_tile_state *saved) {
    _tile_storeconfig(saved->bytes);
    _tile_loadconfig(&amx_config);
}

ORTX_TARGET_AMX_BF16 static void tiles_end_amx(const ortx_tile_state *saved) {
    if (saved->bytes[0])
        _tile_loadconfig(saved->bytes);
    else
        _tile_release();
}

enum { NR = ORTX_GEMM_NR, CHUNK = ORTX_BGEMM_TILE_PAIRS * ORTX_GEMM_NR * 2 /* bf16 of one 16-pair B tile */ };

/* One step of mt x nt C tiles: loaded from `load` (row stride load_ld floats) when accumulating, else zero; `full`
 * 16-pair chunks from the panels, then one from the tails when `from_tail`; stored to `store` (row stride
 * store_ld). A rows at a (a_stride elements apart), B panels b0, b1 (their tails tail0, tail1). */
ORTX_TARGET_AMX_BF16 static inline __attribute__((always_inline)) void step_tiles(
    const int mt, const int nt, int64_t full, int from_tail, const uint16_t *a, int64_t a_stride, const uint16_t *b0,
    const uint16_t *b1, const uint16_t *tail0, const uint16_t *tail1, const float *load, int64_t load_ld,
    float *store, int64_t store_ld, int accumulate) {
    const int64_t a_bytes = a_stride * 2, in_bytes = load_ld * 4, out_bytes = store_ld * 4;
    const uint16_t *a1 = a + ORTX_BGEMM_TILE_ROWS * a_stride;
    if (accumulate) {
        _tile_loadd(0, load, in_bytes);
        if (nt == 2) _tile_loadd(1, load + 16, in_bytes);
        if (mt == 2) _tile_loadd(2, load + 16 * load_ld, in_bytes);
        if (mt == 2 && nt == 2) _tile_loadd(3, load + 16 * load_ld + 16, in_bytes);
    } else {
        _tile_zero(0);
        if (nt == 2) _tile_zero(1);
        if (mt == 2) _tile_zero(2);
        if (mt == 2 && nt == 2) _tile_zero(3);
    }
    for (int64_t q = 0; q < full + from_tail; q++) {
        const uint16_t *bq0 = q < full ? b0 + q * CHUNK : tail0, *bq1 = q < full ? b1 + q * CHUNK : tail1;
        if (q + 1 < full)  /* the next B tiles into L1 (measured 5-15% on 1 thread; A's strip is in L1 already) */
            for (int line = 0; line < CHUNK * 2 / 64; line++) {
                _mm_prefetch((const char *)(b0 + (q + 1) * CHUNK) + 64 * line, _MM_HINT_T0);
                if (nt == 2) _mm_prefetch((const char *)(b1 + (q + 1) * CHUNK) + 64 * line, _MM_HINT_T0);
            }
        _tile_loadd(4, a + q * 2 * ORTX_BGEMM_TILE_PAIRS, a_bytes);
        _tile_loadd(6, bq0, 64);
        if (nt == 2) _tile_loadd(7, bq1, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (nt == 2) _tile_dpbf16ps(1, 4, 7);
        if (mt == 2) {
            _tile_loadd(5, a1 + q * 2 * ORTX_BGEMM_TILE_PAIRS, a_bytes);
            _tile_dpbf16ps(2, 5, 6);
            if (nt == 2) _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, store, out_bytes);
    if (nt == 2) _tile_stored(1, store + 16, out_bytes);
    if (mt == 2) _tile_stored(2, store + 16 * store_ld, out_bytes);
    if (mt == 2 && nt == 2) _tile_stored(3, store + 16 * store_ld + 16, out_bytes);
}

/* Step 4's fused form: rows x (16 * nt) outputs from the scratch through the register epilogue (gemm_avx2.h's,
 * as the vdpbf16ps micro-kernel's) into C: one pass instead of a store and a read-modify-write of C. */
ORTX_TARGET_AMX_BF16 static void epilogue_from_scratch(const float *scratch, int64_t rows, int nt, float *c,
                                                       int64_t ldc, const ortx_gemm_epilogue *e, int64_t row0,
                                                       int64_t col0) {
    for (int64_t i = 0; i < rows; i++)
        for (int v = 0; v < nt; v++) {
            __m256 lo = _mm256_load_ps(scratch + i * 32 + 16 * v), hi = _mm256_load_ps(scratch + i * 32 + 16 * v + 8);
            epilogue_registers_avx2(&lo, &hi, e, row0 + i, col0 + 16 * v);
            _mm256_storeu_ps(c + i * ldc + 16 * v, lo);
            _mm256_storeu_ps(c + i * ldc + 16 * v + 8, hi);
        }
}

ORTX_TARGET_AMX_BF16 static void block_amx_bf16(int64_t pairs, const uint16_t *a, const uint16_t *b,
                                               int64_t b_panel_pairs, int64_t mc, int64_t nc, float *c, int64_t ldc,
                                               int accumulate, const ortx_gemm_epilogue *epilogue, int64_t row0,
                                               int64_t col0, uint16_t *tail) {
    int64_t full = pairs / ORTX_BGEMM_TILE_PAIRS, rest = pairs % ORTX_BGEMM_TILE_PAIRS;
    const int64_t panels = (nc + NR - 1) / NR, panel_elements = NR * 2 * b_panel_pairs;
    const int64_t a_stride = 2 * ortx_bgemm_tile_pairs(2 * pairs);
    if (rest && b_panel_pairs >= ortx_bgemm_tile_pairs(2 * pairs)) {  /* zero-padded panels: the tail in place */
        full++;
        rest = 0;
    }
    if (rest) {  /* step 2 */
        for (int64_t p = 0; p < panels; p++) {
            memcpy(tail + p * CHUNK, b + p * panel_elements + full * CHUNK, rest * NR * 2 * sizeof(uint16_t));
            memset(tail + p * CHUNK + rest * NR * 2, 0, (CHUNK - rest * NR * 2) * sizeof(uint16_t));
        }
    }
    /* broadcast residual columns need the generic epilogue (as in the vdpbf16ps micro-kernel) */
    const int fuse = epilogue && !(epilogue->residual && epilogue->residual_col_stride != 1);
    float scratch[32 * 32] __attribute__((aligned(64)));
    for (int64_t ir = 0; ir < mc; ir += 32) {  /* step 3 */
        const int64_t rows = mc - ir < 32 ? mc - ir : 32;
        const int mt = rows > 16 ? 2 : 1;
        for (int64_t jr = 0; jr < nc; jr += 32) {
            const int64_t cols = nc - jr < 32 ? nc - jr : 32;
            const int nt = cols > 16 ? 2 : 1;
            const uint16_t *b0 = b + jr / NR * panel_elements, *tail0 = tail + jr / NR * CHUNK;
            const int edge = rows != 16 * mt || cols != 16 * nt;
            float *out = c + ir * ldc + jr, *load = out, *store = out;
            int64_t load_ld = ldc, store_ld = ldc;
            if (edge) {
                load = store = scratch;
                load_ld = store_ld = 32;
                if (accumulate)
                    for (int64_t i = 0; i < rows; i++) memcpy(scratch + i * 32, out + i * ldc, cols * sizeof(float));
            } else if (fuse) {
                store = scratch;
                store_ld = 32;
            }
            const uint16_t *ai = a + ir * a_stride, *b1 = nt == 2 ? b0 + panel_elements : b0;
            const uint16_t *tail1 = nt == 2 ? tail0 + CHUNK : tail0;
            if (mt == 2 && nt == 2)
                step_tiles(2, 2, full, rest != 0, ai, a_stride, b0, b1, tail0, tail1, load, load_ld, store, store_ld,
                           accumulate);
            else if (mt == 2)
                step_tiles(2, 1, full, rest != 0, ai, a_stride, b0, b1, tail0, tail1, load, load_ld, store, store_ld,
                           accumulate);
            else if (nt == 2)
                step_tiles(1, 2, full, rest != 0, ai, a_stride, b0, b1, tail0, tail1, load, load_ld, store, store_ld,
                           accumulate);
            else
                step_tiles(1, 1, full, rest != 0, ai, a_stride, b0, b1, tail0, tail1, load, load_ld, store, store_ld,
                           accumulate);
            if (!edge && fuse) {  /* step 4 */
                epilogue_from_scratch(scratch, rows, nt, out, ldc, epilogue, row0 + ir, col0 + jr);
                continue;
            }
            if (edge)
                for (int64_t i = 0; i < rows; i++) memcpy(out + i * ldc, scratch + i * 32, cols * sizeof(float));
            if (epilogue)
                ortx_gemm_select_isa()->epilogue(out, ldc, rows, cols, row0 + ir, col0 + jr, epilogue);
        }
    }
}

/* Elements 0, 2, .., 2 * (count - 1) of x (count <= 16), zeros past them; reads nothing past x[2 * count - 2]. A
 * stride-2 conv's x-unfolded planes (ResNet's 7x7/2 stem) read every second input column: two masked loads and a
 * permute instead of a 16-element gather (the stem alone 0.977x, ResNet-18-style 0.984x, in-process at 2 threads,
 * the same bits; a prefetch of the next tap's A rows in the direct steps measured 1.02-1.03x and was not kept). */
ORTX_TARGET_AMX_BF16 static inline __m512 every_second(const float *x, int64_t count) {
    static const int32_t evens[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    const int64_t floats = 2 * count - 1;
    const __mmask16 first = (__mmask16)(floats >= 16 ? 0xFFFF : (1u << floats) - 1u);
    const __mmask16 second = (__mmask16)(floats <= 16 ? 0 : (1u << (floats - 16)) - 1u);
    const __m512 a = _mm512_maskz_loadu_ps(first, x), b = _mm512_maskz_loadu_ps(second, x + 16);
    const __m512 picked = _mm512_permutex2var_ps(a, _mm512_loadu_si512(evens), b);
    return _mm512_maskz_mov_ps((__mmask16)(count >= 16 ? 0xFFFF : (1u << count) - 1u), picked);
}

/* gemm_bf16.h's ortx_bf16_chunk_run_fn: per 16 positions, each channel pair's 16 words as pair_run makes them
 * (vcvtne2ps2bf16 then the even/odd interleave), then a 16x16 transpose so that each position's 16 pairs are one
 * 64-byte row of an A tile. */
ORTX_TARGET_AMX_BF16 static void chunk_run_amx_bf16(const float *const *channels, int64_t step, int64_t count,
                                                    uint32_t *dst) {
    static const uint16_t interleave[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                            8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i order = _mm512_loadu_si512(interleave);
    const __m512i columns = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32((int)step));
    for (int64_t k = 0; k < count; k += 16) {
        const int64_t left = count - k < 16 ? count - k : 16;
        const __mmask16 mask = (__mmask16)((1u << left) - 1u);
        __m512 words[16];  /* 32-bit words moved as floats: the transpose's shuffles keep every bit */
        for (int j = 0; j < 16; j++) {
            __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
            const float *even = channels[2 * j], *odd = channels[2 * j + 1];
            if (step == 1) {
                if (even) lo = _mm512_maskz_loadu_ps(mask, even + k);
                if (odd) hi = _mm512_maskz_loadu_ps(mask, odd + k);
            } else if (step == 2) {  /* two loads and a permute, not a 16-element gather */
                if (even) lo = every_second(even + 2 * k, left);
                if (odd) hi = every_second(odd + 2 * k, left);
            } else {
                if (even) lo = _mm512_mask_i32gather_ps(lo, mask, columns, even + k * step, 4);
                if (odd) hi = _mm512_mask_i32gather_ps(hi, mask, columns, odd + k * step, 4);
            }
            words[j] = _mm512_castsi512_ps(_mm512_permutexvar_epi16(order, (__m512i)_mm512_cvtne2ps_pbh(hi, lo)));
        }
        transpose16(words);
        for (int64_t i = 0; i < left; i++) _mm512_storeu_ps(dst + (k + i) * 16, words[i]);
    }
}

/* gemm_bf16.h's ortx_bf16_chunk_run_blocked_fn: one conversion per position, no transpose (the blocked vectors
 * already hold a pixel's channels side by side). */
ORTX_TARGET_AMX_BF16 static void chunk_run_blocked_amx_bf16(const float *lo, const float *hi, int64_t step,
                                                            int64_t count, int lo_channels, int hi_channels,
                                                            uint32_t *dst) {
    const __mmask16 lo_mask = (__mmask16)(lo_channels >= 16 ? 0xffffu : (1u << lo_channels) - 1u);
    const __mmask16 hi_mask = (__mmask16)(!hi || hi_channels <= 0 ? 0u : hi_channels >= 16 ? 0xffffu
                                                                                         : (1u << hi_channels) - 1u);
    for (int64_t k = 0; k < count; k++) {
        __m512 first = _mm512_maskz_loadu_ps(lo_mask, lo + k * step);
        __m512 second = hi_mask ? _mm512_maskz_loadu_ps(hi_mask, hi + k * step) : _mm512_setzero_ps();
        _mm512_storeu_si512(dst + 16 * k, (__m512i)_mm512_cvtne2ps_pbh(second, first));
    }
}

/* gemm_bf16.h's ortx_bf16_pixel_row_fn: per 16 pixels the channels' rows are rounded two to a vector (channel 2i
 * in lanes 0-15, 2i + 1 in 16-31) and each 32-value output vector is picked from them by one or two word permutes
 * (value g of the 16 pixels is channel g % channels of pixel g / channels). */
ORTX_TARGET_AMX_BF16 static int pixel_row_amx_bf16(const float *x, int64_t channel_stride, int64_t channels,
                                                   int64_t count, uint16_t *dst) {
    uint16_t index[128] = {0};  /* [output vector][lane] */
    __mmask32 upper[4] = {0, 0, 0, 0};  /* lanes from channels 4-7 */
    for (int pixel = 0, g = 0; pixel < 16; pixel++)
        for (int c = 0; c < channels; c++, g++) {
            index[g] = (uint16_t)(c * 16 % 64 + pixel);
            if (c >= 4) upper[g / 32] |= (__mmask32)1u << (g % 32);
        }
    const __m512i exponent = _mm512_set1_epi32(0x7f800000);
    __mmask16 special = 0;
    for (int64_t k = 0; k < count; k += 16) {
        const int64_t left = count - k < 16 ? count - k : 16, values = left * channels;
        const __mmask16 mask = (__mmask16)((1u << left) - 1u);
        __m512i rows[4];
        for (int i = 0; i < 4; i++) {
            __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
            if (2 * i < channels) lo = _mm512_maskz_loadu_ps(mask, x + 2 * i * channel_stride + k);
            if (2 * i + 1 < channels) hi = _mm512_maskz_loadu_ps(mask, x + (2 * i + 1) * channel_stride + k);
            special |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(lo), exponent), exponent) |
                       _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(hi), exponent), exponent);
            rows[i] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
        }
        for (int v = 0; 32 * v < values; v++) {
            const __m512i order = _mm512_loadu_si512(index + 32 * v);
            __m512i picked = _mm512_permutex2var_epi16(rows[0], order, rows[1]);
            if (upper[v]) picked = _mm512_mask_blend_epi16(upper[v], picked,
                                                           _mm512_permutex2var_epi16(rows[2], order, rows[3]));
            const int64_t n = values - 32 * v;
            _mm512_mask_storeu_epi16(dst + k * channels + 32 * v, n >= 32 ? (__mmask32)~0u : ((__mmask32)1u << n) - 1u,
                                     picked);
        }
    }
    return special != 0;
}

/* The direct conv's step (gemm_bf16.h's ortx_bf16_direct_tiles_fn), with the activations as A and the weights as
 * B: an A tile is 16 virtual pixels x 16 pairs, the 1 KB at one tap's offset in a chunk plane (64-byte rows one
 * pixel apart, so every tap's rows are whole cache lines); a B tile is 16 pairs x 16 output rows of the packed
 * weights. C tiles are pixels x rows; they go to a 32x32 scratch and, during the next step's products (gemm_bf16.h's
 * ortx_bf16_direct_pending), are transposed to rows x pixels and leave through gemm_bf16_avx512.c's direct-tile
 * store (alpha, bias_row, residual by fused multiply-add read with the store's mask, activation). mt: 16-row weight
 * tiles (1-2), nt: 16-pixel halves (1-2). Measured against B tiles
 * read from channel-pair planes (this step before, the words of one tap 4 or 8 bytes off the lines): a stand-alone
 * replica of ResNet-18's 64 -> 64 3x3 conv at 56x56, 1 thread, went 39.5 -> 27.1 ns per 16-pair step. */
ORTX_TARGET_AMX_BF16 static inline __attribute__((always_inline)) void direct_tiles_stored(const int mt, const int nt,
                                                                                          float *scratch) {
    _tile_stored(0, scratch, 128);
    if (mt == 2) _tile_stored(1, scratch + 16, 128);
    if (nt == 2) _tile_stored(2, scratch + 16 * 32, 128);
    if (mt == 2 && nt == 2) _tile_stored(3, scratch + 16 * 32 + 16, 128);
}

/* Where the residual's block `block` (16 rows) starts: its blocked fp32 plane (16 * ldc floats a block), or, with
 * residual_pair_rows, its half of a chunk of bf16 pair rows (32 a pixel). NULL without a residual. */
ORTX_TARGET_AMX_BF16 static inline const void *residual_block(const ortx_bf16_direct_pending *s, int64_t block) {
    const ortx_gemm_epilogue *e = s->epilogue;
    if (!e->residual) return NULL;
    if (s->residual_pair_rows) return (const uint16_t *)e->residual + (block / 2 * s->ldc * 32 + block % 2 * 16);
    return e->residual + block * 16 * s->ldc;
}

/* Pixel q's 16 residual values of a block from residual_block's start (pair rows widened from bf16). */
ORTX_TARGET_AMX_BF16 static inline __attribute__((always_inline)) __m512 residual_at(const void *block, int64_t q,
                                                                                   int pair_rows) {
    if (!pair_rows) return _mm512_loadu_ps((const float *)block + 16 * q);
    __m256i half = _mm256_loadu_si256((const __m256i *)((const uint16_t *)block + 32 * q));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

/* What a step's store needs of its 16-row half o (rows row0 + 16o ...): the rows' mask (zeros past `rows`), their
 * biases and the residual block's start. */
typedef struct store_half {
    __mmask16 valid;
    __m512 bias;
    const void *residual;
} store_half;

ORTX_TARGET_AMX_BF16 static inline __attribute__((always_inline)) store_half half_of(const ortx_bf16_direct_pending *s,
                                                                                   int o) {
    const ortx_gemm_epilogue *e = s->epilogue;
    const int64_t rows = s->rows - 16 * o < 0 ? 0 : s->rows - 16 * o < 16 ? s->rows - 16 * o : 16;
    store_half h;
    h.valid = (__mmask16)(rows >= 16 ? 0xffffu : (1u << rows) - 1u);
    h.bias = e->bias_row && rows ? _mm512_maskz_loadu_ps(h.valid, e->bias_row + s->row0 + 16 * o) : _mm512_setzero_ps();
    h.residual = rows ? residual_block(s, s->row0 / 16 + o) : NULL;
    return h;
}

/* One C tile row (pixel q's 16 channels of a half) through the epilogue in direct_store_row's order (the NCHW
 * store's bits: activation_avx512.h's are the AVX2 activation's on 16 lanes), rows past the half's zeroed. `e` is
 * the caller's local copy of the step's epilogue: read through the pending record, every field was loaded again
 * after each store (the kernels are built without strict aliasing). */
ORTX_TARGET_AMX_BF16 static inline __attribute__((always_inline)) __m512 epilogue_row(
    const ortx_bf16_direct_pending *s, const ortx_gemm_epilogue *e, const store_half *h, __m512 value, int64_t q) {
    if (e->alpha != 1.0f) value = _mm512_mul_ps(value, _mm512_set1_ps(e->alpha));
    if (e->bias_row) value = _mm512_add_ps(value, h->bias);
    if (h->residual)
        value = _mm512_fmadd_ps(_mm512_set1_ps(e->residual_scale), residual_at(h->residual, q, s->residual_pair_rows),
                                value);
    if (e->activation != ORTX_ACT_NONE) value = ortx_activation_avx512(value, e->activation, e->param0, e->param1);
    return _mm512_maskz_mov_ps(h->valid, value);
}

/* A pending step's kept pixels in store order: scratch slot (16 v + lane) and output pixel (at[v] + the kept lanes
 * before it). */
ORTX_TARGET_AMX_BF16 static inline __attribute__((always_inline)) int pending_pixels(
    const ortx_bf16_direct_pending *s, uint8_t *slots, int64_t *pixels) {
    int count = 0;
    for (int v = 0; v < s->vectors; v++) {
        uint32_t keep = s->masks[v];
        for (int64_t q = s->at[v]; keep; keep &= keep - 1, q++) {
            slots[count] = (uint8_t)(16 * v + __builtin_ctz(keep));
            pixels[count++] = q;
        }
    }
    return count;
}

/* One kept pixel of a pending step from its C tile rows: into pair rows (its two halves through the epilogue,
 * rounded together into its 64 bytes) or into blocked vectors (one a half). */
ORTX_TARGET_AMX_BF16 static inline __attribute__((always_inline)) void store_pixel(
    const ortx_bf16_direct_pending *s, const ortx_gemm_epilogue *e, const store_half *h, int slot, int64_t q) {
    const float *pixel = s->scratch[s->which] + slot * 32;
    if (s->pair_rows) {
        __m512 lo = epilogue_row(s, e, &h[0], _mm512_load_ps(pixel), q);
        __m512 hi = s->mt == 2 ? epilogue_row(s, e, &h[1], _mm512_load_ps(pixel + 16), q) : _mm512_setzero_ps();
        _mm512_storeu_si512((uint16_t *)s->c + 32 * q, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        return;
    }
    for (int o = 0; o < s->mt; o++)
        _mm512_storeu_ps(s->c + o * 16 * s->ldc + 16 * q, epilogue_row(s, e, &h[o], _mm512_load_ps(pixel + 16 * o), q));
}

/* A pending step's store into a blocked or pair-rows output: a C tile row is one pixel's 16 channels, the vector
 * the layout stores, so no transpose (the interleaved stores' pixels, all at once). */
ORTX_TARGET_AMX_BF16 static void direct_store_rows(const ortx_bf16_direct_pending *s) {
    uint8_t slots[32];
    int64_t pixels[32];
    const int count = pending_pixels(s, slots, pixels);
    const store_half h[2] = {half_of(s, 0), half_of(s, 1)};
    const ortx_gemm_epilogue e = *s->epilogue;
    for (int i = 0; i < count; i++) store_pixel(s, &e, h, slots[i], pixels[i]);
}

/* A pending step's store: its C tiles transposed block by block to rows x pixels (in registers), then each row
 * vector through the direct-tile store. */
ORTX_TARGET_AMX_BF16 static void direct_store(const ortx_bf16_direct_pending *s) {
    if (s->pair_rows || s->blocked) {
        direct_store_rows(s);
        return;
    }
    const float *scratch = s->scratch[s->which];
    for (int v = 0; v < s->vectors; v++) {
        __mmask16 keep = (__mmask16)s->masks[v];
        int count = __builtin_popcount(s->masks[v]);
        if (!count) continue;
        __mmask16 store = (__mmask16)((1u << count) - 1u);
        for (int o = 0; o < s->mt; o++) {
            __m512 block[16];
            for (int i = 0; i < 16; i++) block[i] = _mm512_load_ps(scratch + (16 * v + i) * 32 + 16 * o);
            transpose16(block);
            int64_t rows = s->rows - 16 * o < 16 ? s->rows - 16 * o : 16;
            for (int64_t i = 0; i < rows; i++) {
                int64_t row = 16 * o + i;
                ortx_bf16_direct_store_row(block[i], keep, store, s->epilogue, s->row0 + row,
                                           s->at[v], s->c + row * s->ldc + s->at[v]);
            }
        }
    }
}

/* The step's products. With `interleave` (a pending step into pair rows or blocked vectors), that step's pixel
 * stores are spread over the k steps, a few after each one's products, so the vector work sits between the tile
 * instructions in program order instead of queuing behind all of them (as oneDNN's AMX brgemm interleaves its
 * tile stores). Kernel alone, 2 threads, in-process against the store after all products: ResNet-18's 3x3 convs
 * 64 @56 0.955-0.971, 64 -> 128 /2 0.973, 256 @14 0.982, 512 @7 0.990; PP-OCR det's 96 -> 24 @160 (blocked out)
 * 1.006. */
ORTX_TARGET_AMX_BF16 static inline __attribute__((always_inline)) void direct_tiles_products(
    const int mt, const int nt, int64_t taps, int64_t chunks, const uint16_t *w, int64_t w_panel, const uint8_t *x,
    const int32_t *tap_offsets, int64_t chunk_bytes, int64_t position_bytes, const ortx_bf16_direct_pending *pending,
    int interleave) {
    uint8_t slots[32];
    int64_t pixels[32];
    store_half halves[2] = {{0}, {0}};
    ortx_gemm_epilogue e = {.alpha = 1.0f};
    int count = 0, stored = 0, per = 0;
    if (interleave) {
        count = pending_pixels(pending, slots, pixels);
        per = (int)((count + taps * chunks - 1) / (taps * chunks));  /* pixels after each k step's products */
        halves[0] = half_of(pending, 0);
        halves[1] = half_of(pending, 1);
        e = *pending->epilogue;
    }
    _tile_zero(0);
    if (mt == 2) _tile_zero(1);
    if (nt == 2) _tile_zero(2);
    if (mt == 2 && nt == 2) _tile_zero(3);
    const uint16_t *wt = w;
    for (int64_t h = 0; h < chunks; h++) {
        const uint8_t *chunk = x + h * chunk_bytes;
        for (int64_t t = 0; t < taps; t++, wt += CHUNK) {
            const uint8_t *at = chunk + (int64_t)tap_offsets[t] * position_bytes;
            _tile_loadd(4, at, position_bytes);
            _tile_loadd(6, wt, 64);
            if (mt == 2) _tile_loadd(7, wt + w_panel, 64);
            _tile_dpbf16ps(0, 4, 6);
            if (mt == 2) _tile_dpbf16ps(1, 4, 7);
            if (nt == 2) {
                _tile_loadd(5, at + 16 * position_bytes, position_bytes);
                _tile_dpbf16ps(2, 5, 6);
                if (mt == 2) _tile_dpbf16ps(3, 5, 7);
            }
            if (interleave)
                for (const int until = stored + per < count ? stored + per : count; stored < until; stored++)
                    store_pixel(pending, &e, halves, slots[stored], pixels[stored]);
        }
    }
}

/* One step with compile-time tile counts: its products, then the pending store (overlapping them), then its own
 * tiles to scratch. */
ORTX_TARGET_AMX_BF16 static inline __attribute__((always_inline)) void direct_step(
    const int mt, const int nt, int64_t taps, int64_t chunks, const uint16_t *w, int64_t w_panel, const uint8_t *x,
    const int32_t *tap_offsets, int64_t chunk_bytes, int64_t position_bytes, const ortx_bf16_direct_pending *pending,
    float *scratch) {
    const int interleave = pending->valid && (pending->pair_rows || pending->blocked);
    direct_tiles_products(mt, nt, taps, chunks, w, w_panel, x, tap_offsets, chunk_bytes, position_bytes, pending,
                          interleave);
    if (pending->valid && !interleave) direct_store(pending);
    direct_tiles_stored(mt, nt, scratch);
}

ORTX_TARGET_AMX_BF16 static void direct_finish_amx_bf16(ortx_bf16_direct_pending *pending) {
    if (pending->valid) direct_store(pending);
    pending->valid = 0;
}

ORTX_TARGET_AMX_BF16 static void direct_tiles_amx_bf16(int64_t taps, int64_t chunks, const uint16_t *a,
                                                      int64_t a_panel, const uint8_t *x, const int32_t *tap_offsets,
                                                      int64_t chunk_bytes, int64_t position_bytes, int vectors,
                                                      const uint32_t *masks, const int64_t *at, float *c,
                                                      int64_t ldc, int64_t rows,
                                                      const ortx_gemm_epilogue *e, int64_t row0,
                                                      ortx_bf16_direct_pending *pending) {
    const int mt = rows > 16 ? 2 : 1, which = pending->valid ? 1 - pending->which : 0;
    float *scratch = pending->scratch[which];
    /* issue this step's products, run the previous step's store while the tile unit works, then store ours; steps
     * of fewer than 4 k steps store at once. (ResNet's 7x7 stem, 7 k steps, had been 6-11% slower deferred when its
     * planes were chunk planes; from windows, kernel alone at 2 threads, 0.97-0.985x deferred; 1x1 stride-2 convs
     * of 4 and 8 chunks 1.00-1.02x, a 3x3 conv from 32 channels 0.98x; 3x3 convs of 18-72 k steps gained 2-15%.) */
    if (taps * chunks < 4) {
        if (pending->valid) direct_store(pending);
        pending->valid = 0;
    }
    if (mt == 2 && vectors == 2)
        direct_step(2, 2, taps, chunks, a, a_panel, x, tap_offsets, chunk_bytes, position_bytes, pending, scratch);
    else if (mt == 2)
        direct_step(2, 1, taps, chunks, a, a_panel, x, tap_offsets, chunk_bytes, position_bytes, pending, scratch);
    else if (vectors == 2)
        direct_step(1, 2, taps, chunks, a, a_panel, x, tap_offsets, chunk_bytes, position_bytes, pending, scratch);
    else
        direct_step(1, 1, taps, chunks, a, a_panel, x, tap_offsets, chunk_bytes, position_bytes, pending, scratch);
    pending->valid = 1;
    pending->which = which;
    pending->vectors = vectors;
    pending->mt = mt;
    pending->masks[0] = masks[0];
    pending->masks[1] = vectors == 2 ? masks[1] : 0;
    pending->at[0] = at[0];
    pending->at[1] = vectors == 2 ? at[1] : 0;
    pending->c = c;
    pending->ldc = ldc;
    pending->rows = rows;
    pending->row0 = row0;
    pending->epilogue = e;
    if (taps * chunks < 4) direct_finish_amx_bf16(pending);
}

const ortx_bgemm_isa ortx_bgemm_isa_amx_bf16 = {
    .name = "amx_bf16",
    .a_tiles = 1,
    .block = block_amx_bf16,
    .micro = ortx_bgemm_micro_avx512_bf16,
    .micro_wide = ortx_bgemm_micro_wide_avx512_bf16,
    .pair_rows = ortx_bf16_pair_rows_avx512_bf16,
    .pair_run = ortx_bf16_pair_run_avx512_bf16,
    .pair_run_strided = ortx_bf16_pair_run_strided_avx512_bf16,
    .convert = ortx_bf16_convert_avx512_bf16,
    .interleave = ortx_bf16_interleave_avx512_bf16,
    .direct_tile = ortx_bf16_direct_tile_avx512_bf16,
    .direct_tiles = direct_tiles_amx_bf16,
    .direct_finish = direct_finish_amx_bf16,
    .chunk_run = chunk_run_amx_bf16,
    .chunk_run_blocked = chunk_run_blocked_amx_bf16,
    .pixel_row = pixel_row_amx_bf16,
    .tiles_begin = tiles_begin_amx,
    .tiles_end = tiles_end_amx,
};

#else
/* Never selected off x86 (ortx_bgemm_select_isa checks the CPU first). */
const ortx_bgemm_isa ortx_bgemm_isa_amx_bf16 = {.name = "amx_bf16"};
#endif
