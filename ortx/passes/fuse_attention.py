"""Scaled-dot-product attention from its MatMul / scale / mask / Softmax / MatMul decomposition.

Before: MatMul(Q, KT) -> [Mul(_, s) or Div(_, 1/s)] -> [Add(_, mask)] -> Softmax(last axis) -> MatMul(_, V)
Case 1 (opset >= 23, rank 4, level 2): -> Attention(Q, K, V[, mask], scale=s), the standard op, with K = KT's
        last two axes swapped (one Transpose, composed with the Transpose that made KT when there is one).
Case 2 (extended, level 3): -> ai.ortx::ScaledDotProductAttention(Q, KT, V[, mask], scale=s), run by OrtxEP only:
        Q [..., S, D], KT [..., D, L] (K already transposed: the first MatMul's right operand as it is),
        V [..., L, Dv], mask (optional, additive) broadcastable to [..., S, L]; batch dims broadcast as MatMul's;
        Y = softmax(s * (Q @ KT) + mask, last axis) @ V, shape [..., S, Dv]. float32 only.
Case 3 (extended, an int8 QDQ model): Softmax -> QuantizeLinear(., sp, zp) -> DequantizeLinear(., sp, zp) -> MatMul
        -> the same op with attributes probability_scale=sp, probability_zero_point=zp, probability_dtype ("uint8"
        or "int8"): the probabilities are rounded to that grid before the second product.
Does not apply when: the scale is not a constant scalar; Softmax is not over the last axis (or its rank is
unknown); an intermediate has another reader; the tensors are not float32; for Case 1 also when the opset is below
23, a rank is not 4, Q, K, V's batch and head dims differ (the standard op does not broadcast them) or the
mask's last two dims are not (S, L) (onnxruntime 1.32 does not broadcast those); for Case 3 also when the pair's
scales or zero points are not one per-tensor constant (uint8/int8 zero point).
"""
from __future__ import annotations

import logging
import time

import onnx_ir as ir
from onnxscript.rewriter import RewriteRuleClassBase
from onnxscript.rewriter._basics import MatchResult
from onnxscript.rewriter._ir_utils import get_singleton_value

from ortx.passes._report import PassReport, apply_fusions, record_fused_from
from ortx.passes.infer_shapes import run_shape_inference
from ortx.passes.fuse_layer_normalization import default_opset, node_label

logger = logging.getLogger(__name__)

ATTENTION_OPSET = 23
ORTX_DOMAIN = "ai.ortx"
FUSED_ATTENTION = "ScaledDotProductAttention"


class AttentionFusion(RewriteRuleClassBase):
    """scale_op: "Mul", "Div" or "" (no scaling, s = 1); masked: an Add between the scaling and the Softmax."""

    def __init__(self, scale_op: str, masked: bool, opset: int, extended: bool, notes: list[str], *,
                 quantized: bool = False) -> None:
        super().__init__(name=f"AttentionFusion_{scale_op or 'unscaled'}{'_masked' if masked else ''}"
                              f"{'_quantized' if quantized else ''}")
        self.scale_op, self.masked, self.opset, self.extended, self.notes = scale_op, masked, opset, extended, notes
        self.quantized = quantized

    def pattern(self, op, q, kt, v, scale, mask, grid_scale, grid_zero, back_scale, back_zero):
        scores = op.MatMul(q, kt)
        if self.scale_op:
            scores = getattr(op, self.scale_op)(scores, scale)
        if self.masked:
            scores = op.Add(scores, mask)
        probabilities = op.Softmax(scores, _outputs=["probabilities"])
        if self.quantized:  # Case 3
            probabilities = op.DequantizeLinear(op.QuantizeLinear(probabilities, grid_scale, grid_zero),
                                                back_scale, back_zero)
        return op.MatMul(probabilities, v)

    def _grid(self, grid_scale, grid_zero, back_scale, back_zero) -> dict | str:
        """Case 3's attributes, or why the pair does not qualify."""
        scales = [get_singleton_value(value) for value in (grid_scale, back_scale)]
        zeros = [value.const_value.numpy() if value is not None and value.const_value is not None else None
                 for value in (grid_zero, back_zero)]
        if any(scale is None for scale in scales) or float(scales[0]) != float(scales[1]) or float(scales[0]) <= 0:
            return "the probabilities' QuantizeLinear/DequantizeLinear scales are not one positive constant"
        if any(zero is None or zero.size != 1 for zero in zeros) or zeros[0].dtype != zeros[1].dtype \
                or int(zeros[0].reshape(())) != int(zeros[1].reshape(())) \
                or zeros[0].dtype.name not in ("uint8", "int8"):
            return "the probabilities' zero points are not one constant uint8/int8 scalar"
        return {"probability_scale": float(scales[0]), "probability_zero_point": int(zeros[0].reshape(())),
                "probability_dtype": zeros[0].dtype.name}

    def _scale(self, scale) -> float | None:
        if not self.scale_op:
            return 1.0
        scalar = get_singleton_value(scale)
        if scalar is None or float(scalar) == 0.0:
            return None
        return float(scalar) if self.scale_op == "Mul" else 1.0 / float(scalar)

    def _fail(self, result: MatchResult, reason: str) -> MatchResult:
        root = self.first_matmul
        self.notes.append((root.outputs[0].name, f"{node_label(root)}: attention not fused: {reason}"))
        return result.fail(reason)

    def check(self, context, q, kt, v, probabilities, scale=None, mask=None, grid_scale=None, grid_zero=None,
              back_scale=None, back_zero=None, **_) -> MatchResult:
        result = MatchResult()
        self.matched = list(context.nodes)  # rewrite follows a successful check on the same match
        self.first_matmul = next(node for node in self.matched if node.op_type == "MatMul" and node.inputs[0] is q)
        if self._scale(scale) is None:
            return self._fail(result, "the scale is not a non-zero constant scalar")
        self.grid = {}
        if self.quantized:
            grid = self._grid(grid_scale, grid_zero, back_scale, back_zero)
            if isinstance(grid, str):
                return self._fail(result, grid)
            if not self.extended:
                return self._fail(result, "the standard Attention has no quantized probabilities")
            self.grid = grid
        softmax = probabilities.producer()
        rank = len(q.shape) if q.shape is not None else None
        if rank is None or rank < 2 or kt.shape is None or len(kt.shape) < 2 or v.shape is None or len(v.shape) < 2:
            return self._fail(result, "Q, K or V has an unknown rank or a rank below 2")
        legacy = default_opset(context.graph_or_function) < 13
        axis = softmax.attributes.get_int("axis", 1 if legacy else -1)
        if axis % rank != rank - 1:
            return self._fail(result, f"Softmax axis {axis} is not the last axis of rank {rank}")
        values = [q, kt, v] + ([mask] if self.masked else [])
        if any(value.dtype != ir.DataType.FLOAT for value in values):
            return self._fail(result, "not every input is float32")
        if self.opset >= ATTENTION_OPSET and self._standard_reason(q, kt, v, mask) is None and not self.quantized:
            return result
        if self.extended:
            return result
        reason = self._standard_reason(q, kt, v, mask) if self.opset >= ATTENTION_OPSET else \
            f"opset {self.opset} < {ATTENTION_OPSET}: Attention does not exist"
        return self._fail(result, reason)

    @staticmethod
    def _standard_reason(q, kt, v, mask) -> str | None:
        if not (len(q.shape) == len(kt.shape) == len(v.shape) == 4):
            return "the standard Attention needs rank-4 Q, K, V"
        leading = {tuple(value.shape)[:2] for value in (q, kt, v)}
        if len(leading) != 1 or not all(isinstance(dim, int) for dim in next(iter(leading))):
            return f"batch and head dims differ or are not static: {sorted(map(str, leading))}"
        # onnxruntime 1.32's CPU Attention broadcasts the mask's leading dims only (attention_helper.h checks
        # that its last two are Q's sequence length and K's).
        expected = (q.shape[2], kt.shape[3])
        if mask is not None and (mask.shape is None or len(mask.shape) < 2 or tuple(mask.shape)[-2:] != expected):
            return f"mask shape {mask.shape} does not end in {expected} (onnxruntime's Attention needs that)"
        return None

    def rewrite(self, op, q, kt, v, scale=None, mask=None, **_):
        scale_value = self._scale(scale)
        inputs = [q, kt, v] + ([mask] if self.masked else [])
        if self.opset >= ATTENTION_OPSET and self._standard_reason(q, kt, v, mask) is None and not self.quantized:
            inputs[1] = self._untransposed(op, kt)
            output = op.Attention(*inputs, scale=scale_value)
        else:
            output = op.op(FUSED_ATTENTION, *inputs, _domain=ORTX_DOMAIN, scale=scale_value, **self.grid)
        record_fused_from(output.producer(), self.matched)
        return output

    def _untransposed(self, op, kt: ir.Value) -> ir.Value:
        """K from KT: one Transpose, composed with KT's own Transpose when KT is read only here."""
        producer = kt.producer()
        if producer is not None and producer.op_type == "Transpose" and len(kt.uses()) == 1 \
                and not kt.is_graph_output():
            perm = list(producer.attributes.get_ints("perm", list(range(len(kt.shape)))[::-1]))
            self.orphaned.append(producer)
            return op.Transpose(producer.inputs[0], perm=perm[:-2] + [perm[-1], perm[-2]])
        return op.Transpose(kt, perm=[0, 1, 3, 2])


def _ensure_shapes(model: ir.Model) -> None:
    """The checks need Q/K/V ranks; infer them when the model does not carry them (the pipeline's infer_shapes
    has, a model handed to this pass alone may not)."""
    if all(node.outputs[0].shape is not None for node in model.graph if node.op_type == "MatMul"):
        return
    try:
        run_shape_inference(model)
    except Exception as error:  # best effort: without ranks nothing is fused, and the notes say so
        logger.debug("shape inference failed (%s); attention fusion needs ranks", error)


def fuse_attention(model: ir.Model, *, extended: bool = False) -> PassReport:
    """extended: where the standard Attention does not apply, emit ai.ortx::ScaledDotProductAttention (level 3)."""
    start = time.perf_counter()
    _ensure_shapes(model)
    opset = default_opset(model)
    notes: list[tuple[str, str]] = []
    fusions = [AttentionFusion(scale_op, masked, opset, extended, notes, quantized=quantized)
               for quantized in ((False, True) if extended else (False,))
               for masked in (True, False) for scale_op in ("Mul", "Div", "")]
    orphaned: list[ir.Node] = []
    for fusion in fusions:
        fusion.orphaned = orphaned
    count = apply_fusions(model, fusions, commute=True)
    # Case 1 replaced KT's Transpose by a composed one; the old one has no reader left.
    for node in orphaned:
        if node.graph is model.graph and not any(output.uses() for output in node.outputs):
            model.graph.remove(node, safe=True)
    ortx_nodes = sum(1 for node in model.graph if node.domain == ORTX_DOMAIN and node.op_type == FUSED_ATTENTION)
    if ortx_nodes:
        model.opset_imports.setdefault(ORTX_DOMAIN, 1)
        model.graph.opset_imports.setdefault(ORTX_DOMAIN, 1)
    # Keep reasons only for candidates whose MatMul is still there (another variant may have fused it).
    remaining = {output.name for node in model.graph for output in node.outputs}
    note_lines = sorted({line for root, line in notes if root in remaining})
    return PassReport(model, name="fuse_attention", counts={"attentions_fused": count}, notes=note_lines,
                      seconds=time.perf_counter() - start)


def fuse_attention_extended(model: ir.Model) -> PassReport:
    """Level 3's fuse_attention: ai.ortx::ScaledDotProductAttention where the standard op does not apply."""
    report = fuse_attention(model, extended=True)
    report.name = "fuse_attention_extended"
    return report
