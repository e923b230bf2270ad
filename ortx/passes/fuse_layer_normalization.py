"""LayerNormalization (opset 17) from its decomposed form, as exporters emit it for older opsets.

Before: m = ReduceMean(x, axes); d = Sub(x, m); v = ReduceMean(Pow(d, 2) or Mul(d, d), axes)
        y = Add(Mul(Div(d, Sqrt(Add(v, epsilon))), scale), bias)          (the Mul and the Add are optional)
After:  y = LayerNormalization(x, scale or ones, bias, axis=first of axes, epsilon)
Does not apply when: the model's default opset is below 17 (upgrade_opset raises it first when that is safe, see
there); both ReduceMeans do not reduce the same trailing axes with keepdims=1; epsilon, scale or bias is not a
constant or does not broadcast exactly over the normalised dims (x's trailing dims must be static); the
intermediates have readers outside the pattern; x is not float/double.
Numerics: ORT computes in float with the same formula (mean, variance by E[(x-m)^2], one sqrt), so the fused op
matches the decomposed one to a few ulps.
"""
from __future__ import annotations

import logging
import time

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import RewriteRuleClassBase, pattern
from onnxscript.rewriter._basics import MatchResult
from onnxscript.rewriter._ir_utils import get_numpy_value, get_singleton_value

from ortx.passes._report import PassReport, apply_fusions, record_fused_from, unique_initializer_name

logger = logging.getLogger(__name__)

MIN_OPSET = 17
_FLOAT_TYPES = (ir.DataType.FLOAT, ir.DataType.DOUBLE)


def default_opset(model_or_graph) -> int:
    imports = model_or_graph.opset_imports
    return imports.get("", imports.get("ai.onnx", 1))


def node_label(node: ir.Node) -> str:
    """Names the node by op and first output: output names are stable, while the rewriter names unnamed nodes
    only after the checks ran."""
    return f"{node.op_type} -> {node.outputs[0].name}"


def _reduced_axes(node: ir.Node) -> list[int] | None:
    """The ReduceMean's axes (attribute before opset 18, input after), or None when not constant."""
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        axes = get_numpy_value(node.inputs[1])
        return None if axes is None else [int(axis) for axis in np.ravel(axes)]
    axes = node.attributes.get_ints("axes", None)
    return None if axes is None else list(axes)


class LayerNormalizationFusion(RewriteRuleClassBase):
    """One variant per (scale present, bias present); failed checks are kept in `notes`."""

    def __init__(self, notes: dict[str, str], *, has_scale: bool, has_bias: bool) -> None:
        super().__init__(name=f"LayerNormalizationFusion_scale{int(has_scale)}_bias{int(has_bias)}")
        self.notes = notes
        self.has_scale, self.has_bias = has_scale, has_bias

    def pattern(self, op, x, exponent, epsilon, scale, bias):
        mean = op.ReduceMean(x, _allow_other_inputs=True, _outputs=["mean"])
        deviation = op.Sub(x, mean)
        squared = pattern.OrValue([op.Pow(deviation, exponent), op.Mul(deviation, deviation)], tag_var="square",
                                  tag_values=["Pow", "Mul"])
        variance = op.ReduceMean(squared, _allow_other_inputs=True, _outputs=["variance"])
        result = op.Div(deviation, op.Sqrt(op.Add(variance, epsilon)))
        if self.has_scale:
            result = op.Mul(result, scale)
        if self.has_bias:
            result = op.Add(result, bias)
        return result

    def _fail(self, result: MatchResult, context, reason: str) -> MatchResult:
        self.notes[node_label(context.root)] = reason
        return result.fail(reason)

    def check(self, context, x, exponent, epsilon, mean, variance, square, scale=None, bias=None,
              **_) -> MatchResult:
        result = MatchResult()
        if default_opset(context.graph_or_function) < MIN_OPSET:
            return self._fail(result, context, f"opset {default_opset(context.graph_or_function)} < {MIN_OPSET}")
        if square == "Pow" and get_singleton_value(exponent) != 2:
            return result.fail("Pow exponent is not 2")
        if x.dtype not in _FLOAT_TYPES or x.shape is None:
            return self._fail(result, context, "x is not float/double with a known rank")
        rank = len(x.shape)
        axes = [_reduced_axes(node) for node in (mean.producer(), variance.producer())]
        if axes[0] is None or axes[0] != axes[1]:
            return self._fail(result, context, f"the two ReduceMeans reduce different or non-constant axes {axes}")
        normalized = sorted(axis % rank for axis in axes[0])
        if normalized != list(range(normalized[0], rank)):
            return self._fail(result, context, f"axes {axes[0]} are not the trailing axes of rank {rank}")
        if any(node.attributes.get_int("keepdims", 1) != 1 for node in (mean.producer(), variance.producer())):
            return self._fail(result, context, "a ReduceMean has keepdims=0")
        normalized_shape = tuple(x.shape)[normalized[0]:]
        if not all(isinstance(dim, int) for dim in normalized_shape):
            return self._fail(result, context, f"normalised dims {normalized_shape} are not static")
        if get_singleton_value(epsilon) is None:
            return self._fail(result, context, "epsilon is not a constant scalar")
        for role, value in (("scale", scale), ("bias", bias)):
            if value is None:
                continue
            array = get_numpy_value(value)
            if array is None or value.is_graph_input():
                return self._fail(result, context, f"{role} is not a constant")
            if array.ndim > rank or tuple(array.shape[-len(normalized_shape):]) != normalized_shape \
                    or any(dim != 1 for dim in array.shape[:-len(normalized_shape)]):
                # A constant that broadcasts along the normalised dims (or adds leading dims) is not LN's affine.
                return self._fail(result, context, f"{role} shape {array.shape} is not the normalised shape "
                                                   f"{normalized_shape}")
            if array.dtype != x.dtype.numpy():
                return self._fail(result, context, f"{role} dtype {array.dtype} differs from x")
        self._axis = normalized[0] - rank
        self._normalized_shape = normalized_shape
        self.matched = list(context.nodes)  # rewrite follows a successful check on the same match
        return result

    def _parameter(self, op, graph, x, value, fill: float, base: str):
        array = np.full(self._normalized_shape, fill, x.dtype.numpy()) if value is None else get_numpy_value(value)
        array = np.ascontiguousarray(array.reshape(self._normalized_shape))
        name = unique_initializer_name(graph, base)
        return op.initializer(ir.tensor(array, name=name), name=name)

    def rewrite(self, op, x, exponent, epsilon, mean, variance, square, scale=None, bias=None, **_):
        graph = mean.producer().graph
        scale_input = self._parameter(op, graph, x, scale, 1.0, f"{x.name}_ln_scale")
        inputs = [x, scale_input]
        if bias is not None:
            inputs.append(self._parameter(op, graph, x, bias, 0.0, f"{x.name}_ln_bias"))
        output = op.LayerNormalization(*inputs, axis=self._axis, epsilon=float(get_singleton_value(epsilon)),
                                       stash_type=1)
        record_fused_from(output.producer(), self.matched)
        return output


def fuse_layer_normalization(model: ir.Model) -> PassReport:
    start = time.perf_counter()
    notes: dict[str, str] = {}
    if default_opset(model) < MIN_OPSET:
        return PassReport(model, name="fuse_layer_normalization", counts={"layer_norms_fused": 0},
                          notes=[f"<model>: opset {default_opset(model)} < {MIN_OPSET}: no LayerNormalization"],
                          seconds=time.perf_counter() - start)
    # Longest form first, each in its own sweep: in one sweep the short form would match first at its root (the
    # Div comes before the Mul and Add in graph order) and leave the scale and bias unfused.
    count = 0
    for scale, bias in ((True, True), (True, False), (False, False)):
        count += apply_fusions(model, [LayerNormalizationFusion(notes, has_scale=scale, has_bias=bias)],
                               commute=True)
    remaining = {node_label(node) for node in model.graph}
    note_lines = [f"{name}: LayerNormalization not fused: {reason}" for name, reason in notes.items()
                  if name in remaining]
    return PassReport(model, name="fuse_layer_normalization", counts={"layer_norms_fused": count},
                      notes=note_lines, seconds=time.perf_counter() - start)
