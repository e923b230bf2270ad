"""Sensitivity analysis: each layer alone at each precision, the rest fp32; the output error against fp32.

1. `Evaluator` runs the fp32 model once over the samples (ORT CPU, default graph optimizations: the error is what a
   user of the written model gets, including ORT's own rewrites such as DequantizeLinear(int4) + MatMul ->
   MatMulNBits) and keeps its outputs as the reference.
2. For each layer and precision other than fp32: build the model with that layer alone changed, run it over the
   same samples, and record the error (`metric`), the layer's bytes (measured: the layer's fp32 parameter bytes plus
   the serialized model's growth) and, when asked, the median latency against fp32 in interleaved blocks.
   A candidate that fails to build or run is a record with an infinite error and the reason, not an exception.
Metrics (of the outputs over all samples; the maximum over the model's outputs):
  relative_l2  sqrt(sum ||y - y_fp32||^2 / sum ||y_fp32||^2)   (default)
  cosine       1 - cosine(y, y_fp32) of the flattened outputs
  a callable   metric(reference, candidate) -> float; both are lists (one per sample) of lists of output arrays.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import statistics as stats
import time
from typing import Callable, Mapping, Sequence

import numpy as np
import onnx

from ortx.model_io import to_ort_bytes
from ortx.quantization.precisions import Layer

logger = logging.getLogger(__name__)

Outputs = list[list[np.ndarray]]
Metric = Callable[[Outputs, Outputs], float]
SensitivityProgress = Callable[[int, int, str], None]   # (done, total, what was just measured)


def relative_l2(reference: Outputs, candidate: Outputs) -> float:
    worst = 0.0
    for index in range(len(reference[0])):
        error = sum(float(np.sum((c[index].astype(np.float64) - r[index].astype(np.float64)) ** 2))
                    for r, c in zip(reference, candidate))
        norm = sum(float(np.sum(r[index].astype(np.float64) ** 2)) for r in reference)
        worst = max(worst, math.sqrt(error / norm) if norm > 0 else (0.0 if error == 0 else math.inf))
    return worst


def one_minus_cosine(reference: Outputs, candidate: Outputs) -> float:
    worst = 0.0
    for index in range(len(reference[0])):
        first = np.concatenate([r[index].astype(np.float64).ravel() for r in reference])
        second = np.concatenate([c[index].astype(np.float64).ravel() for c in candidate])
        denominator = float(np.linalg.norm(first) * np.linalg.norm(second))
        cosine = float(first @ second) / denominator if denominator > 0 else float(np.array_equal(first, second))
        worst = max(worst, 1.0 - cosine)
    return worst


METRICS: dict[str, Metric] = {"relative_l2": relative_l2, "cosine": one_minus_cosine}


def resolve_metric(metric: str | Metric) -> tuple[str, Metric]:
    if callable(metric):
        return getattr(metric, "__name__", "user metric"), metric
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)} or a callable, not {metric!r}")
    return metric, METRICS[metric]


class Evaluator:
    """Runs models in ORT CPU over fixed samples and scores their outputs against the fp32 model's."""

    def __init__(self, reference_model: onnx.ModelProto, samples: Sequence[Mapping[str, np.ndarray]],
                 metric: str | Metric = "relative_l2", *, threads: int = 2):
        self.samples = list(samples)
        self.threads = threads
        self.metric_name, self.metric = resolve_metric(metric)
        self.reference_session = self.session(reference_model)
        self.reference = self.outputs(self.reference_session)

    def session(self, model: onnx.ModelProto):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.log_severity_level = 3
        return onnxruntime.InferenceSession(to_ort_bytes(model), options, providers=["CPUExecutionProvider"])

    def outputs(self, session) -> Outputs:
        return [session.run(None, dict(feed)) for feed in self.samples]

    def error(self, session) -> float:
        value = float(self.metric(self.reference, self.outputs(session)))
        if not value >= 0:   # NaN or negative
            raise ValueError(f"metric {self.metric_name} returned {value}; it must be a number >= 0")
        return value

    def latency_ms(self, session, *, blocks: int = 5, runs: int = 3) -> tuple[float, float]:
        """(median ms of `session`, median ms of the fp32 model), timed in alternating blocks on sample 0."""
        feed = dict(self.samples[0])
        times: dict[int, list[float]] = {0: [], 1: []}
        for current in (session, self.reference_session):
            current.run(None, feed)   # warm-up
        for _ in range(blocks):
            for which, current in ((0, session), (1, self.reference_session)):
                for _ in range(runs):
                    start = time.perf_counter()
                    current.run(None, feed)
                    times[which].append((time.perf_counter() - start) * 1e3)
        return stats.median(times[0]), stats.median(times[1])


@dataclasses.dataclass
class SensitivityRecord:
    node: str
    op_type: str
    precision: str
    error: float                       # the metric with this layer alone at this precision; inf when it failed
    bytes: int                         # the layer's parameters stored at this precision
    latency_ms: float | None = None    # median, this model (None when latency was not measured)
    fp32_latency_ms: float | None = None   # median of the fp32 model, same interleaved blocks
    note: str = ""


def fp32_parameter_bytes(model: onnx.ModelProto, layer: Layer) -> int:
    sizes = {tensor.name: len(tensor.SerializeToString()) for tensor in model.graph.initializer
             if tensor.name in (layer.weight, layer.bias)}
    return sum(sizes.values())


def analyse_sensitivity(model: onnx.ModelProto, layers: list[Layer], precisions: Sequence[str],
                        build: Callable[[dict[str, str]], onnx.ModelProto], evaluator: Evaluator, *,
                        latency: bool = False, progress: SensitivityProgress | None = None
                        ) -> list[SensitivityRecord]:
    """Step 2 of the module docstring; fp32 records (error 0, the fp32 model's own latency) are not run."""
    base_size = model.ByteSize()
    records = []
    total = len(layers) * len(precisions)
    done = 0
    for layer in layers:
        fp32_bytes = fp32_parameter_bytes(model, layer)
        for precision in precisions:
            record = SensitivityRecord(layer.node, layer.op_type, precision, 0.0, fp32_bytes)
            if precision != "fp32":
                try:
                    candidate = build({layer.node: precision})
                    record.bytes = fp32_bytes + candidate.ByteSize() - base_size
                    session = evaluator.session(candidate)
                    record.error = evaluator.error(session)
                    if latency:
                        record.latency_ms, record.fp32_latency_ms = evaluator.latency_ms(session)
                except Exception as error:  # a failed candidate is data: ORT and the rewrites raise many types
                    record.error, record.note = math.inf, f"{type(error).__name__}: {error}"
                    logger.info("layer %s at %s failed: %s", layer.node, precision, record.note)
            records.append(record)
            done += 1
            if progress is not None:
                progress(done, total, f"{layer.node} {precision}")
    return records
