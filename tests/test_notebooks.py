"""The notebooks run headless, top to bottom, in a real Jupyter kernel (nbclient, as `jupyter nbconvert --execute`
does), and show what their text says: a probe cell appended after the last cell prints the values each test
checks as JSON (the kernel's objects never leave it)."""
from __future__ import annotations

import os

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "notebooks")
PROBE_MARK = "__ortx_probe__"


def _run(name: str, probe: str) -> dict:
    """Executes notebook `name` in a fresh python3 kernel (cwd notebooks/), then `probe`, an expression whose
    JSON-able value is returned."""
    import json

    notebook = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    for cell in notebook.cells:
        # House style: notebooks narrate and call ortx; library code lives in ortx, not in cells.
        assert cell.cell_type != "code" or ("def " not in cell.source and "class " not in cell.source), cell.source
    notebook.cells.append(nbformat.v4.new_code_cell(
        f"import json as _json\nprint({PROBE_MARK!r} + _json.dumps({probe}))"))
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": NOTEBOOKS}}).execute()
    for output in notebook.cells[-1].outputs:
        if output.get("name") == "stdout" and PROBE_MARK in output.get("text", ""):
            return json.loads(output["text"].split(PROBE_MARK, 1)[1])
    raise AssertionError(f"{name}: the probe printed nothing: {notebook.cells[-1].outputs}")


def test_memory_plan_notebook_plans_rec_and_plots_every_buffer():
    values = _run("memory_plan.ipynb", "dict(planned=report.planned_bytes, bound=report.lower_bound_bytes, "
                                       "naive=report.naive_bytes, ort=report.ort_style_bytes, "
                                       "patches=len(ax.patches), buffers=len(segment.plan.lifetimes))")
    assert values["planned"] <= 1.05 * values["bound"]  # issue #6's bar, as the text says
    assert values["naive"] > values["ort"] > values["planned"]
    assert values["patches"] == values["buffers"]


def test_quickstart_optimizes_and_compares_ortxep_with_ort():
    values = _run("01_quickstart.ipynb", "dict(nodes=len(optimized.graph.node), reports=len(reports), "
                                         "rows=[[r.cosine, r.ortx_ms, r.ort_ms] for r in rows], "
                                         "claimed=assignment.claimed_mac_share)")
    assert values["reports"] > 5 and values["nodes"] < 566  # cls has 566 nodes as shipped
    for cosine, ortx_ms, ort_ms in values["rows"]:
        assert cosine > 0.9999 and ortx_ms > 0 and ort_ms > 0
    assert values["claimed"] > 0.9


def test_tuning_notebook_tunes_and_applies_the_records():
    values = _run("02_tuning.ipynb", "dict(error=repr(dashboard.error) if dashboard.error else None, "
                                     "stopped=dashboard.result.schedule.stopped, tasks=len(dashboard.tasks), "
                                     "apply=list(dashboard.apply_ms), same=tuned_session is dashboard.session)")
    assert values["error"] is None
    assert values["stopped"] in ("trials", "done") and values["tasks"] > 0  # 8 trials, or every task done
    assert all(ms > 0 for ms in values["apply"]) and values["same"]


def test_quantization_notebook_quantizes_and_explores_precisions():
    values = _run("03_quantization.ipynb", "dict(cosine=cosine, precisions=sorted(set(explorer.assignment.values())),"
                                           " error=explorer.error, written=__import__('os').path.exists(mixed_path))")
    assert values["cosine"] > 0.99
    assert values["precisions"] == ["int8"]  # the last cell put every layer at int8
    assert values["error"] > 0 and values["written"]


def test_memory_and_partitioning_notebook_shows_the_arena_and_a_mixed_partition():
    values = _run("04_memory_and_partitioning.ipynb",
                  "dict(largest=memory.selected.nbytes == max(t.nbytes for t in memory.report.segments[0].tensors), "
                  "devices=sorted({time.device for time in partition.times}), same=bool(same))")
    assert values["largest"] and values["devices"] == ["cpu", "npu"] and values["same"]
