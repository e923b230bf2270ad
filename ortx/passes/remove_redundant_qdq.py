"""Requantization after a data-movement op removed: values already on an int8 grid stay on it when only moved.

Before: DequantizeLinear(xq, s, z) -> T -> QuantizeLinear(., s, z) -> DequantizeLinear(., s, z) -> readers
After:  DequantizeLinear(xq, s, z) -> T -> readers        (T: Reshape, Transpose, Squeeze, Unsqueeze, Flatten,
        Identity, or a chain of them; the QuantizeLinear stays while an int8 reader, e.g. a QConv, still reads it)
Exact: T only moves values (x - z) * s, and Q then DQ with the same per-tensor s and z maps each back to itself
(|x - z| <= 255, so x * s / s rounds back to x). Quantizers put such pairs after every Reshape/Transpose of a
BERT-style attention (about 20 steps of OrtxEP's int8 BERT-like block).
Does not apply when: a scale or zero point is not a constant scalar (per-axis) or the two pairs' differ (in
value, dtype or the Quantize's output type); T's output has another reader or is a graph output; the last
DequantizeLinear's output is a graph output. Run after fuse_qdq (which reads the DequantizeLinear feeding a QConv).
"""
from __future__ import annotations

import logging
import time

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter._ir_utils import get_numpy_value

from ortx.passes._report import PassReport

logger = logging.getLogger(__name__)

DATA_MOVEMENT = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"})


def _parameters(node: ir.Node) -> tuple | None:
    """(scale, zero point or None, zero-point dtype) of a per-tensor Q/DQ with constant parameters, else None."""
    values = []
    for index in (1, 2):
        value = node.inputs[index] if len(node.inputs) > index else None
        if value is None:
            values.append(None)
            continue
        array = None if value.is_graph_input() else get_numpy_value(value)
        if array is None or array.size != 1:
            return None
        values.append(array)
    scale, zero = values
    if scale is None:
        return None
    zero_dtype = zero.dtype if zero is not None else np.dtype(np.uint8)  # ONNX: no zero point means uint8 zero 0
    return scale.astype(np.float32).reshape(()).tobytes(), 0 if zero is None else int(zero.reshape(())), zero_dtype


def _same_grid(first: ir.Node, second: ir.Node) -> bool:
    a, b = _parameters(first), _parameters(second)
    return a is not None and a == b


def _grid_source(move: ir.Node) -> ir.Node | None:
    """The DequantizeLinear whose values `move` moves, through a chain of data-movement ops (already rid of their
    own pairs: the graph is visited in order)."""
    node = move
    while node is not None and node.op_type in DATA_MOVEMENT and node.domain == "":
        value = node.inputs[0] if node.inputs else None
        node = value.producer() if value is not None else None
    return node if node is not None and node.op_type == "DequantizeLinear" else None


def _removable_dequantizers(move: ir.Node) -> tuple[ir.Node, list[ir.Node]] | None:
    """(the QuantizeLinear after `move`, its DequantizeLinear readers on the same grid) or None."""
    source = _grid_source(move)
    output = move.outputs[0]
    if source is None or source.op_type != "DequantizeLinear" or output.is_graph_output():
        return None
    readers = [use.node for use in output.uses()]
    if len(readers) != 1 or readers[0].op_type != "QuantizeLinear" or readers[0].inputs[0] is not output:
        return None
    quantize = readers[0]
    if quantize.attributes.get_int("saturate", 1) != 1 or not _same_grid(source, quantize) \
            or None not in (quantize.outputs[0].dtype, source.inputs[0].dtype) \
            and quantize.outputs[0].dtype != source.inputs[0].dtype:  # unknown types: the zero points' decided
        return None
    dequantizers = [use.node for use in quantize.outputs[0].uses()
                    if use.node.op_type == "DequantizeLinear" and use.idx == 0 and _same_grid(source, use.node)
                    and not use.node.outputs[0].is_graph_output()]
    return (quantize, dequantizers) if dequantizers else None


def remove_redundant_qdq(model: ir.Model) -> PassReport:
    start = time.perf_counter()
    graph = model.graph
    removed = 0
    for move in [node for node in graph if node.op_type in DATA_MOVEMENT and node.domain == ""]:
        found = _removable_dequantizers(move)
        if found is None:
            continue
        quantize, dequantizers = found
        for dequantize in dequantizers:
            dequantize.outputs[0].replace_all_uses_with(move.outputs[0])
            graph.remove(dequantize, safe=True)
            removed += 1
        if not quantize.outputs[0].uses() and not quantize.outputs[0].is_graph_output():
            graph.remove(quantize, safe=True)
            removed += 1
    return PassReport(model, name="remove_redundant_qdq", counts={"nodes_removed": removed},
                      seconds=time.perf_counter() - start)
