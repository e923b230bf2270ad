"""Activation statistics over a calibration set: per tensor, min, max and a histogram of |x|.

1. Copy the model and make every tensor to quantize a graph output (ORT keeps graph outputs intact through its
   own graph optimizations, so the values are the ones the float model computes).
2. Run ORT CPU once per calibration sample; after each run, fold every fetched tensor into its TensorStatistics.
3. Histograms have HISTOGRAM_BINS bins of |x| over [0, bins x width). The width is fixed by the first non-zero
   sample; when a later sample exceeds the covered range, the width is multiplied by the smallest power of two that
   covers it and adjacent bins are summed, which is exact (no re-binning by interpolation).
Limits: one histogram of magnitudes per tensor, so the calibration methods choose one threshold for both signs; the
covered range can reach twice the largest |x|, leaving at least HISTOGRAM_BINS / 2 bins over the data.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import onnx

from ortx.model_io import to_ort_bytes

# TensorRT's entropy calibrator uses 2048 bins; the percentile and MSE searches reuse the same histogram.
HISTOGRAM_BINS = 2048

Progress = Callable[[int, "int | None"], None]


class CalibrationRunError(ValueError):
    """A calibration run produced values that cannot be quantized (NaN or infinity in a tensor)."""


@dataclasses.dataclass
class TensorStatistics:
    name: str
    minimum: float = math.inf
    maximum: float = -math.inf
    counts: np.ndarray | None = None   # int64 [HISTOGRAM_BINS], counts of |x| per bin
    bin_width: float = 0.0             # 0 while every |x| seen is 0
    samples: int = 0

    @property
    def bin_edges(self) -> np.ndarray:
        return np.arange(HISTOGRAM_BINS + 1, dtype=np.float64) * self.bin_width

    @property
    def constant(self) -> bool:
        return self.samples > 0 and self.minimum == self.maximum

    def update(self, values: np.ndarray, *, histogram: bool) -> None:
        values = np.asarray(values).ravel()
        self.samples += 1
        if values.size == 0:
            return
        self.minimum = min(self.minimum, float(values.min()))
        self.maximum = max(self.maximum, float(values.max()))
        if histogram:
            self._add_to_histogram(np.abs(values.astype(np.float32, copy=False)))

    def _add_to_histogram(self, magnitudes: np.ndarray) -> None:
        if self.counts is None:
            self.counts = np.zeros(HISTOGRAM_BINS, np.int64)
        top = float(magnitudes.max())
        if top > 0 and self.bin_width == 0.0:
            self.bin_width = top / HISTOGRAM_BINS  # earlier all-zero samples stay in bin 0
        elif top > self.bin_width * HISTOGRAM_BINS > 0:
            self._widen(top)
        if self.bin_width == 0.0:
            self.counts[0] += magnitudes.size
            return
        index = np.minimum((magnitudes / np.float32(self.bin_width)).astype(np.int64), HISTOGRAM_BINS - 1)
        self.counts += np.bincount(index, minlength=HISTOGRAM_BINS)

    def _widen(self, top: float) -> None:
        # top > bins x width, so factor >= 2; bins and factor are powers of two, so groups of `factor` bins tile.
        factor = 2 ** math.ceil(math.log2(top / (self.bin_width * HISTOGRAM_BINS)))
        merged = np.zeros(HISTOGRAM_BINS, np.int64)
        if factor >= HISTOGRAM_BINS:
            merged[0] = self.counts.sum()
        else:
            merged[:HISTOGRAM_BINS // factor] = self.counts.reshape(HISTOGRAM_BINS // factor, factor).sum(axis=1)
        self.counts = merged
        self.bin_width *= factor


def statistics_model(model: onnx.ModelProto, tensor_names: Sequence[str]) -> onnx.ModelProto:
    """A copy of `model` whose graph outputs also include `tensor_names` (declared float32, shape left to ORT)."""
    augmented = onnx.ModelProto()
    augmented.CopyFrom(model)
    present = {output.name for output in augmented.graph.output}
    for name in tensor_names:
        if name not in present:
            augmented.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
            present.add(name)
    return augmented


def collect_statistics(model: onnx.ModelProto, tensor_names: Sequence[str], samples: Iterable[Mapping],
                       *, histograms: bool, progress: Progress | None = None, total: int | None = None,
                       threads: int = 0) -> dict[str, TensorStatistics]:
    """Runs ORT CPU on every sample and returns the statistics of each tensor in `tensor_names`; `progress`
    is called with (samples done, total or None) after each run."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(to_ort_bytes(statistics_model(model, tensor_names)), options,
                                           providers=["CPUExecutionProvider"])
    names = list(dict.fromkeys(tensor_names))
    statistics = {name: TensorStatistics(name) for name in names}
    for index, feed in enumerate(samples):
        for name, values in zip(names, session.run(names, dict(feed))):
            if not np.all(np.isfinite(values)):
                raise CalibrationRunError(f"calibration sample {index}: tensor '{name}' has NaN or infinite values "
                                          "in the float model, so it has no range to quantize")
            statistics[name].update(values, histogram=histograms)
        if progress is not None:
            progress(index + 1, total)
    return statistics
