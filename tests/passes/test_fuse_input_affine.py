"""fuse_input_affine: Mul/Add by per-channel constants before a Conv folded into its weights and bias."""
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from ortx.passes.fuse_input_affine import fuse_input_affine
from tests.passes._helpers import feeds_for, op_types, run_ort, to_ir
from tests.tolerances import assert_close

CIN, COUT, H, W = 6, 4, 7, 9


def _model(ops: str, *, pads=(0, 0, 0, 0), group=1, kernel=1, scale_shape=(1, CIN, 1, 1), shift_shape=(CIN, 1, 1),
           extra_consumer=False, seed=0) -> onnx.ModelProto:
    """X -> Relu -> [Mul m] -> [Add a] -> Conv(W, B) -> Y; the Relu keeps the affine from being the graph input."""
    rng = np.random.default_rng(seed)
    initializers = [
        numpy_helper.from_array(rng.standard_normal((COUT, CIN // group, kernel, kernel)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(COUT).astype(np.float32), "b"),
        numpy_helper.from_array(rng.uniform(0.5, 2.0, scale_shape).astype(np.float32), "m"),
        numpy_helper.from_array(rng.standard_normal(shift_shape).astype(np.float32), "a"),
    ]
    nodes = [helper.make_node("Relu", ["X"], ["r"], name="relu")]
    current = "r"
    if "Mul" in ops:
        nodes.append(helper.make_node("Mul", [current, "m"], ["scaled"], name="mul"))
        current = "scaled"
    if "Add" in ops:
        nodes.append(helper.make_node("Add", ["a", current], ["shifted"], name="add"))  # constant first: commuted
        current = "shifted"
    nodes.append(helper.make_node("Conv", [current, "w", "b"], ["Y"], name="conv", pads=list(pads), group=group,
                                  kernel_shape=[kernel, kernel]))
    outputs = [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)]
    if extra_consumer:
        outputs.append(helper.make_tensor_value_info(current, onnx.TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "input_affine", [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT,
                                                                                     [1, CIN, H, W])],
                              outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _check(proto, expected_ops, counts):
    model = to_ir(proto)
    report = fuse_input_affine(model)
    assert op_types(model) == expected_ops
    assert report.counts["affines_folded"] == counts
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])
    return model, report


@pytest.mark.parametrize("ops", ["MulAdd", "Mul", "Add"])
@pytest.mark.parametrize("group,kernel", [(1, 1), (2, 1), (1, 3), (2, 3)])
def test_folds_into_an_unpadded_conv(ops, group, kernel):
    proto = _model(ops, group=group, kernel=kernel, pads=(0, 0, 0, 0))
    model, report = _check(proto, ["Relu", "Conv"], 1)
    conv = list(model.graph)[-1]
    assert conv.metadata_props["ortx.fused_from"].split(",") == [n.name for n in proto.graph.node[1:]]
    assert "bytes_saved" in report.counts


def test_scalar_constants_fold():
    _check(_model("MulAdd", scale_shape=(), shift_shape=(1,)), ["Relu", "Conv"], 1)


def test_a_lone_mul_folds_into_a_padded_conv_but_an_add_does_not():
    _check(_model("Mul", pads=(1, 1, 1, 1), kernel=3), ["Relu", "Conv"], 1)
    model, report = _check(_model("MulAdd", pads=(1, 1, 1, 1), kernel=3), ["Relu", "Mul", "Add", "Conv"], 0)
    assert any("pads its input" in note for note in report.notes)


def test_does_not_fire_when_the_affine_output_is_also_read_elsewhere():
    _check(_model("MulAdd", extra_consumer=True), ["Relu", "Mul", "Add", "Conv"], 0)


def test_a_scale_that_is_not_per_channel_stays_and_the_shift_still_folds():
    model, report = _check(_model("MulAdd", scale_shape=(1, CIN, H, 1)), ["Relu", "Mul", "Conv"], 1)
    assert any("constant 'm' is not per input channel" in note for note in report.notes), report.notes


def test_idempotent():
    model = to_ir(_model("MulAdd"))
    assert fuse_input_affine(model).modified
    assert not fuse_input_affine(model).modified
