"""Calibration methods on distributions whose right answer is known, and the exactness of histogram widening."""
import numpy as np
import pytest

from ortx.quantization.calibrate import (CALIBRATION_METHODS, entropy_range, minmax_range, mse_range,
                                         percentile_range)
from ortx.quantization.statistics import HISTOGRAM_BINS, TensorStatistics


def _statistics(data: np.ndarray, chunks: int = 4, histogram: bool = True) -> TensorStatistics:
    statistics = TensorStatistics("t")
    for chunk in np.array_split(data.astype(np.float32), chunks):
        statistics.update(chunk, histogram=histogram)
    return statistics


def test_uniform_every_method_keeps_the_range():
    data = np.random.default_rng(0).uniform(-1.0, 3.0, 200_000)
    statistics = _statistics(data)
    assert minmax_range(statistics) == (pytest.approx(data.min(), abs=1e-6), pytest.approx(data.max(), abs=1e-6))
    for name, method in CALIBRATION_METHODS.items():
        low, high = method(statistics)
        # nothing to clip in a uniform distribution: within 1% of the true range (histogram bin resolution)
        assert low == pytest.approx(-1.0, abs=0.01) and high == pytest.approx(3.0, abs=0.04), name


def test_gaussian_with_outliers_is_clipped_below_the_outliers():
    rng = np.random.default_rng(0)
    data = np.concatenate([rng.standard_normal(1_000_000), [50.0, -40.0, 45.0]])
    statistics = _statistics(data)
    assert minmax_range(statistics) == (-40.0, 50.0)
    low, high = percentile_range(statistics)  # 99.999 % of 1e6 values: the top 10 |x| are clipped
    assert 4.0 < high < 5.0 and low == -high
    low, high = entropy_range(statistics)
    assert 3.0 < high < 6.0 and low == -high
    low, high = mse_range(statistics)
    # three outliers clipped cost ~2400 in squared error; a finer grid for 1e6 values saves less below T ~ 17
    assert 8.0 < high < 25.0 and low == -high
    assert percentile_range(statistics, 100.0)[1] >= 50.0


def test_non_negative_tensor_uses_all_levels():
    rng = np.random.default_rng(1)
    relu = np.maximum(rng.standard_normal(500_000), 0.0)  # half the values are exactly 0
    statistics = _statistics(relu)
    for method in (entropy_range, mse_range):
        low, high = method(statistics)
        assert low == 0.0 and 2.5 < high <= relu.max() + 1e-6, method.__name__


def test_all_zero_tensor():
    statistics = _statistics(np.zeros(1000))
    assert statistics.constant
    for method in CALIBRATION_METHODS.values():
        assert method(statistics) == (0.0, 0.0)


@pytest.mark.parametrize("value", [1.0, -2.5, 7e-3])
def test_constant_tensor_keeps_its_value(value):
    statistics = _statistics(np.full(1000, value))
    assert statistics.constant
    for name, method in CALIBRATION_METHODS.items():
        assert method(statistics) == (pytest.approx(value), pytest.approx(value)), name


def test_range_beyond_the_threshold_never_inverts():
    # values in [5, 6] and a few near 0.1: a clipping method may pick T below 5; the range must stay ordered
    rng = np.random.default_rng(3)
    data = np.concatenate([rng.uniform(5.0, 6.0, 20), np.full(100_000, 0.1)])
    statistics = _statistics(data)
    for name, method in CALIBRATION_METHODS.items():
        low, high = method(statistics)
        assert low <= high and 0.1 - 1e-6 <= low, (name, low, high)


def test_histogram_widening_is_exact():
    rng = np.random.default_rng(2)
    chunks = [rng.uniform(-1, 1, 10_000), rng.uniform(-3, 3, 10_000), rng.uniform(-100, 100, 10_000)]
    statistics = TensorStatistics("t")
    for chunk in chunks:
        statistics.update(chunk.astype(np.float32), histogram=True)
    everything = np.abs(np.concatenate(chunks).astype(np.float32))
    assert statistics.counts.sum() == everything.size
    assert statistics.bin_width * HISTOGRAM_BINS >= everything.max()
    # widening by powers of two merges whole bins: the result equals binning everything at the final width
    direct = np.bincount(np.minimum((everything / np.float32(statistics.bin_width)).astype(np.int64),
                                    HISTOGRAM_BINS - 1), minlength=HISTOGRAM_BINS)
    difference = np.abs(direct - statistics.counts).sum()
    assert difference <= 2 * 10  # values on a bin edge may round to either neighbour in float32


def test_methods_need_a_histogram():
    statistics = _statistics(np.arange(10.0), histogram=False)
    with pytest.raises(ValueError, match="needs a histogram"):
        entropy_range(statistics)
    with pytest.raises(ValueError, match="percentile must be"):
        percentile_range(_statistics(np.arange(10.0)), 0.0)
