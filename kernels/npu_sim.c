/* The NPU simulator: executes an ortx NPU command stream (format: docs/npu.md, ortx/npu/stream.py) and models its
 * cycles. It stands in for the silicon; a driver for a real NPU would consume the same stream.
 *
 * Algorithm:
 *   1. Check the header (magic, version, sizes, CRC-32 of the body) and every command's opcode and field count.
 *   2. Execute the commands in stream order on one SRAM (malloc'd per run) and the two DRAM regions (constants,
 *      read-only; work). Every SRAM/DRAM range a command touches is bounds-checked first.
 *   3. Time: each command goes to one of two engines, DMA (DMA_IN, DMA_IM2COL, DMA_OUT) or compute (MAC_TILE,
 *      REQUANT, VECTOR, POOL). Between two BARRIERs (a phase) the engines run concurrently, so a phase costs
 *      max(sum of its DMA cycles, sum of its compute cycles); the run costs the sum of its phases. This is what
 *      double buffering buys: the compiler loads tile k+1 in the phase that computes tile k.
 *   4. Hazards: within a phase, a DMA command and a compute command must not touch overlapping SRAM where one of
 *      them writes (that would be a race on silicon); the simulator rejects such a stream, naming both commands.
 * Cycle costs (NpuParams: R x C array, B DMA bytes/cycle, S DMA setup cycles):
 *   DMA of n bytes: S + ceil(n / B).  MAC_TILE (m, k, p): ceil(m / C) * ceil(k / R) passes of (p + 2R + C - 2):
 *   R cycles to load a weight tile, p activation columns streamed, R + C - 2 to fill and drain the pipeline.
 *   REQUANT (m x p), VECTOR (n), POOL and POOL_AVG (outputs x taps): ceil(elements / C) (a C-lane vector unit).
 * Arithmetic: ortx/quantization/integer.py's (kernels/qgemm.h): exact int32 accumulators, then the same fp32
 * operations in the same order as the CPU int8 kernels (fp-contract off), so outputs are bit-identical. POOL_AVG
 * is integer only (kernels/qpool.h: int32 window sums, a (m0, shift) table per divisor, round half to even).
 * Limits: phases are checked for hazards by bounding SRAM intervals (strided ranges are covered whole). */
#include "npu_sim.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPU_MAGIC "ORTXNPU"
#define NPU_VERSION 1
#define NPU_HEADER_BYTES 64
#define NPU_MAX_FIELDS 32
#define NPU_MAX_RANGES 6

enum { OP_DMA_IN = 1, OP_DMA_OUT, OP_DMA_IM2COL, OP_MAC_TILE, OP_REQUANT, OP_VECTOR, OP_POOL, OP_BARRIER,
       OP_POOL_AVG };
static const int field_counts[] = {0, 7, 7, 20, 12, 17, 19, 15, 0, 25};
static const char *const op_names[] = {"?", "DMA_IN", "DMA_OUT", "DMA_IM2COL", "MAC_TILE", "REQUANT", "VECTOR",
                                       "POOL", "BARRIER", "POOL_AVG"};
enum { KIND_U8 = 0, KIND_I8, KIND_F32, KIND_I32 };

typedef struct {
    int64_t rows, cols, sram_bytes, dma_bytes_per_cycle, dma_setup;
} npu_params;

typedef struct {
    int64_t lo, hi;  /* SRAM bytes [lo, hi) */
    int write;
    int64_t command;
} npu_range;

typedef struct {
    npu_params params;
    uint8_t *sram;
    const uint8_t *constants;
    int64_t constant_bytes;
    uint8_t *work;
    int64_t work_bytes;
    char *error;
    int64_t error_bytes;
    int64_t index;  /* the command being executed */
    const char *op_name;
    /* the current phase's SRAM ranges per engine (0 DMA, 1 compute) */
    npu_range *ranges[2];
    int64_t range_count[2], range_capacity[2];
} npu_state;

static int fail(npu_state *s, const char *format, ...) {
    int used = s->index >= 0 ?
               snprintf(s->error, (size_t)s->error_bytes, "NPU command %lld (%s): ", (long long)s->index, s->op_name) :
               snprintf(s->error, (size_t)s->error_bytes, "NPU stream: ");
    va_list args;
    va_start(args, format);
    if (used >= 0 && used < s->error_bytes) vsnprintf(s->error + used, (size_t)(s->error_bytes - used), format, args);
    va_end(args);
    return -1;
}

static uint32_t crc32_of(const uint8_t *data, int64_t length) {
    uint32_t crc = 0xFFFFFFFFu;
    for (int64_t i = 0; i < length; i++) {
        crc ^= data[i];
        for (int bit = 0; bit < 8; bit++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static uint64_t read_le(const uint8_t *p, int bytes) {
    uint64_t value = 0;
    for (int i = bytes - 1; i >= 0; i--) value = (value << 8) | p[i];
    return value;
}

static float bits_float(int64_t word) {
    uint32_t bits = (uint32_t)word;
    float value;
    memcpy(&value, &bits, 4);
    return value;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Sizes from a stream are bounded (NPU_FIELD_LIMIT) but their products may not fit int64: products and sums of
 * sizes saturate at NPU_HUGE, which no bounds check accepts. */
#define NPU_FIELD_LIMIT (1LL << 40)
#define NPU_HUGE (1LL << 60)

static int64_t mul(int64_t a, int64_t b) {
    __int128 product = (__int128)a * b;
    return product > NPU_HUGE ? NPU_HUGE : product < -NPU_HUGE ? -NPU_HUGE : (int64_t)product;
}

static int64_t add(int64_t a, int64_t b) {
    __int128 sum = (__int128)a + b;
    return sum > NPU_HUGE ? NPU_HUGE : sum < -NPU_HUGE ? -NPU_HUGE : (int64_t)sum;
}

/* Records an SRAM range of the current command on `engine` after checking bounds and the other engine's ranges. */
static int touch(npu_state *s, int engine, int64_t lo, int64_t bytes, int write, const char *what) {
    if (bytes <= 0) return 0;
    if (lo < 0 || add(lo, bytes) > s->params.sram_bytes)
        return fail(s, "%s [%lld, %lld) outside the SRAM (%lld bytes)", what, (long long)lo, (long long)(lo + bytes),
                    (long long)s->params.sram_bytes);
    int other = 1 - engine;
    for (int64_t i = 0; i < s->range_count[other]; i++) {
        const npu_range *r = &s->ranges[other][i];
        if (r->lo < lo + bytes && lo < r->hi && (r->write || write))
            return fail(s, "%s [%lld, %lld) races with command %lld's SRAM [%lld, %lld) in the same phase (no "
                        "BARRIER between them)", what, (long long)lo, (long long)(lo + bytes), (long long)r->command,
                        (long long)r->lo, (long long)r->hi);
    }
    if (s->range_count[engine] == s->range_capacity[engine]) {
        int64_t capacity = s->range_capacity[engine] ? 2 * s->range_capacity[engine] : 64;
        npu_range *grown = realloc(s->ranges[engine], (size_t)capacity * sizeof(npu_range));
        if (!grown) return fail(s, "out of memory");
        s->ranges[engine] = grown;
        s->range_capacity[engine] = capacity;
    }
    s->ranges[engine][s->range_count[engine]++] = (npu_range){lo, lo + bytes, write, s->index};
    return 0;
}

static int dram_range(npu_state *s, int64_t region, int64_t offset, int64_t bytes, int write, uint8_t **out) {
    if (region != 0 && region != 1) return fail(s, "region %lld (0 constants or 1 work)", (long long)region);
    if (region == 0 && write) return fail(s, "writes the read-only constants region");
    int64_t size = region == 0 ? s->constant_bytes : s->work_bytes;
    if (offset < 0 || bytes < 0 || add(offset, bytes) > size)
        return fail(s, "DRAM %s [%lld, %lld) outside the region (%lld bytes)", region == 0 ? "constants" : "work",
                    (long long)offset, (long long)(offset + bytes), (long long)size);
    *out = region == 0 ? (uint8_t *)s->constants + offset : s->work + offset;
    return 0;
}

/* 2-D extent of rows x row_bytes at a stride: the bytes from the first to the last. */
static int64_t extent(int64_t rows, int64_t row_bytes, int64_t stride) {
    return rows <= 0 || row_bytes <= 0 ? 0 : add(mul(rows - 1, stride), row_bytes);
}

static int check_positive(npu_state *s, const int64_t *values, int count, const char *names) {
    for (int i = 0; i < count; i++)
        if (values[i] <= 0) return fail(s, "sizes (%s) must be positive, field %d is %lld", names, i,
                                        (long long)values[i]);
    return 0;
}

static int dma(npu_state *s, const int64_t *f, int out, int64_t *cycles, int64_t *bytes) {
    int64_t region = f[0], dram = f[1], sram = f[2], rows = f[3], row_bytes = f[4], dram_stride = f[5],
            sram_stride = f[6];
    if (check_positive(s, &f[3], 2, "rows, row_bytes")) return -1;
    if (dram_stride < row_bytes || sram_stride < row_bytes)
        return fail(s, "strides (dram %lld, sram %lld) below row_bytes %lld", (long long)dram_stride,
                    (long long)sram_stride, (long long)row_bytes);
    uint8_t *memory;
    if (dram_range(s, region, dram, extent(rows, row_bytes, dram_stride), out, &memory)) return -1;
    if (touch(s, 0, sram, extent(rows, row_bytes, sram_stride), !out, out ? "DMA_OUT source" : "DMA_IN target"))
        return -1;
    for (int64_t r = 0; r < rows; r++) {
        if (out) memcpy(memory + r * dram_stride, s->sram + sram + r * sram_stride, (size_t)row_bytes);
        else memcpy(s->sram + sram + r * sram_stride, memory + r * dram_stride, (size_t)row_bytes);
    }
    *bytes = rows * row_bytes;
    *cycles = s->params.dma_setup + ceil_div(*bytes, s->params.dma_bytes_per_cycle);
    return 0;
}

/* SRAM tile [p_count][k_count] (k contiguous) of the im2col matrix of a [channels][height][width] byte tensor:
 * k = (c * KH + kh) * KW + kw, p = oh * out_width + ow; taps in the padding read pad_value. */
static int im2col(npu_state *s, const int64_t *f, int64_t *cycles, int64_t *bytes) {
    int64_t region = f[0], dram = f[1], channels = f[2], height = f[3], width = f[4], kh = f[5], kw = f[6];
    int64_t sh = f[7], sw = f[8], pad_top = f[9], pad_left = f[10], dh = f[11], dw = f[12], out_width = f[13];
    int64_t k0 = f[14], k_count = f[15], p0 = f[16], p_count = f[17], sram = f[18];
    uint8_t pad = (uint8_t)f[19];
    if (check_positive(s, &f[2], 7, "channels .. stride_w") || check_positive(s, &f[11], 3, "dilations, out_width"))
        return -1;
    if (pad_top < 0 || pad_left < 0) return fail(s, "negative padding");
    if (k0 < 0 || k_count <= 0 || k0 + k_count > channels * kh * kw || p0 < 0 || p_count <= 0)
        return fail(s, "k range [%lld, +%lld) outside %lld taps or empty pixel range", (long long)k0,
                    (long long)k_count, (long long)(channels * kh * kw));
    uint8_t *tensor;
    if (dram_range(s, region, dram, mul(mul(channels, height), width), 0, &tensor)) return -1;
    if (touch(s, 0, sram, mul(k_count, p_count), 1, "DMA_IM2COL target")) return -1;
    uint8_t *out = s->sram + sram;
    for (int64_t j = 0; j < p_count; j++) {
        int64_t pixel = p0 + j, oh = pixel / out_width, ow = pixel % out_width;
        for (int64_t t = 0; t < k_count; t++) {
            int64_t k = k0 + t, c = k / (kh * kw), tap = k % (kh * kw);
            int64_t y = oh * sh - pad_top + (tap / kw) * dh, x = ow * sw - pad_left + (tap % kw) * dw;
            out[j * k_count + t] = y >= 0 && y < height && x >= 0 && x < width ?
                                   tensor[(c * height + y) * width + x] : pad;
        }
    }
    *bytes = k_count * p_count;
    *cycles = s->params.dma_setup + ceil_div(*bytes, s->params.dma_bytes_per_cycle);
    return 0;
}

static int mac_tile(npu_state *s, const int64_t *f, int64_t *cycles, int64_t *macs) {
    int64_t weights = f[0], weight_stride = f[1], acts = f[2], act_stride = f[3], acc = f[4], acc_stride = f[5];
    int64_t m = f[6], k = f[7], p = f[8], accumulate = f[9], kind = f[10], zero = f[11];
    if (check_positive(s, &f[6], 3, "m, k, p")) return -1;
    if (kind != KIND_U8 && kind != KIND_I8) return fail(s, "activation_kind %lld (uint8 or int8)", (long long)kind);
    if (weight_stride < k || act_stride < k || acc_stride < p) return fail(s, "a stride below its row length");
    if (k > 65536) return fail(s, "k %lld above 65536 (the int32 partial sums could overflow)", (long long)k);
    if (touch(s, 1, weights, extent(m, k, weight_stride), 0, "MAC_TILE weights") ||
        touch(s, 1, acts, extent(p, k, act_stride), 0, "MAC_TILE activations") ||
        touch(s, 1, acc, mul(4, extent(m, p, acc_stride)), 1, "MAC_TILE accumulators")) return -1;
    const int8_t *w = (const int8_t *)(s->sram + weights);
    int32_t *out = (int32_t *)(s->sram + acc);
    for (int64_t j = 0; j < p; j++) {
        const uint8_t *xu = s->sram + acts + j * act_stride;
        const int8_t *xs = (const int8_t *)xu;
        for (int64_t i = 0; i < m; i++) {
            const int8_t *row = w + i * weight_stride;
            int32_t sum = 0;
            if (kind == KIND_U8)
                for (int64_t t = 0; t < k; t++) sum += ((int32_t)xu[t] - (int32_t)zero) * (int32_t)row[t];
            else
                for (int64_t t = 0; t < k; t++) sum += ((int32_t)xs[t] - (int32_t)zero) * (int32_t)row[t];
            int32_t *cell = out + i * acc_stride + j;
            int64_t total = (int64_t)sum + (accumulate ? (int64_t)*cell : 0);
            if (total > INT32_MAX || total < INT32_MIN) return fail(s, "int32 accumulator overflow");
            *cell = (int32_t)total;
        }
    }
    *macs = m * k * p;
    *cycles = ceil_div(m, s->params.cols) * ceil_div(k, s->params.rows) *
              (p + 2 * s->params.rows + s->params.cols - 2);
    return 0;
}

__attribute__((optimize("fp-contract=off"))) static float activate(int64_t code, float x, float p0, float p1) {
    if (code == 1) return x > 0.0f ? x : 0.0f;
    if (code == 3) return x < p0 ? p0 : (x > p1 ? p1 : x);
    return x;
}

static int kind_bytes(int64_t kind) { return kind == KIND_F32 || kind == KIND_I32 ? 4 : 1; }

static void store_quantized(uint8_t *out, int64_t kind, int32_t q) {
    if (kind == KIND_U8) *out = (uint8_t)q;
    else *(int8_t *)out = (int8_t)q;
}

/* qgemm.h's epilogue: y = clamp(rint(float(acc + bias) * multiplier), qmin - zy, qmax - zy) + zy, or the float
 * output act(float(acc + bias) * multiplier (+ residual)). */
__attribute__((optimize("fp-contract=off"))) static int requant(npu_state *s, const int64_t *f, int64_t *cycles) {
    int64_t acc = f[0], acc_stride = f[1], m = f[2], p = f[3], bias = f[4], multiplier = f[5], output = f[6];
    int64_t channel_stride = f[7], pixel_stride = f[8], kind = f[9], zero = f[10], qmin = f[11], qmax = f[12];
    int64_t residual = f[13], activation = f[14];
    float p0 = bits_float(f[15]), p1 = bits_float(f[16]);
    if (check_positive(s, &f[2], 2, "m, p")) return -1;
    if (kind < KIND_U8 || kind > KIND_F32) return fail(s, "output_kind %lld", (long long)kind);
    if (kind != KIND_F32 && residual >= 0) return fail(s, "a residual needs a float32 output");
    if (activation != 0 && activation != 1 && activation != 3) return fail(s, "activation %lld", (long long)activation);
    if (channel_stride <= 0 || pixel_stride <= 0) return fail(s, "output strides must be positive");
    int64_t elements = add(add(mul(m - 1, channel_stride), mul(p - 1, pixel_stride)), 1);
    if (touch(s, 1, acc, mul(4, extent(m, p, acc_stride)), 0, "REQUANT accumulators") ||
        touch(s, 1, bias, mul(4, m), 0, "REQUANT bias") ||
        touch(s, 1, multiplier, mul(4, m), 0, "REQUANT multiplier") ||
        touch(s, 1, output, mul(elements, kind_bytes(kind)), 1, "REQUANT output") ||
        (residual >= 0 && touch(s, 1, residual, mul(4, elements), 0, "REQUANT residual"))) return -1;
    const int32_t *a = (const int32_t *)(s->sram + acc), *b = (const int32_t *)(s->sram + bias);
    const float *scale = (const float *)(s->sram + multiplier);
    const float *r = residual >= 0 ? (const float *)(s->sram + residual) : NULL;
    float low = (float)(qmin - zero), high = (float)(qmax - zero);
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < p; j++) {
            int64_t total = (int64_t)a[i * acc_stride + j] + b[i];
            if (total > INT32_MAX || total < INT32_MIN) return fail(s, "int32 overflow adding the bias");
            float value = (float)(int32_t)total * scale[i];
            int64_t index = i * channel_stride + j * pixel_stride;
            if (kind == KIND_F32) {
                if (r) value += r[index];
                ((float *)(s->sram + output))[index] = activate(activation, value, p0, p1);
                continue;
            }
            value = value < low ? low : (value > high ? high : value);
            store_quantized(s->sram + output + index, kind, (int32_t)lrintf(value) + (int32_t)zero);
        }
    }
    *cycles = ceil_div(m * p, s->params.cols);
    return 0;
}

__attribute__((optimize("fp-contract=off"))) static float load_element(const uint8_t *base, int64_t kind,
                                                                      int64_t index, float scale, int64_t zero) {
    if (kind == KIND_F32) return ((const float *)base)[index];
    int32_t q = kind == KIND_U8 ? (int32_t)base[index] : (int32_t)((const int8_t *)base)[index];
    return (float)(q - (int32_t)zero) * scale;  /* DequantizeLinear as kernels/qgemm.c computes it */
}

/* out = quantize(act(a [+ b])): operands are dequantized when int8/uint8, the output quantized as QuantizeLinear
 * (divide, clamp, round half to even) when its kind is int8/uint8. */
__attribute__((optimize("fp-contract=off"))) static int vector(npu_state *s, const int64_t *f, int64_t *cycles) {
    int64_t op = f[0], count = f[1], a = f[2], a_kind = f[3], a_zero = f[5], b = f[6], b_kind = f[7], b_zero = f[9];
    int64_t output = f[10], out_kind = f[11], out_zero = f[13], qmin = f[14], qmax = f[15], activation = f[16];
    float a_scale = bits_float(f[4]), b_scale = bits_float(f[8]), out_scale = bits_float(f[12]);
    float p0 = bits_float(f[17]), p1 = bits_float(f[18]);
    if (op != 0 && op != 1) return fail(s, "op %lld (0 copy, 1 add)", (long long)op);
    if (count <= 0) return fail(s, "count %lld", (long long)count);
    if (a_kind < 0 || a_kind > KIND_F32 || b_kind < 0 || b_kind > KIND_F32 || out_kind < 0 || out_kind > KIND_F32)
        return fail(s, "operand kinds must be uint8, int8 or float32");
    if (activation != 0 && activation != 1 && activation != 3) return fail(s, "activation %lld", (long long)activation);
    if (touch(s, 1, a, mul(count, kind_bytes(a_kind)), 0, "VECTOR a") ||
        (op == 1 && touch(s, 1, b, mul(count, kind_bytes(b_kind)), 0, "VECTOR b")) ||
        touch(s, 1, output, mul(count, kind_bytes(out_kind)), 1, "VECTOR output")) return -1;
    float low = (float)(qmin - out_zero), high = (float)(qmax - out_zero);
    for (int64_t i = 0; i < count; i++) {
        float value = load_element(s->sram + a, a_kind, i, a_scale, a_zero);
        if (op == 1) value = value + load_element(s->sram + b, b_kind, i, b_scale, b_zero);
        value = activate(activation, value, p0, p1);
        if (out_kind == KIND_F32) {
            ((float *)(s->sram + output))[i] = value;
            continue;
        }
        value = value / out_scale;
        value = value >= low ? value : low;  /* NaN -> low, as kernels/qgemm.c's quantize_linear_f32 */
        value = value <= high ? value : high;
        store_quantized(s->sram + output + i, out_kind, (int32_t)lrintf(value) + (int32_t)out_zero);
    }
    *cycles = ceil_div(count, s->params.cols);
    return 0;
}

static int pool(npu_state *s, const int64_t *f, int64_t *cycles) {
    int64_t mode = f[0], kind = f[1], input = f[2], channels = f[3], height = f[4], width = f[5], kh = f[6];
    int64_t kw = f[7], sh = f[8], sw = f[9], pad_top = f[10], pad_left = f[11], oh_count = f[12], ow_count = f[13];
    int64_t output = f[14];
    if (mode != 0) return fail(s, "pool mode %lld (0 max)", (long long)mode);
    if (kind < 0 || kind > KIND_F32) return fail(s, "kind %lld", (long long)kind);
    if (check_positive(s, &f[3], 7, "channels .. stride_w") || check_positive(s, &f[12], 2, "out sizes")) return -1;
    if (pad_top < 0 || pad_left < 0) return fail(s, "negative padding");
    if (kh > 65535 || kw > 65535) return fail(s, "a %lldx%lld window (at most 65535 per side)", (long long)kh,
                                              (long long)kw);
    int bytes = kind_bytes(kind);
    if (touch(s, 1, input, mul(mul(mul(channels, height), width), bytes), 0, "POOL input") ||
        touch(s, 1, output, mul(mul(mul(channels, oh_count), ow_count), bytes), 1, "POOL output")) return -1;
    for (int64_t c = 0; c < channels; c++)
        for (int64_t oh = 0; oh < oh_count; oh++)
            for (int64_t ow = 0; ow < ow_count; ow++) {
                float best_f = -INFINITY;
                int32_t best_q = INT32_MIN;
                for (int64_t i = 0; i < kh; i++)
                    for (int64_t j = 0; j < kw; j++) {
                        int64_t y = oh * sh - pad_top + i, x = ow * sw - pad_left + j;
                        if (y < 0 || y >= height || x < 0 || x >= width) continue;  /* padding never wins */
                        int64_t index = (c * height + y) * width + x;
                        if (kind == KIND_F32) {
                            float v = ((const float *)(s->sram + input))[index];
                            best_f = v > best_f ? v : best_f;
                        } else {
                            int32_t v = kind == KIND_U8 ? s->sram[input + index] :
                                        ((const int8_t *)(s->sram + input))[index];
                            best_q = v > best_q ? v : best_q;
                        }
                    }
                int64_t index = (c * oh_count + oh) * ow_count + ow;
                if (kind == KIND_F32) ((float *)(s->sram + output))[index] = best_f;
                else store_quantized(s->sram + output + index, kind, best_q);
            }
    *cycles = ceil_div(mul(mul(channels * oh_count * ow_count, kh), kw), s->params.cols);
    return 0;
}

/* POOL_AVG: kernels/qpool.h's int8 average over whole channel planes in SRAM: acc = sum of (x - zx) over the taps
 * inside the plane, divisor = those taps (or, count_include_pad, the taps inside the padded extent), (m0, shift) =
 * table[divisor - count_base] (int32 pairs in SRAM), y = clamp(round_half_even(acc * m0 / 2^shift)) + zy. */
static int pool_avg(npu_state *s, const int64_t *f, int64_t *cycles) {
    int64_t input = f[0], kind = f[1], channels = f[2], height = f[3], width = f[4], kh = f[5], kw = f[6];
    int64_t sh = f[7], sw = f[8], pad_top = f[9], pad_left = f[10], pad_bottom = f[11], pad_right = f[12];
    int64_t include_pad = f[13], oh_count = f[14], ow_count = f[15], zero_x = f[16], output = f[17];
    int64_t out_kind = f[18], zero_y = f[19], qmin = f[20], qmax = f[21], table = f[22], base = f[23];
    int64_t table_length = f[24];
    if (kind != KIND_U8 && kind != KIND_I8) return fail(s, "input_kind %lld (uint8 or int8)", (long long)kind);
    if (out_kind != KIND_U8 && out_kind != KIND_I8) return fail(s, "output_kind %lld (uint8 or int8)",
                                                                (long long)out_kind);
    if (check_positive(s, &f[2], 7, "channels .. stride_w") || check_positive(s, &f[14], 2, "out sizes")) return -1;
    if (pad_top < 0 || pad_left < 0 || pad_bottom < 0 || pad_right < 0) return fail(s, "negative padding");
    if (kh > 65535 || kw > 65535) return fail(s, "a %lldx%lld window (at most 65535 per side)", (long long)kh,
                                              (long long)kw);
    if (mul(kh, kw) > (1LL << 23)) return fail(s, "a window of %lld taps (at most 2^23: int32 sums)",
                                               (long long)mul(kh, kw));
    if (base < 1 || table_length < 1) return fail(s, "table count_base %lld, length %lld", (long long)base,
                                                  (long long)table_length);
    if (touch(s, 1, input, mul(mul(channels, height), width), 0, "POOL_AVG input") ||
        touch(s, 1, output, mul(mul(channels, oh_count), ow_count), 1, "POOL_AVG output") ||
        touch(s, 1, table, mul(8, table_length), 0, "POOL_AVG table")) return -1;
    const int32_t *entries = (const int32_t *)(s->sram + table);
    for (int64_t i = 0; i < table_length; i++)
        if (entries[2 * i + 1] < 1 || entries[2 * i + 1] > 62 || entries[2 * i] < 0)
            return fail(s, "table entry %lld: m0 %d, shift %d (shift 1..62, m0 >= 0)", (long long)i,
                        entries[2 * i], entries[2 * i + 1]);
    int64_t low = qmin - zero_y, high = qmax - zero_y;
    for (int64_t c = 0; c < channels; c++)
        for (int64_t oh = 0; oh < oh_count; oh++)
            for (int64_t ow = 0; ow < ow_count; ow++) {
                int64_t acc = 0, taps = 0, padded = 0;
                for (int64_t i = 0; i < kh; i++)
                    for (int64_t j = 0; j < kw; j++) {
                        int64_t y = oh * sh - pad_top + i, x = ow * sw - pad_left + j;
                        padded += y < height + pad_bottom && x < width + pad_right;
                        if (y < 0 || y >= height || x < 0 || x >= width) continue;
                        int64_t index = (c * height + y) * width + x;
                        int32_t v = kind == KIND_U8 ? s->sram[input + index] :
                                    ((const int8_t *)(s->sram + input))[index];
                        acc += v - zero_x;
                        taps++;
                    }
                int64_t divisor = include_pad ? padded : taps, value = 0;
                if (divisor > 0) {
                    if (divisor < base || divisor >= base + table_length)
                        return fail(s, "divisor %lld outside the table [%lld, %lld)", (long long)divisor,
                                    (long long)base, (long long)(base + table_length));
                    const int32_t *entry = entries + 2 * (divisor - base);
                    int64_t product = acc * entry[0], shift = entry[1];
                    int64_t quotient = product >> shift, remainder = product & ((1LL << shift) - 1);
                    int64_t half = 1LL << (shift - 1);
                    quotient += remainder > half || (remainder == half && (quotient & 1));
                    value = quotient;
                }
                value = value < low ? low : value > high ? high : value;
                store_quantized(s->sram + output + (c * oh_count + oh) * ow_count + ow, out_kind,
                                (int32_t)(value + zero_y));
            }
    *cycles = ceil_div(mul(mul(channels * oh_count * ow_count, kh), kw), s->params.cols);
    return 0;
}

static int run_commands(npu_state *s, const uint8_t *body, int64_t body_bytes, int64_t count, int64_t *stats,
                        int64_t *timeline) {
    int64_t offset = 0, phase_dma = 0, phase_compute = 0, phase_start = 0;
    int64_t fields[NPU_MAX_FIELDS];
    for (s->index = 0; s->index < count; s->index++) {
        if (offset + 4 > body_bytes) return fail(s, "stream truncated");
        int op = (int)read_le(body + offset, 2), words = (int)read_le(body + offset + 2, 2);
        if (op < OP_DMA_IN || op > OP_POOL_AVG) return fail(s, "unknown opcode %d", op);
        if (words != field_counts[op]) return fail(s, "%s with %d fields, expected %d", op_names[op], words,
                                                   field_counts[op]);
        s->op_name = op_names[op];
        offset += 4;
        if (offset + 8 * (int64_t)words > body_bytes) return fail(s, "stream truncated inside %s", op_names[op]);
        for (int i = 0; i < words; i++) {
            fields[i] = (int64_t)read_le(body + offset + 8 * i, 8);
            if (fields[i] >= NPU_FIELD_LIMIT || fields[i] <= -NPU_FIELD_LIMIT)
                return fail(s, "field %d is %lld, beyond +-2^40", i, (long long)fields[i]);
        }
        offset += 8 * (int64_t)words;
        int64_t cycles = 0, bytes = 0, macs = 0;
        int status = 0;
        switch (op) {
            case OP_DMA_IN: status = dma(s, fields, 0, &cycles, &bytes); break;
            case OP_DMA_OUT: status = dma(s, fields, 1, &cycles, &bytes); break;
            case OP_DMA_IM2COL: status = im2col(s, fields, &cycles, &bytes); break;
            case OP_MAC_TILE: status = mac_tile(s, fields, &cycles, &macs); break;
            case OP_REQUANT: status = requant(s, fields, &cycles); break;
            case OP_VECTOR: status = vector(s, fields, &cycles); break;
            case OP_POOL: status = pool(s, fields, &cycles); break;
            case OP_POOL_AVG: status = pool_avg(s, fields, &cycles); break;
            default: break;
        }
        if (status) return -1;
        if (op <= OP_DMA_IM2COL) {
            phase_dma += cycles;
            stats[ORTX_NPU_DMA_CYCLES] += cycles;
            stats[ORTX_NPU_DMA_BYTES] += bytes;
        } else if (op != OP_BARRIER) {
            phase_compute += cycles;
            stats[ORTX_NPU_COMPUTE_CYCLES] += cycles;
            if (op == OP_MAC_TILE) stats[ORTX_NPU_MAC_CYCLES] += cycles;
            stats[ORTX_NPU_MACS] += macs;
        }
        if (op == OP_BARRIER || s->index == count - 1) {
            stats[ORTX_NPU_CYCLES] += phase_dma > phase_compute ? phase_dma : phase_compute;
            stats[ORTX_NPU_PHASES] += 1;
            phase_dma = phase_compute = 0;
            s->range_count[0] = s->range_count[1] = 0;
            if (timeline)
                for (int64_t i = phase_start; i <= s->index; i++) timeline[i] = stats[ORTX_NPU_CYCLES];
            phase_start = s->index + 1;
        }
    }
    if (offset != body_bytes) return fail(s, "%lld bytes after the last command", (long long)(body_bytes - offset));
    return 0;
}

int ortx_npu_simulate(const uint8_t *stream, int64_t length, const uint8_t *constants, int64_t constant_bytes,
                      uint8_t *work, int64_t work_bytes, int64_t *stats, int64_t *timeline, char *error,
                      int64_t error_bytes) {
    npu_state s;
    memset(&s, 0, sizeof(s));
    s.error = error;
    s.error_bytes = error_bytes;
    s.index = -1;
    s.op_name = "";
    for (int i = 0; i < ORTX_NPU_STATS; i++) stats[i] = 0;
    if (length < NPU_HEADER_BYTES) return fail(&s, "stream of %lld bytes, shorter than the header",
                                               (long long)length);
    if (memcmp(stream, NPU_MAGIC, 8) != 0) return fail(&s, "bad magic");
    if (read_le(stream + 8, 2) != NPU_VERSION) return fail(&s, "version %d, expected %d",
                                                          (int)read_le(stream + 8, 2), NPU_VERSION);
    if (read_le(stream + 10, 2) != NPU_HEADER_BYTES) return fail(&s, "header size");
    int64_t count = (int64_t)read_le(stream + 12, 4);
    s.params.rows = (int64_t)read_le(stream + 16, 2);
    s.params.cols = (int64_t)read_le(stream + 18, 2);
    s.params.sram_bytes = (int64_t)read_le(stream + 20, 4);
    s.params.dma_bytes_per_cycle = (int64_t)read_le(stream + 24, 4);
    s.params.dma_setup = (int64_t)read_le(stream + 28, 4);
    int64_t want_constants = (int64_t)read_le(stream + 40, 8), want_work = (int64_t)read_le(stream + 48, 8);
    int64_t body_bytes = (int64_t)read_le(stream + 56, 4);
    uint32_t crc = (uint32_t)read_le(stream + 60, 4);
    if (NPU_HEADER_BYTES + body_bytes != length) return fail(&s, "stream truncated or padded");
    if (crc32_of(stream + NPU_HEADER_BYTES, body_bytes) != crc) return fail(&s, "body CRC-32 mismatch (corrupt)");
    if (s.params.rows <= 0 || s.params.cols <= 0 || s.params.sram_bytes <= 0 || s.params.dma_bytes_per_cycle <= 0)
        return fail(&s, "zero array, SRAM or DMA size");
    if (want_constants > constant_bytes || want_work > work_bytes)
        return fail(&s, "the stream needs %lld constant and %lld work bytes, given %lld and %lld",
                    (long long)want_constants, (long long)want_work, (long long)constant_bytes,
                    (long long)work_bytes);
    s.constants = constants;
    s.constant_bytes = constant_bytes;
    s.work = work;
    s.work_bytes = work_bytes;
    s.sram = calloc((size_t)s.params.sram_bytes, 1);
    if (!s.sram) return fail(&s, "cannot allocate %lld bytes of SRAM", (long long)s.params.sram_bytes);
    int status = run_commands(&s, stream + NPU_HEADER_BYTES, body_bytes, count, stats, timeline);
    free(s.sram);
    free(s.ranges[0]);
    free(s.ranges[1]);
    return status;
}
