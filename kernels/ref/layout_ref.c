/* Reference layout kernels: one loop per output element, no threading; the oracle for kernels/layout.c (same
 * ints/floats/buffers layouts, documented there). */
#include <string.h>

#include "layout_internal.h"
#include "ortx_kernels.h"

void ortx_copy_rows_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    const char *src = (const char *)buffers[0];
    char *dst = (char *)buffers[1];
    for (int64_t r = 0; r < ints[0]; r++)
        for (int64_t b = 0; b < ints[1]; b++) dst[ints[5] + r * ints[3] + b] = src[ints[4] + r * ints[2] + b];
}

void ortx_strided_copy_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    const int64_t elem = ints[0];
    const int rank = (int)ints[1];
    const int64_t *shape = ints + 2, *stride = ints + 2 + rank;
    int64_t total = 1;
    for (int k = 0; k < rank; k++) total *= shape[k];
    for (int64_t i = 0; i < total; i++) {
        int64_t index = i, offset = ints[2 + 2 * rank];
        for (int k = rank - 1; k >= 0; k--) {
            offset += (index % shape[k]) * stride[k];
            index /= shape[k];
        }
        ortx_copy_element((char *)buffers[1] + i * elem, (const char *)buffers[0] + offset * elem, elem);
    }
}

void ortx_gather_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    const int64_t elem = ints[0], outer = ints[1], axis_dim = ints[2], inner = ints[3], count = ints[4];
    ortx_status *status = (ortx_status *)buffers[3];
    status->code = ORTX_STATUS_OK;
    for (int64_t i = 0; i < count && status->code == ORTX_STATUS_OK; i++) {
        int64_t index = ints[5] == 4 ? ((const int32_t *)buffers[1])[i] : ((const int64_t *)buffers[1])[i];
        if (index < -axis_dim || index >= axis_dim) {
            status->code = ORTX_STATUS_INDEX_OUT_OF_RANGE;
            status->value = index;
            status->position = i;
            status->bound = axis_dim;
        }
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < count; i++) {
            int64_t index = ints[5] == 4 ? ((const int32_t *)buffers[1])[i] : ((const int64_t *)buffers[1])[i];
            if (index < 0) index += axis_dim;
            for (int64_t e = 0; e < inner; e++) {
                char *d = (char *)buffers[2] + ((o * count + i) * inner + e) * elem;
                if (status->code != ORTX_STATUS_OK)
                    memset(d, 0, (size_t)elem);
                else
                    ortx_copy_element(d, (const char *)buffers[0] + ((o * axis_dim + index) * inner + e) * elem,
                                      elem);
            }
        }
}

void ortx_pad_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    const int64_t elem = ints[0];
    const int rank = (int)ints[1], mode = (int)ints[2];
    const int64_t *in = ints + 4, *begin = ints + 4 + rank, *out = ints + 4 + 2 * rank;
    char constant[8];
    memcpy(constant, &ints[3], 8);
    int64_t total = 1;
    for (int k = 0; k < rank; k++) total *= out[k];
    for (int64_t i = 0; i < total; i++) {
        int64_t index = i, offset = 0, step = 1;
        int outside = 0;
        for (int k = rank - 1; k >= 0; k--) {
            int64_t s = ortx_pad_source(index % out[k], begin[k], in[k], mode);
            index /= out[k];
            if (s < 0) outside = 1;
            offset += s * step;
            step *= in[k];
        }
        ortx_copy_element((char *)buffers[1] + i * elem,
                          outside ? constant : (const char *)buffers[0] + offset * elem, elem);
    }
}

void ortx_resize_nearest_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    const int64_t elem = ints[0];
    const int rank = (int)ints[1];
    const int64_t *in = ints + 2, *out = ints + 2 + rank;
    const int64_t *maps[ORTX_LAYOUT_MAX_RANK];
    const int64_t *cursor = ints + 2 + 2 * rank;
    int64_t total = 1;
    for (int k = 0; k < rank; k++) {
        maps[k] = cursor;
        cursor += out[k];
        total *= out[k];
    }
    for (int64_t i = 0; i < total; i++) {
        int64_t index = i, offset = 0, step = 1;
        for (int k = rank - 1; k >= 0; k--) {
            offset += maps[k][index % out[k]] * step;
            index /= out[k];
            step *= in[k];
        }
        ortx_copy_element((char *)buffers[1] + i * elem, (const char *)buffers[0] + offset * elem, elem);
    }
}

void ortx_resize_linear_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    const int64_t outer = ints[0], in_h = ints[1], in_w = ints[2], out_h = ints[3], out_w = ints[4];
    const int64_t *y0 = ints + 5, *y1 = y0 + out_h, *x0 = y1 + out_h, *x1 = x0 + out_w;
    const float *wy0 = floats, *wy1 = wy0 + out_h, *wx0 = wy1 + out_h, *wx1 = wx0 + out_w;
    const float *src = (const float *)buffers[0];
    float *dst = (float *)buffers[1];
    for (int64_t p = 0; p < outer; p++)
        for (int64_t y = 0; y < out_h; y++)
            for (int64_t x = 0; x < out_w; x++) {
                const float *plane = src + p * in_h * in_w;
                float t = wx0[x] * plane[y0[y] * in_w + x0[x]] + wx1[x] * plane[y0[y] * in_w + x1[x]];
                float u = wx0[x] * plane[y1[y] * in_w + x0[x]] + wx1[x] * plane[y1[y] * in_w + x1[x]];
                dst[(p * out_h + y) * out_w + x] = wy0[y] * t + wy1[y] * u;
            }
}
