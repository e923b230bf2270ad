"""`ortx tune MODEL [--budget 10m]`: tunes a model's tasks within a time budget (ortx.tune.tune_model), then
records, per claimed segment and for the whole model, whether OrtxEP or ORT is faster here. Argument parsing,
progress and the report only.

Sessions created later on this machine (provider option tuning="cached", the default) read those records: they
run each kernel step on its recorded thread count where that was validated faster, each segment on the engine
that was faster, and the whole model on ORT where ORT ran it all faster.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
import time

from ortx.cli_args import input_shape
from ortx.ep.precision import BF16_COMPUTE, PRECISIONS

DESCRIPTION = """\
Tunes MODEL here and records the results in the tuning database under this machine's hardware fingerprint:
1. a task scheduler spends the --budget on the model's tuning tasks (each kernel step's thread count, on 1, 2,
   4 ... up to --threads threads, and the schedule of each generated GEMM that can replace a gemm_f32 step of at
   least 1M multiply-adds: MatMul, Gemm and 1x1 convs), the tasks whose next round is expected to cut the
   end-to-end time most first, printing one line per round on stderr (elapsed/budget, tasks, trials, best-so-far
   ms, the estimated end-to-end ms) and a table per task at the end;
2. per segment, the chosen thread counts are validated end to end against the default, and the segment OrtxEP
   claims is measured against ONNX Runtime running the same nodes (same threads, seeded random inputs);
3. the tuned model as a whole is measured against ONNX Runtime running all of it (a win for ORT is confirmed in
   fresh processes where the budget leaves time for them).
Later sessions (OrtxEP option tuning="cached", the default) run a step on fewer threads where that was validated
faster, call a tuned generated GEMM where it beat the prebuilt kernel by more than 2%, give a segment back to ORT
when ORT was faster by more than 2%, and the whole model when ORT ran all of it faster by more than 2% (step 3, the
latest measurement). Records already in the database are never measured again, so a second run resumes. --budget
(90s, 10m, 1h) bounds the command's wall time from its start, after Python's start-up (the share of steps 2 and 3
is estimated and reserved first; a tight budget can be overrun by that estimate's error); the default is 10m (the
issue's per-model bound), and --budget none searches every task to the end (hours on a large model: every GEMM
task compiles hundreds of kernels). --mode full measures longer than quick;
--precision bf16 tunes for sessions with OrtxEP's precision "bf16" (--fp32-nodes: with that fp32_nodes option):
their kernels, steps and segments are recorded under signatures of their own, so fp32 and bf16 records coexist.
--export writes this model's records to a JSON file that ships with the model, --import merges such a file
(records measured on another machine are kept but never used here). exit status: 0 ok, 2 usage or input error."""

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smh])")
_SECONDS = {"s": 1, "m": 60, "h": 3600}


DEFAULT_BUDGET = "10m"


def budget_duration(text: str) -> float | None:
    """'90s' / '10m' / '1h' (decimals allowed) -> seconds, 'none' -> None (no bound); an argparse type, so a bad
    value names --budget."""
    if text.strip().lower() == "none":
        return None
    match = _DURATION.fullmatch(text.strip().lower())
    seconds = float(match.group(1)) * _SECONDS[match.group(2)] if match else 0.0
    if not match or seconds <= 0 or not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(f"expected a positive duration with a unit, like 90s, 10m or 1h, or none, got {text!r}")
    return seconds


def add_tune_command(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("tune", help="tune a model's kernels within a budget and record, per claimed "
                                   "segment, whether OrtxEP or ORT is faster here",
                                   description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", help="ONNX model path (optional with --import alone)")
    parser.add_argument("--input-shape", metavar="NAME:D1xD2x...", type=input_shape, action="append", default=[],
                        help="fix an input's shape (repeat for several inputs); needed for dynamic dims")
    parser.add_argument("--budget", type=budget_duration, metavar="DURATION", default=DEFAULT_BUDGET,
                        help=f"wall time for the whole command: 90s, 10m, 1h, or none for no bound "
                             f"(default {DEFAULT_BUDGET})")
    parser.add_argument("--threads", type=int, default=2, help="threads for both engines (default 2)")
    parser.add_argument("--mode", choices=("quick", "full"), default="quick", help="measurement length")
    parser.add_argument("--seed", type=int, default=0, help="the task scheduler's seed (default 0)")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32",
                        help="the OrtxEP precision option of the sessions to tune for (default fp32); bf16 "
                             "sessions have records of their own")
    parser.add_argument("--fp32-nodes", metavar="NODE,...", default="",
                        help="with --precision bf16: the sessions' fp32_nodes option (layers kept at fp32 accuracy)")
    parser.add_argument("--bf16-compute", choices=BF16_COMPUTE, default="auto",
                        help="with --precision bf16: the sessions' bf16_compute option (default auto: fp32 kernels, "
                             "and so fp32 records, where this CPU's bf16 would be slower)")
    parser.add_argument("--cache-dir", help="where the tuning database is (default: ORTX_CACHE_DIR or ~/.cache/ortx)")
    parser.add_argument("--export", metavar="RECORDS.json", help="write this model's records to a file")
    parser.add_argument("--import", dest="import_path", metavar="RECORDS.json", help="merge a records file first")
    parser.set_defaults(handler=run_tune_command)
    return parser


def _progress_line(report, budget_seconds: float | None, elapsed: float) -> str:
    """One search round: the command's elapsed time/budget, the round's first task, its trials and best, the
    estimated end-to-end time."""
    budget = f"{budget_seconds:.0f}" if budget_seconds is not None else "-"
    more = f" (+{len(report.tasks) - 1} tasks)" if len(report.tasks) > 1 else ""
    return (f"[{elapsed:7.1f}/{budget} s] round {report.index + 1}: task "
            f"{report.tasks[0] + 1} {_short(report.signatures[0], 36)}{more}: trials {report.task_trials[0]}, "
            f"best {report.task_best_ms[0]:.4f} ms | est. end to end {report.estimated_ms:.3f} ms")


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def render_tuning(tuning, budget_seconds: float | None, seconds: float) -> str:
    """The final report: the search summary, a row per task (largest untuned share first), per segment its thread
    counts and engine."""
    schedule = tuning.schedule
    trials = sum(task.result.measured for task in schedule.tasks)
    recorded = sum(task.result.recorded for task in schedule.tasks)
    search_budget = (f"{tuning.search_budget_seconds:.1f} s" if tuning.search_budget_seconds is not None
                     else "no bound")
    lines = [f"search: {len(schedule.tasks)} tasks, {trials} new trials ({recorded} recorded before) in "
             f"{len(schedule.rounds)} rounds, {tuning.search_seconds:.1f} s of {search_budget}, stopped: "
             f"{schedule.stopped}",
             f"estimated end to end: {schedule.untuned_ms:.3f} -> {schedule.estimated_ms:.3f} ms (profiled steps and "
             f"the rest; measured untuned: {tuning.untuned_ms:.3f} ms)"]
    if schedule.tasks:
        lines.append(f"  {'#':>3}  {'task':<48} {'weight':>6} {'trials':>7} {'default ms':>10} {'best ms':>9}  "
                     f"{'best schedule':<14} {'est. gain ms':>12}")
        shares = [task.result.task.weight * (task.untuned_ms or 0.0) for task in schedule.tasks]
        for index in sorted(range(len(schedule.tasks)), key=lambda i: (-shares[i], i)):
            task = schedule.tasks[index]
            best = task.result.best
            lines.append(f"  {index + 1:>3}  {_short(task.result.task.signature, 48):<48} "
                         f"{task.result.task.weight:>6g} {f'{task.result.measured}+{task.result.recorded}':>7} "
                         f"{_ms(task.default_ms):>10} {_ms(task.best_ms):>9}  "
                         f"{_short(str(best.schedule) if best else '-', 14):<14} {_ms(task.gain_ms):>12}")
    lines.extend(f"  note: {note}" for note in tuning.notes)
    for threads in tuning.segment_threads:
        lines.append(f"segment from {threads.first_node}, per-step threads: {threads.describe}")
    lines.extend(choice.describe() for choice in tuning.layout_choices)
    if not tuning.engine_choices:
        lines.append("OrtxEP claims no segment of this model: nothing to measure against ORT")
    for choice in tuning.engine_choices:
        lines.append(f"segment from {choice.first_node} ({len(choice.nodes)} nodes): {choice.describe} -> "
                     f"{'OrtxEP' if choice.engine == 'ortx' else 'ORT'}")
    if tuning.model_choice is not None:
        lines.append(tuning.model_choice.describe)
    budget = f" of a {budget_seconds:.0f} s budget" if budget_seconds is not None else ""
    lines.append(f"done in {seconds:.1f} s{budget} (compile {tuning.compile_seconds:.1f} s, search "
                 f"{tuning.search_seconds:.1f} s, validation and engine choice {tuning.choose_seconds:.1f} s)")
    return "\n".join(lines) + "\n"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def run_tune_command(args, out=None, err=None) -> int:
    started = time.perf_counter()
    from ortx.config import Options
    from ortx.model_io import ModelLoadError, load
    from ortx.optimize import CheckInputError, random_feeds
    from ortx.tune.records import TuningDatabase, TuningDatabaseError
    from ortx.tune.tune_model import tune_model

    out = out or sys.stdout
    err = err or sys.stderr
    options = Options.from_environment(cache_dir=args.cache_dir)
    database_path = options.cache_dir / "tuning.sqlite"
    if args.model is None and not args.import_path:
        print("ortx tune: error: give a MODEL to tune or --import RECORDS.json", file=err)
        return 2
    if args.threads < 1:
        print(f"ortx tune: error: --threads must be positive, got {args.threads}", file=err)
        return 2
    fp32_nodes = tuple(name for name in args.fp32_nodes.split(",") if name)
    if fp32_nodes and args.precision != "bf16":
        print("ortx tune: error: --fp32-nodes keeps layers fp32 in a bf16 session: give --precision bf16", file=err)
        return 2
    try:
        if args.import_path:
            with TuningDatabase(database_path) as database:
                added = database.import_records(args.import_path)
            out.write(f"imported {added} new records from {args.import_path} into {database_path}\n")
        if args.model is None:
            return 0
        model = load(args.model)
        feeds = random_feeds(model, dict(args.input_shape))  # every dim must be known: names the input and the flag
        shapes = {name: tuple(array.shape) for name, array in feeds.items()}
        budget = f", budget {args.budget:.0f} s" if args.budget is not None else ""
        out.write(f"tuning {args.model} ({args.mode}, {args.threads} threads, {args.precision}{budget}) ...\n")
        out.flush()
        def on_phase(line: str) -> None:
            print(f"[{time.perf_counter() - started:7.1f} s] {line}", file=err, flush=True)

        def on_round(report) -> None:
            print(_progress_line(report, args.budget, time.perf_counter() - started), file=err, flush=True)

        tuning = tune_model(model, shapes, num_threads=args.threads, mode=args.mode, database_path=str(database_path),
                            jit=options, budget_seconds=args.budget, seed=args.seed, started=started,
                            on_round=on_round, on_phase=on_phase, precision=args.precision, fp32_nodes=fp32_nodes,
                            bf16_compute=args.bf16_compute)
        out.write(render_tuning(tuning, args.budget, time.perf_counter() - started))
        out.write(f"records in {database_path}\n")
        if args.export:
            with TuningDatabase(database_path) as database:
                count = database.export(args.export, signatures=set(tuning.signatures))
            out.write(f"wrote {count} records to {args.export}\n")
    except (OSError, ValueError, ModelLoadError, CheckInputError, TuningDatabaseError) as error:
        print(f"ortx tune: error: {error}", file=err)
        return 2
    return 0
