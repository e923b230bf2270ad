import os

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime
import pytest
from onnx import helper, numpy_helper

from ortx import model_io
from tests import _models
from tests.tolerances import assert_close


def test_load_path_bytes_proto_returns_copies_and_leaves_file_untouched(tmp_path):
    proto = _models.tiny_conv_relu()
    path = tmp_path / "m.onnx"
    path.write_bytes(proto.SerializeToString())
    original_bytes = path.read_bytes()
    for source in (str(path), path, original_bytes, proto):
        model = model_io.load(source)
        assert model is not proto
        model.graph.node[0].name = "mutated"
    assert proto.graph.node[0].name != "mutated"
    assert path.read_bytes() == original_bytes


def test_clear_errors(tmp_path):
    with pytest.raises(model_io.ModelLoadError, match="does not exist"):
        model_io.load(tmp_path / "missing.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a protobuf \xff\xfe")
    with pytest.raises(model_io.ModelLoadError, match="junk.onnx.*is not an ONNX model"):
        model_io.load(junk)
    broken = _models.tiny_conv_relu()
    broken.graph.node[0].input[0] = "nowhere"
    with pytest.raises(model_io.ModelLoadError, match="fails onnx.checker.*nowhere"):
        model_io.load(broken)


def test_ir_clamp_is_accepted_by_onnxruntime():
    limit = model_io.ort_max_ir_version()
    assert 7 <= limit
    proto = _models.tiny_conv_relu()
    proto.ir_version = limit + 1  # what a newer onnx would write
    clamped = model_io.clamp_ir_version(proto)
    assert clamped.ir_version == limit and proto.ir_version == limit + 1
    session = onnxruntime.InferenceSession(model_io.to_ort_bytes(proto), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).uniform(0.1, 1, (1, 3, 8, 8)).astype(np.float32)
    assert session.run(None, {"X": x})[0].shape == (1, 4, 8, 8)
    older = _models.tiny_conv_relu()
    assert model_io.clamp_ir_version(older).ir_version == 10  # already readable: unchanged


def test_save_is_atomic_and_refuses_to_overwrite_input(tmp_path, monkeypatch):
    proto = _models.tiny_conv_relu()
    source = tmp_path / "in.onnx"
    source.write_bytes(proto.SerializeToString())
    with pytest.raises(model_io.ModelSaveError, match="refusing to overwrite"):
        model_io.save(proto, str(source), protect=str(source))
    target = tmp_path / "out.onnx"
    target.write_bytes(b"previous")

    # A crash while writing leaves the previous file and no temp files behind.
    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        model_io.save(proto, target)
    assert target.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx", "out.onnx"]
    monkeypatch.undo()
    model_io.save(proto, target)
    assert onnx.load(str(target)) == proto
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx", "out.onnx"]


def test_load_reads_external_data_beside_the_model_and_names_a_missing_file(tmp_path, monkeypatch):
    proto = _models.tiny_conv_relu()
    path = tmp_path / "external.onnx"
    onnx.save(_models.tiny_conv_relu(), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    monkeypatch.chdir(tmp_path.parent)  # the checker and the loader resolve weights.bin from the model's directory
    loaded = model_io.load(path)
    assert [numpy_helper.to_array(t).tolist() for t in loaded.graph.initializer] == \
        [numpy_helper.to_array(t).tolist() for t in proto.graph.initializer]
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(model_io.ModelLoadError, match="external.onnx.*weights.bin"):
        model_io.load(path)


def test_own_tensors_copies_every_tensor_out_of_the_proto():
    # An initializer, a Constant's tensor attribute, and both inside an If branch, plus a string initializer.
    then_branch = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.arange(3, dtype=np.float32))),
         helper.make_node("Add", ["c", "inner"], ["t"])], "then",
        [], [helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.full(3, 2, np.float32), "inner")])
    else_branch = helper.make_graph([helper.make_node("Identity", ["w"], ["e"])], "else", [],
                                    [helper.make_tensor_value_info("e", onnx.TensorProto.FLOAT, [3])])
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=then_branch, else_branch=else_branch)], "g",
        [helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.array([4, 5, 6], np.float32), "w"),
         numpy_helper.from_array(np.array([b"a", b"bc"], dtype=object), "names")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = ir.serde.deserialize_model(proto)
    copied = model_io.own_tensors(model)
    tensors = []
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        tensors += [a.value for a in node.attributes.values() if a.type == ir.AttributeType.TENSOR]
    for graph_ in model.graphs():
        tensors += [value.const_value for value in graph_.initializers.values()]
    assert len(tensors) == 4
    assert not [t for t in tensors if isinstance(t, ir.serde.TensorProtoTensor)]
    assert [t for t in tensors if isinstance(t, ir.StringTensor)][0].raw == [b"a", b"bc"]
    assert copied == 3 * 3 * 4 + 3
    del proto  # the model's tensors no longer read from it
    session = onnxruntime.InferenceSession(model_io.to_ort_bytes(model), providers=["CPUExecutionProvider"])
    assert session.run(None, {"cond": np.array(True)})[0].tolist() == [2, 3, 4]
    assert session.run(None, {"cond": np.array(False)})[0].tolist() == [4, 5, 6]


def _ir3_computed_weights() -> onnx.ModelProto:
    """IR version 3 (initializers listed as graph inputs, as it required): a Conv whose weight is ConstantOfShape of
    an initializer shape, as the ONNX backend's light model-zoo models hold their weights."""
    shape = onnx.numpy_helper.from_array(np.array([4, 3, 3, 3], np.int64), "w_shape")
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("ConstantOfShape", ["w_shape"], ["w"],
                               value=onnx.helper.make_tensor("v", onnx.TensorProto.FLOAT, [1], [0.125])),
         onnx.helper.make_node("Conv", ["X", "w"], ["Y"], pads=[1, 1, 1, 1])], "g",
        [onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, 3, 8, 8]),
         onnx.helper.make_tensor_value_info("w_shape", onnx.TensorProto.INT64, [4])],
        [onnx.helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])], [shape])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 9)])
    model.ir_version = 3
    onnx.checker.check_model(model)
    return model


def test_constant_initializers_of_ir3_models_leave_the_inputs():
    model = ir.serde.deserialize_model(_ir3_computed_weights())
    assert model_io.constant_initializers(model) == 1
    assert [value.name for value in model.graph.inputs] == ["X"] and model.ir_version == 4
    assert "w_shape" in model.graph.initializers
    onnx.checker.check_model(ir.serde.serialize_model(model))
    newer = ir.serde.deserialize_model(_ir3_computed_weights())
    newer.ir_version = 7  # from IR 4 a listed initializer is a default a feed may override: kept
    assert model_io.constant_initializers(newer) == 0 and len(newer.graph.inputs) == 2


def test_session_claims_convs_whose_weights_are_computed_constants():
    """An IR 3 model's initializer inputs are constants (as ORT reads them), and ConstantOfShape weights are made
    tensors in a session: the Conv runs on OrtxEP with ORT's outputs."""
    import ortx

    proto = _ir3_computed_weights()
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = ortx.InferenceSession(proto, options, providers=["OrtxEP", "CPUExecutionProvider"])
    assert [row.provider for row in session.assignment if row.op_type == "Conv"] == ["OrtxEP"]
    reference = onnxruntime.InferenceSession(model_io.to_ort_bytes(proto), options,
                                             providers=["CPUExecutionProvider"])
    assert_close(session.run(None, {"X": x})[0], reference.run(None, {"X": x})[0])
