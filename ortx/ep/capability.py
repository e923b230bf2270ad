"""Which nodes OrtxEP claims, and why it declines the others.

A node is claimed when its (domain, op_type) has a lowering whose check passes and every tensor it reads or
writes has a static shape and a known dtype after shape specialisation. The reason for a decline names the op,
input or attribute at fault, e.g. "LSTM: op not supported" or "dynamic shape on input 0 ('x')".
"""
from __future__ import annotations

import dataclasses

import onnx_ir as ir

from ortx.ep.compile_nodes import check_node
from ortx.ep.lowering._values import NotStatic, numpy_dtype, static_shape

ORTX = "OrtxEP"


@dataclasses.dataclass(frozen=True)
class Decision:
    node: str
    op_type: str
    claimed: bool
    reason: str = ""


def _static_reason(node: ir.Node) -> str | None:
    for kind, values in (("input", node.inputs), ("output", node.outputs)):
        for index, value in enumerate(values):
            if value is None:
                continue
            if value.type is not None and not isinstance(value.type, ir.TensorType):
                return f"{kind} {index} ({value.name!r}) is not a tensor"
            try:
                static_shape(value)
                numpy_dtype(value)
            except NotStatic:
                return f"dynamic shape on {kind} {index} ({value.name!r})"
    return None


def decide(node: ir.Node) -> Decision:
    if any(attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for attr in node.attributes.values()):
        return Decision(node.name, node.op_type, False, f"{node.op_type}: control flow runs on ONNX Runtime")
    reason = _static_reason(node)
    if reason is None:
        try:
            reason = check_node(node)
        except NotStatic as error:
            reason = str(error)
    return Decision(node.name, node.op_type, reason is None, reason or "")


def assign(graph: ir.Graph) -> dict[str, Decision]:
    """One decision per node, keyed by node name (names are made unique when the model is prepared)."""
    return {node.name: decide(node) for node in graph}
