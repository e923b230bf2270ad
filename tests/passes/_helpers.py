"""Shared helpers for pass tests: ORT runs on seeded non-zero inputs, op-type lists, text models."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime

from ortx.model_io import to_ort_bytes


def op_types(model: ir.Model | onnx.ModelProto) -> list[str]:
    if isinstance(model, ir.Model):
        return [node.op_type for node in model.graph]
    return [node.op_type for node in model.graph.node]


def feeds_for(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Non-zero floats: U[0.1, 1] with random signs, so sign-dependent activations see both branches."""
    rng = np.random.default_rng(seed)
    initializers = {tensor.name for tensor in model.graph.initializer}
    feeds = {}
    for graph_input in model.graph.input:
        if graph_input.name in initializers:
            continue
        shape = [dim.dim_value for dim in graph_input.type.tensor_type.shape.dim]
        values = rng.uniform(0.1, 1.0, shape) * rng.choice([-1.0, 1.0], shape)
        feeds[graph_input.name] = values.astype(np.float32)
    return feeds


def run_ort(model: ir.Model | onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(to_ort_bytes(model), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_same_outputs(model: ir.Model | onnx.ModelProto, proto: onnx.ModelProto, seed: int = 0) -> None:
    """Every output of `model` (after a pass) close to the original `proto`'s in ORT, on feeds_for(proto)."""
    from tests.tolerances import assert_close

    feeds = feeds_for(proto, seed)
    for got, want in zip(run_ort(model, feeds), run_ort(proto, feeds), strict=True):
        assert_close(got, want)


def float_model(nodes, x_shape, y_shape, initializers, name: str = "g") -> onnx.ModelProto:
    """A float32 model of `nodes` from graph input X to graph output Y (opset 17, IR 9: ORT reads it)."""
    graph = onnx.helper.make_graph(nodes, name,
                                   [onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, list(x_shape))],
                                   [onnx.helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, list(y_shape))],
                                   initializers)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def from_text(text: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def to_ir(model: onnx.ModelProto) -> ir.Model:
    return ir.serde.deserialize_model(model)


def ortx_session(model: onnx.ModelProto, threads: int):
    """An ortx.InferenceSession on `model`: OrtxEP (tuning off, so only the session's own fusions and kernels
    decide) then ORT's CPU EP, at `threads` intra-op threads."""
    import ortx

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return ortx.InferenceSession(model.SerializeToString(), options, providers=["OrtxEP", "CPUExecutionProvider"],
                                 provider_options=[{"tuning": "off"}, {}])
