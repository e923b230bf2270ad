"""Output sizes as ONNX Runtime computes them where onnx's shape inference says otherwise. ORT runs the nodes OrtxEP
declines into buffers ortx plans from the inferred shapes, so a disagreement failed at run time (infer_shapes
corrects the inferred shapes; the pool lowering resolves pads and sizes with the same rules):
- windowed pools with ceil_mode: the last window must start inside the input or the begin padding (PoolAttributes::
  ComputeOutputSize, and onnx.reference); onnx's inference for the pools before opset 22 counts it (MaxPool 2x2/2,
  pads 1, on 13 pixels: onnx 8, ORT 7);
- pools with auto_pad SAME_*: ORT's legacy pads come from the undilated kernel, the size from the dilated one (MaxPool
  2x2, dilations 2, stride 1, on 7 pixels: onnx 7, ORT 6);
- ConvTranspose with auto_pad SAME_* and no output_shape: ORT pads to in * stride whatever output_padding (stride 3,
  output_padding 1, on 13 pixels: onnx 40, ORT 39)."""
from __future__ import annotations

import math
from typing import Sequence


def pool_output_size(in_size: int, kernel: int, stride: int, pad_total: int, dilation: int, pad_begin: int,
                     ceil_mode: int) -> int:
    span = in_size + pad_total - dilation * (kernel - 1) - 1
    if not ceil_mode:
        return span // stride + 1 if span >= 0 else 0
    size = math.ceil(span / stride) + 1
    if (size - 1) * stride >= in_size + pad_begin:
        size -= 1
    return size


def pool_pads(in_sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int], pads: Sequence[int],
              auto_pad: str) -> tuple[list[int], list[int]] | None:
    """(begin, end) pads of a windowed pool as ORT resolves them: the explicit ones (NOTSET), none (VALID), or
    SAME_UPPER / SAME_LOWER's with the undilated kernel; None for another auto_pad or a SAME that would pad
    negatively."""
    spatial = len(in_sizes)
    if auto_pad == "NOTSET":
        return list(pads[:spatial]), list(pads[spatial:])
    if auto_pad == "VALID":
        return [0] * spatial, [0] * spatial
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        return None
    begin, end = [], []
    for in_size, size, stride in zip(in_sizes, kernel, strides):
        target = (in_size + stride - 1) // stride
        needed = (target - 1) * stride + size - in_size
        if needed < 0:
            return None
        begin.append(needed // 2 if auto_pad == "SAME_UPPER" else (needed + 1) // 2)
        end.append(needed - begin[-1])
    return begin, end
