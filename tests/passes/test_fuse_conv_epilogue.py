"""FusedConv is run by OrtxEP, not ORT: numerics are checked by expanding each FusedConv back into standard ONNX
with its documented semantics Y = act(Conv(X, W, B) + Z), so a wrong attribute or input order shows up in ORT."""
import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper

from ortx.passes.fuse_conv_epilogue import fuse_conv_epilogue
from tests import _models
from tests.passes._helpers import feeds_for, float_model, op_types, run_ort, to_ir
from tests.tolerances import assert_close, assert_model_close

SHAPE = [1, 4, 7, 9]  # 7x9 spatial: not a multiple of any vector width


def expand_fused_conv(model: ir.Model) -> onnx.ModelProto:
    proto = ir.serde.serialize_model(model)
    nodes = []
    for node in proto.graph.node:
        if node.domain != "ai.ortx":
            nodes.append(node)
            continue
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        activation = attributes.pop("activation").decode()
        params = list(attributes.pop("activation_params", []))
        inputs = list(node.input) + [""] * (4 - len(node.input))
        out = node.output[0]
        current = f"{out}_conv"
        conv_type = "ConvTranspose" if node.op_type == "FusedConvTranspose" else "Conv"
        nodes.append(helper.make_node(conv_type, [i for i in inputs[:3] if i], [current], **attributes))
        if inputs[3]:
            nodes.append(helper.make_node("Add", [current, inputs[3]], [f"{out}_sum"]))
            current = f"{out}_sum"
        if activation == "":
            nodes.append(helper.make_node("Identity", [current], [out]))
        elif activation == "Clip":
            low, high = (helper.make_tensor(f"{out}_{k}", onnx.TensorProto.FLOAT, [], [v])
                         for k, v in zip(("low", "high"), params))
            proto.graph.initializer.extend([low, high])
            nodes.append(helper.make_node("Clip", [current, low.name, high.name], [out]))
        elif activation == "LeakyRelu":
            nodes.append(helper.make_node("LeakyRelu", [current], [out], alpha=params[0]))
        elif activation == "HardSigmoid":
            nodes.append(helper.make_node("HardSigmoid", [current], [out], alpha=params[0], beta=params[1]))
        elif activation == "HardSwishAffine":
            scale, shift = (helper.make_tensor(f"{out}_{k}", onnx.TensorProto.FLOAT, [], [v])
                            for k, v in zip(("scale", "shift"), params))
            proto.graph.initializer.extend([scale, shift])
            nodes += [helper.make_node("HardSwish", [current], [f"{out}_hs"]),
                      helper.make_node("Mul", [f"{out}_hs", scale.name], [f"{out}_scaled"]),
                      helper.make_node("Add", [f"{out}_scaled", shift.name], [out])]
        else:
            nodes.append(helper.make_node(activation, [current], [out]))
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    del proto.opset_import[:]
    proto.opset_import.extend([helper.make_opsetid("", 17)])
    return proto


def _epilogue_model(tail: str, *, residual: bool, seed: int = 0) -> onnx.ModelProto:
    """X -> Conv 3x3 (bias) -> [Add R] -> tail activation -> Y, built with the shared GraphBuilder."""
    builder = _models.GraphBuilder(f"conv_{tail}", seed)
    value = builder.conv("X", 3, 4, 3, bias=True)
    if residual:
        value = builder.node("Add", [value, "R"])
    if tail == "Relu":
        builder.node("Relu", [value])
    elif tail == "LeakyRelu":
        builder.node("LeakyRelu", [value], alpha=0.1)
    elif tail == "Clip":
        builder.clip6(value)
    elif tail == "HardSigmoid":
        builder.node("HardSigmoid", [value], alpha=0.25, beta=0.4)
    elif tail in ("Sigmoid", "Tanh"):
        builder.node(tail, [value])
    elif tail == "HardSwishClip":
        three = builder.constant(np.array(3.0, np.float32))
        gate = builder.clip6(builder.node("Add", [value, three]))
        product = builder.node("Mul", [value, gate])
        builder.node("Div", [product, builder.constant(np.array(6.0, np.float32))])
    elif tail == "HardSwishSigmoid":
        builder.node("Mul", [value, builder.node("HardSigmoid", [value], alpha=1 / 6, beta=0.5)])
    elif tail == "none":
        builder.node("Identity", [value])
    builder.nodes[-1].output[0] = "Y"
    inputs = [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, 3, 7, 9])]
    if residual:
        inputs.append(helper.make_tensor_value_info("R", onnx.TensorProto.FLOAT, SHAPE))
    model = builder.finish(inputs, [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, SHAPE)])
    if tail == "none":  # Conv -> Add -> Y directly
        model.graph.node[-2].output[0] = "Y"
        del model.graph.node[-1]
    return model


CASES = [
    ("Relu", "Relu", []), ("LeakyRelu", "LeakyRelu", [0.1]), ("Clip", "Clip", [0.0, 6.0]),
    ("HardSigmoid", "HardSigmoid", [0.25, 0.4]), ("Sigmoid", "Sigmoid", []), ("Tanh", "Tanh", []),
    ("HardSwishClip", "HardSwish", []), ("HardSwishSigmoid", "HardSwish", []),
]


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("tail,activation,params", CASES)
def test_fuses_conv_residual_activation(tail, activation, params, residual):
    proto = _epilogue_model(tail, residual=residual)
    model = to_ir(proto)
    report = fuse_conv_epilogue(model)
    assert op_types(model) == ["FusedConv"]
    assert report.counts == {"convs_fused": 1, "activations_fused": 1, "residuals_fused": int(residual)}
    node = next(iter(model.graph))
    assert node.domain == "ai.ortx"
    assert node.attributes.get_string("activation") == activation
    assert list(node.attributes.get_floats("activation_params")) == pytest.approx(params)
    assert [value.name if value is not None else "" for value in node.inputs][3:] == (["R"] if residual else [])
    assert node.metadata_props["ortx.fused_from"].split(",") == [n.name for n in proto.graph.node]
    feeds = feeds_for(proto)
    assert_close(run_ort(expand_fused_conv(model), feeds)[0], run_ort(proto, feeds)[0])


def test_residual_without_activation():
    proto = _epilogue_model("none", residual=True)
    model = to_ir(proto)
    report = fuse_conv_epilogue(model)
    assert op_types(model) == ["FusedConv"] and report.counts["residuals_fused"] == 1
    assert next(iter(model.graph)).attributes.get_string("activation") == ""
    feeds = feeds_for(proto)
    assert_close(run_ort(expand_fused_conv(model), feeds)[0], run_ort(proto, feeds)[0])


def test_does_not_fire_when_intermediate_is_shared_or_constants_differ():
    proto = _epilogue_model("Relu", residual=False)
    proto.graph.output.append(helper.make_tensor_value_info(proto.graph.node[0].output[0],
                                                            onnx.TensorProto.FLOAT, SHAPE))
    model = to_ir(proto)
    assert not fuse_conv_epilogue(model).modified
    assert op_types(model) == ["Conv", "Relu"]

    proto = _epilogue_model("HardSwishClip", residual=False)
    for tensor in proto.graph.initializer:  # 3 -> 2.5: no longer HardSwish
        if onnx.numpy_helper.to_array(tensor).shape == () and onnx.numpy_helper.to_array(tensor) == 3.0:
            tensor.CopyFrom(onnx.numpy_helper.from_array(np.array(2.5, np.float32), tensor.name))
    model = to_ir(proto)
    report = fuse_conv_epilogue(model)
    assert op_types(model) == ["Conv", "Add", "Clip", "Mul", "Div"]
    assert not report.modified and any("HardSwish" in note for note in report.notes)


def test_resnet_numerics_and_idempotence():
    from ortx.optimize import optimize

    proto = _models.resnet18_style(size=32)
    optimized, _ = optimize(proto)
    model = to_ir(optimized)
    report = fuse_conv_epilogue(model)
    # 17 Conv+BN(+Add)+Relu chains; the 3 downsample convs feed an Add whose output goes to the fused chain.
    assert report.counts == {"convs_fused": 17, "activations_fused": 17, "residuals_fused": 8}
    feeds = feeds_for(proto)
    assert_model_close(run_ort(expand_fused_conv(model), feeds)[0], run_ort(proto, feeds)[0])
    assert not fuse_conv_epilogue(model).modified


def test_excluded_nodes_are_not_fused():
    """Nodes OrtxEP gives back to ORT must stay standard ONNX; any excluded node of a pattern stops its fusion."""
    proto = _epilogue_model("Relu", residual=True)
    activation = proto.graph.node[-1].name
    model = to_ir(proto)
    report = fuse_conv_epilogue(model, excluded=frozenset({activation}))
    assert op_types(model) == ["FusedConv", "Relu"]  # the residual Add still fuses; the excluded Relu stays
    assert report.counts == {"convs_fused": 1, "activations_fused": 0, "residuals_fused": 1}
    feeds = feeds_for(proto)
    assert_close(run_ort(expand_fused_conv(model), feeds)[0], run_ort(proto, feeds)[0])
    model = to_ir(proto)
    report = fuse_conv_epilogue(model, excluded=frozenset(node.name for node in proto.graph.node))
    assert op_types(model) == [node.op_type for node in proto.graph.node] and not report.modified
    assert any("is excluded (it runs on ONNX Runtime)" in note for note in report.notes)


def _affine_model(scale, shift, *, extra_output: bool = False) -> onnx.ModelProto:
    """X -> Conv 3x3 -> HardSwish (PP-OCR's Clip form) -> [Mul scale] -> [Add shift] -> depthwise 3x3 padded Conv
    -> Y: LCNetV3's learnable affine before a conv that fuse_input_affine cannot fold it into."""
    builder = _models.GraphBuilder("conv_hardswish_affine", 3)
    value = builder.conv("X", 3, 4, 3, bias=True)
    gate = builder.clip6(builder.node("Add", [value, builder.constant(np.array(3.0, np.float32))]))
    value = builder.node("Div", [builder.node("Mul", [value, gate]), builder.constant(np.array(6.0, np.float32))])
    if scale is not None:
        value = builder.node("Mul", [builder.constant(np.asarray(scale, np.float32)), value])
    if shift is not None:
        value = builder.node("Add", [value, builder.constant(np.asarray(shift, np.float32))])
    affine_out = value
    builder.conv(value, 4, 4, 3, group=4, bias=True)
    builder.nodes[-1].output[0] = "Y"
    outputs = [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, SHAPE)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(affine_out, onnx.TensorProto.FLOAT, SHAPE))
    return builder.finish([helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, 3, 7, 9])], outputs)


@pytest.mark.parametrize("scale,shift,params", [(0.7, -0.3, [0.7, -0.3]), (0.7, None, [0.7, 0.0]),
                                                (None, -0.3, [1.0, -0.3])])
def test_absorbs_a_scalar_affine_after_hardswish(scale, shift, params):
    proto = _affine_model(scale, shift)
    model = to_ir(proto)
    report = fuse_conv_epilogue(model)
    assert op_types(model) == ["FusedConv", "Conv"]
    assert report.counts["affines_fused"] == 1
    node = next(iter(model.graph))
    assert node.attributes.get_string("activation") == "HardSwishAffine"
    assert list(node.attributes.get_floats("activation_params")) == pytest.approx(params)
    taken = [n.name for n in proto.graph.node if n.op_type in ("Mul", "Add")][-(scale is not None) - (shift is not None):]
    assert all(name in node.metadata_props["ortx.fused_from"].split(",") for name in taken)
    feeds = feeds_for(proto)
    assert_close(run_ort(expand_fused_conv(model), feeds)[0], run_ort(proto, feeds)[0])


def test_affine_is_not_absorbed_per_channel_or_when_read_outside():
    proto = _affine_model(np.full((1, 4, 1, 1), 0.7), -0.3)  # a per-channel scale: not a scalar
    model = to_ir(proto)
    report = fuse_conv_epilogue(model)
    assert op_types(model) == ["FusedConv", "Mul", "Add", "Conv"] and "affines_fused" not in report.counts
    assert next(iter(model.graph)).attributes.get_string("activation") == "HardSwish"
    proto = _affine_model(0.7, -0.3, extra_output=True)  # the Add's output is also a graph output
    model = to_ir(proto)
    fuse_conv_epilogue(model)
    assert op_types(model) == ["FusedConv", "Mul", "Add", "Conv"]
    feeds = feeds_for(proto)
    for got, want in zip(run_ort(expand_fused_conv(model), feeds), run_ort(proto, feeds)):
        assert_close(got, want)


@pytest.mark.parametrize("activation", ["Relu", "Sigmoid"])
def test_fuses_conv_transpose_and_its_activation(activation):
    """PP-OCRv4 det's head after fuse_conv_batchnorm: ConvTranspose (bias) -> Relu, ConvTranspose -> Sigmoid."""
    rng = np.random.default_rng(5)
    initializers = [onnx.numpy_helper.from_array(rng.standard_normal((4, 3, 2, 2)).astype(np.float32), "w"),
                    onnx.numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")]
    nodes = [helper.make_node("ConvTranspose", ["X", "w", "b"], ["t"], name="convT", strides=[2, 2]),
             helper.make_node(activation, ["t"], ["Y"], name="act")]
    proto = float_model(nodes, [1, 4, 7, 9], [1, 3, 14, 18], initializers, "convT_act")
    model = to_ir(proto)
    report = fuse_conv_epilogue(model)
    assert op_types(model) == ["FusedConvTranspose"] and report.counts["transposes_fused"] == 1
    node = next(iter(model.graph))
    assert node.domain == "ai.ortx" and node.attributes.get_string("activation") == activation
    assert list(node.attributes.get_ints("strides")) == [2, 2]
    assert node.metadata_props["ortx.fused_from"].split(",") == ["convT", "act"]
    feeds = feeds_for(proto)
    assert_close(run_ort(expand_fused_conv(model), feeds)[0], run_ort(proto, feeds)[0])
