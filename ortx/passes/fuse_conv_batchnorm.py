"""Folds inference BatchNormalization into the Conv before it.

Before: Conv(X, W[, B]) -> BatchNormalization(scale, shift, mean, var, epsilon) -> Y
After:  Conv(X, W * s, (B - mean) * s + shift) -> Y, with s = scale / sqrt(var + epsilon) per output channel
Does not apply when: the Conv output has another consumer or is a graph output; W, B or a BN parameter is not a
constant initializer; BN is in training mode or spatial=0; the BN has more than one output; channel counts differ.
The arithmetic runs in float64 and is cast back to W's dtype, so the fold adds no error beyond that one rounding.
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

logger = logging.getLogger(__name__)

_FLOAT_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.DOUBLE, ir.DataType.BFLOAT16)


def _constant_array(value: ir.Value | None) -> np.ndarray | None:
    """The value's numpy array when it is a constant initializer (not overridable as a graph input)."""
    if value is None or value.const_value is None or value.is_graph_input():
        return None
    return value.const_value.numpy()


class ConvBatchNormFusion(RewriteRuleClassBase):
    """BatchNormalization(Conv(x, w[, b])) -> Conv(x, w', b'); failed checks are kept in `notes`."""

    def __init__(self) -> None:
        super().__init__(name="ConvBatchNormFusion")
        self.notes: list[str] = []
        self.replaced_values: list[ir.Value] = []
        self.new_bytes = 0

    def pattern(self, op, x, w, scale, shift, mean, var):
        conv_out = op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.BatchNormalization(conv_out, scale, shift, mean, var, _outputs=["bn_out"])

    def _fail(self, result: MatchResult, node: ir.Node, reason: str) -> MatchResult:
        self.notes.append(f"{node.name} (BatchNormalization): not fused: {reason}")
        return result.fail(reason, node)

    def check(self, context, x, w, scale, shift, mean, var, conv_out, bn_out) -> MatchResult:
        del context, x
        result = MatchResult()
        conv, batchnorm = conv_out.producer(), bn_out.producer()
        if len(conv_out.uses()) != 1 or conv_out.is_graph_output():
            return self._fail(result, batchnorm, f"Conv '{conv.name}' output has other consumers")
        if len(batchnorm.outputs) != 1:
            return self._fail(result, batchnorm, "BatchNormalization has training outputs")
        if batchnorm.attributes.get_int("training_mode", 0) != 0:
            return self._fail(result, batchnorm, "training_mode=1")
        if batchnorm.attributes.get_int("spatial", 1) != 1:
            return self._fail(result, batchnorm, "spatial=0 (per-element statistics)")
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        for role, value in (("weight", w), ("bias", bias), ("scale", scale), ("shift", shift), ("mean", mean),
                            ("var", var)):
            if value is None:
                continue
            if _constant_array(value) is None:
                return self._fail(result, batchnorm, f"{role} '{value.name}' is not a constant initializer")
        if w.const_value.dtype not in _FLOAT_TYPES:
            return self._fail(result, batchnorm, f"weight dtype {w.const_value.dtype} is not floating point")
        channels = w.const_value.shape[0]
        for role, value in (("bias", bias), ("scale", scale), ("shift", shift), ("mean", mean), ("var", var)):
            if value is not None and tuple(value.const_value.shape) != (channels,):
                return self._fail(result, batchnorm, f"{role} shape {tuple(value.const_value.shape)} is not "
                                                     f"({channels},)")
        return result

    def rewrite(self, op, x, w, scale, shift, mean, var, conv_out, bn_out):
        conv, batchnorm = conv_out.producer(), bn_out.producer()
        epsilon = batchnorm.attributes.get_float("epsilon", 1e-5)
        weight = _constant_array(w)
        factor = _constant_array(scale).astype(np.float64) / np.sqrt(_constant_array(var).astype(np.float64) + epsilon)
        bias_value = conv.inputs[2] if len(conv.inputs) > 2 else None
        bias = _constant_array(bias_value).astype(np.float64) if bias_value is not None else 0.0
        new_weight = weight.astype(np.float64) * factor.reshape((-1,) + (1,) * (weight.ndim - 1))
        new_bias = (bias - _constant_array(mean).astype(np.float64)) * factor + _constant_array(shift)
        graph = conv.graph
        self.replaced_values.extend(value for value in (w, bias_value, scale, shift, mean, var) if value is not None)
        weight_name = unique_initializer_name(graph, f"{w.name}_bn")
        bias_name = unique_initializer_name(graph, f"{(bias_value or w).name}_bn_bias")
        new_weight, new_bias = new_weight.astype(weight.dtype), new_bias.astype(weight.dtype)
        self.new_bytes += new_weight.nbytes + new_bias.nbytes
        result = op.Conv(
            x,
            op.initializer(ir.tensor(new_weight, name=weight_name), name=weight_name),
            op.initializer(ir.tensor(new_bias, name=bias_name), name=bias_name),
            _name=conv.name,
            **dict(conv.attributes),
        )
        record_fused_from(result.producer(), [conv, batchnorm])
        return result


def fuse_conv_batchnorm(model: ir.Model) -> PassReport:
    start = time.perf_counter()
    rule = ConvBatchNormFusion()
    count = apply_fusions(model, [rule])
    # The replaced weights and BN parameters lose their last use; drop them so the model does not grow. The
    # saving is net of the new weights (same size) and biases (one per channel).
    freed = remove_if_unused(model.graph, list({id(v): v for v in rule.replaced_values}.values()))
    counts = {"batchnorms_fused": count, "bytes_saved": freed - rule.new_bytes}
    for note in rule.notes:
        logger.debug(note)
    return PassReport(model, name="fuse_conv_batchnorm", counts=counts, notes=list(rule.notes),
                      seconds=time.perf_counter() - start)
