"""Questions lowerings ask of a graph value: its static shape, dtype and constant value.

Compiled segments are shape-specialised, so every value a lowering touches has a static shape; a value
without one is a capability failure, reported by name.
"""
from __future__ import annotations

import numpy as np
import onnx_ir as ir


class NotStatic(ValueError):
    """A value's shape or dtype is not known statically; the message names the value."""


def static_shape(value: ir.Value) -> tuple[int, ...]:
    shape = value.shape
    if shape is None:
        raise NotStatic(f"tensor {value.name!r} has no inferred shape")
    dims = []
    for dim in shape:
        if not isinstance(dim, int) or dim < 0:  # some exporters write -1 for a dynamic dim
            raise NotStatic(f"tensor {value.name!r} has dynamic shape {shape}")
        dims.append(dim)
    return tuple(dims)


def numpy_dtype(value: ir.Value) -> np.dtype:
    if value.dtype is None:
        raise NotStatic(f"tensor {value.name!r} has no inferred dtype")
    return np.dtype(value.dtype.numpy())


def constant_value(value: ir.Value | None) -> np.ndarray | None:
    """The value as numpy when it is an initializer or Constant output, else None."""
    if value is None:
        return None
    if value.const_value is not None:
        return value.const_value.numpy()
    producer = value.producer()
    if producer is not None and producer.op_type == "Constant" and producer.domain in ("", "ai.onnx"):
        attribute = producer.attributes.get("value")
        if attribute is not None:
            return attribute.as_tensor().numpy()
    return None


def present(node: ir.Node, index: int) -> ir.Value | None:
    """Input `index` of node, or None when absent or given as the empty name."""
    if index >= len(node.inputs):
        return None
    return node.inputs[index]


def attribute(node: ir.Node, name: str, default=None):
    attr = node.attributes.get(name)
    if attr is None:
        return default
    return attr.value


def size_bytes(value: ir.Value) -> int:
    return int(np.prod(static_shape(value), dtype=np.int64)) * numpy_dtype(value).itemsize


def opset_version(node: ir.Node) -> int:
    """The default-domain opset the node was written for (its own version, else its graph's import)."""
    if node.version is not None:
        return int(node.version)
    graph = node.graph
    if graph is not None:
        for domain in ("", "ai.onnx"):
            if domain in graph.opset_imports:
                return int(graph.opset_imports[domain])
    return 1


def string_attribute(node: ir.Node, name: str, default: str) -> str:
    value = attribute(node, name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def is_used(value: ir.Value | None) -> bool:
    """Whether an output is read by a node or is a graph output (optional outputs may be unnamed)."""
    return value is not None and value.name != "" and (bool(value.uses()) or value.is_graph_output())
