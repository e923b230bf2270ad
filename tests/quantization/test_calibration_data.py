"""Bad calibration data fails before or while calibrating, with the input (and file or sample) named."""
import numpy as np
import pytest

from ortx.quantization import CalibrationDataError, quantize
from ortx.quantization.calibration_data import calibration_set, model_inputs
from tests import _models


@pytest.fixture(scope="module")
def model():
    return _models.tiny_conv_relu()  # input X: float32 [1, 3, 8, 8]


def _samples(count=3, seed=0):
    return np.random.default_rng(seed).standard_normal((count, 3, 8, 8)).astype(np.float32)


def test_npz_file_and_folder(model, tmp_path):
    np.savez(tmp_path / "a.npz", X=_samples(3))
    np.savez(tmp_path / "b.npz", X=_samples(2, seed=1))
    assert len(calibration_set(str(tmp_path / "a.npz"), model)) == 3
    folder = calibration_set(str(tmp_path), model)
    feeds = list(folder)
    assert len(folder) == 5 and len(feeds) == 5 and feeds[0]["X"].shape == (1, 3, 8, 8)
    np.testing.assert_array_equal(feeds[3]["X"], _samples(2, seed=1)[0:1])


@pytest.mark.parametrize("feed, message", [
    ({"Y": _samples(1)}, r"missing input\(s\) 'X'; unknown name\(s\) 'Y'; the model's inputs are X"),
    ({"X": _samples(1).astype(np.float64)}, "input 'X' has dtype float64, the model expects float32"),
    ({"X": _samples(1)[:, :, :, :7]}, r"input 'X' has shape \(1, 3, 8, 7\), the model expects \(1, 3, 8, 8\)"),
    ({"X": np.full((1, 3, 8, 8), np.nan, np.float32)}, "input 'X' has NaN or infinite values"),
    ([1, 2], "a sample must be a dict"),
])
def test_bad_samples_name_the_input(model, feed, message):
    with pytest.raises(CalibrationDataError, match=message):
        quantize(model, [{"X": _samples(1)}, feed])
    with pytest.raises(CalibrationDataError, match="calibration sample 1"):
        quantize(model, [{"X": _samples(1)}, feed])


def test_empty_sets(model, tmp_path):
    with pytest.raises(CalibrationDataError, match="empty"):
        quantize(model, [])
    with pytest.raises(CalibrationDataError, match="empty"):
        quantize(model, {"X": np.zeros((0, 3, 8, 8), np.float32)})
    with pytest.raises(CalibrationDataError, match="has no .npz files"):
        quantize(model, str(tmp_path))
    with pytest.raises(CalibrationDataError, match="does not exist"):
        quantize(model, str(tmp_path / "missing.npz"))


def test_bad_files_name_the_file(model, tmp_path):
    np.savez(tmp_path / "wrong.npz", image=_samples(2))
    with pytest.raises(CalibrationDataError, match=r"wrong.npz' sample 0: missing input\(s\) 'X'"):
        quantize(model, str(tmp_path / "wrong.npz"))
    (tmp_path / "text.npz").write_text("not a zip")
    with pytest.raises(CalibrationDataError, match="cannot read calibration file"):
        quantize(model, str(tmp_path / "text.npz"))
    with pytest.raises(CalibrationDataError, match="different sample counts"):
        quantize(model, {"X": _samples(2), "Z": _samples(3)})
    with pytest.raises(CalibrationDataError, match="must be an .npz path"):
        quantize(model, 42)


def test_negative_dim_value_is_dynamic(model):
    """Paddle exports write dim_value -1 for dynamic dims (PP-OCR cls); only positive dims are checked."""
    model = type(model)()
    model.CopyFrom(_models.tiny_conv_relu())
    model.graph.input[0].type.tensor_type.shape.dim[3].dim_value = -1
    assert model_inputs(model)[0].shape == (1, 3, 8, None)
    assert len(list(calibration_set({"X": _samples(2)[..., :5]}, model))) == 2
