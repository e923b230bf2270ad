/* Oracle for the gemm family: the textbook triple loop, one output element at a time, reading packed operands
 * through ortx_gemm_packed_index() (gemm.h) and applying the epilogue with the scalar definition. */
#include "../gemm.h"

static float operand_at(const float *data, int packed, int64_t row_stride, int64_t col_stride, int64_t rows,
                        int64_t depth, int64_t panel, int64_t row, int64_t k, int transposed) {
    /* A: (row=m, k); B: (row=n, k) in packed form but (k, n) with its strides when raw. */
    if (packed) return data[ortx_gemm_packed_index(row, k, rows, depth, panel)];
    return transposed ? data[k * row_stride + row * col_stride] : data[row * row_stride + k * col_stride];
}

/* Layout: see gemm_f32 in kernels/gemm.c. */
void ortx_gemm_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)num_threads;
    int64_t M = ints[0], N = ints[1], K = ints[2], batch = ints[3];
    const float *bias = buffers[4], *residual = buffers[5];
    float *Y = buffers[2];
    for (int64_t b = 0; b < batch; b++) {
        const float *A = (const float *)buffers[0] + ints[17 + b];
        const float *B = (const float *)buffers[1] + ints[17 + batch + b];
        ortx_gemm_epilogue epilogue = ortx_gemm_step_epilogue(ints, floats, bias, residual, b);
        for (int64_t m = 0; m < M; m++) {
            for (int64_t n = 0; n < N; n++) {
                float acc = 0.0f;
                for (int64_t k = 0; k < K; k++)
                    acc += operand_at(A, (int)ints[4], ints[5], ints[6], M, K, ORTX_GEMM_MR, m, k, 0) *
                           operand_at(B, (int)ints[7], ints[8], ints[9], N, K, ORTX_GEMM_NR, n, k, 1);
                Y[(b * M + m) * N + n] = ortx_gemm_epilogue_scalar(&epilogue, acc, m, n);
            }
        }
    }
}
