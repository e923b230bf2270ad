"""`ortx quantize`: writes a QDQ model atomically from an .npz, never over its input; bad data exits 2."""
import json

import numpy as np
import onnx
import pytest

from ortx.cli import main
from tests import _models


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "tiny.onnx"
    path.write_bytes(_models.tiny_conv_relu().SerializeToString())
    return path


def test_quantize_writes_qdq_model_and_report(model_file, tmp_path, capsys):
    data = tmp_path / "calibration.npz"
    np.savez(data, X=np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32))
    original = model_file.read_bytes()
    output, report = tmp_path / "out.onnx", tmp_path / "report.json"
    status = main(["quantize", str(model_file), "-o", str(output), "--calibration", str(data), "--method", "mse",
                   "--activation-dtype", "int8", "--report", str(report)])
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "mse calibration over 4 samples, int8 activations" in printed and "quantized 1 nodes (Conv 1)" in printed
    assert model_file.read_bytes() == original
    model = onnx.load(str(output))
    onnx.checker.check_model(model)
    assert [node.op_type for node in model.graph.node].count("DequantizeLinear") == 3  # input, weight, bias
    data = json.loads(report.read_text())
    assert data["method"] == "mse" and data["counts"]["biases_int32"] == 1 and data["tensors"][0]["name"] == "X"


def test_errors_exit_2(model_file, tmp_path, capsys):
    data = tmp_path / "wrong.npz"
    np.savez(data, image=np.zeros((2, 3, 8, 8), np.float32))
    assert main(["quantize", str(model_file), "-o", str(tmp_path / "o.onnx"), "--calibration", str(data)]) == 2
    assert "missing input(s) 'X'" in capsys.readouterr().err
    assert main(["quantize", str(model_file), "-o", str(model_file), "--calibration", str(data)]) == 2
    assert "never overwrites its input" in capsys.readouterr().err
    assert main(["quantize", str(model_file), "-o", str(tmp_path / "o.onnx"), "--calibration", str(data),
                 "--exclude", "nope"]) == 2
    assert "'nope' not in the model" in capsys.readouterr().err
    assert not (tmp_path / "o.onnx").exists()


def test_help_explains(capsys):
    with pytest.raises(SystemExit):
        main(["quantize", "--help"])
    text = capsys.readouterr().out
    assert "stacked on the batch axis" in text and "entropy" in text and "--exclude-op-type" in text
