"""ortx.memory.report / plot / the `memory` command, and the runtime's arena reuse: no arena allocated per run."""
from __future__ import annotations

import argparse
import io
import json
import tracemalloc

import numpy as np
import onnxruntime
import pytest

import ortx
import ortx.memory
from ortx.ep import runtime
from ortx.memory.command import add_memory_command, run_memory_command
from ortx.memory.lifetimes import ALIGNMENT, check_no_overlap
from ortx.memory.summary import ort_style_bytes
from tests import _models


@pytest.fixture(scope="module")
def resnet_report():
    return ortx.memory.report(_models.resnet18_style(size=32), {"input": (1, 3, 32, 32)})


def test_report_figures_are_ordered_and_consistent(resnet_report):
    report = resnet_report
    [segment] = report.segments
    # naive_bytes counts model tensors only; the plan also holds kernel workspaces, so compare with its own naive
    assert report.lower_bound_bytes <= report.planned_bytes <= segment.plan.naive_bytes
    assert report.planned_bytes <= 1.05 * report.lower_bound_bytes
    assert report.ort_style_bytes <= report.naive_bytes
    check_no_overlap(segment.plan.lifetimes, segment.plan.offsets)
    assert segment.arena_bytes == segment.plan.arena_bytes
    assert report.in_place_bytes_saved == segment.without_in_place_bytes - segment.arena_bytes >= 0
    data = json.loads(report.to_json())
    for key in ("naive_bytes", "planned_bytes", "lower_bound_bytes", "ort_style_bytes", "in_place_bytes_saved"):
        assert data[key] == getattr(report, key)
    tensors = data["segments"][0]["tensors"]
    assert {"label", "offset", "nbytes", "first", "last"} <= set(tensors[0])
    assert all(t["offset"] + t["nbytes"] <= data["segments"][0]["arena_bytes"] for t in tensors)


def test_report_separates_kernel_scratch_from_graph_tensors(resnet_report):
    """ORT-style reuse counts graph tensors only; the ortx arena also holds kernel scratch (the convs' planes): the
    report gives each part so like is compared with like."""
    report = resnet_report
    [segment] = report.segments
    scratch = [t for t in segment.tensors if t.workspace]
    assert scratch and all(":" in t.label for t in scratch)  # "node:label" of builder.workspace
    assert not any(t.workspace for t in segment.tensors if t.label == "input")
    assert 0 < report.workspace_peak_bytes <= sum(t.nbytes for t in scratch)
    assert report.workspace_peak_bytes >= max(t.nbytes for t in scratch)
    biggest_tensor = max(t.nbytes for t in segment.tensors if not t.workspace)
    assert biggest_tensor <= report.activation_lower_bound_bytes <= report.naive_bytes
    # the combined bound can never need more than both parts at their worst at once
    assert report.lower_bound_bytes <= report.activation_lower_bound_bytes + report.workspace_peak_bytes
    text = report.table()
    assert "graph tensors alone" in text and "kernel scratch" in text
    data = json.loads(report.to_json())
    assert data["workspace_peak_bytes"] == report.workspace_peak_bytes
    assert data["activation_lower_bound_bytes"] == report.activation_lower_bound_bytes


def test_ort_style_reuses_only_same_size_buffers_after_last_use():
    nodes = [([], [("a", 100)]), (["a"], [("b", 100)]), (["b"], [("c", 100)]), (["c"], [("d", 60)]),
             (["d", "b"], [("e", 100)])]
    # a freed after node 1 -> c takes it; b lives to node 4; d (60) is new; e takes c's buffer freed at node 3.
    assert ort_style_bytes(nodes) == 100 + 100 + 60


def test_plot_draws_one_rectangle_per_buffer_or_says_what_is_missing(resnet_report):
    plan = resnet_report.segments[0].plan
    try:
        import matplotlib
    except ImportError:
        with pytest.raises(ImportError, match="pip install matplotlib"):
            ortx.memory.plot(plan)
    else:
        matplotlib.use("Agg")
        ax = ortx.memory.plot(plan)
        assert len(ax.patches) == len(plan.lifetimes)


def test_memory_command_prints_table_and_json(tmp_path):
    import onnx

    path = tmp_path / "model.onnx"
    onnx.save(_models.tiny_conv_relu(), path)
    parser = argparse.ArgumentParser()
    add_memory_command(parser.add_subparsers(dest="command"))
    out = io.StringIO()
    assert run_memory_command(parser.parse_args(["memory", str(path), "--json"]), out) == 0
    data = json.loads(out.getvalue())
    assert 0 < data["lower_bound_bytes"] <= data["planned_bytes"]
    assert data["ort_style_bytes"] <= data["naive_bytes"]
    out = io.StringIO()
    assert run_memory_command(parser.parse_args(["memory", str(path), "--plan"]), out) == 0
    assert "ortx plan" in out.getvalue() and "segment0.arena" in out.getvalue()
    with pytest.raises(SystemExit):
        parser.parse_args(["memory", str(path), "--input-shape", "x:0x3"])


def test_runs_reuse_the_pooled_arena(monkeypatch):
    """Steady state allocates no arena: every run takes the RunContext made at session creation."""
    constructed = []

    class CountingContext(runtime.RunContext):
        def __init__(self, *args, **kwargs):
            constructed.append(self)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(runtime, "RunContext", CountingContext)
    model = _models.mobilenetv2_style(size=32)
    session = ortx.InferenceSession(model.SerializeToString(), providers=["OrtxEP", "CPUExecutionProvider"],
                                    provider_options=[{"input_shapes": {"input": (1, 3, 32, 32)}}, {}])
    feeds = {"input": np.random.default_rng(0).uniform(-1, 1, size=(1, 3, 32, 32)).astype(np.float32)}
    first = session.run(None, feeds)
    after_first = len(constructed)
    assert after_first >= 1
    for _ in range(50):
        result = session.run(None, feeds)
        np.testing.assert_array_equal(result[0], first[0])
    assert len(constructed) == after_first
    # the arena is the plan's size (plus one line of slack for the alignment of its start)
    [compiled] = session._compiled.values()
    assert all(c.arena.nbytes == compiled.plan.memory_plan.arena_bytes + ALIGNMENT for c in constructed)
    reference = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(first[0], reference.run(None, feeds)[0], rtol=1e-4, atol=1e-4)


def test_steady_state_runs_allocate_only_their_outputs():
    """Python and numpy allocations over 20 steady-state runs peak at about one output, not at the arena's size:
    activations and workspaces live in the arena made at session creation (tracemalloc sees numpy's buffers)."""
    model = _models.mobilenetv2_style(size=64)
    session = ortx.InferenceSession(model.SerializeToString(), providers=["OrtxEP", "CPUExecutionProvider"],
                                    provider_options=[{"input_shapes": {"input": (1, 3, 64, 64)}}, {}])
    feeds = {"input": np.random.default_rng(1).uniform(-1, 1, size=(1, 3, 64, 64)).astype(np.float32)}
    for _ in range(3):
        expected = session.run(None, feeds)[0]
    [compiled] = session._compiled.values()
    arena_bytes = compiled.plan.memory_plan.arena_bytes
    limit = 4 * expected.nbytes + (32 << 10)
    assert arena_bytes > 8 * limit  # the check below means something only if the arena dwarfs the output
    tracemalloc.start()
    try:
        for _ in range(20):
            result = session.run(None, feeds)[0]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(result, expected)
    assert peak <= limit, (peak, arena_bytes)


def _split_model():
    """conv-relu-conv-relu | Sin (ORT runs it) | conv-relu-conv: two claimed segments and boundary tensors."""
    builder = _models.GraphBuilder("split", 0)
    x = builder.node("Relu", [builder.conv("input", 3, 8, 3)])
    x = builder.node("Sin", [builder.node("Relu", [builder.conv(x, 8, 8, 3)])])
    y = builder.conv(builder.node("Relu", [builder.conv(x, 8, 8, 3)]), 8, 8, 3)
    return builder.finish([_models._float_input("input", [1, 3, 16, 16])], [_models._float_input(y, [1, 8, 16, 16])])


def test_report_with_boundary_tensors_between_segments():
    model = _split_model()
    report = ortx.memory.report(model, {"input": (1, 3, 16, 16)})
    assert len(report.segments) == 2
    assert len(report.boundary_offsets) == 2  # Relu -> Sin and Sin -> Conv
    plan = report.session_plan
    check_no_overlap(plan.lifetimes, plan.offsets)
    assert report.lower_bound_bytes <= report.planned_bytes <= 1.05 * report.lower_bound_bytes
    for segment in report.segments:
        assert plan.offsets[segment.name] == segment.session_offset
    session = ortx.InferenceSession(model.SerializeToString(), providers=["OrtxEP", "CPUExecutionProvider"],
                                    provider_options=[{"input_shapes": {"input": (1, 3, 16, 16)}}, {}])
    reference = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"input": np.random.default_rng(2).uniform(-1, 1, size=(1, 3, 16, 16)).astype(np.float32)}
    for _ in range(2):  # the second run reuses the arena the first wrote boundary tensors into
        np.testing.assert_allclose(session.run(None, feeds)[0], reference.run(None, feeds)[0], rtol=1e-4, atol=1e-4)
