"""Folds a per-channel affine transform of a Conv's input into the Conv's weights and bias.

Before: Mul(X, m) -> [Add(_, a)] -> Conv(_, W[, B])      (m, a constants per input channel or scalar)
After:  Conv(X, W * m[ci], B + sum over ci, taps of W * a[ci])
        and Add(X, a) -> Conv(_, W[, B]) -> Conv(X, W, B + sum W * a[ci]).
PP-OCRv4's LCNetV3 ends every activation with a learnable affine (HardSwish -> Mul -> Add); where the next Conv
is unpadded (its 1x1 pointwise convs) both ops disappear. Does not apply when the Add's Conv pads (a padded border
would see a, not 0 -- a Mul alone folds into any Conv, since m * 0 = 0), when an intermediate has another consumer
or is a graph output, when a constant broadcasts along anything but the channel axis, or when W, B are not
constant initializers. The arithmetic runs in float64 with one rounding to W's dtype.
"""
from __future__ import annotations

import logging
import time

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import RewriteRuleClassBase
from onnxscript.rewriter._basics import MatchResult

from ortx.passes._report import (PassReport, apply_fusions, record_fused_from, remove_if_unused,
                                 unique_initializer_name)
from ortx.passes.fuse_conv_batchnorm import constant_array as _constant
from ortx.passes.fuse_conv_batchnorm import per_channel as _per_channel

logger = logging.getLogger(__name__)

_FLOAT_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.DOUBLE)


def _unpadded(conv: ir.Node) -> bool:
    auto_pad = conv.attributes.get_string("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "VALID"):
        return False
    return not any(conv.attributes.get_ints("pads", []))


class _InputAffineBase(RewriteRuleClassBase):
    """Shared check/rewrite; subclasses give the pattern (which of Mul / Add are present)."""

    has_mul = has_add = False

    def __init__(self, notes: list[str], replaced: list[ir.Value]) -> None:
        super().__init__(name=type(self).__name__)
        self.notes = notes
        self.replaced = replaced
        self.new_bytes = 0

    def _fail(self, result: MatchResult, conv: ir.Node, reason: str) -> MatchResult:
        self.notes.append(f"{conv.name} (Conv): input affine not folded: {reason}")
        return result.fail(reason, conv)

    def check(self, context, x, w, conv_out, **bindings) -> MatchResult:
        del context
        result = MatchResult()
        conv = conv_out.producer()
        scale, shift = bindings.get("scale"), bindings.get("shift")
        if (scale is not None and _constant(scale) is None) or (shift is not None and _constant(shift) is None):
            return result.fail("not a constant", conv)  # an ordinary Mul/Add of two tensors: no note
        weight = _constant(w)
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        if weight is None or (bias is not None and _constant(bias) is None):
            return self._fail(result, conv, "weight or bias is not a constant initializer")
        if w.const_value.dtype not in _FLOAT_TYPES:
            return self._fail(result, conv, f"weight dtype {w.const_value.dtype} is not floating point")
        for value in (scale, shift):
            if value is not None and value.const_value.dtype != w.const_value.dtype:
                return self._fail(result, conv, f"constant '{value.name}' dtype differs from the weight's")
        for name in ("scaled", "shifted"):
            inner = bindings.get(name)
            if inner is not None and (len(inner.uses()) != 1 or inner.is_graph_output()):
                return self._fail(result, conv, f"'{inner.name}' has other consumers or is a graph output")
        if shift is not None and not _unpadded(conv):
            return self._fail(result, conv, "the Conv pads its input (a shifted border is not zero)")
        channels = weight.shape[1] * conv.attributes.get_int("group", 1)
        for value in (scale, shift):
            if value is not None and _per_channel(value, channels, weight.ndim) is None:
                return self._fail(result, conv, f"constant '{value.name}' is not per input channel")
        return result

    def rewrite(self, op, x, w, conv_out, **bindings):
        conv = conv_out.producer()
        weight = _constant(w)
        group = conv.attributes.get_int("group", 1)
        out_channels, group_in = weight.shape[0], weight.shape[1]
        channels = group_in * group
        # Input channel of weight element (co, j): group (co // (Cout / group)) * Cin/group + j.
        index = (np.arange(out_channels)[:, None] // (out_channels // group)) * group_in + np.arange(group_in)
        taps = (1,) * (weight.ndim - 2)
        bias_value = conv.inputs[2] if len(conv.inputs) > 2 else None
        bias = _constant(bias_value).astype(np.float64) if bias_value is not None else np.zeros(out_channels)
        new_weight = weight.astype(np.float64)
        scale, shift = bindings.get("scale"), bindings.get("shift")
        if shift is not None:
            vector = _per_channel(shift, channels, weight.ndim)
            bias = bias + (new_weight * vector[index].reshape(index.shape + taps)).reshape(out_channels, -1).sum(1)
        if scale is not None:
            vector = _per_channel(scale, channels, weight.ndim)
            new_weight = new_weight * vector[index].reshape(index.shape + taps)
        new_weight, new_bias = new_weight.astype(weight.dtype), bias.astype(weight.dtype)
        graph = conv.graph
        self.replaced.extend(v for v in (w, bias_value, scale, shift) if v is not None)
        weight_name = unique_initializer_name(graph, f"{w.name}_input_affine")
        bias_name = unique_initializer_name(graph, f"{(bias_value or w).name}_input_affine_bias")
        self.new_bytes += new_weight.nbytes + new_bias.nbytes
        replaced_nodes = [v.producer() for v in (bindings.get("scaled"), bindings.get("shifted")) if v is not None]
        result = op.Conv(x, op.initializer(ir.tensor(new_weight, name=weight_name), name=weight_name),
                         op.initializer(ir.tensor(new_bias, name=bias_name), name=bias_name),
                         _name=conv.name, **dict(conv.attributes))
        record_fused_from(result.producer(), replaced_nodes + [conv])
        return result


class InputMulAddConvFusion(_InputAffineBase):
    has_mul = has_add = True

    def pattern(self, op, x, scale, shift, w):
        scaled = op.Mul(x, scale, _outputs=["scaled"])
        shifted = op.Add(scaled, shift, _outputs=["shifted"])
        return op.Conv(shifted, w, _allow_other_inputs=True, _outputs=["conv_out"])


class InputMulConvFusion(_InputAffineBase):
    has_mul = True

    def pattern(self, op, x, scale, w):
        scaled = op.Mul(x, scale, _outputs=["scaled"])
        return op.Conv(scaled, w, _allow_other_inputs=True, _outputs=["conv_out"])


class InputAddConvFusion(_InputAffineBase):
    has_add = True

    def pattern(self, op, x, shift, w):
        shifted = op.Add(x, shift, _outputs=["shifted"])
        return op.Conv(shifted, w, _allow_other_inputs=True, _outputs=["conv_out"])


def fuse_input_affine(model: ir.Model) -> PassReport:
    start = time.perf_counter()
    notes: list[str] = []
    replaced: list[ir.Value] = []
    rules = [InputMulAddConvFusion(notes, replaced), InputMulConvFusion(notes, replaced),
             InputAddConvFusion(notes, replaced)]
    count = apply_fusions(model, rules, commute=True)
    freed = remove_if_unused(model.graph, list({id(v): v for v in replaced}.values()))
    counts = {"affines_folded": count}
    if count:
        counts["bytes_saved"] = freed - sum(rule.new_bytes for rule in rules)
    kept = list(dict.fromkeys(notes))
    for note in kept:
        logger.debug(note)
    return PassReport(model, name="fuse_input_affine", counts=counts, notes=kept, seconds=time.perf_counter() - start)
