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

#include "bf16_direct_store_avx512.h"
#include "gemm_avx2.h"
#include "gemm_bf16.h"
#include "isa.h"

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

/* The direct conv's step (gemm_bf16.h's ortx_bf16_direct_tiles_fn): B tiles straight from the channel-pair planes
 * (16 pairs of one tap are 16 planes, plane_words apart), then through a 32x32 scratch to the kept lanes of each
 * vector, with gemm_bf16_avx512.c's direct-tile epilogue (alpha, bias_row, residual by fused multiply-add read
 * with the store's mask, activation). */
ORTX_TARGET_AMX_BF16 static inline __attribute__((always_inline)) void direct_tiles_step(
    const int mt, const int nt, int64_t taps, int64_t chunks, const uint16_t *a, int64_t a_panel, const uint32_t *x,
    const int32_t *tap_offsets, int64_t plane_words, float *scratch) {
    const int64_t b_bytes = plane_words * 4;
    _tile_zero(0);
    if (nt == 2) _tile_zero(1);
    if (mt == 2) _tile_zero(2);
    if (mt == 2 && nt == 2) _tile_zero(3);
    const uint16_t *at = a;
    for (int64_t h = 0; h < chunks; h++) {
        const uint32_t *chunk = x + h * ORTX_BGEMM_TILE_PAIRS * plane_words;
        for (int64_t t = 0; t < taps; t++, at += CHUNK) {
            const uint32_t *words = chunk + tap_offsets[t];
            /* the next k step's B rows into L1: the next tap's (or the next chunk's first tap's) 16 plane rows */
            const uint32_t *next = t + 1 < taps ? chunk + tap_offsets[t + 1]
                                                : chunk + ORTX_BGEMM_TILE_PAIRS * plane_words + tap_offsets[0];
            if (t + 1 < taps || h + 1 < chunks)
                for (int r = 0; r < 16; r++) {
                    _mm_prefetch((const char *)(next + r * plane_words), _MM_HINT_T0);
                    _mm_prefetch((const char *)(next + r * plane_words + 16 * nt - 1), _MM_HINT_T0);
                }
            _tile_loadd(4, at, 64);
            _tile_loadd(6, words, b_bytes);
            if (nt == 2) _tile_loadd(7, words + NR, b_bytes);
            _tile_dpbf16ps(0, 4, 6);
            if (nt == 2) _tile_dpbf16ps(1, 4, 7);
            if (mt == 2) {
                _tile_loadd(5, at + a_panel, 64);
                _tile_dpbf16ps(2, 5, 6);
                if (nt == 2) _tile_dpbf16ps(3, 5, 7);
            }
        }
    }
    _tile_stored(0, scratch, 128);
    if (nt == 2) _tile_stored(1, scratch + 16, 128);
    if (mt == 2) _tile_stored(2, scratch + 16 * 32, 128);
    if (mt == 2 && nt == 2) _tile_stored(3, scratch + 16 * 32 + 16, 128);
}

ORTX_TARGET_AMX_BF16 static void direct_tiles_amx_bf16(int64_t taps, int64_t chunks, const uint16_t *a,
                                                      int64_t a_panel, const uint32_t *x, const int32_t *tap_offsets,
                                                      int64_t plane_words, int vectors, const uint32_t *masks,
                                                      const int64_t *at, float *c, int64_t ldc, int64_t rows,
                                                      const ortx_gemm_epilogue *e, int64_t row0) {
    float scratch[32 * 32] __attribute__((aligned(64)));
    const int mt = rows > 16 ? 2 : 1;
    if (mt == 2 && vectors == 2)
        direct_tiles_step(2, 2, taps, chunks, a, a_panel, x, tap_offsets, plane_words, scratch);
    else if (mt == 2)
        direct_tiles_step(2, 1, taps, chunks, a, a_panel, x, tap_offsets, plane_words, scratch);
    else if (vectors == 2)
        direct_tiles_step(1, 2, taps, chunks, a, a_panel, x, tap_offsets, plane_words, scratch);
    else
        direct_tiles_step(1, 1, taps, chunks, a, a_panel, x, tap_offsets, plane_words, scratch);
    for (int v = 0; v < vectors; v++) {
        __mmask16 keep = (__mmask16)masks[v];
        int count = __builtin_popcount(masks[v]);
        if (!count) continue;
        __mmask16 store = (__mmask16)((1u << count) - 1u);
        for (int64_t i = 0; i < rows; i++) {
            ortx_bf16_direct_store_row(_mm512_load_ps(scratch + i * 32 + 16 * v), keep, store, e, row0 + i, at[v],
                                       c + i * ldc + at[v]);
        }
    }
}

const ortx_bgemm_isa ortx_bgemm_isa_amx_bf16 = {
    .name = "amx_bf16",
    .a_tiles = 1,
    .block = block_amx_bf16,
    .micro = ortx_bgemm_micro_avx512_bf16,
    .micro_wide = ortx_bgemm_micro_wide_avx512_bf16,
    .pair_rows = ortx_bf16_pair_rows_avx512_bf16,
    .pair_run = ortx_bf16_pair_run_avx512_bf16,
    .convert = ortx_bf16_convert_avx512_bf16,
    .interleave = ortx_bf16_interleave_avx512_bf16,
    .direct_tile = ortx_bf16_direct_tile_avx512_bf16,
    .direct_tiles = direct_tiles_amx_bf16,
    .tiles_begin = tiles_begin_amx,
    .tiles_end = tiles_end_amx,
};

#else
/* Never selected off x86 (ortx_bgemm_select_isa checks the CPU first). */
const ortx_bgemm_isa ortx_bgemm_isa_amx_bf16 = {.name = "amx_bf16"};
#endif
