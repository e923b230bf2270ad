/* AVX2 depthwise conv steps (conv_depthwise.c): 8 channels per vector, 8x8 in-register transposes between the
 * NCHW planes and the pixel-major tiles; rows as conv_depthwise_avx512.c's (8 accumulators, each input pixel of a
 * tile row loaded once for 3x3 and 5x5 kernels at stride 1 or 2 and dilation 1), in the same operation order. */
#include "conv.h"
#include "gemm_avx2.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

/* r[i] = row i of an 8x8 block -> r[j] = column j. */
ORTX_TARGET_AVX2 static inline __attribute__((always_inline)) void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4g + m], 128-bit lane k: rows 4g..4g+3 of column 4k + m */
    for (int g = 0; g < 2; g++) {
        __m256d a = _mm256_castps_pd(t[4 * g]), b = _mm256_castps_pd(t[4 * g + 1]);
        __m256d c = _mm256_castps_pd(t[4 * g + 2]), d = _mm256_castps_pd(t[4 * g + 3]);
        u[4 * g] = _mm256_castpd_ps(_mm256_unpacklo_pd(a, c));
        u[4 * g + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(a, c));
        u[4 * g + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(b, d));
        u[4 * g + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(b, d));
    }
    for (int m = 0; m < 4; m++) {
        r[m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x20);
        r[4 + m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x31);
    }
}

/* Lanes [0, count) of an 8-float mask. */
ORTX_TARGET_AVX2 static inline __m256i lane_mask(int64_t count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

ORTX_TARGET_AVX2 static void pack_avx2(const float *x, int64_t plane, int64_t channels, int64_t rows, int64_t width,
                                      float *dst, int64_t dst_row) {
    int64_t total = rows * width, row = 0, column = 0;
    for (int64_t i0 = 0; i0 < total; i0 += 8) {
        int64_t count = total - i0 < 8 ? total - i0 : 8;
        __m256i mask = lane_mask(count);
        __m256 r[8];
        for (int c = 0; c < 8; c++)
            r[c] = c >= channels ? _mm256_setzero_ps()
                   : count == 8  ? _mm256_loadu_ps(x + c * plane + i0)
                                 : _mm256_maskload_ps(x + c * plane + i0, mask);
        transpose8(r);
        if (count == 8 && column + 8 < width) {  /* the chunk stays in one row */
            float *pixel = dst + row * dst_row + column * 8;
            for (int j = 0; j < 8; j++) _mm256_storeu_ps(pixel + j * 8, r[j]);
            column += 8;
            continue;
        }
        for (int j = 0; j < count; j++) {
            _mm256_storeu_ps(dst + row * dst_row + column * 8, r[j]);
            if (++column == width) {
                column = 0;
                row++;
            }
        }
    }
}

/* J (8, 4 or 1) consecutive output pixels from column ox (conv_depthwise_avx512.c's pixels_avx512 on 8 lanes). */
ORTX_TARGET_AVX2 static inline __attribute__((always_inline)) void pixels_avx2(
    const float *in, int64_t ox, int64_t KH, int64_t row_step, const float *weights, __m256 start, float *out,
    const int J, const int KW_C, const int SW_C) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < J; j++) acc[j] = start;
    for (int64_t ky = 0; ky < KH; ky++) {
        const float *src = in + ky * row_step + ox * SW_C * 8;
        __m256 w[5];  /* KW_C <= 5 */
        for (int kx = 0; kx < KW_C; kx++) w[kx] = _mm256_loadu_ps(weights + (ky * KW_C + kx) * 8);
#pragma GCC unroll 32
        for (int c = 0; c < (J - 1) * SW_C + KW_C; c++) {
            __m256 v = _mm256_loadu_ps(src + c * 8);
            __asm__("" : "+v"(v));  /* keep v in a register: the compiler would reload it per tap */
#pragma GCC unroll 8
            for (int kx = 0; kx < KW_C; kx++) {
                int j = c - kx;
                if (j >= 0 && j % SW_C == 0 && j / SW_C < J) acc[j / SW_C] = _mm256_fmadd_ps(w[kx], v, acc[j / SW_C]);
            }
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < J; j++) _mm256_storeu_ps(out + j * 8, acc[j]);
}

ORTX_TARGET_AVX2 static inline __attribute__((always_inline)) void rows_kernel_avx2(
    const ortx_conv_params *p, const float *tile, int64_t tile_row, int64_t rows, const float *weights,
    const float *bias, float *out, const int KW_C, const int SW_C) {
    const int64_t OW = p->out_width, KH = p->kernel_height, KW = p->kernel_width;
    const int64_t sw = p->stride_width, dh = p->dilation_height, dw = p->dilation_width;
    const __m256 start = _mm256_loadu_ps(bias);
    for (int64_t r = 0; r < rows; r++) {
        const float *in = tile + r * p->stride_height * tile_row;
        float *o = out + r * OW * 8;
        int64_t ox = 0;
        if (KW_C > 0) {  /* 8 pixels at a time, then 4, then 1, each with the compile-time kernel width */
            const int kw = KW_C > 0 ? KW_C : 1, sw_c = SW_C > 0 ? SW_C : 1;
            for (; ox + 8 <= OW; ox += 8)
                pixels_avx2(in, ox, KH, dh * tile_row, weights, start, o + ox * 8, 8, kw, sw_c);
            for (; ox + 4 <= OW; ox += 4)
                pixels_avx2(in, ox, KH, dh * tile_row, weights, start, o + ox * 8, 4, kw, sw_c);
            for (; ox < OW; ox++) pixels_avx2(in, ox, KH, dh * tile_row, weights, start, o + ox * 8, 1, kw, sw_c);
        }
        for (; ox < OW; ox++) {
            __m256 acc = start;
            for (int64_t ky = 0; ky < KH; ky++) {
                const float *src = in + ky * dh * tile_row + ox * sw * 8;
                for (int64_t kx = 0; kx < KW; kx++)
                    acc = _mm256_fmadd_ps(_mm256_loadu_ps(weights + (ky * KW + kx) * 8),
                                          _mm256_loadu_ps(src + kx * dw * 8), acc);
            }
            _mm256_storeu_ps(o + ox * 8, acc);
        }
    }
}

ORTX_TARGET_AVX2 static void rows_avx2(const ortx_conv_params *p, const float *tile, int64_t tile_row, int64_t rows,
                                      const float *weights, const float *bias, float *out) {
    int64_t KW = p->kernel_width, sw = p->stride_width;
    if (p->dilation_width == 1 && KW == 3 && sw == 1) {
        rows_kernel_avx2(p, tile, tile_row, rows, weights, bias, out, 3, 1);
    } else if (p->dilation_width == 1 && KW == 3 && sw == 2) {
        rows_kernel_avx2(p, tile, tile_row, rows, weights, bias, out, 3, 2);
    } else if (p->dilation_width == 1 && KW == 5 && sw == 1) {
        rows_kernel_avx2(p, tile, tile_row, rows, weights, bias, out, 5, 1);
    } else if (p->dilation_width == 1 && KW == 5 && sw == 2) {
        rows_kernel_avx2(p, tile, tile_row, rows, weights, bias, out, 5, 2);
    } else {
        rows_kernel_avx2(p, tile, tile_row, rows, weights, bias, out, 0, 0);
    }
}

ORTX_TARGET_AVX2 static void unpack_avx2(const ortx_conv_params *p, const float *out, int64_t count,
                                        int64_t channels, const float *residual, float *y) {
    const int64_t plane = p->out_height * p->out_width;
    const int activation = (int)p->activation;
    for (int64_t i0 = 0; i0 < count; i0 += 8) {
        int64_t pixels = count - i0 < 8 ? count - i0 : 8;
        __m256i mask = lane_mask(pixels);
        __m256 r[8];
        for (int j = 0; j < 8; j++) r[j] = j < pixels ? _mm256_loadu_ps(out + (i0 + j) * 8) : _mm256_setzero_ps();
        transpose8(r);
        for (int c = 0; c < channels; c++) {
            __m256 v = r[c];
            if (pixels == 8) {
                if (residual) v = _mm256_add_ps(v, _mm256_loadu_ps(residual + c * plane + i0));
                _mm256_storeu_ps(y + c * plane + i0, ortx_activation_avx2(v, activation, p->param0, p->param1));
            } else {
                if (residual) v = _mm256_add_ps(v, _mm256_maskload_ps(residual + c * plane + i0, mask));
                v = ortx_activation_avx2(v, activation, p->param0, p->param1);
                _mm256_maskstore_ps(y + c * plane + i0, mask, v);
            }
        }
    }
}

const ortx_depthwise_isa ortx_depthwise_avx2 = {8, pack_avx2, rows_avx2, unpack_avx2, NULL};

#else
/* Never selected off x86 (dispatch.c only picks AVX2 after CPUID says so). */
const ortx_depthwise_isa ortx_depthwise_avx2 = {8, NULL, NULL, NULL, NULL};
#endif
