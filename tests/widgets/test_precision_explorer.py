"""The precision explorer driven from Python: seeded as the search chooses, each dropdown change measured again,
the exported model what was shown."""
import numpy as np
import onnx
import onnxruntime
import pytest

from ortx.model_io import to_ort_bytes
from ortx.quantization.mixed_precision import mixed_precision
from ortx.widgets import PrecisionExplorer
from tests import _models

BUDGET = 0.07


def _calibration(count=6):
    return {"X": np.random.default_rng(0).standard_normal((count, 3, 12, 12)).astype(np.float32)}


@pytest.fixture(scope="module")
def explorer():
    return PrecisionExplorer(_models.mixed_precision_net(), _calibration(), budget=BUDGET,
                             precisions=["fp32", "fp16", "int8", "int4"])


def test_seeded_with_the_searchs_choice_and_within_the_budget(explorer):
    _, report = mixed_precision(_models.mixed_precision_net(), _calibration(), budget=BUDGET,
                                precisions=["fp32", "fp16", "int8", "int4"])
    assert explorer.assignment == {choice.node: choice.precision for choice in report.layers}
    assert explorer.error == pytest.approx(report.error) and explorer.error <= BUDGET
    assert "within the budget" in explorer.estimate.value
    assert len(explorer.layers) == 4  # conv, conv, gemm, matmul


def test_changing_a_layer_measures_the_model_again(explorer):
    seeded = dict(explorer.assignment)
    for dropdown in explorer.layers.values():
        dropdown.value = "fp32"
    assert explorer.error == 0.0 and explorer.size_bytes == pytest.approx(explorer.fp32_bytes, rel=0.02)
    gemm = next(node for node in explorer.layers if "gemm" in node)
    explorer.layers[gemm].value = "int4"
    assert explorer.error > 0 and explorer.size_bytes < explorer.fp32_bytes
    assert "1 int4" in explorer.estimate.value
    explorer.set_precisions(seeded)
    assert explorer.assignment == seeded
    with pytest.raises(ValueError, match="unknown layer"):
        explorer.set_precisions({"no_such_node": "int8"})


def test_export_writes_the_chosen_model_and_latency_is_measured(explorer, tmp_path):
    explorer.path.value = str(tmp_path / "mixed.onnx")
    explorer.export_button.click()
    written = onnx.load(tmp_path / "mixed.onnx")
    onnx.checker.check_model(written)
    assert written.ByteSize() == explorer.size_bytes
    session = onnxruntime.InferenceSession(to_ort_bytes(written), providers=["CPUExecutionProvider"])
    assert session.run(None, {"X": _calibration(1)["X"]})[0].shape == (1, 10)
    explorer.latency_button.click()
    assert "ms vs fp32" in explorer.latency.value
