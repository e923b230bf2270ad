/* AVX2 variants of the pool family (selected by pool.c after dispatch.c has checked the CPU).
 *
 * Row function: output positions whose whole window lies inside the row ("interior") are computed 8 at a time
 * when dilation is 1 and the stride is 1 (plain unaligned loads) or 2 (two loads deinterleaved to the even
 * lanes), the last group overlapping the one before; edges and other strides fall back to the portable row code. Taps are reduced in the reference's
 * order, so results are bitwise those of the portable and reference kernels.
 */
#include <float.h>

#include "isa.h"
#include "ortx_kernels.h"
#include "pool_internal.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

/* Even elements base[0], base[2], ..., base[14]; reads base[0..14] only (never base[15], which may lie past
 * the end of the tensor). */
ORTX_TARGET_AVX2 static inline __m256 load_even(const float *base) {
    __m256 a = _mm256_loadu_ps(base);     /* a0..a7 = base[0..7] */
    __m256 b = _mm256_loadu_ps(base + 7); /* b0..b7 = base[7..14]: base[8 + 2i] is b[1 + 2i] */
    __m256 mixed = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 2, 0)); /* a0 a2 b1 b3 | a4 a6 b5 b7 */
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(mixed), _MM_SHUFFLE(3, 1, 2, 0)));
}

ORTX_TARGET_AVX2 void ortx_pool_row_f32_avx2(const float *const *rows, int64_t num_rows, int64_t padded_rows,
                                             float *out, const ortx_pool_params *p, int is_max) {
    const int64_t stride = p->stride[2], k = p->kernel[2], pad = p->pad_begin[2];
    const int64_t out_w = p->out[2];
    if (p->dilation[2] != 1 || (stride != 1 && stride != 2) || num_rows == 0) {
        ortx_pool_row_f32_portable(rows, num_rows, padded_rows, out, p, is_max);
        return;
    }
    int64_t lo, hi;
    ortx_pool_interior(p, &lo, &hi);
    if (hi - lo < 8) {
        ortx_pool_row_f32_portable(rows, num_rows, padded_rows, out, p, is_max);
        return;
    }
    ortx_pool_row_f32_range(rows, num_rows, padded_rows, out, p, is_max, 0, lo);
    ortx_pool_row_f32_range(rows, num_rows, padded_rows, out, p, is_max, hi, out_w);
    const __m256 divisor = _mm256_set1_ps((float)((p->count_include_pad ? padded_rows : num_rows) * k));
    /* 8 interior outputs at a time; a last partial group runs as the 8 ending at hi, recomputing a few outputs
     * (the same values) instead of leaving up to 7 per row to the scalar range code (ResNet's stem pool: 7 of 56) */
    for (int64_t next = lo; next < hi; next += 8) {
        const int64_t ow = next + 8 <= hi ? next : hi - 8;
        const int64_t start = ow * stride - pad;
        __m256 acc = is_max ? _mm256_set1_ps(-FLT_MAX) : _mm256_setzero_ps();
        for (int64_t r = 0; r < num_rows; r++) {
            const float *base = rows[r] + start;
            for (int64_t j = 0; j < k; j++) {
                __m256 v = stride == 1 ? _mm256_loadu_ps(base + j) : load_even(base + j);
                acc = is_max ? _mm256_max_ps(v, acc) : _mm256_add_ps(acc, v);
            }
        }
        if (!is_max) acc = _mm256_div_ps(acc, divisor);
        _mm256_storeu_ps(out + ow, acc);
    }
}

/* Global pools: four 8-lane accumulators over the channel's plane, combined in a fixed order. */
ORTX_TARGET_AVX2 void ortx_global_pool_f32_avx2(const float *x, float *y, int64_t channels, int64_t spatial,
                                                int is_max) {
    for (int64_t c = 0; c < channels; c++) {
        const float *xc = x + c * spatial;
        const __m256 init = is_max ? _mm256_set1_ps(-FLT_MAX) : _mm256_setzero_ps();
        __m256 a0 = init, a1 = init, a2 = init, a3 = init;
        int64_t i = 0;
        if (is_max) {
            for (; i + 32 <= spatial; i += 32) {
                a0 = _mm256_max_ps(_mm256_loadu_ps(xc + i), a0);
                a1 = _mm256_max_ps(_mm256_loadu_ps(xc + i + 8), a1);
                a2 = _mm256_max_ps(_mm256_loadu_ps(xc + i + 16), a2);
                a3 = _mm256_max_ps(_mm256_loadu_ps(xc + i + 24), a3);
            }
            for (; i + 8 <= spatial; i += 8) a0 = _mm256_max_ps(_mm256_loadu_ps(xc + i), a0);
            __m256 m = _mm256_max_ps(_mm256_max_ps(a0, a1), _mm256_max_ps(a2, a3));
            float lanes[8];
            _mm256_storeu_ps(lanes, m);
            float best = lanes[0];
            for (int l = 1; l < 8; l++) best = lanes[l] > best ? lanes[l] : best;
            for (; i < spatial; i++) best = xc[i] > best ? xc[i] : best;
            y[c] = best;
        } else {
            for (; i + 32 <= spatial; i += 32) {
                a0 = _mm256_add_ps(a0, _mm256_loadu_ps(xc + i));
                a1 = _mm256_add_ps(a1, _mm256_loadu_ps(xc + i + 8));
                a2 = _mm256_add_ps(a2, _mm256_loadu_ps(xc + i + 16));
                a3 = _mm256_add_ps(a3, _mm256_loadu_ps(xc + i + 24));
            }
            for (; i + 8 <= spatial; i += 8) a0 = _mm256_add_ps(a0, _mm256_loadu_ps(xc + i));
            __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
            float lanes[8];
            _mm256_storeu_ps(lanes, s);
            float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
            for (; i < spatial; i++) sum += xc[i];
            y[c] = sum / (float)spatial;
        }
    }
}
#endif
