"""Gemm fusions: MatMul + Add(constant bias) -> Gemm (2-D only), and per-column affine ops after a Gemm folded into
its weights (BatchNormalization over the Gemm output, Mul/Add by per-column constants).

Case 1: Add(MatMul(A[M,K], B[K,N]), C) -> Gemm(A, B, C)       (B and C constants; C of shape [N], [1,N] or [1])
Case 2: BatchNormalization(Gemm(A, B, C), s, t, mean, var) -> Gemm(A, B * f, (beta*C - mean) * f + t), f = s/sqrt(var+eps)
Case 3: Mul(Gemm(A, B, C), m) -> Gemm(A, B * m, beta*C * m);  Add(Gemm(A, B, C), a) -> Gemm(A, B, beta*C + a)
Does not apply when: A is not 2-D (a MatMul + Add on rank > 2, as in transformers, stays: Gemm is 2-D only);
B/C/the BN parameters/the constant are not constant initializers; a constant varies along anything but the output
columns; an intermediate has another reader or is a graph output; dtypes are not floating point.
Folding arithmetic runs in float64 and is rounded once to the weight dtype.
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
    if value is None or value.const_value is None or value.is_graph_input():
        return None
    return value.const_value.numpy()


def _per_column(array: np.ndarray, columns: int) -> np.ndarray | None:
    """The constant as a float64 [columns] vector when it broadcasts over a [M, columns] output only by column."""
    if array.ndim > 2:
        return None
    if array.size == 1:
        return np.full(columns, float(array.reshape(())), np.float64)
    if array.shape[-1] != columns or (array.ndim == 2 and array.shape[0] != 1):
        return None
    return array.reshape(columns).astype(np.float64)


class _Shared:
    """Notes, replaced values and new bytes shared by the rules of one pass run."""

    def __init__(self) -> None:
        self.notes: dict[str, str] = {}
        self.replaced: list[ir.Value] = []
        self.new_bytes = 0

    def initializer(self, op, graph: ir.Graph, array: np.ndarray, base: str) -> ir.Value:
        name = unique_initializer_name(graph, base)
        self.new_bytes += array.nbytes
        return op.initializer(ir.tensor(array, name=name), name=name)


class GemmFusion(RewriteRuleClassBase):
    """Case 1."""

    def __init__(self, shared: _Shared) -> None:
        super().__init__(name="GemmFusion")
        self.shared = shared

    def pattern(self, op, a, b, c):
        return op.Add(op.MatMul(a, b, _outputs=["product"]), c)

    def check(self, context, a, b, c, product) -> MatchResult:
        result = MatchResult()
        weight, bias = _constant_array(b), _constant_array(c)
        if weight is None or bias is None:
            return result.fail("B or C is not a constant")
        reason = None
        if a.shape is None or len(a.shape) != 2:
            reason = f"A has rank {len(a.shape) if a.shape is not None else '?'}: Gemm is 2-D only, MatMul+Add kept"
        elif weight.ndim != 2 or b.dtype not in _FLOAT_TYPES or bias.dtype != weight.dtype:
            reason = "B is not a 2-D float matrix or C's dtype differs"
        elif _per_column(bias, weight.shape[1]) is None:
            reason = f"C shape {bias.shape} is not [N], [1,N] or a scalar"
        elif len(product.uses()) != 1 or product.is_graph_output():
            reason = "the MatMul output has other readers"
        if reason:
            self.shared.notes[context.root.name] = reason
            return result.fail(reason)
        return result

    def rewrite(self, op, a, b, c, product):
        weight, bias = _constant_array(b), _constant_array(c)
        if bias.ndim != 1 or bias.shape[0] != weight.shape[1]:
            bias = _per_column(bias, weight.shape[1]).astype(weight.dtype)
            self.shared.replaced.append(c)
            c = self.shared.initializer(op, product.producer().graph, bias, f"{c.name}_gemm")
        output = op.Gemm(a, b, c, _name=product.producer().name)
        record_fused_from(output.producer(), [product.producer()])
        return output


class GemmAffineFusion(RewriteRuleClassBase):
    """Cases 2 and 3 (op_type BatchNormalization, Mul or Add after a Gemm)."""

    def __init__(self, op_type: str, shared: _Shared) -> None:
        super().__init__(name=f"Gemm{op_type}Fusion")
        self.op_type = op_type
        self.shared = shared

    def pattern(self, op, a, b, first, second, third, fourth):
        gemm = op.Gemm(a, b, _allow_other_inputs=True, _outputs=["gemm_out"])
        if self.op_type == "BatchNormalization":
            return op.BatchNormalization(gemm, first, second, third, fourth, _outputs=["affine_out"])
        return getattr(op, self.op_type)(gemm, first, _outputs=["affine_out"])

    def _parameters(self, gemm: ir.Node, affine: ir.Node, constant_value: ir.Value):
        """(B, beta*C as a per-column float64 vector, per-column scale, per-column shift) or a reason; for Mul/Add
        `constant_value` is the matched constant operand (either side: the rules commute)."""
        weight = _constant_array(gemm.inputs[1])
        if weight is None or gemm.inputs[1].dtype not in _FLOAT_TYPES:
            return "B is not a constant float initializer"
        columns = weight.shape[0] if gemm.attributes.get_int("transB", 0) else weight.shape[1]
        bias_value = gemm.inputs[2] if len(gemm.inputs) > 2 else None
        bias = np.zeros(columns) if bias_value is None else _constant_array(bias_value)
        if bias is None or _per_column(np.asarray(bias), columns) is None:
            return "C is not a constant per-column vector"
        bias = _per_column(np.asarray(bias), columns) * gemm.attributes.get_float("beta", 1.0)
        if self.op_type == "BatchNormalization":
            parameters = [_constant_array(value) for value in affine.inputs[1:5]]
            if any(p is None or p.shape != (columns,) for p in parameters) or len(affine.outputs) != 1 \
                    or affine.attributes.get_int("training_mode", 0):
                return "BN parameters are not constant [N] vectors or BN is in training mode"
            scale, shift, mean, var = (p.astype(np.float64) for p in parameters)
            factor = scale / np.sqrt(var + affine.attributes.get_float("epsilon", 1e-5))
            return weight, bias, factor, shift - mean * factor
        constant = _constant_array(constant_value)
        vector = None if constant is None else _per_column(constant, columns)
        if vector is None:
            return "the constant is not per-column"
        if self.op_type == "Mul":
            return weight, bias, vector, np.zeros(columns)
        return weight, bias, np.ones(columns), vector

    def check(self, context, a, b, gemm_out, affine_out, first, **_) -> MatchResult:
        result = MatchResult()
        gemm, affine = gemm_out.producer(), affine_out.producer()
        if self.op_type != "BatchNormalization" and _constant_array(first) is None:
            return result.fail("not a constant")  # an ordinary Add/Mul of two tensors: no note
        reason = None
        if len(gemm_out.uses()) != 1 or gemm_out.is_graph_output():
            reason = f"Gemm '{gemm.name}' output has other readers"
        else:
            parameters = self._parameters(gemm, affine, first)
            reason = parameters if isinstance(parameters, str) else None
        if reason:
            self.shared.notes[affine.name] = f"not folded into Gemm '{gemm.name}': {reason}"
            return result.fail(reason)
        return result

    def rewrite(self, op, a, b, gemm_out, affine_out, first, **_):
        gemm, affine = gemm_out.producer(), affine_out.producer()
        weight, bias, scale, shift = self._parameters(gemm, affine, first)
        trans_b = gemm.attributes.get_int("transB", 0)
        new_weight = weight.astype(np.float64) * (scale[:, None] if trans_b else scale[None, :])
        new_bias = bias * scale + shift
        graph = gemm.graph
        self.shared.replaced.extend(v for v in list(gemm.inputs[1:]) + list(affine.inputs)
                                   if v is not None and v is not gemm_out)
        weight_input = b
        if not np.all(scale == 1.0):
            weight_input = self.shared.initializer(op, graph, new_weight.astype(weight.dtype), f"{gemm.name or 'gemm'}_weight")
        bias_input = self.shared.initializer(op, graph, new_bias.astype(weight.dtype), f"{gemm.name or 'gemm'}_bias")
        attributes = {key: attr for key, attr in gemm.attributes.items() if key != "beta"}
        output = op.Gemm(a, weight_input, bias_input, _name=gemm.name, **attributes)
        record_fused_from(output.producer(), [gemm, affine])
        return output


def fuse_gemm(model: ir.Model, *, max_rounds: int = 8) -> PassReport:
    start = time.perf_counter()
    shared = _Shared()
    affines = [GemmAffineFusion(op_type, shared) for op_type in ("BatchNormalization", "Mul", "Add")]
    counts = {"gemms_formed": apply_fusions(model, [GemmFusion(shared)], commute=True), "affines_folded": 0}
    for _ in range(max_rounds):  # chains like Gemm -> BN -> Mul -> Add fold one per round
        folded = apply_fusions(model, affines, commute=True)
        counts["affines_folded"] += folded
        if not folded:
            break
    freed = remove_if_unused(model.graph, list({id(v): v for v in shared.replaced}.values()))
    counts["bytes_saved"] = freed - shared.new_bytes
    remaining = {node.name for node in model.graph}
    notes = [f"{name}: {reason}" for name, reason in shared.notes.items() if name in remaining]
    for note in notes:
        logger.debug(note)
    return PassReport(model, name="fuse_gemm", counts=counts, notes=notes, seconds=time.perf_counter() - start)
