import pytest

from ortx.passes.fuse_hardswish import fuse_hardswish
from tests.passes._helpers import feeds_for, from_text, op_types, run_ort, to_ir
from tests.tolerances import assert_close


def _model(body: str, opset: int = 17) -> str:
    # X scaled by 5 inside the graph so inputs reach both clip bounds (|x| > 3).
    return f"""
    <ir_version: 10, opset_import: ["" : {opset}]>
    agraph (float[2,7,3] X0) => (float[2,7,3] Y) {{
        five = Constant <value = float {{5.0}}> ()
        X = Mul (X0, five)
        three = Constant <value = float {{3.0}}> ()
        zero = Constant <value = float {{0.0}}> ()
        six = Constant <value = float {{6.0}}> ()
        sixth = Constant <value = float {{0.16666670143604279}}> ()
        {body}
    }}"""


FORMS = {
    "pp-ocr div after product": "a = Add (X, three)\n c = Clip (a, zero, six)\n m = Mul (X, c)\n Y = Div (m, six)",
    "mul by 1/6 after product": "a = Add (three, X)\n c = Clip (a, zero, six)\n m = Mul (c, X)\n Y = Mul (m, sixth)",
    "hardsigmoid gate": "g = HardSigmoid <alpha = 0.16666667, beta = 0.5> (X)\n Y = Mul (X, g)",
    "clip/6 gate": "a = Add (X, three)\n c = Clip (a, zero, six)\n g = Div (c, six)\n Y = Mul (X, g)",
}


def _non_constant(model):
    return [op for op in op_types(model) if op != "Constant"]


@pytest.mark.parametrize("form", sorted(FORMS))
def test_fuses_forms_into_hardswish_at_opset_14(form):
    proto = from_text(_model(FORMS[form]))
    model = to_ir(proto)
    report = fuse_hardswish(model)
    assert _non_constant(model) == ["Mul", "HardSwish"]
    assert report.counts["hardswishes_fused"] == 1
    hardswish = [node for node in model.graph if node.op_type == "HardSwish"][0]
    assert len(hardswish.metadata_props["ortx.fused_from"].split(",")) >= 2
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_opset_12_gets_x_times_hardsigmoid():
    proto = from_text(_model(FORMS["pp-ocr div after product"], opset=12))
    model = to_ir(proto)
    report = fuse_hardswish(model)
    assert _non_constant(model) == ["Mul", "HardSigmoid", "Mul"]
    assert report.counts == {"hardswishes_fused": 1, "hardsigmoids_fused": 0} and "opset 12" in report.notes[0]
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


@pytest.mark.parametrize("body", [
    "a = Add (X, three)\n c = Clip (a, zero, six)\n m = Mul (X, c)\n Y = Div (m, three)",   # / 3
    "g = HardSigmoid <alpha = 0.2, beta = 0.5> (X)\n Y = Mul (X, g)",                       # SE gate, not swish
    "a = Add (X, six)\n c = Clip (a, zero, six)\n m = Mul (X, c)\n Y = Div (m, six)",       # x + 6
])
def test_does_not_fire_on_other_constants(body):
    model = to_ir(from_text(_model(body)))
    before = _non_constant(model)
    assert not fuse_hardswish(model).modified and _non_constant(model) == before


def test_idempotent():
    model = to_ir(from_text(_model(FORMS["pp-ocr div after product"])))
    assert fuse_hardswish(model).modified and not fuse_hardswish(model).modified
