"""The notebooks run headless, top to bottom, and show what their text says (cells executed in-process, as
`jupyter nbconvert --execute` would, with matplotlib's non-interactive backend)."""
from __future__ import annotations

import json
import os

import matplotlib
import pytest

NOTEBOOKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "notebooks")


def _run(name: str) -> dict:
    with open(os.path.join(NOTEBOOKS, name)) as handle:
        notebook = json.load(handle)
    namespace: dict = {}
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        # House style: notebooks narrate and call ortx; library code lives in ortx, not in cells.
        assert "def " not in source and "class " not in source, source
        exec(compile(source, f"{name}:{cell.get('id', '?')}", "exec"), namespace)
    return namespace


@pytest.fixture(autouse=True)
def _agg_backend():
    previous = matplotlib.get_backend()
    matplotlib.use("Agg")
    yield
    matplotlib.use(previous)


def test_memory_plan_notebook_plans_rec_and_plots_every_buffer():
    namespace = _run("memory_plan.ipynb")
    report, segment, ax = namespace["report"], namespace["segment"], namespace["ax"]
    assert report.planned_bytes <= 1.05 * report.lower_bound_bytes  # issue #6's bar, as the text says
    assert report.naive_bytes > report.ort_style_bytes > report.planned_bytes
    assert len(ax.patches) == len(segment.plan.lifetimes)
    import matplotlib.pyplot as plt

    plt.close("all")


def test_quickstart_optimizes_and_compares_ortxep_with_ort():
    namespace = _run("01_quickstart.ipynb")
    assert namespace["reports"] and len(namespace["optimized"].graph.node) < 566  # cls has 566 nodes as shipped
    for row in namespace["rows"]:
        assert row.cosine > 0.9999 and row.ortx_ms > 0 and row.ort_ms > 0
    assert namespace["assignment"].claimed_mac_share > 0.9


def test_tuning_notebook_tunes_and_applies_the_records():
    namespace = _run("02_tuning.ipynb")
    dashboard = namespace["dashboard"]
    assert dashboard.error is None and dashboard.result is not None
    assert dashboard.result.schedule.stopped in ("trials", "done") and dashboard.tasks  # 24 trials or all
    assert all(ms > 0 for ms in dashboard.apply_ms)
    assert namespace["tuned_session"] is dashboard.session


def test_quantization_notebook_quantizes_and_explores_precisions():
    namespace = _run("03_quantization.ipynb")
    assert namespace["cosine"] > 0.99
    explorer = namespace["explorer"]
    assert set(explorer.assignment.values()) == {"int8"}  # the last cell put every layer at int8
    assert explorer.error > 0 and os.path.exists(namespace["mixed_path"])


def test_memory_and_partitioning_notebook_shows_the_arena_and_a_mixed_partition():
    namespace = _run("04_memory_and_partitioning.ipynb")
    memory = namespace["memory"]
    assert memory.selected.nbytes == max(t.nbytes for t in memory.report.segments[0].tensors)
    partition = namespace["partition"]
    assert {time.device for time in partition.times} == {"npu", "cpu"}
    assert namespace["same"] is True
