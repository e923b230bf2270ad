import onnx
import pytest
from onnx import helper

from ortx.cli import main
from ortx.model_io import ModelLoadError
from ortx.optimize import optimize
from ortx.passes._report import PassError
from ortx.passes.validate_model import describe_structure, ort_max_opset, validate_model
from tests import _models
from tests.passes._helpers import to_ir


def _model(nodes, opset=17, extra_opsets=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)] + list(extra_opsets))
    model.ir_version = 10
    return model


CYCLE = _model([helper.make_node("Add", ["X", "b"], ["a"], name="add_a"),
                helper.make_node("Relu", ["a"], ["b"], name="relu_b"),
                helper.make_node("Identity", ["a"], ["Y"], name="out")])
DANGLING = _model([helper.make_node("Add", ["X", "nope"], ["Y"], name="add_dangling")])
UNKNOWN_DOMAIN = _model([helper.make_node("Frob", ["X"], ["Y"], name="frob", domain="com.example")],
                        extra_opsets=[helper.make_opsetid("com.example", 1)])


def test_cycle_and_dangling_input_name_the_nodes():
    with pytest.raises(ModelLoadError, match=r"nodes 'relu_b' -> 'add_a' -> 'relu_b' form a cycle"):
        optimize(CYCLE)
    with pytest.raises(ModelLoadError, match=r"node 'add_dangling' \(Add\) reads 'nope', which no node"):
        optimize(DANGLING)
    assert describe_structure(_models.resnet18_style(size=32).graph) is None


def test_unknown_domain_and_unrunnable_opsets_name_the_node():
    with pytest.raises(PassError, match=r"validate_model.*node 'frob' \(Frob\) is in domain 'com.example'") as raised:
        optimize(UNKNOWN_DOMAIN)
    assert raised.value.node == "frob"
    for opset in (5, ort_max_opset() + 1):
        with pytest.raises(PassError, match=rf"opset {opset}; onnxruntime .* runs opsets 7\.\.") as raised:
            optimize(_model([helper.make_node("Relu", ["X"], ["Y"], name="relu")], opset=opset))
        assert raised.value.node == "relu"


def test_valid_models_pass_unchanged():
    model = to_ir(_models.lstm_classifier())
    report = validate_model(model)
    assert not report.modified and report.counts == {}
    assert ort_max_opset() >= 17


def test_cli_reports_bad_input_and_writes_nothing(tmp_path, capsys):
    for name, proto in (("cycle", CYCLE), ("unknown", UNKNOWN_DOMAIN)):
        path, output = tmp_path / f"{name}.onnx", tmp_path / f"{name}_out.onnx"
        path.write_bytes(proto.SerializeToString())
        assert main(["optimize", str(path), "-o", str(output)]) == 2
        error = capsys.readouterr().err
        assert ("'relu_b'" in error) if name == "cycle" else ("'frob'" in error)
        assert not output.exists() and not list(tmp_path.glob(f"{name}_out*"))
