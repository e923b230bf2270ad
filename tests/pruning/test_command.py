"""`ortx prune`: the written model, the per-layer table, the comparison line, sensitivity, and usage errors."""
import json

import numpy as np
import onnx
import pytest

from ortx.cli import main
from tests import _models


@pytest.fixture
def resnet(tmp_path):
    path = tmp_path / "resnet.onnx"
    onnx.save(_models.resnet18_style(size=32), path)
    return path


def _zero_share(path) -> float:
    model = onnx.load(path)
    weights = {node.input[1] for node in model.graph.node if node.op_type in ("Conv", "Gemm")}
    arrays = [onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.name in weights]
    return sum(int(np.count_nonzero(a == 0)) for a in arrays if a.size >= 1024) / sum(a.size for a in arrays
                                                                                       if a.size >= 1024)


def test_unstructured_pruning_writes_standard_onnx_at_the_sparsity_with_a_report(resnet, tmp_path, capsys):
    output, report = tmp_path / "pruned.onnx", tmp_path / "report.json"
    before = resnet.read_bytes()
    assert main(["prune", str(resnet), "-o", str(output), "--sparsity", "0.8", "--report", str(report)]) == 0
    printed = capsys.readouterr().out
    assert resnet.read_bytes() == before
    onnx.checker.check_model(onnx.load(output), full_check=True)
    assert _zero_share(output) == pytest.approx(0.8, abs=1e-3)
    assert "80.0% zero" in printed and "cosine" in printed and f"wrote {output}" in printed
    document = json.loads(report.read_text())
    assert document["passes"][-1]["counts"]["weights_zeroed"] > 0 and 0 < document["cosine"] < 1


def test_sensitivity_lists_each_layer_most_sensitive_first(tmp_path, capsys):
    mobilenet = tmp_path / "mobilenet.onnx"
    onnx.save(_models.mobilenetv2_style(size=32), mobilenet)
    assert main(["prune", str(mobilenet), "-o", str(tmp_path / "p.onnx"), "--sparsity", "0.9", "--sensitivity",
                 "--structured", "2:4", "--min-elements", "20000"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.split("sensitivity (each layer pruned alone; most sensitive first):\n")[1].splitlines()
    rows = [line for line in lines if "cosine" in line]
    cosines = [float(line.split("cosine ")[1].split()[0]) for line in rows]
    assert len(rows) >= 10 and cosines == sorted(cosines) and cosines[0] < 1.0
    assert "[sensitivity" in captured.err  # progress


def test_channel_pruning_shrinks_the_model(resnet, tmp_path, capsys):
    output = tmp_path / "slim.onnx"
    assert main(["prune", str(resnet), "-o", str(output), "--sparsity", "0.5", "--structured", "channel"]) == 0
    assert output.stat().st_size < 0.45 * resnet.stat().st_size
    assert "channels_removed" in capsys.readouterr().out


@pytest.mark.parametrize("arguments, message", [
    (["--sparsity", "1.5"], "sparsity must be in [0, 1)"),
    (["--sparsity", "0.5", "--structured", "3:2"], "N:M with 0 < N < M"),
    (["--sparsity", "0.5", "--structured", "channel", "--sensitivity"], "--sensitivity measures single layers"),
])
def test_bad_options_are_usage_errors(resnet, tmp_path, capsys, arguments, message):
    assert main(["prune", str(resnet), "-o", str(tmp_path / "p.onnx")] + arguments) == 2
    assert message in capsys.readouterr().err


def test_never_overwrites_its_input(resnet, capsys):
    before = resnet.read_bytes()
    assert main(["prune", str(resnet), "-o", str(resnet), "--sparsity", "0.5"]) == 2
    assert "never overwrites its input" in capsys.readouterr().err and resnet.read_bytes() == before
