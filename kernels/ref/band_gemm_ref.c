/* Oracle of band_gemm_f32 (kernels/band_gemm.c): one output at a time, the panel's rows in order. */
#include <stdint.h>

#include "band_gemm.h"

void ortx_band_gemm_f32_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads) {
    (void)floats;
    (void)num_threads;
    const int64_t M = ints[0], N = ints[1], K = ints[2];
    const float *a = buffers[0], *values = buffers[1];
    const int64_t *panel = buffers[2];
    float *y = buffers[3];
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            const int64_t *band = panel + 3 * (n / ORTX_BAND_PANEL);
            float sum = 0.0f;
            for (int64_t i = 0; i < band[1]; i++)
                sum += a[m * K + band[0] + i] * values[(band[2] + i) * ORTX_BAND_PANEL + n % ORTX_BAND_PANEL];
            y[m * N + n] = sum;
        }
}
