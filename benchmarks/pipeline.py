"""Pipeline parallelism (issue #7): a 2-stage split on 2 processes vs 1 process, same model and micro-batches.

Usage: python benchmarks/pipeline.py [--models resnet18,rec] [--micro-batches 32] [--rounds 5]
                                     [--quiet-wait 300] [--output BENCHMARKS.md]
Per model: ortx.pipeline.split(model, stages=2, sample_inputs=...) (costs measured by ORT's profiler), then three
engines over the same micro-batches (batch 1 each, seeded random inputs): the unsplit model in this process on
ortx.InferenceSession with 1 intra-op thread (the like-for-like per-core comparison: each stage also has 1 thread)
and with 2 threads (both cores to one process), and the 2 stage processes (ortx.parallel.ProcessPipeline, 1 thread
each, shared-memory rings of 2 slots). All OrtxEP sessions run with tuning "off", so only the split differs.
Sessions and stage processes are built and warmed up first; then `--rounds` rounds each time one pass over all
micro-batches per engine, the engines' order rotating per round; throughput = micro-batches / wall seconds,
medians and ranges over rounds. Outputs: the pipeline's against the 1-thread session's, bitwise and max abs error.
Quote only runs at host load < 1.0: the script waits up to --quiet-wait s for it before the split (whose costs are
measured) and before the timed rounds, and prints the load.
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402

import ortx  # noqa: E402
import ortx.pipeline  # noqa: E402
from benchmarks._report import head_commit, load_average, wait_for_quiet, write_section  # noqa: E402
from benchmarks.memory import models  # noqa: E402
from ortx.parallel.processes import ProcessPipeline  # noqa: E402

HEADING = "Pipeline parallelism: 2 stages on 2 processes vs 1 process (issue #7)"
OPTIONS = {"tuning": "off"}


def session(path: str, input_name: str, shape, threads: int) -> ortx.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return ortx.InferenceSession(path, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                 provider_options=[{**OPTIONS, "input_shapes": {input_name: tuple(shape)}}, {}])


def one_process(sess: ortx.InferenceSession, batches: list[dict]) -> list[np.ndarray]:
    return [sess.run(None, batch)[0] for batch in batches]


def measure(name: str, path: str, shape, args) -> dict:
    rng = np.random.default_rng(0)
    batches = [{"x": rng.uniform(-1, 1, shape).astype(np.float32)} for _ in range(args.micro_batches)]
    input_name = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).get_inputs()[0].name
    batches = [{input_name: batch["x"]} for batch in batches]
    split_load = wait_for_quiet(args.quiet_wait)  # the split's costs are timed too
    plan = ortx.pipeline.split(path, stages=2, sample_inputs=batches[0])
    print(plan.describe(), flush=True)
    single, double = session(path, input_name, shape, 1), session(path, input_name, shape, 2)
    output_name = plan.outputs.names[0]
    with ProcessPipeline(plan, threads_per_stage=1, provider_options=OPTIONS) as pipeline:
        engines = {"1 process, 1 thread": lambda: one_process(single, batches),
                   "1 process, 2 threads": lambda: one_process(double, batches),
                   "2 stage processes, 1 thread each": lambda: [r[output_name] for r in pipeline.run(batches)]}
        outputs = {label: engine() for label, engine in engines.items()}  # warm-up, and the outputs compared
        before = wait_for_quiet(args.quiet_wait)
        throughput: dict[str, list[float]] = {label: [] for label in engines}
        labels = list(engines)
        for round_index in range(args.rounds):
            for label in labels[round_index % 3:] + labels[:round_index % 3]:
                start = time.perf_counter()
                engines[label]()
                throughput[label].append(len(batches) / (time.perf_counter() - start))
        after = load_average()
    reference, piped = outputs["1 process, 1 thread"], outputs["2 stage processes, 1 thread each"]
    error = max(float(np.max(np.abs(a - b))) for a, b in zip(reference, piped))
    identical = all(np.array_equal(a, b) for a, b in zip(reference, piped))
    result = {"name": name, "plan": plan, "throughput": throughput, "load": (split_load, before, after), "error": error,
              "identical": identical}
    for label, values in throughput.items():
        print(f"  {label}: {statistics.median(values):.1f} micro-batches/s ({min(values):.1f}-{max(values):.1f})")
    print(f"  load at split {split_load:.2f}, timed rounds {before:.2f} -> {after:.2f}; outputs bitwise identical: "
          f"{identical} (max abs {error:.3g})", flush=True)
    return result


def ratio_text(result: dict, label: str) -> str:
    piped = result["throughput"]["2 stage processes, 1 thread each"]
    other = result["throughput"][label]
    ratios = [p / o for p, o in zip(piped, other)]  # per round: the two passes ran side by side
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


def section(results: list[dict], args) -> str:
    commit = head_commit()
    loads = [value for result in results for value in result["load"]]
    lines = [
        f"`python benchmarks/pipeline.py --micro-batches {args.micro_batches} --rounds {args.rounds}` on {commit}, "
        f"{datetime.date.today()}, 2 cores, host load {min(loads):.2f}-{max(loads):.2f} (1-min average at the split's "
        "profiling and before/after the timed rounds). Micro-batches of batch 1; throughput = micro-batches / wall s, "
        "median over rounds (range); the ratio is the pipeline's throughput over the other engine's, per round "
        "(the engines ran side by side in each round), median (range). OrtxEP tuning 'off' everywhere; each stage "
        "process has 1 intra-op thread, so '1 process, 1 thread' is the like-for-like per-core comparison and "
        "'1 process, 2 threads' gives the one process both cores. Goal: >= 1.6x.",
        "",
        "| model | stage costs (measured) | cut bytes | 1 proc 1 thread | 1 proc 2 threads | 2 stage procs | "
        "vs 1 thread | vs 2 threads | outputs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        plan = result["plan"]
        costs = " / ".join(f"{stage.cost_seconds * 1e3:.2f} ms" for stage in plan.stages)
        medians = {label: statistics.median(values) for label, values in result["throughput"].items()}
        outputs = "bitwise identical" if result["identical"] else f"max abs {result['error']:.2g}"
        lines.append(f"| {result['name']} | {costs} | {plan.cuts[0].nbytes} | "
                     f"{medians['1 process, 1 thread']:.1f}/s | {medians['1 process, 2 threads']:.1f}/s | "
                     f"{medians['2 stage processes, 1 thread each']:.1f}/s | "
                     f"{ratio_text(result, '1 process, 1 thread')} | {ratio_text(result, '1 process, 2 threads')} | "
                     f"{outputs} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet18,rec")
    parser.add_argument("--micro-batches", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quiet-wait", type=float, default=300.0, help="seconds to wait for host load < 1.0")
    parser.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"),
                        help="BENCHMARKS.md to update ('' to only print)")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as directory:
        for name, path, shape in models(args.models.split(","), directory):
            print(name, flush=True)
            results.append(measure(name, path, shape, args))
    text = section(results, args)
    print(text)
    if args.output:
        write_section(args.output, HEADING, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
