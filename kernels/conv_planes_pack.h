/* The packing loops of conv_planes.c as inline code, instantiated once per ISA (conv_planes.c portable,
 * conv_planes_avx512.c under the AVX-512 target, where each fixed-size row copy becomes one 64-byte vector move
 * instead of four 16-byte ones); the table in conv_planes.c chooses. Internal to the conv family. */
#ifndef ORTX_CONV_PLANES_PACK_H
#define ORTX_CONV_PLANES_PACK_H

#include <string.h>

#include "conv.h"
#include "gemm.h"

static inline int64_t ortx_planes_min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Packs `lanes` consecutive output pixels, the first at output column `column` and virtual pixel `first`, for the
 * kc taps at taps[0..kc): out[k * lanes + j] = planes[taps[k] + virtual pixel of pixel j], 0 for j >= valid.
 * Case 1: all lanes in one output row, one copy per tap. Case 2: one `lanes`-float copy per output row touched
 * (each run's next row starts `gap` discarded virtual columns later), in order, each overwriting the previous
 * one's surplus; the last run's surplus lands in the next tap's row, written after it, except for the last tap,
 * which goes through a staging row so nothing past the panel is written (other tasks may be packing there). */
static inline __attribute__((always_inline)) void ortx_planes_pack_pixels(const float *planes,
                                                                          const int32_t *taps, int64_t kc,
                                                                          int64_t column, int64_t first,
                                                                          int64_t valid, int64_t out_width,
                                                                          int64_t gap, const int lanes, float *out) {
    if (valid == lanes && column + lanes <= out_width) {  /* Case 1 */
        const float *in = planes + first;
        for (int64_t k = 0; k < kc; k++) memcpy(out + k * lanes, in + taps[k], lanes * sizeof(float));
        return;
    }
    int64_t start[ORTX_GEMM_NR], at[ORTX_GEMM_NR], runs = 0;  /* Case 2 */
    for (int64_t filled = 0, position = first; filled < valid; runs++) {
        int64_t length = ortx_planes_min64(valid - filled, out_width - column);
        start[runs] = position;
        at[runs] = filled;
        filled += length;
        position += length + gap;
        column = 0;
    }
    for (int64_t k = 0; k < kc; k++) {
        float staging[2 * ORTX_GEMM_NR];  /* a run of `lanes` floats from at[r] < lanes */
        float *row = k + 1 < kc ? out + k * lanes : staging;
        const float *in = planes + taps[k];
        for (int64_t r = 0; r < runs; r++) memcpy(row + at[r], in + start[r], lanes * sizeof(float));
        for (int64_t j = valid; j < lanes; j++) row[j] = 0.0f;
        if (k + 1 == kc) memcpy(out + k * lanes, staging, lanes * sizeof(float));
    }
}

/* ortx_conv_planes_pack_b's body (conv.h). */
static inline __attribute__((always_inline)) void ortx_planes_pack_b(const void *context, int64_t k0, int64_t kc,
                                                                     int64_t n0, int64_t nc, float *dst) {
    const ortx_conv_planes_context *ctx = context;
    const ortx_conv_params *p = ctx->params;
    const int64_t OW = p->out_width, N = p->out_height * OW, Wq = ctx->geometry.phase_width;
    for (int64_t j0 = 0; j0 < nc; j0 += ORTX_GEMM_NR) {
        int64_t n = n0 + j0, valid = ortx_planes_min64(ORTX_GEMM_NR, ortx_planes_min64(nc - j0, N - n)), oy = n / OW, ox = n % OW;
        ortx_planes_pack_pixels(ctx->planes, ctx->tap_offsets + k0, kc, ox, oy * Wq + ox, valid, OW, Wq - OW, ORTX_GEMM_NR,
                    dst + j0 * kc);
    }
}

/* ortx_conv_planes_pack_rows's body (conv.h). */
static inline __attribute__((always_inline)) void ortx_planes_pack_rows(const ortx_conv_planes_context *ctx,
                                                                        int64_t k0, int64_t kc, int64_t pixel,
                                                                        float *dst) {
    const ortx_conv_params *p = ctx->params;
    const int64_t OW = p->out_width, N = p->out_height * OW, Wq = ctx->geometry.phase_width;
    int64_t valid = ortx_planes_min64(ORTX_GEMM_MR, N - pixel), oy = pixel / OW, ox = pixel % OW;
    ortx_planes_pack_pixels(ctx->planes, ctx->tap_offsets + k0, kc, ox, oy * Wq + ox, valid, OW, Wq - OW, ORTX_GEMM_MR, dst);
}

/* Per-ISA instances (conv_planes.c, conv_planes_avx512.c). */
void ortx_conv_planes_pack_b_portable(const void *context, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst);
void ortx_conv_planes_pack_b_avx512(const void *context, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst);
void ortx_conv_planes_pack_rows_portable(const ortx_conv_planes_context *context, int64_t k0, int64_t kc,
                                         int64_t pixel, float *dst);
void ortx_conv_planes_pack_rows_avx512(const ortx_conv_planes_context *context, int64_t k0, int64_t kc,
                                       int64_t pixel, float *dst);

#endif
