import pytest

from ortx.passes.fuse_silu import fuse_silu, fuse_silu_extended
from tests.passes._helpers import feeds_for, from_text, op_types, run_ort, to_ir
from tests.tolerances import assert_close


def _model(body: str, opset: int) -> str:
    # X scaled by 6 so the sigmoid sees both saturated tails and its middle.
    return f"""
    <ir_version: 10, opset_import: ["" : {opset}]>
    agraph (float[2,5,9] X0, float[2,5,9] G) => (float[2,5,9] Y) {{
        six = Constant <value = float {{6.0}}> ()
        X = Mul (X0, six)
        {body}
    }}"""


SILU = "s = Sigmoid (X)\n Y = Mul (X, s)"
SILU_SWAPPED = "s = Sigmoid (X)\n Y = Mul (s, X)"


@pytest.mark.parametrize("body", [SILU, SILU_SWAPPED])
def test_fuses_into_swish_at_opset_24(body):
    proto = from_text(_model(body, 24))
    model = to_ir(proto)
    report = fuse_silu(model)
    assert op_types(model) == ["Constant", "Mul", "Swish"]
    assert report.counts == {"silus_fused": 1}
    swish = [node for node in model.graph if node.op_type == "Swish"][0]
    assert len(swish.metadata_props["ortx.fused_from"].split(",")) == 2
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_below_opset_24_level_2_leaves_it_and_level_3_emits_quick_gelu():
    proto = from_text(_model(SILU, 17))
    model = to_ir(proto)
    report = fuse_silu(model)
    assert not report.modified and op_types(model) == ["Constant", "Mul", "Sigmoid", "Mul"]
    assert "opset 17 < 24" in report.notes[0]
    report = fuse_silu_extended(model)
    assert report.counts == {"silus_fused": 1} and report.name == "fuse_silu_extended"
    assert op_types(model) == ["Constant", "Mul", "QuickGelu"]
    quick_gelu = [node for node in model.graph if node.op_type == "QuickGelu"][0]
    assert quick_gelu.domain == "com.microsoft" and quick_gelu.attributes.get_float("alpha") == 1.0
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])  # plain onnxruntime runs the contrib op


@pytest.mark.parametrize("body", [
    "s = Sigmoid (G)\n Y = Mul (X, s)",                      # a gate from another tensor (squeeze-excitation)
    "s = Sigmoid (X)\n m = Mul (X, s)\n Y = Add (m, s)",     # the sigmoid has another reader
])
def test_does_not_fire_on_gates_or_shared_sigmoid(body):
    model = to_ir(from_text(_model(body, 24)))
    before = op_types(model)
    assert not fuse_silu_extended(model).modified and op_types(model) == before


@pytest.mark.parametrize("opset, fuse", [(24, fuse_silu), (17, fuse_silu_extended)])
def test_idempotent(opset, fuse):
    model = to_ir(from_text(_model(SILU, opset)))
    assert fuse(model).modified and not fuse(model).modified
