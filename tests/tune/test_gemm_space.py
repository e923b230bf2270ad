"""ortx.tune.gemm_space: the GEMM schedule space (valid samples render for every ISA), the default schedule, and
tune_gemm through the runner and search: the prebuilt baseline and the default measured first, every candidate
checked against the reference before timing, failures stored as rows, records keyed by the template hash,
resumption without measuring again, and recorded_schedule answering only from this machine's records and only
with a schedule that beat the prebuilt kernel."""
from __future__ import annotations

import numpy as np
import pytest

from ortx.codegen import gemm
from ortx.codegen.jit import JitError
from ortx.config import Options
from ortx.tune import gemm_space
from ortx.tune.fingerprint import HardwareFingerprint, current
from ortx.tune.records import TuningDatabase, TuningRecord
from ortx.tune.runner import TimingSettings
from ortx.tune.space import Schedule

FAST = TimingSettings(warmup_runs=1, timed_runs=3, rotations=2, timeout_seconds=10.0)
ISA = gemm.runnable_isas()[-1]


@pytest.fixture
def database(tmp_path):
    with TuningDatabase(tmp_path / "tuning.sqlite") as opened:
        yield opened


@pytest.mark.parametrize("isa", sorted(gemm_space.CHOICES))
def test_sampled_schedules_render_and_fit_the_registers(isa):
    problem = gemm.GemmProblem.dense(100, 90, 80)
    space = gemm_space.gemm_space(problem, isa)
    rng = np.random.default_rng(0)
    for _ in range(200):
        schedule = gemm_space.to_gemm_schedule(space.sample(rng))
        assert schedule.problems(problem) == []
        assert schedule.registers <= gemm.VECTOR_REGISTERS[isa]
        assert schedule.tasks_m <= -(-problem.m // schedule.mr) and schedule.tasks_n <= -(-problem.n // schedule.nr)
    gemm.render_gemm(problem, schedule)


@pytest.mark.parametrize("shape", [(1, 1000, 512), (1024, 1024, 1024), (3136, 64, 576), (5, 3, 7)])
@pytest.mark.parametrize("isa", sorted(gemm_space.CHOICES))
def test_default_schedule_is_in_the_space(shape, isa):
    problem = gemm.GemmProblem.dense(*shape)
    default = gemm_space.default_schedule(problem, isa, num_threads=2)
    assert gemm_space.gemm_space(problem, isa).contains(default)
    assert default["pack_b"] == (problem.m > default["mr"]), "B is read in place only when one row panel uses it"


def test_transposed_b_is_always_packed():
    problem = gemm.GemmProblem.dense(1, 64, 64, transpose_b=True)
    space = gemm_space.gemm_space(problem, "avx2")
    assert gemm_space.default_schedule(problem, "avx2", 1)["pack_b"]
    rng = np.random.default_rng(1)
    assert all(space.sample(rng)["pack_b"] for _ in range(50))


def test_tune_gemm_measures_the_default_first_records_everything_and_resumes(tmp_path, database):
    options = Options(cache_dir=tmp_path / "jit")
    machine = current(options)
    problem = gemm.GemmProblem.dense(37, 45, 70, bias=2, activation=1)
    first = gemm_space.tune_gemm(problem, num_threads=2, database=database, fingerprint=machine, options=options,
                                 trials=3, strategy="random", settings=FAST)
    task = first.task
    records = database.records(task.signature, machine.key, gemm.template_hash())
    searched = [r for r in records if r.source == "gemm:random"]
    assert len(searched) == 3 and first.result.measured == 3 and first.result.failures == 0
    assert Schedule.of(searched[0].schedule) == gemm_space.default_schedule(problem, ISA, 2)
    validated = [r for r in records if r.source == "gemm:validation"]
    assert {Schedule.of(r.schedule) for r in validated} == {Schedule.of(r.schedule) for r in searched}, \
        "the default and the 3 fastest (all 3 here) are measured again"
    assert first.default is not None and first.best.median_ms <= first.default.median_ms
    assert first.best.median_ms == min(r.median_ms for r in records)
    baselines = database.records(task.signature, machine.key, gemm_space.PREBUILT_TEMPLATE)
    assert [r.source for r in baselines] == ["gemm:prebuilt", "gemm:validation"]
    assert all(r.status == "ok" and Schedule.of(r.schedule) == gemm_space.PREBUILT for r in baselines)
    chosen = gemm_space.recorded_schedule(problem, 2, database, machine)
    # the validation re-timings decide (step 5), not the search's own times
    validated_ms = {}
    for record in validated:
        schedule = Schedule.of(record.schedule)
        validated_ms[schedule] = min(record.median_ms, validated_ms.get(schedule, float("inf")))
    fastest, fastest_ms = min(validated_ms.items(), key=lambda item: item[1])
    prebuilt_ms = min(r.median_ms for r in baselines if r.source == "gemm:validation")
    if fastest_ms < prebuilt_ms * (1 - gemm_space.MARGIN):
        assert chosen == gemm_space.to_gemm_schedule(fastest)
    else:
        assert chosen is None, "a schedule no faster than the prebuilt kernel must not replace it"
    again = gemm_space.tune_gemm(problem, num_threads=2, database=database, fingerprint=machine, options=options,
                                 trials=3, strategy="random", settings=FAST)
    assert again.result.measured == 0 and again.result.recorded == 3
    assert len(database.records()) == len(records) + len(baselines), "resuming measured (or validated) again"
    assert (again.best.schedule, again.best.median_ms) == (first.best.schedule, first.best.median_ms)
    other = HardwareFingerprint("another cpu", (), "avx2", 64, (), "cc 0")
    assert gemm_space.recorded_schedule(problem, 2, database, other) is None
    assert gemm_space.recorded_schedule(problem, 4, database, machine) is None


def test_compile_errors_and_wrong_results_are_rows_not_exceptions(tmp_path, database, monkeypatch):
    """Exhaustive order after the default (unroll 4): unroll 1, 2, 4 of the first blocking; unroll 1 fails to
    build, unroll 2 computes a wrong answer, and both become rows while the search goes on."""
    options = Options(cache_dir=tmp_path / "jit")
    machine = current(options)
    problem = gemm.GemmProblem.dense(9, 20, 11)
    real_build = gemm.build_gemm

    def sometimes_broken(problem, schedule, options):
        if schedule.unroll == 1:
            raise JitError("cc: error: pretend")
        if schedule.unroll == 2:
            return lambda a, b, c, *rest, **kwargs: c.fill(1.0)
        return real_build(problem, schedule, options)

    monkeypatch.setattr(gemm, "build_gemm", sometimes_broken)
    tuning = gemm_space.tune_gemm(problem, num_threads=1, database=database, fingerprint=machine, options=options,
                                  trials=4, strategy="exhaustive", settings=FAST)
    statuses = {record.schedule["unroll"]: record.status
                for record in database.records(tuning.task.signature, machine.key, gemm.template_hash())}
    assert statuses == {1: "compile_error", 2: "wrong_result", 4: "ok"}, statuses
    assert tuning.result.measured == 4 and tuning.result.failures == 2
    assert tuning.best is not None and tuning.best.schedule["unroll"] == 4


def _record(database, machine, signature, template, schedule, median_ms):
    database.add(TuningRecord(signature, machine.key, template, schedule.as_dict(), "ok", median_ms))


def test_recorded_schedule_needs_a_margin_over_the_prebuilt_kernel_and_fits_the_workspace(tmp_path, database):
    machine = current(Options(cache_dir=tmp_path))
    database.add_fingerprint(machine)
    problem = gemm.GemmProblem.dense(64, 512, 256)
    task = gemm_space.task_for(problem, 2, ISA)
    packed, in_place = (gemm_space.default_schedule(problem, ISA, 2).replace(pack_b=pack_b) for pack_b in (True, False))
    _record(database, machine, task.signature, task.template, packed, 0.90)
    _record(database, machine, task.signature, task.template, in_place, 0.95)
    assert gemm_space.recorded_schedule(problem, 2, database, machine) is None, "no baseline recorded"
    _record(database, machine, task.signature, gemm_space.PREBUILT_TEMPLATE, gemm_space.PREBUILT, 1.0)
    _record(database, machine, task.signature, gemm_space.PREBUILT_TEMPLATE, gemm_space.PREBUILT, 0.91)
    assert gemm_space.recorded_schedule(problem, 2, database, machine) is None, "within the margin of the fastest"
    with TuningDatabase(tmp_path / "other.sqlite") as other:
        other.add_fingerprint(machine)
        _record(other, machine, task.signature, task.template, packed, 0.90)
        _record(other, machine, task.signature, task.template, in_place, 0.95)
        _record(other, machine, task.signature, gemm_space.PREBUILT_TEMPLATE, gemm_space.PREBUILT, 1.0)
        assert gemm_space.recorded_schedule(problem, 2, other, machine) == gemm_space.to_gemm_schedule(packed)
        # a step whose workspace cannot hold packed B gets the in-place schedule, which needs none
        assert gemm_space.recorded_schedule(problem, 2, other, machine, max_workspace_floats=1024) == \
            gemm_space.to_gemm_schedule(in_place)


def test_validation_records_alone_decide_when_present(tmp_path, database):
    """A schedule whose fastest search record beat the prebuilt kernel but which lost in the validation call (same
    call, same load) is not used; one that won the validation is."""
    machine = current(Options(cache_dir=tmp_path))
    database.add_fingerprint(machine)
    problem = gemm.GemmProblem.dense(64, 512, 256)
    task = gemm_space.task_for(problem, 2, ISA)
    lucky, steady = (gemm_space.default_schedule(problem, ISA, 2).replace(pack_b=pack_b) for pack_b in (True, False))
    for schedule, searched, validated in ((lucky, 0.30, 1.20), (steady, 0.80, 0.85)):
        _record(database, machine, task.signature, task.template, schedule, searched)
        database.add(TuningRecord(task.signature, machine.key, task.template, schedule.as_dict(), "ok", validated,
                                  source="gemm:validation"))
    _record(database, machine, task.signature, gemm_space.PREBUILT_TEMPLATE, gemm_space.PREBUILT, 0.70)
    assert gemm_space.recorded_schedule(problem, 2, database, machine) == gemm_space.to_gemm_schedule(lucky), \
        "without a validation record of the prebuilt kernel, the fastest records decide"
    database.add(TuningRecord(task.signature, machine.key, gemm_space.PREBUILT_TEMPLATE, gemm_space.PREBUILT.as_dict(),
                              "ok", 1.00, source="gemm:validation"))
    assert gemm_space.recorded_schedule(problem, 2, database, machine) == gemm_space.to_gemm_schedule(steady)
    database.add(TuningRecord(task.signature, machine.key, gemm_space.PREBUILT_TEMPLATE, gemm_space.PREBUILT.as_dict(),
                              "ok", 0.86, source="gemm:validation"))
    assert gemm_space.recorded_schedule(problem, 2, database, machine) is None, "0.85 is within the margin of 0.86"


def test_prepacked_b_space_and_default():
    problem = gemm.GemmProblem.dense(128, 768, 256, b_packed=True, bias=2)
    for isa in sorted(gemm_space.CHOICES):
        space = gemm_space.gemm_space(problem, isa)
        assert space.choices["kc"] == (gemm.PREPACKED_KC,) and space.choices["pack_b"] == (False,)
        default = gemm_space.default_schedule(problem, isa, 2)
        assert space.contains(default) and gemm_space.to_gemm_schedule(default).problems(problem) == []
