"""Multiply-accumulate counts of the compute-heavy ops, for the share of work OrtxEP claims and for GFLOP/s."""
from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ortx.ep.lowering._values import NotStatic, static_shape


def node_macs(node: ir.Node) -> int:
    """MACs of Conv/ConvTranspose/FusedConv/FusedConvTranspose/QConv/Gemm/MatMul/ScaledDotProductAttention/
    MultiHeadAttention nodes with static shapes; 0 for everything else."""
    try:
        if node.op_type == "ScaledDotProductAttention":  # Q @ KT, then probabilities @ V
            output = static_shape(node.outputs[0])
            rows = int(np.prod(output[:-1], dtype=np.int64))
            depth, length = static_shape(node.inputs[1])[-2:]
            return rows * int(length) * (int(depth) + int(output[-1]))
        if node.op_type == "MultiHeadAttention":  # per head: Q_h @ K_h^T, then probabilities @ V_h
            batch, seq, value_width = static_shape(node.outputs[0])
            if len(node.inputs) == 3:
                length, key_width = static_shape(node.inputs[1])[1:]
            else:
                length, key_width = seq, (static_shape(node.inputs[0])[2] - value_width) // 2
            return int(batch) * int(seq) * int(length) * (int(key_width) + int(value_width))
        if node.op_type == "QConv":  # weights at input 3: [M, C/group, KH, KW] or [M, K]
            output = static_shape(node.outputs[0])
            weight = static_shape(node.inputs[3])
            return int(np.prod(output, dtype=np.int64)) * int(np.prod(weight[1:], dtype=np.int64))
        if node.op_type in ("Conv", "FusedConv"):
            output = static_shape(node.outputs[0])
            weight = static_shape(node.inputs[1])
            return int(np.prod(output, dtype=np.int64)) * int(np.prod(weight[1:], dtype=np.int64))
        if node.op_type in ("ConvTranspose", "FusedConvTranspose"):
            data = static_shape(node.inputs[0])
            weight = static_shape(node.inputs[1])
            return int(np.prod(data, dtype=np.int64)) * int(np.prod(weight[1:], dtype=np.int64))
        if node.op_type in ("Gemm", "MatMul", "FusedGemm", "FusedMatMul"):
            output = static_shape(node.outputs[0])
            first = static_shape(node.inputs[0])
            transposed = node.attributes.get("transA")
            reduction = first[0] if (node.op_type == "Gemm" and transposed is not None and transposed.value) else first[-1]
            return int(np.prod(output, dtype=np.int64)) * int(reduction)
    except (NotStatic, IndexError, TypeError):
        return 0
    return 0
