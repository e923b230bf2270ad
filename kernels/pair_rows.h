/* The pair-rows layout: bf16 activations between the blocked kernels of a bf16 session on AMX.
 *
 * A [N, C, H, W] tensor stored as [N][ceil(C / 32)][H * W][32] bf16: channel c of pixel i at
 * ((n * chunks + c / 32) * H * W + i) * 32 + c % 32, and the channels past C zero (every writer writes them, and the
 * AMX steps multiply them by the packed weights' zero rows: anything else could turn into a NaN). A pixel's 64 bytes
 * in a chunk are exactly what conv_pointwise_nchwc_bf16's AMX steps round a pixel's 32 channels to (channels 2q and
 * 2q + 1 in 32-bit word q), so 16 pixels of a chunk are one A tile of whole cache lines, loaded as they lie; and
 * half the bytes of the fp32 blocked layout (conv.h's NCHWc) move through memory. Chunk-major like the blocked
 * layout, so a depthwise conv's block streams through one chunk plane (a pixel-major form, every pixel's chunks
 * together, made the depthwise conv read 32 bytes of every pixel's row per block: slower than fp32 blocked).
 * Writers round with vcvtneps2bf16 (round to nearest even, denormals to zero: ortx_bf16_from_float's numerics), as
 * the AMX steps round an fp32 input, so a tensor a 1x1 conv alone reads gives the same bits either way.
 * Helpers here widen one 16-channel block (block b: the half b % 2 of chunk b / 2) of `count` pixels from pair rows
 * (32 bf16 a pixel) to fp32 pixels of 16 floats (conv.h's blocked pixels), and round a chunk's two blocks back. */
#ifndef ORTX_PAIR_ROWS_H
#define ORTX_PAIR_ROWS_H

#include <stdint.h>

#include "gemm_bf16.h"
#include "isa.h"

#define ORTX_PAIR_ROWS_CHUNK 32 /* bf16 channels a pixel in a chunk */
static inline int64_t ortx_pair_rows_chunks(int64_t channels) { return (channels + 31) / 32; }

/* Portable forms; the AVX-512 ones below compute the same. Block b's 16 values of `count` pixels widened to fp32
 * (src at the pixel's block half). */
static inline void ortx_pair_rows_load_portable(const uint16_t *src, int64_t count, float *dst) {
    for (int64_t i = 0; i < count; i++)
        for (int l = 0; l < 16; l++) dst[i * 16 + l] = ortx_bf16_to_float(src[i * ORTX_PAIR_ROWS_CHUNK + l]);
}

/* A chunk's two blocks of `count` pixels (lo: its first 16 channels, hi: the next 16 or NULL past the last block;
 * 16 floats a pixel) rounded into pair rows, channels at and past `channels` (the chunk's real ones, 1..32 and
 * beyond) as zeros. */
static inline void ortx_pair_rows_store_portable(const float *lo, const float *hi, int64_t count, int64_t channels,
                                                 uint16_t *dst) {
    for (int64_t i = 0; i < count; i++)
        for (int l = 0; l < 32; l++) {
            const float *src = l < 16 ? lo : hi;
            dst[i * ORTX_PAIR_ROWS_CHUNK + l] = l < channels && src ? ortx_bf16_from_float(src[i * 16 + l % 16]) : 0;
        }
}

#if ORTX_HAVE_X86
#include <immintrin.h>

ORTX_TARGET_AVX512 static inline void ortx_pair_rows_load_avx512(const uint16_t *src, int64_t count, float *dst) {
    for (int64_t i = 0; i < count; i++) {
        __m256i half = _mm256_loadu_si256((const __m256i *)(src + i * ORTX_PAIR_ROWS_CHUNK));
        _mm512_storeu_si512(dst + i * 16, _mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
    }
}

ORTX_TARGET_AVX512_BF16 static inline void ortx_pair_rows_store_avx512_bf16(const float *lo, const float *hi,
                                                                            int64_t count, int64_t channels,
                                                                            uint16_t *dst) {
    const __mmask16 keep_lo = (__mmask16)(channels >= 16 ? 0xFFFF : (1u << channels) - 1u);
    const __mmask16 keep_hi = (__mmask16)(!hi || channels <= 16 ? 0 : channels >= 32 ? 0xFFFF
                                                                                  : (1u << (channels - 16)) - 1u);
    for (int64_t i = 0; i < count; i++) {
        __m512 a = _mm512_maskz_loadu_ps(keep_lo, lo + i * 16);
        __m512 b = keep_hi ? _mm512_maskz_loadu_ps(keep_hi, hi + i * 16) : _mm512_setzero_ps();
        _mm512_storeu_si512(dst + i * ORTX_PAIR_ROWS_CHUNK, (__m512i)_mm512_cvtne2ps_pbh(b, a));
    }
}
#endif

#endif
