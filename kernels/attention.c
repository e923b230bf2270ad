/* Family "attention": multi-head attention over head-interleaved rows, one fused task per (batch, head, row block).
 *
 * BERT-style models keep Q, K and V as [batch, seq, heads * head_dim] rows (often three column ranges of one fused
 * projection) and reshape/transpose them per head around two batched MatMuls and a Softmax. This kernel reads each
 * head's columns in place through strides and writes each head's output columns in place, so no transpose, split
 * or [heads, S, L] scores tensor is ever materialised:
 *   1. tasks = batch * heads * blocks; a block is a range of query rows (blocks is fixed by the thread count the
 *      workspace was sized for, so the partition never depends on which thread runs what);
 *   2. per task, on one thread, in that thread's workspace slice: scores[rows, L] = scale * Q_h[rows] @ K_h^T
 *      (ortx_sgemm, one thread), softmax of each scores row in place, Y_h[rows] = scores @ V_h (ortx_sgemm,
 *      written straight into Y's rows with Y's row stride).
 * Each task writes only its own rows of Y and its own workspace slice. Every output row is computed the same way
 * whatever the block split (ortx_sgemm sums each element in one order; softmax is per row), so results are bitwise
 * equal across thread counts. Limits: no attention mask; K is given untransposed ([L, D] rows per head).
 *
 * multi_head_attention_f32: ints = [batch, heads, S, L, D, Dv, q_offset, k_offset, v_offset, q_row_stride,
 *   k_row_stride, v_row_stride, y_row_stride, q_batch_stride, k_batch_stride, v_batch_stride, y_batch_stride,
 *   workspace_threads, probability_kind, probability_zero_point]; floats = [scale, probability_scale];
 *   buffers = [q, k, v, y, workspace].
 *   Q_h[s, d] = q[q_offset + b*q_batch_stride + s*q_row_stride + h*D + d], K_h[l, d] likewise from k (h*D),
 *   V_h[l, e] from v (h*Dv), Y[b, s, h*Dv + e] = y[b*y_batch_stride + s*y_row_stride + h*Dv + e];
 *   Y_h = P_h @ V_h, P_h = softmax(scale * Q_h @ K_h^T, over L), with probability_kind 1 (uint8) or 2 (int8) P_h
 *   put through QuantizeLinear then DequantizeLinear (an int8 QDQ model's attention) with probability_scale and
 *   probability_zero_point, as OrtxEP's quantize_linear_f32 and dequantize_linear_f32 steps would (kind 0: not).
 *   q, k and v may be the same buffer (different offsets).
 * multi_head_attention_sizes_f32: ints = [batch, heads, S, L, D, Dv, threads]; buffers = [out int64[1]]:
 *   out[0] = workspace bytes for `threads` threads (of either kernel).
 * multi_head_attention_bf16 (OrtxEP's precision "bf16", ortx/ep/precision.py): the same ints, floats, buffers and
 *   steps with both products on ortx_bgemm: Q_h, K_h, the probabilities and V_h rounded to bf16 as they are
 *   packed, fp32 sums; the scale (the first product's alpha), the softmax and the probabilities' QDQ stay fp32.
 */

#include "elementwise.h"
#include "gemm.h"
#include "gemm_bf16.h"
#include "qgemm.h"
#include "ortx_kernels.h"
#include "threadpool.h"

extern void ortx_multi_head_attention_f32_ref(const int64_t *, const float *, void *const *, int);
extern void ortx_multi_head_attention_bf16_ref(const int64_t *, const float *, void *const *, int);

/* Below this many multiply-adds (both products, all heads) the whole step runs on the calling thread: waking a
 * second thread costs more than it saves (ortx_sgemm's bound, ~60 us on one core, until ortx_sgemm's was measured
 * lower for its own tiles; not re-measured for attention). */
#define ORTX_ATTENTION_PARALLEL_MIN (128.0 * 128 * 128)

/* Query-row blocks per (batch, head): one when there are at least as many (batch, head) problems as threads, since
 * every block packs its head's K^T and V again (BERT-like, 4 heads of 128 x 64 on 2 threads: 2 blocks a head took
 * 0.133 ms, 1 block 0.122 ms, both with the call's ~0.014 ms); else enough blocks for each thread to get one,
 * each at least two micro-kernel row panels high. */
static int64_t row_blocks(int64_t problems, int64_t S, int64_t threads) {
    if (threads <= 1 || problems >= threads) return 1;
    int64_t wanted = (threads + problems - 1) / problems;
    int64_t most = S / (2 * ORTX_GEMM_MR);
    if (most < 1) most = 1;
    return wanted < most ? wanted : most;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Floats of one thread's slice: the scores block, then the largest of the two products' packing buffers (fp32 or
 * bf16: one size serves both kernels). */
static int64_t slice_floats(int64_t rows, int64_t L, int64_t D, int64_t Dv) {
    int64_t scores = ortx_round_up(rows * L, 16);
    int64_t packing = max64(max64(ortx_sgemm_workspace_floats(rows, L, D, 0, 0, 1),
                                  ortx_sgemm_workspace_floats(rows, Dv, L, 0, 0, 1)),
                            max64(ortx_bgemm_workspace_floats(rows, L, D, 1),
                                  ortx_bgemm_workspace_floats(rows, Dv, L, 1)));
    return scores + ortx_round_up(packing, 16);
}

/* QuantizeLinear then DequantizeLinear in place, in chunks through a byte buffer, with quantize_linear_f32's and
 * dequantize_linear_f32's own bodies (qgemm.c), so the values are those two steps' bit for bit. kind: 1 uint8,
 * 2 int8. */
#define ORTX_ATTENTION_QUANT_CHUNK 256
static void fake_quantize(float *x, int64_t count, float scale, int kind, int32_t zero) {
    int is_signed = kind == 2;
    float low = (float)((is_signed ? -128 : 0) - zero), high = (float)((is_signed ? 127 : 255) - zero);
    uint8_t bytes[ORTX_ATTENTION_QUANT_CHUNK];
    for (int64_t start = 0; start < count; start += ORTX_ATTENTION_QUANT_CHUNK) {
        int64_t n = count - start < ORTX_ATTENTION_QUANT_CHUNK ? count - start : ORTX_ATTENTION_QUANT_CHUNK;
        ortx_quantize_linear(x + start, n, scale, low, high, zero, is_signed, bytes);
        ortx_dequantize_linear(bytes, n, is_signed, zero, scale, x + start);
    }
}

typedef struct attention_job {
    const int64_t *ints;
    float scale, probability_scale;
    const float *q, *k, *v;
    float *y, *workspace;
    int64_t blocks, block_rows, slice;
    int bf16;  /* multi_head_attention_bf16: the products on ortx_bgemm */
} attention_job;

static void attention_task(void *context, int64_t task, int thread) {
    const attention_job *job = context;
    const int64_t *ints = job->ints;
    int64_t heads = ints[1], S = ints[2], L = ints[3], D = ints[4], Dv = ints[5];
    int64_t block = task % job->blocks, problem = task / job->blocks;
    int64_t b = problem / heads, h = problem % heads;
    int64_t row0 = block * job->block_rows;
    int64_t rows = S - row0 < job->block_rows ? S - row0 : job->block_rows;
    if (rows <= 0) return;
    float *scores = job->workspace + thread * job->slice;
    float *packing = scores + ortx_round_up(job->block_rows * L, 16);
    const float *q = job->q + ints[6] + b * ints[13] + row0 * ints[9] + h * D;
    const float *k = job->k + ints[7] + b * ints[14] + h * D;
    const float *v = job->v + ints[8] + b * ints[15] + h * Dv;
    float *y = job->y + b * ints[16] + row0 * ints[12] + h * Dv;
    ortx_gemm_epilogue scaled = {.alpha = job->scale, .residual_scale = 1.0f};
    ortx_gemm_epilogue plain = {.alpha = 1.0f, .residual_scale = 1.0f};
    if (job->bf16) {
        ortx_bgemm_operand a = {NULL, q, ints[9], 1, NULL, NULL, NULL};
        ortx_bgemm_operand kt = {NULL, k, 1, ints[10], NULL, NULL, NULL};
        ortx_bgemm(rows, L, D, &a, &kt, scores, L, &scaled, packing, 1);
    } else {
        ortx_gemm_operand a = {q, 0, ints[9], 1, NULL, NULL};
        ortx_gemm_operand kt = {k, 0, 1, ints[10], NULL, NULL};  /* element (d, l) of K_h^T at k[l*k_row_stride + d] */
        ortx_sgemm(rows, L, D, &a, &kt, scores, L, &scaled, packing, 1);
    }
    for (int64_t r = 0; r < rows; r++) ortx_softmax_row_f32(scores + r * L, scores + r * L, L, 0);
    if (ints[18]) fake_quantize(scores, rows * L, job->probability_scale, (int)ints[18], (int32_t)ints[19]);
    if (job->bf16) {
        ortx_bgemm_operand p = {NULL, scores, L, 1, NULL, NULL, NULL};
        ortx_bgemm_operand vh = {NULL, v, ints[11], 1, NULL, NULL, NULL};
        ortx_bgemm(rows, Dv, L, &p, &vh, y, ints[12], &plain, packing, 1);
        return;
    }
    ortx_gemm_operand p = {scores, 0, L, 1, NULL, NULL};
    ortx_gemm_operand vh = {v, 0, ints[11], 1, NULL, NULL};
    ortx_sgemm(rows, Dv, L, &p, &vh, y, ints[12], &plain, packing, 1);
}

static void multi_head_attention(const int64_t *ints, const float *floats, void *const *buffers, int num_threads,
                                 int bf16) {
    int64_t batch = ints[0], heads = ints[1], S = ints[2], L = ints[3], D = ints[4], Dv = ints[5];
    int64_t sized = ints[17] < 1 ? 1 : ints[17];
    int64_t blocks = row_blocks(batch * heads, S, sized);
    int64_t block_rows = (S + blocks - 1) / blocks;
    attention_job job = {ints, floats[0], floats[1], buffers[0], buffers[1], buffers[2], buffers[3], buffers[4], blocks,
                         block_rows, slice_floats(block_rows, L, D, Dv), bf16};
    int threads = num_threads < 1 ? 1 : num_threads;
    if (threads > sized) threads = (int)sized;
    if ((double)batch * heads * S * L * (D + Dv) < ORTX_ATTENTION_PARALLEL_MIN) threads = 1;
    ortx_parallel_for(threads, batch * heads * blocks, attention_task, &job);
}

static void multi_head_attention_f32(const int64_t *ints, const float *floats, void *const *buffers,
                                     int num_threads) {
    multi_head_attention(ints, floats, buffers, num_threads, 0);
}

static void multi_head_attention_bf16(const int64_t *ints, const float *floats, void *const *buffers,
                                      int num_threads) {
    multi_head_attention(ints, floats, buffers, num_threads, 1);
}

static void multi_head_attention_sizes_f32(const int64_t *ints, const float *floats, void *const *buffers,
                                           int num_threads) {
    (void)floats;
    (void)num_threads;
    int64_t S = ints[2], L = ints[3], D = ints[4], Dv = ints[5], threads = ints[6] < 1 ? 1 : ints[6];
    int64_t blocks = row_blocks(ints[0] * ints[1], S, threads);
    int64_t block_rows = (S + blocks - 1) / blocks;
    int64_t *out = buffers[0];
    out[0] = threads * slice_floats(block_rows, L, D, Dv) * (int64_t)sizeof(float);
}

const ortx_kernel_entry ortx_family_attention[] = {
    {"multi_head_attention_f32", multi_head_attention_f32, ortx_multi_head_attention_f32_ref},
    {"multi_head_attention_bf16", multi_head_attention_bf16, ortx_multi_head_attention_bf16_ref},
    {"multi_head_attention_sizes_f32", multi_head_attention_sizes_f32, multi_head_attention_sizes_f32},
    {NULL, NULL, NULL},
};
