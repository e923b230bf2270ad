"""HardSigmoid and HardSwish from the decomposed forms exporters (PaddlePaddle's p2o, older PyTorch) emit.

Case 1: Div(Clip(Add(x, 3), 0, 6), 6) or Mul(Clip(Add(x, 3), 0, 6), 1/6)      -> HardSigmoid(x, alpha=1/6, beta=1/2)
Case 2: Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6) or Mul(Mul(x, Clip(...)), 1/6)
        -> HardSwish(x) when the opset is >= 14, else Mul(x, HardSigmoid(x, 1/6, 1/2)) (4 nodes -> 2)
Case 3: Mul(x, HardSigmoid(x, alpha=1/6, beta=1/2))                               -> HardSwish(x), opset >= 14
Does not apply when: a constant is not the expected value (within 1e-4 relative: 1/6 is inexact in float32);
Clip's bounds are attributes (opset < 11) or not constant; an intermediate has another reader; HardSigmoid has
other alpha/beta (e.g. the 0.2 of squeeze-excitation gates). x * clip(x+3, 0, 6) / 6 equals
x * max(0, min(1, x/6 + 1/2)) exactly in real arithmetic; float results differ by an ulp or so.
SiLU (x * Sigmoid(x)) is fuse_silu's.
"""
from __future__ import annotations

import logging
import time

import onnx_ir as ir
from onnxscript.rewriter import RewriteRuleClassBase
from onnxscript.rewriter._basics import MatchResult
from onnxscript.rewriter._ir_utils import get_singleton_value

from ortx.passes._report import PassReport, apply_fusions, record_fused_from
from ortx.passes.fuse_layer_normalization import default_opset

logger = logging.getLogger(__name__)

HARDSWISH_OPSET = 14
# 1/6 is inexact in float32, and exporters write it as 0.16666670143604279 or 0.1666666716337204.
_CONSTANT_RTOL = 1e-4


def _is(value: ir.Value | None, expected: float) -> bool:
    scalar = get_singleton_value(value)
    return scalar is not None and abs(float(scalar) - expected) <= _CONSTANT_RTOL * abs(expected)


def _hard_sigmoid_checks(add_constant, low, high, scale_constant, scale_op: str) -> str | None:
    """Reason the Clip(Add(x, 3), 0, 6) / 6 part is not a HardSigmoid(1/6, 1/2), or None."""
    if not _is(add_constant, 3.0):
        return "the Add constant is not 3"
    if get_singleton_value(low) is None or float(get_singleton_value(low)) != 0.0 or not _is(high, 6.0):
        return "the Clip bounds are not constants 0 and 6"
    if not _is(scale_constant, 6.0 if scale_op == "Div" else 1.0 / 6.0):
        return f"the {scale_op} constant is not {'6' if scale_op == 'Div' else '1/6'}"
    return None


class HardSigmoidFusion(RewriteRuleClassBase):
    """Case 1; scale_op is "Div" (by 6) or "Mul" (by 1/6)."""

    def __init__(self, scale_op: str) -> None:
        super().__init__(name=f"HardSigmoidFusion_{scale_op}")
        self.scale_op = scale_op

    def pattern(self, op, x, add_constant, low, high, scale_constant):
        clipped = op.Clip(op.Add(x, add_constant), low, high)
        return getattr(op, self.scale_op)(clipped, scale_constant)

    def check(self, context, x, add_constant, low, high, scale_constant) -> MatchResult:
        result = MatchResult()
        reason = _hard_sigmoid_checks(add_constant, low, high, scale_constant, self.scale_op)
        self.matched = list(context.nodes)  # rewrite follows a successful check on the same match
        return result.fail(reason) if reason else result

    def rewrite(self, op, x, add_constant, low, high, scale_constant):
        output = op.HardSigmoid(x, alpha=1.0 / 6.0, beta=0.5)
        record_fused_from(output.producer(), self.matched)
        return output


class HardSwishFusion(RewriteRuleClassBase):
    """Case 2 (form "Div" or "Mul": the scaling comes after the product) and Case 3 (form "HardSigmoid")."""

    def __init__(self, form: str, opset: int) -> None:
        super().__init__(name=f"HardSwishFusion_{form}")
        self.form = form
        self.opset = opset

    def pattern(self, op, x, add_constant, low, high, scale_constant):
        if self.form == "HardSigmoid":
            return op.Mul(x, op.HardSigmoid(x, _outputs=["gate"]))
        product = op.Mul(x, op.Clip(op.Add(x, add_constant), low, high))
        return getattr(op, self.form)(product, scale_constant)

    def check(self, context, x, gate=None, add_constant=None, low=None, high=None, scale_constant=None,
              **_) -> MatchResult:
        result = MatchResult()
        opset = self.opset
        self.matched = list(context.nodes)  # rewrite follows a successful check on the same match
        if self.form == "HardSigmoid":
            attributes = gate.producer().attributes
            if opset < HARDSWISH_OPSET:
                return result.fail(f"opset {opset} < {HARDSWISH_OPSET}: HardSwish does not exist")
            if abs(attributes.get_float("alpha", 0.2) - 1.0 / 6.0) > _CONSTANT_RTOL / 6.0 or \
                    attributes.get_float("beta", 0.5) != 0.5:
                return result.fail("HardSigmoid alpha/beta are not 1/6, 1/2")
            return result
        reason = _hard_sigmoid_checks(add_constant, low, high, scale_constant, self.form)
        return result.fail(reason) if reason else result

    def rewrite(self, op, x, **_):
        if self.opset >= HARDSWISH_OPSET:
            output = op.HardSwish(x)
            record_fused_from(output.producer(), self.matched)
            return output
        gate = op.HardSigmoid(x, alpha=1.0 / 6.0, beta=0.5)
        output = op.Mul(x, gate)
        for node in (gate.producer(), output.producer()):
            record_fused_from(node, self.matched)
        return output


def fuse_hardswish(model: ir.Model) -> PassReport:
    start = time.perf_counter()
    opset = default_opset(model)
    counts = {"hardswishes_fused": 0, "hardsigmoids_fused": 0}
    # The whole products first: fusing their inner Clip / 6 first would leave x * HardSigmoid (Case 3), which at
    # opset < 14 cannot become one node.
    counts["hardswishes_fused"] += apply_fusions(model, [HardSwishFusion("Div", opset), HardSwishFusion("Mul", opset)],
                                                 commute=True)
    counts["hardsigmoids_fused"] += apply_fusions(model, [HardSigmoidFusion("Div"), HardSigmoidFusion("Mul")],
                                                  commute=True)
    counts["hardswishes_fused"] += apply_fusions(model, [HardSwishFusion("HardSigmoid", opset)], commute=True)
    notes = [] if opset >= HARDSWISH_OPSET else [
        f"<model>: opset {opset} < {HARDSWISH_OPSET}: x * Clip(x + 3, 0, 6) / 6 becomes x * HardSigmoid(x), "
        f"not HardSwish"] * bool(counts["hardswishes_fused"])
    return PassReport(model, name="fuse_hardswish", counts=counts, notes=notes, seconds=time.perf_counter() - start)
