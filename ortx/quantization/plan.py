"""Which tensors get QuantizeLinear/DequantizeLinear, which share a scale, and which nodes are left in float.

1. Compute nodes (Conv, Gemm, MatMul) not excluded by name or op type: each float activation input is quantized
   (per tensor) and each float initializer input is a weight (per output channel: axis 0 of a Conv weight, the N
   axis of a Gemm/MatMul B; per tensor for an initializer A of MatMul). A Conv/Gemm bias initializer becomes int32
   when its weight is per-channel along the bias axis (Gemm: also alpha = beta = 1 and a 1-D bias of N values).
2. Backward through PASS_THROUGH_OPS (MaxPool, Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Identity): their
   output values are a subset of their input's, so when the output is quantized the input is too, with the same
   scale; DequantizeLinear -> op -> QuantizeLinear with equal parameters then changes nothing, so the op runs in
   int8 with no requantization (ORT drops such pairs itself).
3. Backward through Concat: all float inputs join the output's scale (one shared scale: the concat is a copy).
   AVERAGING_OPS (AveragePool, GlobalAveragePool) grow the set the same way: an average lies within its inputs'
   range, so the input is quantized with the output's scale (as onnxruntime's quantizer does) and
   DQ -> pool -> Q runs as one int8 kernel (fuse_qdq's QAveragePool; it still rounds, unlike the ops above).
4. Relu joins the scale of its input when both its input and its output are quantized (its output values are on
   the input's grid). A Relu whose input is not otherwise quantized (Conv -> Relu -> Conv) only has its output
   quantized: no Q/DQ pair sits between Conv and Relu, so an int8 Conv can apply the Relu before requantizing.
Only the consumers above read a DequantizeLinear output; every other consumer (residual Add, excluded nodes,
graph outputs) keeps reading the float tensor. Limits: no int8 Add/Mul (issue #5); weights that
are not initializers (computed or Constant-node weights) are left float with a note.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable

import onnx

COMPUTE_OPS = ("Conv", "Gemm", "MatMul")
PASS_THROUGH_OPS = ("MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity")
AVERAGING_OPS = ("AveragePool", "GlobalAveragePool")
SCALE_SHARING_OPS = PASS_THROUGH_OPS + AVERAGING_OPS + ("Relu",)


class QuantizationError(ValueError):
    """The model or the options cannot be quantized as asked; the message says which node or option."""


@dataclasses.dataclass(frozen=True)
class WeightUse:
    node: str
    input_index: int
    initializer: str
    axis: int | None


@dataclasses.dataclass(frozen=True)
class BiasUse:
    node: str
    input_index: int
    initializer: str
    weight: WeightUse
    activation: str


@dataclasses.dataclass(frozen=True)
class Exclusion:
    node: str
    op_type: str
    reason: str


@dataclasses.dataclass
class QuantizationPlan:
    compute_nodes: list[str]
    consumers: dict[str, list[tuple[str, int]]]   # quantized tensor -> (node, input index) that read its DQ output
    group_of: dict[str, str]                      # quantized tensor -> the tensor naming its shared scale
    weights: list[WeightUse]
    biases: list[BiasUse]
    excluded: list[Exclusion]
    notes: list[str]

    @property
    def tensors(self) -> list[str]:
        return list(self.consumers)

    def members(self, root: str) -> list[str]:
        return [tensor for tensor, group in self.group_of.items() if group == root]


class _Groups:
    """Union-find over tensor names; the root of a group is its first tensor added."""

    def __init__(self):
        self.parent: dict[str, str] = {}

    def add(self, name: str) -> None:
        self.parent.setdefault(name, name)

    def find(self, name: str) -> str:
        while self.parent[name] != name:
            self.parent[name] = self.parent[self.parent[name]]
            name = self.parent[name]
        return name

    def union(self, first: str, second: str) -> None:
        self.add(first)
        self.add(second)
        root_first, root_second = self.find(first), self.find(second)
        if root_first != root_second:
            self.parent[root_second] = root_first


def _element_types(model: onnx.ModelProto) -> dict[str, int]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # onnx raises InferenceError and others; types then come from declared value infos only
        inferred = model
    types = {}
    graph = inferred.graph
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        if value.type.tensor_type.elem_type:
            types[value.name] = value.type.tensor_type.elem_type
    for tensor in graph.initializer:
        types[tensor.name] = tensor.data_type
    return types


class _Graph:
    def __init__(self, model: onnx.ModelProto):
        graph = model.graph
        self.nodes = {node.name: node for node in graph.node}
        self.producer = {output: node for node in graph.node for output in node.output if output}
        self.initializers = {tensor.name: tensor for tensor in graph.initializer}
        self.types = _element_types(model)

    def is_float_activation(self, name: str) -> bool:
        if not name or name in self.initializers:
            return False
        producer = self.producer.get(name)
        if producer is not None and producer.op_type == "Constant":
            return False
        return self.types.get(name, onnx.TensorProto.FLOAT) == onnx.TensorProto.FLOAT

    def float_initializer(self, name: str) -> onnx.TensorProto | None:
        tensor = self.initializers.get(name)
        return tensor if tensor is not None and tensor.data_type == onnx.TensorProto.FLOAT else None


def _attribute(node: onnx.NodeProto, name: str, default):
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def _weight_axis(node: onnx.NodeProto, index: int, rank: int) -> int | None:
    """The output-channel axis of the weight at input `index`; None (per tensor) when there is none."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "Gemm":
        if index == 0:
            return None
        return 0 if _attribute(node, "transB", 0) else 1
    return rank - 1 if index == 1 and rank >= 2 else None  # MatMul: B is [..., K, N]


def _plan_compute_node(graph: _Graph, node: onnx.NodeProto, seeds: dict, weights: list, biases: list,
                       excluded: list) -> None:
    activations, node_weights = [], {}
    for index in (0, 1):
        name = node.input[index]
        tensor = graph.float_initializer(name)
        conv_weight = node.op_type == "Conv" and index == 1
        if tensor is not None and (conv_weight or node.op_type != "Conv"):
            node_weights[index] = WeightUse(node.name, index, name, _weight_axis(node, index, len(tensor.dims)))
        elif graph.is_float_activation(name) and not conv_weight:
            activations.append((index, name))
        else:
            excluded.append(Exclusion(node.name, node.op_type, f"input {index} '{name}' is neither a float "
                                      "activation nor a float initializer (Constant-node or non-float weight)"))
            return
    for index, name in activations:
        seeds.setdefault(name, []).append((node.name, index))
    weights.extend(node_weights.values())
    if len(node.input) > 2 and node.input[2] and node.op_type in ("Conv", "Gemm") and 1 in node_weights \
            and activations and activations[0][0] == 0:
        weight = node_weights[1]
        bias = graph.float_initializer(node.input[2])
        weight_tensor = graph.initializers[weight.initializer]
        channels = weight_tensor.dims[weight.axis] if weight.axis is not None else None
        gemm_plain = node.op_type == "Conv" or (_attribute(node, "alpha", 1.0) == 1.0
                                                 and _attribute(node, "beta", 1.0) == 1.0)
        if bias is not None and list(bias.dims) == [channels] and gemm_plain:
            biases.append(BiasUse(node.name, 2, node.input[2], weight, activations[0][1]))


def plan_quantization(model: onnx.ModelProto, *, exclude_nodes: Iterable[str] = (),
                      exclude_op_types: Iterable[str] = ()) -> QuantizationPlan:
    """The plan for `model`, whose nodes all have unique names."""
    graph = _Graph(model)
    exclude_nodes, exclude_op_types = set(exclude_nodes), set(exclude_op_types)
    unknown = sorted(exclude_nodes - set(graph.nodes))
    if unknown:
        raise QuantizationError(f"excluded node name(s) {', '.join(map(repr, unknown))} not in the model")
    excluded: list[Exclusion] = []
    skipped: set[str] = set()
    for node in model.graph.node:
        if node.name in exclude_nodes:
            excluded.append(Exclusion(node.name, node.op_type, "excluded by name"))
            skipped.add(node.name)
        elif node.op_type in exclude_op_types:
            excluded.append(Exclusion(node.name, node.op_type, "excluded by op type"))
            skipped.add(node.name)
    seeds: dict[str, list[tuple[str, int]]] = {}
    weights: list[WeightUse] = []
    biases: list[BiasUse] = []
    compute_nodes = []
    for node in model.graph.node:
        if node.op_type in COMPUTE_OPS and node.name not in skipped:
            before = len(excluded)
            _plan_compute_node(graph, node, seeds, weights, biases, excluded)
            if len(excluded) == before:
                compute_nodes.append(node.name)
    consumers, groups = _share_scales(graph, seeds, skipped)
    notes = [f"op type {op_type!r} excluded but not in the model"
             for op_type in sorted(exclude_op_types - {node.op_type for node in model.graph.node})]
    return QuantizationPlan(compute_nodes, consumers, {tensor: groups.find(tensor) for tensor in consumers},
                            weights, biases, excluded, notes)


def _share_scales(graph: _Graph, seeds: dict, skipped: set[str]) -> tuple[dict, _Groups]:
    """Steps 2-4 of the module docstring: grows the quantized set backward and unites tensors sharing a scale."""
    consumers = {tensor: list(uses) for tensor, uses in seeds.items()}
    groups = _Groups()
    for tensor in consumers:
        groups.add(tensor)
    worklist = list(consumers)
    while worklist:
        tensor = worklist.pop()
        producer = graph.producer.get(tensor)
        if producer is None or producer.name in skipped:
            continue
        if producer.op_type in PASS_THROUGH_OPS + AVERAGING_OPS:
            sources = [(0, producer.input[0])]
        elif producer.op_type == "Concat":
            sources = list(enumerate(producer.input))
        else:
            continue
        for index, source in sources:
            if not graph.is_float_activation(source):
                continue
            if source not in consumers:
                consumers[source] = []
                worklist.append(source)
            if (producer.name, index) not in consumers[source]:
                consumers[source].append((producer.name, index))
            groups.union(tensor, source)
    for node in graph.nodes.values():  # step 4: Relu (and the pass-through ops) between two quantized tensors
        if node.op_type in SCALE_SHARING_OPS and node.name not in skipped and node.input[0] in consumers \
                and node.output[0] in consumers:
            if (node.name, 0) not in consumers[node.input[0]]:
                consumers[node.input[0]].append((node.name, 0))
            groups.union(node.input[0], node.output[0])
    return consumers, groups
