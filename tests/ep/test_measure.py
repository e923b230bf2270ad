"""ortx.measure.compare: the side-by-side measurement behind `ortx demo` and benchmarks/run.py."""
import time

import numpy as np
import pytest

from ortx import measure
from ortx.host_contention import HostContention
from tests import _models


def test_compare_counts_the_requested_runs_and_reports_errors_and_claim():
    progress = []
    result = measure.compare("resnet-32", _models.resnet18_style(size=32), threads=1, runs=6, warmup=1,
                             progress=lambda done, total: progress.append((done, total)))
    assert progress[-1] == (6, 6) and [done for done, _ in progress] == sorted(done for done, _ in progress)
    assert len(progress) == -(-6 // measure.BLOCK)  # one report per block
    assert result.ort_ms > 0 and result.ortx_ms > 0 and result.ratio == result.ortx_ms / result.ort_ms
    assert result.cosine >= 0.9999 and result.max_relative_error <= 1e-3
    assert result.claimed_mac_share == 1.0 and result.segments == 1 and result.total_macs > 0
    assert result.rounds == len(progress) and result.shared_core_rounds == 0  # one thread: no core to share
    assert result.host_note() == "-"


def test_compare_probes_the_host_once_per_round_and_reports_rounds_on_one_core(monkeypatch):
    readings = iter([HostContention(2, 1.0, 1.9, 1.9, 100.0), HostContention(2, 1.0, 1.3, 1.0, 400.0),
                     HostContention(2, 1.0, 1.8, 1.7)])
    probed = []

    def fake_contention(threads):
        probed.append(threads)
        return next(readings)

    monkeypatch.setattr(measure, "fma_contention", fake_contention)
    result = measure.compare("resnet-32", _models.resnet18_style(size=32), threads=2, runs=3 * measure.BLOCK,
                             warmup=1, settle=0.0)
    assert probed == [2, 2, 2] and result.rounds == 3 and result.shared_core_rounds == 2
    assert result.uneven_rounds == 1 and result.far_rounds == 1
    assert result.host_note() == "2/3 rounds on one core, 1/3 uneven, 1/3 far apart"


def test_warm_in_runs_once_for_a_slow_run_and_until_the_time_has_passed_for_fast_ones():
    calls = []
    assert measure.warm_in(lambda: (calls.append(1), time.sleep(0.03)), seconds=0.02) == 1 and len(calls) == 1
    start = time.perf_counter()
    count = measure.warm_in(lambda: time.sleep(0.002), seconds=0.02)
    assert time.perf_counter() - start >= 0.02 and 2 <= count <= 11


def test_switch_over_idles_then_warms_in():
    calls = []
    start = time.perf_counter()
    assert measure.switch_over(lambda: (calls.append(time.perf_counter() - start), time.sleep(0.03)), 0.02) == 1
    assert len(calls) == 1 and calls[0] >= 0.02  # the run starts after the idle


def test_compare_times_other_engines_in_the_same_blocks_and_passes_precision(monkeypatch):
    monkeypatch.setattr(measure, "WARM_IN_S", 0.0)  # the warm-in is one run: the call count below is exact
    calls = []

    def other(feeds):
        calls.append(sorted(feeds))
        return [np.ones(1000, np.float32)]  # a constant output: its cosine against ORT's logits is not 1

    result = measure.compare("resnet-32", _models.resnet18_style(size=32), threads=1, runs=4, warmup=1,
                             precision="bf16", others={"constant": other})
    assert [engine.name for engine in result.others] == ["constant"]
    assert result.others[0].median_ms > 0 and result.others[0].cosine < 0.99
    # 1 cosine run + 1 warm-up + one block of 1 warm-in and 4 counted runs
    assert len(calls) == 7 and calls[0] == ["input"]
    # one round: the paired ratios are the medians' ratios
    other_engine = result.others[0]
    assert other_engine.paired == pytest.approx(result.ortx_ms / other_engine.median_ms, rel=1e-9)
    assert other_engine.paired_range == pytest.approx((other_engine.paired, other_engine.paired), rel=1e-9)
    assert result.paired_ratio == pytest.approx(result.ratio, rel=1e-9)
    assert 0.999 <= result.cosine < 1.0  # bf16 products: close to ORT's fp32, not equal
