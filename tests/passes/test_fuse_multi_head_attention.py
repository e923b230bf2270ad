import numpy as np
import pytest

from ortx.ep.compile_nodes import run_graph
from ortx.passes.fold_constants import fold_constants
from ortx.passes.fuse_attention import fuse_attention_extended
from ortx.passes.fuse_multi_head_attention import fuse_multi_head_attention
from ortx.passes.remove_redundant_qdq import remove_redundant_qdq
from ortx.pipeline import ir_to_proto
from tests import _models
from tests.passes._helpers import feeds_for, from_text, op_types, ortx_session, run_ort, to_ir
from tests.tolerances import assert_close, assert_model_close


def _model(*, packed: bool = False, mask: bool = False, merge_perm: str = "0, 2, 1, 3", quantized: bool = False) -> str:
    """Heads split the way exporters do: Reshape [B, S, H, D] + Transpose (K to [B, H, D, L]), merged back after."""
    source = """sizes = Constant <value = int64[3] {8, 8, 8}> ()
        q, k, v = Split <axis = 2> (X, sizes)""" if packed else """two = Constant <value = float {2.0}> ()
        q = Identity (X)
        k = Mul (X, two)
        v = Add (X, two)"""
    return f"""
    <ir_version: 10, opset_import: ["" : 17]>
    agraph (float[2,6,{24 if packed else 8}] X, float[2,1,1,6] mask) => (float[2,6,8] Y) {{
        shape = Constant <value = int64[4] {{2, 6, 2, 4}}> ()
        merge = Constant <value = int64[3] {{2, 6, 8}}> ()
        scale = Constant <value = float {{0.5}}> ()
        {source}
        {QUANTIZED_HEADS if quantized else ""}
        q4 = Reshape ({"qd" if quantized else "q"}, shape)
        k4 = Reshape ({"kd" if quantized else "k"}, shape)
        v4 = Reshape ({"vd" if quantized else "v"}, shape)
        {QUANTIZED_RESHAPES if quantized else ""}
        Q = Transpose <perm = [0, 2, 1, 3]> ({"q4d" if quantized else "q4"})
        KT = Transpose <perm = [0, 2, 3, 1]> ({"k4d" if quantized else "k4"})
        V = Transpose <perm = [0, 2, 1, 3]> ({"v4d" if quantized else "v4"})
        S = MatMul (Q, KT)
        Sc = Mul (S, scale)
        {"M = Add (Sc, mask)" if mask else ""}
        P = Softmax <axis = -1> ({"M" if mask else "Sc"})
        {QUANTIZED_PROBABILITIES if quantized else ""}
        O = MatMul ({"Pd" if quantized else "P"}, V)
        {QUANTIZED_MERGE if quantized else ""}
        OT = Transpose <perm = [{merge_perm}]> ({"Od" if quantized else "O"})
        {"Ym" if quantized else "Y"} = Reshape (OT, merge)
        {"Yq = QuantizeLinear (Ym, so, zo)" if quantized else ""}
        {"Y = DequantizeLinear (Yq, so, zo)" if quantized else ""}
    }}"""


# An int8 QDQ model's attention (ortx.quantize, onnxruntime's quantize_static): probabilities on a uint8 grid, the
# output quantized before the head merge and again after it on the same grid.
# Q, K, V quantized, then requantized after their Reshape on the same grid (remove_redundant_qdq's Case 1)
QUANTIZED_HEADS = """so = Constant <value = float {0.05}> ()
        zo = Constant <value = uint8 {128}> ()
        """ + "\n        ".join(f"""s{name} = Constant <value = float {{{0.02 * (index + 1)}}}> ()
        {name}q = QuantizeLinear ({name}, s{name}, zo)
        {name}d = DequantizeLinear ({name}q, s{name}, zo)""" for index, name in enumerate("qkv"))
QUANTIZED_RESHAPES = "\n        ".join(f"""{name}4q = QuantizeLinear ({name}4, s{name}, zo)
        {name}4d = DequantizeLinear ({name}4q, s{name}, zo)""" for name in "qkv")
QUANTIZED_PROBABILITIES = """sp = Constant <value = float {0.003921569}> ()
        zp = Constant <value = uint8 {0}> ()
        Pq = QuantizeLinear (P, sp, zp)
        Pd = DequantizeLinear (Pq, sp, zp)"""
QUANTIZED_MERGE = """Oq = QuantizeLinear (O, so, zo)
        Od = DequantizeLinear (Oq, so, zo)"""


def _fused(text: str):
    """The session's order (ortx.pipeline.ORTXEP_FUSIONS): redundant Q/DQ, attention, then its heads."""
    proto = from_text(text)
    model = to_ir(proto)
    remove_redundant_qdq(model)
    fuse_attention_extended(model)
    return proto, model, fuse_multi_head_attention(model)


def _on_ortx_ep(model, feeds, **options):
    fold_constants(model)  # Constant nodes to initializers, as the pipeline does
    return run_graph(ir_to_proto(model), feeds, **options)[0]


@pytest.mark.parametrize("packed", [False, True])
def test_heads_fold_into_one_multi_head_attention_that_ortx_ep_runs_like_ort(packed):
    proto, model, report = _fused(_model(packed=packed))
    assert report.counts == {"attentions_fused": 1, "packed_qkv_fused": int(packed)}
    node = next(node for node in model.graph if node.op_type == "MultiHeadAttention")
    assert node.domain == "ai.ortx" and node.attributes.get_int("num_heads") == 2
    assert node.attributes.get_float("scale") == 0.5 and len(node.inputs) == (1 if packed else 3)
    assert "Transpose" not in op_types(model) and "Split" not in op_types(model)
    assert len(node.metadata_props["ortx.fused_from"].split(",")) == (12 if packed else 11)
    feeds = feeds_for(proto)
    expected = run_ort(proto, feeds)[0]
    for threads in (1, 2):
        assert_close(_on_ortx_ep(model, feeds, num_threads=threads), expected)
    assert_close(_on_ortx_ep(model, feeds, use_reference_kernels=True), expected)


@pytest.mark.parametrize("mask", [False, True])
def test_int8_attention_keeps_its_probability_grid(mask):
    """Unmasked: one MultiHeadAttention (the heads' requantizations removed, the output's pair sunk into its
    requantization); masked: the 3-step ScaledDotProductAttention lowering, which quantizes and dequantizes the
    probabilities between its products."""
    proto, model, report = _fused(_model(quantized=True, mask=mask))
    fused = "ScaledDotProductAttention" if mask else "MultiHeadAttention"
    node = next(node for node in model.graph if node.op_type == fused)
    assert node.attributes.get_float("probability_scale") == pytest.approx(1 / 255)
    assert node.attributes.get_int("probability_zero_point") == 0
    assert node.attributes.get_string("probability_dtype") == "uint8"
    if not mask:
        assert [op for op in op_types(model) if op != "Constant"] == [
            "Identity", "Mul", "Add", *["QuantizeLinear", "DequantizeLinear"] * 3, fused, "QuantizeLinear",
            "DequantizeLinear"]
    feeds = feeds_for(proto)
    if mask:
        feeds["mask"] = np.where(np.arange(6) < 4, 0.0, -1e4).astype(np.float32).reshape(1, 1, 1, 6).repeat(2, 0)
    expected = run_ort(proto, feeds)[0]
    for threads in (1, 2):
        got = _on_ortx_ep(model, feeds, num_threads=threads)
        # float rounding (another softmax, another summation order) may move a value across a grid midpoint: one
        # output step (0.05) at most, and rarely
        assert np.max(np.abs(got - expected)) <= 0.05 + 1e-6
        assert np.mean(got != expected) < 0.02


@pytest.mark.parametrize("change", [{"mask": True}, {"merge_perm": "0, 2, 3, 1"}])
def test_does_not_fire_with_a_mask_or_another_head_merge(change):
    text = _model(**change)
    if "merge_perm" in change:  # [B, H, S, Dv] -> [B, H, Dv, S]: still 2 x 6 x 8 elements, another layout
        text = text.replace("int64[3] {2, 6, 8}", "int64[3] {2, 8, 6}").replace("float[2,6,8] Y", "float[2,8,6] Y")
    proto, model, report = _fused(text)
    assert not report.modified and "MultiHeadAttention" not in op_types(model)
    assert any("ScaledDotProductAttention" == op for op in op_types(model))
    if "merge_perm" in change:
        assert report.notes and "merged shape (2, 6, 4, 2) is not (2, 6, 2, 4)" in report.notes[0]


def test_idempotent():
    _, model, report = _fused(_model(packed=True))
    assert report.modified and not fuse_multi_head_attention(model).modified


def test_transformer_block_session_runs_it_like_ort():
    """The session's fusions (ortx.pipeline.ORTXEP_FUSIONS) fold fuse_sibling_matmuls' merged Q/K/V projection."""
    proto = _models.transformer_block(seq=24, dim=96, heads=3)
    feeds = feeds_for(proto)
    expected = run_ort(proto, feeds)[0]
    for threads in (1, 2):
        session = ortx_session(proto, threads)
        reasons = {row.name: row.reason for row in session.assignment}
        assert reasons["transpose_16"].startswith("fused into node_MultiHeadAttention")
        assert_model_close(session.run(None, feeds)[0], expected)
    assert np.isfinite(expected).all()
