"""Lowerings for the layout kernel family: data movement and the kernel-free aliases.

Aliases (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout in inference) share their input's bytes through
`builder.alias`; their output shape is the inferred one. Transpose, Slice, Expand, Tile, DepthToSpace and
SpaceToDepth are strided views copied by `strided_copy`; Concat and Split are `copy_rows` steps, one per input or
output, except where `concat_in_place` lets a Concat's inputs be written straight into its output; Gather, Pad and nearest Resize have their own byte-moving kernels (element sizes 1, 2, 4, 8); linear
Resize is float32 bilinear over the two innermost dims. Resize index maps are computed here with onnxruntime's
float32 arithmetic (onnxruntime/core/providers/cpu/tensor/upsample*.h) so results match it exactly.
"""
from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ortx.ep.lowering import _resize
from ortx.ep.lowering._values import (NotStatic, attribute, constant_value, is_used, numpy_dtype, opset_version, present,
                                      size_bytes, static_shape, string_attribute)

# Packed sub-byte types would need bit-level moves.
_UNSUPPORTED_DTYPES = {"INT4", "UINT4", "FLOAT4E2M1", "STRING"}


def _data_reason(*values: ir.Value) -> str | None:
    """Why these tensors cannot be moved byte-wise (dynamic shape, unsupported dtype), or None."""
    for value in values:
        try:
            static_shape(value)
            dtype = numpy_dtype(value)
        except NotStatic as error:
            return str(error)
        if value.dtype.name in _UNSUPPORTED_DTYPES or dtype.itemsize not in (1, 2, 4, 8) or dtype.kind == "O":
            return f"tensor {value.name!r} dtype {value.dtype.name} not supported (element sizes 1/2/4/8)"
    return None


def _strides(shape) -> list[int]:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return strides[::-1]


def _emit_strided(builder, node: ir.Node, shape, strides, offset=0) -> None:
    if int(np.prod(shape, dtype=np.int64)) == 0:
        return
    elem = numpy_dtype(node.outputs[0]).itemsize
    ints = [elem, len(shape), *shape, *strides, offset]
    builder.emit("strided_copy", ints, [], [builder.buffer(node.inputs[0]), builder.buffer(node.outputs[0])])


def _const_input(node: ir.Node, index: int, what: str):
    """(array or None when absent, reason when present but not constant)."""
    value = present(node, index)
    if value is None:
        return None, None
    array = constant_value(value)
    if array is None:
        return None, f"{node.op_type}: input {index} ({what}) must be a constant"
    return array, None


# Aliases ----------------------------------------------------------------------------------------------------
def check_alias(node: ir.Node) -> str | None:
    reason = _data_reason(node.inputs[0], node.outputs[0])
    if reason is not None:
        return reason
    if np.prod(static_shape(node.inputs[0])) != np.prod(static_shape(node.outputs[0])):
        return "element counts of input and output differ"
    if numpy_dtype(node.inputs[0]) != numpy_dtype(node.outputs[0]):
        return "input and output dtypes differ"
    # Reshape/Squeeze/Unsqueeze shape or axes inputs only decide the output shape, which inference gave us
    # statically; row-major element order is the same for every shape.
    return None


def check_dropout(node: ir.Node) -> str | None:
    if len(node.outputs) > 1 and is_used(node.outputs[1]):
        return "Dropout: mask output is used"
    if opset_version(node) < 7 and int(attribute(node, "is_test", 0)) != 1:
        return "Dropout: is_test=0 (training) before opset 7"
    training = present(node, 2)
    if training is not None:
        flag = constant_value(training)
        if flag is None or bool(np.asarray(flag).reshape(-1)[0]):
            return "Dropout: training_mode is not a constant false"
    return check_alias(node)


def lower_alias(node: ir.Node, builder) -> None:
    builder.alias(node.outputs[0], node.inputs[0])


# Transpose --------------------------------------------------------------------------------------------------
def _perm(node: ir.Node) -> list[int]:
    rank = len(static_shape(node.inputs[0]))
    return [int(p) for p in attribute(node, "perm", list(range(rank))[::-1])]


def check_transpose(node: ir.Node) -> str | None:
    reason = _data_reason(node.inputs[0], node.outputs[0])
    if reason is not None:
        return reason
    rank = len(static_shape(node.inputs[0]))
    if sorted(_perm(node)) != list(range(rank)):
        return f"Transpose: perm {_perm(node)} is not a permutation of rank {rank}"
    return None


def lower_transpose(node: ir.Node, builder) -> None:
    shape = static_shape(node.inputs[0])
    strides = _strides(shape)
    perm = _perm(node)
    _emit_strided(builder, node, [shape[p] for p in perm], [strides[p] for p in perm])


# Concat / Split ---------------------------------------------------------------------------------------------
def check_concat(node: ir.Node) -> str | None:
    values = [v for v in node.inputs if v is not None]
    reason = _data_reason(*values, node.outputs[0])
    if reason is not None:
        return reason
    rank = len(static_shape(node.outputs[0]))
    axis = int(attribute(node, "axis", 0))
    if not -rank <= axis < rank:
        return f"Concat: axis {axis} out of range for rank {rank}"
    return None


CONCAT_SLICE_ALIGNMENT = 64  # bytes: a slice starts where its producer's kernels expect a buffer to (one line)


def concat_in_place(nodes, inputs, outputs) -> dict[str, tuple[str, int, int]]:
    """The Concat inputs whose producers write straight into the Concat's output, so the Concat copies nothing:
    part name -> (output name, byte offset, output bytes), for SegmentBuilder.concat_slices. A Concat qualifies when
    its inputs are contiguous slices of its output (nothing before the axis but ones: NCHW channels of one image)
    and its output is no segment output; an input when it is made in the segment (not a segment input or
    output, not a constant), appears once in one such Concat, is no such Concat's output itself and starts on a
    64-byte boundary. The builder then plans the inputs inside the output's bytes and keeps them out of in-place
    reuse. Why: PP-OCRv4 det's head concatenates four 24 x 160 x 160 maps (9.8 MB) into the conv that reads them:
    0.74 ms of copying in a 10.8 ms bf16 run."""
    outside = {value.name for value in inputs} | {value.name for value in outputs}
    concats = [node for node in nodes if node.op_type == "Concat" and node.domain in ("", "ai.onnx")]
    concat_outputs = {node.outputs[0].name for node in concats}
    counts: dict[str, int] = {}
    for node in concats:
        for value in node.inputs:
            if value is not None:
                counts[value.name] = counts.get(value.name, 0) + 1
    slices: dict[str, tuple[str, int, int]] = {}
    for node in concats:
        output = node.outputs[0]
        if output.name in outside or _data_reason(output) is not None:
            continue
        shape = static_shape(output)
        axis = int(attribute(node, "axis", 0)) % len(shape)
        if int(np.prod(shape[:axis], dtype=np.int64)) != 1:
            continue
        itemsize, total, offset = numpy_dtype(output).itemsize, size_bytes(output), 0
        for value in node.inputs:
            if value is None:
                continue
            nbytes = int(np.prod(static_shape(value), dtype=np.int64)) * itemsize
            if (value.name not in outside and value.name not in concat_outputs and counts[value.name] == 1
                    and constant_value(value) is None and offset % CONCAT_SLICE_ALIGNMENT == 0):
                slices[value.name] = (output.name, offset, total)
            offset += nbytes
    return slices


def lower_concat(node: ir.Node, builder) -> None:
    if node in builder.blocked_nodes:  # blocked_layout.blocked_concat: whole 16-channel blocks
        from ortx.ep.lowering.blocked_layout import lower_blocked_concat

        lower_blocked_concat(node, builder)
        return
    out_shape = static_shape(node.outputs[0])
    axis = int(attribute(node, "axis", 0)) % len(out_shape)
    elem = numpy_dtype(node.outputs[0]).itemsize
    rows = int(np.prod(out_shape[:axis], dtype=np.int64))
    dst_stride = int(np.prod(out_shape[axis:], dtype=np.int64)) * elem
    offset = 0
    for value in node.inputs:
        if value is None:
            continue
        row_bytes = int(np.prod(static_shape(value)[axis:], dtype=np.int64)) * elem
        source, target = builder.buffer(value), builder.buffer(node.outputs[0])
        if row_bytes and rows and not builder.is_slice_of(source, target, offset):
            builder.emit("copy_rows", [rows, row_bytes, row_bytes, dst_stride, 0, offset], [], [source, target])
        offset += row_bytes


def check_split(node: ir.Node) -> str | None:
    outputs = [v for v in node.outputs if v is not None]
    reason = _data_reason(node.inputs[0], *outputs)
    if reason is not None:
        return reason
    shape = static_shape(node.inputs[0])
    axis = int(attribute(node, "axis", 0))
    if not -len(shape) <= axis < len(shape):
        return f"Split: axis {axis} out of range"
    if opset_version(node) >= 13:
        _, reason = _const_input(node, 1, "split")
        if reason is not None:
            return reason
    # the split sizes (attribute, constant input or num_outputs) are what shape inference used for the outputs
    if sum(static_shape(v)[axis] for v in outputs) != shape[axis]:
        return "Split: output sizes do not add up to the input dim"
    return None


def lower_split(node: ir.Node, builder) -> None:
    shape = static_shape(node.inputs[0])
    axis = int(attribute(node, "axis", 0)) % len(shape)
    elem = numpy_dtype(node.inputs[0]).itemsize
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    src_stride = int(np.prod(shape[axis:], dtype=np.int64)) * elem
    offset = 0
    for value in node.outputs:
        row_bytes = int(np.prod(static_shape(value)[axis:], dtype=np.int64)) * elem
        if row_bytes and rows:
            builder.emit("copy_rows", [rows, row_bytes, src_stride, row_bytes, offset, 0], [],
                         [builder.buffer(node.inputs[0]), builder.buffer(value)])
        offset += row_bytes


# Slice ------------------------------------------------------------------------------------------------------
def _slice_plan(node: ir.Node):
    """(starts, steps per axis of the input) or a reason; ONNX clamping rules, negative steps included."""
    shape = static_shape(node.inputs[0])
    rank = len(shape)
    if opset_version(node) < 10:
        starts = attribute(node, "starts")
        ends = attribute(node, "ends")
        axes = attribute(node, "axes", list(range(len(starts or []))))
        steps = [1] * len(starts or [])
        if starts is None or ends is None:
            return None, "Slice: starts/ends attributes missing"
    else:
        arrays = []
        for index, what in ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps")):
            array, reason = _const_input(node, index, what)
            if reason is not None:
                return None, reason
            arrays.append(array)
        starts, ends, axes, steps = arrays
        if starts is None or ends is None:
            return None, "Slice: starts/ends missing"
        starts, ends = starts.tolist(), ends.tolist()
        axes = list(range(len(starts))) if axes is None else axes.tolist()
        steps = [1] * len(starts) if steps is None else steps.tolist()
    begin, step = [0] * rank, [1] * rank
    count = list(shape)
    for start, end, axis, stride in zip(starts, ends, axes, steps):
        if not -rank <= axis < rank:
            return None, f"Slice: axis {axis} out of range"
        axis %= rank
        dim = shape[axis]
        if stride == 0:
            return None, "Slice: step 0"
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if stride > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
            n = max(0, -(-(end - start) // stride))
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
            n = max(0, -(-(start - end) // -stride))
        begin[axis], step[axis], count[axis] = start, stride, n
    if tuple(count) != static_shape(node.outputs[0]):
        return None, f"Slice: computed shape {tuple(count)} != inferred {static_shape(node.outputs[0])}"
    return (begin, step), None


def check_slice(node: ir.Node) -> str | None:
    if opset_version(node) >= 10:
        for index, what in ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps")):
            _, reason = _const_input(node, index, what)
            if reason is not None:
                return reason
    reason = _data_reason(node.inputs[0], node.outputs[0])
    if reason is not None:
        return reason
    _, reason = _slice_plan(node)
    return reason


def lower_slice(node: ir.Node, builder) -> None:
    (begin, step), _ = _slice_plan(node)
    strides = _strides(static_shape(node.inputs[0]))
    offset = sum(b * s for b, s in zip(begin, strides))
    _emit_strided(builder, node, static_shape(node.outputs[0]), [s * t for s, t in zip(strides, step)], offset)


# Expand / Tile ----------------------------------------------------------------------------------------------
def check_expand(node: ir.Node) -> str | None:
    reason = _data_reason(node.inputs[0], node.outputs[0])
    if reason is not None:
        return reason
    shape, out = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if len(shape) > len(out):
        return "Expand: output rank below input rank"
    padded = (1,) * (len(out) - len(shape)) + shape
    if any(s != o and s != 1 for s, o in zip(padded, out)):
        return f"Expand: {shape} does not broadcast to {out}"
    return None


def lower_expand(node: ir.Node, builder) -> None:
    shape, out = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    padded = (1,) * (len(out) - len(shape)) + shape
    strides = [0 if s == 1 and o != 1 else stride for s, o, stride in zip(padded, out, _strides(padded))]
    _emit_strided(builder, node, out, strides)


def check_tile(node: ir.Node) -> str | None:
    reason = _data_reason(node.inputs[0], node.outputs[0])
    if reason is not None:
        return reason
    shape, out = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if len(shape) != len(out) or any(s == 0 or o % s for s, o in zip(shape, out)):
        return f"Tile: output {out} is not a whole tiling of {shape}"
    return None


def lower_tile(node: ir.Node, builder) -> None:
    shape, out = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    view_shape, view_strides = [], []
    for dim, out_dim, stride in zip(shape, out, _strides(shape)):
        view_shape += [out_dim // dim, dim]
        view_strides += [0, stride]
    _emit_strided(builder, node, view_shape, view_strides)


# DepthToSpace / SpaceToDepth --------------------------------------------------------------------------------
def check_depth_space(node: ir.Node) -> str | None:
    reason = _data_reason(node.inputs[0], node.outputs[0])
    if reason is not None:
        return reason
    if len(static_shape(node.inputs[0])) != 4:
        return f"{node.op_type}: only 4-D input"
    if string_attribute(node, "mode", "DCR") not in ("DCR", "CRD"):
        return f"{node.op_type}: mode {string_attribute(node, 'mode', 'DCR')!r}"
    return None


def lower_depth_space(node: ir.Node, builder) -> None:
    n, c, h, w = static_shape(node.inputs[0])
    b = int(attribute(node, "blocksize"))
    if node.op_type == "DepthToSpace":
        c_out = c // (b * b)
        # output viewed as [n, c_out, h, i, w, j]; source channel (i * b + j) * c_out + c' (DCR) or c' * b*b +
        # i * b + j (CRD)
        if string_attribute(node, "mode", "DCR") == "DCR":
            strides = [c * h * w, h * w, w, b * c_out * h * w, 1, c_out * h * w]
        else:
            strides = [c * h * w, b * b * h * w, w, b * h * w, 1, h * w]
        _emit_strided(builder, node, [n, c_out, h, b, w, b], strides)
    elif string_attribute(node, "mode", "DCR") == "DCR":
        # output viewed as [n, i, j, c, h', w']: out channel (i * b + j) * c + c, input [c, h' * b + i, w' * b + j]
        _emit_strided(builder, node, [n, b, b, c, h // b, w // b], [c * h * w, w, 1, h * w, b * w, b])
    else:
        # CRD (SpaceToDepth opset 25): output viewed as [n, c, i, j, h', w'], out channel c * b*b + i * b + j
        _emit_strided(builder, node, [n, c, b, b, h // b, w // b], [c * h * w, h * w, w, 1, b * w, b])


# Gather -----------------------------------------------------------------------------------------------------
def check_gather(node: ir.Node) -> str | None:
    reason = _data_reason(node.inputs[0], node.inputs[1], node.outputs[0])
    if reason is not None:
        return reason
    shape = static_shape(node.inputs[0])
    axis = int(attribute(node, "axis", 0))
    if not -len(shape) <= axis < len(shape):
        return f"Gather: axis {axis} out of range"
    if numpy_dtype(node.inputs[1]) not in (np.int32, np.int64):
        return f"Gather: indices dtype {numpy_dtype(node.inputs[1])}"
    indices = constant_value(node.inputs[1])
    dim = shape[axis % len(shape)]
    if indices is not None and indices.size and (indices.min() < -dim or indices.max() >= dim):
        return f"Gather: constant indices out of range [-{dim}, {dim})"
    return None


def lower_gather(node: ir.Node, builder) -> None:
    shape = static_shape(node.inputs[0])
    axis = int(attribute(node, "axis", 0)) % len(shape)
    count = int(np.prod(static_shape(node.inputs[1]), dtype=np.int64))
    ints = [numpy_dtype(node.inputs[0]).itemsize, int(np.prod(shape[:axis], dtype=np.int64)), shape[axis],
            int(np.prod(shape[axis + 1:], dtype=np.int64)), count, numpy_dtype(node.inputs[1]).itemsize]
    if np.prod(static_shape(node.outputs[0])) == 0:
        return
    builder.emit("gather", ints, [], [builder.buffer(node.inputs[0]), builder.buffer(node.inputs[1]),
                                      builder.buffer(node.outputs[0])])


# Pad --------------------------------------------------------------------------------------------------------
_PAD_MODES = {"constant": 0, "reflect": 1, "edge": 2, "wrap": 3}


def _pad_plan(node: ir.Node):
    """(begin pads per axis, mode code, constant bits) or a reason."""
    shape = static_shape(node.inputs[0])
    rank = len(shape)
    dtype = numpy_dtype(node.inputs[0])
    mode = string_attribute(node, "mode", "constant")
    if mode not in _PAD_MODES or (mode == "wrap" and opset_version(node) < 19):
        return None, f"Pad: mode {mode!r} not supported"
    if opset_version(node) < 11:
        pads = list(attribute(node, "pads", attribute(node, "paddings", [])))
        value = np.array(attribute(node, "value", 0.0), dtype=dtype)
        axes = list(range(rank))
    else:
        pads, reason = _const_input(node, 1, "pads")
        if reason is not None or pads is None:
            return None, reason or "Pad: pads missing"
        value, reason = _const_input(node, 2, "constant_value")
        if reason is not None:
            return None, reason
        value = np.zeros((), dtype) if value is None or value.size == 0 else value.reshape(-1)[:1].astype(dtype)
        axes, reason = _const_input(node, 3, "axes")
        if reason is not None:
            return None, reason
        axes = list(range(rank)) if axes is None else [int(a) % rank for a in axes.tolist()]
        pads = pads.tolist()
    if len(pads) != 2 * len(axes):
        return None, f"Pad: {len(pads)} pads for {len(axes)} axes"
    begin, end = [0] * rank, [0] * rank
    for i, axis in enumerate(axes):
        begin[axis], end[axis] = int(pads[i]), int(pads[len(axes) + i])
    if mode != "constant":
        for axis in range(rank):
            if min(begin[axis], end[axis]) < 0:
                return None, f"Pad: negative pads with mode {mode!r}"
            if (begin[axis] or end[axis]) and shape[axis] == 0:
                return None, f"Pad: mode {mode!r} on an empty axis"
            if mode == "reflect" and max(begin[axis], end[axis]) >= shape[axis] and shape[axis] > 1:
                return None, "Pad: reflect pads must be smaller than the dim"
    expected = tuple(s + b + e for s, b, e in zip(shape, begin, end))
    if expected != static_shape(node.outputs[0]):
        return None, f"Pad: computed shape {expected} != inferred {static_shape(node.outputs[0])}"
    bits = int(np.frombuffer(np.asarray(value, dtype).tobytes().ljust(8, b"\0"), dtype=np.int64)[0])
    return (begin, _PAD_MODES[mode], bits), None


def check_pad(node: ir.Node) -> str | None:
    reason = _data_reason(node.inputs[0], node.outputs[0])
    if reason is not None:
        return reason
    _, reason = _pad_plan(node)
    return reason


def lower_pad(node: ir.Node, builder) -> None:
    (begin, mode, bits), _ = _pad_plan(node)
    shape, out = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if np.prod(out) == 0:
        return
    ints = [numpy_dtype(node.inputs[0]).itemsize, len(shape), mode, bits, *shape, *begin, *out]
    builder.emit("pad", ints, [], [builder.buffer(node.inputs[0]), builder.buffer(node.outputs[0])])


# Resize -----------------------------------------------------------------------------------------------------
def check_resize(node: ir.Node) -> str | None:
    reason = _resize.non_constant_input_reason(node, opset_version(node))
    if reason is not None:
        return reason
    reason = _data_reason(node.inputs[0], node.outputs[0])
    if reason is not None:
        return reason
    _, reason = _resize.plan(node, opset_version(node))
    return reason


def lower_resize(node: ir.Node, builder) -> None:
    plan, _ = _resize.plan(node, opset_version(node))
    in_shape, out_shape = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if np.prod(out_shape) == 0:
        return
    if node in builder.blocked_nodes:  # blocked_layout.blocked_resize: H and W of a [N * C/16, H, W, 16] array
        blocks = in_shape[0] * -(-in_shape[1] // 16)
        ints = [4, 4, blocks, *in_shape[2:], 16, blocks, *out_shape[2:], 16, *range(blocks),
                *plan.nearest_maps[2], *plan.nearest_maps[3], *range(16)]
        builder.emit("resize_nearest", ints, [], [builder.blocked_buffer(node.inputs[0]),
                                                  builder.produce_blocked(node.outputs[0])])
        builder.finish_blocked(node.outputs[0])
        return
    buffers = [builder.buffer(node.inputs[0]), builder.buffer(node.outputs[0])]
    if plan.mode == "nearest":
        ints = [numpy_dtype(node.inputs[0]).itemsize, len(in_shape), *in_shape, *out_shape]
        for axis_map in plan.nearest_maps:
            ints += list(axis_map)
        builder.emit("resize_nearest", ints, [], buffers)
        return
    outer = int(np.prod(in_shape[:-2], dtype=np.int64))
    (y0, y1, wy0, wy1), (x0, x1, wx0, wx1) = plan.linear_axes
    ints = [outer, in_shape[-2], in_shape[-1], out_shape[-2], out_shape[-1], *y0, *y1, *x0, *x1]
    builder.emit("resize_linear_f32", ints, np.concatenate([wy0, wy1, wx0, wx1]), buffers)


LOWERINGS = {
    ("", "Reshape"): (check_alias, lower_alias),
    ("", "Flatten"): (check_alias, lower_alias),
    ("", "Squeeze"): (check_alias, lower_alias),
    ("", "Unsqueeze"): (check_alias, lower_alias),
    ("", "Identity"): (check_alias, lower_alias),
    ("", "Dropout"): (check_dropout, lower_alias),
    ("", "Transpose"): (check_transpose, lower_transpose),
    ("", "Concat"): (check_concat, lower_concat),
    ("", "Split"): (check_split, lower_split),
    ("", "Slice"): (check_slice, lower_slice),
    ("", "Expand"): (check_expand, lower_expand),
    ("", "Tile"): (check_tile, lower_tile),
    ("", "DepthToSpace"): (check_depth_space, lower_depth_space),
    ("", "SpaceToDepth"): (check_depth_space, lower_depth_space),
    ("", "Gather"): (check_gather, lower_gather),
    ("", "Pad"): (check_pad, lower_pad),
    ("", "Resize"): (check_resize, lower_resize),
}
