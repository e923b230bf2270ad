"""Calibration methods: from a tensor's statistics to the range [low, high] its int8 scale will cover.

MinMax keeps every value representable; the three histogram methods choose a threshold T on |x| that clips rare
large values to gain resolution for the common ones, and return [max(min, -T), min(max, T)]. One threshold serves
both signs (the histogram is of |x|, see statistics.py). The number of representable magnitudes below T is 256 for
a tensor with no negative values (uint8-like: all 255 steps lie in [0, T]) and 128 otherwise (TensorRT's int8
assumption), so a non-negative tensor is not clipped as if it had half the levels.
"""
from __future__ import annotations

import numpy as np

from ortx.quantization.statistics import TensorStatistics

DEFAULT_PERCENTILE = 99.999
ENTROPY_CANDIDATES = 512


def _require_histogram(statistics: TensorStatistics, method: str) -> None:
    if statistics.counts is None:
        raise ValueError(f"{method} calibration of '{statistics.name}' needs a histogram; collect statistics with "
                         "histograms=True")


def _clipped(statistics: TensorStatistics, threshold: float) -> tuple[float, float]:
    """[min, max] clipped to [-T, T]; a constant tensor keeps its value (the bin edge T can fall just below it), and
    a range lying wholly beyond T collapses onto T rather than inverting."""
    if statistics.constant:
        return statistics.minimum, statistics.maximum
    return (min(max(statistics.minimum, -threshold), threshold),
            max(min(statistics.maximum, threshold), -threshold))


def _magnitude_levels(statistics: TensorStatistics) -> int:
    return 256 if statistics.minimum >= 0 else 128


def minmax_range(statistics: TensorStatistics) -> tuple[float, float]:
    """MinMax: the smallest and largest value seen over all calibration samples; nothing is clipped."""
    return statistics.minimum, statistics.maximum


def percentile_range(statistics: TensorStatistics, percentile: float = DEFAULT_PERCENTILE) -> tuple[float, float]:
    """Percentile: T is the upper edge of the first histogram bin at which the cumulative share of |x| reaches
    `percentile` %, so at most (100 - percentile) % of the values are clipped."""
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], not {percentile}")
    _require_histogram(statistics, "percentile")
    if statistics.bin_width == 0.0:
        return minmax_range(statistics)
    cumulative = np.cumsum(statistics.counts) / statistics.counts.sum()
    index = int(np.searchsorted(cumulative, percentile / 100.0 - 1e-12))
    return _clipped(statistics, (min(index, len(cumulative) - 1) + 1) * statistics.bin_width)


def _smooth(distribution: np.ndarray, epsilon: float = 1e-4) -> np.ndarray:
    """Zero bins get `epsilon` and the whole is renormalised, so KL(P || Q) stays finite where Q kept nothing."""
    smoothed = np.where(distribution == 0, epsilon, distribution)
    return smoothed / smoothed.sum()


def entropy_range(statistics: TensorStatistics) -> tuple[float, float]:
    """Entropy (TensorRT's KL-divergence calibration, "8-bit Inference with TensorRT", Migacz 2017):
    1. For each candidate count i of histogram bins from L (the number of representable magnitudes) to the last
       non-empty bin (every bin, or a stride that keeps ENTROPY_CANDIDATES candidates):
    2. P = the first i bins, with the counts of every bin beyond added to bin i - 1 (clipped values saturate);
    3. Q = bin 0 as it is (zero is exactly representable, so a spike of zeros, e.g. after ReLU, loses nothing),
       bins 1 .. i - 1 merged into L - 1 equal groups, each group's count spread evenly over its non-zero bins
       (what quantizing to L levels keeps of P's shape);
    4. KL(P || Q) after normalising both (Q smoothed so a level that keeps nothing costs a finite penalty).
    T = i x bin width for the i of least divergence."""
    _require_histogram(statistics, "entropy")
    if statistics.bin_width == 0.0:
        return minmax_range(statistics)
    histogram = statistics.counts.astype(np.float64)
    levels = _magnitude_levels(statistics)
    last_used = int(np.flatnonzero(histogram)[-1]) + 1
    best_bins, best_divergence = len(histogram), np.inf
    # At most ENTROPY_CANDIDATES values of i (TensorRT tries every one): T moves in steps of <= 0.2% of the range.
    stride = max(1, (last_used - levels) // ENTROPY_CANDIDATES)
    for bins in range(levels, max(levels, last_used) + 1, stride):
        reference = histogram[:bins].copy()
        reference[-1] += histogram[bins:].sum()
        kept = histogram[1:bins]
        bounds = np.arange(levels) * (bins - 1) // (levels - 1)
        group_of_bin = np.repeat(np.arange(levels - 1), np.diff(bounds))
        group_sums = np.add.reduceat(kept, bounds[:-1])
        group_nonzero = np.add.reduceat((kept > 0).astype(np.float64), bounds[:-1])
        per_bin = np.divide(group_sums, group_nonzero, out=np.zeros(levels - 1), where=group_nonzero > 0)
        candidate = np.concatenate([histogram[:1], np.where(kept > 0, per_bin[group_of_bin], 0.0)])
        if candidate.sum() == 0:
            continue
        reference /= reference.sum()
        candidate = _smooth(candidate / candidate.sum())
        mask = reference > 0
        divergence = float(np.sum(reference[mask] * np.log(reference[mask] / candidate[mask])))
        if divergence < best_divergence:
            best_bins, best_divergence = bins, divergence
    return _clipped(statistics, best_bins * statistics.bin_width)


def mse_range(statistics: TensorStatistics) -> tuple[float, float]:
    """MSE: T minimises the expected squared quantization error of the histogram, each bin's count placed at its
    centre c: values with c <= T are rounded to the nearest of L levels on [0, T] (step T / (L - 1)), larger ones
    are clipped to T. Every bin's upper edge is a candidate T."""
    _require_histogram(statistics, "mse")
    if statistics.bin_width == 0.0:
        return minmax_range(statistics)
    counts = statistics.counts.astype(np.float64)
    used = np.flatnonzero(counts)
    centers = (used + 0.5) * statistics.bin_width
    weights = counts[used]
    steps = _magnitude_levels(statistics) - 1
    best_threshold, best_error = (used[-1] + 1) * statistics.bin_width, np.inf
    candidates = np.arange(1, used[-1] + 2) * statistics.bin_width
    for start in range(0, len(candidates), 256):  # 256 candidates at a time bounds memory at 256 x used bins
        thresholds = candidates[start:start + 256, None]
        step = thresholds / steps
        rounded = np.minimum(np.round(centers / step) * step, thresholds)
        errors = ((centers - rounded) ** 2 * weights).sum(axis=1)
        index = int(np.argmin(errors))
        if errors[index] < best_error:
            best_threshold, best_error = float(thresholds[index, 0]), float(errors[index])
    return _clipped(statistics, best_threshold)


CALIBRATION_METHODS = {"minmax": minmax_range, "percentile": percentile_range, "entropy": entropy_range,
                       "mse": mse_range}
