"""ReduceSumSquare from its decomposition: a square, then ReduceSum (|X|^2 of a spectrum's [re, im] pairs, sums
of squares in norms).

Case 1: ReduceSum(Mul(x, x), axes)  -> ReduceSumSquare(x, axes)
Case 2: ReduceSum(Pow(x, 2), axes)  -> ReduceSumSquare(x, axes)
keepdims (and noop_with_empty_axes from opset 18) carry over; axes move from input to attribute below opset 18
(ReduceSum takes them as an input from opset 13, ReduceSumSquare only from 18). Saves the squares' tensor and a
pass over it. Does not apply when: the square has another reader; Pow's exponent is not the constant 2; at opsets
13-17 the axes input is not constant, or noop_with_empty_axes is set (ReduceSumSquare-13 has no such attribute).
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
from ortx.passes.fuse_layer_normalization import default_opset, node_label

logger = logging.getLogger(__name__)

AXES_INPUT_OPSET = 18  # ReduceSumSquare's axes: an attribute below, an input from here (ReduceSum's from 13)


class ReduceSumSquareFusion(RewriteRuleClassBase):
    """Case 1 (square "Mul") or Case 2 (square "Pow")."""

    def __init__(self, square: str, opset: int, notes: list[str]) -> None:
        super().__init__(name=f"ReduceSumSquareFusion_{square}")
        self.square, self.opset, self.notes = square, opset, notes

    def pattern(self, op, x, exponent):
        squared = op.Mul(x, x) if self.square == "Mul" else op.Pow(x, exponent)
        return op.ReduceSum(squared, _allow_other_inputs=True, _outputs=["reduced"])

    def check(self, context, x, reduced, exponent=None, **_) -> MatchResult:
        result = MatchResult()
        self.matched = list(context.nodes)  # rewrite follows a successful check on the same match
        reduce_node = reduced.producer()
        reason = self._parameters(reduce_node, exponent)
        if reason:
            self.notes.append(f"{node_label(reduce_node)}: {reason}")
            return result.fail(reason)
        return result

    def _parameters(self, node: ir.Node, exponent) -> str | None:
        """Sets self.axes / keepdims / noop for rewrite; returns why the match cannot fuse, or None."""
        if self.square == "Pow":
            scalar = get_singleton_value(exponent)
            if scalar is None or float(scalar) != 2.0:
                return "Pow's exponent is not the constant 2"
        self.keepdims = node.attributes.get_int("keepdims", 1)
        self.noop = node.attributes.get_int("noop_with_empty_axes", 0)
        axes_input = node.inputs[1] if len(node.inputs) > 1 else None
        self.axes_value = axes_input
        if self.opset < 13:
            self.axes = node.attributes.get_ints("axes", None)
            return None
        if self.opset >= AXES_INPUT_OPSET:
            return None
        if self.noop:
            return f"noop_with_empty_axes is set and ReduceSumSquare-{self.opset} has no such attribute"
        if axes_input is None:
            self.axes = None
            return None
        if axes_input.const_value is None:
            return f"the axes input {axes_input.name!r} is not constant (ReduceSumSquare-{self.opset} takes them " \
                   f"as an attribute)"
        self.axes = [int(axis) for axis in np.asarray(axes_input.const_value.numpy()).reshape(-1)]
        return None

    def rewrite(self, op, x, **_):
        if self.opset >= AXES_INPUT_OPSET:
            inputs = (x,) if self.axes_value is None else (x, self.axes_value)
            output = op.ReduceSumSquare(*inputs, keepdims=self.keepdims, noop_with_empty_axes=self.noop)
        elif self.axes is None:
            output = op.ReduceSumSquare(x, keepdims=self.keepdims)
        else:
            output = op.ReduceSumSquare(x, axes=self.axes, keepdims=self.keepdims)
        record_fused_from(output.producer(), self.matched)
        return output


def fuse_reduce_sum_square(model: ir.Model) -> PassReport:
    start = time.perf_counter()
    opset, notes = default_opset(model), []
    count = apply_fusions(model, [ReduceSumSquareFusion("Mul", opset, notes), ReduceSumSquareFusion("Pow", opset, notes)])
    return PassReport(model, name="fuse_reduce_sum_square", counts={"reduce_sum_squares_fused": count}, notes=notes,
                      seconds=time.perf_counter() - start)
