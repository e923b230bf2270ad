import numpy as np
import onnx
from onnx import helper, numpy_helper

from ortx.passes.eliminate_common_subexpressions import eliminate_common_subexpressions
from ortx.passes.share_initializers import share_initializers
from tests.passes._helpers import feeds_for, op_types, run_ort, to_ir
from tests.tolerances import assert_close


def _two_branches(*, same_weights: bool, as_input: bool = False) -> onnx.ModelProto:
    """Y = MatMul(X, W1) + MatMul(X, W2): with W1 == W2 the second MatMul is a common subexpression."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((5, 7)).astype(np.float32)
    other = weight if same_weights else rng.standard_normal((5, 7)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["X", "W1"], ["a"], name="mm1"),
             helper.make_node("MatMul", ["X", "W2"], ["b"], name="mm2"),
             helper.make_node("Add", ["a", "b"], ["Y"], name="add")]
    inputs = [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [3, 5])]
    if as_input:  # an overridable initializer must keep its own identity
        inputs.append(helper.make_tensor_value_info("W2", onnx.TensorProto.FLOAT, [5, 7]))
    graph = helper.make_graph(nodes, "two", inputs, [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [3, 7])],
                              initializer=[numpy_helper.from_array(weight, "W1"), numpy_helper.from_array(other, "W2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def test_shares_equal_weights_then_cse_merges_the_matmuls():
    proto = _two_branches(same_weights=True)
    model = to_ir(proto)
    report = share_initializers(model)
    assert report.counts == {"initializers_shared": 1, "bytes_saved": 5 * 7 * 4}
    assert list(model.graph.initializers) == ["W1"]
    cse = eliminate_common_subexpressions(model)
    assert op_types(model) == ["MatMul", "Add"] and cse.counts == {"nodes_removed": 1}
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_different_or_overridable_weights_are_not_shared():
    for proto in (_two_branches(same_weights=False), _two_branches(same_weights=True, as_input=True)):
        model = to_ir(proto)
        assert not share_initializers(model).modified
        assert not eliminate_common_subexpressions(model).modified
        assert op_types(model) == ["MatMul", "MatMul", "Add"]


def test_cse_keeps_both_graph_output_names():
    proto = _two_branches(same_weights=True)
    proto.graph.output.append(helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [3, 7]))
    proto.graph.output.append(helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [3, 7]))
    model = to_ir(proto)
    share_initializers(model)
    eliminate_common_subexpressions(model)
    assert [value.name for value in model.graph.outputs] == ["Y", "b", "a"]
    feeds = feeds_for(proto)
    for actual, expected in zip(run_ort(model, feeds), run_ort(proto, feeds)):
        assert_close(actual, expected)


def test_idempotent():
    model = to_ir(_two_branches(same_weights=True))
    assert share_initializers(model).modified and eliminate_common_subexpressions(model).modified
    assert not share_initializers(model).modified and not eliminate_common_subexpressions(model).modified
