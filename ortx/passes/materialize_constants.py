"""Constants made concrete for a session: ConstantOfShape of a constant shape -> an initializer holding its value.

Before: shape (initializer [64, 3, 7, 7]) -> ConstantOfShape(value=0.02) -> Conv's weight
After:  an initializer [64, 3, 7, 7] of 0.02 -> Conv's weight
In a session's passes only (SESSION_PASSES), not in `ortx optimize`'s levels: in memory the kernels need their
weights constant (a Conv whose weight is computed stays on ORT, and OrtxEP's nodes around it split the graph into
many segments: the ONNX backend's light ResNet-50, whose 239 weights are ConstantOfShape, ran at 2.9x ORT's time in
98 segments), where in a file the tensors would only grow the model (fold_constants keeps ConstantOfShape for that
reason). When it made any, it then folds what they feed (fold_constants, run before it, could not): the light
Inception v2's BatchNorm scales and shifts are Unsqueeze([C] made tensor) -> [C, 1, 1] before a Mul and an Add,
which fuse_conv_batchnorm folds into the Conv only as constants (without this, 57 Mul/Add pairs ran as elementwise
chains after their Convs). Does not apply to: a shape that is not constant, or a tensor over `size_limit` elements
(a note each).
"""
from __future__ import annotations

import logging
import time

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common

from ortx.passes._report import PassReport
from ortx.passes.fold_constants import fold_constants

logger = logging.getLogger(__name__)


def _filled(node: ir.Node, shape: np.ndarray) -> np.ndarray:
    value = node.attributes.get("value")
    fill = value.as_tensor().numpy().reshape(-1) if value is not None else np.zeros(1, np.float32)
    return np.full(tuple(int(dim) for dim in shape), fill[0], dtype=fill.dtype)


def _make_round(graph: ir.Graph, size_limit: int, notes: list[str]) -> tuple[int, int]:
    """Replaces each ConstantOfShape of a constant shape by a Constant of its value; (tensors, bytes) made."""
    made = made_bytes = 0
    for node in list(graph):
        if node.op_type != "ConstantOfShape" or node.domain not in ("", "ai.onnx"):
            continue
        shape_value = node.inputs[0]
        if shape_value is None or shape_value.const_value is None or shape_value.is_graph_input():
            notes.append(f"{node.name} (ConstantOfShape): not made: its shape is not constant")
            continue
        shape = shape_value.const_value.numpy()
        elements = int(np.prod(shape)) if shape.size else 1
        if elements > size_limit:
            notes.append(f"{node.name} (ConstantOfShape): not made: {elements} elements, over size_limit={size_limit}")
            continue
        array = _filled(node, shape)
        output = node.outputs[0]
        constant = ir.node("Constant", inputs=[], attributes={"value": ir.tensor(array, name=output.name)})
        ir.convenience.replace_nodes_and_values(graph, node, [node], [constant], [output], [constant.outputs[0]])
        made += 1
        made_bytes += array.nbytes
    return made, made_bytes


MAX_ROUNDS = 4  # folding can make another ConstantOfShape's shape constant: make, fold, again


def materialize_constants(model: ir.Model, *, size_limit: int = 1 << 28) -> PassReport:
    """In place; `size_limit` bounds the elements of any tensor made (1 GB of float32 by default)."""
    start = time.perf_counter()
    made = made_bytes = folded = 0
    for _ in range(MAX_ROUNDS):
        notes: list[str] = []  # the last round's: what stays a ConstantOfShape
        round_made, round_bytes = _make_round(model.graph, size_limit, notes)
        if not round_made:
            break
        made, made_bytes = made + round_made, made_bytes + round_bytes
        onnx_ir.passes.common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(model)
        folded += fold_constants(model).counts.get("nodes_folded", 0)
    for note in notes:
        logger.debug(note)
    return PassReport(model, name="materialize_constants",
                      counts={"tensors_made": made, "bytes_made": made_bytes, "nodes_folded_after": folded},
                      notes=notes, seconds=time.perf_counter() - start)
