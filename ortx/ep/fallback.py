"""The only place ONNX Runtime sub-sessions are made: segments OrtxEP declined run here.

Each segment becomes a standalone ONNX model (its nodes, the initializers they read, its boundary values as
inputs and outputs) run by `onnxruntime.InferenceSession` with the providers the user listed after OrtxEP.
Tensors cross the boundary without copies: inputs and statically shaped outputs are bound to ortx's buffers
with IOBinding; outputs of unknown shape are left to ORT to allocate and passed on as OrtValues.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime

from ortx.model_io import clamp_ir_version


def _referenced_names(node: onnx.NodeProto, names: set[str]) -> None:
    names.update(name for name in node.input if name)
    for attribute in node.attribute:
        subgraphs = list(attribute.graphs) + ([attribute.g] if attribute.HasField("g") else [])
        for subgraph in subgraphs:
            for inner in subgraph.node:
                _referenced_names(inner, names)


def segment_model(model: onnx.ModelProto, node_names: list[str], inputs: list[str], outputs: list[str]) -> onnx.ModelProto:
    """A standalone model of the named nodes of `model` (a serialized, shape-specialised model)."""
    nodes_by_name = {node.name: node for node in model.graph.node}
    nodes = [nodes_by_name[name] for name in node_names]
    referenced: set[str] = set()
    for node in nodes:
        _referenced_names(node, referenced)
    infos = {info.name: info for info in list(model.graph.value_info) + list(model.graph.input) +
             list(model.graph.output)}
    initializers = [tensor for tensor in model.graph.initializer if tensor.name in referenced]

    def info(name: str) -> onnx.ValueInfoProto:
        if name in infos:
            return infos[name]
        return onnx.helper.make_empty_tensor_value_info(name)

    graph = onnx.helper.make_graph(
        nodes, f"{model.graph.name}_segment", [info(name) for name in inputs], [info(name) for name in outputs],
        initializer=initializers,
        value_info=[infos[name] for name in sorted(referenced) if name in infos and name not in inputs],
    )
    segment = onnx.helper.make_model(graph, opset_imports=list(model.opset_import), functions=list(model.functions))
    segment.ir_version = model.ir_version
    return clamp_ir_version(segment)


class OrtSegment:
    """Runs one declined segment in a real onnxruntime.InferenceSession."""

    def __init__(self, model: onnx.ModelProto, sess_options, providers, provider_options):
        # The model is not kept: the session holds its own copy of the segment's weights.
        self.session = onnxruntime.InferenceSession(
            model.SerializeToString(), sess_options=sess_options, providers=providers,
            provider_options=provider_options,
        )
        self.input_names = [value.name for value in self.session.get_inputs()]
        self.output_names = [value.name for value in self.session.get_outputs()]

    def run(self, values: dict, preallocated: dict[str, np.ndarray], run_options=None) -> None:
        """Reads inputs from `values`, writes outputs into `preallocated` buffers or new OrtValues in `values`."""
        binding = self.session.io_binding()
        for name in self.input_names:
            value = values[name]
            if isinstance(value, np.ndarray) and value.dtype != object:
                binding.bind_input(name, "cpu", 0, value.dtype, list(value.shape), value.__array_interface__["data"][0])
            elif isinstance(value, np.ndarray):
                binding.bind_ortvalue_input(name, onnxruntime.OrtValue.ortvalue_from_numpy(value))
            else:
                binding.bind_ortvalue_input(name, value)
        unbound = []
        for name in self.output_names:
            buffer = preallocated.get(name)
            if buffer is not None:
                binding.bind_output(name, "cpu", 0, buffer.dtype, list(buffer.shape), buffer.__array_interface__["data"][0])
            else:
                binding.bind_output(name, "cpu")
                unbound.append(name)
        self.session.run_with_iobinding(binding, run_options)
        if unbound:
            produced = binding.get_outputs()
            for position, name in enumerate(self.output_names):
                if name in unbound:
                    values[name] = produced[position]
        for name, buffer in preallocated.items():
            values[name] = buffer


    def run_direct(self, feeds: dict, output_names: list[str], run_options=None) -> list:
        """`session.run` on the inputs it reads: no binding, ORT allocates the outputs (the plan's whole-model
        path, where no other step shares buffers)."""
        return self.session.run(output_names, {name: feeds[name] for name in self.input_names}, run_options)


def whole_model_session(model: onnx.ModelProto, sess_options, providers, provider_options):
    """Plain ORT for the whole model (OrtxEP not requested, or the model needs ORT end to end)."""
    return onnxruntime.InferenceSession(
        clamp_ir_version(model).SerializeToString(), sess_options=sess_options, providers=providers,
        provider_options=provider_options,
    )


def ir_to_proto(model: ir.Model) -> onnx.ModelProto:
    return ir.serde.serialize_model(model)
