"""Requantization after a data-movement op removed: values already on an int8 grid stay on it when only moved.

Case 1:
Before: DequantizeLinear(xq, s, z) -> T -> QuantizeLinear(., s, z) -> DequantizeLinear(., s, z) -> readers
After:  DequantizeLinear(xq, s, z) -> T -> readers        (T: Reshape, Transpose, Squeeze, Unsqueeze, Flatten,
        Identity, or a chain of them; the QuantizeLinear stays while an int8 reader, e.g. a QConv, still reads it)
Case 2: Q(x, s, z) -> DQ -> T -> Q(., s, z)  ->  x -> T -> Q -> DQ -> Q: the pair sinks past T, or past a whole
        chain of them at once (elementwise on one grid, it commutes with moving values), only where a requantization
        on its grid follows, which Case 3 removes.
Case 3: DequantizeLinear(xq, s, z) -> QuantizeLinear(., s, z) -> readers  ->  xq -> readers.
Together they leave an attention's head merge (Transpose, Reshape) next to the attention, for
fuse_multi_head_attention.
Exact: T only moves values (x - z) * s, and Q then DQ with the same per-tensor s and z maps each back to itself
(|x - z| <= 255, so x * s / s rounds back to x). Quantizers put such pairs after every Reshape/Transpose of a
BERT-style attention (16 Q/DQ steps of OrtxEP's int8 BERT-like block).
Does not apply when: a scale or zero point is not a constant scalar (per-axis) or the two pairs' differ (in
value, dtype or the Quantize's output type); T's output (Case 1), a moved pair's output (Case 2) or a removed
Quantize's output (Case 3) is a graph output. Run after fuse_qdq (which reads the
DequantizeLinear feeding a QConv).
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
# Sweeps over the graph; one that changes nothing ends the pass (a pair sinks one data-movement op per sweep).
MAX_ROUNDS = 8


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


def _sinkable_pair(move: ir.Node) -> tuple[ir.Node, ir.Node] | None:
    """Case 2: (QuantizeLinear, DequantizeLinear) whose pair feeds `move` alone, else None."""
    dequantize = move.inputs[0].producer() if move.inputs and move.inputs[0] is not None else None
    if dequantize is None or dequantize.op_type != "DequantizeLinear" or dequantize.outputs[0].is_graph_output() \
            or len(dequantize.outputs[0].uses()) != 1:
        return None
    quantize = dequantize.inputs[0].producer()
    if quantize is None or quantize.op_type != "QuantizeLinear" or quantize.outputs[0].is_graph_output() \
            or len(quantize.outputs[0].uses()) != 1 or quantize.attributes.get_int("saturate", 1) != 1 \
            or not _same_grid(quantize, dequantize):
        return None
    last = _requantized_after(move, quantize)
    return (quantize, dequantize, last) if last is not None else None


def _requantized_after(move: ir.Node, quantize: ir.Node) -> ir.Node | None:
    """The last op of the chain of single-reader data-movement ops from `move` when the chain ends in a
    QuantizeLinear on `quantize`'s grid (where Case 3 then removes the sunk pair whole), else None."""
    node = move
    while True:
        output = node.outputs[0]
        readers = [use.node for use in output.uses()]
        if output.is_graph_output() or len(readers) != 1:
            return None
        reader = readers[0]
        if reader.op_type == "QuantizeLinear" and reader.domain == "":
            requantizes = reader.inputs[0] is output and _same_grid(quantize, reader) \
                and not reader.outputs[0].is_graph_output()
            return node if requantizes else None
        if reader.op_type not in DATA_MOVEMENT or reader.domain != "" or reader.inputs[0] is not output:
            return None
        node = reader


def _sink(graph: ir.Graph, move: ir.Node, quantize: ir.Node, dequantize: ir.Node, last: ir.Node) -> None:
    """x -> Q -> DQ -> move -> ... -> last -> readers  becomes  x -> move -> ... -> last -> Q -> DQ -> readers."""
    moved = last.outputs[0]
    moved.replace_all_uses_with(dequantize.outputs[0])
    move.replace_input_with(0, quantize.inputs[0])
    quantize.replace_input_with(0, moved)
    for value in (quantize.outputs[0], dequantize.outputs[0]):
        value.shape = moved.shape
    graph.remove([quantize, dequantize])  # unsafe: they keep their inputs and readers while they move
    graph.insert_after(last, [quantize, dequantize])


def _requantized_source(quantize: ir.Node) -> ir.Value | None:
    """Case 3: the integer tensor a QuantizeLinear re-creates from its DequantizeLinear on the same grid."""
    dequantize = quantize.inputs[0].producer() if quantize.inputs[0] is not None else None
    if dequantize is None or dequantize.op_type != "DequantizeLinear" or quantize.outputs[0].is_graph_output() \
            or quantize.attributes.get_int("saturate", 1) != 1 or not _same_grid(dequantize, quantize):
        return None
    source = dequantize.inputs[0]
    known = None not in (quantize.outputs[0].dtype, source.dtype)
    return source if not known or quantize.outputs[0].dtype == source.dtype else None


def remove_redundant_qdq(model: ir.Model) -> PassReport:
    start = time.perf_counter()
    graph = model.graph
    removed = moved = 0
    for _ in range(MAX_ROUNDS):
        changed = 0
        for move in [node for node in graph if node.op_type in DATA_MOVEMENT and node.domain == ""]:
            found = _removable_dequantizers(move)  # Case 1
            if found is not None:
                quantize, dequantizers = found
                for dequantize in dequantizers:
                    dequantize.outputs[0].replace_all_uses_with(move.outputs[0])
                    graph.remove(dequantize, safe=True)
                    changed += 1
                if not quantize.outputs[0].uses() and not quantize.outputs[0].is_graph_output():
                    graph.remove(quantize, safe=True)
                    changed += 1
                continue
            pair = _sinkable_pair(move)  # Case 2: past the whole chain at once, which stays together
            if pair is not None:
                _sink(graph, move, *pair)
                moved += 1
                changed += 1
        for quantize in [node for node in graph if node.op_type == "QuantizeLinear" and node.domain == ""]:
            source = _requantized_source(quantize)  # Case 3
            if source is not None:
                dequantize = quantize.inputs[0].producer()
                quantize.outputs[0].replace_all_uses_with(source)
                graph.remove(quantize, safe=True)
                changed += 1
                if not dequantize.outputs[0].uses() and not dequantize.outputs[0].is_graph_output():
                    graph.remove(dequantize, safe=True)
                    changed += 1
        removed += changed
        if not changed:
            break
    return PassReport(model, name="remove_redundant_qdq", counts={"nodes_removed": removed - moved,
                                                                  "pairs_moved": moved},
                      seconds=time.perf_counter() - start)
