"""The partition view driven from Python: the SVG colours nodes by device, the table times every segment, choosing
a segment lists its nodes; a session's segment_times add up to about a run."""
import numpy as np
import pytest

import ortx
from ortx.widgets import PartitionView
from tests import _models

PROVIDERS = ["OrtxEP", "CPUExecutionProvider"]


@pytest.fixture(scope="module")
def view():
    model = _models.lstm_classifier()  # OrtxEP, then ORT's LSTM, then OrtxEP again
    session = ortx.InferenceSession(model.SerializeToString(), providers=PROVIDERS)
    arg = session.get_inputs()[0]
    feeds = {arg.name: np.random.default_rng(0).standard_normal(arg.shape).astype(np.float32)}
    return PartitionView(session, feeds, runs=3)


def test_the_drawing_and_table_show_every_segment_by_device(view):
    assert view.drawing.value.lstrip().startswith("<svg") or "<svg" in view.drawing.value
    devices = [time.device for time in view.times]
    assert devices == ["cpu", "ORT", "cpu"]
    assert all(time.median_ms > 0 for time in view.times)
    assert view.table.value.count("<tr>") == 1 + len(view.times)
    assert "lstm" in "".join(view.times[1].nodes).lower()


def test_choosing_a_segment_lists_its_nodes_and_measure_times_again(view):
    view.segment.value = 1
    assert view.nodes.value == ", ".join(view.times[1].nodes)
    before = view.times
    view.measure_button.click()
    assert view.times is not before and len(view.times) == len(before)


def test_segment_times_on_a_whole_ort_session_is_a_clear_error():
    session = ortx.InferenceSession(_models.tiny_conv_relu().SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(RuntimeError, match="ORT runs this whole model"):
        session.segment_times({"X": np.ones((1, 3, 8, 8), np.float32)})
