"""The integer arithmetic of OrtxEP's int8 steps, in numpy: the oracle of kernels/qgemm.c and its definition.

Conv / Gemm / MatMul on quantized tensors (per-tensor activations, per-channel symmetric int8 weights):

    acc[m, p] = sum_k (qx[k, p] - zx) * qw[m, k] + bias_int32[m]              int32, exact
    multiplier[m] = fp32(fp32(sx * sw[m]) / sy)                                 one fp32 per output channel
    y[m, p] = clamp(round_half_even(fp32(acc) * multiplier[m]), qmin - zy, qmax - zy) + zy

fp32(acc) rounds to nearest even (exact below 2^24), the product is one fp32 multiply, the rounding is the
current (nearest-even) mode: the representation ORT's MLAS uses for QLinearConv (QDQ models run by ORT CPU are
fused into it). [qmin, qmax] is the output type's range, narrowed by a fused Relu (qmin = max(qmin, zy)) or Clip
(its bounds quantized with y's scale and zero point). A float output (a Conv whose result feeds a float op, e.g.
the residual Add) is fp32(acc) * fp32(sx * sw[m]) (+ residual, then the activation). Against the float QDQ path
(DQ -> fp32 Conv -> Q) the only difference is where the fp32 rounding happens, so outputs agree within 1 LSB
wherever a value is not within float rounding of a .5 boundary (tests/ep/test_qdq.py measures the share).

AveragePool / GlobalAveragePool on quantized tensors (kernels/qpool.h, the NPU's POOL_AVG) are fixed point:

    acc = sum over the window's taps inside the input of (qx - zx)              int32, exact
    d   = those taps, or with count_include_pad the taps inside the padded extent (onnxruntime's divisor)
    sx / (sy * d) ~= m0 * 2^-shift                                              average_multipliers: m0 in
                                                                                [2^30, 2^31), 1 <= shift <= 62
    y = clamp(round_half_even(acc * m0 / 2^shift), qmin - zy, qmax - zy) + zy    int64 product, exact

The ratio is the double sx / (sy * d) (sy * d is exact in a double), its mantissa rounded to 31 bits: a relative
error below 2^-31, so against the exact rational mean only values within 2^-31 of a .5 boundary can move.
"""
from __future__ import annotations

import math

import numpy as np

INT_RANGES = {"uint8": (0, 255), "int8": (-128, 127)}


def requantization_multiplier(x_scale, w_scale, y_scale=None) -> np.ndarray:
    """fp32 (x_scale * w_scale[m]) / y_scale per channel, in fp32 steps (no y_scale: the float-output scale)."""
    product = np.float32(x_scale) * np.asarray(w_scale, dtype=np.float32).reshape(-1)
    if y_scale is None:
        return product.astype(np.float32)
    return (product / np.float32(y_scale)).astype(np.float32)


def output_range(dtype: str, zero_point: int, y_scale: float, activation: str = "", bounds=(None, None)
                 ) -> tuple[int, int]:
    """[qmin, qmax] of the output: the type's range, narrowed by a fused Relu or Clip(low, high)."""
    low, high = INT_RANGES[dtype]
    if activation == "Relu":
        low = max(low, int(zero_point))
    elif activation == "Clip":
        for index, bound in enumerate(bounds):
            if bound is None:
                continue
            quantized = int(quantize(np.array([bound], np.float32), y_scale, zero_point, dtype)[0])
            low, high = (max(low, quantized), high) if index == 0 else (low, min(high, quantized))
    return low, high


def quantize(x: np.ndarray, scale: float, zero_point: int, dtype: str) -> np.ndarray:
    """QuantizeLinear as ORT's MLAS computes it: fp32 x / scale, clamp, round half to even, + zero point."""
    low, high = INT_RANGES[dtype]
    value = np.asarray(x, np.float32) / np.float32(scale)
    value = np.clip(value, np.float32(low - zero_point), np.float32(high - zero_point))
    return (np.rint(value).astype(np.int32) + zero_point).astype(dtype)


def dequantize(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    return ((np.asarray(q).astype(np.int32) - zero_point).astype(np.float32) * np.float32(scale)).astype(np.float32)


def im2col(qx: np.ndarray, zero_point: int, kernel, strides, pads, dilations) -> np.ndarray:
    """[N, C, H, W] -> [N, C*KH*KW, OH*OW] int64, padded taps = zero_point (pads: top, left, bottom, right)."""
    n, c, h, w = qx.shape
    kh, kw = kernel
    padded = np.full((n, c, h + pads[0] + pads[2], w + pads[1] + pads[3]), zero_point, np.int64)
    padded[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + w] = qx
    oh = (h + pads[0] + pads[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    columns = np.empty((n, c, kh, kw, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            top, left = i * dilations[0], j * dilations[1]
            columns[:, :, i, j] = padded[:, :, top:top + strides[0] * (oh - 1) + 1:strides[0],
                                         left:left + strides[1] * (ow - 1) + 1:strides[1]]
    return columns.reshape(n, c * kh * kw, oh * ow), (oh, ow)


def requantize(acc: np.ndarray, multiplier: np.ndarray, zero_point: int, qmin: int, qmax: int, dtype: str
               ) -> np.ndarray:
    """acc [..., M, P] int -> the quantized output; multiplier per M."""
    value = acc.astype(np.float32) * multiplier.reshape(-1, 1)
    value = np.clip(value, np.float32(qmin - zero_point), np.float32(qmax - zero_point))
    return (np.rint(value).astype(np.int32) + zero_point).astype(dtype)


def conv_accumulators(qx, zx, qw, bias, *, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
    """int64 [N, M, OH*OW] accumulators of a quantized 2-D conv, and (OH, OW)."""
    n, c = qx.shape[:2]
    m = qw.shape[0]
    columns, out_size = im2col(qx.astype(np.int64), zx, qw.shape[2:], strides, pads, dilations)
    cg, mg = c // group, m // group
    acc = np.empty((n, m, columns.shape[2]), np.int64)
    k = cg * qw.shape[2] * qw.shape[3]
    for g in range(group):
        weights = qw[g * mg:(g + 1) * mg].reshape(mg, k).astype(np.int64)
        acc[:, g * mg:(g + 1) * mg] = np.einsum("mk,nkp->nmp", weights, columns[:, g * k:(g + 1) * k] - zx)
    if bias is not None:
        acc += np.asarray(bias, np.int64).reshape(1, m, 1)
    if np.abs(acc).max(initial=0) >= 2 ** 31:
        raise OverflowError("int32 accumulator overflow")
    return acc, out_size


# Largest AveragePool divisor the int8 kernels take: |acc| <= 255 * d < 2^31 and |acc * m0| < 2^62.
MAX_AVERAGE_DIVISOR = 1 << 23


def average_multipliers(x_scale, y_scale, divisors) -> np.ndarray:
    """int32 [len(divisors), 2]: (m0, shift) with m0 * 2^-shift ~= sx / (sy * d) per divisor d (module docstring).
    ValueError when a ratio is outside [2^-32, 2^30) (shift outside [1, 62]) or d is outside [1, 2^23]."""
    x_scale, y_scale = float(np.float32(x_scale)), float(np.float32(y_scale))
    table = np.empty((len(divisors), 2), np.int32)
    for row, divisor in enumerate(divisors):
        divisor = int(divisor)
        if not 1 <= divisor <= MAX_AVERAGE_DIVISOR:
            raise ValueError(f"average divisor {divisor} outside [1, {MAX_AVERAGE_DIVISOR}]")
        mantissa, exponent = math.frexp(x_scale / (y_scale * divisor))
        m0 = round(mantissa * 2 ** 31)  # exact product; round() is half to even
        if m0 == 2 ** 31:
            m0, exponent = m0 // 2, exponent + 1
        shift = 31 - exponent
        if not 1 <= shift <= 62 or m0 == 0:
            raise ValueError(f"scale ratio {x_scale} / ({y_scale} * {divisor}) outside the fixed-point range "
                             f"[2^-32, 2^30)")
        table[row] = (m0, shift)
    return table


def round_shift_half_even(acc: np.ndarray, m0, shift) -> np.ndarray:
    """round_half_even(acc * m0 / 2^shift) in int64 (element-wise m0, shift)."""
    product = np.asarray(acc, np.int64) * np.asarray(m0, np.int64)
    shift = np.asarray(shift, np.int64)
    quotient = product >> shift
    remainder = product & ((np.int64(1) << shift) - 1)
    half = np.int64(1) << (shift - 1)
    return quotient + ((remainder > half) | ((remainder == half) & (quotient & 1 == 1)))


def average_pool(qx: np.ndarray, x_scale, x_zero: int, y_scale, y_zero: int, dtype: str, *, kernel=None,
                 strides=(1, 1), pads=(0, 0, 0, 0), count_include_pad: int = 0) -> np.ndarray:
    """The int8 AveragePool of [N, C, H, W] `qx` (kernel None: GlobalAveragePool), floor-mode output size; pads are
    (top, left, bottom, right). Plain numpy over windows, independent of the C kernels' column sums."""
    n, c, h, w = qx.shape
    kernel = (h, w) if kernel is None else tuple(kernel)
    centred = np.zeros((n, c, h + pads[0] + pads[2], w + pads[1] + pads[3]), np.int64)
    inside = np.zeros(centred.shape[2:], np.int64)
    centred[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + w] = qx.astype(np.int64) - x_zero
    inside[pads[0]:pads[0] + h, pads[1]:pads[1] + w] = 1
    out_h = (centred.shape[2] - kernel[0]) // strides[0] + 1
    out_w = (centred.shape[3] - kernel[1]) // strides[1] + 1
    acc = np.zeros((n, c, out_h, out_w), np.int64)
    taps = np.zeros((out_h, out_w), np.int64)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            rows = slice(i, i + strides[0] * (out_h - 1) + 1, strides[0])
            cols = slice(j, j + strides[1] * (out_w - 1) + 1, strides[1])
            acc += centred[:, :, rows, cols]
            taps += inside[rows, cols]
    divisors = np.full_like(taps, kernel[0] * kernel[1]) if count_include_pad else taps
    table = average_multipliers(x_scale, y_scale, range(1, kernel[0] * kernel[1] + 1))
    entries = table[np.maximum(divisors, 1) - 1]
    low, high = INT_RANGES[dtype]
    value = np.where(divisors > 0, round_shift_half_even(acc, entries[..., 0], entries[..., 1]), 0)
    return (np.clip(value, low - y_zero, high - y_zero) + y_zero).astype(dtype)
