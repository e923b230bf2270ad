/* AVX-512 depthwise conv steps (conv_depthwise.c): 16 channels per vector, 16x16 in-register transposes (4 rounds
 * of 16 shuffles) between the NCHW planes and the pixel-major tiles. rows computes 8 output pixels at a time with
 * 8 accumulators; for 3x3 and 5x5 kernels at stride 1 or 2 and dilation 1 each input pixel of a tile row is loaded
 * once and fed to every accumulator whose taps read it ((8-1)*sw + KW loads per kernel row instead of 8*KW).
 * Every lane runs conv_depthwise_avx2.c's operations in the same order (bias, FMAs in tap order, residual, the
 * AVX2 activation on each 8-lane half), so both ISAs give the same bits. */
#include "activation_avx512.h"
#include "conv.h"
#include "gemm_avx2.h"
#include "pair_rows.h"
#include "transpose_avx512.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

/* The last n < 8 pixels of a row in one call of CALL(width) with a compile-time width (1-7). */
#define PIXELS_TAIL(n, CALL)                  \
    switch (n) {                              \
    case 7: CALL(7); break;                   \
    case 6: CALL(6); break;                   \
    case 5: CALL(5); break;                   \
    case 4: CALL(4); break;                   \
    case 3: CALL(3); break;                   \
    case 2: CALL(2); break;                   \
    case 1: CALL(1); break;                   \
    default: break;                           \
    }

ORTX_TARGET_AVX512 static void pack_avx512(const float *x, int64_t plane, int64_t channels, int64_t rows,
                                          int64_t width, float *dst, int64_t dst_row) {
    int64_t total = rows * width, row = 0, column = 0;
    for (int64_t i0 = 0; i0 < total; i0 += 16) {
        int64_t count = total - i0 < 16 ? total - i0 : 16;
        __mmask16 lanes = (__mmask16)((1u << count) - 1u);
        __m512 r[16];
        if (channels == 16 && count == 16) {
            const float *source = x + i0;
            for (int c = 0; c < 16; c++, source += plane) {
                /* 16 planes are too many streams for the hardware prefetcher: fetch 4 chunks ahead */
                _mm_prefetch((const char *)(source + 64), _MM_HINT_T0);
                r[c] = _mm512_loadu_ps(source);
            }
        } else {
            for (int c = 0; c < 16; c++)
                r[c] = c < channels ? _mm512_maskz_loadu_ps(lanes, x + c * plane + i0) : _mm512_setzero_ps();
        }
        transpose16(r);
        if (count == 16 && column + 16 < width) {  /* the chunk stays in one row */
            float *pixel = dst + row * dst_row + column * 16;
            for (int j = 0; j < 16; j++) _mm512_storeu_ps(pixel + j * 16, r[j]);
            column += 16;
            continue;
        }
        for (int j = 0; j < count; j++) {
            _mm512_storeu_ps(dst + row * dst_row + column * 16, r[j]);
            if (++column == width) {
                column = 0;
                row++;
            }
        }
    }
}

/* J (1 to 8) consecutive output pixels of row `in` (the tile row of kernel row 0) from column ox: J, KW_C and
 * SW_C are compile-time (dilation 1). */
/* A pixel's 16 input channels at `at` (64 bytes a pixel either way): fp32, or with BF16_IN the 16 bf16 values of a
 * pair-rows half chunk (kernels/pair_rows.h) widened to fp32. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) __m512 load_pixel(const float *at, const int BF16_IN) {
    if (!BF16_IN) return _mm512_loadu_ps(at);
    __m256i half = _mm256_loadu_si256((const __m256i *)at);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

/* The pixel a pad column reads in pixels_avx512 and pair_pixels_avx512: zeros (64 bytes, a pixel of any layout). */
static const float pad_pixel[16] __attribute__((aligned(64)));

/* The block of output columns from ox that a row kernel runs next: `*count` of them (8, or the row's rest) and, of
 * the input columns they read, how many lie left (`*lo_pad`) and right (`*hi_pad`) of the row. 1 where the blocks
 * take it (both at most 2, read from pad_pixel, and a tap row in the image), else 0: its columns tap by tap. */
static inline __attribute__((always_inline)) int column_block(int64_t ox, int64_t OW, int64_t W, int64_t pl,
                                                               int64_t taps_rows, const int KW_C, const int SW_C,
                                                               int64_t *count, int64_t *lo_pad, int64_t *hi_pad) {
    const int64_t J = OW - ox < 8 ? OW - ox : 8, first = ox * SW_C - pl, over = first + (J - 1) * SW_C + KW_C - W;
    *count = J;
    *lo_pad = first < 0 ? -first : 0;
    *hi_pad = over > 0 ? over : 0;
    return taps_rows > 0 && *lo_pad <= 2 && *hi_pad <= 2;
}

/* J output pixels of one block: the taps' sums from `start` (the bias); with `epilogue` (NULL: stored raw, the tiled
 * form's rows) the residual at `residual` (NULL: none) added and the conv's activation applied before the store,
 * as finish_avx512 would after it (the same operations, one pass). Of the NC input columns the pixels read, the
 * first lo_pad and the last hi_pad (at most 2 each) are pads, read from pad_pixel. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void pixels_avx512(
    const float *in, int64_t ox, int64_t KH, int64_t row_step, const float *weights, __m512 start, float *out,
    int64_t lo_pad, int64_t hi_pad, const int J, const int KW_C, const int SW_C, const int BF16_IN,
    const ortx_conv_params *epilogue, const float *residual) {
    const int NC = (J - 1) * SW_C + KW_C;
    __m512 acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < J; j++) acc[j] = start;
    for (int64_t ky = 0; ky < KH; ky++) {
        const float *src = in + ky * row_step + ox * SW_C * 16;
        __m512 w[5];  /* KW_C <= 5 */
        for (int kx = 0; kx < KW_C; kx++) w[kx] = _mm512_loadu_ps(weights + (ky * KW_C + kx) * 16);
#pragma GCC unroll 32
        for (int c = 0; c < NC; c++) {
            const float *at = src + c * 16;
            if ((c < 2 && c < lo_pad) || (c >= NC - 2 && c >= NC - hi_pad)) at = pad_pixel;
            __m512 v = load_pixel(at, BF16_IN);
            __asm__("" : "+v"(v));  /* keep v in a register: the compiler would reload it per tap */
#pragma GCC unroll 8
            for (int kx = 0; kx < KW_C; kx++) {
                int j = c - kx;
                if (j >= 0 && j % SW_C == 0 && j / SW_C < J) acc[j / SW_C] = _mm512_fmadd_ps(w[kx], v, acc[j / SW_C]);
            }
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < J; j++) {
        __m512 v = acc[j];
        if (epilogue) {
            if (residual) v = _mm512_add_ps(v, _mm512_loadu_ps(residual + j * 16));
            v = ortx_activation_avx512(v, (int)epilogue->activation, epilogue->param0, epilogue->param1);
        }
        _mm512_storeu_ps(out + j * 16, v);
    }
}

ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void rows_kernel_avx512(
    const ortx_conv_params *p, const float *tile, int64_t tile_row, int64_t rows, const float *weights,
    const float *bias, float *out, const int KW_C, const int SW_C) {
    const int64_t OW = p->out_width, KH = p->kernel_height, KW = p->kernel_width;
    const int64_t sw = p->stride_width, dh = p->dilation_height, dw = p->dilation_width;
    const __m512 start = _mm512_loadu_ps(bias);
    for (int64_t r = 0; r < rows; r++) {
        const float *in = tile + r * p->stride_height * tile_row;
        float *o = out + r * OW * 16;
        int64_t ox = 0;
        if (KW_C > 0) {  /* 8 pixels at a time, then 4, then 1, each with the compile-time kernel width */
            const int kw = KW_C > 0 ? KW_C : 1, sw_c = SW_C > 0 ? SW_C : 1;
#define TILE_PIXELS(j) \
    pixels_avx512(in, ox, KH, dh * tile_row, weights, start, o + ox * 16, 0, 0, j, kw, sw_c, 0, NULL, NULL)
            for (; ox + 8 <= OW; ox += 8) TILE_PIXELS(8);
            /* the row's last OW % 8 pixels in one call: 7 lone pixels would each be a chain of KH*KW dependent
             * FMAs (MobileNetV2's 7x7 maps: 4 + 1 + 1 + 1 ran at 19 GFLOP/s) */
            PIXELS_TAIL(OW - ox, TILE_PIXELS);
#undef TILE_PIXELS
            ox = OW;
        }
        for (; ox < OW; ox++) {
            __m512 acc = start;
            for (int64_t ky = 0; ky < KH; ky++) {
                const float *src = in + ky * dh * tile_row + ox * sw * 16;
                for (int64_t kx = 0; kx < KW; kx++)
                    acc = _mm512_fmadd_ps(_mm512_loadu_ps(weights + (ky * KW + kx) * 16),
                                          _mm512_loadu_ps(src + kx * dw * 16), acc);
            }
            _mm512_storeu_ps(o + ox * 16, acc);
        }
    }
}

ORTX_TARGET_AVX512 static void rows_avx512(const ortx_conv_params *p, const float *tile, int64_t tile_row,
                                          int64_t rows, const float *weights, const float *bias, float *out) {
    int64_t KW = p->kernel_width, sw = p->stride_width;
    if (p->dilation_width == 1 && KW == 3 && sw == 1) {
        rows_kernel_avx512(p, tile, tile_row, rows, weights, bias, out, 3, 1);
    } else if (p->dilation_width == 1 && KW == 3 && sw == 2) {
        rows_kernel_avx512(p, tile, tile_row, rows, weights, bias, out, 3, 2);
    } else if (p->dilation_width == 1 && KW == 5 && sw == 1) {
        rows_kernel_avx512(p, tile, tile_row, rows, weights, bias, out, 5, 1);
    } else if (p->dilation_width == 1 && KW == 5 && sw == 2) {
        rows_kernel_avx512(p, tile, tile_row, rows, weights, bias, out, 5, 2);
    } else {
        rows_kernel_avx512(p, tile, tile_row, rows, weights, bias, out, 0, 0);
    }
}

ORTX_TARGET_AVX512 static void unpack_avx512(const ortx_conv_params *p, const float *out, int64_t count,
                                            int64_t channels, const float *residual, float *y) {
    const int64_t plane = p->out_height * p->out_width;
    const int activation = (int)p->activation;
    for (int64_t i0 = 0; i0 < count; i0 += 16) {
        int64_t pixels = count - i0 < 16 ? count - i0 : 16;
        __mmask16 lanes = (__mmask16)((1u << pixels) - 1u);
        __m512 r[16];
        if (pixels == 16) {
            for (int j = 0; j < 16; j++) r[j] = _mm512_loadu_ps(out + (i0 + j) * 16);
        } else {
            for (int j = 0; j < 16; j++) r[j] = j < pixels ? _mm512_loadu_ps(out + (i0 + j) * 16) : _mm512_setzero_ps();
        }
        transpose16(r);
        if (pixels == 16) {
            for (int c = 0; c < channels; c++) {
                __m512 v = r[c];
                if (residual) v = _mm512_add_ps(v, _mm512_loadu_ps(residual + c * plane + i0));
                _mm512_storeu_ps(y + c * plane + i0, ortx_activation_avx512(v, activation, p->param0, p->param1));
            }
            continue;
        }
        for (int c = 0; c < channels; c++) {
            __m512 v = r[c];
            if (residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(lanes, residual + c * plane + i0));
            _mm512_mask_storeu_ps(y + c * plane + i0, lanes,
                                  ortx_activation_avx512(v, activation, p->param0, p->param1));
        }
    }
}

/* The 16 columns from ox of input row `row` shifted by -1, 0, +1 columns (zero outside [0, W)), each loaded once
 * (masked loads: lanes outside the row are neither read nor faulted). */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void load_taps(const float *row, int64_t ox, int64_t W,
                                                                            __m512 v[3]) {
    int64_t left = W - ox + 1, right = W - ox - 1;  /* valid lanes: l < left of v[0] (and l >= 1 at ox 0) ... */
    __mmask16 m0 = (__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1u), m1, m2;
    if (ox == 0) m0 &= (__mmask16)0xFFFE;
    m1 = (__mmask16)(left - 1 >= 16 ? 0xFFFF : (1u << (left - 1)) - 1u);
    m2 = (__mmask16)(right >= 16 ? 0xFFFF : right <= 0 ? 0 : (1u << right) - 1u);
    v[0] = _mm512_maskz_loadu_ps(m0, row + ox - 1);
    v[1] = _mm512_maskz_loadu_ps(m1, row + ox);
    v[2] = _mm512_maskz_loadu_ps(m2, row + ox + 1);
    __asm__("" : "+v"(v[0]), "+v"(v[1]), "+v"(v[2]));  /* each feeds up to 3 output rows: keep them in registers */
}

/* ortx_depthwise_isa.plane_rows: ROWS_C (4 or 1) output rows at a time, 16 columns per step; input row oy - pad_top
 * + ky feeds output row oy with weights of kernel row ky. FMAs in tap order from the bias, like rows_avx512;
 * out-of-image rows are skipped (the tiled path adds their zero products, which leave the sum unchanged). */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void plane_rows_kernel_avx512(
    const ortx_conv_params *p, const float *x, const float *weights, __m512 start, const float *residual, float *y,
    int64_t oy0, const int ROWS_C) {
    const int64_t W = p->in_width, H = p->in_height, OW = p->out_width;
    const int activation = (int)p->activation;
    __m512 w[9];
#pragma GCC unroll 9
    for (int t = 0; t < 9; t++) w[t] = _mm512_set1_ps(weights[t]);
    for (int64_t ox = 0; ox < OW; ox += 16) {
        __mmask16 store = (__mmask16)(OW - ox >= 16 ? 0xFFFF : (1u << (OW - ox)) - 1u);
        __m512 acc[4];
#pragma GCC unroll 4
        for (int r = 0; r < ROWS_C; r++) acc[r] = start;
#pragma GCC unroll 6
        for (int j = 0; j < ROWS_C + 2; j++) {  /* input row j feeds output rows r = j - ky, ky = 0..2 */
            int64_t iy = oy0 - p->pad_top + j;
            if (iy < 0 || iy >= H) continue;
            __m512 v[3];
            load_taps(x + iy * W, ox, W, v);
#pragma GCC unroll 3
            for (int ky = 2; ky >= 0; ky--) {  /* the earliest output row first: its taps run ky = 0, 1, 2 */
                int r = j - ky;
                if (r < 0 || r >= ROWS_C) continue;
#pragma GCC unroll 3
                for (int kx = 0; kx < 3; kx++) acc[r] = _mm512_fmadd_ps(w[ky * 3 + kx], v[kx], acc[r]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < ROWS_C; r++) {
            float *out = y + (oy0 + r) * OW + ox;
            __m512 value = acc[r];
            if (residual) value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(store, residual + (oy0 + r) * OW + ox));
            _mm512_mask_storeu_ps(out, store, ortx_activation_avx512(value, activation, p->param0, p->param1));
        }
    }
}

/* Stride 2: the 16 outputs from ox read input columns 2(ox+j) - 1 + kx. Two masked loads hold columns 2ox ..
 * 2ox+31; the even and odd ones (kx = 1, 2) are two two-source permutes, and kx = 0's columns are the odd ones
 * shifted up one lane with column 2ox - 1 (zero at ox 0) in lane 0. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void load_taps_stride2(
    const float *row, int64_t ox, int64_t W, __m512i even, __m512i odd, __m512 v[3]) {
    int64_t first = W - 2 * ox, second = W - 2 * ox - 16;  /* valid lanes of the two loads */
    __mmask16 m0 = (__mmask16)(first >= 16 ? 0xFFFF : (1u << first) - 1u);
    __mmask16 m1 = (__mmask16)(second >= 16 ? 0xFFFF : second <= 0 ? 0 : (1u << second) - 1u);
    __m512 a = _mm512_maskz_loadu_ps(m0, row + 2 * ox), b = _mm512_maskz_loadu_ps(m1, row + 2 * ox + 16);
    __m512 before = _mm512_set1_ps(ox > 0 ? row[2 * ox - 1] : 0.0f);
    v[1] = _mm512_permutex2var_ps(a, even, b);
    v[2] = _mm512_permutex2var_ps(a, odd, b);
    v[0] = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v[2]), _mm512_castps_si512(before), 15));
    __asm__("" : "+v"(v[0]), "+v"(v[1]), "+v"(v[2]));
}

/* plane_rows at stride 2: ROWS_C (4 or 1) output rows from 2 * ROWS_C + 1 input rows; input row oy*2 - pad_top + j
 * feeds output row r = (j - ky) / 2 for ky = j - 2r in 0..2, FMAs in tap order as in plane_rows_kernel_avx512. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void plane_rows_stride2_avx512(
    const ortx_conv_params *p, const float *x, const float *weights, __m512 start, const float *residual, float *y,
    int64_t oy0, const int ROWS_C) {
    const int64_t W = p->in_width, H = p->in_height, OW = p->out_width;
    const int activation = (int)p->activation;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    __m512 w[9];
#pragma GCC unroll 9
    for (int t = 0; t < 9; t++) w[t] = _mm512_set1_ps(weights[t]);
    for (int64_t ox = 0; ox < OW; ox += 16) {
        __mmask16 store = (__mmask16)(OW - ox >= 16 ? 0xFFFF : (1u << (OW - ox)) - 1u);
        __m512 acc[4];
#pragma GCC unroll 4
        for (int r = 0; r < ROWS_C; r++) acc[r] = start;
#pragma GCC unroll 9
        for (int j = 0; j < 2 * ROWS_C + 1; j++) {
            int64_t iy = 2 * oy0 - p->pad_top + j;
            if (iy < 0 || iy >= H) continue;
            __m512 v[3];
            load_taps_stride2(x + iy * W, ox, W, even, odd, v);
#pragma GCC unroll 3
            for (int ky = 2; ky >= 0; ky--) {  /* the earliest output row first */
                int r = (j - ky) / 2;
                if (j - ky < 0 || (j - ky) % 2 != 0 || r >= ROWS_C) continue;
#pragma GCC unroll 3
                for (int kx = 0; kx < 3; kx++) acc[r] = _mm512_fmadd_ps(w[ky * 3 + kx], v[kx], acc[r]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < ROWS_C; r++) {
            float *out = y + (oy0 + r) * OW + ox;
            __m512 value = acc[r];
            if (residual) value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(store, residual + (oy0 + r) * OW + ox));
            _mm512_mask_storeu_ps(out, store, ortx_activation_avx512(value, activation, p->param0, p->param1));
        }
    }
}

ORTX_TARGET_AVX512 static void plane_rows_avx512(const ortx_conv_params *p, const float *x, const float *weights,
                                                float bias, const float *residual, float *y, int64_t oy0,
                                                int64_t rows) {
    const __m512 start = _mm512_set1_ps(bias);
    int64_t r = 0;
    if (p->stride_width == 2) {
        for (; r + 4 <= rows; r += 4) plane_rows_stride2_avx512(p, x, weights, start, residual, y, oy0 + r, 4);
        for (; r < rows; r++) plane_rows_stride2_avx512(p, x, weights, start, residual, y, oy0 + r, 1);
        return;
    }
    for (; r + 4 <= rows; r += 4) plane_rows_kernel_avx512(p, x, weights, start, residual, y, oy0 + r, 4);
    for (; r < rows; r++) plane_rows_kernel_avx512(p, x, weights, start, residual, y, oy0 + r, 1);
}

ORTX_TARGET_AVX512 static void finish_avx512(const ortx_conv_params *p, float *y, int64_t count,
                                            const float *residual) {
    const int activation = (int)p->activation;
    for (int64_t i = 0; i < count; i++) {
        __m512 v = _mm512_loadu_ps(y + i * 16);
        if (residual) v = _mm512_add_ps(v, _mm512_loadu_ps(residual + i * 16));
        _mm512_storeu_ps(y + i * 16, ortx_activation_avx512(v, activation, p->param0, p->param1));
    }
}

/* Columns [ox, ox + count) of one output row tap by tap, skipping the taps outside the image: where a block's pads
 * are wider than pixels_avx512 takes. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void blocked_columns(
    const ortx_conv_params *p, const float *x, const float *weights, __m512 start, const float *res, float *out,
    int64_t iy0, int64_t ky_lo, int64_t ky_hi, int64_t ox, int64_t count, const int KW_C, const int BF16_IN) {
    const int64_t W = p->in_width, dh = p->dilation_height, pl = p->pad_left, sw = p->stride_width;
    for (int64_t column = ox; column < ox + count; column++) {
        __m512 acc = start;
        for (int64_t ky = ky_lo; ky < ky_hi; ky++)
            for (int64_t kx = 0; kx < KW_C; kx++) {
                int64_t ix = column * sw - pl + kx;
                if (ix < 0 || ix >= W) continue;
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(weights + (ky * KW_C + kx) * 16),
                                      load_pixel(x + ((iy0 + ky * dh) * W + ix) * 16, BF16_IN), acc);
            }
        if (res) acc = _mm512_add_ps(acc, _mm512_loadu_ps(res + column * 16));
        _mm512_storeu_ps(out + column * 16, ortx_activation_avx512(acc, (int)p->activation, p->param0, p->param1));
    }
}

/* ortx_depthwise_isa.blocked_rows for compile-time KW_C (3, 5) and SW_C (1, 2), dilation 1: one output row from
 * the blocked input rows themselves, 8 columns at a time from column 0 through pixels_avx512 (from a pointer at
 * input column -pad_left that only in-row columns are read through; a block's pad columns, at most 2 a side, read a
 * zero pixel: +0 or -0 added, every sum but an exact -0 as with the taps skipped); a block with wider pads takes its
 * columns' in-row taps one by one. Taps of out-of-image rows are skipped. (Before, every border column went tap by
 * tap: MobileNetV2-style fp32 in-process, 2 threads, 0.97x with the blocks; the 7x7 maps now take this form too.)
 * 2 threads, this Zen 4, against the tiled form (a copy per input row): 96 channels 112x112 stride 2 129 -> 79 us,
 * 144 at 56x56 96 -> 81 us, 192 at 28x28 41 -> 35 us. The residual and activation are applied in registers before each store
 * (before, finish_avx512 made a second pass over each row: MobileNetV2-style 0.978x in-process, bf16 and fp32 alike,
 * the same bits). */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void blocked_row_kernel_avx512(
    const ortx_conv_params *p, const float *x, const float *weights, __m512 start, const float *residual, float *y,
    int64_t oy, const int KW_C, const int SW_C, const int BF16_IN) {
    const int64_t H = p->in_height, W = p->in_width, OW = p->out_width, KH = p->kernel_height;
    const int64_t iy0 = oy * p->stride_height - p->pad_top, dh = p->dilation_height, pl = p->pad_left;
    int64_t ky_lo = 0, ky_hi = KH;
    while (ky_lo < KH && iy0 + ky_lo * dh < 0) ky_lo++;
    while (ky_hi > ky_lo && iy0 + (ky_hi - 1) * dh >= H) ky_hi--;
    const float *in = x + ((iy0 + ky_lo * dh) * W - pl) * 16, *w = weights + ky_lo * KW_C * 16;
    const int64_t taps_rows = ky_hi - ky_lo, step = dh * W * 16;
    float *out = y + oy * OW * 16;
    const float *res = residual ? residual + oy * OW * 16 : NULL;
#define ROW_PIXELS(j)                                                                                           \
    pixels_avx512(in, ox, taps_rows, step, w, start, out + ox * 16, lo_pad, hi_pad, j, KW_C, SW_C, BF16_IN, p, \
                  res ? res + ox * 16 : NULL)
    for (int64_t ox = 0, J, lo_pad, hi_pad; ox < OW; ox += J) {
        if (column_block(ox, OW, W, pl, taps_rows, KW_C, SW_C, &J, &lo_pad, &hi_pad)) {
            if (J == 8) ROW_PIXELS(8);
            else PIXELS_TAIL(J, ROW_PIXELS);
        } else {
            blocked_columns(p, x, weights, start, res, out, iy0, ky_lo, ky_hi, ox, J, KW_C, BF16_IN);
        }
    }
#undef ROW_PIXELS
}

/* blocked_rows_of's rows with the kernel width and stride as constants */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void blocked_rows_by_width(
    const ortx_conv_params *p, const float *x, const float *weights, __m512 start, const float *residual, float *y,
    int64_t oy0, int64_t rows, const int BF16_IN) {
    const int64_t KW = p->kernel_width, sw = p->stride_width;
    for (int64_t oy = oy0; oy < oy0 + rows; oy++) {
        if (KW == 3 && sw == 1) blocked_row_kernel_avx512(p, x, weights, start, residual, y, oy, 3, 1, BF16_IN);
        else if (KW == 3) blocked_row_kernel_avx512(p, x, weights, start, residual, y, oy, 3, 2, BF16_IN);
        else if (sw == 1) blocked_row_kernel_avx512(p, x, weights, start, residual, y, oy, 5, 1, BF16_IN);
        else blocked_row_kernel_avx512(p, x, weights, start, residual, y, oy, 5, 2, BF16_IN);
    }
}

ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) int blocked_rows_of(
    const ortx_conv_params *p, const float *x, const float *weights, const float *bias, const float *residual,
    float *y, int64_t oy0, int64_t rows, const int BF16_IN) {
    const int64_t KW = p->kernel_width, sw = p->stride_width;
    /* every width: below 8 output columns the border columns' tap-by-tap path made it too slow (576 channels, 14x14
     * at stride 2: 39 us against the tiled form's 27) until the pad columns went through the blocks */
    if (p->dilation_width != 1 || (KW != 3 && KW != 5) || (sw != 1 && sw != 2)) return 0;
    if (rows == 0) return 1;  /* the question alone (conv.h) */
    const __m512 start = _mm512_loadu_ps(bias);
    if (p->activation == ORTX_ACT_CLIP) {  /* Clip as a constant, as the pair-rows steps take it (below) */
        ortx_conv_params clip = *p;
        clip.activation = ORTX_ACT_CLIP;
        blocked_rows_by_width(&clip, x, weights, start, residual, y, oy0, rows, BF16_IN);
    } else {
        blocked_rows_by_width(p, x, weights, start, residual, y, oy0, rows, BF16_IN);
    }
    return 1;
}

ORTX_TARGET_AVX512 static int blocked_rows_avx512(const ortx_conv_params *p, const float *x, const float *weights,
                                                 const float *bias, const float *residual, float *y, int64_t oy0,
                                                 int64_t rows) {
    return blocked_rows_of(p, x, weights, bias, residual, y, oy0, rows, 0);
}

ORTX_TARGET_AVX512 static int blocked_rows_bf16_avx512(const ortx_conv_params *p, const float *x,
                                                      const float *weights, const float *bias, const float *residual,
                                                      float *y, int64_t oy0, int64_t rows) {
    return blocked_rows_of(p, x, weights, bias, residual, y, oy0, rows, 1);
}

/* pair_rows: a chunk's 32 channels into a pair-rows output (pair_rows.h) at once, from a pair-rows input or from
 * the chunk's two blocks of a blocked fp32 input, kept in two vectors a pixel ("a" and "b") from load to store: the
 * blocked forms went through fp32 band buffers that a second pass rounded. Both inputs hold 64 bytes a pixel. A
 * pair-rows pixel holds channel 2q in the low half of 32-bit word q and 2q + 1 in the high half, so one load, a shift
 * and a mask widen all 32, a = the even channels and b = the odd (blocked_rows_bf16 spent a shuffle and a shift on
 * each 16), and the store interleaves them back; from blocked input a and b are the two blocks (the second
 * `hi_offset` bytes after the first), already in channel order. Weights and biases come in the same split: tap t's
 * a-lanes at weights + t * 32, b-lanes at + 16. Each lane's FMAs, activation and rounding are blocked_row_kernel's
 * then the pair-rows store's, so the bits are the same. */
ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void pair_load(const char *at, const char *at_hi,
                                                                                  const int PAIR_IN, __m512 *a,
                                                                                  __m512 *b) {
    if (PAIR_IN) {
        __m512i raw = _mm512_loadu_si512((const void *)at);
        *a = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
        *b = _mm512_castsi512_ps(_mm512_and_si512(raw, _mm512_set1_epi32((int)0xFFFF0000u)));
    } else {
        *a = _mm512_loadu_ps((const float *)at);
        *b = _mm512_loadu_ps((const float *)at_hi);
    }
}

/* One pixel's two vectors activated, rounded to bf16 and put in channel order (`order`: the interleave of even and
 * odd channels, or NULL-like identity when PAIR_IN is 0); channels past `keep` zero. */
ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void pair_store_pixel(
    __m512 a, __m512 b, const ortx_conv_params *p, __mmask32 keep, __m512i order, const int PAIR_IN, uint16_t *out) {
    a = ortx_activation_avx512(a, (int)p->activation, p->param0, p->param1);
    b = ortx_activation_avx512(b, (int)p->activation, p->param0, p->param1);
    __m512i words = (__m512i)_mm512_cvtne2ps_pbh(b, a);  /* words: a's 16, then b's */
    words = PAIR_IN ? _mm512_maskz_permutexvar_epi16(keep, order, words) : _mm512_maskz_mov_epi16(keep, words);
    _mm512_storeu_si512((void *)out, words);
}

/* The same pixel into a blocked fp32 output instead (OUT_ROWS 0): channels 0-15 at out, 16-31 at out + y_hi
 * floats (only where the chunk has them, has_hi). From a pair-rows input a holds the even channels and b the odd,
 * so each block interleaves half of each. */
ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void blocked_store_pixel(
    __m512 a, __m512 b, const ortx_conv_params *p, const int PAIR_IN, int has_hi, int64_t y_hi, float *out) {
    a = ortx_activation_avx512(a, (int)p->activation, p->param0, p->param1);
    b = ortx_activation_avx512(b, (int)p->activation, p->param0, p->param1);
    __m512 lo = a, hi = b;
    if (PAIR_IN) {
        const __m512i first = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        const __m512i second = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
        lo = _mm512_permutex2var_ps(a, first, b);
        hi = _mm512_permutex2var_ps(a, second, b);
    }
    _mm512_storeu_ps(out, lo);
    if (has_hi) _mm512_storeu_ps(out + y_hi, hi);
}

/* Where one pixel's two vectors go: pair rows (OUT_ROWS 1, y_hi unused) or blocked fp32. `out` at the pixel. */
ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void store_pixel(
    __m512 a, __m512 b, const ortx_conv_params *p, __mmask32 keep, __m512i order, const int PAIR_IN,
    const int OUT_ROWS, int64_t y_hi, void *out) {
    if (OUT_ROWS) pair_store_pixel(a, b, p, keep, order, PAIR_IN, (uint16_t *)out);
    else blocked_store_pixel(a, b, p, PAIR_IN, keep >> 16 != 0, y_hi, (float *)out);
}

/* Bytes of one output pixel: a pair-rows chunk's 64 (32 bf16) or a block's 64 (16 floats); its index steps either. */
#define OUT_PIXEL(out, i) ((char *)(out) + (i) * 64)

ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void pair_pixels_avx512(
    const char *in, int64_t hi_offset, int64_t ox, int64_t KH, int64_t row_step, const float *weights,
    __m512 start_a, __m512 start_b, const ortx_conv_params *p, __mmask32 keep, __m512i order, void *out,
    int64_t y_hi, int64_t lo_pad, int64_t hi_pad, const int J, const int KW_C, const int SW_C, const int PAIR_IN,
    const int OUT_ROWS) {
    const int NC = (J - 1) * SW_C + KW_C;  /* input columns the J pixels read; lo_pad, hi_pad <= 2 of them pads */
    __m512 acc_a[8], acc_b[8];
#pragma GCC unroll 8
    for (int j = 0; j < J; j++) acc_a[j] = start_a, acc_b[j] = start_b;
    for (int64_t ky = 0; ky < KH; ky++) {
        const char *src = in + ky * row_step + ox * SW_C * 64;
        __m512 wa[5], wb[5];  /* KW_C <= 5 */
#pragma GCC unroll 5
        for (int kx = 0; kx < KW_C; kx++) {
            wa[kx] = _mm512_loadu_ps(weights + (ky * KW_C + kx) * 32);
            wb[kx] = _mm512_loadu_ps(weights + (ky * KW_C + kx) * 32 + 16);
        }
#pragma GCC unroll 32
        for (int c = 0; c < NC; c++) {
            const char *at = src + c * 64, *at_hi = at + hi_offset;
            if ((c < 2 && c < lo_pad) || (c >= NC - 2 && c >= NC - hi_pad)) at = at_hi = (const char *)pad_pixel;
            __m512 a, b;
            pair_load(at, at_hi, PAIR_IN, &a, &b);
            __asm__("" : "+v"(a), "+v"(b));  /* keep them in registers: the compiler would reload them per tap */
#pragma GCC unroll 8
            for (int kx = 0; kx < KW_C; kx++) {
                int j = c - kx;
                if (j >= 0 && j % SW_C == 0 && j / SW_C < J) {
                    acc_a[j / SW_C] = _mm512_fmadd_ps(wa[kx], a, acc_a[j / SW_C]);
                    acc_b[j / SW_C] = _mm512_fmadd_ps(wb[kx], b, acc_b[j / SW_C]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < J; j++)
        store_pixel(acc_a[j], acc_b[j], p, keep, order, PAIR_IN, OUT_ROWS, y_hi, OUT_PIXEL(out, j));
}

/* Columns [ox, ox + count) of one output row tap by tap, skipping the taps outside the image: where a block's pads
 * are wider than pair_pixels_avx512 takes. */
ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void pair_columns(
    const ortx_conv_params *p, const char *x, int64_t hi_offset, const float *weights, __m512 start_a, __m512 start_b,
    __mmask32 keep, __m512i order, char *out, int64_t y_hi, int64_t iy0, int64_t ky_lo, int64_t ky_hi, int64_t ox,
    int64_t count, const int KW_C, const int PAIR_IN, const int OUT_ROWS) {
    const int64_t W = p->in_width, dh = p->dilation_height, pl = p->pad_left, sw = p->stride_width;
    for (int64_t column = ox; column < ox + count; column++) {
        __m512 acc_a = start_a, acc_b = start_b;
        for (int64_t ky = ky_lo; ky < ky_hi; ky++)
            for (int64_t kx = 0; kx < KW_C; kx++) {
                int64_t ix = column * sw - pl + kx;
                if (ix < 0 || ix >= W) continue;
                const char *at = x + ((iy0 + ky * dh) * W + ix) * 64;
                __m512 a, b;
                pair_load(at, at + hi_offset, PAIR_IN, &a, &b);
                acc_a = _mm512_fmadd_ps(_mm512_loadu_ps(weights + (ky * KW_C + kx) * 32), a, acc_a);
                acc_b = _mm512_fmadd_ps(_mm512_loadu_ps(weights + (ky * KW_C + kx) * 32 + 16), b, acc_b);
            }
        store_pixel(acc_a, acc_b, p, keep, order, PAIR_IN, OUT_ROWS, y_hi, OUT_PIXEL(out, column));
    }
}

/* One output row of a chunk, 8 columns at a time from column 0: a block's pad columns (at most 2 on either side,
 * the first and last block's) read a zero pixel, so no column takes the tap-by-tap path unless its pads are wider
 * (then that block's columns do). The zero products add +0 or -0, which leaves every sum but an exact -0 as the
 * blocked kernels' (they skip the taps). Against blocked_row_kernel_avx512's way (border columns tap by tap, outside
 * the blocks): MobileNetV2's ten depthwise shapes, kernel alone, 0.88x on one thread and on two (7x7 maps 0.69x);
 * MobileNetV2-style bf16 in-process 0.965x, the same bits. */
ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void pair_row_kernel_avx512(
    const ortx_conv_params *p, const char *x, int64_t hi_offset, const float *weights, __m512 start_a,
    __m512 start_b, __mmask32 keep, void *y, int64_t y_hi, int64_t oy, const int KW_C, const int SW_C,
    const int PAIR_IN, const int OUT_ROWS) {
    const int64_t H = p->in_height, W = p->in_width, OW = p->out_width, KH = p->kernel_height;
    const int64_t iy0 = oy * p->stride_height - p->pad_top, dh = p->dilation_height, pl = p->pad_left;
    const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                           22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    int64_t ky_lo = 0, ky_hi = KH;
    while (ky_lo < KH && iy0 + ky_lo * dh < 0) ky_lo++;
    while (ky_hi > ky_lo && iy0 + (ky_hi - 1) * dh >= H) ky_hi--;
    const char *in = x + ((iy0 + ky_lo * dh) * W - pl) * 64;
    const float *w = weights + ky_lo * KW_C * 32;
    const int64_t taps_rows = ky_hi - ky_lo, step = dh * W * 64;
    char *out = OUT_PIXEL(y, oy * OW);
#define ROW_PIXELS(j)                                                                                          \
    pair_pixels_avx512(in, hi_offset, ox, taps_rows, step, w, start_a, start_b, p, keep, order,                \
                       OUT_PIXEL(out, ox), y_hi, lo_pad, hi_pad, j, KW_C, SW_C, PAIR_IN, OUT_ROWS)
    for (int64_t ox = 0, J, lo_pad, hi_pad; ox < OW; ox += J) {
        if (column_block(ox, OW, W, pl, taps_rows, KW_C, SW_C, &J, &lo_pad, &hi_pad)) {
            if (J == 8) ROW_PIXELS(8);
            else PIXELS_TAIL(J, ROW_PIXELS);
        } else {
            pair_columns(p, x, hi_offset, weights, start_a, start_b, keep, order, out, y_hi, iy0, ky_lo, ky_hi, ox,
                         J, KW_C, PAIR_IN, OUT_ROWS);
        }
    }
#undef ROW_PIXELS
}

ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void pair_rows_of(
    const ortx_conv_params *p, const char *x, int64_t hi_offset, const float *weights, const float *bias,
    __mmask32 keep, void *y, int64_t y_hi, int64_t oy0, int64_t rows, const int PAIR_IN, const int OUT_ROWS) {
    const int64_t KW = p->kernel_width, sw = p->stride_width;
    const __m512 start_a = _mm512_loadu_ps(bias), start_b = _mm512_loadu_ps(bias + 16);
#define ROW(KW_C, SW_C) \
    pair_row_kernel_avx512(p, x, hi_offset, weights, start_a, start_b, keep, y, y_hi, oy, KW_C, SW_C, PAIR_IN, OUT_ROWS)
    for (int64_t oy = oy0; oy < oy0 + rows; oy++) {
        if (KW == 3 && sw == 1) ROW(3, 1);
        else if (KW == 3) ROW(3, 2);
        else if (sw == 1) ROW(5, 1);
        else ROW(5, 2);
    }
#undef ROW
}

/* pair_rows_of's instance for the input's and the output's layout. */
ORTX_TARGET_AVX512_BF16 static inline __attribute__((always_inline)) void pair_rows_sides(
    const ortx_conv_params *p, const void *x, int in_rows, int64_t hi_offset, const float *weights, const float *bias,
    __mmask32 keep, void *y, int out_rows, int64_t y_hi, int64_t oy0, int64_t rows) {
    if (out_rows && in_rows) pair_rows_of(p, x, 0, weights, bias, keep, y, 0, oy0, rows, 1, 1);
    else if (out_rows) pair_rows_of(p, x, hi_offset, weights, bias, keep, y, 0, oy0, rows, 0, 1);
    else if (in_rows) pair_rows_of(p, x, 0, weights, bias, keep, y, y_hi / 4, oy0, rows, 1, 0);
    else pair_rows_of(p, x, hi_offset, weights, bias, keep, y, y_hi / 4, oy0, rows, 0, 0);
}

/* 3x3 and 5x5, stride 1 or 2, dilation 1 across, no residual. */
ORTX_TARGET_AVX512_BF16 static int pair_rows_avx512_bf16(const ortx_conv_params *p, const void *x, int in_rows,
                                                        int64_t hi_offset, const float *weights, const float *bias,
                                                        int64_t channels, void *y, int out_rows, int64_t y_hi,
                                                        int64_t oy0, int64_t rows) {
    const int64_t KW = p->kernel_width, sw = p->stride_width;
    if (p->dilation_width != 1 || (KW != 3 && KW != 5) || (sw != 1 && sw != 2) || p->has_residual) return 0;
    if (rows == 0) return 1;
    const __mmask32 keep = (__mmask32)(channels >= 32 ? 0xFFFFFFFFu : (1u << channels) - 1u);
    /* Clip (MobileNetV2's ReLU6) as a constant: every pixel's store otherwise switches on the activation, and the
     * cases' code, sigmoid's call included, sits in the loop (a standalone copy of the 3x3 loop: 19.3 us a 56 x 56
     * chunk plane with the switch, 15.5 with Clip constant) */
    if (p->activation == ORTX_ACT_CLIP) {
        ortx_conv_params clip = *p;
        clip.activation = ORTX_ACT_CLIP;
        pair_rows_sides(&clip, x, in_rows, hi_offset, weights, bias, keep, y, out_rows, y_hi, oy0, rows);
    } else {
        pair_rows_sides(p, x, in_rows, hi_offset, weights, bias, keep, y, out_rows, y_hi, oy0, rows);
    }
    return 1;
}

/* The table's entry: pair_rows_avx512_bf16 where the CPU has AVX512_BF16, else no shape is taken. */
ORTX_TARGET_AVX512 static int pair_rows_avx512(const ortx_conv_params *p, const void *x, int in_rows,
                                              int64_t hi_offset, const float *weights, const float *bias,
                                              int64_t channels, void *y, int out_rows, int64_t y_hi, int64_t oy0,
                                              int64_t rows) {
    if (!ortx_cpu_has_avx512_bf16()) return 0;
    return pair_rows_avx512_bf16(p, x, in_rows, hi_offset, weights, bias, channels, y, out_rows, y_hi, oy0, rows);
}

const ortx_depthwise_isa ortx_depthwise_avx512 = {16, pack_avx512, rows_avx512, unpack_avx512, plane_rows_avx512,
                                                  finish_avx512, blocked_rows_avx512, blocked_rows_bf16_avx512,
                                                  pair_rows_avx512};

#else
/* Never selected off x86 (dispatch.c only picks AVX-512 after CPUID says so). */
const ortx_depthwise_isa ortx_depthwise_avx512 = {16, NULL, NULL, NULL, NULL};
#endif
