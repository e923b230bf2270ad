/* Shared by layout.c, its ISA files and ref/layout_ref.c: limits and small helpers of the layout family. */
#ifndef ORTX_LAYOUT_INTERNAL_H
#define ORTX_LAYOUT_INTERNAL_H

#include <stdint.h>
#include <string.h>

/* strided_copy views: Tile doubles a rank-6 tensor to 12 dims, DepthToSpace needs 6. */
#define ORTX_LAYOUT_MAX_RANK 16

/* Pad modes (ints[2] of pad). */
enum { ORTX_PAD_CONSTANT = 0, ORTX_PAD_REFLECT = 1, ORTX_PAD_EDGE = 2, ORTX_PAD_WRAP = 3 };

/* Source coordinate of output coordinate `o` along an axis padded by `begin` in front of `in` elements, or -1
 * when the output position takes the constant. Reflect assumes pads < in (checked by the lowering). */
static inline int64_t ortx_pad_source(int64_t o, int64_t begin, int64_t in, int mode) {
    int64_t i = o - begin;
    if (i >= 0 && i < in) return i;
    switch (mode) {
        case ORTX_PAD_REFLECT:
            if (in == 1) return 0;
            return i < 0 ? -i : 2 * (in - 1) - i;
        case ORTX_PAD_EDGE: return i < 0 ? 0 : in - 1;
        case ORTX_PAD_WRAP: return ((i % in) + in) % in;
        default: return -1;
    }
}

/* Copies one element of elem_size (1, 2, 4 or 8) bytes; memcpy of a constant size compiles to one move. */
static inline void ortx_copy_element(char *dst, const char *src, int64_t elem_size) {
    switch (elem_size) {
        case 1: *dst = *src; break;
        case 2: memcpy(dst, src, 2); break;
        case 4: memcpy(dst, src, 4); break;
        default: memcpy(dst, src, 8); break;
    }
}

void ortx_upsample_row_f32_avx2(float *dst, int64_t row_stride, int64_t copies, const float *src, int64_t in_w,
                                int64_t factor);

#endif
