/* Internal interface of the Winograd conv (conv_winograd.c): F(m x m, 3 x 3) for m = 2 and 4, its tile geometry
 * and the per-ISA input and output transforms. */
#ifndef ORTX_CONV_WINOGRAD_H
#define ORTX_CONV_WINOGRAD_H

#include <stdint.h>

#include "conv.h"
#include "gemm.h"

#define ORTX_WINO_LANES 16                      /* tiles per panel: one packed B panel's columns (ORTX_GEMM_NR) */
#define ORTX_WINO_GROUP_COLUMNS (2 * ORTX_WINO_LANES)  /* a column group: the two B panels micro_wide reads */

/* Output tiles of m x m pixels, numbered t = ty * tiles_x + tx over the output; panel i holds tiles [16i, 16i + 16)
 * (the GEMM's columns), column group j panels 2j and 2j + 1. */
typedef struct ortx_wino_geometry {
    const ortx_conv_params *p;
    int m, n;
    int64_t positions;  /* n * n: one GEMM per position */
    int64_t tiles_y, tiles_x, tiles, panels, column_groups;
    int64_t group_floats;  /* V of one column group: positions x (Cin x 32 packed B) */
    int64_t u_floats;      /* U of one position: packed A panels of (Cout x Cin) */
} ortx_wino_geometry;

ortx_wino_geometry ortx_wino_geometry_of(const ortx_conv_params *p, int m);

/* A run of `count` (1 to 16) consecutive tiles in one tile row, all in one column group: lane l is tile (ty, tx0 + l),
 * at column column0 + l of the group (0 to 31). Runs are what the transforms vectorise over: a tile row's input
 * rows and output rows are contiguous, so the transforms load and store whole rows and shuffle them apart. */
typedef struct ortx_wino_run {
    int64_t ty, tx0, count, column0;
} ortx_wino_run;

typedef struct ortx_wino_isa {
    /* V = B^T d B of input channels [ic0, ic1) of the run's tiles, zero outside the image: x is the image's first
     * input channel; v the column group's V, whose position q is a packed B (Cin x 32) at v + q * Cin * 32. */
    void (*input)(const ortx_wino_geometry *g, const ortx_wino_run *run, const float *x, int64_t ic0, int64_t ic1,
                  float *v);
    /* Y = epilogue(A^T M A) of `rows` output channels from row0: M of position q, channel row0 + r, column c at
     * c_local[q * position_stride + r * 32 + c] (readable 16 floats past a row's end); y is the image's first
     * output plane; the epilogue (NULL: none) is conv.h's group epilogue (alpha, bias per channel, residual by
     * channel and pixel, activation; no bias per column). Stores only inside the output. */
    void (*output)(const ortx_wino_geometry *g, const ortx_wino_run *run, const float *c_local,
                   int64_t position_stride, int64_t rows, int64_t row0, float *y,
                   const ortx_gemm_epilogue *epilogue);
} ortx_wino_isa;

extern const ortx_wino_isa ortx_wino_portable, ortx_wino_avx512;

/* conv2d_winograd_nchwc_f32 (conv_winograd_nchwc.c): F(4x4, 3x3) on blocked tensors, one 16-channel block of one
 * output tile per call. input: V = B^T d B of tile (ty, tx) from x (the block's plane, zero outside the image),
 * position q at v + q * position_stride. output: Y = act(A^T M A + bias + residual) of tile (ty, tx), M's position
 * q at m + q * position_stride, stored inside the output only (y and residual the block's planes, or NULL). */
typedef struct ortx_wino_nchwc_isa {
    void (*input)(const ortx_conv_params *p, const float *x, int64_t ty, int64_t tx, float *v,
                  int64_t position_stride);
    void (*output)(const ortx_conv_params *p, const float *m, int64_t position_stride, int64_t ty, int64_t tx,
                   const float *bias, const float *residual, float *y);
} ortx_wino_nchwc_isa;
extern const ortx_wino_nchwc_isa ortx_wino_nchwc_avx512; /* members NULL where not compiled */
void ortx_conv2d_winograd_nchwc_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv_winograd_nchwc_sizes_f32(const int64_t *ints, const float *floats, void *const *buffers,
                                        int num_threads);

void ortx_conv2d_winograd_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv_winograd_sizes_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_conv_winograd_pack_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);

#endif
