/* Internal interface of the int8 average pools (family "qpool", kernels/qpool.c; issue #5).
 *
 * Arithmetic (the one definition; ortx/quantization/integer.py's average_pool is its numpy twin and the tests'
 * oracle, kernels/npu_sim.c's POOL_AVG runs the same integer steps):
 *   acc = sum over the window's taps inside the input of (x - zx)           int32, exact
 *   d   = the divisor: those taps, or with count_include_pad the taps inside the padded extent (pool_internal.h's
 *         ortx_pool_taps, as onnxruntime counts them)
 *   (m0, shift) = table[d - count_base], the lowering's fixed-point form of sx / (sy * d):
 *         m0 * 2^-shift, m0 in [2^30, 2^31), 1 <= shift <= 62 (ortx/quantization/integer.py average_multipliers)
 *   y = clamp(round_half_even(acc * m0 / 2^shift), qmin - zy, qmax - zy) + zy      (int64 product, exact)
 *   A window with d = 0 (no tap anywhere) gives clamp(0) + zy, as DequantizeLinear -> fp32 0 -> QuantizeLinear.
 * Rounding is half to even on the exact product, QuantizeLinear's rule; against the float QDQ path (DQ, fp32 pool,
 * Q) outputs differ by at most 1 where the fp32 mean lands on the other side of a .5 boundary than the exact one.
 * The lowering keeps |acc| < 2^31 (d <= 2^23), so |acc * m0| < 2^62.
 * Inputs are read as unsigned bytes ux = x (uint8) or x ^ 0x80 (int8, = x + 128) with zu = zx (+ 128), so every
 * ISA sums unsigned bytes; (ux - zu) = (x - zx).
 *
 * qavgpool_i8: ints = pool_internal.h's 23 windowed-pool ints, then input_signed, output_signed, x_zero, y_zero,
 *   qmin, qmax, count_base, table_length (31); buffers = [x, table int32 [table_length][2] (m0, shift), y].
 * qglobal_avgpool_i8: ints = [channels (N*C), spatial, input_signed, output_signed, x_zero, y_zero, qmin, qmax,
 *   count_base, table_length]; buffers as qavgpool_i8 (the table holds d = spatial).
 */
#ifndef ORTX_QPOOL_H
#define ORTX_QPOOL_H

#include <stdint.h>

#include "pool_internal.h"

#define ORTX_QPOOL_INTS 8

typedef struct ortx_qpool_quant {
    int64_t input_signed, output_signed, x_zero, y_zero, qmin, qmax, count_base, table_length;
} ortx_qpool_quant;

static inline ortx_qpool_quant ortx_qpool_quant_read(const int64_t *ints) {
    ortx_qpool_quant q = {ints[0], ints[1], ints[2], ints[3], ints[4], ints[5], ints[6], ints[7]};
    return q;
}

/* The input zero point in the unsigned domain (zu above). */
static inline int64_t ortx_qpool_zero_u(const ortx_qpool_quant *q) { return q->x_zero + 128 * q->input_signed; }

/* clamp(round_half_even(acc * m0 / 2^shift), low, high); shift in [1, 62]. */
static inline int64_t ortx_qpool_round(int64_t acc, int64_t m0, int64_t shift, int64_t low, int64_t high) {
    int64_t product = acc * m0;
    int64_t quotient = product >> shift;                  /* floor (arithmetic shift) */
    int64_t remainder = product & ((1LL << shift) - 1);   /* product - quotient * 2^shift, in [0, 2^shift) */
    int64_t half = 1LL << (shift - 1);
    quotient += remainder > half || (remainder == half && (quotient & 1));
    return quotient < low ? low : quotient > high ? high : quotient;
}

/* One output value from its accumulator and divisor (the arithmetic above), stored as the output type. */
static inline void ortx_qpool_store(const ortx_qpool_quant *q, const int32_t *table, int64_t acc, int64_t divisor,
                                    void *y, int64_t index) {
    int64_t low = q->qmin - q->y_zero, high = q->qmax - q->y_zero, value = 0;
    if (divisor > 0) {
        const int32_t *entry = table + 2 * (divisor - q->count_base);
        value = ortx_qpool_round(acc, entry[0], entry[1], low, high);
    } else {
        value = 0 < low ? low : 0 > high ? high : 0;
    }
    value += q->y_zero;
    if (q->output_signed) ((int8_t *)y)[index] = (int8_t)value;
    else ((uint8_t *)y)[index] = (uint8_t)value;
}

/* One output row of a windowed pool: `rows` are the valid input rows (d and h taps inside the input), unsigned
 * bytes to be flipped by `flip` (0x80 for int8); column_sums (in_w int32) and accumulators (out_w int32) are
 * scratch. Writes out_w outputs at y[y_offset ...]. */
typedef void (*ortx_qpool_row_fn)(const uint8_t *const *rows, int64_t num_rows, int64_t padded_rows,
                                  const ortx_pool_params *p, const ortx_qpool_quant *q, const int32_t *table,
                                  int32_t *column_sums, int32_t *accumulators, void *y, int64_t y_offset);

/* Output columns [begin, end) from column sums, every tap bound checked (portable path and the vector paths'
 * edges). */
void ortx_qpool_columns(const int32_t *column_sums, int64_t num_rows, int64_t padded_rows, const ortx_pool_params *p,
                        const ortx_qpool_quant *q, const int32_t *table, void *y, int64_t y_offset, int64_t begin,
                        int64_t end);
void ortx_qpool_row_portable(const uint8_t *const *rows, int64_t num_rows, int64_t padded_rows,
                             const ortx_pool_params *p, const ortx_qpool_quant *q, const int32_t *table,
                             int32_t *column_sums, int32_t *accumulators, void *y, int64_t y_offset);
void ortx_qpool_row_avx2(const uint8_t *const *rows, int64_t num_rows, int64_t padded_rows,
                         const ortx_pool_params *p, const ortx_qpool_quant *q, const int32_t *table,
                         int32_t *column_sums, int32_t *accumulators, void *y, int64_t y_offset);
void ortx_qpool_row_avx512(const uint8_t *const *rows, int64_t num_rows, int64_t padded_rows,
                           const ortx_pool_params *p, const ortx_qpool_quant *q, const int32_t *table,
                           int32_t *column_sums, int32_t *accumulators, void *y, int64_t y_offset);
/* Sum of `count` unsigned bytes, each flipped by `flip` first. */
int64_t ortx_qpool_byte_sum_avx2(const uint8_t *x, int64_t count, uint8_t flip);
int64_t ortx_qpool_byte_sum_avx512(const uint8_t *x, int64_t count, uint8_t flip);

void ortx_qavgpool_i8_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);
void ortx_qglobal_avgpool_i8_ref(const int64_t *ints, const float *floats, void *const *buffers, int num_threads);

#endif
