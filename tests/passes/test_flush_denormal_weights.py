import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper, numpy_helper

from ortx.passes.flush_denormal_weights import flush_denormal_weights
from tests.passes._helpers import feeds_for, op_types, run_ort, to_ir
from tests.tolerances import assert_close

TINY = np.finfo(np.float32).tiny


def _conv(weight: np.ndarray, *, weight_as_input: bool = False) -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["X", "W", "B"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["Y"], name="relu")]
    inputs = [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, 8, 5, 5])]
    if weight_as_input:
        inputs.append(helper.make_tensor_value_info("W", onnx.TensorProto.FLOAT, list(weight.shape)))
    bias = np.array([TINY / 4, -TINY / 8, 0.5, 0.25], np.float32)  # two subnormals in the bias too
    graph = helper.make_graph(nodes, "conv", inputs,
                              [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [1, 4, 5, 5])],
                              initializer=[numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _weight_with_subnormals(rng) -> tuple[np.ndarray, np.ndarray]:
    weight = rng.uniform(-1, 1, (4, 8, 1, 1)).astype(np.float32)
    subnormal = rng.random(weight.shape) < 0.3
    weight[subnormal] = (rng.uniform(-1, 1, int(subnormal.sum())) * TINY).astype(np.float32)
    weight[0, 0, 0, 0] = -TINY / 2  # a negative one keeps its sign as -0.0
    subnormal[0, 0, 0, 0] = True
    weight.flat[1] = TINY  # the smallest normal itself stays
    subnormal.flat[1] = False
    return weight, subnormal


def test_subnormal_weights_become_signed_zeros_and_the_rest_is_unchanged():
    rng = np.random.default_rng(0)
    weight, subnormal = _weight_with_subnormals(rng)
    proto = _conv(weight)
    model = to_ir(proto)
    report = flush_denormal_weights(model)
    assert report.counts == {"initializers_changed": 2, "values_flushed": int(subnormal.sum()) + 2}
    assert op_types(model) == ["Conv", "Relu"]
    flushed = model.graph.initializers["W"].const_value.numpy()
    assert np.all(flushed[subnormal] == 0) and np.all(np.signbit(flushed[subnormal]) == np.signbit(weight[subnormal]))
    np.testing.assert_array_equal(flushed[~subnormal], weight[~subnormal])
    assert model.graph.initializers["B"].const_value.numpy().tolist() == [0.0, -0.0, 0.5, 0.25]
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])
    assert report.notes[0].startswith("W: ")
    assert not flush_denormal_weights(model).modified  # idempotent


def test_normal_weights_and_overridable_initializers_are_left_alone():
    rng = np.random.default_rng(1)
    plain = to_ir(_conv(rng.uniform(-1, 1, (4, 8, 1, 1)).astype(np.float32)))
    plain.graph.initializers["B"].const_value = ir.tensor(np.array([1, 2, 3, 4], np.float32), name="B")
    assert not flush_denormal_weights(plain).modified
    weight, _ = _weight_with_subnormals(rng)
    overridable = to_ir(_conv(weight, weight_as_input=True))
    report = flush_denormal_weights(overridable)
    assert report.counts["initializers_changed"] == 1  # the bias only: W is a graph input
    np.testing.assert_array_equal(overridable.graph.initializers["W"].const_value.numpy(), weight)
