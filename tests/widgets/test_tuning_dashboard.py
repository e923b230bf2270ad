"""The tuning dashboard driven from Python as a user would: set the controls, click, and check what results."""
import numpy as np
import onnx
import onnxruntime
import pytest

from ortx.widgets import TuningDashboard
from ortx.tune.records import TuningDatabase
from tests import _models
from tests.tolerances import assert_close


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "tiny.onnx"
    onnx.save(_models.tiny_conv_relu(), path)
    return path


def test_start_runs_in_the_background_and_apply_uses_the_records(model_path, tmp_path):
    cache = tmp_path / "cache"
    dashboard = TuningDashboard(str(model_path), cache_dir=str(cache), threads=2)
    dashboard.budget.value = "8s"
    dashboard.start_button.click()
    assert dashboard.start_button.disabled and not dashboard.stop_button.disabled  # running; the call returned
    dashboard.wait(120)
    assert dashboard.error is None, dashboard.error
    assert dashboard.result is not None and "done in" in dashboard.status.value
    assert dashboard.tasks and all(task.trials == sorted(task.trials) for task in dashboard.tasks.values())
    assert bytes(dashboard.plot.value).startswith(b"\x89PNG") and "<td>" in dashboard.table.value
    assert any(task.best_schedule for task in dashboard.tasks.values())  # read back from the records
    assert "best schedule" in dashboard.table.value
    with TuningDatabase(cache / "tuning.sqlite") as database:
        assert len(database.records()) > 0
    assert not dashboard.apply_button.disabled
    dashboard.apply_button.click()
    off_ms, cached_ms = dashboard.apply_ms
    assert off_ms > 0 and cached_ms > 0 and "applied" in dashboard.status.value
    reference = onnxruntime.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    assert_close(dashboard.session.run(None, dashboard.feeds)[0], reference.run(None, dashboard.feeds)[0])


def test_stop_ends_the_search_after_the_round_in_flight(model_path, tmp_path):
    dashboard = TuningDashboard(str(model_path), cache_dir=str(tmp_path / "cache"))
    dashboard.budget.value = "10m"
    on_round = dashboard._on_round

    def press_stop_after_the_first_round(report, *args):
        on_round(report, *args)
        dashboard.stop_button.click()

    dashboard._on_round = press_stop_after_the_first_round
    dashboard.start()
    dashboard.wait(300)
    assert dashboard.error is None, dashboard.error
    assert dashboard.result.schedule.stopped == "requested" and len(dashboard.result.schedule.rounds) == 1
    assert not dashboard.start_button.disabled and dashboard.stop_button.disabled


def test_a_bad_budget_is_shown_and_nothing_starts(model_path, tmp_path):
    dashboard = TuningDashboard(str(model_path), cache_dir=str(tmp_path / "cache"))
    dashboard.budget.value = "ten minutes"
    dashboard.start_button.click()
    assert "budget" in dashboard.status.value and "like 90s" in dashboard.status.value
    assert dashboard._thread is None and not dashboard.start_button.disabled
