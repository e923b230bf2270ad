"""Fuses a MatMul's bias and residual Adds into one ai.ortx FusedMatMul node, for OrtxEP only (a transformer's
projections: fuse_gemm takes 2-D MatMul + Add only, and Gemm has no residual).

Before: MatMul(A[..., M, K], W[K, N]) -> Add(., b) -> [Add(., Z)]      (W, b constant; Z of the output's shape)
After:  ai.ortx::FusedMatMul(A, W, b, Z or absent), Y = A @ W + b (+ Z): the GEMM's epilogue adds both while each
        output tile is in registers (ortx/ep/lowering/conv.py lower_fused_matmul).
Does not apply when: W is not a constant 2-D float32 initializer; b is not a constant float32 broadcasting along the
last axis only ([N] or [1, ..., 1, N]); Z's shape is not statically the MatMul output's; an intermediate has
another reader or is a graph output. The bias-and-residual rule runs before the bias-only one, so a residual Add is
never left behind by a bias-only match. Each FusedMatMul lists the nodes it replaced in
metadata_props["ortx.fused_from"]. Not in DEFAULT_PASSES: plain onnxruntime cannot run ai.ortx ops.
"""
from __future__ import annotations

import logging
import time

import onnx_ir as ir
from onnxscript.rewriter import RewriteRuleClassBase
from onnxscript.rewriter._basics import MatchResult

from ortx.passes._report import PassReport, apply_fusions, record_fused_from

logger = logging.getLogger(__name__)

ORTX_DOMAIN = "ai.ortx"
FUSED_MATMUL = "FusedMatMul"


def _static(value: ir.Value | None) -> tuple[int, ...] | None:
    if value is None or value.shape is None or not all(isinstance(dim, int) for dim in value.shape):
        return None
    return tuple(value.shape)


class _MatMulEpilogueBase(RewriteRuleClassBase):
    residual = False

    def __init__(self, notes: list[str]) -> None:
        super().__init__(name=f"MatMulBias{'Residual' if self.residual else ''}Fusion")
        self.notes = notes

    def _fail(self, result: MatchResult, node: ir.Node, reason: str) -> MatchResult:
        self.notes.append(f"{node.name}: epilogue not fused: {reason}")
        return result.fail(reason)

    def check(self, context, a, w, bias, product, z=None, **_) -> MatchResult:
        result = MatchResult()
        matmul = product.producer()
        weights, output = w.const_value, _static(product)
        if weights is None or w.is_graph_input() or len(weights.shape) != 2 or w.dtype != ir.DataType.FLOAT:
            return self._fail(result, matmul, "the weights are not a constant 2-D float32 initializer")
        if output is None or a.dtype != ir.DataType.FLOAT or len(output) < 2:
            return self._fail(result, matmul, "the output shape is not static or A is not float32 of rank >= 2")
        bias_shape = _static(bias)
        if bias.const_value is None or bias.is_graph_input() or bias.dtype != ir.DataType.FLOAT \
                or bias_shape is None or bias_shape[-1:] != output[-1:] or any(dim != 1 for dim in bias_shape[:-1]) \
                or len(bias_shape) > len(output):
            return self._fail(result, matmul, f"bias {bias_shape} is not a constant float32 row of {output[-1]}")
        if self.residual and (_static(z) != output or z.dtype != ir.DataType.FLOAT):
            return self._fail(result, matmul, f"residual shape {_static(z)} is not the product's {output}")
        self.matched = list(context.nodes)
        return result

    def rewrite(self, op, a, w, bias, z=None, **_):
        inputs = [a, w, bias] + ([z] if self.residual else [])
        output = op.op(FUSED_MATMUL, *inputs, _domain=ORTX_DOMAIN)
        record_fused_from(output.producer(), self.matched)
        return output


class MatMulBiasResidualFusion(_MatMulEpilogueBase):
    residual = True

    def pattern(self, op, a, w, bias, z):
        return op.Add(op.Add(op.MatMul(a, w, _outputs=["product"]), bias), z)


class MatMulBiasFusion(_MatMulEpilogueBase):
    def pattern(self, op, a, w, bias):
        return op.Add(op.MatMul(a, w, _outputs=["product"]), bias)


def fuse_matmul_epilogue(model: ir.Model) -> PassReport:
    start = time.perf_counter()
    notes: list[str] = []
    residuals = apply_fusions(model, [MatMulBiasResidualFusion(notes)], commute=True)
    biases = apply_fusions(model, [MatMulBiasFusion(notes)], commute=True)
    if residuals or biases:
        model.opset_imports.setdefault(ORTX_DOMAIN, 1)
        model.graph.opset_imports.setdefault(ORTX_DOMAIN, 1)
    # Keep reasons only for MatMuls still there (the other rule may have fused one the first rejected).
    remaining = {node.name for node in model.graph}
    return PassReport(model, name="fuse_matmul_epilogue",
                      counts={"biases_fused": residuals + biases, "residuals_fused": residuals},
                      notes=sorted({note for note in notes if note.split(":")[0] in remaining}),
                      seconds=time.perf_counter() - start)
