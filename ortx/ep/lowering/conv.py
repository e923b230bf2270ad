"""Lowerings for the gemm and conv kernel families: Conv, ("ai.ortx", "FusedConv"), ConvTranspose, Gemm, MatMul.
Constant weights that ortx.tune.sparse_choice finds faster as CSR go to ortx.ep.lowering.sparse instead; fp32 3x3
stride-1 dense convs that conv_winograd_sizes_f32's shape rule takes run conv2d_winograd_f32 (weights transformed
once by conv_winograd_pack_f32).

float32 tensors only. Constant weights are packed once here (gemm_pack_f32 through `_kernels.call`) and stored with
`builder.add_constant`; activations are packed at run time into `builder.workspace` sized by the kernels' own
size queries (gemm_sizes_f32, conv_sizes_f32), so the C side is the one definition of every layout.
Under precision "bf16" (ortx/ep/precision.py; per node, builder.precision_of: provider option fp32_nodes keeps
some fp32), Gemm and MatMul with a constant operand and dense or grouped convs run the bf16 kernels instead
(weights packed once as bf16 K pairs by gemm_pack_bf16/conv_pack_bf16, sizes from gemm_sizes_bf16/conv_sizes_bf16),
and so do ConvTransposes whose kernel equals their stride without padding, from 64 input channels per group
(conv_transpose2d_bf16); depthwise convs, other transposed convs and products of two activations stay fp32.
Conv/ConvTranspose: 1-D (lowered as 2-D with H = 1) and 2-D; pads are resolved as onnxruntime resolves them and
the resulting output size must equal the inferred one, else the node is declined.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from ortx import _kernels
from ortx.ep.lowering import band, blocked_layout, sparse
from ortx.ep.lowering._values import NotStatic, attribute, constant_value, numpy_dtype, present, static_shape
from ortx.ep.precision import KERNEL_SUFFIX

ACTIVATIONS = {"Relu": 1, "LeakyRelu": 2, "Clip": 3, "Sigmoid": 4, "HardSigmoid": 5, "HardSwish": 6, "Tanh": 7,
               "HardSwishAffine": 9}
# FusedConv's activation_params per activation, and ONNX's defaults when the list is absent (HardSwishAffine, an
# ai.ortx activation: [scale, shift] of scale * HardSwish(x) + shift).
ACTIVATION_DEFAULTS = {
    "Relu": (), "Sigmoid": (), "HardSwish": (), "Tanh": (), "HardSwishAffine": (1.0, 0.0),
    "LeakyRelu": (0.01,),
    "Clip": (float(np.finfo(np.float32).min), float(np.finfo(np.float32).max)),
    "HardSigmoid": (0.2, 0.5),
}
CONV_ATTRIBUTES = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}
FUSED_ATTRIBUTES = CONV_ATTRIBUTES | {"activation", "activation_params"}
TRANSPOSE_ATTRIBUTES = CONV_ATTRIBUTES | {"output_padding", "output_shape"}
FUSED_TRANSPOSE_ATTRIBUTES = TRANSPOSE_ATTRIBUTES | {"activation", "activation_params"}
GEMM_ATTRIBUTES = {"alpha", "beta", "transA", "transB"}


class Declined(ValueError):
    """A node OrtxEP does not run; the message is the reason `check` reports."""


def _string(node: ir.Node, name: str, default: str) -> str:
    value = attribute(node, name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def _require_float32(node: ir.Node, indices) -> None:
    for index in indices:
        value = present(node, index)
        if value is None:
            continue
        if numpy_dtype(value) != np.float32:
            raise Declined(f"input {index} dtype {numpy_dtype(value)} not supported (float32 only)")
        static_shape(value)
    for value in node.outputs:
        if numpy_dtype(value) != np.float32:
            raise Declined(f"output dtype {numpy_dtype(value)} not supported (float32 only)")
        static_shape(value)


def _require_attributes(node: ir.Node, allowed: set[str]) -> None:
    unknown = sorted(set(node.attributes) - allowed)
    if unknown:
        raise Declined(f"attribute(s) {', '.join(unknown)} not supported")


def _checked(plan):
    """Turns a plan function raising Declined/NotStatic into a `check` returning the reason."""
    def check(node: ir.Node) -> str | None:
        try:
            plan(node)
        except (Declined, NotStatic) as error:
            return f"{node.op_type}: {error}"
        return None
    return check


# Conv geometry ---------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ConvPlan:
    ints: tuple[int, ...]  # the 19 conv ints of kernels/conv.h before workspace_threads
    weights: np.ndarray
    depthwise: bool
    activation: int
    params: tuple[float, float]
    has_residual: bool


def _spatial(node: ir.Node, name: str, default: int, count: int) -> list[int]:
    values = [int(v) for v in attribute(node, name, [default] * count)]
    if len(values) != count:
        raise Declined(f"{name} {values} does not match {count} spatial dims")
    return values


def _conv_common(node: ir.Node, *, transposed: bool):
    """Shapes, weights and attributes shared by Conv and ConvTranspose, as 2-D lists (1-D gets H = 1)."""
    x_shape, y_shape = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if len(x_shape) not in (3, 4):
        raise Declined(f"input rank {len(x_shape)} not supported (1-D and 2-D convs only)")
    weights = constant_value(node.inputs[1])
    if weights is None:
        raise Declined("weights are not constant")
    spatial = len(x_shape) - 2
    if weights.ndim != len(x_shape):
        raise Declined(f"weights rank {weights.ndim} != input rank {len(x_shape)}")
    kernel = list(weights.shape[2:])
    if list(attribute(node, "kernel_shape", kernel)) != kernel:
        raise Declined(f"kernel_shape {attribute(node, 'kernel_shape')} does not match weights {weights.shape}")
    strides = _spatial(node, "strides", 1, spatial)
    dilations = _spatial(node, "dilations", 1, spatial)
    pads = _spatial(node, "pads", 0, 2 * spatial)
    group = int(attribute(node, "group", 1))
    auto_pad = _string(node, "auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise Declined(f"auto_pad {auto_pad!r} not supported")
    if min(strides + dilations + kernel) < 1 or min(pads) < 0 or group < 1:
        raise Declined("strides, dilations and kernel must be positive and pads non-negative")
    bias = present(node, 2)
    out_channels = weights.shape[1] * group if transposed else weights.shape[0]
    if bias is not None and static_shape(bias) != (out_channels,):
        raise Declined(f"bias shape {static_shape(bias)} != ({out_channels},)")
    if spatial == 1:  # Case 1-D: a 2-D conv over a 1 x L image
        x_shape, y_shape = (*x_shape[:2], 1, x_shape[2]), (*y_shape[:2], 1, y_shape[2])
        weights = weights.reshape(*weights.shape[:2], 1, weights.shape[2])
        kernel, strides, dilations = [1] + kernel, [1] + strides, [1] + dilations
        pads = [0, pads[0], 0, pads[1]]
    return x_shape, y_shape, weights, kernel, strides, dilations, pads, group, auto_pad


def _conv_pads(x_shape, kernel, strides, dilations, pads, auto_pad):
    """onnxruntime's ConvAttributes: SAME_* pads with the undilated kernel (its legacy formula); (begins, sizes)."""
    begins, sizes = [], []
    for axis in range(2):
        size, k, s, d = x_shape[2 + axis], kernel[axis], strides[axis], dilations[axis]
        begin, end = pads[axis], pads[axis + 2]
        if auto_pad == "VALID":
            begin = end = 0
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            needed = max(0, ((size + s - 1) // s - 1) * s + k - size)  # a kernel under the stride: ORT pads 0
            begin = (needed + 1) // 2 if auto_pad == "SAME_LOWER" else needed // 2
            end = needed - begin
        begins.append(begin)
        sizes.append((size + begin + end - d * (k - 1) - 1) // s + 1)
    return begins, sizes


def _activation(node: ir.Node, codes: dict[str, int] = ACTIVATIONS) -> tuple[int, tuple[float, float]]:
    """(kernels/activation.h code, parameters) of a FusedConv's, FusedConvTranspose's or FusedMatMul's activation
    attributes."""
    if node.op_type not in ("FusedConv", "FusedMatMul", "FusedConvTranspose"):
        return 0, (0.0, 0.0)
    name = attribute(node, "activation", None)
    if name is None:
        return 0, (0.0, 0.0)
    name = name.decode() if isinstance(name, bytes) else str(name)
    if name == "":  # the fusion pass writes "" for a residual Add with no activation
        return 0, (0.0, 0.0)
    if name not in codes:
        raise Declined(f"activation {name!r} not supported")
    params = [float(v) for v in attribute(node, "activation_params", [])]
    defaults = ACTIVATION_DEFAULTS.get(name, ())
    if params and len(params) != len(defaults):
        raise Declined(f"activation {name} takes {len(defaults)} activation_params, got {len(params)}")
    params = (list(params or defaults) + [0.0, 0.0])[:2]
    return codes[name], (params[0], params[1])


def _conv_plan(node: ir.Node) -> ConvPlan:
    fused = node.op_type == "FusedConv"
    _require_attributes(node, FUSED_ATTRIBUTES if fused else CONV_ATTRIBUTES)
    _require_float32(node, range(len(node.inputs)))
    x_shape, y_shape, weights, kernel, strides, dilations, pads, group, auto_pad = _conv_common(
        node, transposed=False)
    batch, in_channels = x_shape[:2]
    out_channels = weights.shape[0]
    if in_channels % group or out_channels % group or weights.shape[1] != in_channels // group:
        raise Declined(f"group {group} does not fit input channels {in_channels} and weights {weights.shape}")
    begins, sizes = _conv_pads(x_shape, kernel, strides, dilations, pads, auto_pad)
    if tuple(y_shape) != (batch, out_channels, *sizes):
        raise Declined(f"computed output shape {(batch, out_channels, *sizes)} != inferred {y_shape}")
    activation, params = _activation(node)
    residual = present(node, 3) if fused else None
    if residual is not None and static_shape(residual) != static_shape(node.outputs[0]):
        raise Declined(f"residual shape {static_shape(residual)} != output shape {static_shape(node.outputs[0])}")
    depthwise = group > 1 and group == in_channels == out_channels
    ints = (batch, in_channels, *x_shape[2:], out_channels, *sizes, *kernel, *strides, *begins, *dilations, group,
            int(present(node, 2) is not None), int(residual is not None), activation)
    return ConvPlan(ints, np.asarray(weights, dtype=np.float32), depthwise, activation, params, residual is not None)


def _transpose_plan(node: ir.Node) -> ConvPlan:
    """ConvTranspose, or ai.ortx FusedConvTranspose (the same with an activation in the kernel's epilogue)."""
    fused = node.op_type == "FusedConvTranspose"
    _require_attributes(node, FUSED_TRANSPOSE_ATTRIBUTES if fused else TRANSPOSE_ATTRIBUTES)
    activation, params = _activation(node)
    _require_float32(node, range(len(node.inputs)))
    x_shape, y_shape, weights, kernel, strides, dilations, pads, group, auto_pad = _conv_common(
        node, transposed=True)
    batch, in_channels = x_shape[:2]
    if in_channels % group or weights.shape[0] != in_channels:
        raise Declined(f"group {group} does not fit input channels {in_channels} and weights {weights.shape}")
    out_channels = weights.shape[1] * group
    spatial = len(static_shape(node.inputs[0])) - 2
    output_padding = _spatial(node, "output_padding", 0, spatial)
    output_shape = attribute(node, "output_shape", None)
    if spatial == 1:
        output_padding = [0] + output_padding
        output_shape = None if output_shape is None else [1] + list(output_shape)
    begins, sizes = [], []
    for axis in range(2):
        size, k, s, d = x_shape[2 + axis], kernel[axis], strides[axis], dilations[axis]
        full = s * (size - 1) + output_padding[axis] + (k - 1) * d + 1
        if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            # onnxruntime's ConvTransposeAttributes: the target size is output_shape, else input * stride;
            # SAME_UPPER puts the odd pad at the tail, SAME_LOWER and NOTSET (output_shape given) at the head.
            target = int(output_shape[-2 + axis]) if output_shape is not None else size * s
            total = full - target
            if total < 0:
                raise Declined(f"output_shape {output_shape} needs negative padding")
            begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            begins.append(begin)
            sizes.append(target)
        else:
            begin, end = (0, 0) if auto_pad == "VALID" else (pads[axis], pads[axis + 2])
            begins.append(begin)
            sizes.append(full - begin - end)
    if tuple(y_shape) != (batch, out_channels, *sizes):
        raise Declined(f"computed output shape {(batch, out_channels, *sizes)} != inferred {y_shape}")
    ints = (batch, in_channels, *x_shape[2:], out_channels, *sizes, *kernel, *strides, *begins, *dilations, group,
            int(present(node, 2) is not None), 0, activation)
    return ConvPlan(ints, np.asarray(weights, dtype=np.float32), False, activation, params, False)


def _sizes(kernel: str, ints) -> np.ndarray:
    out = np.zeros(3, np.int64)
    _kernels.call(kernel, list(ints), [], [out])
    return out


def _pack(matrices: np.ndarray, rows: int, depth: int, row_stride: int, col_stride: int, which: int,
          scale: float = 1.0, precision: str = "fp32") -> np.ndarray:
    """gemm_pack_f32 (precision "bf16": gemm_pack_bf16, uint16 K pairs) of each raw (rows x depth) operand in
    `matrices` (stacked on the first axis), one after another in one array; which 0: A panels, 1: B panels. Each
    packs straight into its slice, so packing a weight allocates only its result (no per-group arrays to
    concatenate)."""
    suffix = KERNEL_SUFFIX[precision]
    sizes = _sizes(f"gemm_sizes_{suffix}", [rows if which == 0 else 1, rows if which == 1 else 1, depth, 1, 0, 0])
    each = int(sizes[1 + which])  # elements
    packed = np.empty(each * len(matrices), np.uint16 if precision == "bf16" else np.float32)
    for index, matrix in enumerate(matrices):
        _kernels.call(f"gemm_pack_{suffix}", [rows, depth, row_stride, col_stride, which], [scale],
                      [np.ascontiguousarray(matrix, dtype=np.float32), packed[index * each:(index + 1) * each]])
    return packed


BF16_CONV = 4  # _lower_conv_like's kind for conv2d_bf16 (conv_sizes_f32's kinds are 0-3)


def _lower_conv_like(node: ir.Node, builder, plan: ConvPlan, kind: int, kernel: str) -> None:
    ints = list(plan.ints) + [builder.num_threads]
    sizes = _sizes("conv_sizes_bf16", ints) if kind == BF16_CONV else _sizes("conv_sizes_f32", [kind] + ints)
    batch, in_channels, _, _, out_channels = ints[:5]
    group = ints[15]
    if kind == BF16_CONV:  # Case bf16 conv: conv_pack_bf16's panels (the form conv_sizes_bf16 names in sizes[2])
        packed = np.empty(int(sizes[1]), np.uint16)
        _kernels.call("conv_pack_bf16", ints, [], [np.ascontiguousarray(plan.weights), packed])
        weights = builder.add_constant(packed, label=f"{node.name}:packed_weights_bf16")
    elif kind == 1:  # Case depthwise: weights as given
        weights = builder.add_constant(plan.weights.reshape(-1), label=f"{node.name}:weights")
    elif kind in (0, 3):  # Case conv: A panels (kind 0) or pixel rows' B panels (kind 3) of each group's
        # (Cout/g) x (Cin/g*KH*KW) weights
        matrices = plan.weights.reshape(group, out_channels // group, -1)
        rows, depth = matrices.shape[1:]
        weights = builder.add_constant(_pack(matrices, rows, depth, depth, 1, 0 if kind == 0 else 1),
                                       label=f"{node.name}:packed_weights")
    else:  # Case transpose: A panels of each group's W_g^T, (Cout/g*KH*KW) x (Cin/g)
        matrices = plan.weights.reshape(group, in_channels // group, -1)
        depth, rows = matrices.shape[1:]
        weights = builder.add_constant(_pack(matrices, rows, depth, 1, rows, 0), label=f"{node.name}:packed_weights")
    output = builder.buffer(node.outputs[0])
    bias = builder.buffer(node.inputs[2]) if present(node, 2) is not None else output
    residual = builder.buffer(node.inputs[3]) if plan.has_residual else output
    workspace = builder.workspace(max(int(sizes[0]), 4), label="conv")
    builder.emit(kernel, ints, list(plan.params),
                 [builder.buffer(node.inputs[0]), weights, output, workspace, bias, residual])


def _pointwise_gemm(plan: ConvPlan) -> bool:
    """Whether the conv is one GEMM on NCHW as stored: one image, one group, a 1x1 kernel at stride 1 without
    padding (Y[Cout, H*W] = W[Cout, Cin] @ X[Cin, H*W])."""
    (batch, _, height, width, _, out_height, out_width, kernel_height, kernel_width, stride_height, stride_width,
     _, _, _, _, group, _, _, _) = plan.ints
    return (batch == 1 and group == 1 and (kernel_height, kernel_width, stride_height, stride_width) == (1, 1, 1, 1)
            and (out_height, out_width) == (height, width))


def _lower_pointwise_gemm(node: ir.Node, builder, plan: ConvPlan) -> None:
    """A gemm_f32 step reading the weights as a raw row-major A (so ortx.tune.gemm_steps can give it a tuned
    generated kernel), X as B in place, the bias per row, FusedConv's residual (laid out as Y) and the activation in
    the epilogue."""
    in_channels, height, width, out_channels = plan.ints[1:5]
    weights = builder.add_constant(np.ascontiguousarray(plan.weights.reshape(-1)), label=f"{node.name}:weights")
    has_bias = present(node, 2) is not None
    _emit_gemm(builder, M=out_channels, N=height * width, K=in_channels, a=weights, a_packed=False,
               a_strides=(in_channels, 1), b=builder.buffer(node.inputs[0]), b_packed=False,
               b_strides=(height * width, 1), output=builder.buffer(node.outputs[0]), bias_mode=1 if has_bias else 0,
               bias=builder.buffer(node.inputs[2]) if has_bias else None,
               residual=builder.buffer(node.inputs[3]) if plan.has_residual else None,
               residual_strides=(height * width, 1, 0), activation=plan.activation, activation_params=plan.params)


def _try_winograd(node: ir.Node, builder, plan: ConvPlan) -> bool:
    """conv2d_winograd_f32 when its shape rule takes the conv (conv_winograd_sizes_f32's sizes[2], the tile size m;
    kernels/conv_winograd.c's chosen_m: 3x3 stride-1 dense convs with 16 or more channels each way and a full
    column group of tiles, on AVX-512); False otherwise."""
    ints = list(plan.ints) + [builder.num_threads]
    sizes = _sizes("conv_winograd_sizes_f32", ints + [0])
    m = int(sizes[2])
    if not m:
        return False
    ints.append(m)
    packed = np.empty(int(sizes[1]), np.float32)
    _kernels.call("conv_winograd_pack_f32", ints, [0.0, 0.0], [np.ascontiguousarray(plan.weights), packed])
    weights = builder.add_constant(packed, label=f"{node.name}:winograd_weights")
    x, y, bias, residual = _conv_buffers(node, builder, plan)
    workspace = builder.workspace(max(int(sizes[0]), 4), label="conv_winograd")
    builder.emit("conv2d_winograd_f32", ints, list(plan.params),
                 [x, weights, y, workspace, bias if bias is not None else y, residual if residual is not None else y])
    return True


def _conv_buffers(node: ir.Node, builder, plan: ConvPlan) -> tuple:
    """X, Y, bias (or None) and FusedConv's residual (or None)."""
    return (builder.buffer(node.inputs[0]), builder.buffer(node.outputs[0]),
            builder.buffer(node.inputs[2]) if present(node, 2) is not None else None,
            builder.buffer(node.inputs[3]) if plan.has_residual else None)


def conv_plan_or_none(node: ir.Node) -> ConvPlan | None:
    """The plan of a Conv/FusedConv this module lowers, else None (ortx.ep.lowering.blocked_layout's question)."""
    if (node.domain if node.domain != "ai.onnx" else "", node.op_type) not in (("", "Conv"), ("ai.ortx", "FusedConv")):
        return None
    try:
        return _conv_plan(node)
    except (Declined, NotStatic):
        return None


def lower_conv(node: ir.Node, builder) -> None:
    plan = _conv_plan(node)
    expand = builder.expand_of.get(node)
    if expand is not None:  # a depthwise conv and the 1x1 conv before it, in one step
        blocked_layout.lower_expand_depthwise(expand, node, builder, _conv_plan(expand), plan)
    elif node in builder.expand_of.values():
        return  # lowered with its depthwise conv
    elif node in builder.depthwise_of:  # a bf16x3 1x1 conv and the depthwise conv before it, in one step
        depthwise = builder.depthwise_of[node]
        blocked_layout.lower_depthwise_bf16x3(depthwise, node, builder, _conv_plan(depthwise), plan)
    elif node in builder.depthwise_of.values():
        return  # lowered with its 1x1 conv
    elif node in builder.blocked_nodes:  # a run of 1x1 and depthwise convs on blocked tensors
        workspace = int(_sizes("conv_sizes_f32", [1, *plan.ints, builder.num_threads])[0]) if plan.depthwise else 0
        blocked_layout.lower_blocked_conv(node, builder, plan, workspace)
    elif plan.depthwise:  # fp32 under every precision: few multiply-adds per weight, memory-bound
        _lower_conv_like(node, builder, plan, 1, "conv2d_depthwise_f32")
    elif builder.precision_of(node) == "bf16":
        _lower_conv_like(node, builder, plan, BF16_CONV, "conv2d_bf16")
    elif sparse.try_sparse_conv(node, builder, plan, _conv_buffers(node, builder, plan)):
        return  # ortx.tune.sparse_choice chose sparse_conv2d_f32 for these weights
    elif _try_winograd(node, builder, plan):
        return
    elif _sizes("conv_sizes_f32", [0, *plan.ints, builder.num_threads])[2]:  # the kernels' shape rule
        _lower_conv_like(node, builder, plan, 3, "conv2d_pixel_rows_f32")
    elif _pointwise_gemm(plan):
        _lower_pointwise_gemm(node, builder, plan)
    else:
        _lower_conv_like(node, builder, plan, 0, "conv2d_f32")


def _lower_conv_transpose_bf16(node: ir.Node, builder, plan: ConvPlan) -> bool:
    """conv_transpose2d_bf16 when its kernel applies (kernel == stride, no padding: conv_transpose_sizes_bf16's
    sizes[2]); False otherwise."""
    ints = list(plan.ints) + [builder.num_threads]
    sizes = _sizes("conv_transpose_sizes_bf16", ints)
    if not sizes[2]:
        return False
    packed = np.empty(int(sizes[1]), np.uint16)
    _kernels.call("conv_transpose_pack_bf16", ints, [], [np.ascontiguousarray(plan.weights), packed])
    weights = builder.add_constant(packed, label=f"{node.name}:packed_weights_bf16")
    output = builder.buffer(node.outputs[0])
    bias = builder.buffer(node.inputs[2]) if present(node, 2) is not None else output
    workspace = builder.workspace(max(int(sizes[0]), 4), label="conv_transpose")
    builder.emit("conv_transpose2d_bf16", ints, list(plan.params),
                 [builder.buffer(node.inputs[0]), weights, output, workspace, bias, output])
    return True


def lower_conv_transpose(node: ir.Node, builder) -> None:
    plan = _transpose_plan(node)
    if builder.precision_of(node) == "bf16" and _lower_conv_transpose_bf16(node, builder, plan):
        return
    _lower_conv_like(node, builder, plan, 2, "conv_transpose2d_f32")


# Gemm and MatMul ---------------------------------------------------------------------------------------------------

def _gemm_plan(node: ir.Node) -> dict:
    _require_attributes(node, GEMM_ATTRIBUTES)
    _require_float32(node, range(len(node.inputs)))
    a_shape, b_shape = static_shape(node.inputs[0]), static_shape(node.inputs[1])
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise Declined(f"A {a_shape} and B {b_shape} must be 2-D")
    trans_a, trans_b = int(attribute(node, "transA", 0)), int(attribute(node, "transB", 0))
    M, K = a_shape[::-1] if trans_a else a_shape
    K2, N = b_shape[::-1] if trans_b else b_shape
    if K != K2:
        raise Declined(f"inner dimensions differ: A {a_shape} transA={trans_a}, B {b_shape} transB={trans_b}")
    c = present(node, 2)
    c_shape = None
    if c is not None:
        c_shape = (1,) * (2 - len(static_shape(c))) + static_shape(c)
        if len(c_shape) != 2 or c_shape[0] not in (1, M) or c_shape[1] not in (1, N):
            raise Declined(f"C shape {static_shape(c)} does not broadcast to ({M}, {N})")
    if static_shape(node.outputs[0]) != (M, N):
        raise Declined(f"output shape {static_shape(node.outputs[0])} != ({M}, {N})")
    return dict(M=M, N=N, K=K, trans_a=trans_a, trans_b=trans_b, c_shape=c_shape,
                alpha=float(attribute(node, "alpha", 1.0)), beta=float(attribute(node, "beta", 1.0)))


def _emit_gemm(builder, *, M, N, K, a, a_packed, a_strides, b, b_packed, b_strides, output, alpha=1.0,
               bias_mode=0, bias=None, residual=None, residual_strides=(0, 0, 0), residual_scale=1.0,
               a_offsets=(0,), b_offsets=(0,), activation=0, activation_params=(0.0, 0.0),
               precision="fp32") -> None:
    """gemm_f32, or gemm_bf16 (same ints; packed operands in bf16 K pairs) for precision "bf16"."""
    sizes = _sizes(f"gemm_sizes_{KERNEL_SUFFIX[precision]}", [M, N, K, builder.num_threads, int(a_packed),
                                                              int(b_packed)])
    workspace = builder.workspace(max(int(sizes[0]), 4), label="gemm")
    ints = [M, N, K, len(a_offsets), int(a_packed), *a_strides, int(b_packed), *b_strides, bias_mode,
            int(residual is not None), *residual_strides, activation, builder.num_threads, *a_offsets, *b_offsets]
    builder.emit(f"gemm_{KERNEL_SUFFIX[precision]}", ints, [alpha, residual_scale, *activation_params],
                 [a, b, output, workspace, bias if bias is not None else output,
                  residual if residual is not None else output])


def _try_sparse_gemm(node: ir.Node, builder, plan: dict) -> bool:
    """sparse_gemm_f32 for a Gemm with constant B, an activation A as stored and no C, or C a constant row
    (a bias per column), when ortx.tune.sparse_choice chooses sparse."""
    b_value, c_shape, beta = constant_value(node.inputs[1]), plan["c_shape"], plan["beta"]
    if (builder.precision_of(node) != "fp32" or b_value is None or plan["trans_a"]
            or constant_value(node.inputs[0]) is not None):
        return False
    bias = None
    if c_shape is not None and beta != 0.0:
        c_value = constant_value(node.inputs[2])
        if c_value is None or c_shape[0] != 1:  # Case general C: the dense epilogue's residual
            return False
        bias = np.broadcast_to(beta * c_value.reshape(1, -1), (1, plan["N"])).reshape(-1).astype(np.float32)
    weights_t = plan["alpha"] * np.asarray(b_value if plan["trans_b"] else b_value.T, dtype=np.float32)
    return sparse.try_sparse_gemm(node, builder, plan["M"], weights_t, builder.buffer(node.inputs[0]),
                                  builder.buffer(node.outputs[0]), bias)


def lower_gemm(node: ir.Node, builder) -> None:
    plan = _gemm_plan(node)
    if _try_sparse_gemm(node, builder, plan):
        return
    M, N, K, alpha, beta = plan["M"], plan["N"], plan["K"], plan["alpha"], plan["beta"]
    # element (m, k) of A and (k, n) of B in their stored layouts
    a_strides = (1, M) if plan["trans_a"] else (K, 1)
    b_strides = (1, K) if plan["trans_b"] else (N, 1)
    a_value, b_value = constant_value(node.inputs[0]), constant_value(node.inputs[1])
    a_packed = b_packed = False
    # bf16 only with a constant operand (a weight); a product of two activations stays fp32
    precision = builder.precision_of(node) if (a_value is not None or b_value is not None) else "fp32"
    if b_value is not None:  # constant B (the usual weight): packed once, alpha folded in
        b = builder.add_constant(_pack(b_value[None], N, K, b_strides[1], b_strides[0], 1, alpha, precision),
                                 label=f"{node.name}:B")
        b_packed, alpha = True, 1.0
    else:
        b = builder.buffer(node.inputs[1])
    if a_value is not None:
        a = builder.add_constant(_pack(a_value[None], M, K, *a_strides, 0, alpha, precision),
                                 label=f"{node.name}:A")
        a_packed, alpha = True, 1.0
    else:
        a = builder.buffer(node.inputs[0])
    output = builder.buffer(node.outputs[0])
    bias_mode, bias, residual, residual_strides = 0, None, None, (0, 0, 0)
    c_shape = plan["c_shape"]
    if c_shape is not None and beta != 0.0:
        c_value = constant_value(node.inputs[2])
        if c_value is not None and c_shape[0] == 1:  # Case constant row vector or scalar: a per-column bias
            bias_mode = 2
            bias = builder.add_constant(np.broadcast_to(beta * c_value.reshape(1, -1), (1, N)).reshape(N)
                                        .astype(np.float32), label=f"{node.name}:bias")
        elif c_value is not None and c_shape[1] == 1:  # Case constant column: a per-row bias
            bias_mode = 1
            bias = builder.add_constant((beta * c_value.reshape(M)).astype(np.float32), label=f"{node.name}:bias")
        else:  # Case general: beta * C as a broadcast residual (stride 0 on broadcast axes)
            residual = builder.buffer(node.inputs[2])
            residual_strides = (c_shape[1] if c_shape[0] == M and M > 1 else 0, 1 if c_shape[1] == N and N > 1 else 0, 0)
    _emit_gemm(builder, M=M, N=N, K=K, a=a, a_packed=a_packed, a_strides=a_strides, b=b, b_packed=b_packed,
               b_strides=b_strides, output=output, alpha=alpha, bias_mode=bias_mode, bias=bias, residual=residual,
               residual_strides=residual_strides, residual_scale=beta, precision=precision)


def _matmul_plan(node: ir.Node, attributes: frozenset[str] = frozenset()) -> dict:
    _require_attributes(node, set(attributes))
    _require_float32(node, range(len(node.inputs)))
    a_shape, b_shape = static_shape(node.inputs[0]), static_shape(node.inputs[1])
    if not a_shape or not b_shape:
        raise Declined("MatMul operands must have rank >= 1")
    a2 = (1, *a_shape) if len(a_shape) == 1 else a_shape  # numpy 1-D promotion
    b2 = (*b_shape, 1) if len(b_shape) == 1 else b_shape
    M, K = a2[-2:]
    K2, N = b2[-2:]
    if K != K2:
        raise Declined(f"inner dimensions differ: {a_shape} @ {b_shape}")
    try:
        batch = np.broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError:
        raise Declined(f"batch dims of {a_shape} and {b_shape} do not broadcast") from None
    expected = tuple(batch) + ((M,) if len(a_shape) > 1 else ()) + ((N,) if len(b_shape) > 1 else ())
    if static_shape(node.outputs[0]) != expected:
        raise Declined(f"output shape {static_shape(node.outputs[0])} != {expected}")
    return dict(a2=a2, b2=b2, M=M, N=N, K=K, batch=tuple(batch))


def _batch_offsets(shape, batch, matrix_size) -> list[int]:
    """Element offset of each output batch's matrix in an operand whose batch dims broadcast to `batch`."""
    dims = (1,) * (len(batch) - len(shape)) + tuple(shape)
    index = np.arange(int(np.prod(dims, dtype=np.int64))).reshape(dims)
    return [int(i) * matrix_size for i in np.broadcast_to(index, batch).reshape(-1)]


def lower_matmul(node: ir.Node, builder) -> None:
    plan = _matmul_plan(node)
    M, N, K, batch = plan["M"], plan["N"], plan["K"], plan["batch"]
    a2, b2 = plan["a2"], plan["b2"]
    b_value = constant_value(node.inputs[1])
    b_batch = int(np.prod(b2[:-2], dtype=np.int64))
    output = builder.buffer(node.outputs[0])
    a = builder.buffer(node.inputs[0])
    fp32 = builder.precision_of(node) == "fp32"
    if b_value is not None and b_batch == 1 and fp32 and band.try_band_matmul(
            node, builder, M * int(np.prod(batch, dtype=np.int64)), np.asarray(b_value, dtype=np.float32).reshape(K, N),
            a, output):
        return  # Case constant B with narrow panel bands (a mel filterbank): every batch's rows in one product
    if b_value is not None and b_batch == 1 and fp32 and sparse.try_sparse_gemm(
            node, builder, M * int(np.prod(batch, dtype=np.int64)),
            np.asarray(b_value, dtype=np.float32).reshape(K, N).T, a, output):
        return  # Case constant B chosen sparse (ortx.tune.sparse_choice): every batch's rows in one product
    if b_batch == 1:  # Case one B for every batch: the batches of A are rows of one tall GEMM
        M, a_offsets, b_offsets = M * int(np.prod(batch, dtype=np.int64)), [0], [0]
    else:
        a_offsets = _batch_offsets(a2[:-2], batch, M * K)
        b_offsets = _batch_offsets(b2[:-2], batch, K * N)
    precision = "fp32"
    if b_value is not None:  # Case constant B: each distinct matrix packed once (in bf16 under precision bf16)
        precision = builder.precision_of(node)
        packed = _pack(np.asarray(b_value, dtype=np.float32).reshape(b_batch, K, N), N, K, 1, N, 1,
                       precision=precision)
        b = builder.add_constant(packed, label=f"{node.name}:B")
        b_offsets = [offset // (K * N) * (packed.size // b_batch) for offset in b_offsets]
    else:
        b = builder.buffer(node.inputs[1])
    _emit_gemm(builder, M=M, N=N, K=K, a=a, a_packed=False, a_strides=(K, 1), b=b, b_packed=b_value is not None,
               b_strides=(N, 1), output=output, a_offsets=a_offsets, b_offsets=b_offsets, precision=precision)


# FusedMatMul's activations: FusedConv's codes and Gelu (kernels/activation.h ORTX_ACT_GELU), with the unary_f32 code
# of each for the dense GEMMs that run it as a step of its own (see lower_fused_matmul).
MATMUL_ACTIVATIONS = {**{name: code for name, code in ACTIVATIONS.items() if name != "HardSwishAffine"}, "Gelu": 8}
UNARY_CODE_OF_ACTIVATION = {**{code: code for code in MATMUL_ACTIVATIONS.values()}, 8: 28}
# The activations the generated GEMM's template has (ortx/codegen/gemm.py ACTIVATIONS): a dense FusedMatMul runs
# these in its GEMM's epilogue and the others (the exp-based ones) as an in-place unary_f32 step after it, so its
# GEMM keeps tuned schedules; the sparse kernel's epilogue takes them all, and so does gemm_bf16's (no generated bf16
# GEMM replaces it; the same vector Gelu as unary_f32's).
TEMPLATE_ACTIVATIONS = frozenset({1, 2, 3, 5, 6})


def _fused_matmul_plan(node: ir.Node) -> dict:
    """ai.ortx::FusedMatMul (ortx/passes/fuse_matmul_epilogue.py): MatMul by constant 2-D weights, + bias row
    (+ residual of the output's shape), then an activation."""
    plan = _matmul_plan(node, frozenset({"activation", "activation_params"}))
    plan["activation"] = _activation(node, MATMUL_ACTIVATIONS)
    weights, bias = constant_value(node.inputs[1]), constant_value(node.inputs[2])
    if weights is None or weights.ndim != 2:
        raise Declined("the weights are not a constant 2-D tensor")
    if bias is None or bias.size != plan["N"]:
        raise Declined(f"the bias is not a constant of {plan['N']} values")
    residual = present(node, 3)
    if residual is not None and static_shape(residual) != static_shape(node.outputs[0]):
        raise Declined(f"residual shape {static_shape(residual)} is not the output's {static_shape(node.outputs[0])}")
    return plan


def lower_fused_matmul(node: ir.Node, builder) -> None:
    plan = _fused_matmul_plan(node)
    N, K = plan["N"], plan["K"]
    M = plan["M"] * int(np.prod(plan["batch"], dtype=np.int64))  # every batch's rows in one tall GEMM
    weights = np.asarray(constant_value(node.inputs[1]), dtype=np.float32)
    bias = np.asarray(constant_value(node.inputs[2]), dtype=np.float32).reshape(N)
    a, output, residual = builder.buffer(node.inputs[0]), builder.buffer(node.outputs[0]), present(node, 3)
    activation, activation_params = plan["activation"]
    precision = builder.precision_of(node)
    if precision == "fp32" and sparse.try_sparse_gemm(
            node, builder, M, weights.T, a, output, bias,
            builder.buffer(residual) if residual is not None else None, activation, activation_params):
        return  # Case sparse: the CSR kernel adds the bias and the residual and applies the activation
    in_epilogue = activation in TEMPLATE_ACTIVATIONS if precision == "fp32" else True
    packed = _pack(weights[None], N, K, 1, N, 1, precision=precision)
    _emit_gemm(builder, M=M, N=N, K=K, a=a, a_packed=False, a_strides=(K, 1),
               b=builder.add_constant(packed, label=f"{node.name}:B"), b_packed=True, b_strides=(N, 1), output=output,
               bias_mode=2, bias=builder.add_constant(bias, label=f"{node.name}:bias"),
               residual=builder.buffer(residual) if residual is not None else None,
               residual_strides=(N, 1, 0), activation=activation if in_epilogue else 0,
               activation_params=activation_params if in_epilogue else (0.0, 0.0), precision=precision)
    if activation and not in_epilogue:  # Case dense, exp-based activation: in place, as the unfused graph ran it
        builder.emit("unary_f32", [UNARY_CODE_OF_ACTIVATION[activation], M * N], list(activation_params),
                     [output, output])


LOWERINGS = {
    ("", "Conv"): (_checked(_conv_plan), lower_conv),
    ("ai.ortx", "FusedMatMul"): (_checked(_fused_matmul_plan), lower_fused_matmul),
    ("ai.ortx", "FusedConv"): (_checked(_conv_plan), lower_conv),
    ("", "ConvTranspose"): (_checked(_transpose_plan), lower_conv_transpose),
    ("ai.ortx", "FusedConvTranspose"): (_checked(_transpose_plan), lower_conv_transpose),
    ("", "Gemm"): (_checked(_gemm_plan), lower_gemm),
    ("", "MatMul"): (_checked(_matmul_plan), lower_matmul),
}
