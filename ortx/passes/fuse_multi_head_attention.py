"""Multi-head attention on head-interleaved rows: the per-head reshapes and transposes around an attention fold away.

Case 1: Reshape(Transpose(ai.ortx::ScaledDotProductAttention(
            Transpose(Reshape(q, [B, S, H, D]), perm=[0, 2, 1, 3]),
            Transpose(Reshape(k, [B, L, H, D]), perm=[0, 2, 3, 1]),
            Transpose(Reshape(v, [B, L, H, Dv]), perm=[0, 2, 1, 3])), perm=[0, 2, 1, 3]), [B, S, H * Dv])
        -> ai.ortx::MultiHeadAttention(q, k, v, num_heads=H, scale=s)
Case 2: ai.ortx::MultiHeadAttention(Split(x, last axis)[0], [1], [2]) -> ai.ortx::MultiHeadAttention(x): the
        packed form, Q, K, V as the column ranges [0, HD), [HD, 2HD), [2HD, 2HD + HDv) of x (fuse_sibling_matmuls'
        merged projection), read in place.
ai.ortx::MultiHeadAttention: inputs (Q [B, S, H*D], K [B, L, H*D], V [B, L, H*Dv]) or (QKV [B, S, 2*H*D + H*Dv]);
attributes num_heads, scale; output Y [B, S, H*Dv], Y[:, :, h*Dv:(h+1)*Dv] = softmax(scale * Q_h @ K_h^T) @ V_h with
X_h = X[:, :, h*D:(h+1)*D]; optional probability_scale / probability_zero_point / probability_dtype as
ScaledDotProductAttention's (an int8 QDQ model's probabilities rounded to that grid), copied from it.
OrtxEP runs it (kernels/attention.c); not in DEFAULT_PASSES (plain ORT cannot).
Does not apply when: the attention has a mask; a shape is not static or not the layout above; an intermediate
has another reader or is a graph output; for Case 2, the Split is not along the last axis or has other outputs.
"""
from __future__ import annotations

import logging
import time

import onnx_ir as ir
from onnxscript.rewriter import RewriteRuleClassBase
from onnxscript.rewriter._basics import MatchResult

from ortx.passes._report import PassReport, apply_fusions, record_fused_from
from ortx.passes.fuse_attention import FUSED_ATTENTION, ORTX_DOMAIN

logger = logging.getLogger(__name__)

MULTI_HEAD_ATTENTION = "MultiHeadAttention"
_HEADS_FIRST = [0, 2, 1, 3]
_HEADS_FIRST_TRANSPOSED = [0, 2, 3, 1]


def _static(value: ir.Value | None) -> tuple[int, ...] | None:
    if value is None or value.shape is None or not all(isinstance(dim, int) for dim in value.shape):
        return None
    return tuple(value.shape)


def _perm(node: ir.Node) -> list[int] | None:
    perm = node.attributes.get_ints("perm", None)
    return list(perm) if perm is not None else None


def _attention_attributes(node: ir.Node, heads: int) -> dict:
    """num_heads, scale and the probabilities' int8 grid when there is one (fuse_attention's Case 3)."""
    attributes = {"num_heads": heads, "scale": node.attributes.get_float("scale", 1.0)}
    if "probability_scale" in node.attributes:
        attributes.update(probability_scale=node.attributes.get_float("probability_scale"),
                          probability_zero_point=node.attributes.get_int("probability_zero_point", 0),
                          probability_dtype=node.attributes.get_string("probability_dtype", "uint8"))
    return attributes


class MultiHeadAttentionFusion(RewriteRuleClassBase):
    """Case 1."""

    def __init__(self, notes: list[str]) -> None:
        super().__init__(name="MultiHeadAttentionFusion")
        self.notes = notes

    def pattern(self, op, q, k, v, q_shape, k_shape, v_shape, y_shape):
        q_heads = op.Transpose(op.Reshape(q, q_shape), _outputs=["q_heads"])
        kt_heads = op.Transpose(op.Reshape(k, k_shape), _outputs=["kt_heads"])
        v_heads = op.Transpose(op.Reshape(v, v_shape), _outputs=["v_heads"])
        attention = op.ScaledDotProductAttention(q_heads, kt_heads, v_heads, _domain=ORTX_DOMAIN,
                                                 _outputs=["attention"])
        return op.Reshape(op.Transpose(attention, _outputs=["merged"]), y_shape)

    def _fail(self, result: MatchResult, node: ir.Node, reason: str) -> MatchResult:
        self.notes.append(f"{node.name}: multi-head attention not fused: {reason}")
        return result.fail(reason)

    def check(self, context, q, k, v, q_heads, kt_heads, v_heads, attention, merged, **_) -> MatchResult:
        result = MatchResult()
        node = attention.producer()
        shapes = [_static(value) for value in (q, k, v, q_heads, kt_heads, v_heads, attention, merged)]
        output = next(iter(merged.uses())).node.outputs[0] if len(merged.uses()) == 1 else None
        if any(shape is None for shape in shapes) or _static(output) is None:
            return self._fail(result, node, "a shape is not static")
        q_s, k_s, v_s, qh_s, kth_s, vh_s, y_s, merged_s = shapes
        if len(q_s) != 3 or len(k_s) != 3 or len(v_s) != 3 or len(qh_s) != 4:
            return self._fail(result, node, f"Q {q_s}, K {k_s}, V {v_s} are not [batch, seq, heads * head_dim]")
        B, H, S, D = qh_s
        L, Dv = kth_s[3], vh_s[3]
        expected = {"Q": (q_s, (B, S, H * D)), "K": (k_s, (B, L, H * D)), "V": (v_s, (B, L, H * Dv)),
                    "KT heads": (kth_s, (B, H, D, L)), "V heads": (vh_s, (B, H, L, Dv)),
                    "attention": (y_s, (B, H, S, Dv)), "merged": (merged_s, (B, S, H, Dv)),
                    "output": (_static(output), (B, S, H * Dv))}
        for label, (actual, wanted) in expected.items():
            if actual != wanted:
                return self._fail(result, node, f"{label} shape {actual} is not {wanted}")
        perms = [_perm(value.producer()) for value in (q_heads, kt_heads, v_heads, merged)]
        if perms != [_HEADS_FIRST, _HEADS_FIRST_TRANSPOSED, _HEADS_FIRST, _HEADS_FIRST]:
            return self._fail(result, node, f"transposes {perms} do not split heads as [0, 2, 1, 3] "
                                            "(K: [0, 2, 3, 1])")
        if any(value.dtype != ir.DataType.FLOAT for value in (q, k, v)):
            return self._fail(result, node, "Q, K, V are not float32")
        self.matched = list(context.nodes)
        self.attributes = _attention_attributes(node, H)
        return result

    def rewrite(self, op, q, k, v, **_):
        output = op.op(MULTI_HEAD_ATTENTION, q, k, v, _domain=ORTX_DOMAIN, **self.attributes)
        record_fused_from(output.producer(), self.matched)
        return output


class PackedQKVFusion(RewriteRuleClassBase):
    """Case 2."""

    def __init__(self, notes: list[str]) -> None:
        super().__init__(name="PackedQKVFusion")
        self.notes = notes

    def pattern(self, op, x, sizes):
        q, k, v = op.Split(x, sizes, _outputs=3)
        return op.MultiHeadAttention(q, k, v, _domain=ORTX_DOMAIN, _outputs=["attention"])

    def check(self, context, x, attention, **_) -> MatchResult:
        result = MatchResult()
        split = next(node for node in context.nodes if node.op_type == "Split")
        shape, output = _static(x), _static(attention)
        if shape is None or len(shape) != 3 or output is None:
            reason = f"the split tensor's shape {shape} is not a static [batch, seq, width]"
        elif split.attributes.get_int("axis", 0) % 3 != 2:
            reason = "the Split is not along the last axis"
        elif [_static(value) for value in split.outputs] != [shape[:2] + (width,) for width in (
                (shape[2] - output[2]) // 2, (shape[2] - output[2]) // 2, output[2])]:
            reason = f"the split's outputs {[_static(value) for value in split.outputs]} are not Q, K, V of {output}"
        else:
            self.matched = list(context.nodes)
            self.attention = attention.producer()
            return result
        self.notes.append(f"{attention.producer().name}: packed Q/K/V not fused: {reason}")
        return result.fail(reason)

    def rewrite(self, op, x, **_):
        output = op.op(MULTI_HEAD_ATTENTION, x, _domain=ORTX_DOMAIN,
                       **_attention_attributes(self.attention, self.attention.attributes.get_int("num_heads")))
        record_fused_from(output.producer(), self.matched)
        return output


def fuse_multi_head_attention(model: ir.Model) -> PassReport:
    start = time.perf_counter()
    notes: list[str] = []
    heads = apply_fusions(model, [MultiHeadAttentionFusion(notes)])
    packed = apply_fusions(model, [PackedQKVFusion(notes)]) if heads else 0
    return PassReport(model, name="fuse_multi_head_attention",
                      counts={"attentions_fused": heads, "packed_qkv_fused": packed}, notes=sorted(set(notes)),
                      seconds=time.perf_counter() - start)
