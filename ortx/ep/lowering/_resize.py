"""Resize's per-axis index maps and weights, computed as onnxruntime computes them (float32 arithmetic).

1. Scales come from the constant `scales` input, or from constant `sizes` as out/in in float32 (opset 18 `axes`
   places them; the other axes have scale 1).
2. Nearest: every axis whose scale is not exactly 1 maps output x to the input index
   nearest(transform(x)) clamped to [0, in - 1]; scale-1 axes map identically (onnxruntime skips the transform
   for them, except for rank-1 inputs). Opset 10 uses the asymmetric transform and onnxruntime's "simple"
   rounding (truncate when upsampling, ceil when downsampling).
3. Linear: bilinear over the last two axes of a rank-2 or rank-4 input whose other scales are 1; the source
   coordinate is clamped to [0, in - 1], taps (i, min(i + 1, in - 1)) weighted (1 - d, d), 0.5/0.5 at the edge.
4. The output shape onnxruntime derives (int64(scale * in) in float32) must equal the inferred one.
Limits: cubic, tf_crop_and_resize, antialias and keep_aspect_ratio_policy other than stretch are declined.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx_ir as ir

from ortx.ep.lowering._values import attribute, constant_value, numpy_dtype, present, static_shape

F = np.float32
# tf_half_pixel_for_nearest (opsets 11-12) is left out: onnxruntime 1.32 rejects it, so nothing could verify us
_TRANSFORMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


@dataclasses.dataclass(frozen=True)
class ResizePlan:
    mode: str
    nearest_maps: tuple[tuple[int, ...], ...] = ()
    linear_axes: tuple = ()


def _text(node: ir.Node, name: str, default: str) -> str:
    value = attribute(node, name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def _original(transform: str, x: int, scale, out_len: int, in_len: int):
    """onnxruntime's get_original_coordinate, float32 step by step."""
    x, scale, out_len, in_len = F(x), F(scale), F(out_len), F(in_len)
    if transform == "half_pixel":
        return (x + F(0.5)) / scale - F(0.5)
    if transform == "half_pixel_symmetric":
        adjustment = out_len / (scale * in_len)
        offset = in_len / F(2) * (F(1) - adjustment)
        return offset + (x + F(0.5)) / scale - F(0.5)
    if transform == "pytorch_half_pixel":
        return (x + F(0.5)) / scale - F(0.5) if out_len > F(1) else F(0)
    if transform == "align_corners":
        return F(0) if out_len == F(1) else x * (in_len - F(1)) / (out_len - F(1))
    return x / scale  # asymmetric


def _round_half_away(value: float) -> int:
    low = math.floor(value)
    diff = value - low
    if diff > 0.5 or (diff == 0.5 and value > 0):
        return low + 1
    return low


def _nearest(mode: str, value, downsample: bool) -> int:
    value = float(value)
    if mode == "round_prefer_floor":
        if F(value) == F(int(value)) + F(0.5):
            return math.floor(value)
        return _round_half_away(value)
    if mode == "round_prefer_ceil":
        return _round_half_away(value)
    if mode == "floor":
        return math.floor(value)
    if mode == "ceil":
        return math.ceil(value)
    return math.ceil(value) if downsample else int(value)  # "simple" (opset 10)


def non_constant_input_reason(node: ir.Node, opset: int) -> str | None:
    """Resize's roi/scales/sizes must be constants (the index maps are built at compile time)."""
    for index in ((1,) if opset < 11 else (1, 2, 3)):
        value = present(node, index)
        if value is not None and value.name != "" and constant_value(value) is None:
            return f"Resize: input {index} must be a constant"
    return None


def _scales(node: ir.Node, opset: int, in_shape, out_shape):
    """Per-axis float32 scales, or a reason."""
    rank = len(in_shape)
    if opset < 11:
        scales = constant_value(present(node, 1))
        if scales is None:
            return None, "Resize: scales must be a constant"
        return [F(s) for s in scales.reshape(-1)], None
    scales = constant_value(present(node, 2))
    sizes = constant_value(present(node, 3))
    axes = attribute(node, "axes") if opset >= 18 else None
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in axes]
    full = [F(1)] * rank
    if scales is not None and scales.size > 0:
        if scales.size != len(axes):
            return None, f"Resize: {scales.size} scales for {len(axes)} axes"
        for axis, scale in zip(axes, scales.reshape(-1)):
            full[axis] = F(scale)
        return full, None
    if sizes is None or sizes.size == 0:
        return None, "Resize: neither scales nor sizes given"
    if _text(node, "keep_aspect_ratio_policy", "stretch") != "stretch":
        return None, "Resize: keep_aspect_ratio_policy other than 'stretch' not supported"
    if sizes.size != len(axes):
        return None, f"Resize: {sizes.size} sizes for {len(axes)} axes"
    for axis, size in zip(axes, sizes.reshape(-1)):
        if int(size) != out_shape[axis]:
            return None, f"Resize: sizes {sizes.tolist()} disagree with the inferred output {out_shape}"
        full[axis] = F(int(size)) / F(in_shape[axis])
    return full, None


def _nearest_maps(in_shape, out_shape, scales, transform, mode, opset):
    maps = []
    for axis, (in_len, out_len, scale) in enumerate(zip(in_shape, out_shape, scales)):
        if scale == F(1) and len(in_shape) > 1:
            maps.append(tuple(range(out_len)))
            continue
        axis_map = []
        for x in range(out_len):
            index = _nearest(mode, _original(transform, x, scale, out_len, in_len), bool(scale < F(1)))
            axis_map.append(min(max(index, 0), in_len - 1))
        maps.append(tuple(axis_map))
    return tuple(maps)


def _linear_axis(in_len, out_len, scale, transform):
    i0, i1, w0, w1 = [], [], [], []
    for x in range(out_len):
        value = F(x) if scale == F(1) else _original(transform, x, scale, out_len, in_len)
        value = max(F(0), min(F(value), F(in_len - 1)))
        low = min(int(value), in_len - 1)
        high = min(low + 1, in_len - 1)
        d_low, d_high = F(abs(value - F(low))), F(abs(value - F(high)))
        if low == high:
            d_low = d_high = F(0.5)
        i0.append(low)
        i1.append(high)
        w0.append(d_high)  # the weight of the low tap is the distance to the high one
        w1.append(d_low)
    return i0, i1, np.array(w0, np.float32), np.array(w1, np.float32)


def plan(node: ir.Node, opset: int) -> tuple[ResizePlan | None, str | None]:
    in_shape, out_shape = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    rank = len(in_shape)
    mode = _text(node, "mode", "nearest")
    if mode not in ("nearest", "linear"):
        return None, f"Resize: mode {mode!r} not supported"
    if opset >= 18 and int(attribute(node, "antialias", 0)) != 0:
        return None, "Resize: antialias not supported"
    if opset < 11:
        transform, nearest_mode = "asymmetric", "simple"
    else:
        transform = _text(node, "coordinate_transformation_mode", "half_pixel")
        nearest_mode = _text(node, "nearest_mode", "round_prefer_floor")
        if transform not in _TRANSFORMS or (transform == "half_pixel_symmetric" and opset < 19):
            return None, f"Resize: coordinate_transformation_mode {transform!r} not supported"
        if nearest_mode not in _NEAREST_MODES:
            return None, f"Resize: nearest_mode {nearest_mode!r} not supported"
    if rank == 0 or len(out_shape) != rank or min(in_shape) == 0:
        return None, "Resize: empty or rank-0 input"
    scales, reason = _scales(node, opset, in_shape, out_shape)
    if reason is not None:
        return None, reason
    if len(scales) != rank or any(s <= F(0) for s in scales):
        return None, f"Resize: scales {scales} invalid for rank {rank}"
    # onnxruntime sizes the output as int64(float32 scale * float32 in); shape inference rounds in double
    expected = tuple(int(F(s) * F(d)) for s, d in zip(scales, in_shape))
    if expected != tuple(out_shape):
        return None, f"Resize: onnxruntime's output shape {expected} differs from the inferred {tuple(out_shape)}"
    if mode == "nearest":
        return ResizePlan("nearest", nearest_maps=_nearest_maps(in_shape, out_shape, scales, transform,
                                                                nearest_mode, opset)), None
    if numpy_dtype(node.inputs[0]) != np.float32:
        return None, f"Resize: linear mode on {numpy_dtype(node.inputs[0])} (float32 only)"
    if rank not in (2, 4) or any(s != F(1) for s in scales[:-2]) or tuple(in_shape[:-2]) != tuple(out_shape[:-2]):
        return None, "Resize: linear mode only over the last two axes of a 2-D or 4-D input (other scales 1)"
    axes = tuple(_linear_axis(in_shape[a], out_shape[a], scales[a], transform) for a in (-2, -1))
    return ResizePlan("linear", linear_axes=axes), None
