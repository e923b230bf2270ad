"""`mixed_precision`: a precision per layer (fp32, fp16, bf16, int8, int4 weight-only) within an error budget.

load a private copy -> ortx -O2 passes -> opset >= 21 when int4 is asked (int4 DequantizeLinear) -> layers
(precisions.find_layers) -> calibration samples checked -> int8 activation ranges (mixed_model.int8_ranges) ->
fp32 reference outputs (sensitivity.Evaluator) -> each layer alone at each precision (sensitivity.py) -> the search
(mixed_search.py: greedy by sensitivity-per-cost, every candidate mix measured whole) -> the chosen model,
onnx.checker, report. The output is standard ONNX (Cast, QuantizeLinear/DequantizeLinear) that plain ORT runs.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
import time
from typing import Callable, Iterable, Sequence

import onnx
import onnx.version_converter

from ortx.model_io import ModelSource, clamp_ir_version
from ortx.quantization.calibrate import CALIBRATION_METHODS, DEFAULT_PERCENTILE
from ortx.quantization.calibration_data import CalibrationDataError, calibration_set
from ortx.quantization.mixed_model import build_mixed_model, int8_ranges
from ortx.quantization.mixed_report import LayerChoice, MixedPrecisionReport
from ortx.quantization.mixed_search import OBJECTIVES, search
from ortx.quantization.plan import QuantizationError
from ortx.quantization.precisions import (DEFAULT_BLOCK_SIZE, INT4_MIN_OPSET, PRECISIONS, PrecisionError,
                                          Layer, default_opset, find_layers, ort_support)
from ortx.quantization.quantize_model import ACTIVATION_DTYPES, prepare_model
from ortx.quantization.sensitivity import (Evaluator, Metric, SensitivityRecord, analyse_sensitivity,
                                           resolve_metric)

DEFAULT_PRECISIONS = ("fp32", "fp16", "int8", "int4")

# progress(stage, done, total): stage is "calibrating", "sensitivity" or "search"; total None when unknown
MixedProgress = Callable[[str, int, "int | None"], None]


def check_budget(budget: object) -> float:
    if isinstance(budget, bool) or not isinstance(budget, numbers.Real) or not budget >= 0 \
            or budget == float("inf"):
        raise ValueError(f"budget must be a finite number >= 0 (an error of the chosen metric), not {budget!r}")
    return float(budget)


def check_precisions(precisions: Iterable[str]) -> list[str]:
    """The precisions in PRECISIONS order, fp32 always among them; PrecisionError names an unknown one or one
    that this onnxruntime cannot run."""
    if isinstance(precisions, str):
        precisions = [part.strip() for part in precisions.split(",") if part.strip()]
    asked = list(precisions)
    unknown = [precision for precision in asked if precision not in PRECISIONS]
    if unknown:
        raise PrecisionError(f"precisions: unknown {', '.join(map(repr, unknown))}; choose from "
                             f"{', '.join(PRECISIONS)}")
    for precision in asked:
        reason = ort_support(precision)
        if reason:
            raise PrecisionError(f"precisions: {precision} cannot be used: {reason}")
    return [precision for precision in PRECISIONS if precision in asked or precision == "fp32"]


def _upgrade_opset(proto: onnx.ModelProto) -> onnx.ModelProto:
    if default_opset(proto) >= INT4_MIN_OPSET:
        return proto
    try:
        upgraded = onnx.version_converter.convert_version(proto, INT4_MIN_OPSET)
        onnx.checker.check_model(upgraded)
    except Exception as error:  # the converter raises several types; all mean "cannot upgrade"
        raise PrecisionError(f"precisions: int4 needs opset >= {INT4_MIN_OPSET} and onnx.version_converter cannot "
                             f"upgrade this model from opset {default_opset(proto)}: {error}; leave int4 out"
                             ) from error
    return upgraded


def _reused_records(records: Sequence[SensitivityRecord], layers: list[Layer], precisions: list[str],
                    objective: str) -> list[SensitivityRecord]:
    """The given records for these layers and precisions; ValueError naming `sensitivity` when any is missing."""
    by_key = {(record.node, record.precision): record for record in records}
    missing = [f"{layer.node} at {precision}" for layer in layers for precision in precisions
               if (layer.node, precision) not in by_key]
    if missing:
        raise ValueError(f"sensitivity: no record for {', '.join(missing[:5])}"
                         + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
                         + "; pass the report.sensitivity of a run on the same model, options and precisions")
    untimed = [f"{layer.node} at {precision}" for layer in layers for precision in precisions
               if precision != "fp32" and objective == "latency" and by_key[layer.node, precision].latency_ms is None
               and math.isfinite(by_key[layer.node, precision].error)]
    if untimed:
        raise ValueError(f"sensitivity: objective latency needs timed records; {untimed[0]} has none (the earlier "
                         "run used objective size)")
    return [by_key[layer.node, precision] for layer in layers for precision in precisions]


def _check_options(objective: str, method: str, activation_dtype: str, block_size: object,
                   error_samples: object) -> None:
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
    if method not in CALIBRATION_METHODS:
        raise ValueError(f"method must be one of {', '.join(CALIBRATION_METHODS)}, not {method!r}")
    if activation_dtype not in ACTIVATION_DTYPES:
        raise ValueError(f"activation_dtype must be 'int8' or 'uint8', not {activation_dtype!r}")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 0:
        raise ValueError(f"block_size must be an int >= 0 (0: one int4 scale per output channel), not {block_size!r}")
    if error_samples is not None and (isinstance(error_samples, bool) or not isinstance(error_samples, int)
                                      or error_samples < 1):
        raise ValueError(f"error_samples must be a positive int or None, not {error_samples!r}")


def _searched_layers(proto: onnx.ModelProto, exclude_nodes: set[str], exclude_op_types: set[str]) -> list[Layer]:
    unknown = sorted(exclude_nodes - {node.name for node in proto.graph.node})
    if unknown:
        raise QuantizationError(f"excluded node name(s) {', '.join(map(repr, unknown))} not in the model")
    layers = [layer for layer in find_layers(proto)
              if layer.node not in exclude_nodes and layer.op_type not in exclude_op_types]
    if not layers:
        raise QuantizationError("the model has no Conv/Gemm/MatMul with a float32 initializer weight to give a "
                                "precision (or all of them are excluded)")
    return layers


def _layer_choices(layers: list[Layer], records: list[SensitivityRecord], assignment: dict[str, str]
                   ) -> list[LayerChoice]:
    sizes = {(record.node, record.precision): record.bytes for record in records}
    return [LayerChoice(layer.node, layer.op_type, assignment[layer.node], sizes[layer.node, assignment[layer.node]],
                        sizes[layer.node, "fp32"],
                        {record.precision: record.error for record in records if record.node == layer.node})
            for layer in layers]


@dataclasses.dataclass
class MixedSetup:
    """Everything a mixed-precision choice is measured against, prepared once: the -O2 model, its layers, int8
    activation ranges, the fp32 reference outputs. `mixed_precision` searches with it; the notebook's precision
    explorer (ortx.widgets.precision) measures the user's own choices with it."""

    proto: onnx.ModelProto
    layers: list[Layer]
    precisions: list[str]
    ranges: object  # mixed_model.Int8Ranges, or None without int8
    evaluator: Evaluator
    block_size: int

    def build(self, assignment: dict[str, str]) -> onnx.ModelProto:
        """The model with `assignment` (layer node -> precision; missing layers stay fp32)."""
        return build_mixed_model(self.proto, self.layers, assignment, ranges=self.ranges, block_size=self.block_size)

    def error(self, assignment: dict[str, str]) -> float:
        """The metric of the whole mixed model against fp32 on the evaluation samples, measured in ORT."""
        return self.evaluator.error(self.evaluator.session(self.build(assignment)))

    def sensitivity(self, *, latency: bool = False, progress: MixedProgress | None = None) -> list[SensitivityRecord]:
        return analyse_sensitivity(
            self.proto, self.layers, self.precisions, self.build, self.evaluator, latency=latency,
            progress=None if progress is None else lambda done, total, _: progress("sensitivity", done, total))


def prepare_mixed(model: ModelSource, calibration: object, *, precisions: Iterable[str] = DEFAULT_PRECISIONS,
                  metric: str | Metric = "relative_l2", method: str = "mse", percentile: float = DEFAULT_PERCENTILE,
                  activation_dtype: str = "uint8", block_size: int = DEFAULT_BLOCK_SIZE,
                  exclude_nodes: Iterable[str] = (), exclude_op_types: Iterable[str] = (),
                  error_samples: int | None = None, optimize: bool = True, threads: int = 2,
                  progress: MixedProgress | None = None) -> MixedSetup:
    """The steps before the search (module docstring): load, -O2, layers, samples checked, int8 ranges, fp32
    reference outputs. Options as for `mixed_precision`."""
    _check_options("size", method, activation_dtype, block_size, error_samples)
    _, metric = resolve_metric(metric)
    chosen = check_precisions(precisions)
    proto = prepare_model(model, optimize)
    if "int4" in chosen:
        proto = _upgrade_opset(proto)
    layers = _searched_layers(proto, set(exclude_nodes), set(exclude_op_types))
    samples = list(calibration_set(calibration, proto))   # checked as read; every later stage reruns them
    ranges = None
    if "int8" in chosen:
        ranges = int8_ranges(proto, layers, samples, method=method, percentile=percentile,
                             activation_dtype=activation_dtype, threads=threads, total=len(samples),
                             progress=None if progress is None else lambda done, total: progress("calibrating",
                                                                                                  done, total))
    evaluation = samples[:error_samples] if error_samples else samples
    if not evaluation:
        raise CalibrationDataError("the calibration set is empty (0 samples)")
    return MixedSetup(proto, layers, chosen, ranges, Evaluator(proto, evaluation, metric, threads=threads),
                      block_size)


def mixed_precision(model: ModelSource, calibration: object, *, budget: float, objective: str = "size",
                    precisions: Iterable[str] = DEFAULT_PRECISIONS, metric: str | Metric = "relative_l2",
                    method: str = "mse", percentile: float = DEFAULT_PERCENTILE,
                    activation_dtype: str = "uint8", block_size: int = DEFAULT_BLOCK_SIZE,
                    exclude_nodes: Iterable[str] = (), exclude_op_types: Iterable[str] = (),
                    error_samples: int | None = None, optimize: bool = True,
                    threads: int = 2, progress: MixedProgress | None = None,
                    sensitivity: Sequence[SensitivityRecord] | None = None
                    ) -> tuple[onnx.ModelProto, MixedPrecisionReport]:
    """Returns (model, report). `budget`: the largest error of `metric` ("relative_l2", "cosine" for 1 - cosine,
    or metric(reference, candidate) -> float over per-sample lists of outputs) the written model may have on the
    calibration samples against the fp32 model (the first `error_samples` of them, default all). `objective`:
    "size" (serialized bytes) or "latency" (ORT CPU median on `threads` threads). `precisions`: any of
    fp32, fp16, bf16, int8, int4 (fp32 is always allowed). `method`, `percentile`, `activation_dtype` calibrate
    int8 layers as ortx.quantize does; `block_size` blocks int4 MatMul/Gemm weights along K (0: per channel).
    Layers named in `exclude_nodes` or of an op type in `exclude_op_types` stay fp32. `sensitivity`: the records of
    an earlier report on the same model, samples and options (report.sensitivity), to try another budget without
    measuring every layer again."""
    start = time.perf_counter()
    budget = check_budget(budget)
    _check_options(objective, method, activation_dtype, block_size, error_samples)
    setup = prepare_mixed(model, calibration, precisions=precisions, metric=metric, method=method,
                          percentile=percentile, activation_dtype=activation_dtype, block_size=block_size,
                          exclude_nodes=exclude_nodes, exclude_op_types=exclude_op_types, error_samples=error_samples,
                          optimize=optimize, threads=threads, progress=progress)
    proto, layers, chosen, evaluator, build = setup.proto, setup.layers, setup.precisions, setup.evaluator, setup.build
    exclude_nodes, exclude_op_types = set(exclude_nodes), set(exclude_op_types)
    metric_name = evaluator.metric_name

    sensitivity_start = time.perf_counter()
    if sensitivity is None:
        records = setup.sensitivity(latency=objective == "latency", progress=progress)
    else:
        records = _reused_records(sensitivity, layers, chosen, objective)
    sensitivity_seconds = time.perf_counter() - sensitivity_start
    counter = itertools.count(1)

    def measure(assignment: dict[str, str]) -> float:
        error = setup.error(assignment)
        if progress is not None:
            progress("search", next(counter), None)
        return error

    def measure_latency(assignment: dict[str, str]) -> float:
        latency_ms, fp32_ms = evaluator.latency_ms(evaluator.session(build(assignment)))
        return latency_ms / fp32_ms

    result = search(records, budget, objective, measure, measure_latency)
    mixed = clamp_ir_version(build(result.assignment))
    onnx.checker.check_model(mixed)
    latency = fp32_latency = None
    if objective == "latency":
        latency, fp32_latency = evaluator.latency_ms(evaluator.session(mixed), blocks=10)
    notes = [f"excluded {name}: kept fp32" for name in sorted(exclude_nodes)]
    notes += [f"op type {op_type} excluded: kept fp32" for op_type in sorted(exclude_op_types)]
    report = MixedPrecisionReport(budget, objective, metric_name, chosen, len(evaluator.samples), result.error,
                                  proto.ByteSize(), mixed.ByteSize(),
                                  _layer_choices(layers, records, result.assignment), records, result.steps,
                                  result.fell_back_to_fp32, time.perf_counter() - start, sensitivity_seconds,
                                  sensitivity is not None, latency, fp32_latency, notes)
    return mixed, report
