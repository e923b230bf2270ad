"""Lowerings of quantized ops: ("ai.ortx", "QConv") -> qconv2d_i8 (depthwise: qdepthwise2d_i8), QuantizeLinear,
DequantizeLinear.

ai.ortx::QConv is what ortx/passes/fuse_qdq.py makes of DQ(x) + DQ(w const) -> Conv/Gemm/MatMul (+ DQ(bias int32))
-> [Add residual] -> [Relu/Clip] -> [Q]; its arithmetic is ortx/quantization/integer.py's. Inputs: 0 x (uint8/int8),
1 x_scale, 2 x_zero_point, 3 w (constant int8, [M, C/group, KH, KW] for Conv, [M, K] for Gemm), 4 w_scale ([M] or
scalar), 5 bias (constant int32 [M] or absent), 6 y_scale, 7 y_zero_point (both absent: float output), 8 residual
(float output only). Attributes: kind ("Conv"/"Gemm"), the Conv attributes, activation (""/Relu/Clip/...),
activation_params. Gemm kind: x is [..., K] (rows = the product of the leading dims), y is [..., M].
QuantizeLinear/DequantizeLinear: per-tensor constant scale and zero point only (per-axis ones are weights, which
the fusion folds); the reason for a decline names what is per-axis or not constant.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from ortx import _kernels
from ortx.ep.lowering._values import attribute, constant_value, numpy_dtype, present, static_shape, string_attribute
from ortx.ep.lowering.conv import ACTIVATIONS, Declined, _checked, _conv_pads, _spatial
from ortx.quantization.integer import INT_RANGES, output_range, requantization_multiplier

QCONV_ATTRIBUTES = {"kind", "auto_pad", "dilations", "group", "kernel_shape", "pads", "strides", "activation",
                    "activation_params"}
OUTPUT_KINDS = {"uint8": 0, "int8": 1, "float32": 2}
DEQUANTIZE_KINDS = {"uint8": 0, "int8": 1, "int32": 2}


def per_tensor(node: ir.Node, index: int, what: str) -> np.ndarray | None:
    """The constant scalar at input `index` (None when absent); Declined when it is not constant or not a scalar."""
    value = present(node, index)
    if value is None:
        return None
    array = constant_value(value)
    if array is None:
        raise Declined(f"{what} {value.name!r} is not a constant")
    if array.size != 1:
        raise Declined(f"{what} {value.name!r} is per-axis ({array.shape}); only per-tensor is supported")
    return array.reshape(())


@dataclasses.dataclass(frozen=True)
class QConvPlan:
    ints: list[int]          # qconv2d_i8's ints (kernels/qgemm.h), num_threads last (filled by the lowering)
    weights: np.ndarray      # int8 [group, M/group, K]
    bias: np.ndarray         # int64 [M] (zeros when absent)
    multiplier: np.ndarray   # fp32 [M]
    zero_u: int              # the input zero point as uint8
    activation_params: tuple[float, float]
    residual: bool

    @property
    def kernel(self) -> str:
        return "qdepthwise2d_i8" if self.ints[15] > 1 else "qconv2d_i8"


def _activation(node: ir.Node) -> tuple[str, list[float]]:
    name = string_attribute(node, "activation", "")
    params = [float(v) for v in attribute(node, "activation_params", [])]
    if name and name not in ACTIVATIONS:
        raise Declined(f"activation {name!r} not supported")
    return name, params


def _qconv_plan(node: ir.Node) -> QConvPlan:
    unknown = sorted(set(node.attributes) - QCONV_ATTRIBUTES)
    if unknown:
        raise Declined(f"attribute(s) {', '.join(unknown)} not supported")
    kind = string_attribute(node, "kind", "Conv")
    x, y = node.inputs[0], node.outputs[0]
    x_dtype, y_dtype = numpy_dtype(x).name, numpy_dtype(y).name
    if x_dtype not in INT_RANGES:
        raise Declined(f"input dtype {x_dtype} (uint8 or int8 only)")
    x_scale, x_zero = per_tensor(node, 1, "x_scale"), per_tensor(node, 2, "x_zero_point")
    zx = int(x_zero) if x_zero is not None else 0
    weights = constant_value(node.inputs[3])
    if weights is None or weights.dtype != np.int8:
        raise Declined("weights are not a constant int8 tensor")
    w_scale = constant_value(node.inputs[4])
    channels = weights.shape[0]
    if w_scale is None or w_scale.size not in (1, channels):
        raise Declined(f"weight scale must be a constant scalar or [{channels}]")
    bias_value = present(node, 5)
    bias = np.zeros(channels, np.int64)
    if bias_value is not None:
        array = constant_value(bias_value)
        if array is None or array.dtype != np.int32 or array.size != channels:
            raise Declined(f"bias must be a constant int32 [{channels}]")
        bias = array.astype(np.int64).reshape(channels)
    y_scale = per_tensor(node, 6, "y_scale")
    y_zero = per_tensor(node, 7, "y_zero_point")
    activation, params = _activation(node)
    residual = present(node, 8) is not None
    if y_scale is not None:  # Case quantized output: requantize, the activation is a clamp
        if y_dtype not in INT_RANGES or residual or activation not in ("", "Relu", "Clip"):
            raise Declined(f"quantized output {y_dtype} with residual/activation {activation!r} not supported")
        zy = int(y_zero) if y_zero is not None else 0
        bounds = (params + [None, None])[:2] if activation == "Clip" else (None, None)
        qmin, qmax = output_range(y_dtype, zy, float(y_scale), activation, bounds)
        multiplier = requantization_multiplier(x_scale, np.broadcast_to(w_scale.reshape(-1), (channels,)), y_scale)
        code, act_params = 0, (0.0, 0.0)
    else:  # Case float output: scale, residual, activation
        if y_dtype != "float32":
            raise Declined(f"output dtype {y_dtype} without y_scale")
        zy, qmin, qmax = 0, 0, 0
        multiplier = requantization_multiplier(x_scale, np.broadcast_to(w_scale.reshape(-1), (channels,)))
        code = ACTIVATIONS.get(activation, 0)
        act_params = tuple((params + [0.0, 0.0])[:2])
        if residual and static_shape(node.inputs[8]) != static_shape(y):
            raise Declined(f"residual shape {static_shape(node.inputs[8])} != output {static_shape(y)}")
    signed = int(x_dtype == "int8")
    common = [int(signed), OUTPUT_KINDS[y_dtype]]
    if kind == "Conv":
        ints, weights = _conv_geometry(node, weights)
    elif kind == "Gemm":
        ints, weights = _gemm_geometry(node, weights)
    else:
        raise Declined(f"kind {kind!r} (Conv or Gemm)")
    ints = ints[:17] + common + ints[17:] + [int(residual), code, zx, zy, qmin, qmax]
    return QConvPlan(ints, weights, bias, multiplier, zx + 128 * signed, act_params, residual)


def _conv_geometry(node: ir.Node, weights: np.ndarray):
    """(ints without the dtype/epilogue fields, weights as [group, M/group, K])."""
    x_shape, y_shape = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if len(x_shape) != 4 or weights.ndim != 4:
        raise Declined(f"input rank {len(x_shape)}: 2-D convs only")
    kernel = list(weights.shape[2:])
    strides = _spatial(node, "strides", 1, 2)
    dilations = _spatial(node, "dilations", 1, 2)
    pads = _spatial(node, "pads", 0, 4)
    group = int(attribute(node, "group", 1))
    auto_pad = string_attribute(node, "auto_pad", "NOTSET")
    batch, channels, height, width = x_shape
    out_channels = weights.shape[0]
    if channels % group or out_channels % group or weights.shape[1] != channels // group:
        raise Declined(f"group {group} does not fit input channels {channels} and weights {weights.shape}")
    if group > 1 and not group == channels == out_channels:
        raise Declined("grouped (not depthwise) int8 conv not supported (its weights are dequantized instead)")
    begins, sizes = _conv_pads(x_shape, kernel, strides, dilations, pads, auto_pad)
    if tuple(y_shape) != (batch, out_channels, *sizes):
        raise Declined(f"computed output shape {(batch, out_channels, *sizes)} != inferred {y_shape}")
    pixels = sizes[0] * sizes[1]
    ints = [batch, channels, height, width, out_channels, *sizes, *kernel, *strides, *begins, *dilations, group,
            0, pixels, 1, out_channels * pixels]
    return ints, weights.reshape(group, out_channels // group, -1)


def _gemm_geometry(node: ir.Node, weights: np.ndarray):
    x_shape, y_shape = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if weights.ndim != 2 or not x_shape or x_shape[-1] != weights.shape[1]:
        raise Declined(f"input {x_shape} and weights {weights.shape} ([M, K]) do not match")
    rows = int(np.prod(x_shape[:-1], dtype=np.int64))
    out_features, depth = weights.shape
    if tuple(y_shape) != (*x_shape[:-1], out_features):
        raise Declined(f"output shape {y_shape} != {(*x_shape[:-1], out_features)}")
    ints = [1, depth, 1, rows, out_features, 1, rows, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, out_features, 0]
    return ints, weights.reshape(1, out_features, depth)


def qconv_ints(plan: QConvPlan, num_threads: int) -> list[int]:
    return list(plan.ints) + [num_threads]


def pack_weights(weights: np.ndarray, ints: list[int], sizes: np.ndarray) -> np.ndarray:
    """qconv_pack_weights_i8 of [group, M, K] int8 weights into qgemm.h's panels for the qconv2d_i8 call `ints` (the
    K order depends on the geometry: direct mode's channel quads)."""
    packed = np.empty(int(sizes[1]), np.int8)
    _kernels.call("qconv_pack_weights_i8", ints, [], [np.ascontiguousarray(weights), packed])
    return packed


def effective_bias(plan: QConvPlan) -> np.ndarray:
    """bias - zx_u * sum_k w[m, k] (qgemm.h): the zero-point compensation folded into the int32 bias."""
    sums = plan.weights.astype(np.int64).sum(axis=2).reshape(-1)
    bias = plan.bias - plan.zero_u * sums
    if np.abs(bias).max(initial=0) >= 2 ** 31:
        raise Declined("bias with zero-point compensation overflows int32")
    return bias.astype(np.int32)


def qconv_sizes(ints: list[int]) -> np.ndarray:
    """[workspace bytes, packed weight bytes, sparse_qconv2d_i8's workspace bytes, its quads per K panel] for the
    qconv2d_i8 call `ints`."""
    sizes = np.zeros(4, np.int64)
    _kernels.call("qconv_sizes_i8", ints, [], [sizes])
    return sizes


def lower_qconv(node: ir.Node, builder) -> None:
    """qconv2d_i8 / qdepthwise2d_i8, or sparse_qconv2d_i8 when ortx.tune.sparse_choice picks it for the layer."""
    from ortx.ep.lowering.sparse import emit_sparse_qconv, pack_quad_csr, sparse_qconv_choice
    from ortx.tune.sparse_choice import MIN_ZEROS, zero_fraction

    plan = _qconv_plan(node)
    ints = qconv_ints(plan, builder.num_threads)
    sizes = qconv_sizes(ints)
    packed = pack_weights(plan.weights, ints, sizes)
    # all-zero quads are at most the zero elements: below MIN_ZEROS of those the choice is dense without a look-up
    candidate = plan.ints[15] == 1 and zero_fraction(plan.weights) >= MIN_ZEROS
    csr = pack_quad_csr(packed, int(ints[4]), int(ints[15]), int(sizes[3])) if candidate else None
    sparse = csr is not None and sparse_qconv_choice(node, builder, ints, csr) is not None
    bias = builder.add_constant(effective_bias(plan), label=f"{node.name}:bias_int32")
    multiplier = builder.add_constant(plan.multiplier, label=f"{node.name}:multiplier")
    output = builder.buffer(node.outputs[0])
    workspace = builder.workspace(max(int(sizes[2 if sparse else 0]), 64), label="qconv")
    residual = builder.buffer(node.inputs[8]) if plan.residual else output
    x = builder.buffer(node.inputs[0])
    if sparse:
        emit_sparse_qconv(builder, node.name, ints, plan.activation_params, csr,
                          [x, bias, multiplier, output, workspace, residual])
        return
    weights = builder.add_constant(packed, label=f"{node.name}:packed_weights")
    builder.emit(plan.kernel, ints, list(plan.activation_params),
                 [x, weights, bias, multiplier, output, workspace, residual])


# QuantizeLinear / DequantizeLinear -----------------------------------------------------------------------------

def _common_qdq(node: ir.Node, quantized: ir.Value):
    unknown = sorted(set(node.attributes) - {"axis", "saturate", "block_size", "output_dtype"})
    if unknown:
        raise Declined(f"attribute(s) {', '.join(unknown)} not supported")
    if int(attribute(node, "block_size", 0)):
        raise Declined("blocked quantization not supported")
    scale = per_tensor(node, 1, "scale")
    if scale is None or numpy_dtype(node.inputs[1]) != np.float32:
        raise Declined("scale must be a float32 constant")
    zero = per_tensor(node, 2, "zero_point")
    return float(scale), int(zero) if zero is not None else 0


def _quantize_plan(node: ir.Node):
    x, y = node.inputs[0], node.outputs[0]
    if numpy_dtype(x) != np.float32:
        raise Declined(f"input dtype {numpy_dtype(x)} (float32 only)")
    if numpy_dtype(y).name not in INT_RANGES:
        raise Declined(f"output dtype {numpy_dtype(y)} (uint8 or int8 only)")
    static_shape(x)
    return _common_qdq(node, y)


def _dequantize_plan(node: ir.Node):
    x, y = node.inputs[0], node.outputs[0]
    if numpy_dtype(x).name not in DEQUANTIZE_KINDS:
        raise Declined(f"input dtype {numpy_dtype(x)} (uint8, int8 or int32 only)")
    if numpy_dtype(y) != np.float32:
        raise Declined(f"output dtype {numpy_dtype(y)} (float32 only)")
    static_shape(x)
    return _common_qdq(node, x)


def lower_quantize(node: ir.Node, builder) -> None:
    scale, zero = _quantize_plan(node)
    dtype = numpy_dtype(node.outputs[0]).name
    low, high = INT_RANGES[dtype]
    count = int(np.prod(static_shape(node.inputs[0]), dtype=np.int64))
    builder.emit("quantize_linear_f32", [count, zero, low, high, int(dtype == "int8")], [scale],
                 [builder.buffer(node.inputs[0]), builder.buffer(node.outputs[0])])


def lower_dequantize(node: ir.Node, builder) -> None:
    scale, zero = _dequantize_plan(node)
    count = int(np.prod(static_shape(node.inputs[0]), dtype=np.int64))
    builder.emit("dequantize_linear_f32", [count, zero, DEQUANTIZE_KINDS[numpy_dtype(node.inputs[0]).name]], [scale],
                 [builder.buffer(node.inputs[0]), builder.buffer(node.outputs[0])])


LOWERINGS = {
    ("ai.ortx", "QConv"): (_checked(_qconv_plan), lower_qconv),
    ("", "QuantizeLinear"): (_checked(_quantize_plan), lower_quantize),
    ("", "DequantizeLinear"): (_checked(_dequantize_plan), lower_dequantize),
}
