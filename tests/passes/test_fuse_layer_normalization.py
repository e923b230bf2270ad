import os

import numpy as np
import onnx
import pytest
import rapidocr_onnxruntime

from ortx.passes.fuse_layer_normalization import fuse_layer_normalization
from ortx.passes.infer_shapes import infer_shapes
from ortx.passes.upgrade_opset import WITHHELD_MIN_BYTES, upgrade_opset
from tests.passes._helpers import feeds_for, from_text, op_types, run_ort, to_ir
from tests.tolerances import assert_close, assert_model_close


def _decomposed(opset: int = 17, *, square: str = "Pow (d, two)", axes: str = "<axes = [-1]>",
                tail: str = "s = Mul (n, scale)\n Y = Add (s, bias)", bias_shape: str = "[10]") -> onnx.ModelProto:
    """PP-OCRv4's form on X[2,3,10] (10: not a multiple of any vector width)."""
    bias_values = ", ".join(["0.1", "-0.2"] * 5) if bias_shape == "[10]" else "0.3, -0.3, 0.1"
    return from_text(f"""
    <ir_version: 10, opset_import: ["" : {opset}]>
    agraph (float[2,3,10] X) => (float[2,3,10] Y) {{
        m = ReduceMean {axes} (X)
        d = Sub (X, m)
        two = Constant <value = float {{2.0}}> ()
        sq = {square}
        v = ReduceMean {axes} (sq)
        eps = Constant <value = float {{1e-5}}> ()
        ve = Add (v, eps)
        sd = Sqrt (ve)
        n = Div (d, sd)
        scale = Constant <value = float[10] {{1.5, 0.5, 1, 2, 1, 1, 0.7, 1.1, 0.9, 1.3}}> ()
        bias = Constant <value = float{bias_shape} {{{bias_values}}}> ()
        {tail}
    }}""")


def _fused(proto):
    model = to_ir(proto)
    infer_shapes(model)
    return model, fuse_layer_normalization(model)


@pytest.mark.parametrize("square,tail", [("Pow (d, two)", "s = Mul (n, scale)\n Y = Add (s, bias)"),
                                         ("Mul (d, d)", "Y = Mul (scale, n)"),
                                         ("Pow (d, two)", "Y = Identity (n)")])
def test_fuses_decomposed_forms(square, tail):
    proto = _decomposed(square=square, tail=tail)
    model, report = _fused(proto)
    assert [op for op in op_types(model) if op != "Constant"] == ["LayerNormalization"] + \
        (["Identity"] if "Identity" in tail else [])
    assert report.counts == {"layer_norms_fused": 1}
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_does_not_fuse_other_axes_old_opset_or_broadcasting_bias():
    for proto, reason in ((_decomposed(axes="<axes = [1]>"), "not the trailing axes"),
                          (_decomposed(opset=12), "opset 12 < 17")):
        model, report = _fused(proto)
        assert "LayerNormalization" not in op_types(model) and not report.modified
        assert any(reason in note for note in report.notes), report.notes
    # A bias broadcasting along other dims is not LayerNormalization's B: the scale fuses, the Add stays.
    proto = _decomposed(bias_shape="[3,1]")
    model, report = _fused(proto)
    assert [op for op in op_types(model) if op != "Constant"] == ["LayerNormalization", "Add"]
    assert any("not the normalised shape" in note for note in report.notes), report.notes
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_idempotent():
    model, report = _fused(_decomposed())
    assert report.modified and not fuse_layer_normalization(model).modified


def test_upgrade_opset_fires_only_for_decomposed_layer_norms():
    proto = _decomposed(opset=12)
    model = to_ir(proto)
    report = upgrade_opset(model)
    assert report.counts == {"opset_raised": 5, "softmaxes_restored": 0, "constants_lifted": 4} and model.opset_imports[""] == 17
    assert not upgrade_opset(model).modified  # idempotent
    infer_shapes(model)
    assert fuse_layer_normalization(model).counts == {"layer_norms_fused": 1}
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])

    plain = to_ir(from_text("""
    <ir_version: 10, opset_import: ["" : 12]>
    agraph (float[2,10] X) => (float[2,10] Y) {
        Y = Softmax <axis = 1> (X)
    }"""))
    report = upgrade_opset(plain)
    assert not report.modified and plain.opset_imports[""] == 12 and "no decomposed" in report.notes[0]


def test_upgrade_opset_keeps_the_weight_tensors_it_withheld_from_the_converter():
    """Weights of WITHHELD_MIN_BYTES or more go to the converter as graph inputs (no data) and come back as the same
    initializer tensors, not copies; small ones (the LayerNorm constants) go through the converter."""
    proto = _decomposed(opset=12)
    weight = np.random.default_rng(1).uniform(-1, 1, (10, 10)).astype(np.float32)
    table = np.random.default_rng(2).uniform(-1, 1, (256,)).astype(np.float32)  # 1 KiB: withheld
    proto.graph.initializer.extend([onnx.numpy_helper.from_array(weight, "W"),
                                    onnx.numpy_helper.from_array(table, "table")])
    proto.graph.node.extend([onnx.helper.make_node("MatMul", ["Y", "W"], ["projected"]),
                             onnx.helper.make_node("Neg", ["table"], ["negated"])])
    del proto.graph.output[:]
    proto.graph.output.extend([onnx.helper.make_tensor_value_info("projected", onnx.TensorProto.FLOAT, [2, 3, 10]),
                               onnx.helper.make_tensor_value_info("negated", onnx.TensorProto.FLOAT, [256])])
    onnx.checker.check_model(proto)
    model = to_ir(proto)
    big = model.graph.initializers["table"].const_value
    assert big.nbytes >= WITHHELD_MIN_BYTES
    report = upgrade_opset(model)
    assert report.counts == {"opset_raised": 5, "softmaxes_restored": 0, "constants_lifted": 4}
    assert [value.name for value in model.graph.inputs] == ["X"]
    assert model.graph.initializers["table"].const_value is big
    assert "W" in model.graph.initializers
    feeds = feeds_for(proto)
    for got, want in zip(run_ort(model, feeds), run_ort(proto, feeds)):
        assert_close(got, want)


def test_ppocr_rec_layer_norms_fuse_after_the_upgrade():
    """PP-OCRv4 rec is opset 12 with 5 decomposed LayerNorms; the converter's Softmax rewrites are undone."""
    path = os.path.join(os.path.dirname(rapidocr_onnxruntime.__file__), "models", "ch_PP-OCRv4_rec_infer.onnx")
    proto = onnx.load(path)
    model = to_ir(proto)
    upgrade = upgrade_opset(model)
    assert upgrade.counts == {"opset_raised": 5, "softmaxes_restored": 3, "constants_lifted": 420}
    assert op_types(model).count("Softmax") == 3 and "Flatten" not in op_types(model)
    infer_shapes(model, input_shapes={"x": (1, 3, 48, 320)})
    assert fuse_layer_normalization(model).counts == {"layer_norms_fused": 5}
    # Each LayerNormalization names the 9 nodes it replaced (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul,
    # Add), so an ortx.InferenceSession reports them as fused rather than removed.
    fused = [node for node in model.graph if node.op_type == "LayerNormalization"]
    assert all(len(node.metadata_props["ortx.fused_from"].split(",")) == 9 for node in fused)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 48, 320)).astype(np.float32)}
    assert_model_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])
