"""No-op removal: nodes whose output equals their first input are bypassed; Transpose pairs are composed.

Before -> After, by case:
  Case 1: Cast(x, to=dtype of x)                                   -> x
  Case 2: Reshape(x, s) where s resolves to x's static shape       -> x
  Case 3: Transpose(x, perm=0..n-1)                                -> x
  Case 4: Transpose(Transpose(x, p), q)                            -> Transpose(x, p∘q), or x when p∘q is identity
  Case 5: Slice(x, ...) that keeps every element (static shape, step 1) -> x
  Case 6: Pad(x, pads all 0)                                       -> x
  Case 7: Expand(x, s) whose broadcast result has x's static shape -> x
  Case 8: Concat of one input                                      -> x
Does not apply when: the shapes/dtypes the check needs are unknown (run infer_shapes first); an input the check
reads is not a constant initializer; the node would join a graph input to a graph output (ONNX needs a node there);
Case 4 when the inner Transpose has other readers and the pair does not cancel (composing would not remove a node).
"""
from __future__ import annotations

import logging
import time

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter._ir_utils import get_numpy_value

from ortx.passes._report import PassReport
from ortx.passes.eliminate_dead_code import _bypass

logger = logging.getLogger(__name__)

# Rounds of the whole sweep; a round that removes nothing ends the pass.
MAX_ROUNDS = 8


def _static_shape(value: ir.Value | None) -> tuple[int, ...] | None:
    if value is None or value.shape is None or not all(isinstance(dim, int) for dim in value.shape):
        return None
    return tuple(value.shape)


def _constant(node: ir.Node, index: int) -> np.ndarray | None:
    if index >= len(node.inputs) or node.inputs[index] is None:
        return None
    value = node.inputs[index]
    if value.is_graph_input():
        return None
    return get_numpy_value(value)  # an initializer's or a Constant node's value


def _reshape_is_no_op(node: ir.Node) -> bool:
    shape, target = _static_shape(node.inputs[0]), _constant(node, 1)
    if shape is None or target is None or len(target) != len(shape):
        return False
    allow_zero = node.attributes.get_int("allowzero", 0)
    resolved = [shape[axis] if dim == 0 and not allow_zero else int(dim) for axis, dim in enumerate(target)]
    if resolved.count(-1) == 1:
        known = int(np.prod([dim for dim in resolved if dim != -1]))
        resolved[resolved.index(-1)] = int(np.prod(shape)) // known if known else -1
    return tuple(resolved) == shape


def _present(node: ir.Node, index: int) -> bool:
    return index < len(node.inputs) and node.inputs[index] is not None


def _slice_is_no_op(node: ir.Node) -> bool:
    shape = _static_shape(node.inputs[0])
    starts, ends, axes, steps = (_constant(node, index) for index in (1, 2, 3, 4))
    if shape is None or starts is None or ends is None:
        return False
    if (_present(node, 3) and axes is None) or (_present(node, 4) and steps is None):
        return False  # axes or steps given but not constant
    if steps is not None and np.any(steps != 1):
        return False
    axes = np.arange(len(starts)) if axes is None else axes
    for start, end, axis in zip(starts.tolist(), ends.tolist(), axes.tolist()):
        dim = shape[axis]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if max(start, 0) != 0 or min(end, dim) != dim:
            return False
    return True


def _pad_is_no_op(node: ir.Node) -> bool:
    if len(node.inputs) > 1:  # opset >= 11: pads is an input
        pads = _constant(node, 1)
        return pads is not None and not np.any(pads)
    return not any(node.attributes.get_ints("pads", [1]))


def _expand_is_no_op(node: ir.Node) -> bool:
    shape, target = _static_shape(node.inputs[0]), _constant(node, 1)
    if shape is None or target is None:
        return False
    try:
        return np.broadcast_shapes(shape, tuple(int(dim) for dim in target)) == shape
    except ValueError:
        return False


def _is_no_op(node: ir.Node) -> bool:
    """Cases 1-3 and 5-8: the node's output equals its first input."""
    if node.domain not in ("", "ai.onnx") or not node.inputs or node.inputs[0] is None:
        return False
    if node.op_type == "Cast":  # Case 1
        return node.inputs[0].dtype is not None and node.inputs[0].dtype == node.attributes.get_int("to", -1)
    if node.op_type == "Reshape":  # Case 2
        return _reshape_is_no_op(node)
    if node.op_type == "Transpose":  # Case 3
        perm = node.attributes.get_ints("perm", None)
        return perm is not None and list(perm) == list(range(len(perm)))
    if node.op_type == "Slice":  # Case 5
        return len(node.inputs) >= 3 and _slice_is_no_op(node)
    if node.op_type == "Pad":  # Case 6
        return _pad_is_no_op(node)
    if node.op_type == "Expand":  # Case 7
        return _expand_is_no_op(node)
    if node.op_type == "Concat":  # Case 8
        return len(node.inputs) == 1
    return False


def _compose_transposes(graph: ir.Graph, node: ir.Node) -> bool:
    """Case 4: rewrites Transpose(Transpose(x, p), q) to read x directly; True when a node was removed."""
    inner = node.inputs[0].producer()
    if inner is None or inner.op_type != "Transpose" or inner.domain not in ("", "ai.onnx"):
        return False
    outer_perm, inner_perm = node.attributes.get_ints("perm", None), inner.attributes.get_ints("perm", None)
    if outer_perm is None or inner_perm is None:
        return False
    composed = [inner_perm[axis] for axis in outer_perm]
    inner_has_other_readers = len(inner.outputs[0].uses()) > 1 or inner.outputs[0].is_graph_output()
    if inner_has_other_readers and composed != list(range(len(composed))):
        return False
    node.replace_input_with(0, inner.inputs[0])
    node.attributes["perm"] = ir.AttrInt64s("perm", composed)
    if not inner.outputs[0].uses() and not inner.outputs[0].is_graph_output():
        graph.remove(inner, safe=True)
        return True
    return False  # the pair cancels: the outer one, now an identity, is bypassed next as Case 3


def remove_no_ops(model: ir.Model) -> PassReport:
    start = time.perf_counter()
    graph = model.graph
    removed: dict[str, int] = {}
    kept: dict[str, str] = {}
    for _ in range(MAX_ROUNDS):
        removed_this_round = 0
        for node in list(graph):
            if node.graph is not graph:  # removed earlier in this sweep
                continue
            if node.op_type == "Transpose" and node.domain in ("", "ai.onnx") and _compose_transposes(graph, node):
                removed["transposes_composed"] = removed.get("transposes_composed", 0) + 1
                removed_this_round += 1
            if not _is_no_op(node):
                continue
            reason = _bypass(graph, node)
            if reason is None:
                key = f"{node.op_type.lower()}s_removed"
                removed[key] = removed.get(key, 0) + 1
                removed_this_round += 1
            else:
                kept[node.name] = f"{node.name} ({node.op_type}): no-op kept: {reason}"
        if not removed_this_round:
            break
    counts = {"nodes_removed": sum(removed.values()), **removed}
    notes = list(kept.values())
    for note in notes:
        logger.debug(note)
    return PassReport(model, name="remove_no_ops", counts=counts, notes=notes, seconds=time.perf_counter() - start)
