/* Family "layout": data movement (copies, transposes, concatenation, slicing, gathering, padding, resizing).
 *
 * Element sizes are 1, 2, 4 or 8 bytes (`elem_size`); shapes and strides are in elements unless named _bytes.
 *
 * copy_bytes: ints = [nbytes]; buffers = [src, dst]. (The SegmentBuilder's alias copy.)
 * copy_rows: ints = [rows, row_bytes, src_stride_bytes, dst_stride_bytes, src_offset_bytes, dst_offset_bytes];
 *   buffers = [src, dst]. dst[dst_offset + r * dst_stride ...] = src[src_offset + r * src_stride ...] for each row;
 *   Concat emits one per input, Split one per output.
 * strided_copy: ints = [elem_size, rank, shape[rank], src_strides[rank], src_offset]; buffers = [src, dst].
 *   dst is the contiguous tensor of `shape`; element (i_0..i_r-1) reads src[src_offset + sum i_k * src_strides[k]].
 *   Strides may be 0 (Expand, Tile) or negative (Slice with negative steps); Transpose is a permuted view.
 *   Fast paths after merging contiguous dims: unit inner stride -> memcpy runs; zero inner stride -> fill;
 *   a unit-stride dim elsewhere -> 32x32 blocked transpose; otherwise an element loop.
 * gather (fallible): ints = [elem_size, outer, axis_dim, inner, num_indices, index_bytes (4 or 8)];
 *   buffers = [data, indices, out, status]. Negative indices count from the end. An index outside
 *   [-axis_dim, axis_dim) is an error, as in onnxruntime: the first one goes into the ortx_status record and
 *   the output is all zeros.
 * pad: ints = [elem_size, rank, mode (ORTX_PAD_*), constant bits (the value's bytes, little-endian),
 *   in_shape[rank], pad_begin[rank], out_shape[rank]]; buffers = [src, dst]. pad_begin may be negative (crop).
 * resize_nearest: ints = [elem_size, rank, in_shape[rank], out_shape[rank], then for each axis its map of
 *   out_shape[axis] source indices]; buffers = [src, dst]. The lowering computes the maps with onnxruntime's float
 *   arithmetic, so any coordinate transformation and nearest_mode is the same kernel. Fast paths: output rows
 *   mapping to the same source row are written together (AVX2: each vector stored to every such row); an inner map that is an
 *   integer-factor upsampling (map[x] = x / f) duplicates elements (AVX2 for float32 factors 2/4/8).
 * resize_linear_f32: ints = [outer, in_h, in_w, out_h, out_w, y0[out_h], y1[out_h], x0[out_w], x1[out_w]];
 *   floats = [wy0[out_h], wy1[out_h], wx0[out_w], wx1[out_w]]; buffers = [src, dst].
 *   out = wy0 * (wx0 * a + wx1 * b) + wy1 * (wx0 * c + wx1 * d) with a, b on row y0 and c, d on row y1.
 */
#include <stdlib.h>
#include <string.h>

#include "isa.h"
#include "layout_internal.h"
#include "ortx_kernels.h"
#include "threadpool.h"

void ortx_copy_rows_ref(const int64_t *, const float *, void *const *, int);
void ortx_strided_copy_ref(const int64_t *, const float *, void *const *, int);
void ortx_gather_ref(const int64_t *, const float *, void *const *, int);
void ortx_pad_ref(const int64_t *, const float *, void *const *, int);
void ortx_resize_nearest_ref(const int64_t *, const float *, void *const *, int);
void ortx_resize_linear_f32_ref(const int64_t *, const float *, void *const *, int);

/* Below this many bytes a step runs on one thread: forking costs more than it saves. */
#define PARALLEL_MIN_BYTES (1 << 16)

static int threads_for(int64_t nbytes, int num_threads) { return nbytes >= PARALLEL_MIN_BYTES ? num_threads : 1; }

/* Splits `items` independent work items (each writes its own output bytes) over threads_for(nbytes) threads. */
static void split_items(int64_t nbytes, int num_threads, int64_t items, ortx_range_fn fn, void *job) {
    int threads = threads_for(nbytes, num_threads);
    ortx_parallel_range(threads, items, (int64_t)ORTX_TASKS_PER_THREAD * threads, fn, job);
}

/* The step's own arguments, for kernels whose tasks need nothing else. */
typedef struct step_job {
    const int64_t *ints;
    const float *floats;
    void *const *buffers;
} step_job;

static void ortx_copy_bytes(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    if (buffers[0] != buffers[1]) memmove(buffers[1], buffers[0], (size_t)ints[0]);
}

static void copy_rows_range(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const step_job *job = context;
    const int64_t row_bytes = job->ints[1], src_stride = job->ints[2], dst_stride = job->ints[3];
    const char *src = (const char *)job->buffers[0] + job->ints[4];
    char *dst = (char *)job->buffers[1] + job->ints[5];
    for (int64_t r = begin; r < end; r++) memcpy(dst + r * dst_stride, src + r * src_stride, (size_t)row_bytes);
}

static void ortx_copy_rows(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    const int64_t rows = ints[0], row_bytes = ints[1], src_stride = ints[2], dst_stride = ints[3];
    const char *src = (const char *)buffers[0] + ints[4];
    char *dst = (char *)buffers[1] + ints[5];
    if (row_bytes == src_stride && row_bytes == dst_stride) {
        memcpy(dst, src, (size_t)(rows * row_bytes));
        return;
    }
    step_job job = {ints, floats, buffers};
    split_items(rows * row_bytes, num_threads, rows, copy_rows_range, &job);
}

/* strided_copy ----------------------------------------------------------------------------------------------- */

typedef struct view {
    int rank;
    int64_t shape[ORTX_LAYOUT_MAX_RANK], stride[ORTX_LAYOUT_MAX_RANK];
} view;

/* Drops size-1 dims and merges dim k into k+1 when the source walks them as one run. */
static view merge_dims(int rank, const int64_t *shape, const int64_t *stride) {
    view v;
    v.rank = 0;
    for (int k = 0; k < rank; k++) {
        if (shape[k] == 1) continue;
        if (v.rank > 0 && v.stride[v.rank - 1] == stride[k] * shape[k]) {
            v.shape[v.rank - 1] *= shape[k];
            v.stride[v.rank - 1] = stride[k];
            continue;
        }
        v.shape[v.rank] = shape[k];
        v.stride[v.rank] = stride[k];
        v.rank++;
    }
    if (v.rank == 0) {
        v.rank = 1;
        v.shape[0] = 1;
        v.stride[0] = 1;
    }
    return v;
}

/* Source offset (elements) of outer index `index` over dims [0, count) of v, skipping dim `skip`. */
static int64_t outer_offset(const view *v, int count, int skip, int64_t index) {
    int64_t offset = 0;
    for (int k = count - 1; k >= 0; k--) {
        if (k == skip) continue;
        offset += (index % v->shape[k]) * v->stride[k];
        index /= v->shape[k];
    }
    return offset;
}

/* Output offset of the same outer index, for a contiguous output of v's shape. */
static int64_t outer_dst_offset(const view *v, int count, int skip, int64_t index) {
    int64_t offset = 0, step = 1;
    for (int k = v->rank - 1; k >= count; k--) step *= v->shape[k];
    for (int k = count - 1; k >= 0; k--) {
        if (k != skip) {
            offset += (index % v->shape[k]) * step;
            index /= v->shape[k];
        }
        step *= v->shape[k];
    }
    return offset;
}

#define TILE 32

/* d[r * dst_row + c] = s[r + c * src_stride] over one tile, with typed loads so each move is one instruction. */
#define TRANSPOSE_TILE(type)                                                                     \
    do {                                                                                         \
        type *dt = (type *)d;                                                                    \
        const type *st = (const type *)s;                                                        \
        for (int64_t r = r0; r < r1; r++)                                                        \
            for (int64_t c = c0; c < c1; c++) dt[r * dst_row + c] = st[r + c * src_stride];      \
    } while (0)

static void transpose_tile(char *d, const char *s, int64_t elem, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                           int64_t dst_row, int64_t src_stride) {
    switch (elem) {
        case 1: TRANSPOSE_TILE(uint8_t); break;
        case 2: TRANSPOSE_TILE(uint16_t); break;
        case 4: TRANSPOSE_TILE(uint32_t); break;
        default: TRANSPOSE_TILE(uint64_t); break;
    }
}

typedef struct strided_job {
    const view *v;
    const char *src;
    char *dst;
    int64_t elem;
    int last, unit;
    int64_t inner, inner_stride, rows, dst_row, row_tiles, col_tiles;
} strided_job;

/* Case transpose: tiles [begin, end) of outer x row_tiles x col_tiles. */
static void transpose_tiles(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const strided_job *job = context;
    const int64_t elem = job->elem, rows = job->rows, inner = job->inner;
    for (int64_t task = begin; task < end; task++) {
        const int64_t o = task / (job->row_tiles * job->col_tiles);
        const int64_t r0 = (task / job->col_tiles) % job->row_tiles * TILE, c0 = task % job->col_tiles * TILE;
        const char *s = job->src + outer_offset(job->v, job->last, job->unit, o) * elem;
        char *d = job->dst + outer_dst_offset(job->v, job->last, job->unit, o) * elem;
        const int64_t r1 = r0 + TILE < rows ? r0 + TILE : rows, c1 = c0 + TILE < inner ? c0 + TILE : inner;
        transpose_tile(d, s, elem, r0, r1, c0, c1, job->dst_row, job->inner_stride);
    }
}

/* Output rows [begin, end) of `inner` elements each. */
static void strided_rows(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const strided_job *job = context;
    const int64_t elem = job->elem, inner = job->inner, inner_stride = job->inner_stride;
    for (int64_t o = begin; o < end; o++) {
        const char *s = job->src + outer_offset(job->v, job->last, -1, o) * elem;
        char *d = job->dst + o * inner * elem;
        if (inner_stride == 1) {
            /* Case runs: trailing dims unchanged */
            memcpy(d, s, (size_t)(inner * elem));
        } else if (inner_stride == 0) {
            /* Case broadcast: one element repeated */
            for (int64_t i = 0; i < inner; i++) ortx_copy_element(d + i * elem, s, elem);
        } else {
            for (int64_t i = 0; i < inner; i++) ortx_copy_element(d + i * elem, s + i * inner_stride * elem, elem);
        }
    }
}

static void ortx_strided_copy(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    const int64_t elem = ints[0];
    const int rank = (int)ints[1];
    const view v = merge_dims(rank, ints + 2, ints + 2 + rank);
    const char *src = (const char *)buffers[0] + ints[2 + 2 * rank] * elem;
    char *dst = (char *)buffers[1];
    const int last = v.rank - 1;
    const int64_t inner = v.shape[last], inner_stride = v.stride[last];
    int64_t total = 1;
    for (int k = 0; k < v.rank; k++) total *= v.shape[k];
    const int threads = threads_for(total * elem, num_threads);
    int unit = -1; /* a non-inner dim the source walks with stride 1: blocked transpose */
    for (int k = 0; k < last; k++)
        if (v.stride[k] == 1) unit = k;
    if (inner_stride != 1 && inner_stride != 0 && unit >= 0) {
        /* Case transpose: tiles of (unit dim u) x (inner dim) read along u, write along inner */
        const int64_t rows = v.shape[unit];
        int64_t dst_row = 1; /* output stride of dim u */
        for (int k = unit + 1; k < v.rank; k++) dst_row *= v.shape[k];
        const int64_t outer = total / (rows * inner);
        const int64_t row_tiles = (rows + TILE - 1) / TILE, col_tiles = (inner + TILE - 1) / TILE;
        strided_job job = {&v, src, dst, elem, last, unit, inner, inner_stride, rows, dst_row, row_tiles, col_tiles};
        ortx_parallel_range(threads, outer * row_tiles * col_tiles, (int64_t)ORTX_TASKS_PER_THREAD * threads,
                            transpose_tiles, &job);
        return;
    }
    strided_job job = {&v, src, dst, elem, last, -1, inner, inner_stride, 0, 0, 0, 0};
    ortx_parallel_range(threads, total / inner, (int64_t)ORTX_TASKS_PER_THREAD * threads, strided_rows, &job);
}

/* gather ------------------------------------------------------------------------------------------------------ */

static void gather_runs(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const step_job *job = context;
    const int64_t elem = job->ints[0], axis_dim = job->ints[2], inner = job->ints[3], count = job->ints[4];
    const int64_t index_bytes = job->ints[5];
    const char *data = (const char *)job->buffers[0];
    const void *indices = job->buffers[1];
    char *out = (char *)job->buffers[2];
    const size_t run = (size_t)(inner * elem);
    for (int64_t task = begin; task < end; task++) {
        const int64_t o = task / count, i = task % count;
        int64_t index = index_bytes == 4 ? ((const int32_t *)indices)[i] : ((const int64_t *)indices)[i];
        if (index < 0) index += axis_dim;  /* in range: checked by gather_check before any task runs */
        memcpy(out + task * (int64_t)run, data + (o * axis_dim + index) * (int64_t)run, run);
    }
}

/* One pass over the indices on the calling thread (they are few next to the bytes they move): the status record,
 * with the first index outside [-axis_dim, axis_dim) if there is one. */
static int gather_check(const int64_t *ints, const void *indices, ortx_status *status) {
    const int64_t axis_dim = ints[2], count = ints[4], index_bytes = ints[5];
    *status = (ortx_status){ORTX_STATUS_OK, 0, 0, axis_dim};
    for (int64_t i = 0; i < count; i++) {
        const int64_t index = index_bytes == 4 ? ((const int32_t *)indices)[i] : ((const int64_t *)indices)[i];
        if (index < -axis_dim || index >= axis_dim) {
            *status = (ortx_status){ORTX_STATUS_INDEX_OUT_OF_RANGE, index, i, axis_dim};
            return 0;
        }
    }
    return 1;
}

static void ortx_gather(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    const int64_t elem = ints[0], outer = ints[1], inner = ints[3], count = ints[4];
    if (!gather_check(ints, buffers[1], (ortx_status *)buffers[3])) {
        memset(buffers[2], 0, (size_t)(outer * count * inner * elem));
        return;
    }
    step_job job = {ints, floats, buffers};
    split_items(outer * count * inner * elem, num_threads, outer * count, gather_runs, &job);
}

/* pad --------------------------------------------------------------------------------------------------------- */

typedef struct pad_job {
    const char *src;
    char *dst;
    const int64_t *in, *begin, *out;
    int64_t elem;
    int rank, mode;
    int64_t out_w, in_w, pad_w, lo, hi;
    char constant[8];
} pad_job;

/* Output rows [r0, r1): columns [lo, hi) copy one contiguous run of the source row, the rest map one by one. */
static void pad_rows(void *context, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const pad_job *job = context;
    const char *src = job->src, *constant = job->constant;
    char *dst = job->dst;
    const int64_t *in = job->in, *begin = job->begin, *out = job->out;
    const int64_t elem = job->elem, out_w = job->out_w, in_w = job->in_w, pad_w = job->pad_w;
    const int64_t lo = job->lo, hi = job->hi;
    const int rank = job->rank, mode = job->mode;
    for (int64_t r = r0; r < r1; r++) {
        char *d = dst + r * out_w * elem;
        int64_t source_row = 0, index = r;
        int outside = 0;
        int64_t step = 1;
        for (int k = rank - 2; k >= 0; k--) {
            int64_t s = ortx_pad_source(index % out[k], begin[k], in[k], mode);
            index /= out[k];
            if (s < 0) outside = 1;
            source_row += s * step;
            step *= in[k];
        }
        if (outside) {
            for (int64_t c = 0; c < out_w; c++) ortx_copy_element(d + c * elem, constant, elem);
            continue;
        }
        const char *s = src + source_row * in_w * elem;
        for (int64_t c = 0; c < lo; c++) {
            int64_t sc = ortx_pad_source(c, pad_w, in_w, mode);
            ortx_copy_element(d + c * elem, sc < 0 ? constant : s + sc * elem, elem);
        }
        if (hi > lo) memcpy(d + lo * elem, s + (lo - pad_w) * elem, (size_t)((hi - lo) * elem));
        for (int64_t c = hi; c < out_w; c++) {
            int64_t sc = ortx_pad_source(c, pad_w, in_w, mode);
            ortx_copy_element(d + c * elem, sc < 0 ? constant : s + sc * elem, elem);
        }
    }
}

static void ortx_pad(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    const int64_t elem = ints[0];
    const int rank = (int)ints[1], mode = (int)ints[2];
    const int64_t *in = ints + 4, *begin = ints + 4 + rank, *out = ints + 4 + 2 * rank;
    const char *src = (const char *)buffers[0];
    char *dst = (char *)buffers[1];
    const int64_t out_w = out[rank - 1], in_w = in[rank - 1], pad_w = begin[rank - 1];
    int64_t rows = 1;
    for (int k = 0; k < rank - 1; k++) rows *= out[k];
    /* columns [lo, hi) of an output row copy one contiguous run of the source row */
    int64_t lo = pad_w > 0 ? pad_w : 0, hi = pad_w + in_w < out_w ? pad_w + in_w : out_w;
    if (hi < lo) hi = lo;
    pad_job job = {src, dst, in, begin, out, elem, rank, mode, out_w, in_w, pad_w, lo, hi, {0}};
    memcpy(job.constant, &ints[3], 8);
    split_items(rows * out_w * elem, num_threads, rows, pad_rows, &job);
}

/* resize ------------------------------------------------------------------------------------------------------ */

/* factor f when map[x] == x / f for every x and the row is exactly f times longer, else 0 */
static int64_t upsample_factor(const int64_t *map, int64_t in_w, int64_t out_w) {
    if (out_w % in_w != 0) return 0;
    const int64_t f = out_w / in_w;
    for (int64_t x = 0; x < out_w; x++)
        if (map[x] != x / f) return 0;
    return f;
}

/* Output rows d, d + out_w, ... (`copies` of them) all take source row s. */
static void nearest_rows(char *d, int64_t copies, const char *s, const int64_t *map, int64_t out_w, int64_t in_w,
                         int64_t elem, int64_t factor) {
    const size_t row_bytes = (size_t)(out_w * elem);
#if ORTX_HAVE_X86
    if (factor > 1 && elem == 4 && ortx_selected_isa() >= ORTX_ISA_AVX2) {
        ortx_upsample_row_f32_avx2((float *)d, out_w, copies, (const float *)s, in_w, factor);
        return;
    }
#endif
    (void)in_w;
    if (factor == 1)
        memcpy(d, s, row_bytes);
    else
        for (int64_t x = 0; x < out_w; x++) ortx_copy_element(d + x * elem, s + map[x] * elem, elem);
    for (int64_t r = 1; r < copies; r++) memcpy(d + r * (int64_t)row_bytes, d, row_bytes);
}

typedef struct nearest_job {
    const int64_t *const *maps;
    const int64_t *in, *out;
    const char *src;
    char *dst;
    int rank;
    int64_t elem, factor, out_h;
} nearest_job;

/* Output planes [begin, end) (all dims but the last two); rows repeating the previous source row are copied from
 * the previous output row. */
static void nearest_planes(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const nearest_job *job = context;
    const int64_t *const *maps = job->maps;
    const int64_t *in = job->in, *out = job->out;
    const int rank = job->rank;
    const int64_t elem = job->elem, out_h = job->out_h, out_w = out[rank - 1], in_w = in[rank - 1];
    const int64_t in_h = rank >= 2 ? in[rank - 2] : 1;
    for (int64_t plane = begin; plane < end; plane++) {
        int64_t source_plane = 0, index = plane, step = 1;
        for (int k = rank - 3; k >= 0; k--) {
            source_plane += maps[k][index % out[k]] * step;
            index /= out[k];
            step *= in[k];
        }
        for (int64_t y = 0; y < out_h;) {
            const int64_t sy = rank >= 2 ? maps[rank - 2][y] : 0;
            int64_t copies = 1;
            while (y + copies < out_h && maps[rank - 2][y + copies] == sy) copies++;
            nearest_rows(job->dst + (plane * out_h + y) * out_w * elem, copies,
                         job->src + ((source_plane * in_h) + sy) * in_w * elem, maps[rank - 1], out_w, in_w, elem,
                         job->factor);
            y += copies;
        }
    }
}

static void ortx_resize_nearest(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    const int64_t elem = ints[0];
    const int rank = (int)ints[1];
    const int64_t *in = ints + 2, *out = ints + 2 + rank;
    const int64_t *maps[ORTX_LAYOUT_MAX_RANK] = {0};
    const int64_t *cursor = ints + 2 + 2 * rank;
    for (int k = 0; k < rank; k++) {
        maps[k] = cursor;
        cursor += out[k];
    }
    const char *src = (const char *)buffers[0];
    char *dst = (char *)buffers[1];
    const int64_t out_w = out[rank - 1], in_w = in[rank - 1];
    const int64_t factor = upsample_factor(maps[rank - 1], in_w, out_w);
    int64_t rows = 1, out_h = rank >= 2 ? out[rank - 2] : 1;
    for (int k = 0; k < rank - 1; k++) rows *= out[k];
    const int64_t planes = rows / out_h;
    nearest_job job = {maps, in, out, src, dst, rank, elem, factor, out_h};
    split_items(rows * out_w * elem, num_threads, planes, nearest_planes, &job);
}

static void linear_rows(void *context, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const step_job *job = context;
    const int64_t *ints = job->ints;
    const int64_t in_h = ints[1], in_w = ints[2], out_h = ints[3], out_w = ints[4];
    const int64_t *y0 = ints + 5, *y1 = y0 + out_h, *x0 = y1 + out_h, *x1 = x0 + out_w;
    const float *wy0 = job->floats, *wy1 = wy0 + out_h, *wx0 = wy1 + out_h, *wx1 = wx0 + out_w;
    const float *src = (const float *)job->buffers[0];
    float *dst = (float *)job->buffers[1];
    for (int64_t row = begin; row < end; row++) {
        const int64_t plane = row / out_h, y = row % out_h;
        const float *top = src + (plane * in_h + y0[y]) * in_w, *bottom = src + (plane * in_h + y1[y]) * in_w;
        float *d = dst + row * out_w;
        const float a = wy0[y], b = wy1[y];
        for (int64_t x = 0; x < out_w; x++) {
            float t = wx0[x] * top[x0[x]] + wx1[x] * top[x1[x]];
            float u = wx0[x] * bottom[x0[x]] + wx1[x] * bottom[x1[x]];
            d[x] = a * t + b * u;
        }
    }
}

static void ortx_resize_linear_f32(const int64_t *ints, const float *floats, void *const *buffers,
                                   int num_threads) {
    const int64_t outer = ints[0], out_h = ints[3], out_w = ints[4];
    step_job job = {ints, floats, buffers};
    split_items(outer * out_h * out_w * 4, num_threads, outer * out_h, linear_rows, &job);
}

const ortx_kernel_entry ortx_family_layout[] = {
    {"copy_bytes", ortx_copy_bytes, ortx_copy_bytes},
    {"copy_rows", ortx_copy_rows, ortx_copy_rows_ref},
    {"strided_copy", ortx_strided_copy, ortx_strided_copy_ref},
    {"gather", ortx_gather, ortx_gather_ref, 1},
    {"pad", ortx_pad, ortx_pad_ref},
    {"resize_nearest", ortx_resize_nearest, ortx_resize_nearest_ref},
    {"resize_linear_f32", ortx_resize_linear_f32, ortx_resize_linear_f32_ref},
    {NULL, NULL, NULL},
};
