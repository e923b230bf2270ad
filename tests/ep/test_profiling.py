"""SessionOptions.enable_profiling through OrtxEP: onnxruntime's profile file (ortx.ep.trace), OrtxEP's kernels in it."""
import json
import os

import numpy as np
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

import ortx

FLOAT = TensorProto.FLOAT


def _model():
    """x -> Conv -> Relu -> Add(., x) -> GatherElements (ORT runs it) -> Sigmoid -> y."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((3, 3, 3, 3)).astype(np.float32), "w")
    indices = numpy_helper.from_array(rng.integers(0, 5, (1, 3, 5, 5)).astype(np.int64), "i")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "x"], ["s"], name="add"),
        helper.make_node("GatherElements", ["s", "i"], ["g"], name="gather", axis=3),
        helper.make_node("Sigmoid", ["g"], ["y"], name="sigmoid"),
    ]
    graph = helper.make_graph(nodes, "profiled", [helper.make_tensor_value_info("x", FLOAT, [1, 3, 5, 5])],
                              [helper.make_tensor_value_info("y", FLOAT, [1, 3, 5, 5])], [weight, indices])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model.SerializeToString()


def _session(tmp_path, *, profiling: bool, providers=("OrtxEP", "CPUExecutionProvider")):
    options = onnxruntime.SessionOptions()
    options.enable_profiling = profiling
    options.profile_file_prefix = str(tmp_path / "trace")
    return ortx.InferenceSession(_model(), options, providers=list(providers))


def test_profile_has_runs_and_ortx_kernels_and_the_ort_segment(tmp_path):
    session = _session(tmp_path, profiling=True)
    x = np.random.default_rng(1).standard_normal((1, 3, 5, 5)).astype(np.float32)
    expected = session.run(None, {"x": x})[0]
    session.run(None, {"x": x})
    assert session.get_profiling_start_time_ns() > 0
    path = session.end_profiling()
    assert os.path.basename(path).startswith("trace_") and path.endswith(".json")
    events = json.loads(open(path).read())
    runs = [event for event in events if event["name"] == "model_run"]
    assert len(runs) == 2 and all(event["cat"] == "Session" and event["dur"] > 0 for event in runs)
    nodes = [event for event in events if event["cat"] == "Node"]
    ortx_nodes = [event for event in nodes if event["args"]["provider"] == "OrtxEP"]
    ort_nodes = [event for event in nodes if event["args"]["provider"] == "CPUExecutionProvider"]
    assert ortx_nodes and all(event["args"]["kernel"] and event["args"]["device"] == "cpu" for event in ortx_nodes)
    assert len(ort_nodes) == 2 and all(event["args"]["op_name"] == "ORT segment" for event in ort_nodes)
    # Conv + Relu is one FusedConv step: its event names the op it runs and the user's nodes behind it.
    fused = {(event["args"]["op_name"], event["args"]["fused_from"]) for event in ortx_nodes
             if "fused_from" in event["args"]}
    assert fused == {("FusedConv", "conv,relu")}
    assert {event["name"] for event in ortx_nodes} == {"conv_kernel_time", "add_kernel_time", "sigmoid_kernel_time"}
    for run in runs:  # every node event of a run lies within it
        inside = [e for e in nodes if run["ts"] <= e["ts"] <= run["ts"] + run["dur"]]
        assert sum(e["dur"] for e in inside) <= run["dur"] + 5 * len(inside)
    # Profiling stopped: later runs are not recorded and a second end_profiling returns "".
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], expected)
    assert session.end_profiling() == "" and session.get_profiling_start_time_ns() == 0


def test_no_profile_unless_enabled(tmp_path):
    session = _session(tmp_path, profiling=False)
    session.run(None, {"x": np.ones((1, 3, 5, 5), np.float32)})
    assert session.end_profiling() == ""
    assert not list(tmp_path.iterdir())


def test_plain_ort_session_profiles_as_onnxruntime_does(tmp_path):
    session = _session(tmp_path, profiling=True, providers=("CPUExecutionProvider",))
    session.run(None, {"x": np.ones((1, 3, 5, 5), np.float32)})
    path = session.end_profiling()
    assert any(event["name"] == "model_run" for event in json.loads(open(path).read()))


def test_a_node_of_several_kernel_steps_lists_them_all():
    """A blocked conv that reorders its NCHW input first is two kernel steps of one node: its event names both, in
    order (the first alone read as if the reorder took the conv's time)."""
    import types

    from ortx.ep.runtime import ClaimedStep
    from ortx.ep.trace import RunTrace

    listing = lambda node, kernel: types.SimpleNamespace(node=node, kernel=kernel)  # noqa: E731
    program = types.SimpleNamespace(steps=(listing("conv", "reorder_to_nchwc_f32"),
                                           listing("conv", "conv_pointwise_nchwc_f32"),
                                           listing("relu", "unary_f32")))
    step = ClaimedStep(program=program, inputs=["x"], outputs=["y"], arena_name="arena")
    compiled = types.SimpleNamespace(plan=types.SimpleNamespace(steps=[step]), assignment=None)
    trace = RunTrace("unused")
    trace._record(compiled, 0.0, 0.001, {"conv": 0.0004, "relu": 0.0001}, {0: 0.0005})
    kernels = {event["name"]: event["args"]["kernel"] for event in trace.events if event["cat"] == "Node"}
    assert kernels == {"conv_kernel_time": "reorder_to_nchwc_f32+conv_pointwise_nchwc_f32",
                       "relu_kernel_time": "unary_f32"}
