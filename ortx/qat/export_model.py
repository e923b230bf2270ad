"""export: a calibrated (and fine-tuned) model from ortx.qat.prepare -> standard QDQ ONNX in ortx PTQ's structure.

1. torch.onnx.export (the torch.export-based exporter) of the model in mode "export": float weights, and each
   ActivationQuantizer as a marker node ortx.qat::ActivationQuantizer(x) carrying its scale and zero point.
2. Strip the markers (their consumers read x again), keeping {x: parameters}: a plain float graph.
3. Plan it with ortx.quantization.plan_quantization, the plan `ortx quantize` uses (so the QDQ structure is the
   same), leaving float the Conv/Gemm/MatMul nodes whose inputs the torch model did not fake-quantize; each
   scale group takes its members' trained parameters (when members disagree, e.g. two quantizers joined through
   a Concat, the union of their ranges, with a note: there the ONNX model differs from the torch one).
4. insert_qdq quantizes the float weights exactly as the torch model's weight quantizer did (max|w| / 127 per
   output channel) and the biases to int32; IR clamp for ORT; onnx.checker.
"""
from __future__ import annotations

import collections
import dataclasses
import os

import numpy as np
import onnx
import torch

from ortx.model_io import clamp_ir_version, save
from ortx.qat.fake_quant import MARKER_DOMAIN, MARKER_OP
from ortx.qat.prepare_model import activation_quantizers, set_mode
from ortx.quantization.insert_qdq import BiasRecord, WeightRecord, insert_qdq
from ortx.quantization.plan import Exclusion, QuantizationError, QuantizationPlan, plan_quantization
from ortx.quantization.scales import INT_LIMITS, QuantizationParameters, activation_parameters

QDQ_MIN_OPSET = 13  # per-channel DequantizeLinear


@dataclasses.dataclass
class ExportReport:
    tensors: dict[str, tuple[float, int]]      # quantized tensor -> (scale, zero point) written
    weights: list[WeightRecord]
    biases: list[BiasRecord]
    excluded: list[Exclusion]
    notes: list[str]
    counts: dict[str, int]


def _marker_parameters(node: onnx.NodeProto) -> QuantizationParameters:
    attributes = {attribute.name: onnx.helper.get_attribute_value(attribute) for attribute in node.attribute}
    dtype = "int8" if attributes["signed"] else "uint8"
    return QuantizationParameters(np.array(attributes["scale"], np.float32),
                                  np.array(attributes["zero_point"], np.dtype(dtype)))


def _same(first: QuantizationParameters, second: QuantizationParameters) -> bool:
    return (first.dtype == second.dtype and float(first.scale) == float(second.scale)
            and int(first.zero_point) == int(second.zero_point))


def strip_markers(model: onnx.ModelProto) -> dict[str, QuantizationParameters]:
    """Removes the ortx.qat marker nodes in place (readers of a marker read its input); returns input -> params."""
    graph = model.graph
    replaced, parameters = {}, {}
    kept = []
    for node in graph.node:
        if node.domain != MARKER_DOMAIN:
            kept.append(node)
            continue
        if node.op_type != MARKER_OP:
            raise QuantizationError(f"unknown {MARKER_DOMAIN} node '{node.name}' ({node.op_type})")
        source = replaced.get(node.input[0], node.input[0])
        marked = _marker_parameters(node)
        if source in parameters and not _same(parameters[source], marked):
            raise QuantizationError(f"tensor '{source}' has two activation quantizers with different parameters")
        parameters[source] = marked
        replaced[node.output[0]] = source
    for node in kept:
        for index, name in enumerate(node.input):
            node.input[index] = replaced.get(name, name)
    outputs = [output.name for output in graph.output if output.name in replaced]
    if outputs:
        raise QuantizationError(f"graph output(s) {', '.join(outputs)} come straight from an activation quantizer")
    del graph.node[:]
    graph.node.extend(kept)
    value_info = [value for value in graph.value_info if value.name not in replaced]
    del graph.value_info[:]
    graph.value_info.extend(value_info)
    opsets = [entry for entry in model.opset_import if entry.domain != MARKER_DOMAIN]
    del model.opset_import[:]
    model.opset_import.extend(opsets)
    return parameters


def _plan(model: onnx.ModelProto, marked: dict[str, QuantizationParameters]) -> tuple[QuantizationPlan, list]:
    """ortx's plan, minus the compute nodes the torch model left float; notes for marks ortx does not use."""
    first = plan_quantization(model)
    reads = collections.defaultdict(list)
    for tensor, uses in first.consumers.items():
        for node, _ in uses:
            reads[node].append(tensor)
    float_nodes = sorted(node for node in first.compute_nodes if not all(tensor in marked for tensor in reads[node]))
    for exclusion in first.excluded:
        node = next(node for node in model.graph.node if node.name == exclusion.node)
        inputs = [name for name in node.input if name in marked]
        if inputs:
            raise QuantizationError(f"the torch model fake-quantizes '{inputs[0]}', the input of ONNX node "
                                    f"'{exclusion.node}' ({exclusion.op_type}), which ortx cannot quantize: "
                                    f"{exclusion.reason}")
    plan = plan_quantization(model, exclude_nodes=float_nodes)
    plan.excluded = [Exclusion(record.node, record.op_type,
                               "left float: the torch model does not fake-quantize its inputs")
                     if record.node in float_nodes else record for record in plan.excluded]
    notes = [f"tensor '{tensor}' is fake-quantized in torch but read by no node ortx quantizes"
             for tensor in sorted(set(marked) - set(plan.consumers))]
    return plan, notes


def _group_parameters(plan: QuantizationPlan, marked: dict[str, QuantizationParameters], notes: list
                      ) -> dict[str, QuantizationParameters]:
    groups = {}
    for root in dict.fromkeys(plan.group_of.values()):
        members = [tensor for tensor in plan.members(root) if tensor in marked]
        if not members:
            raise QuantizationError(f"no activation quantizer covers the scale group of '{root}'")
        chosen = [marked[tensor] for tensor in members]
        if all(_same(chosen[0], other) for other in chosen[1:]):
            groups[root] = chosen[0]
            continue
        dtypes = {parameters.dtype for parameters in chosen}
        if len(dtypes) > 1:
            raise QuantizationError(f"tensors {', '.join(members)} share one scale in ONNX but were quantized as "
                                    f"{' and '.join(sorted(dtypes))}")
        q_min, q_max = INT_LIMITS[chosen[0].dtype]
        low = min((q_min - int(parameters.zero_point)) * float(parameters.scale) for parameters in chosen)
        high = max((q_max - int(parameters.zero_point)) * float(parameters.scale) for parameters in chosen)
        groups[root] = activation_parameters(low, high, chosen[0].dtype)
        notes.append(f"tensors {', '.join(members)} share one scale in ONNX but had different quantizers in torch: "
                     f"union of their ranges used (the ONNX model differs from the torch model there)")
    return groups


def export(model: torch.nn.Module, example_inputs, path: str | os.PathLike | None = None, *,
           input_names: list[str] | None = None, output_names: list[str] | None = None,
           dynamic_batch: bool = True) -> tuple[onnx.ModelProto, ExportReport]:
    """Returns (QDQ model, report) and saves the model to `path` when given. `example_inputs`: a tensor or a tuple
    of the model's inputs; `dynamic_batch` makes axis 0 of every input dynamic."""
    quantizers = activation_quantizers(model)
    if not quantizers:
        raise ValueError("the model has no activation quantizers: pass it through ortx.qat.prepare first")
    for quantizer in quantizers:
        quantizer.freeze_for_export()
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    dynamic_shapes = tuple({0: torch.export.Dim.DYNAMIC} for _ in inputs) if dynamic_batch else None
    was_training = model.training
    model.eval()
    set_mode(model, "export")
    try:
        program = torch.onnx.export(model, inputs, dynamo=True, verbose=False, input_names=input_names,
                                    output_names=output_names, dynamic_shapes=dynamic_shapes)
    finally:
        set_mode(model, "quantize")
        model.train(was_training)
    proto = program.model_proto
    marked = strip_markers(proto)
    opset = next((entry.version for entry in proto.opset_import if entry.domain in ("", "ai.onnx")), 0)
    if opset < QDQ_MIN_OPSET:
        raise QuantizationError(f"torch.onnx.export gave opset {opset}; QDQ with per-channel weights needs "
                                f">= {QDQ_MIN_OPSET}")
    from ortx.pipeline import name_nodes

    name_nodes(proto)
    plan, notes = _plan(proto, marked)
    parameters = _group_parameters(plan, marked, notes)
    bytes_before = proto.ByteSize()
    insertion = insert_qdq(proto, plan, parameters)
    proto = clamp_ir_version(proto)
    onnx.checker.check_model(proto)
    if path is not None:
        save(proto, path)
    tensors = {tensor: (float(parameters[root].scale), int(parameters[root].zero_point))
               for tensor, root in plan.group_of.items()}
    counts = {"nodes_quantized": len(plan.compute_nodes), "tensors_quantized": len(plan.tensors),
              "scale_groups": len(parameters), "weights_quantized": len(insertion.weights),
              "biases_int32": sum(record.int32 for record in insertion.biases),
              "qdq_nodes_added": insertion.nodes_added, "bytes_before": bytes_before,
              "bytes_after": proto.ByteSize()}
    return proto, ExportReport(tensors, insertion.weights, insertion.biases, plan.excluded, plan.notes + notes,
                               counts)

