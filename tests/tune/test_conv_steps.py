"""Tuned generated GEMMs in place of conv2d_f32 steps (ortx.tune.gemm_steps, conv mode of ortx.codegen.gemm): a
two-conv model's dense convs become GEMM tasks; records that beat the prebuilt conv put a generated kernel in the
segment (same outputs as ORT within the fp32 tolerance); `ortx tune` lists the conv tasks in its progress, and a
later session with tuning "cached" applies what it recorded without running the C compiler."""
from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime
import pytest

import ortx
from ortx import _kernels
from ortx.cli import main
from ortx.codegen import jit
from ortx.config import Options
from ortx.ep.runtime import ClaimedStep
from ortx.tune import gemm_space, gemm_steps, step_threads, tune_model
from ortx.tune.fingerprint import current
from ortx.tune.records import TuningDatabase
from tests import _models
from tests.tolerances import assert_close
from ortx.tune.records import TuningRecord
from tests.tune.test_gemm_steps import ISA, compiled_program

SHAPE = (1, 16, 24, 40)


@pytest.fixture(autouse=True)
def direct_convs(monkeypatch):
    """The 3x3 stride-1 conv below would run conv2d_winograd_f32, which these tuned GEMMs do not replace, or, on a
    CPU with fast multiply-adds, conv2d_nchwc_f32 on blocked tensors (blocked_layout.dense_direct_pays)."""
    from ortx.ep.lowering import blocked_layout

    monkeypatch.setattr(blocked_layout, "dense_direct_pays", lambda: False)
    previous = _kernels.allow_winograd(False)
    yield
    _kernels.allow_winograd(previous)


def two_convs() -> onnx.ModelProto:
    """X[1,16,24,40] -> Conv 3x3 16->32 (bias) -> Relu -> Conv 3x3/2 32->24 (bias) -> Y[1,24,12,20]: 4.4M and 1.7M
    multiply-adds, both over MIN_MULTIPLY_ADDS; the first packs B from planes, the second through im2col."""
    builder = _models.GraphBuilder("two_convs", 0)
    hidden = builder.node("Relu", [builder.conv("X", 16, 32, 3, bias=True)])
    builder.conv(hidden, 32, 24, 3, stride=2, bias=True)
    builder.nodes[-1].output[0] = "Y"
    return builder.finish([_models._float_input("X", list(SHAPE))], [_models._float_input("Y", [1, 24, 12, 20])])


def record_generated_win(database: TuningDatabase, machine, program) -> int:
    """Records, for every qualifying step, the prebuilt kernel at 1 ms and its task's default schedule (which fits
    the planned workspace) at 0.5 ms."""
    database.add_fingerprint(machine)
    steps = gemm_steps.gemm_steps(program)
    for problem, workspace in steps.values():
        task = gemm_space.task_for(problem, 2, ISA, workspace)
        database.add(TuningRecord(task.signature, machine.key, task.template, task.default.as_dict(), "ok", 0.5))
        database.add(TuningRecord(task.signature, machine.key, gemm_space.PREBUILT_TEMPLATE,
                                  gemm_space.PREBUILT.as_dict(), "ok", 1.0))
    return len(steps)


def _run_native(program, x: np.ndarray) -> np.ndarray:
    memory = step_threads.NativeRun(program, [step_threads.TensorShape(x.shape, x.dtype)],
                                    [step_threads.TensorShape((1, 24, 12, 20), np.dtype(np.float32))], 2, 1)
    memory.input_copies[0][0][...] = x
    return memory.run(program.native, 0)[0].copy()


def _session(model: onnx.ModelProto, cache, tuning: str):
    settings = onnxruntime.SessionOptions()
    settings.intra_op_num_threads = 2
    return ortx.InferenceSession(model.SerializeToString(), settings, providers=["OrtxEP", "CPUExecutionProvider"],
                                 provider_options=[{"tuning": tuning, "jit_cache_dir": str(cache)}, {}])


def _generated(session) -> int:
    natives = [step.program.native for compiled in session._compiled.values() for step in compiled.plan.steps
               if isinstance(step, ClaimedStep)]
    return sum(name.startswith("ortx_gemm_") for native in natives for name in native.kernel_names)


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": x})[0]


def test_conv_steps_are_collected_and_recorded_wins_replace_them(tmp_path):
    model = two_convs()
    x = np.random.default_rng(4).uniform(-1, 1, SHAPE).astype(np.float32)
    options = Options(cache_dir=tmp_path)
    program = compiled_program(model)
    conv_steps = [index for index, step in enumerate(program.steps) if step.kernel == "conv2d_f32"]
    found = gemm_steps.gemm_steps(program)
    assert sorted(found) == conv_steps and len(conv_steps) == 2
    assert all(problem.conv and problem.signature.startswith("conv2d_f32|") for problem, _ in found.values())
    machine = current(options)
    with TuningDatabase(tmp_path / "tuning.sqlite") as database:
        assert record_generated_win(database, machine, program) == 2
        substitutes = gemm_steps.step_substitutes(program, num_threads=2, options=options, mode="cached",
                                                  database=database, fingerprint=machine)
    assert sorted(substitutes) == conv_steps
    tuned = jit.jit_compile(program, options, None, substitutes)
    assert "conv2d_f32" not in tuned.native.kernel_names
    assert sum("in place of conv2d_f32" in line for line in tuned.native.path.with_suffix(".c").read_text()
               .splitlines()) == 2
    actual = _run_native(tuned, x)
    assert_close(actual, _ort(model, x), what="generated convs vs ORT")
    np.testing.assert_array_equal(_run_native(tuned, x), actual, err_msg="bitwise repeatable")


def test_a_workspace_smaller_than_the_schedule_needs_keeps_the_prebuilt_conv(tmp_path):
    """The segment's workspace was planned for conv2d_f32: a recorded schedule that needs more is not applied."""
    program = compiled_program(two_convs())
    options = Options(cache_dir=tmp_path)
    machine = current(options)
    (problem, workspace), *_ = gemm_steps.gemm_steps(program).values()
    default = gemm_space.task_for(problem, 2, ISA, workspace).default
    needed = gemm_space.gemm.workspace_floats(problem, gemm_space.to_gemm_schedule(default))
    assert needed <= workspace
    with TuningDatabase(tmp_path / "tuning.sqlite") as database:
        record_generated_win(database, machine, program)
        assert gemm_space.recorded_schedule(problem, 2, database, machine, ISA, workspace) is not None
        assert gemm_space.recorded_schedule(problem, 2, database, machine, ISA, needed - 1) is None


@pytest.fixture
def compiler_runs(monkeypatch) -> list[str]:
    calls: list[str] = []
    real = jit._compile

    def counting(rendered, *args):
        calls.append(rendered.symbol)
        return real(rendered, *args)

    monkeypatch.setattr(jit, "_compile", counting)
    return calls


def test_ortx_tune_searches_the_conv_tasks_and_a_cached_session_compiles_nothing(tmp_path, capsys, compiler_runs,
                                                                               monkeypatch):
    monkeypatch.setattr(tune_model, "GEMM_TRIALS_PER_ROUND", 2)  # a round's compiles within the tiny budget
    model = two_convs()
    path, cache = tmp_path / "two_convs.onnx", tmp_path / "cache"
    path.write_bytes(model.SerializeToString())
    assert main(["tune", str(path), "--cache-dir", str(cache), "--budget", "6s"]) == 0
    captured = capsys.readouterr()
    assert re.search(r"searching 4 tasks", captured.err)  # 2 per-step thread tasks and 2 conv GEMM tasks
    table = [line for line in captured.out.splitlines() if re.match(r"\s*\d+\s+conv2d_f32\|\d+x\d+x\d+->", line)]
    assert len(table) == 2 and all(" 0.0000" not in line.split()[4] for line in table), captured.out
    compiler_runs.clear()
    cached = _session(model, cache, "cached")
    assert compiler_runs == [], "the tuned segment and its generated convs come from the JIT cache"
    (compiled,) = _session(model, cache, "off")._compiled.values()
    (program,) = [step.program for step in compiled.plan.steps if isinstance(step, ClaimedStep)]
    machine = current(Options(cache_dir=cache))
    wins = 0
    with TuningDatabase(cache / "tuning.sqlite") as database:
        for problem, workspace in gemm_steps.gemm_steps(program).values():
            signature = gemm_space.task_for(problem, 2, ISA, workspace).signature
            sources = [record.source for record in database.records(signature, machine.key)]
            assert sources.count("gemm:prebuilt") == 1, sources  # the measured conv2d_f32 baseline
            assert sources.count("gemm:validation") >= 2, sources  # it and the default, again after the search
            wins += gemm_space.recorded_schedule(problem, 2, database, machine, ISA, workspace) is not None
    given_back = "given back to ORT" in str(cached.assignment)  # a noisy host can measure ORT faster
    assert _generated(cached) == (0 if given_back else wins)
    x = np.random.default_rng(5).uniform(-1, 1, SHAPE).astype(np.float32)
    assert_close(cached.run(None, {"X": x})[0], _ort(model, x), what="tuned two convs vs ORT")
