"""Fuses a Conv's epilogue (residual Add, activation) into one ai.ortx FusedConv node, for OrtxEP only.

Before: Conv(X, W[, B]) -> [Add(_, Z)] -> [activation]            (Z: a tensor of the Conv output's shape)
After:  ai.ortx::FusedConv(X, W, B or "", Z or "", Conv attributes, activation, activation_params)
        with Y = act(Conv(X, W, B) + Z); activation is one of ACTIVATIONS or "" (none: a residual Add alone).
Before: ConvTranspose(X, W[, B]) -> activation
After:  ai.ortx::FusedConvTranspose(X, W, B or "", ConvTranspose attributes, activation, activation_params)
        (PP-OCRv4 det's head: ConvTranspose -> Relu and ConvTranspose -> Sigmoid, once fuse_conv_batchnorm has
        folded their bias Add and BatchNormalization).
Activations: Relu, LeakyRelu [alpha], Clip [min, max] (opset 11+ constant inputs), Sigmoid, HardSigmoid
[alpha, beta], HardSwish (the op, or PP-OCR's x * Clip(x + 3, 0, 6) / 6, or x * HardSigmoid(x; 1/6, 1/2)), Tanh,
and HardSwishAffine [scale, shift] = scale * HardSwish(x) + shift: a HardSwish FusedConv followed by Mul and/or Add
of float scalar constants (PP-OCRv4's LCNetV3 ends every activation so; before a padded Conv, which
fuse_input_affine cannot fold into, they ran as a separate pass over the tensor).
Does not apply when an intermediate has another consumer or is a graph output, W is not a constant float32
initializer, Z's shape is not statically the Conv output's, or a Clip bound is not constant. Each FusedConv lists
the original node names it replaced in metadata_props["ortx.fused_from"]. Not in DEFAULT_PASSES: plain
onnxruntime cannot run ai.ortx ops, so OrtxEP runs this when it compiles.
"""
from __future__ import annotations

import logging
import time

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import RewriteRuleClassBase
from onnxscript.rewriter._basics import MatchResult
from onnxscript.rewriter._ir_utils import get_singleton_value

from ortx.passes._report import PassReport, apply_fusions, record_fused_from
from ortx.passes.infer_shapes import run_shape_inference

logger = logging.getLogger(__name__)

ORTX_DOMAIN = "ai.ortx"
FUSED_CONV = "FusedConv"
FUSED_CONV_TRANSPOSE = "FusedConvTranspose"
ACTIVATIONS = ("Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh")
# ONNX Clip's defaults when a bound is omitted (numeric_limits<float>::lowest() / max()).
_FLOAT32_LOWEST, _FLOAT32_MAX = float(np.finfo(np.float32).min), float(np.finfo(np.float32).max)
# Singleton constants of the decomposed HardSwish are matched with this relative tolerance (1/6 is inexact).
_CONSTANT_RTOL = 1e-4


def _close(value: ir.Value | None, expected: float) -> bool:
    scalar = get_singleton_value(value)
    return scalar is not None and (float(scalar) == expected if expected == 0 else
                                   abs(float(scalar) - expected) <= _CONSTANT_RTOL * abs(expected))


def activation_parameters(node: ir.Node) -> tuple[list[float], str | None]:
    """(activation_params, reason it cannot be fused or None) for an activation node of ACTIVATIONS."""
    attributes = node.attributes
    if node.op_type == "LeakyRelu":
        return [attributes.get_float("alpha", 0.01)], None
    if node.op_type == "HardSigmoid":
        return [attributes.get_float("alpha", 0.2), attributes.get_float("beta", 0.5)], None
    if node.op_type == "Clip":
        if "min" in attributes or "max" in attributes:  # opset < 11: bounds are attributes
            return [attributes.get_float("min", _FLOAT32_LOWEST), attributes.get_float("max", _FLOAT32_MAX)], None
        bounds = []
        for index, default in ((1, _FLOAT32_LOWEST), (2, _FLOAT32_MAX)):
            value = node.inputs[index] if len(node.inputs) > index else None
            if value is None:
                bounds.append(default)
                continue
            scalar = get_singleton_value(value) if not value.is_graph_input() else None
            if scalar is None:
                return [], f"Clip bound '{value.name}' is not a constant scalar"
            bounds.append(float(scalar))
        return bounds, None
    return [], None


class _ConvEpilogueBase(RewriteRuleClassBase):
    """Shared check/rewrite; subclasses only give the pattern and say how the activation is named."""

    activation = ""  # the op type of the activation node, "HardSwish" for the decomposed forms, "" for none
    residual = False
    fused_op = FUSED_CONV

    def __init__(self, notes: dict[str, str], name: str, excluded: frozenset[str] = frozenset()) -> None:
        super().__init__(name=name)
        self.notes = notes  # conv name -> first reason a candidate around it was not fused
        self.excluded = excluded  # node names that must stay standard ONNX (they are to run on ORT)

    def _fail(self, result: MatchResult, conv: ir.Node, reason: str) -> MatchResult:
        self.notes.setdefault(conv.name, reason)
        return result.fail(reason, conv)

    def _nodes(self, bindings) -> list[ir.Node]:
        """Matched nodes in data-flow order, Conv first."""
        nodes, seen = [], set()
        for name in ("conv_out", "sum_out", "shift_out", "gate_out", "product_out", "act_out"):
            value = bindings.get(name)
            if value is not None and id(value.producer()) not in seen:
                seen.add(id(value.producer()))
                nodes.append(value.producer())
        return nodes

    def check(self, context, **bindings) -> MatchResult:
        del context
        result = MatchResult()
        conv = bindings["conv_out"].producer()
        weight = bindings["w"]
        if weight.const_value is None or weight.is_graph_input():
            return self._fail(result, conv, f"weight '{weight.name}' is not a constant initializer")
        if weight.const_value.dtype != ir.DataType.FLOAT:
            return self._fail(result, conv, f"weight dtype {weight.const_value.dtype} is not float32")
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        if bias is not None and bias.is_graph_input():
            return self._fail(result, conv, f"bias '{bias.name}' is a graph input")
        nodes = self._nodes(bindings)
        kept = [node.name for node in nodes if node.name in self.excluded]
        if kept:
            return self._fail(result, conv, f"'{kept[0]}' is excluded (it runs on ONNX Runtime)")
        final = bindings["act_out"] if bindings.get("act_out") is not None else bindings["sum_out"]
        # Every intermediate is read only inside the pattern. The decomposed HardSwish reads its input twice.
        inside = {id(node) for node in nodes}
        for node in nodes:
            if node.outputs[0] is final:
                continue
            if node.outputs[0].is_graph_output():
                return self._fail(result, conv, f"'{node.outputs[0].name}' is a graph output")
            outside = [use.node.name for use in node.outputs[0].uses() if id(use.node) not in inside]
            if outside:
                return self._fail(result, conv, f"'{node.outputs[0].name}' is also read by {outside[0]}")
        if self.residual:
            residual, conv_out = bindings["z"], bindings["conv_out"]
            if conv_out.shape is None or residual.shape is None or not conv_out.shape.is_static() \
                    or tuple(residual.shape) != tuple(conv_out.shape):
                return self._fail(result, conv, f"residual '{residual.name}' shape {residual.shape} is not the "
                                                f"Conv output shape {conv_out.shape}")
        activation_node = bindings["act_out"].producer() if "act_out" in bindings else None
        if activation_node is not None and self.activation != "HardSwish":
            _, reason = activation_parameters(activation_node)
            if reason:
                return self._fail(result, conv, reason)
        if self.activation == "HardSwish" and not self._hardswish_constants(bindings):
            return self._fail(result, conv, "constants do not spell HardSwish (x * Clip(x + 3, 0, 6) / 6)")
        return result

    def _hardswish_constants(self, bindings) -> bool:
        return True

    def rewrite(self, op, **bindings):
        conv = bindings["conv_out"].producer()
        final = bindings["act_out"] if bindings.get("act_out") is not None else bindings["sum_out"]
        params: list[float] = []
        if self.activation and self.activation != "HardSwish":
            params, _ = activation_parameters(bindings["act_out"].producer())
        inputs = [bindings["x"], bindings["w"], conv.inputs[2] if len(conv.inputs) > 2 else None,
                  bindings["z"] if self.residual else None]
        while inputs[-1] is None:
            inputs.pop()
        attributes = dict(conv.attributes)
        attributes["activation"] = ir.AttrString("activation", self.activation)
        attributes["activation_params"] = ir.AttrFloat32s("activation_params", params)
        output = op.op(self.fused_op, *inputs, _domain=ORTX_DOMAIN, _name=conv.name, **attributes)
        output.type, output.shape = final.type, final.shape
        record_fused_from(output.producer(), self._nodes(bindings))
        return output


def _activation_rule(activation: str, residual: bool) -> type[_ConvEpilogueBase]:
    """A rule class for Conv -> [Add] -> <activation op>."""

    class Rule(_ConvEpilogueBase):
        if residual:
            def pattern(self, op, x, w, z):
                conv_out = op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
                summed = op.Add(conv_out, z, _outputs=["sum_out"])
                return getattr(op, activation)(summed, _allow_other_inputs=True, _outputs=["act_out"])
        else:
            def pattern(self, op, x, w):
                conv_out = op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
                return getattr(op, activation)(conv_out, _allow_other_inputs=True, _outputs=["act_out"])

    Rule.activation, Rule.residual = activation, residual
    Rule.__name__ = Rule.__qualname__ = f"Conv{'Residual' if residual else ''}{activation}Fusion"
    return Rule


def _transpose_activation_rule(activation: str) -> type[_ConvEpilogueBase]:
    """A rule class for ConvTranspose -> <activation op> (no residual: FusedConvTranspose has none)."""

    class Rule(_ConvEpilogueBase):
        fused_op = FUSED_CONV_TRANSPOSE

        def pattern(self, op, x, w):
            conv_out = op.ConvTranspose(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
            return getattr(op, activation)(conv_out, _allow_other_inputs=True, _outputs=["act_out"])

    Rule.activation = activation
    Rule.__name__ = Rule.__qualname__ = f"ConvTranspose{activation}Fusion"
    return Rule


class ConvResidualFusion(_ConvEpilogueBase):
    """Conv -> Add(_, Z) with no activation after it."""

    residual = True

    def pattern(self, op, x, w, z):
        conv_out = op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.Add(conv_out, z, _outputs=["sum_out"])


class _HardSwishClipBase(_ConvEpilogueBase):
    activation = "HardSwish"

    def _hardswish_constants(self, bindings) -> bool:
        return (_close(bindings["three"], 3.0) and _close(bindings["low"], 0.0) and _close(bindings["high"], 6.0)
                and _close(bindings["six"], 6.0))

    def _hardswish(self, op, t, three, low, high, six):
        shifted = op.Add(t, three, _outputs=["shift_out"])
        gate = op.Clip(shifted, low, high, _outputs=["gate_out"])
        return op.Div(op.Mul(t, gate, _outputs=["product_out"]), six, _outputs=["act_out"])


class ConvHardSwishClipFusion(_HardSwishClipBase):
    """Conv -> x * Clip(x + 3, 0, 6) / 6 (PP-OCR's export of HardSwish)."""

    def pattern(self, op, x, w, three, low, high, six):
        conv_out = op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
        return self._hardswish(op, conv_out, three, low, high, six)


class ConvResidualHardSwishClipFusion(_HardSwishClipBase):
    residual = True

    def pattern(self, op, x, w, z, three, low, high, six):
        conv_out = op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
        return self._hardswish(op, op.Add(conv_out, z, _outputs=["sum_out"]), three, low, high, six)


class _HardSwishSigmoidBase(_ConvEpilogueBase):
    activation = "HardSwish"

    def _hardswish_constants(self, bindings) -> bool:
        gate = bindings["gate_out"].producer()
        return (abs(gate.attributes.get_float("alpha", 0.2) - 1 / 6) <= _CONSTANT_RTOL / 6
                and abs(gate.attributes.get_float("beta", 0.5) - 0.5) <= _CONSTANT_RTOL)


class ConvHardSwishSigmoidFusion(_HardSwishSigmoidBase):
    """Conv -> x * HardSigmoid(x; alpha=1/6, beta=1/2)."""

    def pattern(self, op, x, w):
        conv_out = op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.Mul(conv_out, op.HardSigmoid(conv_out, _outputs=["gate_out"]), _outputs=["act_out"])


class ConvResidualHardSwishSigmoidFusion(_HardSwishSigmoidBase):
    residual = True

    def pattern(self, op, x, w, z):
        conv_out = op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
        summed = op.Add(conv_out, z, _outputs=["sum_out"])
        return op.Mul(summed, op.HardSigmoid(summed, _outputs=["gate_out"]), _outputs=["act_out"])


def _fusions(notes: dict[str, str], excluded: frozenset[str]) -> list[_ConvEpilogueBase]:
    """Longest patterns first: the rewriter visits nodes in order and takes the first rule that matches at a node,
    and every rule is rooted at its last node, so an activation is never split from its residual Add. The
    residual-only rule runs in a second sweep, after every activation had its chance."""
    rules: list[_ConvEpilogueBase] = [
        ConvResidualHardSwishClipFusion(notes, "ConvResidualHardSwishClipFusion", excluded),
        ConvResidualHardSwishSigmoidFusion(notes, "ConvResidualHardSwishSigmoidFusion", excluded),
        ConvHardSwishClipFusion(notes, "ConvHardSwishClipFusion", excluded),
        ConvHardSwishSigmoidFusion(notes, "ConvHardSwishSigmoidFusion", excluded),
    ]
    for residual in (True, False):
        for activation in ACTIVATIONS:
            rule_class = _activation_rule(activation, residual)
            rules.append(rule_class(notes, rule_class.__name__, excluded))
    for activation in ACTIVATIONS:
        rule_class = _transpose_activation_rule(activation)
        rules.append(rule_class(notes, rule_class.__name__, excluded))
    return rules


def _ensure_shapes(model: ir.Model) -> None:
    """Residual checks need the Conv output shapes; infer them when the model does not carry them."""
    if all(node.outputs[0].shape is not None for node in model.graph if node.op_type == "Conv"):
        return
    try:
        run_shape_inference(model)
    except Exception as error:  # shape inference is best effort: without shapes only residual fusions are lost
        logger.debug("shape inference failed (%s); residual fusions need static shapes", error)


def _scalar_operand(node: ir.Node, value: ir.Value) -> float | None:
    """The other operand of a binary Mul/Add as a float scalar constant, else None."""
    if node.domain not in ("", "ai.onnx") or len(node.inputs) != 2 or any(v is None for v in node.inputs):
        return None
    other = node.inputs[1] if node.inputs[0] is value else node.inputs[0]
    if other is value or other.is_graph_input() or other.type is None or other.dtype != ir.DataType.FLOAT:
        return None
    scalar = get_singleton_value(other)
    return float(scalar) if scalar is not None and np.isfinite(float(scalar)) else None


def _only_reader(value: ir.Value, op_type: str) -> ir.Node | None:
    uses = list(value.uses())
    if value.is_graph_output() or len(uses) != 1 or uses[0].node.op_type != op_type:
        return None
    return uses[0].node


def _absorb_hardswish_affines(model: ir.Model, excluded: frozenset[str]) -> int:
    """HardSwish FusedConv -> [Mul(_, m)] -> [Add(_, a)] (scalar constants) -> HardSwishAffine [m, a]."""
    absorbed = 0
    for node in list(model.graph):
        if node.domain != ORTX_DOMAIN or node.op_type != FUSED_CONV or \
                node.attributes.get_string("activation", "") != "HardSwish":
            continue
        value, params, taken = node.outputs[0], [1.0, 0.0], []
        for index, op_type in enumerate(("Mul", "Add")):  # scale, then shift
            reader = _only_reader(value, op_type)
            constant = _scalar_operand(reader, value) if reader is not None and reader.name not in excluded else None
            if constant is not None:
                params[index], value = constant, reader.outputs[0]
                taken.append(reader)
        if not taken or value.is_graph_output():
            continue
        output = node.outputs[0]
        output.type, output.shape = value.type or output.type, value.shape or output.shape
        ir.convenience.replace_all_uses_with(value, output)
        node.attributes["activation"] = ir.AttrString("activation", "HardSwishAffine")
        node.attributes["activation_params"] = ir.AttrFloat32s("activation_params", params)
        record_fused_from(node, [node, *taken])
        model.graph.remove(taken, safe=True)
        absorbed += 1
    return absorbed


def _count(model: ir.Model, op_type: str) -> int:
    return sum(1 for node in model.graph if node.domain == ORTX_DOMAIN and node.op_type == op_type)


def fuse_conv_epilogue(model: ir.Model, *, excluded: frozenset[str] = frozenset()) -> PassReport:
    """`excluded`: names of nodes that must not be fused (OrtxEP gives them to ORT, which cannot run FusedConv)."""
    start = time.perf_counter()
    _ensure_shapes(model)
    notes: dict[str, str] = {}
    excluded = frozenset(excluded)
    transposes_before = _count(model, FUSED_CONV_TRANSPOSE)
    count = apply_fusions(model, _fusions(notes, excluded), commute=True)
    count += apply_fusions(model, [ConvResidualFusion(notes, "ConvResidualFusion", excluded)], commute=True)
    affines = _absorb_hardswish_affines(model, excluded) if count else 0
    fused = [node for node in model.graph if node.domain == ORTX_DOMAIN and node.op_type == FUSED_CONV]
    if count:
        model.opset_imports.setdefault(ORTX_DOMAIN, 1)
        model.graph.opset_imports.setdefault(ORTX_DOMAIN, 1)
    counts = {
        "convs_fused": count,
        "activations_fused": sum(1 for node in fused if node.attributes.get_string("activation", "")),
        "residuals_fused": sum(1 for node in fused if len(node.inputs) > 3 and node.inputs[3] is not None),
    } if count else {"convs_fused": 0}
    if affines:
        counts["affines_fused"] = affines
    transposes = _count(model, FUSED_CONV_TRANSPOSE) - transposes_before
    if transposes:
        counts["transposes_fused"] = transposes
    # Keep reasons only for Convs that stayed plain Convs (a failed short pattern may precede a longer match).
    remaining = {node.name for node in model.graph if node.op_type == "Conv" and node.domain in ("", "ai.onnx")}
    note_lines = [f"{name} (Conv): epilogue not fused: {reason}" for name, reason in notes.items()
                  if name in remaining]
    return PassReport(model, name="fuse_conv_epilogue", counts=counts, notes=note_lines,
                      seconds=time.perf_counter() - start)
