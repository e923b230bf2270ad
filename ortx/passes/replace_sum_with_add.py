"""Two-input Sum -> Add (the same sum, bit for bit), so the fusions that match Add see it.

Before: Conv -> Sum(conv, shortcut) -> Relu       After: Conv -> Add(conv, shortcut) -> Relu
Exporters of old opsets write residual additions as Sum (the ONNX backend's light ResNet-50: 16 of them, each left
as a Sum and a Relu beside its Conv on OrtxEP, where an Add and the Relu fuse into the Conv's epilogue).
Does not apply to: a Sum of one input or of three or more (a note each), Sum outside the default domain.
"""
from __future__ import annotations

import logging
import time

import onnx_ir as ir

from ortx.passes._report import PassReport

logger = logging.getLogger(__name__)


def replace_sum_with_add(model: ir.Model) -> PassReport:
    start = time.perf_counter()
    graph = model.graph
    notes: list[str] = []
    replaced = 0
    for node in list(graph):
        if node.op_type != "Sum" or node.domain not in ("", "ai.onnx"):
            continue
        if len(node.inputs) != 2 or any(value is None for value in node.inputs):
            notes.append(f"{node.name} (Sum): not replaced: {len(node.inputs)} inputs, not 2")
            continue
        output = node.outputs[0]
        add = ir.node("Add", inputs=list(node.inputs), name=node.name, metadata_props=dict(node.metadata_props))
        ir.convenience.replace_nodes_and_values(graph, node, [node], [add], [output], [add.outputs[0]])
        replaced += 1
    for note in notes:
        logger.debug(note)
    return PassReport(model, name="replace_sum_with_add", counts={"sums_replaced": replaced}, notes=notes,
                      seconds=time.perf_counter() - start)
