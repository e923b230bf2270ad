import pytest

from ortx.pipeline import name_nodes
from ortx.passes.fuse_gelu import fuse_gelu, fuse_gelu_extended
from tests.passes._helpers import feeds_for, from_text, op_types, run_ort, to_ir
from tests.tolerances import assert_close

ERF = {
    "product": "s = Div (X, sqrt2)\n e = Erf (s)\n b = Add (e, one)\n p = Mul (X, b)\n Y = Mul (p, half)",
    "x": "s = Mul (X, inv_sqrt2)\n e = Erf (s)\n b = Add (one, e)\n h = Mul (half, X)\n Y = Mul (h, b)",
    "bracket": "s = Div (X, sqrt2)\n e = Erf (s)\n b = Add (e, one)\n hb = Mul (b, half)\n Y = Mul (X, hb)",
}
TANH = ("c = Pow (X, three)\n k = Mul (c, cube)\n i = Add (X, k)\n z = Mul (i, sqrt2pi)\n t = Tanh (z)\n"
        " b = Add (t, one)\n p = Mul (X, b)\n Y = Mul (p, half)")


def _model(body: str, opset: int = 20) -> str:
    return f"""
    <ir_version: 10, opset_import: ["" : {opset}]>
    agraph (float[3,11] X0) => (float[3,11] Y) {{
        two = Constant <value = float {{2.0}}> ()
        X = Mul (X0, two)
        sqrt2 = Constant <value = float {{1.4142135}}> ()
        inv_sqrt2 = Constant <value = float {{0.70710677}}> ()
        one = Constant <value = float {{1.0}}> ()
        half = Constant <value = float {{0.5}}> ()
        three = Constant <value = float {{3.0}}> ()
        cube = Constant <value = float {{0.044715}}> ()
        sqrt2pi = Constant <value = float {{0.7978846}}> ()
        {body}
    }}"""


def _non_constant(model):
    return [op for op in op_types(model) if op != "Constant"]


@pytest.mark.parametrize("body,approximate", [(ERF[k], "none") for k in sorted(ERF)] + [(TANH, "tanh")])
def test_fuses_erf_and_tanh_forms(body, approximate):
    proto = from_text(_model(body))
    model = to_ir(proto)
    report = fuse_gelu(model)
    assert _non_constant(model) == ["Mul", "Gelu"] and report.counts == {"gelus_fused": 1}
    gelu = [node for node in model.graph if node.op_type == "Gelu"][0]
    assert gelu.attributes.get_string("approximate", "none") == approximate
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_does_not_fire_below_opset_20_or_on_wrong_constants():
    model = to_ir(from_text(_model(ERF["product"], opset=17)))
    report = fuse_gelu(model)
    assert "Gelu" not in op_types(model) and not report.modified and "opset 17 < 20" in report.notes[0]
    model = to_ir(from_text(_model(ERF["product"].replace("Div (X, sqrt2)", "Div (X, two)"))))
    assert not fuse_gelu(model).modified and "Erf" in op_types(model)


def test_idempotent():
    model = to_ir(from_text(_model(TANH)))
    assert fuse_gelu(model).modified and not fuse_gelu(model).modified


@pytest.mark.parametrize("body,contrib_op", [(ERF["product"], "Gelu"), (ERF["x"], "Gelu"), (TANH, "FastGelu")])
def test_level_3_below_opset_20_emits_onnxruntime_contrib_ops(body, contrib_op):
    proto = from_text(_model(body, opset=17))
    name_nodes(proto)
    model = to_ir(proto)
    report = fuse_gelu_extended(model)
    assert _non_constant(model) == ["Mul", contrib_op] and report.counts == {"gelus_fused": 1}
    assert report.name == "fuse_gelu_extended" and model.opset_imports["com.microsoft"] == 1
    gelu = [node for node in model.graph if node.op_type == contrib_op][0]
    replaced = gelu.metadata_props["ortx.fused_from"].split(",")
    assert gelu.domain == "com.microsoft" and len(replaced) == len(body.split("\n"))
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])  # plain onnxruntime runs contrib ops
    assert not fuse_gelu_extended(model).modified


def test_level_3_does_not_fire_on_wrong_constants():
    model = to_ir(from_text(_model(ERF["product"].replace("Div (X, sqrt2)", "Div (X, two)"), opset=17)))
    assert not fuse_gelu_extended(model).modified and "Erf" in op_types(model)


def test_rules_are_dropped_only_for_op_types_the_model_lacks():
    """apply_fusions' prefilter: the Erf form needs Erf, Add, Mul (its Div-or-Mul scaling is an OrValue, so Div is
    not required); a model without Erf or Tanh builds no rule at all and reports nothing fused."""
    from onnxscript.rewriter import RewriteRule

    from ortx.passes._report import _required_op_types
    from ortx.passes.fuse_gelu import GeluFusion

    def required(approximation):
        fusion = GeluFusion(approximation, "product")
        return _required_op_types(RewriteRule(fusion.pattern, fusion.rewrite, fusion.check))

    assert required("none") == {"Erf", "Add", "Mul"}
    assert required("tanh") == {"Pow", "Tanh", "Add", "Mul"}
    model = to_ir(from_text(_model("e = Relu (X)\n b = Add (e, one)\n p = Mul (X, b)\n Y = Mul (p, half)")))
    assert fuse_gelu(model).counts == {"gelus_fused": 0}


def test_op_types_include_subgraphs():
    """The rule set also rewrites If/Loop bodies, so the prefilter must see their op types: an Erf in a branch."""
    from ortx.passes._report import _op_types

    proto = from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    agraph (float[3,11] X, bool c) => (float[3,11] Z) {
        Z = If (c) <then_branch = g1 () => (float[3,11] Y) {
            Y = Erf (X)
        }, else_branch = g2 () => (float[3,11] W) {
            W = Identity (X)
        }>
    }""")
    assert _op_types(to_ir(proto)) == {"If", "Erf", "Identity"}
