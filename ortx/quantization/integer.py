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
"""
from __future__ import annotations

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
