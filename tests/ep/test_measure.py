"""ortx.measure.compare: the side-by-side measurement behind `ortx demo` and benchmarks/run.py."""
from ortx import measure
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
