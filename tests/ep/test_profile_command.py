"""`ortx profile`: both engines' profiles read back (ortx.ep.trace_summary) and printed side by side."""
import io
import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortx.cli import main
from ortx.ep.trace_summary import summarize


def _model_file(tmp_path):
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Tanh", ["r"], ["t"], name="tanh"),
             helper.make_node("Add", ["t", "r"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 8, 8])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_profile_prints_both_engines_and_keeps_the_traces(tmp_path, capsys):
    path = _model_file(tmp_path)
    traces = tmp_path / "traces"
    assert main(["profile", str(path), "--input-shape", "x:1x3x8x8", "--runs", "3", "--threads", "1",
                 "--trace-dir", str(traces)]) == 0
    text = capsys.readouterr().out
    assert "ONNX Runtime op" in text and "OrtxEP op" in text and "OrtxEP time per kernel" in text
    # Conv + Relu are one FusedConv step and Tanh + Add one elementwise chain, each listed with its sources.
    assert "FusedConv" in text and "(fused: conv,relu)" in text
    assert "elementwise_chain_f32" in text and "(fused: tanh,add)" in text
    files = sorted(p.name for p in traces.iterdir())
    assert len(files) == 2 and files[0].startswith("ort_") and files[1].startswith("ortx_")
    ortx_summary = summarize(json.loads((traces / files[1]).read_text()))
    assert ortx_summary.runs == 3 and {node.name for node in ortx_summary.nodes} == {"conv", "add_chain"}


def test_profile_passes_fp32_nodes_to_a_bf16_session(tmp_path, capsys):
    path = _model_file(tmp_path)
    args = ["profile", str(path), "--input-shape", "x:1x3x8x8", "--runs", "2", "--threads", "1", "--precision",
            "bf16"]
    assert main(args) == 0
    assert "conv2d_bf16" in capsys.readouterr().out
    assert main(args + ["--fp32-nodes", "conv"]) == 0
    text = capsys.readouterr().out
    assert "conv2d_f32" in text and "conv2d_bf16" not in text
    assert main(args + ["--fp32-nodes", "nope"]) == 2
    assert "fp32_nodes: 'nope' not in the graph" in capsys.readouterr().err
    assert main(args[:-2] + ["--fp32-nodes", "conv"]) == 2
    assert "give --precision bf16" in capsys.readouterr().err


def test_profile_says_where_a_bf16_session_runs_fp32_and_passes_bf16_compute(tmp_path, capsys, monkeypatch):
    from ortx.ep import precision

    monkeypatch.setattr(precision, "bf16_compute_pays", lambda: (False, "the test's reason"))
    path = _model_file(tmp_path)
    args = ["profile", str(path), "--input-shape", "x:1x3x8x8", "--runs", "2", "--threads", "1", "--precision",
            "bf16"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "conv2d_f32" in captured.out and "conv2d_bf16" not in captured.out
    assert "OrtxEP: precision 'bf16' runs fp32 kernels here: the test's reason" in captured.err
    assert main(args + ["--bf16-compute", "always"]) == 0
    captured = capsys.readouterr()
    assert "conv2d_bf16" in captured.out and "runs fp32 kernels" not in captured.err


def test_summary_medians_and_groups():
    events = [{"cat": "Session", "name": "model_run", "ts": start, "dur": 100} for start in (0, 200, 400)]
    for start, slow in ((0, 90), (200, 30), (400, 50)):  # the first run is a warm-up
        events.append({"cat": "Node", "name": "a_kernel_time", "ts": start + 1, "dur": slow,
                       "args": {"op_name": "Conv", "provider": "OrtxEP", "kernel": "conv2d_f32"}})
        events.append({"cat": "Node", "name": "b_kernel_time", "ts": start + 60, "dur": 10,
                       "args": {"op_name": "Relu", "provider": "OrtxEP", "kernel": "unary_f32"}})
    events.append({"cat": "Node", "name": "setup_kernel_time", "ts": 1000, "dur": 5, "args": {}})  # outside runs
    summary = summarize(events)
    assert summary.runs == 2 and summary.run_ms == pytest.approx(0.1)
    assert [(node.name, node.median_ms) for node in summary.nodes] == [("a", pytest.approx(0.04)),
                                                                       ("b", pytest.approx(0.01))]
    assert summary.by("kernel")[0] == ("conv2d_f32", pytest.approx(0.04), 1)


def test_profile_errors_name_the_problem(tmp_path, capsys):
    path = _model_file(tmp_path)
    assert main(["profile", str(path)]) == 2  # dynamic dim n without --input-shape
    assert "--input-shape" in capsys.readouterr().err
    assert main(["profile", str(path), "--input-shape", "y:1x3x8x8"]) == 2
    assert "'y', which is not an input of" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["profile", str(path), "--runs", "0"])
    with pytest.raises(ValueError, match="no model_run"):
        summarize([])
