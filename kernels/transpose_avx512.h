/* The 16x16 in-register float transpose (4 rounds of 16 shuffles) shared by the AVX-512 depthwise conv's tiles
 * and the GEMM family's strided transpose (gemm_avx512.c). */
#ifndef ORTX_TRANSPOSE_AVX512_H
#define ORTX_TRANSPOSE_AVX512_H

#include "isa.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

/* r[i] = row i of a 16x16 block -> r[j] = column j. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4g + m], 128-bit lane k: rows 4g..4g+3 of column 4k + m */
    for (int g = 0; g < 4; g++) {
        __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
        __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
        u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int m = 0; m < 4; m++) {
        __m512 x0 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x88), x1 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xDD);
        __m512 y0 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x88);
        __m512 y1 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xDD);
        r[m] = _mm512_shuffle_f32x4(x0, y0, 0x88);
        r[8 + m] = _mm512_shuffle_f32x4(x0, y0, 0xDD);
        r[4 + m] = _mm512_shuffle_f32x4(x1, y1, 0x88);
        r[12 + m] = _mm512_shuffle_f32x4(x1, y1, 0xDD);
    }
}

#endif
#endif
