"""Mixed precision: budget 0 keeps exact precisions, a huge budget takes the smallest everywhere, a middle budget
holds its measured error (re-measured here) at a size in between; the sensitivity ranking finds a layer made
sensitive on purpose; bad options fail naming the option; `ortx quantize --mixed` writes a model ORT runs."""
import importlib
import json
import math

import numpy as np
import onnx
import onnxruntime
import pytest

from ortx.cli import main
from ortx.model_io import to_ort_bytes
from ortx.quantization.mixed_precision import mixed_precision
from ortx.quantization.precisions import PrecisionError
from tests import _models

mixed_module = importlib.import_module("ortx.quantization.mixed_precision")  # the package re-exports the function

ALL = "fp32,fp16,bf16,int8,int4"


def _calibration(count=6):
    return {"X": np.random.default_rng(0).standard_normal((count, 3, 12, 12)).astype(np.float32)}


def _outputs(model, inputs):
    session = onnxruntime.InferenceSession(to_ort_bytes(model), providers=["CPUExecutionProvider"])
    return [session.run(None, {"X": inputs[index:index + 1]})[0] for index in range(len(inputs))]


def _relative_l2(model, reference_model, inputs):
    candidate, reference = _outputs(model, inputs), _outputs(reference_model, inputs)
    error = sum(float(np.sum((c.astype(np.float64) - r) ** 2)) for c, r in zip(candidate, reference))
    return math.sqrt(error / sum(float(np.sum(r.astype(np.float64) ** 2)) for r in reference))


@pytest.fixture(scope="module")
def runs():
    """One search per budget on the same model (each ~1 s)."""
    model = _models.mixed_precision_net()
    return model, {budget: mixed_precision(model, _calibration(), budget=budget, precisions=ALL, block_size=16)
                   for budget in (0.0, 0.07, 100.0)}


def test_budget_zero_keeps_exact_precisions(runs):
    model, results = runs
    mixed, report = results[0.0]
    assert report.error == 0.0
    assert all(layer.precision == "fp32" or layer.sensitivity[layer.precision] == 0 for layer in report.layers)
    inputs = _calibration()["X"]
    for got, expected in zip(_outputs(mixed, inputs), _outputs(model, inputs)):
        np.testing.assert_array_equal(got, expected)


def test_huge_budget_takes_the_smallest_everywhere(runs):
    _, results = runs
    mixed, report = results[100.0]
    onnx.checker.check_model(mixed, full_check=True)
    for layer in report.layers:
        sizes = {record.precision: record.bytes for record in report.sensitivity if record.node == layer.node}
        assert layer.bytes == min(sizes.values()) and layer.precision == "int4", (layer.node, sizes)
    assert report.bytes_after < 0.4 * report.bytes_before
    assert report.counts == {"int4": 4} and report.steps[0].upgrades == 0


def test_middle_budget_measured_error_within_and_size_between(runs):
    model, results = runs
    mixed, report = results[0.07]
    onnx.checker.check_model(mixed, full_check=True)
    assert report.error <= 0.07
    assert _relative_l2(mixed, model, _calibration()["X"]) == pytest.approx(report.error, rel=1e-6, abs=1e-9)
    assert results[100.0][1].bytes_after < report.bytes_after < report.bytes_before
    # the cheapest-alone mix measured over this budget, so the search backed off and measured the answer
    assert not report.steps[0].within_budget and len(report.steps) >= 2
    assert report.steps[-1].within_budget or any(step.within_budget and step.error == report.error
                                                 for step in report.steps)
    table = report.table()
    assert "search: 0 upgrades" in table and all(layer.node in table for layer in report.layers)
    assert json.loads(json.dumps(report.to_dict()))["counts"] == report.counts


def test_sensitivity_ranking_finds_the_sensitive_layer():
    model = _models.mixed_precision_net(sensitive=True)
    _, report = mixed_precision(model, _calibration(), budget=0.01, precisions="fp32,fp16,int8,int4")
    conv2 = [node.name for node in model.graph.node if node.op_type == "Conv"][1]
    for precision in ("int8", "int4"):
        ranked = sorted(report.layers, key=lambda layer: -layer.sensitivity[precision])
        assert ranked[0].node == conv2, precision
        assert ranked[0].sensitivity[precision] > 3 * ranked[1].sensitivity[precision]  # int8 ~160x, int4 ~6x
    chosen = {layer.node: layer.precision for layer in report.layers}
    assert chosen[conv2] in ("fp32", "fp16") and report.error <= 0.01


def test_user_metric_and_latency_objective():
    def max_abs(reference, candidate):
        return max(float(np.max(np.abs(c[0] - r[0]))) for r, c in zip(reference, candidate))

    model = _models.mixed_precision_net()
    mixed, report = mixed_precision(model, _calibration(3), budget=0.05, metric=max_abs, objective="latency",
                                    precisions="fp32,fp16,int8")
    assert report.metric == "max_abs" and report.error <= 0.05
    assert all(record.latency_ms > 0 and record.fp32_latency_ms > 0 for record in report.sensitivity
               if record.precision != "fp32")
    assert report.latency_ms > 0 and report.fp32_latency_ms > 0
    inputs = _calibration(3)["X"]
    assert max(float(np.max(np.abs(c - r))) for c, r in zip(_outputs(mixed, inputs), _outputs(model, inputs))) \
        == pytest.approx(report.error, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("options, error, match", [
    ({"budget": -0.1}, ValueError, "budget must be a finite number >= 0"),
    ({"budget": "0.01"}, ValueError, "budget must be a finite number >= 0"),
    ({"budget": float("nan")}, ValueError, "budget must be"),
    ({"budget": True}, ValueError, "budget must be"),
    ({"budget": 0.01, "precisions": "fp32,fp8"}, PrecisionError, "precisions: unknown 'fp8'"),
    ({"budget": 0.01, "objective": "speed"}, ValueError, "objective must be one of size, latency"),
    ({"budget": 0.01, "metric": "mae"}, ValueError, "metric must be one of relative_l2, cosine"),
    ({"budget": 0.01, "block_size": -1}, ValueError, "block_size must be"),
    ({"budget": 0.01, "exclude_nodes": ["nope"]}, ValueError, "'nope' not in the model"),
])
def test_bad_options_name_the_option(options, error, match):
    with pytest.raises(error, match=match):
        mixed_precision(_models.mixed_precision_net(), _calibration(2), **options)


def test_a_precision_onnxruntime_cannot_run_is_refused(monkeypatch):
    monkeypatch.setattr(mixed_module, "ort_support",
                        lambda precision: "no kernel for DequantizeLinear(int4)" if precision == "int4" else None)
    with pytest.raises(PrecisionError, match="precisions: int4 cannot be used: no kernel"):
        mixed_precision(_models.mixed_precision_net(), _calibration(2), budget=0.01, precisions="fp32,int4")


def test_command_writes_mixed_model(tmp_path, capsys):
    source = tmp_path / "net.onnx"
    source.write_bytes(_models.mixed_precision_net().SerializeToString())
    original = source.read_bytes()
    data = tmp_path / "calibration.npz"
    np.savez(data, **_calibration(4))
    output, report = tmp_path / "mixed.onnx", tmp_path / "report.json"
    status = main(["quantize", str(source), "-o", str(output), "--calibration", str(data), "--mixed", "--budget",
                   "0.02", "--precisions", "fp32,fp16,int8,int4", "--report", str(report)])
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "mixed precision: budget 0.02 (relative_l2), objective size" in printed
    assert source.read_bytes() == original
    model = onnx.load(str(output))
    onnx.checker.check_model(model, full_check=True)
    assert _relative_l2(model, _models.mixed_precision_net(), _calibration(4)["X"]) <= 0.02
    assert json.loads(report.read_text())["budget"] == 0.02


@pytest.mark.parametrize("arguments, message", [
    (["--mixed", "--budget", "abc"], "--budget must be a finite number >= 0"),
    (["--mixed"], "--budget must be a finite number >= 0"),
    (["--mixed", "--budget", "-1"], "--budget must be"),
    (["--budget", "0.01"], "--budget needs --mixed"),
    (["--mixed", "--budget", "0.01", "--precisions", "fp32,int3"], "--precisions: unknown 'int3'"),
])
def test_command_bad_options_exit_2(tmp_path, capsys, arguments, message):
    source = tmp_path / "net.onnx"
    source.write_bytes(_models.mixed_precision_net().SerializeToString())
    data = tmp_path / "calibration.npz"
    np.savez(data, **_calibration(2))
    output = tmp_path / "out.onnx"
    assert main(["quantize", str(source), "-o", str(output), "--calibration", str(data), *arguments]) == 2
    assert message in capsys.readouterr().err
    assert not output.exists()


def test_reused_sensitivity_gives_the_same_answer_without_measuring_layers(runs):
    model, results = runs
    first = results[0.07][1]
    mixed, report = mixed_precision(model, _calibration(), budget=0.07, precisions=ALL, block_size=16,
                                    sensitivity=first.sensitivity)
    assert report.sensitivity_reused and "sensitivity reused" in report.summary()
    assert [layer.precision for layer in report.layers] == [layer.precision for layer in first.layers]
    assert report.error == first.error
    with pytest.raises(ValueError, match="sensitivity: no record for conv_3 at int4"):
        mixed_precision(model, _calibration(), budget=0.07, precisions=ALL,
                        sensitivity=[record for record in first.sensitivity if record.precision != "int4"])
    with pytest.raises(ValueError, match="sensitivity: objective latency needs timed records"):
        mixed_precision(model, _calibration(), budget=0.07, precisions=ALL, objective="latency",
                        sensitivity=first.sensitivity)


def test_command_reuses_a_report_sensitivity(tmp_path, capsys):
    source = tmp_path / "net.onnx"
    source.write_bytes(_models.mixed_precision_net().SerializeToString())
    data = tmp_path / "calibration.npz"
    np.savez(data, **_calibration(4))
    first, second, report = tmp_path / "first.onnx", tmp_path / "second.onnx", tmp_path / "report.json"
    common = ["--calibration", str(data), "--mixed", "--precisions", "fp32,fp16,int8,int4"]
    assert main(["quantize", str(source), "-o", str(first), *common, "--budget", "0.01", "--report", str(report)]) == 0
    assert main(["quantize", str(source), "-o", str(second), *common, "--budget", "0.05", "--sensitivity",
                 str(report)]) == 0
    printed = capsys.readouterr().out
    assert "(sensitivity reused)" in printed and "budget 0.05" in printed
    onnx.checker.check_model(onnx.load(str(second)), full_check=True)
    assert main(["quantize", str(source), "-o", str(tmp_path / "third.onnx"), *common, "--budget", "0.05",
                 "--sensitivity", str(data)]) == 2
    assert "--sensitivity" in capsys.readouterr().err
