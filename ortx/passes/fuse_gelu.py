"""Gelu (opset 20) from its erf and tanh decompositions.

Case 1 (erf):  0.5 * x * (1 + Erf(x / sqrt(2)))                              -> Gelu(x)
Case 2 (tanh): 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))       -> Gelu(x, approximate="tanh")
Below opset 20 with `extended` (level 3), onnxruntime's contrib ops instead: Case 1 -> com.microsoft::Gelu(x),
Case 2 -> com.microsoft::FastGelu(x); plain onnxruntime and OrtxEP both run them.
The 0.5 may multiply x, the bracket or the product (three outer forms); x / sqrt(2) may be x * (1/sqrt(2)); x^3 is
Pow(x, 3) (x * x * x is not matched). Does not apply when: the default opset is below 20 and `extended` is off (Gelu
does not exist; the model is left as is rather than upgraded, see upgrade_opset: raising 17 -> 20 touches every
Reduce op for one activation); a constant differs from the formula's by more than 1e-4 relative; an intermediate
has other readers.
"""
from __future__ import annotations

import logging
import math
import time

import onnx_ir as ir
from onnxscript.rewriter import RewriteRuleClassBase, pattern
from onnxscript.rewriter._basics import MatchResult
from onnxscript.rewriter._ir_utils import get_singleton_value

from ortx.passes._report import PassReport, apply_fusions, record_fused_from
from ortx.passes.fuse_layer_normalization import default_opset

logger = logging.getLogger(__name__)

GELU_OPSET = 20
CONTRIB_DOMAIN = "com.microsoft"
_CONSTANT_RTOL = 1e-4


def _is(value: ir.Value | None, expected: float) -> bool:
    scalar = get_singleton_value(value)
    return scalar is not None and abs(float(scalar) - expected) <= _CONSTANT_RTOL * abs(expected)


class GeluFusion(RewriteRuleClassBase):
    """approximation "none" (Case 1) or "tanh" (Case 2); outer in {"product", "x", "bracket"} says what the 0.5
    multiplies."""

    def __init__(self, approximation: str, outer: str, extended: bool = False) -> None:
        super().__init__(name=f"GeluFusion_{approximation}_{outer}")
        self.approximation, self.outer, self.extended = approximation, outer, extended

    def pattern(self, op, x, c_inner, one, half, c_cube, three):
        if self.approximation == "none":
            scaled = pattern.OrValue([op.Div(x, c_inner), op.Mul(x, c_inner)], tag_var="scaling",
                                     tag_values=["Div", "Mul"])
            bracket = op.Add(op.Erf(scaled), one)
        else:
            cubic = op.Add(x, op.Mul(op.Pow(x, three), c_cube))
            bracket = op.Add(op.Tanh(op.Mul(cubic, c_inner)), one)
        if self.outer == "product":
            return op.Mul(op.Mul(x, bracket), half)
        if self.outer == "x":
            return op.Mul(op.Mul(x, half), bracket)
        return op.Mul(x, op.Mul(bracket, half))

    def check(self, context, x, c_inner, one, half, scaling=None, c_cube=None, three=None, **_) -> MatchResult:
        result = MatchResult()
        self.matched = list(context.nodes)  # rewrite follows a successful check on the same match
        self.opset = default_opset(context.graph_or_function)
        if self.opset < GELU_OPSET and not self.extended:
            return result.fail(f"opset < {GELU_OPSET}")
        if not (_is(one, 1.0) and _is(half, 0.5)):
            return result.fail("the 1 or the 0.5 is not that constant")
        if self.approximation == "none":
            expected = math.sqrt(2.0) if scaling == "Div" else 1.0 / math.sqrt(2.0)
            return result if _is(c_inner, expected) else result.fail("not x / sqrt(2)")
        if not (_is(three, 3.0) and _is(c_cube, 0.044715) and _is(c_inner, math.sqrt(2.0 / math.pi))):
            return result.fail("tanh constants are not 3, 0.044715, sqrt(2/pi)")
        return result

    def rewrite(self, op, x, **_):
        if self.opset < GELU_OPSET:  # extended: onnxruntime's contrib ops
            output = op.FastGelu(x, _domain=CONTRIB_DOMAIN) if self.approximation == "tanh" else \
                op.Gelu(x, _domain=CONTRIB_DOMAIN)
        else:
            output = op.Gelu(x, approximate="tanh") if self.approximation == "tanh" else op.Gelu(x)
        record_fused_from(output.producer(), self.matched)
        return output


def fuse_gelu(model: ir.Model, *, extended: bool = False) -> PassReport:
    """extended: below opset 20, emit com.microsoft Gelu / FastGelu (level 3) instead of leaving the chain."""
    start = time.perf_counter()
    opset = default_opset(model)
    if opset < GELU_OPSET and not extended:
        has_erf = any(node.op_type == "Erf" for node in model.graph)
        notes = [f"<model>: opset {opset} < {GELU_OPSET}: Erf-based GELU left decomposed"] if has_erf else []
        return PassReport(model, name="fuse_gelu", counts={"gelus_fused": 0}, notes=notes,
                          seconds=time.perf_counter() - start)
    fusions = [GeluFusion(approximation, outer, extended) for approximation in ("none", "tanh")
               for outer in ("product", "x", "bracket")]
    count = apply_fusions(model, fusions, commute=True)
    if count and opset < GELU_OPSET:
        model.opset_imports.setdefault(CONTRIB_DOMAIN, 1)
        model.graph.opset_imports.setdefault(CONTRIB_DOMAIN, 1)
    return PassReport(model, name="fuse_gelu", counts={"gelus_fused": count}, seconds=time.perf_counter() - start)


def fuse_gelu_extended(model: ir.Model) -> PassReport:
    """Level 3's fuse_gelu: below opset 20, onnxruntime's contrib Gelu / FastGelu."""
    report = fuse_gelu(model, extended=True)
    report.name = "fuse_gelu_extended"
    return report
