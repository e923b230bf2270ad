"""Folds per-channel affine transforms after a Conv into its weights: BatchNormalization, and the Mul/Add by
per-channel constants that exporters emit for frozen BN or learnable affine blocks (PP-OCRv4's LCNetV3).

Before: Conv(X, W[, B]) -> BatchNormalization(scale, shift, mean, var, epsilon) -> Y
After:  Conv(X, W * s, (B - mean) * s + shift) -> Y, with s = scale / sqrt(var + epsilon) per output channel
Before: Conv(X, W[, B]) -> Mul(_, m) -> Add(_, a)      (m, a constants of shape [], [1], [C,1,1] or [1,C,1,1])
After:  Conv(X, W * m, B * m + a)
Does not apply when: the Conv output has another consumer or is a graph output; W, B or a parameter is not a
constant initializer; BN is in training mode or spatial=0; the BN has more than one output; channel counts differ;
the Mul/Add constant broadcasts along anything but the channel axis.
The same folds apply after a ConvTranspose with one group, whose weights (Cin, Cout, KH, KW) hold the output
channels on axis 1 (PP-OCRv4 det's head: ConvTranspose -> Add(bias) -> BatchNormalization -> Relu; with more groups
an output channel's weights are spread over the groups' blocks, and those are left alone).
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


def constant_array(value: ir.Value | None) -> np.ndarray | None:
    """The value's numpy array when it is a constant initializer (not overridable as a graph input)."""
    if value is None or value.const_value is None or value.is_graph_input():
        return None
    return value.const_value.numpy()


def output_axis(conv: ir.Node) -> int | None:
    """The weights' output-channel axis of a Conv (0) or a one-group ConvTranspose (1); None otherwise."""
    if conv.op_type == "Conv":
        return 0
    return 1 if conv.op_type == "ConvTranspose" and conv.attributes.get_int("group", 1) == 1 else None


def _scaled(weight: np.ndarray, factor: np.ndarray, axis: int) -> np.ndarray:
    """weight (float64) times factor along the output-channel axis."""
    shape = [1] * weight.ndim
    shape[axis] = -1
    return weight.astype(np.float64) * factor.reshape(shape)


class ConvBatchNormFusion(RewriteRuleClassBase):
    """BatchNormalization(Conv(x, w[, b])) -> Conv(x, w', b') (op_type "ConvTranspose": the same after a one-group
    ConvTranspose); failed checks are kept in `notes`."""

    def __init__(self, op_type: str = "Conv") -> None:
        super().__init__(name=f"{op_type}BatchNormFusion")
        self.op_type = op_type
        self.notes: list[str] = []
        self.replaced_values: list[ir.Value] = []
        self.new_bytes = 0

    def pattern(self, op, x, w, scale, shift, mean, var):
        conv_out = getattr(op, self.op_type)(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.BatchNormalization(conv_out, scale, shift, mean, var, _outputs=["bn_out"])

    def _fail(self, result: MatchResult, node: ir.Node, reason: str) -> MatchResult:
        self.notes.append(f"{node.name} (BatchNormalization): not fused: {reason}")
        return result.fail(reason, node)

    def check(self, context, x, w, scale, shift, mean, var, conv_out, bn_out) -> MatchResult:
        del context, x
        result = MatchResult()
        conv, batchnorm = conv_out.producer(), bn_out.producer()
        if len(conv_out.uses()) != 1 or conv_out.is_graph_output():
            return self._fail(result, batchnorm, f"{conv.op_type} '{conv.name}' output has other consumers")
        if output_axis(conv) is None:
            return self._fail(result, batchnorm, f"{conv.op_type} '{conv.name}' has more than one group")
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
            if constant_array(value) is None:
                return self._fail(result, batchnorm, f"{role} '{value.name}' is not a constant initializer")
        if w.const_value.dtype not in _FLOAT_TYPES:
            return self._fail(result, batchnorm, f"weight dtype {w.const_value.dtype} is not floating point")
        channels = w.const_value.shape[output_axis(conv)]
        for role, value in (("bias", bias), ("scale", scale), ("shift", shift), ("mean", mean), ("var", var)):
            if value is not None and tuple(value.const_value.shape) != (channels,):
                return self._fail(result, batchnorm, f"{role} shape {tuple(value.const_value.shape)} is not "
                                                     f"({channels},)")
        return result

    def rewrite(self, op, x, w, scale, shift, mean, var, conv_out, bn_out):
        conv, batchnorm = conv_out.producer(), bn_out.producer()
        epsilon = batchnorm.attributes.get_float("epsilon", 1e-5)
        weight = constant_array(w)
        factor = constant_array(scale).astype(np.float64) / np.sqrt(constant_array(var).astype(np.float64) + epsilon)
        bias_value = conv.inputs[2] if len(conv.inputs) > 2 else None
        bias = constant_array(bias_value).astype(np.float64) if bias_value is not None else 0.0
        new_weight = _scaled(weight, factor, output_axis(conv))
        new_bias = (bias - constant_array(mean).astype(np.float64)) * factor + constant_array(shift)
        graph = conv.graph
        self.replaced_values.extend(value for value in (w, bias_value, scale, shift, mean, var) if value is not None)
        weight_name = unique_initializer_name(graph, f"{w.name}_bn")
        bias_name = unique_initializer_name(graph, f"{(bias_value or w).name}_bn_bias")
        new_weight, new_bias = new_weight.astype(weight.dtype), new_bias.astype(weight.dtype)
        self.new_bytes += new_weight.nbytes + new_bias.nbytes
        result = getattr(op, self.op_type)(
            x,
            op.initializer(ir.tensor(new_weight, name=weight_name), name=weight_name),
            op.initializer(ir.tensor(new_bias, name=bias_name), name=bias_name),
            _name=conv.name,
            **dict(conv.attributes),
        )
        record_fused_from(result.producer(), [conv, batchnorm])
        return result


def per_channel(value: ir.Value, channels: int, rank: int) -> np.ndarray | None:
    """The constant as a float64 vector over axis 1 (channels) of a rank-`rank` tensor, or None when it
    broadcasts along other axes."""
    array = constant_array(value)
    if array is None or array.ndim > rank:
        return None
    if array.size == 1:
        return np.full(channels, float(array.reshape(())), np.float64)
    # Right-aligned broadcasting: the channel axis (1) of the Conv output is axis 1 - (rank - ndim) of the constant.
    shape = (1,) * (rank - array.ndim) + tuple(array.shape)
    if shape[1] != channels or any(dim != 1 for axis, dim in enumerate(shape) if axis != 1):
        return None
    return array.reshape(channels).astype(np.float64)


class ConvAffineFusion(RewriteRuleClassBase):
    """Mul(Conv(x, w[, b]), m) -> Conv(x, w * m, b * m), or Add(Conv(x, w[, b]), a) -> Conv(x, w, b + a)
    (conv_type "ConvTranspose": the same after a one-group ConvTranspose)."""

    def __init__(self, op_type: str, notes: list[str], replaced_values: list[ir.Value],
                 conv_type: str = "Conv") -> None:
        super().__init__(name=f"{conv_type}{op_type}Fusion")
        self.op_type = op_type
        self.conv_type = conv_type
        self.notes = notes
        self.replaced_values = replaced_values
        self.new_bytes = 0

    def pattern(self, op, x, w, constant):
        conv_out = getattr(op, self.conv_type)(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
        return getattr(op, self.op_type)(conv_out, constant, _outputs=["affine_out"])

    def check(self, context, x, w, constant, conv_out, affine_out) -> MatchResult:
        del context, x
        result = MatchResult()
        conv, affine = conv_out.producer(), affine_out.producer()
        if constant_array(constant) is None:
            return result.fail("not a constant", affine)  # an ordinary Add/Mul of two tensors: no note
        reason = None
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        if len(conv_out.uses()) != 1 or conv_out.is_graph_output():
            reason = f"{conv.op_type} '{conv.name}' output has other consumers"
        elif output_axis(conv) is None:
            reason = f"{conv.op_type} '{conv.name}' has more than one group"
        elif constant_array(w) is None or (bias is not None and constant_array(bias) is None):
            reason = f"{conv.op_type} '{conv.name}' weight or bias is not a constant initializer"
        elif w.const_value.dtype not in _FLOAT_TYPES or constant.const_value.dtype != w.const_value.dtype:
            reason = f"dtypes differ or are not floating point ({w.const_value.dtype}, {constant.const_value.dtype})"
        elif per_channel(constant, w.const_value.shape[output_axis(conv)], len(w.const_value.shape)) is None:
            reason = f"constant '{constant.name}' shape {tuple(constant.const_value.shape)} is not per-channel"
        if reason:
            self.notes.append(f"{affine.name} ({self.op_type}): not folded into {conv.op_type}: {reason}")
            return result.fail(reason, affine)
        return result

    def rewrite(self, op, x, w, constant, conv_out, affine_out):
        conv = conv_out.producer()
        weight = constant_array(w)
        channels = weight.shape[output_axis(conv)]
        bias_value = conv.inputs[2] if len(conv.inputs) > 2 else None
        bias = constant_array(bias_value).astype(np.float64) if bias_value is not None else np.zeros(channels)
        vector = per_channel(constant, channels, weight.ndim)
        new_weight = weight
        if self.op_type == "Mul":
            new_weight = _scaled(weight, vector, output_axis(conv))
            new_bias = bias * vector
        else:
            new_bias = bias + vector
        new_weight, new_bias = new_weight.astype(weight.dtype), new_bias.astype(weight.dtype)
        graph = conv.graph
        self.replaced_values.extend(v for v in (w, bias_value, constant) if v is not None)
        weight_input = w
        if self.op_type == "Mul":
            weight_name = unique_initializer_name(graph, f"{w.name}_scaled")
            weight_input = op.initializer(ir.tensor(new_weight, name=weight_name), name=weight_name)
            self.new_bytes += new_weight.nbytes
        bias_name = unique_initializer_name(graph, f"{(bias_value or w).name}_{self.op_type.lower()}_bias")
        self.new_bytes += new_bias.nbytes
        result = getattr(op, self.conv_type)(x, weight_input,
                                             op.initializer(ir.tensor(new_bias, name=bias_name), name=bias_name),
                                             _name=conv.name, **dict(conv.attributes))
        record_fused_from(result.producer(), [conv, affine_out.producer()])
        return result


def fuse_conv_batchnorm(model: ir.Model, *, max_rounds: int = 8) -> PassReport:
    """Folds BN and per-channel Mul/Add into Convs; repeats (up to max_rounds) so chains like Mul -> Add fold."""
    start = time.perf_counter()
    batchnorm = ConvBatchNormFusion()
    transposed = ConvBatchNormFusion("ConvTranspose")
    transposed.notes, transposed.replaced_values = batchnorm.notes, batchnorm.replaced_values
    notes: list[str] = []
    affines = [ConvAffineFusion(op_type, notes, batchnorm.replaced_values, conv_type)
               for conv_type in ("Conv", "ConvTranspose") for op_type in ("Mul", "Add")]
    counts = {"batchnorms_fused": 0, "affines_fused": 0}
    for _ in range(max_rounds):
        before = dict(counts)
        counts["batchnorms_fused"] += apply_fusions(model, [batchnorm, transposed])
        counts["affines_fused"] += apply_fusions(model, affines, commute=True)
        if counts == before:
            break
    # The replaced weights and BN parameters lose their last use; drop them so the model does not grow. The
    # saving is net of the new weights (same size) and biases (one per channel).
    freed = remove_if_unused(model.graph, list({id(v): v for v in batchnorm.replaced_values}.values()))
    counts["bytes_saved"] = freed - batchnorm.new_bytes - transposed.new_bytes - sum(a.new_bytes for a in affines)
    # Candidates that a later round fused are not worth a note.
    remaining = {node.name for node in model.graph}
    all_notes = [note for note in dict.fromkeys(batchnorm.notes + notes) if note.split(" ", 1)[0] in remaining]
    # The matcher itself rejects a Conv output read outside the pattern, before `check` can record why.
    noted = {note.split(" ", 1)[0] for note in all_notes}
    for node in model.graph:
        source = node.inputs[0].producer() if node.inputs and node.inputs[0] is not None else None
        if node.op_type == "BatchNormalization" and source is not None and source.op_type == "Conv" \
                and node.name not in noted:
            all_notes.append(f"{node.name} (BatchNormalization): not fused: Conv '{source.name}' output has other "
                             f"consumers or is a graph output")
    for note in all_notes:
        logger.debug(note)
    return PassReport(model, name="fuse_conv_batchnorm", counts=counts, notes=all_notes,
                      seconds=time.perf_counter() - start)
