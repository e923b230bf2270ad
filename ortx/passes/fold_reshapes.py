"""Chains of Reshape/Squeeze/Unsqueeze/Flatten folded into one Reshape to the chain's final static shape.

Before: x -> Unsqueeze(axes) -> Reshape(s) -> Flatten -> y          (y's shape static, e.g. [1, 192])
After:  x -> Reshape([1, 192]) -> y
Every op of the family only reinterprets the row-major element order, so any chain of them equals one Reshape to
the last output's shape. Does not apply when: the last output's shape is not fully static (run infer_shapes
first; a chain with dynamic dims keeps its form); a single op, not a chain (no node would be saved);
an intermediate is read elsewhere (that reader keeps its node; the rewritten node still reads x directly).
"""
from __future__ import annotations

import logging
import time

import numpy as np
import onnx_ir as ir

from ortx.passes._report import PassReport, record_fused_from, unique_initializer_name

logger = logging.getLogger(__name__)

RESHAPE_FAMILY = ("Reshape", "Squeeze", "Unsqueeze", "Flatten")


def _in_family(node: ir.Node | None) -> bool:
    return node is not None and node.op_type in RESHAPE_FAMILY and node.domain in ("", "ai.onnx") \
        and bool(node.inputs) and node.inputs[0] is not None


def _static_shape(value: ir.Value) -> tuple[int, ...] | None:
    if value.shape is None or not all(isinstance(dim, int) for dim in value.shape):
        return None
    return tuple(value.shape)


def _shape_initializer(graph: ir.Graph, shape: tuple[int, ...], cache: dict) -> ir.Value:
    if shape not in cache:
        name = unique_initializer_name(graph, "reshape_shape_" + "x".join(map(str, shape)))
        value = ir.Value(name=name, const_value=ir.tensor(np.array(shape, np.int64), name=name))
        graph.register_initializer(value)
        cache[shape] = value
    return cache[shape]


def fold_reshapes(model: ir.Model) -> PassReport:
    start = time.perf_counter()
    graph = model.graph
    notes: list[str] = []
    shapes: dict[tuple[int, ...], ir.Value] = {}
    folded = removed = 0
    for node in list(graph):
        if node.graph is not graph or not _in_family(node) or not _in_family(node.inputs[0].producer()):
            continue
        target = _static_shape(node.outputs[0])
        if target is None:
            notes.append(f"{node.name} ({node.op_type}): chain not folded: output shape is not static")
            continue
        first = node.inputs[0].producer()
        source = first.inputs[0]
        replacement = ir.node("Reshape", [source, _shape_initializer(graph, target, shapes)], name=node.name)
        replacement.outputs[0].shape = node.outputs[0].shape
        replacement.outputs[0].type = node.outputs[0].type
        record_fused_from(replacement, [first, node])
        ir.convenience.replace_nodes_and_values(graph, node, [node], [replacement], node.outputs,
                                                replacement.outputs)
        folded += 1
        # The chain's earlier link goes when nothing else reads it; a later link then sees `source` directly.
        if not first.outputs[0].uses() and not first.outputs[0].is_graph_output():
            graph.remove(first, safe=True)
            removed += 1
    for name, value in shapes.items():
        if not value.uses():
            del graph.initializers[value.name]
    for note in notes:
        logger.debug(note)
    return PassReport(model, name="fold_reshapes", counts={"chains_folded": folded, "nodes_removed": removed},
                      notes=notes, seconds=time.perf_counter() - start)
