/* A dense conv's patch matrix as the B operand of a generated GEMM (ortx/codegen/templates/gemm.c, conv mode).
 *
 * The generated object never links against ortx, so it gets these two functions as pointers (as it gets
 * ortx_parallel_for): per call, ortx_conv_source_prepare fills the zero-padded input planes (conv_planes.c) in the
 * scratch the generated kernel reserved and sets up an opaque source in the caller's frame; then
 * ortx_conv_source_pack_b packs any KC x NC block of the (Cin*KH*KW) x (OH*OW) patch matrix into 16-column panels
 * (kernels/gemm.h's B panel format), from the phase planes (one contiguous copy per panel row and output row) when
 * ortx_conv_packs_from_planes says so, else row by row from X (conv.c's im2col), the choice conv2d_f32 makes.
 * Limits: one image, one group (the caller passes that image's X); nc at most ORTX_GEMM_NC per pack call.
 */
#include <string.h>

#include "conv.h"
#include "gemm.h"
#include "threadpool.h"

typedef struct ortx_conv_source {
    ortx_conv_params params;
    int from_planes;
    ortx_conv_planes_context planes;
    ortx_im2col_context im2col;
} ortx_conv_source;

static int source_from_planes(const ortx_conv_params *p) { return ortx_conv_packs_from_planes(p); }

/* The planes, their slack and the tap offsets (conv_planes.c), or nothing for im2col. */
static int64_t source_floats(const ortx_conv_params *p) {
    return source_from_planes(p) ? ortx_conv_planes_source_floats(p) : 0;
}

/* ints/floats: conv2d_f32's (conv.h); x: the image's input; scratch: source_floats floats, 64-byte aligned;
 * source: sizeof(ortx_conv_source) bytes that stay in place while pack_b runs (it points into itself). */
void ortx_conv_source_prepare(const int64_t *ints, const float *floats, const float *x, float *scratch,
                              int num_threads, void *source) {
    ortx_conv_source *s = source;
    s->params = ortx_conv_params_read(ints, floats);
    s->from_planes = source_from_planes(&s->params);
    s->im2col.params = &s->params;
    s->im2col.input = x;
    if (!s->from_planes) return;
    ortx_conv_planes_context_init(&s->planes, &s->params, scratch);
    ortx_conv_fill_planes_parallel(&s->params, x, scratch, num_threads);
}

/* ortx_gemm_pack_b_fn over a prepared source; n0 a multiple of ORTX_GEMM_NR, nc <= ORTX_GEMM_NC. */
void ortx_conv_source_pack_b(const void *source, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst) {
    const ortx_conv_source *s = source;
    if (s->from_planes) {
        ortx_conv_planes_pack_b(&s->planes, k0, kc, n0, nc, dst);
    } else {
        ortx_conv_im2col_pack_b(&s->im2col, k0, kc, n0, nc, dst);
    }
}

/* Sizes for ortx.codegen.gemm: ints = conv2d_f32's 20 ints; buffers [0] int64[3] out: scratch floats, bytes of
 * the opaque source, whether it packs from planes. */
void ortx_conv_source_sizes_f32(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    float unused[2] = {0.0f, 0.0f};
    ortx_conv_params p = ortx_conv_params_read(ints, unused);
    int64_t *out = buffers[0];
    out[0] = source_floats(&p);
    out[1] = (int64_t)sizeof(ortx_conv_source);
    out[2] = source_from_planes(&p);
}
