"""The memory view driven from Python: choosing a buffer shows its placement, outlined in the chart, and the
buffers it shares bytes with never live at the same time."""
import onnx
import pytest

from ortx.widgets import MemoryView
from tests import _models


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    path = tmp_path_factory.mktemp("memory") / "mobilenet.onnx"
    onnx.save(_models.mobilenetv2_style(size=32), path)
    return MemoryView.for_model(str(path), {"input": (1, 3, 32, 32)})


def test_the_largest_buffer_is_selected_first_and_selection_updates_details_and_chart(view):
    tensors = view.report.segments[view.segment.value].tensors
    assert view.selected.nbytes == max(t.nbytes for t in tensors)
    first_chart = bytes(view.chart.value)
    assert first_chart.startswith(b"\x89PNG")
    smallest = min(range(len(tensors)), key=lambda i: tensors[i].nbytes)
    view.buffers.value = smallest
    assert view.selected is tensors[smallest]
    assert f"offset {tensors[smallest].offset} B" in view.details.value
    assert bytes(view.chart.value) != first_chart  # the red outline moved


def test_buffers_sharing_bytes_are_never_live_together(view):
    tensors = view.report.segments[view.segment.value].tensors
    for index in [value for _, value in view.buffers.options[:4]]:  # the four largest (each selection redraws)
        view.buffers.value = index
        tensor = view.selected
        for other in tensors:
            if other is tensor:
                continue
            overlap_bytes = other.offset < tensor.offset + tensor.nbytes and tensor.offset < other.offset + other.nbytes
            if overlap_bytes:
                assert other.last < tensor.first or tensor.last < other.first
                assert other.label[:60] in view.details.value or view.details.value.count("<br>&nbsp;") == 8


def test_a_model_with_no_claimed_segment_is_a_clear_error():
    class Empty:
        segments = ()

    with pytest.raises(ValueError, match="no claimed segment"):
        MemoryView(Empty())
