"""`ortx tune MODEL --budget ...`: the budget option's parsing and errors, progress on stderr, the per-task table,
records a second run resumes from, and a budget spent before the search starts."""
import re

import pytest

from ortx.cli import main
from ortx.tune import step_threads
from ortx.tune.command import budget_duration
from ortx.tune.records import TuningDatabase
from tests import _models


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("10m", 600), ("1h", 3600), ("1.5h", 5400), ("5S", 5),
                                           (" 2m ", 120)])
def test_budget_takes_seconds_minutes_and_hours(text, seconds):
    assert budget_duration(text) == seconds


def test_the_default_budget_is_ten_minutes_and_none_removes_the_bound():
    from ortx.tune.command import add_tune_command
    import argparse

    parser = argparse.ArgumentParser()
    add_tune_command(parser.add_subparsers())
    assert parser.parse_args(["tune", "model.onnx"]).budget == 600
    assert parser.parse_args(["tune", "model.onnx", "--budget", "none"]).budget is None


@pytest.mark.parametrize("text", ["10", "10x", "m", "-5m", "0s", "1h30m", "ten minutes"])
def test_a_bad_budget_is_a_usage_error_naming_the_option(tmp_path, capsys, text):
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", str(tmp_path / "model.onnx"), f"--budget={text}"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "argument --budget" in error and "like 90s, 10m or 1h" in error and repr(text) in error


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.onnx"
    path.write_bytes(_models.tiny_conv_relu().SerializeToString())
    return path


def test_a_tiny_model_is_tuned_within_the_budget_with_progress_and_a_table(tmp_path, tiny, capsys):
    cache = tmp_path / "cache"
    assert main(["tune", str(tiny), "--cache-dir", str(cache), "--budget", "5s"]) == 0
    captured = capsys.readouterr()
    rounds = [line for line in captured.err.splitlines() if " round " in line]
    assert rounds and re.match(r"\[\s*\d+\.\d/5 s\] round 1: task 1 conv2d_f32\|.*: trials 2, best \d+\.\d{4} ms \| "
                               r"est\. end to end \d+\.\d{3} ms$", rounds[0]), rounds
    assert "compiling with tuning off" in captured.err and "searching 1 tasks for at most" in captured.err
    out = captured.out
    assert "search: 1 tasks, 2 new trials (0 recorded before) in 1 rounds" in out and "stopped: done" in out
    table = [line for line in out.splitlines() if line.strip().startswith("1  conv2d_f32|")]
    assert len(table) == 1 and " 2+0 " in table[0] and "threads=" in table[0]
    assert "per-step threads:" in out and "(measured) ->" in out
    seconds = float(re.search(r"done in (\d+\.\d) s of a 5 s budget", out).group(1))
    assert seconds <= 5.0
    with TuningDatabase(cache / "tuning.sqlite") as database:
        rows = database.records(template=step_threads.TEMPLATE)
    assert sorted(row.schedule.get("threads") for row in rows if "threads" in row.schedule) == [1, 2]
    assert {row.source for row in rows if "threads" in row.schedule} == {"scheduler:quick"}

    assert main(["tune", str(tiny), "--cache-dir", str(cache), "--budget", "5s"]) == 0
    again = capsys.readouterr()
    assert "0 new trials (2 recorded before) in 0 rounds" in again.out and " round " not in again.err
    assert "(records) ->" in again.out


def test_a_budget_spent_before_the_search_measures_no_task_but_still_chooses_engines(tmp_path, tiny, capsys):
    assert main(["tune", str(tiny), "--cache-dir", str(tmp_path / "cache"), "--budget", "0.01s"]) == 0
    out = capsys.readouterr().out
    assert "0 new trials (0 recorded before) in 0 rounds" in out and "stopped: budget" in out
    assert "(measured) ->" in out  # the engine choice is what a tuned model needs most: it always runs
    assert "per-step threads: no step faster on fewer threads: default kept" in out
    with TuningDatabase(tmp_path / "cache" / "tuning.sqlite") as database:  # validation searched nothing either
        assert [row for row in database.records(template=step_threads.TEMPLATE) if "threads" in row.schedule] == []


def test_precision_bf16_tunes_the_bf16_sessions_steps_under_records_of_their_own(tmp_path, tiny, capsys):
    """A bf16 session runs bf16 kernels, so `--precision bf16` searches their steps (the task names the kernel) and
    an fp32 run afterwards finds none of its own tasks recorded."""
    cache = tmp_path / "cache"
    assert main(["tune", str(tiny), "--cache-dir", str(cache), "--budget", "5s", "--precision", "bf16"]) == 0
    captured = capsys.readouterr()
    assert "2 threads, bf16" in captured.out.splitlines()[0]
    rounds = [line for line in captured.err.splitlines() if " round " in line]
    assert rounds and re.search(r"task 1 \w*bf16\w*\|", rounds[0]), rounds
    assert "search: 1 tasks, 2 new trials (0 recorded before)" in captured.out
    assert main(["tune", str(tiny), "--cache-dir", str(cache), "--budget", "5s"]) == 0
    again = capsys.readouterr()
    assert "(0 recorded before)" in again.out and "conv2d_f32|" in again.err


def test_fp32_nodes_needs_bf16_and_names_a_node_the_model_lacks(tmp_path, tiny, capsys):
    cache = str(tmp_path / "cache")
    assert main(["tune", str(tiny), "--cache-dir", cache, "--fp32-nodes", "conv"]) == 2
    assert "--fp32-nodes keeps layers fp32 in a bf16 session: give --precision bf16" in capsys.readouterr().err
    assert main(["tune", str(tiny), "--cache-dir", cache, "--precision", "bf16", "--fp32-nodes", "no_such_node",
                 "--budget", "5s"]) == 2
    error = capsys.readouterr().err
    assert "ortx tune: error: OrtxEP option fp32_nodes: 'no_such_node' not in the graph" in error


def test_fp32_nodes_tunes_the_kernels_those_layers_keep(tmp_path, tiny, capsys):
    """Under bf16 with the conv in fp32_nodes the session runs its fp32 kernel: that is the step searched."""
    assert main(["tune", str(tiny), "--cache-dir", str(tmp_path / "cache"), "--budget", "5s", "--precision", "bf16",
                 "--fp32-nodes", "conv_3"]) == 0
    rounds = [line for line in capsys.readouterr().err.splitlines() if " round " in line]
    assert rounds and "task 1 conv2d_f32|" in rounds[0], rounds
