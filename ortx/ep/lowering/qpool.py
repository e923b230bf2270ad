"""Lowering of ("ai.ortx", "QAveragePool") -> qavgpool_i8 / qglobal_avgpool_i8 (kernels/qpool.h).

ai.ortx::QAveragePool is what ortx/passes/fuse_qdq.py makes of DQ(x) -> AveragePool/GlobalAveragePool -> Q with
per-tensor constant scales. Inputs: 0 x (uint8/int8), 1 x_scale, 2 x_zero_point, 3 y_scale, 4 y_zero_point; the
output's dtype is Q's. Attributes: kind ("AveragePool"/"GlobalAveragePool") and AveragePool's own (auto_pad,
ceil_mode, count_include_pad, dilations, kernel_shape, pads, strides), resolved by the float pool's _window_plan,
so the int8 kernel takes every window the float one does. Arithmetic: ortx/quantization/integer.py; the divisor
table holds (m0, shift) for every divisor 1..prod(kernel_shape) (GlobalAveragePool: the one divisor, the plane size).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from ortx.ep.lowering._values import attribute, numpy_dtype, static_shape, string_attribute
from ortx.ep.lowering.conv import Declined, _checked
from ortx.ep.lowering.pool import _pool_ints, _window_plan
from ortx.ep.lowering.qdq import per_tensor
from ortx.quantization.integer import INT_RANGES, MAX_AVERAGE_DIVISOR, average_multipliers

QPOOL_ATTRIBUTES = {"kind", "auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads",
                    "strides"}
KINDS = ("AveragePool", "GlobalAveragePool")


@dataclasses.dataclass(frozen=True)
class QPoolPlan:
    kernel: str         # qavgpool_i8 or qglobal_avgpool_i8
    ints: list[int]     # the kernel's ints (kernels/qpool.h)
    table: np.ndarray   # int32 [divisors, 2]: (m0, shift) from count_base up
    count_base: int


def qpool_plan(node: ir.Node) -> QPoolPlan:
    unknown = sorted(set(node.attributes) - QPOOL_ATTRIBUTES)
    if unknown:
        raise Declined(f"attribute(s) {', '.join(unknown)} not supported")
    kind = string_attribute(node, "kind", "AveragePool")
    if kind not in KINDS:
        raise Declined(f"kind {kind!r} (AveragePool or GlobalAveragePool)")
    x, y = node.inputs[0], node.outputs[0]
    x_dtype, y_dtype = numpy_dtype(x).name, numpy_dtype(y).name
    if x_dtype not in INT_RANGES or y_dtype not in INT_RANGES:
        raise Declined(f"input {x_dtype} / output {y_dtype} (uint8 or int8 only)")
    shape = static_shape(x)
    static_shape(y)
    if not 3 <= len(shape) <= 5:
        raise Declined(f"input rank {len(shape)} (NCW, NCHW or NCDHW)")
    x_scale, y_scale = per_tensor(node, 1, "x_scale"), per_tensor(node, 3, "y_scale")
    if x_scale is None or y_scale is None:
        raise Declined("x_scale and y_scale are required")
    x_zero, y_zero = per_tensor(node, 2, "x_zero_point"), per_tensor(node, 4, "y_zero_point")
    zx = int(x_zero) if x_zero is not None else 0
    zy = int(y_zero) if y_zero is not None else 0
    quant = [int(x_dtype == "int8"), int(y_dtype == "int8"), zx, zy, *INT_RANGES[y_dtype]]
    if kind == "GlobalAveragePool":
        spatial = int(np.prod(shape[2:], dtype=np.int64))
        kernel, divisors, base = "qglobal_avgpool_i8", [spatial], spatial
        ints = [shape[0] * shape[1], spatial]
    else:
        _, reason = _window_plan(node)
        if reason is not None:
            raise Declined(reason)
        area = int(np.prod([int(k) for k in attribute(node, "kernel_shape")], dtype=np.int64))
        kernel, divisors, base = "qavgpool_i8", range(1, area + 1), 1
        ints = _pool_ints(node, int(attribute(node, "count_include_pad", 0)))
    if max(divisors) > MAX_AVERAGE_DIVISOR:
        raise Declined(f"window of {max(divisors)} taps (at most {MAX_AVERAGE_DIVISOR}: int32 sums)")
    try:
        table = average_multipliers(x_scale, y_scale, divisors)
    except ValueError as error:
        raise Declined(str(error)) from None
    return QPoolPlan(kernel, ints + quant + [base, len(table)], table, base)


def lower_qpool(node: ir.Node, builder) -> None:
    plan = qpool_plan(node)
    table = builder.add_constant(plan.table, label=f"{node.name}:divisor_multipliers")
    builder.emit(plan.kernel, plan.ints, [], [builder.buffer(node.inputs[0]), table, builder.buffer(node.outputs[0])])


LOWERINGS = {
    ("ai.ortx", "QAveragePool"): (_checked(qpool_plan), lower_qpool),
}
