"""prune_channels: shapes after removing channels through BN, activations, depthwise Convs, residual Adds and a
Flatten -> Gemm head; the pruned model equals the dense model with the removed channels' reader weights zero
(checked in ORT); spaces that cannot be pruned are left alone with a note; a second run changes nothing."""
import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper

from ortx.passes.infer_shapes import infer_shapes
from ortx.passes.prune_channels import prune_channels
from tests import _models
from tests.passes._helpers import feeds_for, op_types, run_ort, to_ir
from tests.tolerances import assert_close


def _residual(seed: int = 0, *, concat: bool = False) -> onnx.ModelProto:
    """X[1,3,10,10] -> Conv A (3->12) -> BN -> Relu -> depthwise 3x3 -> Conv B (12->12, bias) -> Add(relu_A) -> Relu
    -> Conv C (12->10) -> GlobalAveragePool -> Flatten -> Gemm (10->5) -> Y. With concat, A's space also feeds a
    Concat (which channel pruning does not rewrite)."""
    builder = _models.GraphBuilder("residual", seed)
    a = builder.node("Relu", [builder.batchnorm(builder.conv("X", 3, 12, 3), 12)])
    depthwise = builder.conv(a, 12, 12, 3, group=12, bias=True)
    b = builder.conv(depthwise, 12, 12, 1, bias=True)
    joined = builder.node("Relu", [builder.node("Add", [b, a])])
    c = builder.conv(joined, 12, 10, 3)
    flat = builder.node("Flatten", [builder.node("GlobalAveragePool", [c])], axis=1)
    builder.gemm(flat, 10, 5)
    builder.nodes[-1].output[0] = "Y"
    outputs = [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [1, 5])]
    if concat:
        builder.node("Concat", [a, joined], axis=1)
        builder.nodes[-1].output[0] = "Z"
        outputs.append(helper.make_tensor_value_info("Z", onnx.TensorProto.FLOAT, [1, 24, 10, 10]))
    return builder.finish([helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, 3, 10, 10])], outputs)


def _shaped(proto) -> ir.Model:
    model = to_ir(proto)
    infer_shapes(model)
    return model


def _weight(model, name):
    return next(node for node in model.graph if node.name == name).inputs[1].const_value.numpy()


def test_prunes_through_bn_depthwise_residual_add_and_a_gemm_head():
    proto = _residual()
    model = _shaped(proto)
    convs = [node.name for node in model.graph if node.op_type == "Conv"]  # A, depthwise, B, C
    dense = {name: _weight(model, name) for name in convs + ["gemm_17"] if any(n.name == name for n in model.graph)}
    report = prune_channels(model, ratio=0.5)
    assert op_types(model) == op_types(proto)
    shapes = {name: _weight(model, name).shape for name in convs}
    assert shapes[convs[0]] == (6, 3, 3, 3)  # A: the space {A, B} (joined by the Add) keeps 6 of 12
    assert shapes[convs[1]] == (6, 1, 3, 3)  # depthwise follows, group 6
    assert next(n for n in model.graph if n.name == convs[1]).attributes["group"].as_int() == 6
    assert shapes[convs[2]] == (6, 6, 1, 1)  # B: in and out
    assert shapes[convs[3]] == (5, 6, 3, 3)  # C: its own space (10 -> 5) and A/B's as input
    gemm = next(node for node in model.graph if node.op_type == "Gemm")
    assert gemm.inputs[1].const_value.shape == (5, 5)
    assert report.counts["channels_removed"] == 6 + 5 and report.counts["spaces_pruned"] == 2
    onnx.checker.check_model(ir.serde.serialize_model(model), full_check=True)

    # The dense model with the removed channels' reader weights zero computes the same: find the kept channels from
    # A's surviving filters and C's, and zero every reader's input slice of the removed ones.
    def kept(before, after):
        return [next(i for i in range(before.shape[0]) if np.array_equal(before[i], row)) for row in after]

    dense_model = to_ir(proto)
    kept_ab = kept(_weight(dense_model, convs[0]), _weight(model, convs[0]))
    kept_c = kept(_weight(dense_model, convs[3])[:, kept_ab], _weight(model, convs[3]))  # C: both axes sliced
    assert kept_ab == sorted(kept_ab) and len(kept_ab) == 6
    for node in dense_model.graph:
        readers = {convs[2]: (1, kept_ab), convs[3]: (1, kept_ab)}
        if node.op_type == "Gemm":
            readers[node.name] = (1, kept_c)
        if node.name in readers:
            axis, keep = readers[node.name]
            array = node.inputs[1].const_value.numpy().copy()
            removed = [i for i in range(array.shape[axis]) if i not in keep]
            np.moveaxis(array, axis, 0)[removed] = 0
            node.inputs[1].const_value = ir.Tensor(array, name=node.inputs[1].name)
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(dense_model, feeds)[0])
    assert not prune_channels(model, ratio=0.5).modified  # idempotent: the spaces are marked as pruned


def test_a_space_that_reaches_concat_or_a_graph_output_is_left_whole():
    model = _shaped(_residual(concat=True))
    report = prune_channels(model, ratio=0.5)
    # A/B's space reaches the Concat; C's space is independent and still pruned
    assert report.counts["spaces_pruned"] == 1
    assert any("Concat" in note for note in report.notes)
    feeds = feeds_for(_residual(concat=True))
    assert [o.shape for o in run_ort(model, feeds)] == [(1, 5), (1, 24, 10, 10)]
    tiny = _shaped(_models.tiny_conv_relu())
    report = prune_channels(tiny, ratio=0.5)
    assert not report.modified and any("graph output" in note for note in report.notes)


def test_kept_channels_round_up_to_the_multiple_and_bad_options_are_errors():
    model = _shaped(_residual())
    prune_channels(model, ratio=0.5, multiple=4)
    assert _weight(model, next(n.name for n in model.graph if n.op_type == "Conv")).shape[0] == 8
    for options, message in (({"ratio": 1.0}, "ratio must be in"), ({"ratio": 0.5, "multiple": 0}, "multiple")):
        with pytest.raises(ValueError, match=message):
            prune_channels(_shaped(_residual()), **options)


def test_resnet_and_mobilenet_stay_valid_after_channel_pruning():
    for build in (_models.resnet18_style, _models.mobilenetv2_style):
        proto = build(size=32)
        model = _shaped(proto)
        report = prune_channels(model, ratio=0.25)
        assert report.counts["spaces_pruned"] > 5 and report.counts["parameters_removed"] > 0
        outputs = run_ort(model, feeds_for(proto))
        assert outputs[0].shape == (1, 1000) and np.all(np.isfinite(outputs[0]))
