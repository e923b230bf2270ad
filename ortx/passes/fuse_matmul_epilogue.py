"""Fuses a MatMul's bias and residual Adds, and the activation after them, into one ai.ortx FusedMatMul node, for
OrtxEP only (a transformer's projections and its FFN's Gelu: fuse_gemm takes 2-D MatMul + Add only, and Gemm has no
residual).

Before: MatMul(A[..., M, K], W[K, N]) -> Add(., b) -> [Add(., Z)] -> [activation]   (W, b constant; Z of the
        output's shape)
After:  ai.ortx::FusedMatMul(A, W, b, Z or absent, activation, activation_params), Y = act(A @ W + b (+ Z)): the
        GEMM's epilogue adds both while each output tile is in registers (ortx/ep/lowering/conv.py
        lower_fused_matmul); the attributes are FusedConv's (absent: no activation).
Activations: fuse_conv_epilogue's (Relu, LeakyRelu [alpha], Clip [min, max], Sigmoid, HardSigmoid [alpha, beta],
HardSwish, Tanh) and Gelu (ONNX Gelu with approximate "none", or onnxruntime's com.microsoft Gelu, which
fuse_gelu_extended makes below opset 20).
Does not apply when: W is not a constant 2-D float32 initializer; b is not a constant float32 broadcasting along the
last axis only ([N] or [1, ..., 1, N]); Z's shape is not statically the MatMul output's; an intermediate has
another reader or is a graph output; a Clip bound is not constant; a Gelu is the tanh form. Rules with an
activation run first, in their own sweep (the rewriter visits the Adds before the activation, so a bias rule in the
same sweep would take them), then bias and residual, then bias alone, so neither an activation nor a residual Add
is left behind by a shorter match. Each FusedMatMul lists the nodes it replaced in
metadata_props["ortx.fused_from"]. Not in DEFAULT_PASSES: plain onnxruntime cannot run ai.ortx ops.
"""
from __future__ import annotations

import logging
import time

import onnx_ir as ir
from onnxscript.rewriter import RewriteRuleClassBase
from onnxscript.rewriter._basics import MatchResult

from ortx.passes._report import PassReport, apply_fusions, record_fused_from
from ortx.passes.fuse_conv_epilogue import ACTIVATIONS as CONV_ACTIVATIONS, activation_parameters

logger = logging.getLogger(__name__)

ORTX_DOMAIN = "ai.ortx"
FUSED_MATMUL = "FusedMatMul"
CONTRIB_DOMAIN = "com.microsoft"
# (op type, domain) of each activation a FusedMatMul takes; the attribute names the op type.
ACTIVATIONS = tuple((name, "") for name in CONV_ACTIVATIONS) + (("Gelu", ""), ("Gelu", CONTRIB_DOMAIN))


def _static(value: ir.Value | None) -> tuple[int, ...] | None:
    if value is None or value.shape is None or not all(isinstance(dim, int) for dim in value.shape):
        return None
    return tuple(value.shape)


class _MatMulEpilogueBase(RewriteRuleClassBase):
    residual = False
    activation = ""  # the activation node's op type ("" for none), in activation_domain
    activation_domain = ""

    def __init__(self, notes: list[str]) -> None:
        super().__init__(name=f"MatMulBias{'Residual' if self.residual else ''}{self.activation}"
                              f"{'Contrib' if self.activation_domain else ''}Fusion")
        self.notes = notes
        self.activation_params: list[float] = []

    def _fail(self, result: MatchResult, node: ir.Node, reason: str) -> MatchResult:
        self.notes.append(f"{node.name}: epilogue not fused: {reason}")
        return result.fail(reason)

    def check(self, context, a, w, bias, product, z=None, act_out=None, **_) -> MatchResult:
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
        if self.activation:
            activation = act_out.producer()
            if self.activation == "Gelu" and activation.attributes.get_string("approximate", "none") != "none":
                return self._fail(result, matmul, f"{activation.name}: Gelu approximate "
                                                  f"{activation.attributes.get_string('approximate')!r} is not fused")
            self.activation_params, reason = activation_parameters(activation)
            if reason:
                return self._fail(result, matmul, f"{activation.name}: {reason}")
        self.matched = list(context.nodes)
        return result

    def rewrite(self, op, a, w, bias, z=None, **_):
        inputs = [a, w, bias] + ([z] if self.residual else [])
        attributes = {}
        if self.activation:
            attributes["activation"] = self.activation
            if self.activation_params:
                attributes["activation_params"] = [float(value) for value in self.activation_params]
        output = op.op(FUSED_MATMUL, *inputs, _domain=ORTX_DOMAIN, **attributes)
        record_fused_from(output.producer(), self.matched)
        return output


class MatMulBiasResidualFusion(_MatMulEpilogueBase):
    residual = True

    def pattern(self, op, a, w, bias, z):
        return op.Add(op.Add(op.MatMul(a, w, _outputs=["product"]), bias), z)


class MatMulBiasFusion(_MatMulEpilogueBase):
    def pattern(self, op, a, w, bias):
        return op.Add(op.MatMul(a, w, _outputs=["product"]), bias)


def _activation_rule(activation: str, domain: str, residual: bool) -> type[_MatMulEpilogueBase]:
    """The rule class for one activation, with or without the residual Add (Clip's bounds are extra inputs)."""
    base = MatMulBiasResidualFusion if residual else MatMulBiasFusion

    def pattern(self, op, a, w, bias, z=None):
        value = op.Add(op.MatMul(a, w, _outputs=["product"]), bias)
        if residual:
            value = op.Add(value, z)
        return getattr(op, activation)(value, _domain=domain, _allow_other_inputs=activation == "Clip",
                                       _outputs=["act_out"])

    name = f"MatMulBias{'Residual' if residual else ''}{activation}{'Contrib' if domain else ''}Fusion"
    return type(name, (base,), {"activation": activation, "activation_domain": domain, "pattern": pattern})


def fuse_matmul_epilogue(model: ir.Model) -> PassReport:
    start = time.perf_counter()
    notes: list[str] = []
    # Activation rules (with the residual Add, then without) each in a sweep before the shorter rules' sweeps.
    activation_and_residual, activation_only = (
        apply_fusions(model, [_activation_rule(activation, domain, residual)(notes)
                              for activation, domain in ACTIVATIONS], commute=True)
        for residual in (True, False))
    residual_only = apply_fusions(model, [MatMulBiasResidualFusion(notes)], commute=True)
    bias_only = apply_fusions(model, [MatMulBiasFusion(notes)], commute=True)
    fused = activation_and_residual + activation_only + residual_only + bias_only
    if fused:
        model.opset_imports.setdefault(ORTX_DOMAIN, 1)
        model.graph.opset_imports.setdefault(ORTX_DOMAIN, 1)
    # Keep reasons only for MatMuls still there (the other rule may have fused one the first rejected).
    remaining = {node.name for node in model.graph}
    return PassReport(model, name="fuse_matmul_epilogue",
                      counts={"biases_fused": fused, "residuals_fused": activation_and_residual + residual_only,
                              "activations_fused": activation_and_residual + activation_only},
                      notes=sorted({note for note in notes if note.split(":")[0] in remaining}),
                      seconds=time.perf_counter() - start)
