"""ortx.pipeline.run on processes: outputs equal the unsplit model's, failures name the stage and node, and nothing
is left behind (no stage process alive, no shared-memory segment)."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ortx
import ortx.pipeline
from ortx.parallel.processes import PipelineStageError, ProcessPipeline
from tests import _models
from tests.tolerances import assert_close


def _assert_nothing_left(pipeline: ProcessPipeline) -> None:
    for pid in pipeline.pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        # A zombie would still answer kill(0); the pipeline joins its children, so none may exist either.
        raise AssertionError(f"stage process {pid} is still there")
    for name in pipeline.ring_names:
        assert not os.path.exists(f"/dev/shm/{name}"), f"shared memory {name} leaked"


def _session(model: onnx.ModelProto) -> ortx.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    return ortx.InferenceSession(model.SerializeToString(), options, providers=["OrtxEP", "CPUExecutionProvider"])


def test_three_stages_stream_in_order_and_match_the_unsplit_model():
    model = _models.transformer_block()
    plan = ortx.pipeline.split(model, stages=3, balance_slack=0.0)
    rng = np.random.default_rng(0)
    batches = [{"X": rng.uniform(-1, 1, (1, 16, 64)).astype(np.float32)} for _ in range(7)]  # 7: not a multiple
    with ProcessPipeline(plan, slots=2) as pipeline:
        outputs = pipeline.run(batches)
        again = pipeline.run(batches[:2])  # the stages stay up between runs
    _assert_nothing_left(pipeline)
    reference = _session(model)
    for position, (batch, result) in enumerate(zip(batches, outputs)):
        assert_close(result["Y"], reference.run(None, batch)[0], what=f"micro-batch {position}")
    np.testing.assert_array_equal(again[1]["Y"], outputs[1]["Y"])


def _scatter_model() -> onnx.ModelProto:
    """X[4] -> Relu -> Cast int64 -> ScatterElements into a [10] constant: an index >= 10 fails at run time in ORT
    (OrtxEP declines ScatterElements) inside the last stage."""
    nodes = [helper.make_node("Relu", ["X"], ["positive"], name="relu_0"),
             helper.make_node("Cast", ["positive"], ["indices"], to=TensorProto.INT64, name="cast_1"),
             helper.make_node("ScatterElements", ["data", "indices", "updates"], ["Y"], axis=0, name="scatter_2")]
    graph = helper.make_graph(
        nodes, "scatter", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [10])],
        initializer=[numpy_helper.from_array(np.arange(10, dtype=np.float32), "data"),
                     numpy_helper.from_array(np.full(4, 7.0, np.float32), "updates")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def test_a_failing_stage_names_stage_and_node_and_cleans_up():
    plan = ortx.pipeline.split(_scatter_model(), stages=2)
    good = {"X": np.array([1, 2, 3, 4], np.float32)}
    bad = {"X": np.array([1, 2, 3, 40], np.float32)}
    pipeline = ProcessPipeline(plan)
    assert pipeline.run([good])[0]["Y"].tolist() == [0, 7, 7, 7, 7, 5, 6, 7, 8, 9]
    with pytest.raises(PipelineStageError, match=r"pipeline stage 1 \(node scatter_2\) failed while running"):
        pipeline.run([good, bad, good])
    _assert_nothing_left(pipeline)


def test_a_stage_that_cannot_start_is_reported():
    plan = ortx.pipeline.split(_scatter_model(), stages=2)
    broken = onnx.ModelProto()
    broken.CopyFrom(plan.stages[1].model)
    broken.graph.node[-1].op_type = "NoSuchOp"
    stages = (plan.stages[0], type(plan.stages[1])(**{**plan.stages[1].__dict__, "model": broken}))
    plan = type(plan)(stages, plan.boundaries, plan.cost_source, plan.max_stages)
    with pytest.raises(PipelineStageError, match=r"pipeline stage 1 \(node scatter_2\) failed while starting"):
        ProcessPipeline(plan, start_method="spawn")  # spawn: the path without a fork server
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(f"ortx_pipe_{os.getpid()}_")]


def test_micro_batches_are_checked_against_the_plan():
    plan = ortx.pipeline.split(_scatter_model(), stages=2)
    with pytest.raises(ValueError, match=r"micro-batch 1: input 'X' is float32\[5\], the plan was split for "
                                         r"float32\[4\]"):
        ortx.pipeline.run(plan, [{"X": np.ones(4, np.float32)}, {"X": np.ones(5, np.float32)}])
    with pytest.raises(ValueError, match="unknown backend 'threads'"):
        ortx.pipeline.run(plan, [], backend="threads")


_KILLED_CALLER = """
import sys, time
import ortx.pipeline
from ortx.parallel.processes import ProcessPipeline
from tests import _models
if __name__ == "__main__":
    pipeline = ProcessPipeline(ortx.pipeline.split(_models.tiny_conv_relu(), stages=2))
    print(*pipeline.pids, *pipeline.ring_names, flush=True)
    time.sleep(600)
"""


def test_stages_and_rings_go_when_the_caller_is_killed(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "caller.py"
    script.write_text(_KILLED_CALLER)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    caller = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=root,
                              env={**os.environ, "PYTHONPATH": root})
    try:
        first, second, *rings = caller.stdout.readline().split()
    finally:
        caller.send_signal(signal.SIGKILL)  # no close(), no atexit: only the stages' own watch can end them
        caller.wait()
    deadline = time.monotonic() + 30
    left = [pid for pid in (int(first), int(second)) if os.path.exists(f"/proc/{pid}")]
    while (left or any(os.path.exists(f"/dev/shm/{name}") for name in rings)) and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [pid for pid in left if os.path.exists(f"/proc/{pid}")]
    assert not left, f"stage processes {left} outlived their killed caller"
    assert not [name for name in rings if os.path.exists(f"/dev/shm/{name}")], "rings not unlinked"
