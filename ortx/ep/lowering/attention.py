"""Lowering of ai.ortx::ScaledDotProductAttention (ortx/passes/fuse_attention.py documents the op) to 3 kernel steps:

0. Only for a mask whose batch dims the GEMM cannot stride through (e.g. [B, 1, 1, L] over B x heads):
   binary_f32 expands it into a [batch, S, L] workspace.
1. gemm_f32: scores[b] = scale * Q[b] @ KT[b] + mask[b] into an arena workspace [batch, S, L] (the scale is the
   GEMM's alpha, the mask its broadcast residual, so scores are written once).
2. softmax_f32 over the last axis, in place on the workspace (each row is read before it is written); with
   probability_scale (fuse_attention's Case 3) quantize_linear_f32 / dequantize_linear_f32 through a byte workspace.
3. gemm_f32: Y[b] = scores[b] @ V[b].
Batch dims of Q, KT, V broadcast as MatMul's (per-batch offsets); a mask that maps batch b to b * stride (all
broadcast, or laid out like the output's) is read in place by the GEMM. float32 only.

ai.ortx::MultiHeadAttention (ortx/passes/fuse_multi_head_attention.py documents the op) lowers to one
multi_head_attention_f32 step (kernels/attention.c: per head and block of query rows, both products and the softmax
on one thread; Q, K, V and Y read and written in place through their row strides, packed QKV through offsets);
under precision "bf16" multi_head_attention_bf16, the same step with both products' operands in bf16.
"""
from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ortx.ep.lowering._values import attribute, numpy_dtype, present, static_shape
from ortx.ep.lowering.conv import Declined, _batch_offsets, _checked, _emit_gemm, _sizes
from ortx.ep.lowering.elementwise import _emit_binary
from ortx.quantization.integer import INT_RANGES


def _plan(node: ir.Node) -> dict:
    values = [present(node, index) for index in range(4)]
    q, kt, v, mask = values
    if q is None or kt is None or v is None:
        raise Declined("Q, KT and V are required")
    for index, value in enumerate(values + [node.outputs[0]]):
        if value is not None and numpy_dtype(value).name != "float32":
            raise Declined(f"tensor {index} is {numpy_dtype(value).name}, only float32 is supported")
    q_shape, kt_shape, v_shape = static_shape(q), static_shape(kt), static_shape(v)
    if min(len(q_shape), len(kt_shape), len(v_shape)) < 2:
        raise Declined("Q, KT and V need rank >= 2")
    S, D = q_shape[-2:]
    D2, L = kt_shape[-2:]
    L2, Dv = v_shape[-2:]
    if D != D2 or L != L2:
        raise Declined(f"Q {q_shape}, KT {kt_shape}, V {v_shape} do not chain")
    try:
        batch = tuple(np.broadcast_shapes(q_shape[:-2], kt_shape[:-2], v_shape[:-2]))
    except ValueError:
        raise Declined(f"batch dims of {q_shape}, {kt_shape}, {v_shape} do not broadcast") from None
    if static_shape(node.outputs[0]) != batch + (S, Dv):
        raise Declined(f"output shape {static_shape(node.outputs[0])} != {batch + (S, Dv)}")
    mask_strides = None
    if mask is not None:
        mask_shape = (1,) * (len(batch) + 2 - len(static_shape(mask))) + static_shape(mask)
        if len(mask_shape) != len(batch) + 2 or mask_shape[-2] not in (1, S) or mask_shape[-1] not in (1, L):
            raise Declined(f"mask {static_shape(mask)} does not broadcast to {batch + (S, L)}")
        try:
            offsets = _batch_offsets(mask_shape[:-2], batch, mask_shape[-2] * mask_shape[-1])
        except ValueError:
            raise Declined(f"mask {static_shape(mask)} does not broadcast to {batch + (S, L)}") from None
        stride = offsets[1] - offsets[0] if len(offsets) > 1 else 0
        if offsets == [index * stride for index in range(len(offsets))]:
            mask_strides = (mask_shape[-1] if mask_shape[-2] == S and S > 1 else 0,
                            1 if mask_shape[-1] == L and L > 1 else 0, stride)
    _probability_grid(node)
    return dict(S=S, D=D, L=L, Dv=Dv, batch=batch, q_shape=q_shape, kt_shape=kt_shape, v_shape=v_shape,
                mask_strides=mask_strides, scale=float(attribute(node, "scale", 1.0)))


def lower_attention(node: ir.Node, builder) -> None:
    plan = _plan(node)
    S, D, L, Dv, batch = plan["S"], plan["D"], plan["L"], plan["Dv"], plan["batch"]
    count = int(np.prod(batch, dtype=np.int64))
    if count * S * Dv == 0:
        return
    scores = builder.workspace(max(count * S * L * 4, 4), label="scores")
    mask = present(node, 3)
    mask_ref, mask_strides = (builder.buffer(mask), plan["mask_strides"]) if mask is not None else (None, None)
    if mask is not None and mask_strides is None:  # 0. a mask the GEMM cannot stride through, expanded once
        mask_ref, mask_strides = builder.workspace(count * S * L * 4, label="mask"), (L, 1, S * L)
        zero = builder.add_constant(np.zeros(1, np.float32), label=f"{node.name}:zero")
        _emit_binary(builder, "Add", builder.buffer(mask), static_shape(mask), zero, (1,), mask_ref, batch + (S, L),
                     "float32")
    # 1. scale * Q @ KT (+ mask as the GEMM's residual) into the scores workspace.
    _emit_gemm(builder, M=S, N=L, K=D, a=builder.buffer(node.inputs[0]), a_packed=False, a_strides=(D, 1),
               b=builder.buffer(node.inputs[1]), b_packed=False, b_strides=(L, 1), output=scores,
               alpha=plan["scale"], residual=mask_ref, residual_strides=mask_strides or (0, 0, 0),
               a_offsets=_batch_offsets(plan["q_shape"][:-2], batch, S * D),
               b_offsets=_batch_offsets(plan["kt_shape"][:-2], batch, D * L))
    # 2. softmax over each row of L scores, in place (Case 3 of fuse_attention: then onto the int8 grid and back).
    builder.emit("softmax_f32", [count * S, L, 1, 0], [], [scores, scores])
    dtype, probability_scale, zero = _probability_grid(node)
    if dtype is not None:
        grid = builder.workspace(max(count * S * L, 4), label="probabilities")
        signed = int(dtype == "int8")
        builder.emit("quantize_linear_f32", [count * S * L, zero, *INT_RANGES[dtype], signed], [probability_scale],
                     [scores, grid])
        builder.emit("dequantize_linear_f32", [count * S * L, zero, signed], [probability_scale], [grid, scores])
    # 3. probabilities @ V.
    _emit_gemm(builder, M=S, N=Dv, K=L, a=scores, a_packed=False, a_strides=(L, 1), b=builder.buffer(node.inputs[2]),
               b_packed=False, b_strides=(Dv, 1), output=builder.buffer(node.outputs[0]),
               a_offsets=[index * S * L for index in range(count)],
               b_offsets=_batch_offsets(plan["v_shape"][:-2], batch, L * Dv))



def _probability_grid(node: ir.Node) -> tuple[str | None, float, int]:
    """(dtype or None, scale, zero point) of the attention's probabilities: the attributes probability_dtype ("uint8"
    or "int8"), probability_scale and probability_zero_point that fuse_attention copies from a
    QuantizeLinear/DequantizeLinear pair after the Softmax (an int8 QDQ model)."""
    scale = attribute(node, "probability_scale", None)
    if scale is None:
        return None, 1.0, 0
    dtype = attribute(node, "probability_dtype", "uint8")
    dtype = dtype.decode() if isinstance(dtype, bytes) else dtype
    zero = int(attribute(node, "probability_zero_point", 0))
    if dtype not in INT_RANGES or not INT_RANGES[dtype][0] <= zero <= INT_RANGES[dtype][1]:
        raise Declined(f"probability_dtype {dtype!r} / zero point {zero} (uint8 or int8 only)")
    return dtype, float(scale), zero


def _multi_head_plan(node: ir.Node) -> dict:
    """ai.ortx::MultiHeadAttention (ortx/passes/fuse_multi_head_attention.py documents the op)."""
    heads = int(attribute(node, "num_heads", 0))
    if heads < 1:
        raise Declined(f"num_heads {heads} < 1")
    values = [value for value in node.inputs if value is not None]
    if len(values) not in (1, 3) or len(values) != len(node.inputs):
        raise Declined(f"{len(node.inputs)} inputs: expected Q, K, V or one packed QKV")
    for index, value in enumerate(values + [node.outputs[0]]):
        if numpy_dtype(value).name != "float32":
            raise Declined(f"tensor {index} is {numpy_dtype(value).name}, only float32 is supported")
    shapes = [static_shape(value) for value in values]
    y_shape = static_shape(node.outputs[0])
    if any(len(shape) != 3 for shape in shapes + [y_shape]):
        raise Declined(f"inputs {shapes} and output {y_shape} must be [batch, seq, width]")
    B, S, value_width = y_shape
    if len(values) == 1:  # Case packed: Q, K, V are column ranges of one tensor
        width = shapes[0][2]
        key_width = (width - value_width) // 2
        shapes = [(B, S, key_width), (B, S, key_width), (B, S, value_width)]
        if tuple(static_shape(values[0])) != (B, S, 2 * key_width + value_width) or key_width < 1:
            raise Declined(f"packed QKV {static_shape(values[0])} does not hold Q, K and V of output {y_shape}")
        offsets, row_strides, batch_strides = (0, key_width, 2 * key_width), (width,) * 3, (S * width,) * 3
    else:
        offsets = (0, 0, 0)
        row_strides = tuple(shape[2] for shape in shapes)
        batch_strides = tuple(shape[1] * shape[2] for shape in shapes)
    q_shape, k_shape, v_shape = shapes
    L = k_shape[1]
    if q_shape[:2] != (B, S) or k_shape[0] != B or v_shape[:2] != (B, L) or k_shape[2] != q_shape[2] \
            or v_shape[2] != value_width:
        raise Declined(f"Q {q_shape}, K {k_shape}, V {v_shape} and output {y_shape} do not chain")
    if q_shape[2] % heads or value_width % heads:
        raise Declined(f"widths {q_shape[2]} and {value_width} do not split into {heads} heads")
    _probability_grid(node)
    return dict(B=B, H=heads, S=S, L=L, D=q_shape[2] // heads, Dv=value_width // heads, offsets=offsets,
                row_strides=row_strides, batch_strides=batch_strides, scale=float(attribute(node, "scale", 1.0)))


def lower_multi_head_attention(node: ir.Node, builder) -> None:
    plan = _multi_head_plan(node)
    B, H, S, L, D, Dv = (plan[key] for key in ("B", "H", "S", "L", "D", "Dv"))
    if B * S * H * Dv == 0:
        return
    sizes = _sizes("multi_head_attention_sizes_f32", [B, H, S, L, D, Dv, builder.num_threads])
    workspace = builder.workspace(max(int(sizes[0]), 4 * max(L, 1)), label="attention")
    inputs = [builder.buffer(value) for value in node.inputs]
    q, k, v = inputs if len(inputs) == 3 else inputs * 3
    dtype, probability_scale, zero = _probability_grid(node)
    ints = [B, H, S, L, D, Dv, *plan["offsets"], *plan["row_strides"], H * Dv, *plan["batch_strides"], S * H * Dv,
            builder.num_threads, {None: 0, "uint8": 1, "int8": 2}[dtype], zero]
    kernel = "multi_head_attention_bf16" if builder.precision_of(node) == "bf16" else "multi_head_attention_f32"
    builder.emit(kernel, ints, [plan["scale"], probability_scale],
                 [q, k, v, builder.buffer(node.outputs[0]), workspace])


LOWERINGS = {
    ("ai.ortx", "ScaledDotProductAttention"): (_checked(_plan), lower_attention),
    ("ai.ortx", "MultiHeadAttention"): (_checked(_multi_head_plan), lower_multi_head_attention),
}
