"""ortx.tune.layout_choice: blocked runs (with or without fused expand + depthwise steps) or NCHW kernels per CPU
segment (measured, recorded, read back), and a session on the chosen program against onnxruntime on fresh random
inputs."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ortx
import ortx.tune.layout_choice as layout_choice
from ortx import _kernels
from ortx.ep.compile_nodes import compile_segment, infer_shapes
from ortx.ep.runtime import ClaimedStep
from ortx.model_io import to_ort_bytes
from ortx.tune.layout_choice import LAYOUT_TEMPLATE, LayoutPolicy, has_blocked_steps, has_fused_steps
from ortx.tune.records import TuningDatabase
from tests import _models
from tests.tolerances import assert_close

needs_avx512 = pytest.mark.skipif(_kernels.cpu_isa() != "avx512", reason="blocked runs are planned on AVX-512 only")


def _compile(nodes, inputs, outputs, threads=2):
    return lambda layout: compile_segment(nodes, inputs, outputs, num_threads=threads, blocked=layout != "nchw",
                                          fuse_expand=layout == "blocked")


def _segment():
    """MobileNetV2-style at 32x32 before the passes: blocked runs, no fused steps (BatchNormalization nodes sit
    between each 1x1 conv and its depthwise conv)."""
    model = infer_shapes(_models.mobilenetv2_style(size=32, seed=3))
    nodes = list(model.graph)
    inputs = [model.graph.inputs[0]]
    outputs = list(model.graph.outputs)
    return nodes, inputs, outputs, _compile(nodes, inputs, outputs)


def _fused_segment():
    """1x1 -> depthwise -> 1x1 at 28x28: one fused step, then a blocked 1x1 conv."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="expand"),
             helper.make_node("Conv", ["a", "w2"], ["b"], name="depthwise", group=64, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["b", "w3"], ["y"], name="project")]
    rng = np.random.default_rng(4)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.2, name)
               for name, shape in (("w1", (64, 16, 1, 1)), ("w2", (64, 1, 3, 3)), ("w3", (16, 64, 1, 1)))]
    graph = helper.make_graph(nodes, "fused", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 28, 28])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 28, 28])], weights)
    model = infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    nodes, inputs, outputs = list(model.graph), [model.graph.inputs[0]], list(model.graph.outputs)
    return nodes, inputs, outputs, _compile(nodes, inputs, outputs)


def _fake_rounds(calls, blocked_ms, nchw_ms, unfused_ms=None):
    def fake(programs, externals, num_threads, rounds, runs):
        calls.append(sorted(programs))
        assert has_blocked_steps(programs["blocked"]) and not has_blocked_steps(programs["nchw"])
        assert ("blocked_unfused" in programs) == has_fused_steps(programs["blocked"])
        if "blocked_unfused" in programs:
            assert has_blocked_steps(programs["blocked_unfused"]) and not has_fused_steps(programs["blocked_unfused"])
        times = {"blocked": list(blocked_ms), "nchw": list(nchw_ms)}
        return times | ({"blocked_unfused": list(unfused_ms)} if "blocked_unfused" in programs else {})
    return fake


def _layout_of(program, fused: bool = True) -> str:
    """The layout a program was compiled in (`fused`: whether its segment's blocked program has fused steps)."""
    if not has_blocked_steps(program):
        return "nchw"
    return "blocked" if has_fused_steps(program) or not fused else "blocked_unfused"


@needs_avx512
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("blocked_ms, nchw_ms, unfused_ms, with_fused, without_fused", [
    ((1.0, 1.0, 1.0), (0.9, 0.95, 0.97), (1.0, 1.0, 1.0), "nchw", "nchw"),  # faster by > MARGIN in every round
    ((1.0, 1.0, 1.0), (0.9, 0.99, 0.9), (1.0, 1.0, 1.0), "blocked", "blocked"),  # one round within the margin
    ((1.0, 1.0, 1.0), (1.2, 1.1, 1.3), (1.1, 1.0, 1.0), "blocked", "blocked"),
    ((1.0, 1.0, 1.0), (1.2, 1.1, 1.3), (0.9, 0.95, 0.97), "blocked_unfused", "blocked"),  # the fused steps lose
    ((1.0, 1.0, 1.0), (0.9, 0.9, 0.9), (0.8, 0.85, 0.8), "blocked_unfused", "nchw"),  # both faster: lower median
    ((1.0, 1.0, 1.0), (0.8, 0.8, 0.8), (0.9, 0.9, 0.9), "nchw", "nchw")])
def test_measured_then_recorded_then_read_back(tmp_path, monkeypatch, fused, blocked_ms, nchw_ms, unfused_ms,
                                               with_fused, without_fused):
    """A segment with fused steps measures three layouts; without them "blocked_unfused" is neither compiled nor
    measured (its times here are not used)."""
    nodes, inputs, outputs, compile_with = _fused_segment() if fused else _segment()
    chosen = with_fused if fused else without_fused
    calls = []
    monkeypatch.setattr(layout_choice, "time_rounds", _fake_rounds(calls, blocked_ms, nchw_ms, unfused_ms))
    database = str(tmp_path / "tuning.sqlite")
    policy = LayoutPolicy("quick", database)
    program = policy.choose(compile_with, nodes, inputs, outputs, 2)
    measured = ["blocked", "blocked_unfused", "nchw"] if fused else ["blocked", "nchw"]
    assert calls == [measured]
    assert _layout_of(program, fused) == chosen
    (choice,) = policy.choices
    assert (choice.layout, choice.source, choice.blocked_ms, choice.nchw_ms, choice.unfused_ms) == (
        chosen, "measured", blocked_ms, nchw_ms, unfused_ms if fused else ())
    assert f"-> {chosen}" in choice.describe() and ("blocked unfused" in choice.describe()) == fused
    with TuningDatabase(database) as db:
        rows = db.records(None, None, LAYOUT_TEMPLATE)
    assert sorted((row.schedule["layout"], row.schedule["round"]) for row in rows) == [
        (layout, index) for layout in measured for index in range(3)]
    for mode in ("cached", "quick"):  # a record exists: neither mode measures again, and only one layout compiles
        policy, compiled = LayoutPolicy(mode, database), []
        program = policy.choose(lambda layout: compiled.append(layout) or compile_with(layout), nodes, inputs,
                                outputs, 2)
        assert calls == [measured] and _layout_of(program, fused) == chosen
        assert compiled == [chosen]
        assert policy.choices[0].source == "records" and policy.choices[0].layout == chosen
    policy = LayoutPolicy("quick", database)  # another thread count is another segment signature
    policy.choose(_compile(nodes, inputs, outputs, threads=1), nodes, inputs, outputs, 1)
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
    program = policy.choose(_compile(nodes, inputs, outputs), nodes, inputs, outputs, 2)
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
        assert all(_layout_of(program) == choice.layout for program in programs)
    assert layouts[0] == layouts[1]
