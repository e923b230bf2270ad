"""ortx.tune.layout_choice: blocked runs or NCHW kernels per CPU segment (measured, recorded, read back), and a
session on the chosen program against onnxruntime on fresh random inputs."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

import ortx
import ortx.tune.layout_choice as layout_choice
from ortx import _kernels
from ortx.ep.compile_nodes import compile_segment, infer_shapes
from ortx.ep.runtime import ClaimedStep
from ortx.model_io import to_ort_bytes
from ortx.tune.layout_choice import LAYOUT_TEMPLATE, LayoutPolicy, has_blocked_steps
from ortx.tune.records import TuningDatabase
from tests import _models
from tests.tolerances import assert_close

needs_avx512 = pytest.mark.skipif(_kernels.cpu_isa() != "avx512", reason="blocked runs are planned on AVX-512 only")


def _segment():
    model = infer_shapes(_models.mobilenetv2_style(size=32, seed=3))
    nodes = list(model.graph)
    inputs = [model.graph.inputs[0]]
    outputs = list(model.graph.outputs)
    return nodes, inputs, outputs, (lambda blocked: compile_segment(nodes, inputs, outputs, num_threads=2,
                                                                    blocked=blocked))


def _fake_rounds(calls, blocked_ms, nchw_ms):
    def fake(programs, externals, num_threads, rounds, runs):
        calls.append(sorted(programs))
        assert has_blocked_steps(programs["blocked"]) and not has_blocked_steps(programs["nchw"])
        return {"blocked": list(blocked_ms), "nchw": list(nchw_ms)}
    return fake


@needs_avx512
@pytest.mark.parametrize("blocked_ms, nchw_ms, chosen", [
    ((1.0, 1.0, 1.0), (0.9, 0.95, 0.97), "nchw"),   # NCHW faster by > MARGIN in every round
    ((1.0, 1.0, 1.0), (0.9, 0.99, 0.9), "blocked"),  # one round within the margin: the blocked runs stay
    ((1.0, 1.0, 1.0), (1.2, 1.1, 1.3), "blocked")])
def test_measured_then_recorded_then_read_back(tmp_path, monkeypatch, blocked_ms, nchw_ms, chosen):
    nodes, inputs, outputs, compile_with = _segment()
    calls = []
    monkeypatch.setattr(layout_choice, "time_rounds", _fake_rounds(calls, blocked_ms, nchw_ms))
    database = str(tmp_path / "tuning.sqlite")
    policy = LayoutPolicy("quick", database)
    program = policy.choose(compile_with, nodes, inputs, outputs, 2)
    assert calls == [["blocked", "nchw"]]
    assert has_blocked_steps(program) == (chosen == "blocked")
    (choice,) = policy.choices
    assert (choice.layout, choice.source, choice.blocked_ms, choice.nchw_ms) == (chosen, "measured", blocked_ms,
                                                                               nchw_ms)
    assert f"-> {chosen}" in choice.describe()
    with TuningDatabase(database) as db:
        rows = db.records(None, None, LAYOUT_TEMPLATE)
    assert sorted((row.schedule["layout"], row.schedule["round"]) for row in rows) == [
        (layout, index) for layout in ("blocked", "nchw") for index in range(3)]
    for mode in ("cached", "quick"):  # a record exists: neither mode measures again, and only one layout compiles
        policy, compiled = LayoutPolicy(mode, database), []
        program = policy.choose(lambda blocked: compiled.append(blocked) or compile_with(blocked), nodes, inputs,
                                outputs, 2)
        assert calls == [["blocked", "nchw"]] and has_blocked_steps(program) == (chosen == "blocked")
        assert compiled == [chosen == "blocked"]
        assert policy.choices[0].source == "records" and policy.choices[0].layout == chosen
    policy = LayoutPolicy("quick", database)  # another thread count is another segment signature
    policy.choose(lambda blocked: compile_segment(nodes, inputs, outputs, num_threads=1, blocked=blocked),
                  nodes, inputs, outputs, 1)
    assert len(calls) == 2


@needs_avx512
def test_off_and_missing_records_keep_the_blocked_runs(tmp_path, monkeypatch):
    nodes, inputs, outputs, compile_with = _segment()
    monkeypatch.setattr(layout_choice, "time_rounds", lambda *args: pytest.fail("must not measure"))
    policy = LayoutPolicy("off", str(tmp_path / "tuning.sqlite"))
    assert has_blocked_steps(policy.choose(compile_with, nodes, inputs, outputs, 2)) and policy.choices == []
    policy = LayoutPolicy("cached", str(tmp_path / "absent.sqlite"))
    assert has_blocked_steps(policy.choose(compile_with, nodes, inputs, outputs, 2))
    assert policy.choices[0].source == "no records" and not (tmp_path / "absent.sqlite").exists()


def test_a_segment_without_blocked_steps_has_no_choice(tmp_path, monkeypatch):
    model = infer_shapes(_models.resnet18_style(size=32))
    nodes, inputs = list(model.graph)[:3], [model.graph.inputs[0]]
    outputs = [nodes[-1].outputs[0]]
    monkeypatch.setattr(layout_choice, "time_rounds", lambda *args: pytest.fail("must not measure"))
    policy = LayoutPolicy("quick", str(tmp_path / "tuning.sqlite"))
    program = policy.choose(lambda blocked: compile_segment(nodes, inputs, outputs, num_threads=2, blocked=blocked),
                            nodes, inputs, outputs, 2)
    assert not has_blocked_steps(program) and policy.choices == []


@needs_avx512
def test_a_session_measures_the_layout_and_runs_the_choice(tmp_path, monkeypatch):
    """tuning "quick": the real measurement (no fake), recorded, shown in sess.assignment, outputs as onnxruntime's;
    a "cached" session reads the record and compiles the same layout."""
    model = _models.mobilenetv2_style(size=32, seed=3)
    feeds = {"input": np.random.default_rng(7).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    expected = onnxruntime.InferenceSession(to_ort_bytes(model), options,
                                            providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    layouts = []
    for mode in ("quick", "cached"):
        session = ortx.InferenceSession(model, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                        provider_options=[{"tuning": mode, "jit_cache_dir": str(tmp_path)}, {}])
        assert_close(session.run(None, feeds)[0], expected)
        (choice,) = session.assignment.layout_choices
        assert choice.source == ("measured" if mode == "quick" else "records")
        assert len(choice.blocked_ms) == len(choice.nchw_ms) == layout_choice.QUICK[0]
        assert choice.describe() in str(session.assignment)
        layouts.append(choice.layout)
        programs = [claimed.program for compiled in session._compiled.values() for claimed in compiled.plan.steps
                    if isinstance(claimed, ClaimedStep)]
        # the engine choice may have given the segment back to ORT; if OrtxEP runs it, it runs the chosen layout
        assert all(has_blocked_steps(program) == (choice.layout == "blocked") for program in programs)
    assert layouts[0] == layouts[1]
