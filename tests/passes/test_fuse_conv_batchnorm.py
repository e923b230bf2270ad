import numpy as np
import onnx
from onnx import helper, numpy_helper

from ortx.passes.fuse_conv_batchnorm import fuse_conv_batchnorm
from tests import _models
from tests.passes._helpers import feeds_for, float_model, op_types, run_ort, to_ir
from tests.tolerances import assert_close, assert_model_close


def _conv_bn(*, bias: bool, extra_consumer: bool = False, channels: int = 5, seed: int = 0) -> onnx.ModelProto:
    """X[1,3,9,7] -> Conv 3x3 (5 channels: not a multiple of any vector width) -> BN -> Y."""
    builder = _models.GraphBuilder("conv_bn", seed)
    conv = builder.conv("X", 3, channels, 3, bias=bias)
    builder.batchnorm(conv, channels)
    outputs = [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [1, channels, 9, 7])]
    builder.nodes[-1].output[0] = "Y"
    if extra_consumer:
        builder.node("Relu", [conv])
        builder.nodes[-1].output[0] = "R"
        outputs.append(helper.make_tensor_value_info("R", onnx.TensorProto.FLOAT, [1, channels, 9, 7]))
    return builder.finish([helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, 3, 9, 7])], outputs)


def test_fuses_conv_bn_with_and_without_bias():
    for bias in (False, True):
        proto = _conv_bn(bias=bias)
        model = to_ir(proto)
        report = fuse_conv_batchnorm(model)
        assert op_types(model) == ["Conv"]
        assert report.counts["batchnorms_fused"] == 1 and report.counts["affines_fused"] == 0
        conv = next(iter(model.graph))
        assert conv.metadata_props["ortx.fused_from"].split(",") == [proto.graph.node[0].name,
                                                                     proto.graph.node[1].name]
        # Old weights and BN parameters are gone; only the new W and B remain.
        assert len(model.graph.initializers) == 2
        feeds = feeds_for(proto)
        assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_folds_per_channel_mul_add():
    """PP-OCRv4's form: Conv -> Mul(scalar) -> Add(per-channel [C,1,1])."""
    proto = _conv_bn(bias=True)
    graph = proto.graph
    del graph.node[1]
    conv_out = graph.node[0].output[0]
    graph.initializer.extend([numpy_helper.from_array(np.array([1.7], np.float32), "m"),
                              numpy_helper.from_array(np.linspace(-1, 1, 5, dtype=np.float32).reshape(5, 1, 1), "a")])
    graph.node.extend([helper.make_node("Mul", ["m", conv_out], ["scaled"], name="mul"),
                       helper.make_node("Add", ["scaled", "a"], ["Y"], name="add")])
    onnx.checker.check_model(proto)
    model = to_ir(proto)
    report = fuse_conv_batchnorm(model)
    assert op_types(model) == ["Conv"]
    assert report.counts["affines_fused"] == 2
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_does_not_fire_when_conv_output_is_shared_or_add_is_not_per_channel():
    proto = _conv_bn(bias=True, extra_consumer=True)
    model = to_ir(proto)
    report = fuse_conv_batchnorm(model)
    assert op_types(model) == ["Conv", "BatchNormalization", "Relu"]
    assert not report.modified
    assert any("other consumers" in note for note in report.notes)

    proto = _conv_bn(bias=True)
    del proto.graph.node[1]
    proto.graph.initializer.append(numpy_helper.from_array(np.ones(7, np.float32), "w_axis"))
    proto.graph.node.append(helper.make_node("Add", [proto.graph.node[0].output[0], "w_axis"], ["Y"], name="add"))
    model = to_ir(proto)
    report = fuse_conv_batchnorm(model)
    assert op_types(model) == ["Conv", "Add"]
    assert not report.modified and any("not per-channel" in note for note in report.notes)


def test_resnet_and_mobilenet_numerics():
    for build, expected_convs in ((_models.resnet18_style, 20), (_models.mobilenetv2_style, 52)):
        proto = build(size=64)
        model = to_ir(proto)
        report = fuse_conv_batchnorm(model)
        assert report.counts["batchnorms_fused"] == expected_convs
        assert "BatchNormalization" not in op_types(model)
        feeds = feeds_for(proto)
        assert_model_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_idempotent():
    model = to_ir(_models.mobilenetv2_style(size=32))
    assert fuse_conv_batchnorm(model).modified
    second = fuse_conv_batchnorm(model)
    assert not second.modified, second.counts


def _conv_transpose_head(*, group: int = 1, seed: int = 0) -> onnx.ModelProto:
    """PP-OCRv4 det's head: X[1,8,5,6] -> ConvTranspose 2x2/2 (6 channels, no bias) -> Add(bias [1,6,1,1]) -> BN
    -> Relu -> Y."""
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal((8, 6 // group, 2, 2)).astype(np.float32)
    initializers = [numpy_helper.from_array(weights, "w"),
                    numpy_helper.from_array(rng.standard_normal((1, 6, 1, 1)).astype(np.float32), "bias"),
                    numpy_helper.from_array(rng.uniform(0.5, 1.5, 6).astype(np.float32), "scale"),
                    numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "shift"),
                    numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "mean"),
                    numpy_helper.from_array(rng.uniform(0.5, 1.5, 6).astype(np.float32), "var")]
    nodes = [helper.make_node("ConvTranspose", ["X", "w"], ["t"], name="convT", strides=[2, 2], group=group),
             helper.make_node("Add", ["t", "bias"], ["biased"], name="add"),
             helper.make_node("BatchNormalization", ["biased", "scale", "shift", "mean", "var"], ["normed"],
                              name="bn"),
             helper.make_node("Relu", ["normed"], ["Y"], name="relu")]
    return float_model(nodes, [1, 8, 5, 6], [1, 6, 10, 12], initializers, "convT_head")


def test_folds_bias_add_and_batchnorm_into_a_one_group_conv_transpose():
    proto = _conv_transpose_head()
    model = to_ir(proto)
    report = fuse_conv_batchnorm(model)
    assert op_types(model) == ["ConvTranspose", "Relu"]
    assert report.counts["affines_fused"] == 1 and report.counts["batchnorms_fused"] == 1
    conv = next(iter(model.graph))
    assert conv.metadata_props["ortx.fused_from"].split(",") == ["convT", "add", "bn"]
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_leaves_a_grouped_conv_transpose_alone():
    """With groups an output channel's weights are spread over the groups' blocks of axis 0: not folded."""
    proto = _conv_transpose_head(group=2)
    model = to_ir(proto)
    report = fuse_conv_batchnorm(model)
    assert op_types(model) == ["ConvTranspose", "Add", "BatchNormalization", "Relu"] and not report.modified
    assert any("more than one group" in note for note in report.notes)
