"""ortx.tune.gemm_tasks through tune_model (`ortx tune`'s search): a model's qualifying gemm_f32 steps become GEMM
schedule tasks beside the thread tasks, their baseline, candidates and validation are recorded, and a later session
with tuning "cached" puts a generated kernel exactly where those records beat the prebuilt one, with the same bits
(the MLP's B is prepacked, so every schedule keeps KC 256) and ORT's result within the fp32 tolerance."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

import ortx
from ortx.config import Options
from ortx.ep.runtime import ClaimedStep
from ortx.model_io import load
from ortx.tune import gemm_space, gemm_steps, gemm_tasks, tune_model
from ortx.tune.fingerprint import current
from ortx.tune.records import TuningDatabase
from ortx.tune.runner import TimingSettings
from tests.tolerances import assert_close
from tests.tune.test_gemm_steps import ISA, mlp


@pytest.fixture(autouse=True)
def small_and_short(monkeypatch):
    """The MLP's GEMMs are below MIN_MULTIPLY_ADDS, and 2 schedules a round keep the search to seconds."""
    monkeypatch.setattr(gemm_steps, "MIN_MULTIPLY_ADDS", 0)
    monkeypatch.setattr(tune_model, "GEMM_TRIALS_PER_ROUND", 2)


def _session(model, tmp_path, tuning: str):
    settings = onnxruntime.SessionOptions()
    settings.intra_op_num_threads = 2
    return ortx.InferenceSession(model.SerializeToString(), settings, providers=["OrtxEP", "CPUExecutionProvider"],
                                 provider_options=[{"tuning": tuning, "jit_cache_dir": str(tmp_path)}, {}])


def _generated(session) -> int:
    natives = [step.program.native for compiled in session._compiled.values() for step in compiled.plan.steps
               if isinstance(step, ClaimedStep)]
    return sum(name.startswith("ortx_gemm_") for native in natives for name in native.kernel_names)


def test_tune_model_searches_gemm_schedules_and_cached_sessions_use_the_wins(tmp_path):
    model = mlp()
    options = Options(cache_dir=tmp_path)
    database_path = str(tmp_path / "tuning.sqlite")
    tuning = tune_model.tune_model(load(model), {"X": (20, 64)}, num_threads=2, mode="quick",
                                   database_path=database_path, jit=options, trials=12)
    scheduled = [task for task in tuning.schedule.tasks if "|isa=" in task.result.task.signature]
    assert len(scheduled) == 2, [task.result.task.signature for task in tuning.schedule.tasks]
    assert all(task.result.task.weight == 1 and task.result.task.prior_ms > 0 for task in scheduled)
    assert all(task.result.measured >= 1 and task.default_ms is not None for task in scheduled), \
        "the first round measures each GEMM task's default"
    machine = current(options)
    wins = 0
    with TuningDatabase(database_path) as database:
        for task in scheduled:
            signature = task.result.task.signature
            assert signature in tuning.signatures
            sources = [row.source for row in database.records(signature, machine.key)]
            assert sources.count("gemm:prebuilt") == 1 and "scheduler:quick" in sources
            assert sources.count("gemm:validation") >= 2, "prebuilt and default measured again after the search"
        for problem, workspace in gemm_steps.gemm_steps(tuning_program(model, tmp_path)).values():
            wins += gemm_space.recorded_schedule(problem, 2, database, machine, ISA, workspace) is not None
    substitutes = gemm_steps.segment_substitutes({0: tuning_program(model, tmp_path)}, num_threads=2,
                                                 options=options, mode="cached", database_path=database_path)
    assert sum(len(found) for found in substitutes.values()) == wins
    x = np.random.default_rng(3).uniform(-1, 1, (20, 64)).astype(np.float32)
    cached, off = _session(model, tmp_path, "cached"), _session(model, tmp_path, "off")
    # a noisy host can measure ORT faster: then the segment is ORT's; and ORT running this small model whole may
    # be faster than the tuned plan (step 5, ortx.tune.model_choice): then every segment is
    (choice,) = tuning.engine_choices
    kept = choice.engine == "ortx" and tuning.model_choice.engine == "ortx"
    assert _generated(cached) == (wins if kept else 0) and _generated(off) == 0
    actual = cached.run(None, {"X": x})[0]
    ort = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert_close(actual, ort.run(None, {"X": x})[0], what="tuned MLP vs ORT")
    if ISA in ("avx2", "avx512"):
        np.testing.assert_array_equal(actual, off.run(None, {"X": x})[0])


def tuning_program(model, tmp_path):
    """The untuned session's one claimed program (the steps gemm_tasks collected from)."""
    (compiled,) = _session(model, tmp_path, "off")._compiled.values()
    (program,) = [step.program for step in compiled.plan.steps if isinstance(step, ClaimedStep)]
    return program


def test_gemm_tasks_merge_equal_problems_and_weigh_them(tmp_path):
    program = tuning_program(mlp(), tmp_path)
    tasks = gemm_tasks.GemmTasks(2, Options(cache_dir=tmp_path), TimingSettings())
    step_ms = [float(index + 1) for index in range(len(program.steps))]
    tasks.add(0, program, step_ms)
    tasks.add(3, program, step_ms)  # the same segment twice: each problem is one task with two calls
    gemm_indices = sorted(gemm_steps.gemm_steps(program))
    assert len(tasks.tasks) == 2 and all(task.weight == 2 for task in tasks.tasks)
    assert sorted(task.prior_ms for task in tasks.tasks) == [step_ms[index] for index in gemm_indices]
    assert all(positions == [0, 3] for positions in tasks.segments.values())
    assert all(task.space.contains(task.default) for task in tasks.tasks)
