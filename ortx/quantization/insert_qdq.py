"""Writes a QuantizationPlan into the graph as standard QDQ ONNX (opset >= 13).

Before: x -> Conv(W, B) -> ...
After:  x -> QuantizeLinear -> DequantizeLinear -> Conv(DequantizeLinear(W_int8, axis 0),
        DequantizeLinear(B_int32, axis 0)) -> ...
One QuantizeLinear/DequantizeLinear pair per quantized tensor, placed right after its producer, read only by the
consumers the plan lists; tensors of one group share their scale and zero-point initializers. Weights are stored
as int8 (the float initializer is removed when nothing else reads it). A bias stays float, with a note, when
int32 cannot hold it at scale input x weight (a near-zero weight channel next to a large bias).
"""
from __future__ import annotations

import collections
import dataclasses

import numpy as np
import onnx
from onnx import numpy_helper

from ortx.quantization.plan import QuantizationPlan
from ortx.quantization.scales import (INT_LIMITS, WEIGHT_LIMIT, QuantizationParameters, bias_parameters,
                                      quantize, weight_parameters)


@dataclasses.dataclass
class WeightRecord:
    name: str
    nodes: list[str]
    axis: int | None
    channels: int
    max_abs: float
    scale_min: float
    scale_max: float
    note: str = ""


@dataclasses.dataclass
class BiasRecord:
    name: str
    node: str
    int32: bool
    note: str = ""


@dataclasses.dataclass
class Insertion:
    weights: list[WeightRecord]
    biases: list[BiasRecord]
    nodes_added: int


class _Names:
    """Fresh tensor/node names: `base`, else `base_1`, `base_2` ... avoiding every name already in the graph."""

    def __init__(self, graph: onnx.GraphProto):
        self.taken = {name for node in graph.node for name in [node.name, *node.input, *node.output]}
        self.taken |= {tensor.name for tensor in graph.initializer}
        self.taken |= {value.name for value in [*graph.input, *graph.output, *graph.value_info]}

    def fresh(self, base: str) -> str:
        name, suffix = base, 0
        while name in self.taken:
            suffix += 1
            name = f"{base}_{suffix}"
        self.taken.add(name)
        return name


def _dequantize_node(names: _Names, source: str, quantized: str, scale: str, zero_point: str | None,
                     axis: int | None) -> tuple[onnx.NodeProto, str]:
    output = names.fresh(f"{source}_dequantized")
    inputs = [quantized, scale] + ([zero_point] if zero_point else [])
    attributes = {"axis": axis} if axis is not None else {}
    node = onnx.helper.make_node("DequantizeLinear", inputs, [output], name=names.fresh(f"{source}_DequantizeLinear"),
                                 **attributes)
    return node, output


def _names_read(graph: onnx.GraphProto) -> set[str]:
    read = {output.name for output in graph.output}
    for node in graph.node:
        read.update(node.input)
        for attribute in node.attribute:
            for subgraph in ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)):
                read |= _names_read(subgraph)
    return read


def insert_qdq(model: onnx.ModelProto, plan: QuantizationPlan,
               activation_parameters: dict[str, QuantizationParameters]) -> Insertion:
    """Rewrites `model` in place; `activation_parameters` maps each group root of the plan to its parameters."""
    graph = model.graph
    names = _Names(graph)
    nodes = {node.name: node for node in graph.node}
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    added: list[onnx.TensorProto] = []
    front: list[onnx.NodeProto] = []                       # DQ of weights and biases, and Q/DQ of graph inputs
    after = collections.defaultdict(list)                  # tensor -> its Q/DQ nodes, placed after its producer

    group_initializers = {}
    for root, parameters in activation_parameters.items():
        scale, zero_point = names.fresh(f"{root}_scale"), names.fresh(f"{root}_zero_point")
        added += [numpy_helper.from_array(parameters.scale, scale),
                  numpy_helper.from_array(parameters.zero_point, zero_point)]
        group_initializers[root] = (scale, zero_point)
    producers = {output for node in graph.node for output in node.output}
    for tensor, uses in plan.consumers.items():
        scale, zero_point = group_initializers[plan.group_of[tensor]]
        quantized = names.fresh(f"{tensor}_quantized")
        quantize_node = onnx.helper.make_node("QuantizeLinear", [tensor, scale, zero_point], [quantized],
                                              name=names.fresh(f"{tensor}_QuantizeLinear"))
        dequantize_node, dequantized = _dequantize_node(names, tensor, quantized, scale, zero_point, None)
        (after[tensor] if tensor in producers else front).extend([quantize_node, dequantize_node])
        for node_name, index in uses:
            nodes[node_name].input[index] = dequantized

    weight_records, weight_outputs, weight_parameters_of = {}, {}, {}
    for use in plan.weights:
        key = (use.initializer, use.axis)
        if key not in weight_outputs:
            values = numpy_helper.to_array(initializers[use.initializer])
            parameters = weight_parameters(values, use.axis)
            quantized = names.fresh(f"{use.initializer}_quantized")
            scale, zero_point = names.fresh(f"{use.initializer}_scale"), names.fresh(f"{use.initializer}_zero_point")
            added += [numpy_helper.from_array(quantize(values, parameters, limits=(-WEIGHT_LIMIT, WEIGHT_LIMIT)),
                                              quantized),
                      numpy_helper.from_array(parameters.scale, scale),
                      numpy_helper.from_array(parameters.zero_point, zero_point)]
            node, weight_outputs[key] = _dequantize_node(names, use.initializer, quantized, scale, zero_point,
                                                         use.axis)
            front.append(node)
            weight_parameters_of[key] = parameters
            max_abs = float(np.max(np.abs(values))) if values.size else 0.0
            weight_records[key] = WeightRecord(
                use.initializer, [], use.axis, int(parameters.scale.size), max_abs,
                float(parameters.scale.min()), float(parameters.scale.max()),
                "all-zero channel(s): scale floored at MIN_SCALE" if parameters.floored else "")
        weight_records[key].nodes.append(use.node)
        nodes[use.node].input[use.input_index] = weight_outputs[key]

    bias_records = []
    for use in plan.biases:
        weight = weight_parameters_of[(use.weight.initializer, use.weight.axis)]
        parameters = bias_parameters(activation_parameters[plan.group_of[use.activation]].scale, weight.scale)
        values = numpy_helper.to_array(initializers[use.initializer]).astype(np.float64)
        scaled = np.rint(values / parameters.scale.astype(np.float64))
        low, high = INT_LIMITS["int32"]
        if not np.all(parameters.scale > 0) or not np.all((scaled >= low) & (scaled <= high)):
            bias_records.append(BiasRecord(use.initializer, use.node, False,
                                           "kept float: int32 cannot hold bias / (input scale x weight scale)"))
            continue
        quantized, scale = names.fresh(f"{use.initializer}_quantized"), names.fresh(f"{use.initializer}_scale")
        added += [numpy_helper.from_array(scaled.astype(np.int32), quantized),
                  numpy_helper.from_array(parameters.scale, scale)]
        node, output = _dequantize_node(names, use.initializer, quantized, scale, None, 0)
        front.append(node)
        nodes[use.node].input[use.input_index] = output
        bias_records.append(BiasRecord(use.initializer, use.node, True))

    ordered = list(front)
    for node in graph.node:
        ordered.append(node)
        for output in node.output:
            ordered.extend(after.get(output, ()))
    nodes_added = len(ordered) - len(graph.node)
    del graph.node[:]
    graph.node.extend(ordered)
    graph.initializer.extend(added)
    _remove_unread_initializers(graph, {use.initializer for use in [*plan.weights, *plan.biases]})
    return Insertion(list(weight_records.values()), bias_records, nodes_added)


def _remove_unread_initializers(graph: onnx.GraphProto, candidates: set[str]) -> None:
    read = _names_read(graph)
    unread = candidates - read
    kept = [tensor for tensor in graph.initializer if tensor.name not in unread]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    inputs = [value for value in graph.input if value.name not in unread]
    del graph.input[:]
    graph.input.extend(inputs)
