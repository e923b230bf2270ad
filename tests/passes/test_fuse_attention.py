import numpy as np
import onnx_ir as ir
import pytest

from ortx.ep.compile_nodes import check_node, run_graph
from ortx.optimize import optimize
from ortx.passes.fold_constants import fold_constants
from ortx.pipeline import ir_to_proto, name_nodes
from ortx.passes.fuse_attention import fuse_attention, fuse_attention_extended
from tests import _models
from tests.passes._helpers import feeds_for, from_text, op_types, run_ort, to_ir
from tests.tolerances import assert_close, assert_model_close


def _model(opset: int, *, scale: str = "Mul (S, scale)", mask: bool = True, axis: int = -1) -> str:
    """Q/K/V heads made from X the way exporters do (Reshape + Transpose; K transposed to [B, H, D, L])."""
    masked = "M = Add (Sc, mask)" if mask else ""
    return f"""
    <ir_version: 10, opset_import: ["" : {opset}]>
    agraph (float[2,6,8] X, float[2,1,1,6] mask) => (float[2,2,6,4] Y) {{
        shape = Constant <value = int64[4] {{2, 6, 2, 4}}> ()
        scale = Constant <value = float {{0.5}}> ()
        two = Constant <value = float {{2.0}}> ()
        Xk = Mul (X, two)
        q4 = Reshape (X, shape)
        k4 = Reshape (Xk, shape)
        Q = Transpose <perm = [0, 2, 1, 3]> (q4)
        KT = Transpose <perm = [0, 2, 3, 1]> (k4)
        V = Transpose <perm = [0, 2, 1, 3]> (k4)
        S = MatMul (Q, KT)
        Sc = {scale}
        {masked}
        P = Softmax <axis = {axis}> ({"M" if mask else "Sc"})
        Y = MatMul (P, V)
    }}"""


def _feeds(proto):
    feeds = feeds_for(proto)
    feeds["mask"] = np.where(np.arange(6) < 4, 0.0, -1e4).astype(np.float32).reshape(1, 1, 1, 6).repeat(2, 0)
    return feeds


def _ortx_ep(model, feeds, **options):
    """Runs the graph on OrtxEP's kernels (Constant nodes lifted to initializers first, as the pipeline does)."""
    fold_constants(model)
    return run_graph(ir_to_proto(model), feeds, **options)[0]


def _fused(model):
    return [op for op in op_types(model) if op not in ("Constant", "Mul", "Reshape", "Transpose")]


@pytest.mark.parametrize("scale", ["Mul (S, scale)", "Mul (scale, S)", "Div (S, two)"])
def test_level_3_fuses_into_ortx_attention_that_ortx_ep_runs(scale):
    proto = from_text(_model(17, scale=scale))
    name_nodes(proto)
    model = to_ir(proto)
    report = fuse_attention_extended(model)
    assert report.counts == {"attentions_fused": 1}
    assert _fused(model) == ["ScaledDotProductAttention"]
    node = [node for node in model.graph if node.op_type == "ScaledDotProductAttention"][0]
    assert node.domain == "ai.ortx" and node.attributes.get_float("scale") == 0.5
    assert len(node.metadata_props["ortx.fused_from"].split(",")) == 5
    feeds = _feeds(proto)
    for threads in (1, 2):
        assert_close(_ortx_ep(model, feeds, num_threads=threads), run_ort(proto, feeds)[0])


def test_level_2_at_opset_23_emits_standard_attention_with_one_composed_transpose():
    proto = from_text(_model(23).replace("float[2,1,1,6] mask", "float[2,1,6,6] mask"))
    model = to_ir(proto)
    report = fuse_attention(model)
    assert report.counts == {"attentions_fused": 1}
    assert op_types(model).count("Transpose") == 3 and _fused(model) == ["Attention"]
    k_transpose = [node for node in model.graph if node.op_type == "Attention"][0].inputs[1].producer()
    assert list(k_transpose.attributes.get_ints("perm")) == [0, 2, 1, 3]
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_level_2_leaves_it_below_opset_23_and_for_masks_onnxruntime_does_not_broadcast():
    model = to_ir(from_text(_model(17)))
    report = fuse_attention(model)
    assert not report.modified and report.notes == ["MatMul -> S: attention not fused: opset 17 < 23: Attention does "
                                                    "not exist"]
    model = to_ir(from_text(_model(23)))
    report = fuse_attention(model)
    assert not report.modified and "does not end in (6, 6)" in report.notes[0]


def test_unmasked_unscaled_fuses():
    proto = from_text(_model(17, mask=False, scale="Identity (S)").replace("Sc = Identity (S)", "").replace(
        "Softmax <axis = -1> (Sc)", "Softmax <axis = -1> (S)"))
    model = to_ir(proto)
    assert fuse_attention_extended(model).counts == {"attentions_fused": 1}
    node = [node for node in model.graph if node.op_type == "ScaledDotProductAttention"][0]
    assert len(node.inputs) == 3 and node.attributes.get_float("scale") == 1.0
    feeds = feeds_for(proto)
    assert_close(_ortx_ep(model, feeds), run_ort(proto, feeds)[0])


@pytest.mark.parametrize("change", [{"axis": 2}, {"scale": "Mul (S, X)"}])
def test_does_not_fire_on_other_axes_or_non_constant_scales(change):
    text = _model(17, mask=False, **change)
    if "X)" in change.get("scale", ""):
        text = text.replace("float[2,6,8] X,", "float[2,6,8] X, float[2,2,6,6] T,").replace("Mul (S, X)", "Mul (S, T)")
    model = to_ir(from_text(text))
    before = op_types(model)
    assert not fuse_attention_extended(model).modified and op_types(model) == before


@pytest.mark.parametrize("opset, fuse", [(23, fuse_attention), (17, fuse_attention_extended)])
def test_idempotent(opset, fuse):
    model = to_ir(from_text(_model(opset, mask=False)))
    assert fuse(model).modified and not fuse(model).modified


def test_transformer_block_at_level_3_runs_on_ortx_ep_like_ort():
    """run_graph compiles the whole graph: every node, attention and the contrib Gelu included, is OrtxEP's."""
    proto = _models.transformer_block()
    optimized, reports = optimize(proto, level=3)
    assert [r.counts for r in reports if r.name == "fuse_attention_extended"] == [{"attentions_fused": 1}]
    ops = [node.op_type for node in optimized.graph.node]
    assert "Softmax" not in ops and "Erf" not in ops and ops.count("Gelu") == 1  # com.microsoft Gelu (opset 17)
    assert len(ops) == 23  # 33 in the input, 30 after -O2
    feeds = feeds_for(proto)
    expected = run_ort(proto, feeds)[0]
    for threads in (1, 2):
        assert_model_close(run_graph(optimized, feeds, num_threads=threads)[0], expected)
        assert_model_close(run_graph(optimized, feeds, num_threads=threads, use_reference_kernels=True)[0], expected)


@pytest.mark.parametrize("mask_shape", [(2, 1, 1, 6), (2, 2, 1, 6), (1, 2, 6, 6), (6,), (2, 1, 6, 1)])
def test_ortx_ep_runs_masks_of_every_broadcast(mask_shape):
    """(2, 1, 1, 6) over batch x heads (2, 2) has no single batch stride: the lowering expands it first."""
    dims = ",".join(map(str, mask_shape))
    proto = from_text(_model(17).replace("float[2,1,1,6] mask", f"float[{dims}] mask"))
    model = to_ir(proto)
    assert fuse_attention_extended(model).modified
    feeds = feeds_for(proto)
    feeds["mask"] = np.random.default_rng(3).uniform(-3, 0, mask_shape).astype(np.float32)
    for reference in (False, True):
        assert_close(_ortx_ep(model, feeds, num_threads=2, use_reference_kernels=reference), run_ort(proto, feeds)[0])
