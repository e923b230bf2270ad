"""Lowerings for the reduce kernel family: ReduceSum/Mean/Max/Min/L2/SumSquare, Softmax/LogSoftmax,
LayerNormalization, ArgMax/ArgMin, and LRN (the lrn family, kernels/lrn.c: a sum of squares across channels).

Reductions: the reduced axes are collapsed into groups of adjacent axes (size-1 axes dropped); each group is one
`reduce_f32` step over [outer, length, inner], innermost group first, partial results in workspaces. The first
step applies the op (sum, sum of squares, max, min), later steps fold partials (sum, max, min) and the last step
applies the post op (ReduceMean: x 1/count; ReduceL2: sqrt). keepdims only changes the output shape.
Softmax/LogSoftmax: opset < 13 coerces the input to 2-D at `axis` ([prod(before), prod(from axis)]); opset >= 13
normalises along the one axis. LayerNormalization (opset 17): rows are the axes before `axis`; stash_type 1 only;
claimed only while the Mean/InvStdDev outputs are unused. ArgMax/ArgMin (float32 in, int64 out) -> one
`arg_extreme_f32` step (keepdims only changes the output shape). LRN: one `lrn_f32` step over [N, C, spatial].
"""
from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ortx.ep.lowering._values import attribute, constant_value, present, static_shape
from ortx.ep.lowering._values import is_used, opset_version
from ortx.ep.lowering.elementwise import CAST_CODES, element_count, tensor_reason

# op_type -> (first op, fold op for later steps, post op); ORTX_REDUCE_* / ORTX_REDUCE_POST_* of elementwise.h.
SUM, SUM_SQUARE, MAX, MIN = 0, 1, 2, 3
POST_NONE, POST_SCALE, POST_SQRT = 0, 1, 2
REDUCTIONS = {
    "ReduceSum": (SUM, SUM, POST_NONE),
    "ReduceMean": (SUM, SUM, POST_SCALE),
    "ReduceMax": (MAX, MAX, POST_NONE),
    "ReduceMin": (MIN, MIN, POST_NONE),
    "ReduceL2": (SUM_SQUARE, SUM, POST_SQRT),
    "ReduceSumSquare": (SUM_SQUARE, SUM, POST_NONE),
}


def _axes_from_input(node: ir.Node) -> bool:
    """ReduceSum takes axes as an input from opset 13, the other reductions from opset 18."""
    return opset_version(node) >= (13 if node.op_type == "ReduceSum" else 18)


def _reduction_axes(node: ir.Node) -> list[int] | None | str:
    """Normalised axes; None means 'no reduction' (empty axes with noop_with_empty_axes=1); or a reason."""
    rank = len(static_shape(node.inputs[0]))
    if _axes_from_input(node):
        value = present(node, 1)
        if value is None or value.name == "":
            axes = []
        else:
            array = constant_value(value)
            if array is None:
                return f"{node.op_type}: input 1 (axes) must be a constant"
            axes = [int(axis) for axis in array.reshape(-1)]
        noop = int(attribute(node, "noop_with_empty_axes", 0))
    else:
        axes = [int(axis) for axis in (attribute(node, "axes", None) or [])]
        noop = 0
    if not axes:
        return None if noop else list(range(rank))
    normalised = []
    for axis in axes:
        if not -rank <= axis < rank:
            return f"{node.op_type}: axis {axis} out of range for rank {rank}"
        normalised.append(axis % rank)
    if len(set(normalised)) != len(normalised):
        return f"{node.op_type}: repeated axes {axes}"
    return sorted(normalised)


def check_reduce(node: ir.Node) -> str | None:
    reason = tensor_reason(node, present(node, 0), ("float32",), "input 0")
    if reason:
        return reason
    if element_count(node.inputs[0]) == 0:
        return f"{node.op_type}: empty input not supported"
    axes = _reduction_axes(node)  # before the output: non-constant axes are why its shape is unknown
    if isinstance(axes, str):
        return axes
    if axes is None and node.op_type in ("ReduceL2", "ReduceSumSquare"):
        return f"{node.op_type}: noop_with_empty_axes=1 with empty axes not supported"
    return tensor_reason(node, node.outputs[0], ("float32",), "output 0")


def reduction_groups(shape, axes) -> list[tuple[int, bool]]:
    """(size, reduced) per group of adjacent axes with the same role; size-1 axes dropped."""
    groups: list[tuple[int, bool]] = []
    for axis, size in enumerate(shape):
        if size == 1:
            continue
        reduced = axis in axes
        if groups and groups[-1][1] == reduced:
            groups[-1] = (groups[-1][0] * size, reduced)
        else:
            groups.append((size, reduced))
    return groups


def lower_reduce(node: ir.Node, builder) -> None:
    x, out = node.inputs[0], node.outputs[0]
    axes = _reduction_axes(node)
    if axes is None:
        code = CAST_CODES["float32"]
        builder.emit("cast", [code, code, element_count(out)], [], [builder.buffer(x), builder.buffer(out)])
        return
    shape = static_shape(x)
    first_op, fold_op, post = REDUCTIONS[node.op_type]
    count = int(np.prod([shape[axis] for axis in axes], dtype=np.int64))
    groups = reduction_groups(shape, axes)
    if not any(reduced for _, reduced in groups):
        groups.append((1, True))  # every reduced axis has size 1: one step of length 1 still applies op and post
    source = builder.buffer(x)
    op = first_op
    while any(reduced for _, reduced in groups):
        position = max(index for index, (_, reduced) in enumerate(groups) if reduced)
        outer = int(np.prod([size for size, _ in groups[:position]], dtype=np.int64))
        inner = int(np.prod([size for size, _ in groups[position + 1:]], dtype=np.int64))
        length = groups[position][0]
        del groups[position]
        last = not any(reduced for _, reduced in groups)
        target = builder.buffer(out) if last else builder.workspace(outer * inner * 4, label="partial")
        builder.emit("reduce_f32", [op, outer, length, inner, post if last else POST_NONE],
                     [1.0 / count if post == POST_SCALE else 0.0], [source, target])
        source, op = target, fold_op


# Softmax / LogSoftmax --------------------------------------------------------------------------------------------
def _softmax_layout(node: ir.Node) -> tuple[int, int, int]:
    shape = static_shape(node.inputs[0])
    rank = len(shape)
    legacy = opset_version(node) < 13
    axis = int(attribute(node, "axis", 1 if legacy else -1))
    axis = axis % rank if rank else 0
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    if legacy:
        return outer, int(np.prod(shape[axis:], dtype=np.int64)), 1
    return outer, shape[axis], int(np.prod(shape[axis + 1:], dtype=np.int64))


def check_softmax(node: ir.Node) -> str | None:
    reason = tensor_reason(node, present(node, 0), ("float32",), "input 0")
    reason = reason or tensor_reason(node, node.outputs[0], ("float32",), "output 0")
    if reason:
        return reason
    rank = len(static_shape(node.inputs[0]))
    legacy = opset_version(node) < 13
    axis = int(attribute(node, "axis", 1 if legacy else -1))
    if rank == 0:
        return f"{node.op_type}: scalar input not supported"
    if not -rank <= axis < rank:
        return f"{node.op_type}: axis {axis} out of range for rank {rank}"
    return None


def lower_softmax(node: ir.Node, builder) -> None:
    outer, length, inner = _softmax_layout(node)
    if outer * length * inner:
        builder.emit("softmax_f32", [outer, length, inner, int(node.op_type == "LogSoftmax")], [],
                     [builder.buffer(node.inputs[0]), builder.buffer(node.outputs[0])])


# LayerNormalization ----------------------------------------------------------------------------------------------
def _strip_ones(shape) -> tuple[int, ...]:
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def check_layer_normalization(node: ir.Node) -> str | None:
    if opset_version(node) < 17:
        return "LayerNormalization: needs opset 17"
    if any(is_used(output) for output in node.outputs[1:]):
        return "LayerNormalization: outputs 1/2 (Mean, InvStdDev) are used; only output 0 is supported"
    if int(attribute(node, "stash_type", 1)) != 1:
        return "LayerNormalization: stash_type other than 1 (float32) not supported"
    reason = tensor_reason(node, present(node, 0), ("float32",), "input 0")
    reason = reason or tensor_reason(node, node.outputs[0], ("float32",), "output 0")
    if reason:
        return reason
    shape = static_shape(node.inputs[0])
    axis = int(attribute(node, "axis", -1))
    if not -len(shape) <= axis < len(shape):
        return f"LayerNormalization: axis {axis} out of range for rank {len(shape)}"
    normalised = shape[axis % len(shape):]
    for index, what in ((1, "scale"), (2, "bias")):
        value = present(node, index)
        if value is None or value.name == "":
            if index == 1:
                return "LayerNormalization: scale is missing"
            continue
        reason = tensor_reason(node, value, ("float32",), f"input {index} ({what})")
        if reason:
            return reason
        if _strip_ones(static_shape(value)) != _strip_ones(normalised) or \
                element_count(value) != int(np.prod(normalised, dtype=np.int64)):
            return (f"LayerNormalization: {what} shape {static_shape(value)} must equal the normalised shape "
                    f"{tuple(normalised)} (broadcast {what} not supported)")
    return None


def lower_layer_normalization(node: ir.Node, builder) -> None:
    shape = static_shape(node.inputs[0])
    axis = int(attribute(node, "axis", -1)) % len(shape)
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    length = int(np.prod(shape[axis:], dtype=np.int64))
    if rows * length == 0:
        return
    bias = present(node, 2)
    has_bias = bias is not None and bias.name != ""
    scale_ref = builder.buffer(node.inputs[1])
    builder.emit("layer_norm_f32", [rows, length, int(has_bias)], [float(attribute(node, "epsilon", 1e-5))], [
        builder.buffer(node.inputs[0]), scale_ref, builder.buffer(bias) if has_bias else scale_ref,
        builder.buffer(node.outputs[0]),
    ])


# ArgMax / ArgMin -------------------------------------------------------------------------------------------------
def check_arg_extreme(node: ir.Node) -> str | None:
    reason = tensor_reason(node, present(node, 0), ("float32",), "input 0")
    reason = reason or tensor_reason(node, node.outputs[0], ("int64",), "output 0")
    if reason:
        return reason
    shape = static_shape(node.inputs[0])
    axis = int(attribute(node, "axis", 0))
    if not -len(shape) <= axis < len(shape) or not shape:
        return f"{node.op_type}: axis {axis} out of range for rank {len(shape)}"
    if shape[axis] == 0:
        return f"{node.op_type}: empty reduction axis"
    return None


def lower_arg_extreme(node: ir.Node, builder) -> None:
    shape = static_shape(node.inputs[0])
    axis = int(attribute(node, "axis", 0)) % len(shape)
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    if outer * inner == 0:
        return
    builder.emit("arg_extreme_f32", [outer, shape[axis], inner, int(node.op_type == "ArgMin"),
                                     int(attribute(node, "select_last_index", 0))], [],
                 [builder.buffer(node.inputs[0]), builder.buffer(node.outputs[0])])


# LRN (LocalResponseNormalization) ------------------------------------------------------------------------------
def check_lrn(node: ir.Node) -> str | None:
    reason = tensor_reason(node, present(node, 0), ("float32",), "input 0")
    reason = reason or tensor_reason(node, node.outputs[0], ("float32",), "output 0")
    if reason:
        return reason
    if len(static_shape(node.inputs[0])) < 3:
        return "LRN: input rank below 3 (N x C x spatial)"
    size = attribute(node, "size", None)
    if size is None or int(size) < 1:
        return f"LRN: size {size!r} is not a positive integer"
    return None


def lower_lrn(node: ir.Node, builder) -> None:
    shape = static_shape(node.inputs[0])
    spatial = int(np.prod(shape[2:], dtype=np.int64))
    if shape[0] * shape[1] * spatial:
        builder.emit("lrn_f32", [shape[0], shape[1], spatial, int(attribute(node, "size", 1))],
                     [float(attribute(node, "alpha", 1e-4)), float(attribute(node, "beta", 0.75)),
                      float(attribute(node, "bias", 1.0))],
                     [builder.buffer(node.inputs[0]), builder.buffer(node.outputs[0])])


LOWERINGS = {
    **{("", op): (check_reduce, lower_reduce) for op in REDUCTIONS},
    ("", "Softmax"): (check_softmax, lower_softmax),
    ("", "LogSoftmax"): (check_softmax, lower_softmax),
    ("", "LayerNormalization"): (check_layer_normalization, lower_layer_normalization),
    ("", "ArgMax"): (check_arg_extreme, lower_arg_extreme),
    ("", "ArgMin"): (check_arg_extreme, lower_arg_extreme),
    ("", "LRN"): (check_lrn, lower_lrn),
}
