/* AVX-512 VNNI micro-kernel of the int8 GEMM: an MR x NB = 8 x 32 int32 tile in 16 zmm accumulators; per quad of
 * k, two 64-byte B loads (16 pixels x 4 uint8 each) and one 32-bit weight broadcast per row, vpdpbusd (u8 x s8,
 * four products summed into each int32 lane without intermediate saturation). */
#include "isa.h"
#include "qgemm.h"

#if ORTX_HAVE_X86
#include <immintrin.h>
#include <string.h>

#define ORTX_TARGET_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

ORTX_TARGET_AVX512_VNNI static void micro_avx512_vnni(int64_t k4, const int8_t *a, const uint8_t *b, int32_t *acc) {
    __m512i c[ORTX_QGEMM_MR][2];
    for (int m = 0; m < ORTX_QGEMM_MR; m++) c[m][0] = c[m][1] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int64_t q = 0; q < k4; q++) {
        __m512i b0 = _mm512_loadu_si512(b + q * ORTX_QGEMM_NB * 4);
        __m512i b1 = _mm512_loadu_si512(b + q * ORTX_QGEMM_NB * 4 + 64);
        const int8_t *aq = a + q * ORTX_QGEMM_MR * 4;
        for (int m = 0; m < ORTX_QGEMM_MR; m++) {
            int32_t quad;
            memcpy(&quad, aq + 4 * m, 4);
            __m512i w = _mm512_set1_epi32(quad);
            c[m][0] = _mm512_dpbusd_epi32(c[m][0], b0, w);
            c[m][1] = _mm512_dpbusd_epi32(c[m][1], b1, w);
        }
    }
    for (int m = 0; m < ORTX_QGEMM_MR; m++) {
        _mm512_storeu_si512(acc + m * ORTX_QGEMM_NB, c[m][0]);
        _mm512_storeu_si512(acc + m * ORTX_QGEMM_NB + 16, c[m][1]);
    }
}

const ortx_qgemm_isa ortx_qgemm_isa_avx512_vnni = {.name = "avx512_vnni", .micro = micro_avx512_vnni};

#else
const ortx_qgemm_isa ortx_qgemm_isa_avx512_vnni = {.name = "avx512_vnni", .micro = ortx_qgemm_micro_portable};
#endif
