"""ortx.ep.fp32_nodes_search and `ortx fp32-nodes`: the layers a bf16 session keeps fp32 meet the cosine target,
checked again on fresh sessions as a user builds them (JIT on), and none of them can be dropped."""
from __future__ import annotations

import argparse
import json

import numpy as np
import onnx
import onnxruntime
import pytest

import ortx
from ortx.ep.fp32_nodes_command import add_fp32_nodes_command
from ortx.ep.fp32_nodes_search import search_fp32_nodes
from ortx.measure import random_feeds
from ortx.model_io import to_ort_bytes
from tests import _models

SAMPLES = 2


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return _models.mobilenetv2_style(size=64, seed=1)


def _worst_cosine(model, fp32_nodes) -> float:
    """A fresh bf16 session with fp32_nodes, built with the defaults (JIT on), against ORT fp32 on the search's
    inputs (ortx.measure.random_feeds, seeds 0..SAMPLES-1)."""
    data = to_ort_bytes(model)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    reference = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    session = ortx.InferenceSession(data, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                    provider_options=[{"precision": "bf16", "fp32_nodes": ",".join(fp32_nodes)}
                                                      if fp32_nodes else {"precision": "bf16"}, {}])
    worst = 1.0
    for seed in range(SAMPLES):
        feed = random_feeds(reference, seed=seed)
        got = session.run(None, feed)[0].ravel().astype(np.float64)
        expected = reference.run(None, feed)[0].ravel().astype(np.float64)
        worst = min(worst, float(got @ expected / np.linalg.norm(got) / np.linalg.norm(expected)))
    return worst


def test_the_chosen_layers_meet_the_target_and_none_can_be_dropped(model):
    bf16 = _worst_cosine(model, ())
    assert bf16 < 0.9995, "the model must lose accuracy in bf16 for the search to have work"
    target = 1 - (1 - bf16) / 2  # halve bf16's error
    stages = set()
    choice = search_fp32_nodes(model, target=target, samples=SAMPLES, threads=2,
                               progress=lambda stage, done, total: stages.add(stage))
    assert choice.met and choice.fp32_nodes
    assert len(choice.fp32_nodes) < choice.candidates, "halving the error must not need every layer"
    assert set(choice.gains) >= set(choice.fp32_nodes) and len(choice.gains) == choice.candidates
    assert choice.score_bf16 == pytest.approx(bf16, abs=1e-9)
    assert choice.score_chosen >= target and choice.score_fp32 >= choice.score_chosen
    assert {"sensitivity", "cost", "greedy", "pruning"} <= stages
    assert set(choice.costs_ms) == set(choice.gains) and min(choice.costs_ms.values()) > 0
    assert choice.provider_options() == {"precision": "bf16", "fp32_nodes": ",".join(choice.fp32_nodes)}
    # the search's sessions (step interpreter, tuning off) score what a user's session does
    assert _worst_cosine(model, choice.fp32_nodes) == pytest.approx(choice.score_chosen, abs=1e-9)
    for dropped in choice.fp32_nodes:  # pruned: each chosen layer is needed
        rest = [name for name in choice.fp32_nodes if name != dropped]
        assert _worst_cosine(model, rest) < target, f"{dropped} could be dropped"


def test_a_target_bf16_meets_keeps_no_layer_and_the_times_are_reported(model):
    choice = search_fp32_nodes(model, target=0.5, samples=1, threads=2, time_runs=4)
    assert choice.met and choice.fp32_nodes == () and not choice.gains and not choice.costs_ms
    assert choice.provider_options() == {"precision": "bf16"}
    assert set(choice.times_ms) == set(choice.paired) == {"bf16", "fp32"}
    assert all(ms > 0 for ms in choice.times_ms.values()) and choice.paired["bf16"] == 1.0
    assert "no layer needs fp32" in choice.summary()


def test_bad_targets_and_models_without_bf16_layers_are_errors(model):
    for target in (0.0, 1.0, 1.5, True, "0.99"):
        with pytest.raises(ValueError, match="target cosine must be a number in \\(0, 1\\)"):
            search_fp32_nodes(model, target=target)
    with pytest.raises(ValueError, match="samples must be >= 1"):
        search_fp32_nodes(model, samples=0)
    builder = _models.GraphBuilder("no_products", seed=0)
    y = builder.node("Relu", [builder.node("Add", ["x", "x"])])
    plain = builder.finish([_models._float_input("x", [1, 8])], [_models._float_input(y, [1, 8])])
    with pytest.raises(ValueError, match="runs no layer on bf16 kernels"):
        search_fp32_nodes(plain, samples=1)


def _run_command(argv: list[str], capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    add_fp32_nodes_command(parser.add_subparsers())
    args = parser.parse_args(argv)
    code = args.handler(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_command_prints_the_option_and_writes_json(model, tmp_path, capsys):
    path = tmp_path / "mobilenetv2.onnx"
    onnx.save(model, str(path))
    data = tmp_path / "inputs.npz"
    rng = np.random.default_rng(5)
    np.savez(data, input=rng.uniform(-1, 1, (2, 3, 64, 64)).astype(np.float32))
    report = tmp_path / "choice.json"
    code, out, err = _run_command(["fp32-nodes", str(path), "--target-cosine", "0.9", "--calibration", str(data),
                                   "--samples", "2", "--threads", "2", "--time-runs", "0", "--json",
                                   str(report)], capsys)
    assert code == 0, err
    assert "no layer needs fp32" in out and "provider_options={'precision': 'bf16'}" in out
    document = json.loads(report.read_text())
    assert document["met"] and document["fp32_nodes"] == [] and document["provider_options"] == {"precision": "bf16"}
    code, _, err = _run_command(["fp32-nodes", str(tmp_path / "missing.onnx")], capsys)
    assert code == 2 and "ortx fp32-nodes: error:" in err
    code, _, err = _run_command(["fp32-nodes", str(path), "--calibration", str(tmp_path / "none.npz")], capsys)
    assert code == 2 and "does not exist" in err
    with pytest.raises(SystemExit):
        _run_command(["fp32-nodes", str(path), "--target-cosine", "1.5"], capsys)


def test_the_command_says_when_bf16_sessions_run_fp32_kernels_here(model, tmp_path, capsys, monkeypatch):
    from ortx.ep import precision

    monkeypatch.setattr(precision, "bf16_compute_pays", lambda: (False, "the test's reason"))
    path = tmp_path / "mobilenetv2.onnx"
    onnx.save(model, str(path))
    code, out, err = _run_command(["fp32-nodes", str(path), "--samples", "1", "--time-runs", "0", "--cost-runs",
                                   "0"], capsys)
    assert code == 0, err
    assert "note: precision 'bf16' runs fp32 kernels here: the test's reason" in err
    assert "no layer needs fp32" in out  # those sessions compute in fp32 already
