"""The output size of a windowed pool (MaxPool, AveragePool, LpPool) along one spatial axis, as ONNX Runtime
computes it (PoolAttributes::ComputeOutputSize) and onnx.reference agrees: with ceil_mode the last window must start
inside the input or the begin padding. onnx's shape inference for the pools before opset 22 leaves that rule out
(MaxPool 2x2/2, pads 1, ceil_mode, on 13 pixels: it infers 8, ORT computes 7), so infer_shapes corrects it and the
pool lowering checks it."""
from __future__ import annotations

import math


def pool_output_size(in_size: int, kernel: int, stride: int, pad_total: int, dilation: int, pad_begin: int,
                     ceil_mode: int) -> int:
    span = in_size + pad_total - dilation * (kernel - 1) - 1
    if not ceil_mode:
        return span // stride + 1 if span >= 0 else 0
    size = math.ceil(span / stride) + 1
    if (size - 1) * stride >= in_size + pad_begin:
        size -= 1
    return size
