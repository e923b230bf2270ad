/* conv_transpose2d_f32's tiling case (kernel == stride, KW == 2: the upsampling ConvTranspose of FPN/DB heads such as
 * PP-OCRv4 det's 2x2/2) written straight from the input, on AVX-512: no col buffer, one pass over Y.
 *
 * A task is (image, group, input row y): it copies row y of the group's channels to a contiguous scratch, then for
 * each block of 4 output channels and kernel row ky writes output row y * KH + ky of those channels: per 16 input
 * pixels, 4 channels x 2 taps (kx) in 8 accumulators (a block with one live channel: 1 channel x 64 pixels) summed
 * over the group's input channels in ascending order from zero (as the GEMM of the col path sums them), then
 * bias + sum, the residual and the activation; the two taps' vectors are interleaved (vpermt2ps) into 32
 * consecutive outputs. Measured (2 threads): det's 24 -> 24 at 160x160 0.70 ms, its 24 -> 1 at 320x320 0.28 ms.
 * Why: the col path's GEMM has K = Cin (24 in det: store-bound) and its col (Cout*4 x rows*W) is written, read back
 * and interleaved: PP-OCRv4 det's 24 -> 24 at 160x160 took 1.31 ms (45 GMAC/s) at 2 threads.
 * The weights are unpacked once per call from the GEMM's packed A (row (co*KH + ky)*KW + kx, column ci) into
 * [group][ky][channel block][ci][4 channels][2 taps] in the caller's workspace (zero past the last channel). */
#include <string.h>

#include "activation_avx512.h"
#include "conv.h"
#include "gemm.h"
#include "threadpool.h"

#if ORTX_HAVE_X86
#include <immintrin.h>

#define BLOCK 4  /* output channels per task */

typedef struct transpose_job {
    const ortx_conv_params *p;
    const float *x, *w, *bias, *residual;
    float *y, *rows;  /* rows: per thread, the task's input row of every channel of the group (stride row_floats) */
    int64_t blocks, row_floats;  /* channel blocks per group */
} transpose_job;

/* C channels x P steps of 16 input pixels from x0, both taps (kx) each: 2 C P accumulators. Channels past `live`
 * are computed on zero weights and not stored; pixels past W are masked. */
ORTX_TARGET_AVX512 static inline __attribute__((always_inline)) void transpose_tile(
    const int C, const int P, const transpose_job *job, const float *x, const float *w, int64_t n, int64_t g,
    int64_t co0, int64_t live, int64_t oy, int64_t x0) {
    const ortx_conv_params *p = job->p;
    const int64_t W = p->in_width, OW = p->out_width;
    const int64_t cin_g = p->in_channels / p->group, cout_g = p->out_channels / p->group;
    const __m512i even = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i odd = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    __mmask16 in_mask[4];
    int64_t count[4];
    __m512 acc[BLOCK][4][2];
    #pragma GCC unroll 4
    for (int q = 0; q < P; q++) {
        count[q] = W - (x0 + 16 * q);
        count[q] = count[q] < 0 ? 0 : count[q] > 16 ? 16 : count[q];
        in_mask[q] = (__mmask16)(count[q] == 16 ? 0xffff : (1u << count[q]) - 1);
        #pragma GCC unroll 4
        for (int c = 0; c < C; c++) acc[c][q][0] = acc[c][q][1] = _mm512_setzero_ps();
    }
    for (int64_t ci = 0; ci < cin_g; ci++) {
        __m512 xv[4];
        #pragma GCC unroll 4
        for (int q = 0; q < P; q++) xv[q] = _mm512_maskz_loadu_ps(in_mask[q], x + ci * job->row_floats + x0 + 16 * q);
        const float *wc = w + ci * BLOCK * 2;
        #pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            __m512 w0 = _mm512_set1_ps(wc[2 * c]), w1 = _mm512_set1_ps(wc[2 * c + 1]);
            #pragma GCC unroll 4
            for (int q = 0; q < P; q++) {
                acc[c][q][0] = _mm512_fmadd_ps(w0, xv[q], acc[c][q][0]);
                acc[c][q][1] = _mm512_fmadd_ps(w1, xv[q], acc[c][q][1]);
            }
        }
    }
    #pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        if (c >= live) break;
        int64_t channel = g * cout_g + co0 + c;
        __m512 start = _mm512_set1_ps(p->has_bias ? job->bias[channel] : 0.0f);
        #pragma GCC unroll 4
        for (int q = 0; q < P; q++) {
            int64_t outputs = 2 * count[q];
            if (!outputs) break;
            int64_t at = ((n * p->out_channels + channel) * p->out_height + oy) * OW + 2 * (x0 + 16 * q);
            __mmask16 lo_mask = (__mmask16)(outputs >= 16 ? 0xffff : (1u << outputs) - 1);
            __mmask16 hi_mask = (__mmask16)(outputs >= 32 ? 0xffff : outputs > 16 ? (1u << (outputs - 16)) - 1 : 0);
            __m512 lo = _mm512_add_ps(start, _mm512_permutex2var_ps(acc[c][q][0], even, acc[c][q][1]));
            __m512 hi = _mm512_add_ps(start, _mm512_permutex2var_ps(acc[c][q][0], odd, acc[c][q][1]));
            if (job->residual) {
                lo = _mm512_add_ps(lo, _mm512_maskz_loadu_ps(lo_mask, job->residual + at));
                hi = _mm512_add_ps(hi, _mm512_maskz_loadu_ps(hi_mask, job->residual + at + 16));
            }
            _mm512_mask_storeu_ps(job->y + at, lo_mask,
                                  ortx_activation_avx512(lo, (int)p->activation, p->param0, p->param1));
            _mm512_mask_storeu_ps(job->y + at + 16, hi_mask,
                                  ortx_activation_avx512(hi, (int)p->activation, p->param0, p->param1));
        }
    }
}

/* One block of output channels for one input row: 4 channels x 16 pixels per tile, or, for a block with one live
 * channel (det's last ConvTranspose, Cout 1), 1 channel x 64 pixels (4 channels there computed 3 on zeros: 1.4x
 * the col path's time). */
ORTX_TARGET_AVX512 static void transpose_block(const transpose_job *job, const float *x, int64_t n, int64_t g,
                                               int64_t row, int64_t block) {
    const ortx_conv_params *p = job->p;
    const int64_t W = p->in_width, KH = p->kernel_height, cin_g = p->in_channels / p->group;
    const int64_t cout_g = p->out_channels / p->group, co0 = block * BLOCK;
    const int64_t live = cout_g - co0 < BLOCK ? cout_g - co0 : BLOCK;
    for (int64_t ky = 0; ky < KH; ky++) {
        const float *w = job->w + ((g * KH + ky) * job->blocks + block) * cin_g * BLOCK * 2;
        int64_t oy = row * KH + ky;
        if (live == 1) {
            for (int64_t x0 = 0; x0 < W; x0 += 64) transpose_tile(1, 4, job, x, w, n, g, co0, live, oy, x0);
        } else {
            for (int64_t x0 = 0; x0 < W; x0 += 16) transpose_tile(BLOCK, 1, job, x, w, n, g, co0, live, oy, x0);
        }
    }
}

/* Input row `row` of the group's channels copied to one contiguous scratch: the planes of det's 160x160 maps are
 * 100 KiB = 25 x 4 KiB apart, so reading 24 of them in step put every load in the same L1 set (2.2x the col path's
 * time before this copy). */
ORTX_TARGET_AVX512 static void transpose_row(void *context, int64_t task, int thread) {
    const transpose_job *job = context;
    const ortx_conv_params *p = job->p;
    const int64_t H = p->in_height, W = p->in_width, cin_g = p->in_channels / p->group;
    int64_t row = task % H, g = task / H % p->group, n = task / H / p->group;
    float *x = job->rows + thread * cin_g * job->row_floats;
    const float *source = job->x + ((n * p->in_channels + g * cin_g) * H + row) * W;
    for (int64_t ci = 0; ci < cin_g; ci++) memcpy(x + ci * job->row_floats, source + ci * H * W, W * sizeof(float));
    for (int64_t block = 0; block < job->blocks; block++)
        transpose_block(job, x, n, g, row, block);
}

static int64_t row_floats(const ortx_conv_params *p) { return ortx_round_up(p->in_width, 16) + 16; }

static int64_t weight_floats(const ortx_conv_params *p) {
    int64_t blocks = (p->out_channels / p->group + BLOCK - 1) / BLOCK;
    return ortx_round_up(p->group * p->kernel_height * blocks * (p->in_channels / p->group) * BLOCK * 2, 16);
}

int64_t ortx_conv_transpose_tiling_floats(const ortx_conv_params *p) {
    int64_t threads = p->workspace_threads < 1 ? 1 : p->workspace_threads;
    return weight_floats(p) + threads * (p->in_channels / p->group) * row_floats(p);
}

int ortx_conv_transpose_tiling_avx512(const ortx_conv_params *p, const float *x, const float *packed,
                                      const float *bias, const float *residual, float *y, float *workspace,
                                      int threads) {
    if (ortx_selected_isa() != ORTX_ISA_AVX512 || p->kernel_width != 2) return 0;
    const int64_t cin_g = p->in_channels / p->group, cout_g = p->out_channels / p->group, KH = p->kernel_height;
    const int64_t M = cout_g * KH * 2, blocks = (cout_g + BLOCK - 1) / BLOCK;
    float *w = workspace;
    for (int64_t g = 0; g < p->group; g++) {
        const float *a = packed + g * ortx_gemm_packed_a_floats(M, cin_g);
        for (int64_t ky = 0; ky < KH; ky++)
            for (int64_t b = 0; b < blocks; b++)
                for (int64_t ci = 0; ci < cin_g; ci++)
                    for (int64_t c = 0; c < BLOCK; c++)
                        for (int64_t kx = 0; kx < 2; kx++) {
                            int64_t co = b * BLOCK + c;
                            *w++ = co < cout_g ? a[ortx_gemm_packed_index((co * KH + ky) * 2 + kx, ci, M, cin_g,
                                                                          ORTX_GEMM_MR)]
                                               : 0.0f;
                        }
    }
    transpose_job job = {p, x, workspace, bias, p->has_residual ? residual : NULL, y, workspace + weight_floats(p),
                         blocks, row_floats(p)};
    ortx_parallel_for(threads, p->batch * p->group * p->in_height, transpose_row, &job);
    return 1;
}
#else
int64_t ortx_conv_transpose_tiling_floats(const ortx_conv_params *p) {
    (void)p;
    return 0;
}

int ortx_conv_transpose_tiling_avx512(const ortx_conv_params *p, const float *x, const float *packed,
                                      const float *bias, const float *residual, float *y, float *workspace,
                                      int threads) {
    (void)p, (void)x, (void)packed, (void)bias, (void)residual, (void)y, (void)workspace, (void)threads;
    return 0;
}
#endif
