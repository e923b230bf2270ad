import numpy as np
import pytest

from ortx.passes.fuse_reduce_sum_square import fuse_reduce_sum_square
from tests.passes._helpers import feeds_for, from_text, op_types, run_ort, to_ir
from tests.tolerances import assert_close


def _model(body: str, opset: int, out_shape: str = "float[2,7]") -> str:
    return f"""
    <ir_version: 10, opset_import: ["" : {opset}]>
    agraph (float[2,7,2] X) => ({out_shape} Y) {{
        {body}
    }}"""


AXES_INPUT = "axes = Constant <value = int64[1] {-1}> ()\n "
CASES = [  # (opset, body, op types after)
    (17, AXES_INPUT + "s = Mul (X, X)\n Y = ReduceSum <keepdims = 0> (s, axes)", ["Constant", "ReduceSumSquare"]),
    (17, AXES_INPUT + "two = Constant <value = float {2.0}> ()\n s = Pow (X, two)\n "
                      "Y = ReduceSum <keepdims = 0> (s, axes)", ["Constant", "Constant", "ReduceSumSquare"]),
    (18, AXES_INPUT + "s = Mul (X, X)\n Y = ReduceSum <keepdims = 0> (s, axes)", ["Constant", "ReduceSumSquare"]),
    (11, "s = Mul (X, X)\n Y = ReduceSum <axes = [2], keepdims = 0> (s)", ["ReduceSumSquare"]),
]


@pytest.mark.parametrize("opset, body, after", CASES, ids=["mul-17", "pow-17", "mul-18", "mul-11"])
def test_square_then_reduce_sum_becomes_reduce_sum_square(opset, body, after):
    proto = from_text(_model(body, opset))
    model = to_ir(proto)
    report = fuse_reduce_sum_square(model)
    assert op_types(model) == after
    assert report.counts == {"reduce_sum_squares_fused": 1}
    fused = [node for node in model.graph if node.op_type == "ReduceSumSquare"][0]
    assert len(fused.metadata_props["ortx.fused_from"].split(",")) == 2
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])
    assert not fuse_reduce_sum_square(model).modified  # idempotent


def test_keepdims_and_all_axes_carry_over():
    proto = from_text(_model("s = Mul (X, X)\n Y = ReduceSum (s)", 13, "float[1,1,1]"))
    model = to_ir(proto)
    assert fuse_reduce_sum_square(model).counts == {"reduce_sum_squares_fused": 1}
    feeds = feeds_for(proto)
    np.testing.assert_allclose(run_ort(model, feeds)[0], run_ort(proto, feeds)[0], rtol=1e-6)


@pytest.mark.parametrize("body, reason", [
    (AXES_INPUT + "s = Mul (X, X)\n r = ReduceSum <keepdims = 0> (s, axes)\n t = ReduceMax <axes = [2], keepdims = 0>"
                  " (s)\n Y = Add (r, t)", None),                                   # the squares have another reader
    (AXES_INPUT + "three = Constant <value = float {3.0}> ()\n s = Pow (X, three)\n Y = ReduceSum <keepdims = 0> "
                  "(s, axes)", "exponent is not the constant 2"),
    ("s = Mul (X, X)\n Y = ReduceSum <keepdims = 0> (s, A)", "is not constant"),      # axes computed at run time
    (AXES_INPUT + "s = Mul (X, X)\n Y = ReduceSum <keepdims = 0, noop_with_empty_axes = 1> (s, axes)",
     "noop_with_empty_axes"),
], ids=["shared-square", "cube", "runtime-axes", "noop-attribute"])
def test_does_not_fire(body, reason):
    text = _model(body, 17)
    if " A)" in body:  # axes as a graph input
        text = text.replace("(float[2,7,2] X)", "(float[2,7,2] X, int64[1] A)")
    model = to_ir(from_text(text))
    before = op_types(model)
    report = fuse_reduce_sum_square(model)
    assert not report.modified and op_types(model) == before
    if reason:
        assert any(reason in note for note in report.notes), report.notes
