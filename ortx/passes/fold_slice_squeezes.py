"""A Slice that takes one element along an axis, followed by a Squeeze of that axis, becomes one Gather.

Before: y = Squeeze(Slice(x, starts=[i], ends=[i + 1], axes=[a]), axes=[a])      (attention's q/k/v = qkv[i])
After:  y = Gather(x, i, axis=a)                                                   (i a scalar: the axis is dropped)
Does not apply when: starts/ends/axes/steps are not constants, the Slice has more than one axis or a step other
than 1, x's dim on that axis is not static (the index must be in range; a clamped Slice would be empty instead),
the Slice does not take exactly one element, the Squeeze removes other axes too, or the Slice output has another
reader. Squeeze axes are an input from opset 13 and an attribute before.
"""
from __future__ import annotations

import logging
import time

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter._ir_utils import get_numpy_value

from ortx.passes._report import PassReport, record_fused_from, unique_initializer_name

logger = logging.getLogger(__name__)


def _constant(node: ir.Node, index: int) -> np.ndarray | None:
    if index >= len(node.inputs) or node.inputs[index] is None or node.inputs[index].is_graph_input():
        return None
    value = get_numpy_value(node.inputs[index])
    return None if value is None else np.ravel(value)


def _single_element_axis(node: ir.Node) -> tuple[int, int] | None:
    """(axis, index) when the Slice takes exactly element `index` along one static axis, else None."""
    source = node.inputs[0]
    if len(node.inputs) < 3 or source is None or source.shape is None:
        return None
    starts, ends = _constant(node, 1), _constant(node, 2)
    axes = _constant(node, 3) if len(node.inputs) > 3 and node.inputs[3] is not None else np.array([0])
    steps = _constant(node, 4) if len(node.inputs) > 4 and node.inputs[4] is not None else np.array([1])
    if any(array is None or array.size != 1 for array in (starts, ends, axes, steps)) or steps[0] != 1:
        return None
    rank = len(source.shape)
    axis = int(axes[0]) % rank
    dim = source.shape[axis]
    if not isinstance(dim, int):
        return None
    start = int(starts[0]) + dim if starts[0] < 0 else int(starts[0])
    end = int(ends[0]) + dim if ends[0] < 0 else min(int(ends[0]), dim)
    return (axis, start) if 0 <= start < dim and end == start + 1 else None


def _squeezed_axes(node: ir.Node, rank: int) -> list[int] | None:
    axes = _constant(node, 1) if len(node.inputs) > 1 else node.attributes.get_ints("axes", None)
    return None if axes is None else sorted(int(axis) % rank for axis in axes)


def fold_slice_squeezes(model: ir.Model) -> PassReport:
    start_time = time.perf_counter()
    graph = model.graph
    folded = 0
    notes: list[str] = []
    for squeeze in list(graph):
        if squeeze.op_type != "Squeeze" or squeeze.domain not in ("", "ai.onnx") or squeeze.inputs[0] is None:
            continue
        slice_node = squeeze.inputs[0].producer()
        if slice_node is None or slice_node.op_type != "Slice" or slice_node.domain not in ("", "ai.onnx"):
            continue
        taken = _single_element_axis(slice_node)
        if taken is None:
            continue
        axis, index = taken
        rank = len(slice_node.inputs[0].shape)
        if _squeezed_axes(squeeze, rank) != [axis]:
            notes.append(f"{squeeze.name} (Squeeze): not folded with Slice '{slice_node.name}': squeezes other axes")
            continue
        if len(slice_node.outputs[0].uses()) != 1 or slice_node.outputs[0].is_graph_output():
            notes.append(f"{slice_node.name} (Slice): not folded: its output has other readers")
            continue
        name = unique_initializer_name(graph, f"{slice_node.name or 'slice'}_index")
        index_value = ir.Value(name=name, const_value=ir.tensor(np.array(index, np.int64), name=name),
                               shape=ir.Shape([]), type=ir.TensorType(ir.DataType.INT64))
        graph.register_initializer(index_value)
        gather = ir.node("Gather", [slice_node.inputs[0], index_value], attributes={"axis": axis},
                         name=squeeze.name)
        gather.outputs[0].shape, gather.outputs[0].type = squeeze.outputs[0].shape, squeeze.outputs[0].type
        record_fused_from(gather, [slice_node, squeeze])
        ir.convenience.replace_nodes_and_values(graph, squeeze, [slice_node, squeeze], [gather],
                                                squeeze.outputs, gather.outputs)
        folded += 1
    return PassReport(model, name="fold_slice_squeezes", counts={"nodes_removed": folded}, notes=notes,
                      seconds=time.perf_counter() - start_time)
