"""ortx.tune.step_threads through the session: per-step thread counts are searched and recorded ("quick"),
resumed without measuring, applied from records ("cached") without measuring, and never change a bit of output."""
import numpy as np
import onnxruntime
import pytest

import ortx
import ortx.pipeline
from ortx.codegen import jit, render
from ortx.config import Options
from ortx.ep import compile_nodes
from ortx.ep.runtime import ClaimedStep
from ortx.tune import step_threads
from ortx.tune.fingerprint import current
from ortx.tune.records import TuningDatabase, TuningRecord
from tests import _models


def session(model, cache_dir, tuning, threads=2):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return ortx.InferenceSession(model.SerializeToString(), options, providers=["OrtxEP", "CPUExecutionProvider"],
                                 provider_options=[{"tuning": tuning, "jit_cache_dir": str(cache_dir)}, {}])


def claimed(sess):
    (compiled,) = sess._compiled.values()
    return [step.program for step in compiled.plan.steps if isinstance(step, ClaimedStep)]


def feeds(model, seed=0):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {model.graph.input[0].name: np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)}


@pytest.fixture
def runner_calls(monkeypatch):
    """Counts SegmentStepRunner calls (each measures candidates) across the test."""
    calls = []
    original = step_threads.SegmentStepRunner.__call__

    def counted(self, pairs):
        calls.append(len(pairs))
        return original(self, pairs)

    monkeypatch.setattr(step_threads.SegmentStepRunner, "__call__", counted)
    return calls


def test_render_default_is_unchanged_and_a_schedule_becomes_literals():
    compiled = compile_nodes.compile_graph(compile_nodes.infer_shapes(_models.tiny_conv_relu()).graph)
    default = render.render(compiled)
    assert render.render(compiled, (None, None)).source == default.source and default.step_threads is None
    scheduled = render.render(compiled, (1, 4))
    assert scheduled.step_threads == (1, 4) and scheduled.symbol != default.symbol
    assert "ortx_step(kernels[0], ints, floats, buffers, 1, " in scheduled.source
    assert "ortx_step(kernels[1], ints, floats, buffers, ortx_threads_at_most(4, num_threads), " in scheduled.source
    with pytest.raises(ValueError, match="2 steps"):
        render.render(compiled, (1,))
    with pytest.raises(ValueError, match="positive int"):
        render.render(compiled, (0, None))


def test_every_step_on_one_thread_equals_the_default_bit_for_bit(tmp_path):
    sess = session(_models.mobilenetv2_style(size=32), tmp_path, "off")
    (program,) = claimed(sess)
    options = Options(cache_dir=tmp_path)
    inputs = [step_threads.TensorShape((1, 3, 32, 32), np.dtype(np.float32))]
    outputs = [step_threads.TensorShape(tuple(o.shape), np.dtype(np.float32)) for o in sess.get_outputs()]
    memory = step_threads.NativeRun(program, inputs, outputs, num_threads=2, rotations=1)
    default = [o.copy() for o in memory.run(program.native, 0)]
    single = jit.build_or_raise(render.render(program, (1,) * program.program.num_steps), options)
    assert single.step_threads == (1,) * program.program.num_steps
    tuned = memory.run(single, 0)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(tuned, default))
    assert np.abs(default[0]).max() > 0


def test_quick_tunes_and_records_every_step_then_resumes_without_measuring(tmp_path, runner_calls, monkeypatch):
    model = _models.mobilenetv2_style(size=32)
    tuned = session(model, tmp_path, "quick")  # may give the segment back to ORT afterwards (engine choice)
    assert runner_calls, "quick mode measured nothing"
    # the steps of the layout the quick session chose (ortx.tune.layout_choice), compiled untuned
    (layout,) = {choice.layout for choice in tuned.assignment.layout_choices} or {"blocked"}
    monkeypatch.setattr(ortx.pipeline, "EXPAND_DEPTHWISE", layout == "blocked")
    monkeypatch.setattr(ortx.pipeline, "BLOCKED_LAYOUT", layout != "nchw")
    (program,) = claimed(session(model, tmp_path, "off"))
    signatures = {step_threads.step_signature(s.kernel, s.ints, 2) for s in program.steps}
    with TuningDatabase(tmp_path / "tuning.sqlite") as database:
        rows = [r for r in database.records(template=step_threads.TEMPLATE) if r.signature in signatures]
    assert {r.signature for r in rows} == signatures
    assert sorted((r.signature, r.schedule["threads"]) for r in rows) == sorted(
        (signature, threads) for signature in signatures for threads in (1, 2))  # each count measured once
    assert all(r.status == "ok" and r.median_ms > 0 and r.fingerprint == current().key for r in rows)
    before = len(runner_calls)
    session(model, tmp_path, "quick")
    assert len(runner_calls) == before  # every schedule was recorded: nothing measured again
    with TuningDatabase(tmp_path / "tuning.sqlite") as database:
        assert len([r for r in database.records(template=step_threads.TEMPLATE) if r.signature in signatures]) == \
            len(rows)


def record_one_thread_faster(cache_dir, program, tuned_ms, default_ms=1.0):
    """Records that every step ran faster on 1 thread than on 2, and the segment's end-to-end validation."""
    fingerprint = current()
    schedule = tuple(1 for _ in program.steps)
    with TuningDatabase(cache_dir / "tuning.sqlite") as database:
        database.add_fingerprint(fingerprint)
        for signature in {step_threads.step_signature(s.kernel, s.ints, 2) for s in program.steps}:
            for threads, median in ((1, 0.5), (2, 1.0)):
                database.add(TuningRecord(signature, fingerprint.key, step_threads.TEMPLATE, {"threads": threads},
                                          "ok", median, source="test"))
        segment = step_threads.segment_signature(program, 2)
        for steps, median in ((None, default_ms), (list(schedule), tuned_ms)):
            database.add(TuningRecord(segment, fingerprint.key, step_threads.TEMPLATE, {"step_threads": steps},
                                      "ok", median, source="test"))
    return schedule


def test_cached_applies_records_without_measuring_and_outputs_equal_bit_for_bit(tmp_path, runner_calls):
    model = _models.mobilenetv2_style(size=32)
    untuned = session(model, tmp_path, "off")
    (program,) = claimed(untuned)
    assert program.native.step_threads is None
    schedule = record_one_thread_faster(tmp_path, program, tuned_ms=0.8)
    cached = session(model, tmp_path, "cached")
    assert claimed(cached)[0].native.step_threads == schedule
    assert runner_calls == []
    for seed in range(2):
        expected, actual = untuned.run(None, feeds(model, seed))[0], cached.run(None, feeds(model, seed))[0]
        assert actual.tobytes() == expected.tobytes()


def test_a_schedule_validated_slower_end_to_end_is_not_applied(tmp_path):
    model = _models.mobilenetv2_style(size=32)
    (program,) = claimed(session(model, tmp_path, "off"))
    record_one_thread_faster(tmp_path, program, tuned_ms=1.2)
    assert claimed(session(model, tmp_path, "cached"))[0].native.step_threads is None


def test_a_candidate_that_fails_to_build_is_a_row_and_the_default_stays(tmp_path, monkeypatch):
    def failing(rendered, options):
        if rendered.step_threads is not None:
            raise jit.JitError(f"{rendered.symbol} could not be built (cc: internal compiler error)")
        return jit.build_or_raise(rendered, options)

    monkeypatch.setattr(step_threads, "build_or_raise", failing)
    model = _models.tiny_conv_relu()
    (program,) = claimed(session(model, tmp_path, "quick"))
    assert program.native.step_threads is None
    with TuningDatabase(tmp_path / "tuning.sqlite") as database:
        rows = database.records(template=step_threads.TEMPLATE)
    failed = [r for r in rows if r.schedule == {"threads": 1}]
    assert failed and all(r.status == "compile_error" and "internal compiler error" in r.detail for r in failed)
    assert all(r.status == "ok" for r in rows if r.schedule == {"threads": 2})
