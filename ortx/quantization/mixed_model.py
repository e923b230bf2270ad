"""A mixed-precision model from an assignment {layer node: precision}, and the int8 activation ranges it needs.

1. `int8_ranges`: one calibration pass (statistics.py, calibrate.py) over the activation tensors the int8 plan of
   *every* layer would quantize. A plan over fewer layers quantizes a subset of those tensors (its seeds are a subset
   and the backward growth through pass-through ops and Concat only follows seeds), so any assignment's int8 plan
   finds its ranges here, and its shared scales are recomputed over the members that plan actually has.
2. `build_mixed_model`: a copy of the model; the int8 layers first, together, through plan_quantization (every
   other compute node excluded) and insert_qdq; then each fp16/bf16/int4 layer's weight through
   precisions.store_weight. fp32 layers are untouched.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping

import onnx

from ortx.quantization.calibrate import CALIBRATION_METHODS, percentile_range
from ortx.quantization.insert_qdq import _Names, insert_qdq
from ortx.quantization.plan import COMPUTE_OPS, plan_quantization
from ortx.quantization.precisions import DEFAULT_BLOCK_SIZE, PRECISIONS, Layer, PrecisionError, store_weight
from ortx.quantization.quantize_model import group_parameters
from ortx.quantization.statistics import Progress, collect_statistics


@dataclasses.dataclass(frozen=True)
class Int8Ranges:
    ranges: dict[str, tuple[float, float]]   # activation tensor -> calibrated [low, high]
    activation_dtype: str
    samples: int


def _other_compute_nodes(model: onnx.ModelProto, int8_nodes: Iterable[str]) -> list[str]:
    keep = set(int8_nodes)
    return [node.name for node in model.graph.node if node.op_type in COMPUTE_OPS and node.name not in keep]


def int8_ranges(model: onnx.ModelProto, layers: list[Layer], samples: Iterable[Mapping], *, method: str,
                percentile: float, activation_dtype: str, progress: Progress | None = None, total: int | None = None,
                threads: int = 0) -> Int8Ranges:
    """Step 1 of the module docstring."""
    plan = plan_quantization(model, exclude_nodes=_other_compute_nodes(model, [layer.node for layer in layers]))
    statistics = collect_statistics(model, plan.tensors, samples, histograms=method != "minmax",
                                    progress=progress, total=total, threads=threads)
    ranges = {}
    for tensor in plan.tensors:
        ranges[tensor] = (percentile_range(statistics[tensor], percentile) if method == "percentile"
                          else CALIBRATION_METHODS[method](statistics[tensor]))
    seen = next(iter(statistics.values())).samples if statistics else 0
    return Int8Ranges(ranges, activation_dtype, seen)


def build_mixed_model(model: onnx.ModelProto, layers: list[Layer], assignment: Mapping[str, str], *,
                      ranges: Int8Ranges | None, block_size: int = DEFAULT_BLOCK_SIZE) -> onnx.ModelProto:
    """Step 2 of the module docstring; layers missing from `assignment` stay fp32."""
    unknown = sorted(set(assignment.values()) - set(PRECISIONS))
    if unknown:
        raise PrecisionError(f"unknown precision(s) {', '.join(map(repr, unknown))}; known: {', '.join(PRECISIONS)}")
    mixed = onnx.ModelProto()
    mixed.CopyFrom(model)
    int8_nodes = [layer.node for layer in layers if assignment.get(layer.node) == "int8"]
    if int8_nodes:
        if ranges is None:
            raise PrecisionError("int8 layers need calibrated activation ranges (int8_ranges)")
        plan = plan_quantization(mixed, exclude_nodes=_other_compute_nodes(mixed, int8_nodes))
        missing = sorted(set(int8_nodes) - set(plan.compute_nodes))
        if missing:
            reasons = {exclusion.node: exclusion.reason for exclusion in plan.excluded}
            raise PrecisionError("int8 cannot quantize " + "; ".join(f"node '{name}': {reasons.get(name, '?')}"
                                                                      for name in missing))
        absent = [tensor for tensor in plan.tensors if tensor not in ranges.ranges]
        if absent:
            raise PrecisionError(f"no calibrated range for tensor(s) {', '.join(absent)}")
        parameters = group_parameters(plan, ranges.ranges, ranges.activation_dtype)
        insert_qdq(mixed, plan, parameters)
    names = _Names(mixed.graph)
    for layer in layers:
        precision = assignment.get(layer.node, "fp32")
        if precision not in ("fp32", "int8"):
            store_weight(mixed, layer, precision, block_size=block_size, names=names)
    return mixed
