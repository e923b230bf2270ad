/* AVX2 + FMA rows of the "reduce" family (kernels and layouts in reduce.c).
 *
 * Sums use four 8-lane accumulators combined in a fixed order, so a row's result depends only on its length.
 * Max/min track NaN separately (max_ps drops a NaN in its first operand) so a NaN anywhere gives NaN, like the
 * portable loops. Tails that are not a multiple of 8 use masked loads; lanes past the end are neutral (0 for
 * sums, the row's first element for max/min).
 */
#include <math.h>

#include "elementwise.h"
#include "vector_math.h"

#if ORTX_HAVE_X86

ORTX_TARGET_AVX2 static inline __m256i tail_mask(int64_t remaining) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)remaining), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

ORTX_TARGET_AVX2 static inline float horizontal_sum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

ORTX_TARGET_AVX2 static inline float horizontal_extreme(__m256 v, int is_max) {
    float lanes[8];
    _mm256_storeu_ps(lanes, v);
    float result = lanes[0];
    for (int k = 1; k < 8; k++) result = is_max ? fmaxf(result, lanes[k]) : fminf(result, lanes[k]);
    return result;
}

ORTX_TARGET_AVX2 static float fold_sum(int square, const float *x, int64_t n) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            __m256 v = _mm256_loadu_ps(x + i + 8 * k);
            acc[k] = square ? _mm256_fmadd_ps(v, v, acc[k]) : _mm256_add_ps(acc[k], v);
        }
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        acc[0] = square ? _mm256_fmadd_ps(v, v, acc[0]) : _mm256_add_ps(acc[0], v);
    }
    if (i < n) {
        __m256 v = _mm256_maskload_ps(x + i, tail_mask(n - i));
        acc[1] = square ? _mm256_fmadd_ps(v, v, acc[1]) : _mm256_add_ps(acc[1], v);
    }
    return horizontal_sum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

ORTX_TARGET_AVX2 static float fold_extreme(int is_max, const float *x, int64_t n) {
    __m256 first = _mm256_set1_ps(x[0]);
    __m256 acc = first, nan_seen = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        nan_seen = _mm256_or_ps(nan_seen, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        acc = is_max ? _mm256_max_ps(acc, v) : _mm256_min_ps(acc, v);
    }
    if (i < n) {
        __m256i mask = tail_mask(n - i);
        __m256 v = _mm256_blendv_ps(first, _mm256_maskload_ps(x + i, mask), _mm256_castsi256_ps(mask));
        nan_seen = _mm256_or_ps(nan_seen, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        acc = is_max ? _mm256_max_ps(acc, v) : _mm256_min_ps(acc, v);
    }
    if (_mm256_movemask_ps(nan_seen)) return NAN;
    return horizontal_extreme(acc, is_max);
}

ORTX_TARGET_AVX2 float ortx_reduce_fold_f32_avx2(int op, const float *x, int64_t n) {
    switch (op) {
        case ORTX_REDUCE_SUM: return fold_sum(0, x, n);
        case ORTX_REDUCE_SUM_SQUARE: return fold_sum(1, x, n);
        case ORTX_REDUCE_MAX: return fold_extreme(1, x, n);
        default: return fold_extreme(0, x, n);
    }
}

ORTX_TARGET_AVX2 static inline __m256 combine(int op, int first, __m256 acc, __m256 v) {
    if (first) return op == ORTX_REDUCE_SUM_SQUARE ? _mm256_mul_ps(v, v) : v;
    switch (op) {
        case ORTX_REDUCE_SUM: return _mm256_add_ps(acc, v);
        case ORTX_REDUCE_SUM_SQUARE: return _mm256_add_ps(acc, _mm256_mul_ps(v, v));
        case ORTX_REDUCE_MAX:
            return _mm256_blendv_ps(_mm256_max_ps(acc, v), acc, _mm256_cmp_ps(acc, acc, _CMP_UNORD_Q));
        default:
            return _mm256_blendv_ps(_mm256_min_ps(acc, v), acc, _mm256_cmp_ps(acc, acc, _CMP_UNORD_Q));
    }
}

ORTX_TARGET_AVX2 void ortx_reduce_accumulate_f32_avx2(int op, int first, const float *x, float *into, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 acc = first ? _mm256_setzero_ps() : _mm256_loadu_ps(into + i);
        _mm256_storeu_ps(into + i, combine(op, first, acc, _mm256_loadu_ps(x + i)));
    }
    if (i < n) {
        __m256i mask = tail_mask(n - i);
        __m256 acc = first ? _mm256_setzero_ps() : _mm256_maskload_ps(into + i, mask);
        _mm256_maskstore_ps(into + i, mask, combine(op, first, acc, _mm256_maskload_ps(x + i, mask)));
    }
}

/* Rows of 2, 8 at a time: shuffles split two loads into even and odd elements (in lane order 0 1 4 5 2 3 6 7,
 * put back in order after the fold). */
ORTX_TARGET_AVX2 static void pair_rows(int op, const float *x, float *y, int64_t rows) {
    for (int64_t row = 0; row < rows; row += 8) {
        int64_t count = rows - row >= 8 ? 8 : rows - row;
        __m256i low = tail_mask(2 * count >= 8 ? 8 : 2 * count);
        __m256i high = tail_mask(2 * count > 8 ? 2 * count - 8 : 0);
        __m256 a = _mm256_maskload_ps(x + 2 * row, low), b = _mm256_maskload_ps(x + 2 * row + 8, high);
        __m256 first = _mm256_shuffle_ps(a, b, 0x88), second = _mm256_shuffle_ps(a, b, 0xdd);
        __m256 folded = combine(op, 0, combine(op, 1, first, first), second);
        folded = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(folded), 0xd8));
        _mm256_maskstore_ps(y + row, tail_mask(count), folded);
    }
}

/* reduce_avx512.c's short rows, 8 at a time. */
ORTX_TARGET_AVX2 void ortx_reduce_short_rows_f32_avx2(int op, const float *x, float *y, int64_t rows, int64_t length) {
    if (length == 2) {
        pair_rows(op, x, y, rows);
        return;
    }
    const __m256i lanes = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)length));
    for (int64_t row = 0; row < rows; row += 8) {
        __m256i mask = tail_mask(rows - row >= 8 ? 8 : rows - row);
        const float *base = x + row * length;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t r = 0; r < length; r++) {
            __m256 v = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), base + r, lanes, _mm256_castsi256_ps(mask), 4);
            acc = combine(op, r == 0, acc, v);
        }
        _mm256_maskstore_ps(y + row, mask, acc);
    }
}

ORTX_TARGET_AVX2 void ortx_softmax_row_f32_avx2(const float *x, float *y, int64_t n, int log) {
    float max = fold_extreme(1, x, n);
    __m256 vmax = _mm256_set1_ps(max), sum = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = ortx_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
        _mm256_storeu_ps(y + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (i < n) {
        __m256i mask = tail_mask(n - i);
        __m256 e = ortx_exp_avx2(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), vmax));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(mask));
        _mm256_maskstore_ps(y + i, mask, e);
        sum = _mm256_add_ps(sum, e);
    }
    float total = horizontal_sum(sum);
    if (log) {
        /* (x - max) - log sum, two roundings like the portable row (not x - (max + log sum)). */
        __m256 log_sum = _mm256_set1_ps(logf(total));
        for (i = 0; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax), log_sum));
        if (i < n) {
            __m256i mask = tail_mask(n - i);
            _mm256_maskstore_ps(y + i, mask,
                                _mm256_sub_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), vmax), log_sum));
        }
        return;
    }
    __m256 inverse = _mm256_set1_ps(1.0f / total);  /* one division, then products (as reduce_avx512.c) */
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), inverse));
    if (i < n) {
        __m256i mask = tail_mask(n - i);
        _mm256_maskstore_ps(y + i, mask, _mm256_mul_ps(_mm256_maskload_ps(y + i, mask), inverse));
    }
}

ORTX_TARGET_AVX2 void ortx_layer_norm_row_f32_avx2(const float *x, const float *scale, const float *bias,
                                                   float epsilon, float *y, int64_t n) {
    float mean = fold_sum(0, x, n) / (float)n;
    __m256 vmean = _mm256_set1_ps(mean), acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), vmean);
        acc = _mm256_fmadd_ps(d, d, acc);
    }
    if (i < n) {
        __m256i mask = tail_mask(n - i);
        __m256 d = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), vmean), _mm256_castsi256_ps(mask));
        acc = _mm256_fmadd_ps(d, d, acc);
    }
    __m256 inverse = _mm256_set1_ps(1.0f / sqrtf(horizontal_sum(acc) / (float)n + epsilon));
    for (i = 0; i < n; i += 8) {
        __m256i mask = tail_mask(n - i);
        __m256 d = _mm256_sub_ps(_mm256_maskload_ps(x + i, mask), vmean);
        __m256 out = _mm256_mul_ps(_mm256_mul_ps(d, inverse), _mm256_maskload_ps(scale + i, mask));
        if (bias) out = _mm256_add_ps(out, _mm256_maskload_ps(bias + i, mask));
        _mm256_maskstore_ps(y + i, mask, out);
    }
}

#else
void ortx_reduce_short_rows_f32_avx2(int op, const float *x, float *y, int64_t rows, int64_t length) {
    (void)op; (void)x; (void)y; (void)rows; (void)length;
}
float ortx_reduce_fold_f32_avx2(int op, const float *x, int64_t n) { (void)op; (void)x; (void)n; return 0.0f; }
void ortx_reduce_accumulate_f32_avx2(int op, int first, const float *x, float *into, int64_t n) {
    (void)op; (void)first; (void)x; (void)into; (void)n;
}
void ortx_softmax_row_f32_avx2(const float *x, float *y, int64_t n, int log) { (void)x; (void)y; (void)n; (void)log; }
void ortx_layer_norm_row_f32_avx2(const float *x, const float *scale, const float *bias, float epsilon, float *y,
                                  int64_t n) {
    (void)x; (void)scale; (void)bias; (void)epsilon; (void)y; (void)n;
}
#endif
