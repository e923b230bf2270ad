"""ortx.host_contention: the multiply-add probe that tells whether the pool's threads have a core each, and the
round trip that tells how far apart they are."""
import numpy as np
import pytest

from ortx import _kernels, host_contention
from ortx.host_contention import HostContention


def _probe(tasks, iterations, threads):
    nanoseconds = np.zeros(tasks, np.int64)
    thread_of = np.full(tasks, -1, np.int64)
    _kernels.call("host_fma_probe", [tasks, iterations], [], [nanoseconds, thread_of], num_threads=threads)
    return nanoseconds, thread_of


def test_the_probe_times_every_task_and_names_the_thread_that_ran_it():
    nanoseconds, thread_of = _probe(2, 20_000, 2)
    assert (nanoseconds > 0).all()
    assert set(thread_of.tolist()) <= {0, 1} and (thread_of >= 0).all()
    nanoseconds, thread_of = _probe(1, 20_000, 1)
    assert nanoseconds[0] > 0 and thread_of[0] == 0


ISAS = ("portable", "avx2", "avx512")


@pytest.mark.parametrize("isa", ISAS[:ISAS.index(_kernels.cpu_isa()) + 1])
def test_the_probe_time_grows_with_its_iterations_on_every_isa(isa):
    previous = _kernels.selected_isa()
    assert _kernels.force_isa(isa) == isa
    try:
        short = min(_probe(1, 20_000, 1)[0][0] for _ in range(5))
        long = min(_probe(1, 80_000, 1)[0][0] for _ in range(5))
    finally:
        _kernels.force_isa(previous)
    # four times the steps: the loop is not optimised away and is not hidden behind a fixed cost
    assert 2.5 * short < long < 6 * short


def test_a_reading_is_shared_only_past_the_threshold_and_with_several_threads():
    assert not HostContention(2, 1.0, 1.1, 1.05).shared_core
    assert HostContention(2, 1.0, 1.9, 1.85).shared_core
    assert HostContention(2, 1.0, 1.9, 1.9).describe() == "x1.90, spread 1.00 (threads share a core)"
    assert HostContention(2, 1.0, 1.0, 1.0).describe() == "x1.00, spread 1.00"
    assert not HostContention(1, 1.0, 1.0, 1.0).shared_core and HostContention(1, 1.0, 1.0).describe() == "one thread"
    assert not HostContention(2, 1.0, float("nan"), float("nan")).shared_core  # no concurrent reading: no evidence


def test_one_thread_slower_than_the_other_is_uneven_not_shared():
    """One vCPU 1.3x slower by itself (another tenant on its core, as measured): the slowest thread is 1.3x the
    caller's time alone, under the shared-core threshold, and 1.3x the fastest thread: uneven."""
    reading = HostContention(2, 1.0, 1.3, 1.0)
    assert reading.uneven and not reading.shared_core and reading.spread == pytest.approx(1.3)
    assert reading.describe() == "x1.30, spread 1.30 (one thread slower)"
    assert not HostContention(2, 1.0, 1.1, 1.0).uneven
    assert not HostContention(2, 1.0, 1.9, 1.0).uneven  # shared core: reported as that
    assert not HostContention(2, 1.0, float("nan"), float("nan")).uneven


def test_fma_contention_measures_alone_and_together():
    reading = host_contention.fma_contention(2, iterations=20_000)
    assert reading.threads == 2 and reading.alone_ms > 0
    concurrent = reading.together_ms == reading.together_ms  # False when no round ran both tasks at once
    assert not concurrent or reading.together_ms >= reading.fastest_ms > 0
    single = host_contention.fma_contention(1, iterations=20_000)
    assert single.threads == 1 and single.ratio == 1.0
    with pytest.raises(ValueError, match="threads must be >= 1"):
        host_contention.fma_contention(0)


def _latency(round_trips, threads):
    out = np.full(3, -7, np.int64)
    _kernels.call("host_core_latency", [round_trips], [], [out], num_threads=threads)
    return out


def test_the_round_trip_probe_runs_its_two_tasks_on_two_threads_and_scales_with_the_exchanges():
    readings = [_latency(2000, 2) for _ in range(5)]  # a reading is abandoned when a worker starts > 50 ms late
    assert any(out[0] > 0 and sorted(out[1:].tolist()) == [0, 1] for out in readings), readings
    short = min(_latency(1000, 2)[0] for _ in range(5))
    long = min(_latency(8000, 2)[0] for _ in range(5))
    assert 0 < short and 3 * short < long  # eight times the exchanges: each one is timed, not a fixed cost
    assert _latency(100, 1).tolist() == [-1, -1, -1]  # one thread: nothing to exchange with, nothing run


def test_far_cores_only_past_the_threshold_and_with_several_threads():
    near, far = HostContention(2, 1.0, 1.0, 1.0, 120.0), HostContention(2, 1.0, 1.0, 1.0, 400.0)
    assert not near.far_cores and far.far_cores and not far.shared_core and not far.uneven
    assert far.describe() == "x1.00, spread 1.00, round trip 400 ns (cores far apart)"
    assert near.describe() == "x1.00, spread 1.00, round trip 120 ns"
    assert not HostContention(1, 1.0, 1.0, 1.0, 400.0).far_cores
    assert not HostContention(2, 1.0, 1.0, 1.0).far_cores  # not read: no evidence
    reading = host_contention.fma_contention(2, iterations=20_000)
    assert reading.round_trip_ns != reading.round_trip_ns or reading.round_trip_ns > 0


def test_fma_ports_is_one_or_two_and_read_once():
    """host_fma_ports (kernels/host_probe.c's ortx_fma_ports): 1 or 2 zmm multiply-adds a cycle on AVX-512 (the Zen 4
    host reads 1, the Intel hosts 2), 1 below AVX-512; measured once, so every call answers the same."""
    answers = set()
    for _ in range(3):
        out = np.zeros(1, np.int64)
        _kernels.call("host_fma_ports", [], [], [out])
        answers.add(int(out[0]))
    assert len(answers) == 1 and answers <= {1, 2}
    if _kernels.cpu_isa() != "avx512":
        assert answers == {1}
