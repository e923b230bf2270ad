"""A give-back to ORT confirmed by a fresh process: one measurement can fall in a period where OrtxEP runs slow.

Why: on the 2-vCPU VMs these numbers come from, there are periods of seconds to minutes in which the two vCPUs
slow each other down whenever both compute, and OrtxEP's two-thread runs of ResNet-18-style slow ~1.45x while
OrtxEP at 1 thread keeps its speed (one process alternating four sessions for 60 s: OrtxEP 2 threads 14.4-15.7 ms,
in two such periods 21.2-25.1; OrtxEP 1 thread 26.5-28.6 ms throughout; ORT at 2 threads 17.5-18.5 there, though
1.37x slower in a later period; two independent one-thread sessions run at once 1.48x slower). Every ResNet conv
slows 1.2-1.9x and the maxpool 2.8x. These are the periods in which the host places the two vCPUs far apart: a
cache line's round trip between the threads ~330 ns instead of ~60 (BENCHMARKS.md, "End to end after ortx tune",
(B); ortx.host_contention's far_cores), so every exchange of data between the threads is slow. About one process
in four starts in such a period. `ortx tune` measured OrtxEP in one and gave ResNet-18-style back to ORT, which a
separate process then measured 15% slower than OrtxEP.

So when engine_choice's measurement says ORT is faster, up to CONFIRM_PROCESSES fresh Python processes measure
the same nodes again, later, the way engine_choice does (the nodes compiled with tuning off into one segment and
timed by engine_choice._measure against ORT's sub-session on the same nodes, interleaved blocks: timing whole
sessions instead would charge ortx.InferenceSession's per-run overhead, ~12 us against ORT's ~5 us on a one-Relu
model, to OrtxEP alone, and a test's tiny conv went back to ORT that way), and the segment goes back only if
every measurement agrees; the confirming times are recorded too, and the decision (here and from records later)
takes each engine's fastest measurement. A confirmation that cannot run (no interpreter, timeout, error) leaves the
first measurement to decide, with a warning.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile

import onnx

logger = logging.getLogger(__name__)

CONFIRM_PROCESSES = 2
TIMEOUT_S = 300.0


def measure_in_fresh_process(sub_model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], *, threads: int,
                             runs: int, precision: str, only_step: bool = True) -> tuple[float, float] | None:
    """(OrtxEP ms, ORT ms) of `sub_model` measured by a new Python process, or None (with a warning) if it failed.
    `only_step`: the segment is its model's only step (ORT's sub-session then gets the options of a session of its
    own, as engine_choice._measure gives it)."""
    with tempfile.TemporaryDirectory(prefix="ortx-confirm-") as folder:
        path = os.path.join(folder, "segment.onnx")
        with open(path, "wb") as file:
            file.write(sub_model.SerializeToString())
        command = [sys.executable, "-m", "ortx.tune.engine_confirm", path, "--threads", str(threads),
                   "--runs", str(runs), "--precision", precision, "--shapes", json.dumps(shapes)]
        if not only_step:
            command.append("--shares-cores")
        return _run(command)


def measure_model_in_fresh_process(proto: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], *, threads: int,
                                   runs: int, precision: str, database_path: str,
                                   fp32_nodes: tuple[str, ...] = ()) -> tuple[float, float] | None:
    """(OrtxEP ms, ORT ms) of the whole model, tuned from `database_path`'s records (the whole-model ones left
    out) against ORT running all of it, measured by a new Python process (ortx.tune.model_choice), or None with a
    warning. `precision`: the kernels' (effective) precision."""
    with tempfile.TemporaryDirectory(prefix="ortx-confirm-") as folder:
        path = os.path.join(folder, "model.onnx")
        with open(path, "wb") as file:
            file.write(proto.SerializeToString())
        command = [sys.executable, "-m", "ortx.tune.engine_confirm", path, "--whole-model", database_path,
                   "--threads", str(threads), "--runs", str(runs), "--precision", precision,
                   "--shapes", json.dumps(shapes), "--fp32-nodes", ",".join(fp32_nodes)]
        return _run(command)


def _run(command: list[str]) -> tuple[float, float] | None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        logger.warning("engine choice: the confirming process did not run (%s)", error)
        return None
    if done.returncode != 0:
        logger.warning("engine choice: the confirming process failed (exit %d): %s", done.returncode,
                       done.stderr.strip().splitlines()[-1:] or "")
        return None
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        return float(answer["ortx_ms"]), float(answer["ort_ms"])
    except (IndexError, KeyError, TypeError, ValueError):
        logger.warning("engine choice: the confirming process printed no times: %r", done.stdout[-200:])
        return None


def measure_whole_model(model_path: str, shapes: dict[str, tuple[int, ...]], *, threads: int, runs: int,
                        precision: str, database_path: str, fp32_nodes: tuple[str, ...]) -> tuple[float, float]:
    """The confirming process's whole-model measurement (measure_model_in_fresh_process)."""
    from ortx import pipeline
    from ortx.config import Options
    from ortx.ep.assignment import FUSED_FROM_KEY
    from ortx.ep.precision import mark_fp32_nodes
    from ortx.model_io import load
    from ortx.optimize import random_feeds
    from ortx.tune.model_choice import measure_plans
    from ortx.tune.tune_model import _ort_settings

    proto = load(model_path)
    prepared = pipeline.prepare_loaded(proto)
    if fp32_nodes:
        mark_fp32_nodes(prepared.model.graph, list(fp32_nodes), FUSED_FROM_KEY)
    ort, jit = _ort_settings(threads), Options.from_environment()
    tuned = pipeline.compile_for_shapes(prepared, shapes, ort, num_threads=threads, jit=jit, precision=precision,
                                        tuning=pipeline.TuningSettings("cached", database_path, model_records=False))
    whole = pipeline.compile_for_shapes(prepared, shapes, ort, num_threads=threads, claim=False, jit=jit,
                                        tuning=None, precision=precision)
    return measure_plans(tuned.plan, whole.plan, random_feeds(proto, shapes), runs)


def measure_segment(model_path: str, shapes: dict[str, tuple[int, ...]], *, threads: int, runs: int, precision: str,
                    only_step: bool) -> tuple[float, float]:
    """The confirming process's measurement: `model_path` compiled with tuning off must be one claimed segment."""
    from ortx import pipeline
    from ortx.config import Options
    from ortx.ep.runtime import ClaimedStep
    from ortx.model_io import load
    from ortx.tune.engine_choice import _measure
    from ortx.tune.tune_model import _ort_settings

    proto = load(model_path)  # prepare_loaded only names unnamed nodes in it: ORT's sub-session runs it after
    ort = _ort_settings(threads)
    compiled = pipeline.compile_for_shapes(pipeline.prepare_loaded(proto), shapes, ort, num_threads=threads,
                                           jit=Options.from_environment(), tuning=None, precision=precision)
    steps = compiled.plan.steps
    if len(steps) != 1 or not isinstance(steps[0], ClaimedStep):
        raise ValueError(f"{model_path}: compiles to {len(steps)} steps, not one claimed segment")
    measured = _measure(steps[0], compiled.plan, proto, ort, runs, only_step=only_step)
    if measured is None:
        raise ValueError(f"{model_path}: its inputs cannot be made up")
    return measured


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ortx.tune.engine_confirm",
                                     description="Measure one claimed segment on OrtxEP (tuning off) against ORT "
                                                 "on the same nodes, as ortx.tune.engine_choice does, and print "
                                                 "both medians as JSON (engine_choice's confirming process).")
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--shapes", default="{}", help="JSON: input name -> shape")
    parser.add_argument("--shares-cores", action="store_true",
                        help="the segment is not the model's only step (ORT's sub-session options for that case)")
    parser.add_argument("--whole-model", metavar="DATABASE",
                        help="measure the whole model tuned from DATABASE's records against ORT running all of it "
                             "(ortx.tune.model_choice) instead of one segment")
    parser.add_argument("--fp32-nodes", default="", help="with --whole-model: OrtxEP's fp32_nodes option")
    args = parser.parse_args(argv)
    shapes = {name: tuple(shape) for name, shape in json.loads(args.shapes).items()}
    if args.whole_model:
        ortx_ms, ort_ms = measure_whole_model(args.model, shapes, threads=args.threads, runs=args.runs,
                                              precision=args.precision, database_path=args.whole_model,
                                              fp32_nodes=tuple(name for name in args.fp32_nodes.split(",") if name))
        print(json.dumps({"ortx_ms": ortx_ms, "ort_ms": ort_ms}))
        return 0
    ortx_ms, ort_ms = measure_segment(args.model, shapes, threads=args.threads, runs=args.runs,
                                      precision=args.precision, only_step=not args.shares_cores)
    print(json.dumps({"ortx_ms": ortx_ms, "ort_ms": ort_ms}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
