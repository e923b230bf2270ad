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
 * Helpers here move one 16-channel block (block b: the half b % 2 of chunk b / 2) of `count` pixels between pair
 * rows (32 bf16 a pixel) and fp32 pixels of 16 floats (conv.h's blocked pixels). */
#ifndef ORTX_PAIR_ROWS_H
#define ORTX_PAIR_ROWS_H

#include <stdint.h>

#include "gemm_bf16.h"
#include "isa.h"

#define ORTX_PAIR_ROWS_CHUNK 32 /* bf16 channels a pixel in a chunk */
static inline int64_t ortx_pair_rows_chunks(int64_t channels) { return (channels + 31) / 32; }

/* Portable forms (and the oracle's): block b's lanes of `count` pixels widened to fp32 / rounded to bf16, lanes
 * at and past `channels` (0..16, the block's real channels) written as zeros; `zero_next`: also zero the 16 lanes
 * after the block (the second half of the last chunk when the channels end in its first). */
static inline void ortx_pair_rows_load_portable(const uint16_t *src, int64_t count, float *dst) {
    for (int64_t i = 0; i < count; i++)
        for (int l = 0; l < 16; l++) dst[i * 16 + l] = ortx_bf16_to_float(src[i * ORTX_PAIR_ROWS_CHUNK + l]);
}

static inline void ortx_pair_rows_store_portable(const float *src, int64_t count, int64_t channels, int zero_next,
                                                 uint16_t *dst) {
    for (int64_t i = 0; i < count; i++) {
        uint16_t *row = dst + i * ORTX_PAIR_ROWS_CHUNK;
        for (int l = 0; l < 16; l++) row[l] = l < channels ? ortx_bf16_from_float(src[i * 16 + l]) : 0;
        if (zero_next)
            for (int l = 16; l < 32; l++) row[l] = 0;
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

ORTX_TARGET_AVX512_BF16 static inline void ortx_pair_rows_store_avx512_bf16(const float *src, int64_t count,
                                                                            int64_t channels, int zero_next,
                                                                            uint16_t *dst) {
    const __mmask16 keep = (__mmask16)(channels >= 16 ? 0xFFFF : (1u << channels) - 1u);
    for (int64_t i = 0; i < count; i++) {
        __m256bh rounded = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(keep, src + i * 16));
        _mm256_storeu_si256((__m256i *)(dst + i * ORTX_PAIR_ROWS_CHUNK), (__m256i)rounded);
        if (zero_next) _mm256_storeu_si256((__m256i *)(dst + i * ORTX_PAIR_ROWS_CHUNK + 16), _mm256_setzero_si256());
    }
}
#endif

#endif
