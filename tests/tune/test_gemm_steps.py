"""ortx.tune.gemm_steps: a JIT'd segment's gemm_f32 steps call a tuned generated GEMM when this machine's records
say it beat the prebuilt kernel ("cached"), never with tuning "off" or another machine's records, and the outputs
equal ORT within the fp32 tolerance (bit for bit with the prebuilt kernel, since a prepacked B keeps gemm_f32's
KC of 256 and the epilogue rounds the same way)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest

import ortx
from ortx.codegen import gemm, jit
from ortx.config import Options
from ortx.ep import compile_nodes
from ortx.ep.runtime import ClaimedStep
from ortx.tune import gemm_space, gemm_steps, step_threads
from ortx.tune.fingerprint import HardwareFingerprint, current
from ortx.tune.records import TuningDatabase, TuningRecord
from ortx.tune.runner import TimingSettings
from tests import _models
from tests.tolerances import assert_close

ISA = gemm.runnable_isas()[-1]


@pytest.fixture(autouse=True)
def tune_small_steps(monkeypatch):
    """The MLP's GEMMs (61K and 38K multiply-adds) are below MIN_MULTIPLY_ADDS; its tests lower the bar to 0."""
    real = gemm_steps.MIN_MULTIPLY_ADDS
    monkeypatch.setattr(gemm_steps, "MIN_MULTIPLY_ADDS", 0)
    return real


def mlp() -> onnx.ModelProto:
    """X[20, 64] -> Gemm 64->48 (+bias) -> Relu -> Gemm 48->40 (+bias) -> Y: two gemm_f32 steps with prepacked B."""
    builder = _models.GraphBuilder("mlp", 0)
    hidden = builder.node("Relu", [builder.gemm("X", 64, 48)])
    builder.gemm(hidden, 48, 40)
    builder.nodes[-1].output[0] = "Y"
    return builder.finish([_models._float_input("X", [20, 64])], [_models._float_input("Y", [20, 40])])


def compiled_program(model: onnx.ModelProto, threads: int = 2):
    return compile_nodes.compile_graph(compile_nodes.infer_shapes(model).graph, num_threads=threads)


def run_native(program, x: np.ndarray) -> np.ndarray:
    memory = step_threads.NativeRun(program, [step_threads.TensorShape(x.shape, x.dtype)],
                                    [step_threads.TensorShape((20, 40), np.dtype(np.float32))], 2, 1)
    memory.input_copies[0][0][...] = x
    return memory.run(program.native, 0)[0].copy()


def record_generated_win(database: TuningDatabase, machine: HardwareFingerprint, program) -> int:
    """Records, for every qualifying step, the prebuilt kernel at 1 ms and the default schedule at 0.5 ms."""
    database.add_fingerprint(machine)
    steps = gemm_steps.gemm_steps(program)
    for problem, workspace in steps.values():
        task = gemm_space.task_for(problem, 2, ISA, workspace)
        default = gemm_space.default_schedule(problem, ISA, 2)
        database.add(TuningRecord(task.signature, machine.key, task.template, default.as_dict(), "ok", 0.5))
        database.add(TuningRecord(task.signature, machine.key, gemm_space.PREBUILT_TEMPLATE,
                                  gemm_space.PREBUILT.as_dict(), "ok", 1.0))
    return len(steps)


def test_cached_records_put_generated_gemms_in_the_segment(tmp_path):
    model = mlp()
    x = np.random.default_rng(1).uniform(-1, 1, (20, 64)).astype(np.float32)
    options = Options(cache_dir=tmp_path)
    program = compiled_program(model)
    assert [step.kernel for step in program.steps].count("gemm_f32") == 2
    plain = jit.jit_compile(program, options)
    expected = run_native(plain, x)
    machine = current(options)
    with TuningDatabase(tmp_path / "tuning.sqlite") as database:
        assert record_generated_win(database, machine, program) == 2
        substitutes = gemm_steps.step_substitutes(program, num_threads=2, options=options, mode="cached",
                                                  database=database, fingerprint=machine)
        assert gemm_steps.step_substitutes(program, num_threads=2, options=options, mode="off", database=database,
                                           fingerprint=machine) == {}
    assert sorted(substitutes) == [i for i, step in enumerate(program.steps) if step.kernel == "gemm_f32"]
    tuned = jit.jit_compile(program, options, None, substitutes)
    generated = [name for name in tuned.native.kernel_names if name.startswith("ortx_gemm_")]
    assert len(generated) == 2 and "gemm_f32" not in tuned.native.kernel_names
    assert all(f"{name} in place of gemm_f32" in tuned.native.path.with_suffix(".c").read_text()
               for name in generated)
    actual = run_native(tuned, x)
    ort = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert_close(actual, ort.run(None, {"X": x})[0], what="tuned GEMM segment vs ORT")
    if ISA in ("avx2", "avx512"):
        np.testing.assert_array_equal(actual, expected, err_msg="prepacked B at KC 256: bitwise gemm_f32")


def test_records_of_another_machine_or_a_slower_kernel_are_not_applied(tmp_path):
    program = compiled_program(mlp())
    options = Options(cache_dir=tmp_path)
    machine = current(options)
    other = HardwareFingerprint("another cpu", ("avx2",), "avx2", 2, (), "cc 0")
    with TuningDatabase(tmp_path / "tuning.sqlite") as database:
        record_generated_win(database, other, program)
        arguments = dict(num_threads=2, options=options, mode="cached", database=database, fingerprint=machine)
        assert gemm_steps.step_substitutes(program, **arguments) == {}
        record_generated_win(database, machine, program)
        assert len(gemm_steps.step_substitutes(program, **arguments)) == 2
        for problem, workspace in gemm_steps.gemm_steps(program).values():  # the prebuilt got faster since
            signature = gemm_space.task_for(problem, 2, ISA, workspace).signature
            database.add(TuningRecord(signature, machine.key, gemm_space.PREBUILT_TEMPLATE,
                                      gemm_space.PREBUILT.as_dict(), "ok", 0.45))
        assert gemm_steps.step_substitutes(program, **arguments) == {}


def test_quick_tunes_each_step_once_and_resumes(tmp_path, monkeypatch):
    """step_substitutes in "quick" mode on a compiled program (no session: step_threads and the ORT comparison
    are other modules' tests): the baseline and QUICK_TRIALS schedules are recorded per step, a second call
    measures nothing, and whatever it substitutes computes the same result."""
    monkeypatch.setattr(gemm_steps, "QUICK_TRIALS", 2)
    program = compiled_program(mlp())
    options = Options(cache_dir=tmp_path)
    machine = current(options)
    fast = TimingSettings(warmup_runs=1, timed_runs=3, rotations=2)
    with TuningDatabase(tmp_path / "tuning.sqlite") as database:
        first = gemm_steps.step_substitutes(program, num_threads=2, options=options, mode="quick",
                                            database=database, fingerprint=machine, settings=fast)
        rows = len(database.records())
        sources = [record.source for record in database.records()]
        assert sources.count("gemm:prebuilt") == 2 and sources.count("gemm:evolutionary") == 2 * 2, sources
        assert sources.count("gemm:validation") == 2 * (1 + 2), "per step: the baseline and both schedules again"
        again = gemm_steps.step_substitutes(program, num_threads=2, options=options, mode="quick",
                                            database=database, fingerprint=machine, settings=fast)
        assert len(database.records()) == rows and again.keys() == first.keys()
        assert gemm_steps.step_substitutes(program, num_threads=2, options=options, mode="off", database=database,
                                           fingerprint=machine) == {}
    with pytest.raises(ValueError, match="tuning mode 'fast'"):
        gemm_steps.step_substitutes(program, num_threads=2, options=options, mode="fast", database=None,
                                    fingerprint=machine)


def test_sessions_with_tuning_cached_use_the_recorded_generated_gemms(tmp_path):
    """Through ortx.InferenceSession (ortx.pipeline's JIT step): "cached" applies the records, "off" does not."""
    def session(tuning):
        settings = onnxruntime.SessionOptions()
        settings.intra_op_num_threads = 2
        return ortx.InferenceSession(model.SerializeToString(), settings,
                                     providers=["OrtxEP", "CPUExecutionProvider"],
                                     provider_options=[{"tuning": tuning, "jit_cache_dir": str(tmp_path)}, {}])

    def claimed_programs(sess):
        (compiled,) = sess._compiled.values()
        return [step.program for step in compiled.plan.steps if isinstance(step, ClaimedStep)]

    model = mlp()
    x = np.random.default_rng(2).uniform(-1, 1, (20, 64)).astype(np.float32)
    plain = session("off")
    (program,) = claimed_programs(plain)
    with TuningDatabase(tmp_path / "tuning.sqlite") as database:
        record_generated_win(database, current(Options(cache_dir=tmp_path)), program)
    tuned = session("cached")
    (native,) = [program.native for program in claimed_programs(tuned)]
    assert sum(name.startswith("ortx_gemm_") for name in native.kernel_names) == 2
    (off,) = [program.native for program in claimed_programs(session("off"))]
    assert not any(name.startswith("ortx_gemm_") for name in off.kernel_names)
    actual, expected = tuned.run(None, {"X": x})[0], plain.run(None, {"X": x})[0]
    assert_close(actual, expected, what="tuned session vs tuning off")
    if ISA in ("avx2", "avx512"):
        np.testing.assert_array_equal(actual, expected)


def test_steps_below_the_size_bar_keep_the_prebuilt_kernel(tmp_path, tune_small_steps, monkeypatch):
    program = compiled_program(mlp())
    assert len(gemm_steps.gemm_steps(program)) == 2
    monkeypatch.setattr(gemm_steps, "MIN_MULTIPLY_ADDS", tune_small_steps)
    assert gemm_steps.gemm_steps(program) == {}
