"""SiLU / Swish from its decomposition x * Sigmoid(x).

Case 1 (opset >= 24):          Mul(x, Sigmoid(x)) -> Swish(x)                         (standard ONNX, level 2)
Case 2 (opset < 24, extended): Mul(x, Sigmoid(x)) -> com.microsoft::QuickGelu(x, alpha=1)   (level 3)
QuickGelu is onnxruntime's own op for x * sigmoid(alpha * x) (its QuickGeluFusion emits it for SiLU too), so the
level-3 output still runs on plain onnxruntime as well as on OrtxEP. Does not apply when: Sigmoid reads another
tensor than the Mul's other operand (a gate, as in squeeze-excitation); Sigmoid's output has another reader; the
opset is below 24 and `extended` is off (Swish does not exist there; the model is left as is).
"""
from __future__ import annotations

import logging
import time

import onnx_ir as ir
from onnxscript.rewriter import RewriteRuleClassBase
from onnxscript.rewriter._basics import MatchResult

from ortx.passes._report import PassReport, apply_fusions, record_fused_from
from ortx.passes.fuse_layer_normalization import default_opset

logger = logging.getLogger(__name__)

SWISH_OPSET = 24
CONTRIB_DOMAIN = "com.microsoft"


class SiluFusion(RewriteRuleClassBase):
    """Case 1 when the model's opset has Swish, else Case 2 when `extended`."""

    def __init__(self, opset: int, extended: bool) -> None:
        super().__init__(name="SiluFusion")
        self.opset, self.extended = opset, extended

    def pattern(self, op, x):
        return op.Mul(x, op.Sigmoid(x))

    def check(self, context, x) -> MatchResult:
        result = MatchResult()
        self.matched = list(context.nodes)  # rewrite follows a successful check on the same match
        if self.opset < SWISH_OPSET and not self.extended:
            return result.fail(f"opset {self.opset} < {SWISH_OPSET}: Swish does not exist")
        return result

    def rewrite(self, op, x):
        if self.opset >= SWISH_OPSET:
            output = op.Swish(x)
        else:
            output = op.QuickGelu(x, alpha=1.0, _domain=CONTRIB_DOMAIN)
        record_fused_from(output.producer(), self.matched)
        return output


def fuse_silu(model: ir.Model, *, extended: bool = False) -> PassReport:
    """extended: below opset 24, emit com.microsoft QuickGelu (level 3) instead of leaving the Mul/Sigmoid pair."""
    start = time.perf_counter()
    opset = default_opset(model)
    count = apply_fusions(model, [SiluFusion(opset, extended)], commute=True)
    notes = []
    if count and opset < SWISH_OPSET:
        model.opset_imports.setdefault(CONTRIB_DOMAIN, 1)
        model.graph.opset_imports.setdefault(CONTRIB_DOMAIN, 1)
    if not count and opset < SWISH_OPSET and not extended:
        pairs = sum(1 for node in model.graph if node.op_type == "Mul" and node.inputs[1] is not None and any(
            value.producer() is not None and value.producer().op_type == "Sigmoid"
            and value.producer().inputs[0] in node.inputs for value in node.inputs))
        if pairs:
            notes.append(f"<model>: opset {opset} < {SWISH_OPSET}: {pairs} x * Sigmoid(x) left decomposed "
                         f"(level 3 makes them com.microsoft QuickGelu)")
    return PassReport(model, name="fuse_silu", counts={"silus_fused": count}, notes=notes,
                      seconds=time.perf_counter() - start)


def fuse_silu_extended(model: ir.Model) -> PassReport:
    """Level 3's fuse_silu: non-standard ops allowed (onnxruntime's contrib ops)."""
    report = fuse_silu(model, extended=True)
    report.name = "fuse_silu_extended"
    return report
