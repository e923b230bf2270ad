"""Quantization parameters from ranges, and the numpy reference of ONNX QuantizeLinear / DequantizeLinear.

Activations (per tensor, asymmetric): the range is widened to contain 0 (so zero padding and ReLU zeros are exact),
scale = (high - low) / 255, zero_point = round(qmin - low / scale). Weights (per output channel, symmetric int8 in
[-127, 127], zero_point 0): scale_c = max|w_c| / 127; the restricted range keeps -128 out of int8 dot products
(vpmaddubsw pairs saturate at int16 when both weights are -128). Bias (int32, zero_point 0): scale_c = input
scale x weight scale_c, the scale an int32 accumulator of int8 x int8 products already has.
No scale is ever below MIN_SCALE: a tensor whose range is empty (all values 0) gets MIN_SCALE, and the caller
reports it.
"""
from __future__ import annotations

import dataclasses

import numpy as np

# Floor of every scale written: small enough to never coarsen a real range (float32 activations below 1e-7 are
# noise), large enough that x / scale stays finite for any float32 x of magnitude <= 3e30.
MIN_SCALE = 2.0 ** -26  # ~1.5e-8, exact in float32 (so float32(MIN_SCALE) >= MIN_SCALE)

INT_LIMITS = {"int8": (-128, 127), "uint8": (0, 255), "int32": (-(2 ** 31), 2 ** 31 - 1)}
NUMPY_TYPES = {"int8": np.int8, "uint8": np.uint8, "int32": np.int32}
WEIGHT_LIMIT = 127


@dataclasses.dataclass(frozen=True)
class QuantizationParameters:
    """scale and zero_point of one tensor (per tensor) or of each channel along `axis`."""
    scale: np.ndarray        # float32, shape () or (channels,)
    zero_point: np.ndarray   # dtype of the quantized tensor, same shape as scale
    axis: int | None = None
    floored: bool = False    # some scale was raised to MIN_SCALE

    @property
    def dtype(self) -> str:
        return self.zero_point.dtype.name


def activation_parameters(low: float, high: float, dtype: str) -> QuantizationParameters:
    """Asymmetric per-tensor parameters covering [min(low, 0), max(high, 0)]."""
    if dtype not in ("int8", "uint8"):
        raise ValueError(f"activation dtype must be 'int8' or 'uint8', not {dtype!r}")
    if not (np.isfinite(low) and np.isfinite(high)) or low > high:
        raise ValueError(f"invalid range [{low}, {high}]")
    qmin, qmax = INT_LIMITS[dtype]
    low, high = min(float(low), 0.0), max(float(high), 0.0)
    scale = np.float32((high - low) / (qmax - qmin))
    floored = not scale >= MIN_SCALE
    if floored:
        scale = np.float32(MIN_SCALE)
    zero_point = np.clip(np.round(qmin - low / float(scale)), qmin, qmax)
    return QuantizationParameters(np.array(scale, np.float32), np.array(zero_point, NUMPY_TYPES[dtype]),
                                  None, floored)


def weight_parameters(weight: np.ndarray, axis: int | None) -> QuantizationParameters:
    """Symmetric int8 parameters per slice along `axis` (per tensor when axis is None)."""
    weight = np.asarray(weight, np.float32)
    if axis is None:
        max_abs = np.array(np.max(np.abs(weight)) if weight.size else 0.0, np.float32)
    else:
        reduce_axes = tuple(index for index in range(weight.ndim) if index != axis)
        max_abs = np.max(np.abs(weight), axis=reduce_axes).astype(np.float32)
    scale = max_abs / np.float32(WEIGHT_LIMIT)
    floored = bool(np.any(~(scale >= MIN_SCALE)))
    scale = np.maximum(scale, np.float32(MIN_SCALE)).astype(np.float32)
    return QuantizationParameters(scale, np.zeros(scale.shape, np.int8), axis, floored)


def bias_parameters(input_scale: np.ndarray, weight_scale: np.ndarray) -> QuantizationParameters:
    """int32 parameters of a bias added to an int8 x int8 accumulator (axis 0 of the 1-D bias)."""
    scale = (np.float32(input_scale) * np.asarray(weight_scale, np.float32)).astype(np.float32)
    return QuantizationParameters(scale, np.zeros(scale.shape, np.int32), 0 if scale.ndim else None, False)


def _broadcast(parameter: np.ndarray, rank: int, axis: int | None) -> np.ndarray:
    if axis is None or parameter.ndim == 0:
        return parameter
    shape = [1] * rank
    shape[axis] = parameter.shape[0]
    return parameter.reshape(shape)


def quantize(values: np.ndarray, parameters: QuantizationParameters, *, limits: tuple[int, int] | None = None
             ) -> np.ndarray:
    """ONNX QuantizeLinear: saturate(round_half_to_even(x / scale) + zero_point); `limits` narrows the
    saturation range (weights use [-127, 127])."""
    values = np.asarray(values, np.float32)
    scale = _broadcast(parameters.scale, values.ndim, parameters.axis)
    zero_point = _broadcast(parameters.zero_point.astype(np.int64), values.ndim, parameters.axis)
    low, high = limits or INT_LIMITS[parameters.dtype]
    quantized = np.rint(values / scale) + zero_point
    return np.clip(quantized, low, high).astype(parameters.zero_point.dtype)


def dequantize(quantized: np.ndarray, parameters: QuantizationParameters) -> np.ndarray:
    """ONNX DequantizeLinear: (q - zero_point) * scale, in float32."""
    quantized = np.asarray(quantized)
    scale = _broadcast(parameters.scale, quantized.ndim, parameters.axis)
    zero_point = _broadcast(parameters.zero_point.astype(np.int64), quantized.ndim, parameters.axis)
    return ((quantized.astype(np.int64) - zero_point) * scale).astype(np.float32)
