"""Dead-code elimination: Identity and inference Dropout bypassed; unused nodes and initializers removed.

Before: x -> Identity -> y (graph output); Dropout(x) -> Relu; Conv whose output nobody reads; unused weights.
After:  x's producer writes y directly (x renamed to y); Relu(x); the Conv and the weights are gone.
Does not apply to: Dropout with a training_mode that is not a constant False or whose mask is read; an Identity or
Dropout that would join a graph input, initializer or second graph output to a graph output (kept: ONNX needs a
node there); graph inputs (the model's interface is never changed). Only the main graph is rewritten.
"""
from __future__ import annotations

import logging
import time

import numpy as np
import onnx_ir as ir

from ortx.passes._report import PassReport

logger = logging.getLogger(__name__)


def _dropout_reason(node: ir.Node) -> str | None:
    """Why this Dropout is not a no-op at inference, or None when it is."""
    if len(node.outputs) > 1 and node.outputs[1].uses():
        return "its mask output is read"
    if len(node.outputs) > 1 and node.outputs[1].is_graph_output():
        return "its mask output is a graph output"
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        training_mode = node.inputs[2].const_value
        if training_mode is None:
            return "training_mode is not a constant"
        if bool(np.asarray(training_mode.numpy()).item()):
            return "training_mode is true"
    return None


def _bypass(graph: ir.Graph, node: ir.Node) -> str | None:
    """Makes the node's consumers read its input instead; returns why it could not, or None when removed."""
    source, target = node.inputs[0], node.outputs[0]
    if source is None:
        return "it has no input"
    if target.is_graph_output():
        # Case: the graph output must keep its name. Rename the source to it, which is only possible when the
        # source is a plain intermediate value (a graph input or initializer has its own fixed name; a value
        # already a graph output cannot take a second name).
        if source.is_graph_input() or source.is_initializer() or source.is_graph_output() or source.producer() is None:
            return "it joins a graph input, initializer or another graph output to a graph output"
        output_name = target.name
        target.replace_all_uses_with(source, replace_graph_outputs=True)
        graph.remove(node, safe=True)
        if source.type is None:
            source.type = target.type
        if source.shape is None:
            source.shape = target.shape
        source.name = output_name
        return None
    target.replace_all_uses_with(source)
    graph.remove(node, safe=True)
    return None


def _remove_unused_nodes(graph: ir.Graph) -> int:
    """Reverse topological sweep: a node none of whose outputs is read or is a graph output is removed."""
    removed = 0
    for node in reversed(list(graph)):
        if any(output.uses() or output.is_graph_output() for output in node.outputs):
            continue
        graph.remove(node, safe=True)
        removed += 1
    return removed


def _remove_unused_initializers(graph: ir.Graph) -> tuple[int, int]:
    removed = bytes_saved = 0
    for name, value in list(graph.initializers.items()):
        if value.uses() or value.is_graph_output() or value.is_graph_input():
            continue
        del graph.initializers[name]
        removed += 1
        bytes_saved += value.const_value.nbytes if value.const_value is not None else 0
    return removed, bytes_saved


def eliminate_dead_code(model: ir.Model) -> PassReport:
    start = time.perf_counter()
    graph = model.graph
    notes: list[str] = []
    counts = {"identities_removed": 0, "dropouts_removed": 0}
    for node in list(graph):
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Identity", "Dropout"):
            continue
        reason = _dropout_reason(node) if node.op_type == "Dropout" else None
        if reason is None:
            reason = _bypass(graph, node)
        if reason is None:
            counts["identities_removed" if node.op_type == "Identity" else "dropouts_removed"] += 1
        else:
            notes.append(f"{node.name} ({node.op_type}): kept: {reason}")
    counts["nodes_removed"] = _remove_unused_nodes(graph)
    counts["initializers_removed"], counts["bytes_saved"] = _remove_unused_initializers(graph)
    for note in notes:
        logger.debug(note)
    return PassReport(model, name="eliminate_dead_code", counts=counts, notes=notes,
                      seconds=time.perf_counter() - start)
