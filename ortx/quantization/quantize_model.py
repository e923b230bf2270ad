"""`quantize`: post-training static quantization of a float ONNX model to standard QDQ ONNX.

load a private copy -> ortx -O2 passes (Conv+BatchNorm folded, so the int8 weights are the ones that run) ->
opset >= 13 (per-channel DequantizeLinear) -> plan_quantization (plan.py) -> calibration samples checked against the
inputs (calibration_data.py) -> collect_statistics over ORT CPU runs (statistics.py) -> each tensor's range by the
chosen method (calibrate.py) -> one scale per group (scales.py) -> insert_qdq (insert_qdq.py) -> onnx.checker.
"""
from __future__ import annotations

import collections
import time
from typing import Iterable

import onnx
import onnx.version_converter

from ortx.model_io import ModelSource, clamp_ir_version, load
from ortx.quantization.calibrate import CALIBRATION_METHODS, DEFAULT_PERCENTILE, percentile_range
from ortx.quantization.calibration_data import calibration_set
from ortx.quantization.insert_qdq import insert_qdq
from ortx.quantization.plan import QuantizationError, QuantizationPlan, plan_quantization
from ortx.quantization.report import QuantizationReport, TensorRecord
from ortx.quantization.scales import MIN_SCALE, QuantizationParameters, activation_parameters
from ortx.quantization.statistics import Progress, TensorStatistics, collect_statistics

METHODS = tuple(CALIBRATION_METHODS)
ACTIVATION_DTYPES = ("int8", "uint8")
QDQ_MIN_OPSET = 13  # DequantizeLinear's axis attribute (per-channel weights, int32 bias) arrived in opset 13


def _default_opset(model: onnx.ModelProto) -> int:
    return next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), 0)


def prepare_model(model: ModelSource, optimize: bool) -> onnx.ModelProto:
    from ortx.optimize import optimize as run_passes
    from ortx.pipeline import name_nodes

    proto = run_passes(model, level=2)[0] if optimize else load(model)
    if _default_opset(proto) < QDQ_MIN_OPSET:
        try:
            proto = onnx.version_converter.convert_version(proto, QDQ_MIN_OPSET)
            onnx.checker.check_model(proto)
        except Exception as error:  # the converter raises several types; all mean "cannot upgrade"
            raise QuantizationError(f"model opset {_default_opset(proto)} is below {QDQ_MIN_OPSET}, which QDQ with "
                                    f"per-channel weights needs, and onnx.version_converter failed: {error}") from error
    name_nodes(proto)
    quantized_ops = sorted({node.op_type for node in proto.graph.node
                            if node.op_type in ("QuantizeLinear", "DequantizeLinear")})
    if quantized_ops:
        raise QuantizationError(f"the model already has {' and '.join(quantized_ops)} nodes; quantize its float "
                                "original instead")
    return proto


def _tensor_range(statistics: TensorStatistics, method: str, percentile: float) -> tuple[float, float]:
    if method == "percentile":
        return percentile_range(statistics, percentile)
    return CALIBRATION_METHODS[method](statistics)


def group_parameters(plan: QuantizationPlan, ranges: dict[str, tuple[float, float]], dtype: str
                      ) -> dict[str, QuantizationParameters]:
    members = collections.defaultdict(list)
    for tensor, root in plan.group_of.items():
        members[root].append(ranges[tensor])
    return {root: activation_parameters(min(low for low, _ in spans), max(high for _, high in spans), dtype)
            for root, spans in members.items()}


def _tensor_records(plan, statistics, ranges, parameters) -> list[TensorRecord]:
    records = []
    for tensor in plan.tensors:
        stats, group = statistics[tensor], parameters[plan.group_of[tensor]]
        notes = []
        if stats.constant:
            notes.append(f"constant tensor (every value {stats.minimum:.6g})")
        if group.floored:
            notes.append(f"empty range: scale floored at {MIN_SCALE:g}")
        records.append(TensorRecord(tensor, plan.group_of[tensor], stats.minimum, stats.maximum, *ranges[tensor],
                                    float(group.scale), int(group.zero_point), "; ".join(notes)))
    return records


def quantize(model: ModelSource, calibration: object, *, method: str = "mse",
             activation_dtype: str = "uint8", exclude_nodes: Iterable[str] = (),
             exclude_op_types: Iterable[str] = (), percentile: float = DEFAULT_PERCENTILE, optimize: bool = True,
             progress: Progress | None = None, threads: int = 0) -> tuple[onnx.ModelProto, QuantizationReport]:
    """Returns (QDQ model, report). `calibration`: an .npz path, a folder of .npz files, a dict of arrays stacked
    on the batch axis, or an iterable of feed dicts. `optimize` runs ortx's -O2 passes first (node names in
    `exclude_nodes` are then those of the optimized model, as listed in the report). `progress(done, total)` is
    called after each calibration sample (total is None for an iterable of unknown length); `threads` is ORT's
    intra-op thread count for calibration (0: ORT's default). The default method, mse, kept the output nearest
    fp32 on PP-OCRv4 det and cls text images and second on rec (BENCHMARKS.md 'Quantization'); percentile was
    below it on all three."""
    if method not in CALIBRATION_METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    if activation_dtype not in ACTIVATION_DTYPES:
        raise ValueError(f"activation_dtype must be 'int8' or 'uint8', not {activation_dtype!r}")
    start = time.perf_counter()
    proto = prepare_model(model, optimize)
    samples = calibration_set(calibration, proto)  # files and stacked arrays are checked before any work
    plan = plan_quantization(proto, exclude_nodes=exclude_nodes, exclude_op_types=exclude_op_types)
    statistics = collect_statistics(proto, plan.tensors, samples, histograms=method != "minmax",
                                    progress=progress, total=samples.count, threads=threads)
    ranges = {tensor: _tensor_range(statistics[tensor], method, percentile) for tensor in plan.tensors}
    parameters = group_parameters(plan, ranges, activation_dtype)
    quantized = onnx.ModelProto()
    quantized.CopyFrom(proto)
    insertion = insert_qdq(quantized, plan, parameters)
    quantized = clamp_ir_version(quantized)
    onnx.checker.check_model(quantized)
    nodes = {node.name: node.op_type for node in proto.graph.node}
    counts = {"nodes_quantized": len(plan.compute_nodes), "tensors_quantized": len(plan.tensors),
              "scale_groups": len(parameters), "weights_quantized": len(insertion.weights),
              "biases_int32": sum(record.int32 for record in insertion.biases),
              "qdq_nodes_added": insertion.nodes_added, "bytes_before": proto.ByteSize(),
              "bytes_after": quantized.ByteSize()}
    samples_seen = next(iter(statistics.values())).samples if statistics else (samples.count or 0)
    report = QuantizationReport(
        method, activation_dtype, samples_seen, time.perf_counter() - start,
        _tensor_records(plan, statistics, ranges, parameters), insertion.weights, insertion.biases, plan.excluded,
        plan.notes, counts, dict(collections.Counter(nodes[name] for name in plan.compute_nodes)))
    return quantized, report
