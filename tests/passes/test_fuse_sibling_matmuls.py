import numpy as np
import onnx
from onnx import helper, numpy_helper

from ortx.passes._report import check_model
from ortx.passes.fuse_sibling_matmuls import fuse_sibling_matmuls
from tests import _models
from tests.passes._helpers import feeds_for, op_types, run_ort, to_ir
from tests.tolerances import assert_close


def test_attention_projections_merge_with_biases():
    proto = _models.transformer_block(seq=5, dim=12, heads=3)  # 5, 12: no vector-width multiples
    model = to_ir(proto)
    report = fuse_sibling_matmuls(model)
    assert report.counts == {"groups_merged": 1, "nodes_removed": 3}
    assert op_types(model)[:4] == ["LayerNormalization", "MatMul", "Add", "Split"]
    check_model(model)
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def _two_matmuls() -> onnx.ModelProto:
    """Y1 = X @ W1 + B1 and b = X @ W2 (no bias: only the MatMuls can merge)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["X", "W1"], ["a"], name="mm1"),
             helper.make_node("MatMul", ["X", "W2"], ["b"], name="mm2"),
             helper.make_node("Add", ["a", "B1"], ["Y1"], name="add1")]
    outputs = [helper.make_tensor_value_info("Y1", onnx.TensorProto.FLOAT, [2, 5]),
               helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [2, 3])]
    initializers = [numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "W1"),
                    numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W2"),
                    numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "B1")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [2, 4])],
                              outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def test_without_matching_biases_only_the_matmuls_merge():
    proto = _two_matmuls()
    model = to_ir(proto)
    report = fuse_sibling_matmuls(model)
    assert op_types(model) == ["MatMul", "Split", "Add"] and report.counts["nodes_removed"] == 0
    assert [value.name for value in model.graph.outputs] == ["Y1", "b"]
    feeds = feeds_for(proto)
    for actual, expected in zip(run_ort(model, feeds), run_ort(proto, feeds)):
        assert_close(actual, expected)


def test_matmuls_reading_different_inputs_do_not_merge():
    proto = _two_matmuls()
    proto.graph.node[1].input[0] = "X2"
    proto.graph.input.append(helper.make_tensor_value_info("X2", onnx.TensorProto.FLOAT, [2, 4]))
    model = to_ir(proto)
    assert not fuse_sibling_matmuls(model).modified and op_types(model) == ["MatMul", "MatMul", "Add"]


def test_idempotent():
    model = to_ir(_models.transformer_block(seq=5, dim=12, heads=3))
    assert fuse_sibling_matmuls(model).modified and not fuse_sibling_matmuls(model).modified
