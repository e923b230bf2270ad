"""What an OrtxEP session holds while it is built: each weight once, no ModelProto, no graph a stage dropped.

benchmarks/memory.py measures the peak RSS these keep down (a few MiB under ORT's on the small models); these
tests catch a regression without measuring RSS: weak references to the arrays and graphs that must be freed.
"""
import gc
import platform
import weakref

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import ortx
from ortx import model_io, pipeline
from ortx.memory.release import between_passes, release_freed_memory, return_free_pages
from tests import _models


def _conv_bn_conv(seed: int = 0) -> onnx.ModelProto:
    """X -> Conv -> BatchNormalization -> Relu -> Conv (bias) -> Y: the first weight is replaced when the
    BatchNormalization is folded, the second is kept as given."""
    builder = _models.GraphBuilder("conv_bn_conv", seed)
    y = builder.node("Relu", [builder.batchnorm(builder.conv("X", 8, 16, 3), 16)])
    builder.conv(y, 16, 8, 3, bias=True)
    builder.nodes[-1].output[0] = "Y"
    return builder.finish([_models._float_input("X", [1, 8, 12, 12])], [_models._float_input("Y", [1, 8, 12, 12])])


def test_weights_a_pass_replaced_are_freed_and_the_others_kept():
    model = pipeline.proto_to_ir(model_io.load(_conv_bn_conv()))
    arrays = {name: weakref.ref(value.const_value.numpy()) for name, value in model.graph.initializers.items()}
    prepared = pipeline.prepare_model(model)
    gc.collect()
    assert [node.op_type for node in prepared.model.graph] == ["Conv", "Relu", "Conv"]
    alive = {name for name, array in arrays.items() if array() is not None}
    used = set(prepared.model.graph.initializers)
    # The second Conv's weight and bias are used as loaded; the first's weight and the BatchNormalization's four
    # vectors were replaced by folded copies, and nothing may keep them (onnx_ir's graph-input counter did).
    assert alive == used & set(arrays) and len(alive) == 2
    assert len(arrays) - len(alive) == 5


def test_infer_shapes_leaves_no_initializer_alive_through_the_graph():
    from ortx.passes.infer_shapes import infer_shapes

    model = pipeline.proto_to_ir(model_io.load(_models.tiny_conv_relu()))
    name = next(iter(model.graph.initializers))
    array = weakref.ref(model.graph.initializers[name].const_value.numpy())
    infer_shapes(model)  # onnx_ir's shape inference lists the initializers as graph inputs while onnx infers
    model.graph.node(0).replace_input_with(1, None)
    model.graph.initializers.pop(name)
    gc.collect()
    assert array() is None


def test_session_keeps_no_model_proto_and_owns_its_tensors():
    proto = _models.tiny_conv_relu()
    session = ortx.InferenceSession(proto.SerializeToString(), providers=["OrtxEP", "CPUExecutionProvider"])
    assert not [name for name, value in vars(session).items() if isinstance(value, onnx.ModelProto)]
    model = session._prepared.model
    tensors = [value.const_value for value in model.graph.initializers.values()]
    tensors += [attribute.value for node in model.graph for attribute in node.attributes.values()
                if attribute.type == ir.AttributeType.TENSOR]
    assert tensors and not [t for t in tensors if isinstance(t, ir.serde.TensorProtoTensor)]
    meta = session.get_modelmeta()
    assert meta.producer_name == proto.producer_name and meta.graph_name == proto.graph.name
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)
    reference = ortx.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"X": x})[0], reference.run(None, {"X": x})[0], rtol=1e-5,
                               atol=1e-6)


def test_ort_segments_keep_no_model_proto():
    from ortx.ep.runtime import OrtStep

    session = ortx.InferenceSession(_models.lstm_classifier().SerializeToString(),
                                    providers=["OrtxEP", "CPUExecutionProvider"])
    steps = [step for step in next(iter(session._compiled.values())).plan.steps if isinstance(step, OrtStep)]
    assert steps  # the LSTM runs on ORT
    for step in steps:  # the ORT session holds the segment's weights; a proto beside it would hold them twice
        assert not [name for name, value in vars(step.segment).items() if isinstance(value, onnx.ModelProto)]


def test_a_graph_a_pass_replaced_is_collected_after_the_pass():
    model = pipeline.proto_to_ir(model_io.load(_models.tiny_conv_relu()))
    after_pass = between_passes(model)
    old = weakref.ref(model.graph)
    nodes = [weakref.ref(node) for node in model.graph]
    gc.disable()  # only the hook may collect the old graph's cycles
    try:
        replacement = ir.serde.deserialize_model(ir.serde.serialize_model(model))
        model.graph = replacement.graph  # as upgrade_opset does
        del replacement
        after_pass()
        assert old() is None and all(node() is None for node in nodes)
    finally:
        gc.enable()


@pytest.mark.parametrize("nodes, collects", [(1, False), (70, True)])
def test_release_collects_only_graphs_worth_a_collection(monkeypatch, nodes, collects):
    builder = _models.GraphBuilder("chain", 0)
    y = "X"
    for _ in range(nodes):
        y = builder.node("Relu", [y])
    builder.nodes[-1].output[0] = "Y"
    model = pipeline.proto_to_ir(builder.finish([_models._float_input("X", [4])], [_models._float_input("Y", [4])]))
    calls = []
    monkeypatch.setattr(gc, "collect", lambda *args: calls.append(args) or 0)
    release_freed_memory(model)
    assert bool(calls) == collects


def test_free_pages_are_returned_where_the_c_library_can():
    assert return_free_pages() == (platform.libc_ver()[0] == "glibc")
