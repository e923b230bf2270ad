"""Constants made concrete for a session: ConstantOfShape of a constant shape -> an initializer holding its value.

Before: shape (initializer [64, 3, 7, 7]) -> ConstantOfShape(value=0.02) -> Conv's weight
After:  an initializer [64, 3, 7, 7] of 0.02 -> Conv's weight
In a session's passes only (SESSION_PASSES), not in `ortx optimize`'s levels: in memory the kernels need their
weights constant (a Conv whose weight is computed stays on ORT, and OrtxEP's nodes around it split the graph into
many segments: the ONNX backend's light ResNet-50, whose 239 weights are ConstantOfShape, ran at 2.9x ORT's time in
98 segments), where in a file the tensors would only grow the model (fold_constants keeps ConstantOfShape for that
reason). Does not apply to: a shape that is not constant, or a tensor over `size_limit` elements (a note each).
"""
from __future__ import annotations

import logging
import time

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common

from ortx.passes._report import PassReport

logger = logging.getLogger(__name__)


def _filled(node: ir.Node, shape: np.ndarray) -> np.ndarray:
    value = node.attributes.get("value")
    fill = value.as_tensor().numpy().reshape(-1) if value is not None else np.zeros(1, np.float32)
    return np.full(tuple(int(dim) for dim in shape), fill[0], dtype=fill.dtype)


def materialize_constants(model: ir.Model, *, size_limit: int = 1 << 28) -> PassReport:
    """In place; `size_limit` bounds the elements of any tensor made (1 GB of float32 by default)."""
    start = time.perf_counter()
    graph = model.graph
    notes: list[str] = []
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
    if made:
        onnx_ir.passes.common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(model)
    for note in notes:
        logger.debug(note)
    return PassReport(model, name="materialize_constants", counts={"tensors_made": made, "bytes_made": made_bytes},
                      notes=notes, seconds=time.perf_counter() - start)
