"""Lowerings for the pool kernel family: MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool (float32, NCHW).

Windowed pools run 1-D, 2-D and 3-D through one kernel that sees three spatial dims (missing leading dims are 1).
Pads are resolved here, as onnxruntime resolves them (auto_pad SAME_* uses the undilated kernel, as ORT does), and
the output size computed from them must equal the inferred output shape, else the node is declined.
"""
from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ortx.ep.lowering._values import NotStatic, attribute, is_used, numpy_dtype, opset_version, static_shape, string_attribute
from ortx.passes._ort_shapes import pool_output_size, pool_pads


def _float_input_reason(node: ir.Node) -> str | None:
    try:
        dtype = numpy_dtype(node.inputs[0])
        shape = static_shape(node.inputs[0])
        static_shape(node.outputs[0])
    except NotStatic as error:
        return str(error)
    if dtype != np.float32:
        return f"input 0 dtype {dtype} not supported (float32 only)"
    if not 3 <= len(shape) <= 5:
        return f"input rank {len(shape)} not supported (NCW, NCHW or NCDHW)"
    return None


def _window_plan(node: ir.Node) -> tuple[dict | None, str | None]:
    """Resolved kernel/stride/dilation/pads per spatial axis, or the reason the node is declined."""
    shape = static_shape(node.inputs[0])
    out_shape = static_shape(node.outputs[0])
    spatial = len(shape) - 2
    kernel = attribute(node, "kernel_shape")
    if kernel is None or len(kernel) != spatial:
        return None, f"kernel_shape {kernel} does not match {spatial} spatial dims"
    kernel = [int(k) for k in kernel]
    strides = [int(s) for s in attribute(node, "strides", [1] * spatial)]
    dilations = [int(d) for d in attribute(node, "dilations", [1] * spatial)]
    pads = [int(p) for p in attribute(node, "pads", [0] * (2 * spatial))]
    ceil_mode = int(attribute(node, "ceil_mode", 0))
    auto_pad = string_attribute(node, "auto_pad", "NOTSET")
    if len(strides) != spatial or len(dilations) != spatial or len(pads) != 2 * spatial:
        return None, "strides/dilations/pads lengths do not match the spatial rank"
    if min(kernel) < 1 or min(strides) < 1 or min(dilations) < 1:
        return None, "kernel_shape, strides and dilations must be positive"
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        return None, f"auto_pad {auto_pad!r} not supported"
    resolved = pool_pads(shape[2:], kernel, strides, pads, auto_pad)  # SAME_*: ORT's legacy undilated formula
    if resolved is None:
        return None, f"auto_pad {auto_pad}: negative padding"
    begin, end = resolved
    for axis in range(spatial):
        if begin[axis] < 0 or end[axis] < 0:
            return None, f"negative pads {pads} not supported"
        if max(begin[axis], end[axis]) >= (kernel[axis] - 1) * dilations[axis] + 1:
            return None, f"pads {pads} not smaller than the (dilated) kernel {kernel}"
        expected = pool_output_size(shape[2 + axis], kernel[axis], strides[axis], begin[axis] + end[axis],
                                    dilations[axis], begin[axis], ceil_mode)
        if expected != out_shape[2 + axis]:
            return None, (f"output dim {axis + 2}: inferred {out_shape[2 + axis]} but onnxruntime's rule gives "
                          f"{expected}")
    return {"kernel": kernel, "strides": strides, "dilations": dilations, "begin": begin, "end": end}, None


def _check_windowed(node: ir.Node) -> str | None:
    reason = _float_input_reason(node)
    if reason is not None:
        return reason
    _, reason = _window_plan(node)
    return reason


def check_max_pool(node: ir.Node) -> str | None:
    if len(node.outputs) > 1 and is_used(node.outputs[1]):
        return "MaxPool: Indices output is used (not supported)"
    # storage_order only changes the Indices output, which is unused here
    return _check_windowed(node)


def check_average_pool(node: ir.Node) -> str | None:
    if attribute(node, "dilations") is not None and opset_version(node) < 19:
        return "AveragePool: dilations before opset 19"
    return _check_windowed(node)


def _pool_ints(node: ir.Node, count_include_pad: int) -> list[int]:
    plan, _ = _window_plan(node)
    shape = static_shape(node.inputs[0])
    out_shape = static_shape(node.outputs[0])
    lead = 3 - (len(shape) - 2)

    def padded(values, fill):
        return [fill] * lead + list(values)

    return ([shape[0] * shape[1]] + padded(shape[2:], 1) + padded(out_shape[2:], 1) + padded(plan["kernel"], 1)
            + padded(plan["strides"], 1) + padded(plan["begin"], 0) + padded(plan["end"], 0)
            + padded(plan["dilations"], 1) + [count_include_pad])


def lower_max_pool(node: ir.Node, builder) -> None:
    ints = _pool_ints(node, 0)
    if node in builder.blocked_nodes:  # a 2-D MaxPool inside a blocked run (ortx.ep.lowering.blocked_layout)
        shape = static_shape(node.inputs[0])
        blocks = -(-shape[1] // 16)
        if node.outputs[0].name in builder.pair_rows:  # pair rows in and out (blocked_layout.pair_rows_values)
            chunks = -(-shape[1] // 32)
            builder.emit("maxpool_pair_rows_bf16", [shape[0] * chunks] + ints[1:], [],
                         [builder.pair_rows_buffer(node.inputs[0]), builder.pair_rows_buffer(node.outputs[0])])
            return
        if node.inputs[0].name in builder.pair_rows:  # a bf16 stem's pair rows (blocked_layout.pair_rows_values)
            builder.emit("maxpool_pair_rows_f32", [shape[0] * blocks] + ints[1:] + [blocks], [],
                         [builder.pair_rows_buffer(node.inputs[0]), builder.produce_blocked(node.outputs[0])])
        else:
            builder.emit("maxpool_nchwc_f32", [shape[0] * blocks] + ints[1:], [],
                         [builder.blocked_buffer(node.inputs[0]), builder.produce_blocked(node.outputs[0])])
        builder.finish_blocked(node.outputs[0])
        return
    builder.emit("maxpool_f32", ints, [], [builder.buffer(node.inputs[0]), builder.buffer(node.outputs[0])])


def lower_average_pool(node: ir.Node, builder) -> None:
    ints = _pool_ints(node, int(attribute(node, "count_include_pad", 0)))
    builder.emit("avgpool_f32", ints, [], [builder.buffer(node.inputs[0]), builder.buffer(node.outputs[0])])


def check_global(node: ir.Node) -> str | None:
    return _float_input_reason(node)


def _lower_global(kernel: str):
    def lower(node: ir.Node, builder) -> None:
        shape = static_shape(node.inputs[0])
        if node in builder.blocked_nodes:  # only GlobalAveragePool joins blocked runs (ortx.ep.lowering.blocked_layout)
            builder.emit("global_avgpool_nchwc_f32", [shape[0] * -(-shape[1] // 16), int(np.prod(shape[2:]))], [],
                         [builder.blocked_buffer(node.inputs[0]), builder.produce_blocked(node.outputs[0])])
            builder.finish_blocked(node.outputs[0])
            return
        ints = [shape[0] * shape[1], int(np.prod(shape[2:]))]
        builder.emit(kernel, ints, [], [builder.buffer(node.inputs[0]), builder.buffer(node.outputs[0])])

    return lower


LOWERINGS = {
    ("", "MaxPool"): (check_max_pool, lower_max_pool),
    ("", "AveragePool"): (check_average_pool, lower_average_pool),
    ("", "GlobalAveragePool"): (check_global, _lower_global("global_avgpool_f32")),
    ("", "GlobalMaxPool"): (check_global, _lower_global("global_maxpool_f32")),
}
