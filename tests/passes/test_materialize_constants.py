import numpy as np
import onnx

from ortx.passes.materialize_constants import materialize_constants
from tests.passes._helpers import assert_same_outputs, from_text, op_types, to_ir

# A Conv whose weight and bias are ConstantOfShape of constant shapes (the ONNX backend's light model-zoo models
# hold every weight so), and one ConstantOfShape whose shape comes from the input's dynamic shape (not made).
COMPUTED_WEIGHTS = """
<ir_version: 10, opset_import: ["" : 17]>
agraph (float[N,3,8,8] X) => (float[N,4,8,8] Y, float[N,3,8,8] Z)
<int64[4] w_shape = {4, 3, 3, 3}, int64[1] b_shape = {4}> {
    w = ConstantOfShape <value = float[1] {0.25}> (w_shape)
    b = ConstantOfShape <value = float[1] {-0.5}> (b_shape)
    Y = Conv <pads = [1, 1, 1, 1]> (X, w, b)
    x_shape = Shape (X)
    ones = ConstantOfShape <value = float[1] {1.0}> (x_shape)
    Z = Add (X, ones)
}
"""


def test_makes_weights_of_constant_shape():
    proto = from_text(COMPUTED_WEIGHTS)
    model = to_ir(proto)
    report = materialize_constants(model)
    assert op_types(model) == ["Conv", "Shape", "ConstantOfShape", "Add"]
    assert report.counts == {"tensors_made": 2, "bytes_made": (4 * 3 * 3 * 3 + 4) * 4, "nodes_folded_after": 0}
    weight = model.graph.initializers["w"].const_value.numpy()
    assert weight.shape == (4, 3, 3, 3) and weight.dtype == np.float32 and np.all(weight == 0.25)
    assert np.all(model.graph.initializers["b"].const_value.numpy() == -0.5)
    assert len(report.notes) == 1 and report.notes[0].endswith("not made: its shape is not constant")
    assert_same_outputs(model, proto)


def test_size_limit_and_default_value():
    """Over size_limit: kept, with a note; without a value attribute: float zeros (ONNX's default)."""
    proto = from_text("""
    <ir_version: 10, opset_import: ["" : 17]>
    agraph (float[64] X) => (float[64] Y) <int64[1] shape = {64}> {
        zeros = ConstantOfShape (shape)
        Y = Add (X, zeros)
    }""")
    model = to_ir(proto)
    report = materialize_constants(model, size_limit=16)
    assert op_types(model) == ["ConstantOfShape", "Add"] and not report.modified
    assert "over size_limit=16" in report.notes[0]
    report = materialize_constants(model)
    assert op_types(model) == ["Add"] and report.counts["tensors_made"] == 1
    assert np.all(model.graph.initializers["zeros"].const_value.numpy() == 0)


def test_folds_what_the_made_tensors_feed():
    """The light Inception v2's BatchNorm affine: Unsqueeze of a made [C] tensor before a Mul and an Add. The
    Unsqueezes fold to [C, 1, 1] constants, the form fuse_conv_batchnorm folds into the Conv."""
    proto = from_text("""
    <ir_version: 10, opset_import: ["" : 11]>
    agraph (float[1,4,6,6] X) => (float[1,4,6,6] Y) <int64[1] c = {4}> {
        scale = ConstantOfShape <value = float[1] {1.5}> (c)
        shift = ConstantOfShape <value = float[1] {-0.25}> (c)
        scale3 = Unsqueeze <axes = [1, 2]> (scale)
        shift3 = Unsqueeze <axes = [1, 2]> (shift)
        scaled = Mul (X, scale3)
        Y = Add (scaled, shift3)
    }""")
    model = to_ir(proto)
    report = materialize_constants(model)
    assert op_types(model) == ["Mul", "Add"]
    assert report.counts["tensors_made"] == 2 and report.counts["nodes_folded_after"] == 2
    mul = next(node for node in model.graph if node.op_type == "Mul")
    assert mul.inputs[1].const_value is not None and mul.inputs[1].const_value.numpy().shape == (4, 1, 1)
    assert_same_outputs(model, proto)


def test_idempotent():
    model = to_ir(from_text(COMPUTED_WEIGHTS))
    assert materialize_constants(model).modified
    assert not materialize_constants(model).modified
