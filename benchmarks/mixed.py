"""Mixed precision on PP-OCRv4: per error budget, the model size ratio, measured error, layers per precision, search
time and ORT CPU latency against fp32; writes BENCHMARKS.md's "Mixed precision" section.

Usage: python benchmarks/mixed.py [--models rec,cls,det] [--budgets 0.001,0.01,0.05] [--samples 8]
                                 [--objective size|latency]   (latency: its own section, "..., objective latency")
Calibration: `--samples` random inputs uniform in [-1, 1] (PP-OCR's normalised image range), seed 0, at each
model's shape (det at --det-size, 320 by default: 640x640 makes the one-layer-at-a-time analysis minutes per
budget on 2 shared cores). The search runs `ortx.quantization.mixed_precision(budget=..., precisions
fp32,fp16,int8,int4, metric relative_l2)` from the packaged fp32 file for each budget; the first budget's call
measures every layer alone at every precision ("sensitivity s"), the others reuse those records (`sensitivity=`);
"search s" is the rest of each call (calibration, the measured candidate mixes, writing the model). "error" is what
the search measured on the calibration samples; "held-out" is the same metric on `--evaluate` other random inputs
(seed 1). Size: the written model's bytes over the fp32 model's after the same -O2 passes and opset upgrade. Latency: ORT CPU, 2 threads, the mixed and fp32
models alternating in blocks of 5 runs, median of each, `--blocks` blocks; the ratio's range over `--repeats`
repetitions. Random inputs measure numerical fidelity, not recognition accuracy.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402

from benchmarks._report import write_section  # noqa: E402
from ortx.demo import PACKAGED_MODELS, packaged_model_path  # noqa: E402
from ortx.model_io import to_ort_bytes  # noqa: E402
from ortx.quantization import mixed_precision  # noqa: E402
from ortx.quantization.mixed_precision import prepare_model  # noqa: E402
from ortx.quantization.sensitivity import relative_l2  # noqa: E402


def random_inputs(count: int, shape: tuple, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (count, *shape[1:])).astype(np.float32)


def session(model, threads: int = 2):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(to_ort_bytes(model), options, providers=["CPUExecutionProvider"])


def latency_ratio(mixed, fp32, feed: dict, blocks: int, runs: int = 5) -> float:
    """median(mixed) / median(fp32), timed alternately in blocks of `runs` after one warm-up run each."""
    sessions = {"mixed": session(mixed), "fp32": session(fp32)}
    times = {name: [] for name in sessions}
    for current in sessions.values():
        current.run(None, feed)
    for _ in range(blocks):
        for name, current in sessions.items():
            for _ in range(runs):
                start = time.perf_counter()
                current.run(None, feed)
                times[name].append(time.perf_counter() - start)
    return statistics.median(times["mixed"]) / statistics.median(times["fp32"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="rec,cls,det")
    parser.add_argument("--budgets", default="0.001,0.01,0.05")
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--evaluate", type=int, default=8)
    parser.add_argument("--det-size", type=int, default=320)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--objective", choices=("size", "latency"), default="size",
                        help="the search's objective; latency writes its own section")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args()
    budgets = [float(budget) for budget in args.budgets.split(",")]

    rows = []
    for key in args.models.split(","):
        path = packaged_model_path(key)
        shape = PACKAGED_MODELS[key][1]
        if key == "det":
            shape = (1, 3, args.det_size, args.det_size)
        fp32 = prepare_model(path, True)
        name = fp32.graph.input[0].name
        calibration = {name: random_inputs(args.samples, shape, seed=0)}
        held_out = random_inputs(args.evaluate, shape, seed=1)
        sensitivity = None
        for budget in budgets:
            start = time.perf_counter()
            mixed, report = mixed_precision(path, calibration, budget=budget, precisions="fp32,fp16,int8,int4",
                                            objective=args.objective, sensitivity=sensitivity)
            seconds = time.perf_counter() - start
            sensitivity = report.sensitivity   # the next budgets reuse the one-layer-at-a-time measurements
            fp32_reference = session(prepare_model(path, True))
            mixed_session = session(mixed)
            feeds = [{name: held_out[index:index + 1]} for index in range(len(held_out))]
            held_out_error = relative_l2([fp32_reference.run(None, feed) for feed in feeds],
                                         [mixed_session.run(None, feed) for feed in feeds])
            ratios = [latency_ratio(mixed, fp32, feeds[0], args.blocks) for _ in range(args.repeats)]
            counts = report.counts
            row = (key, "x".join(map(str, shape)), budget, report.bytes_after / report.bytes_before, report.error,
                   held_out_error, ", ".join(f"{p} {counts[p]}" for p in ("fp32", "fp16", "int8", "int4")
                                             if p in counts),
                   len(report.layers), len(report.steps), seconds - report.sensitivity_seconds,
                   report.sensitivity_seconds if not report.sensitivity_reused else None, min(ratios), max(ratios))
            rows.append(row)
            print(f"{key} budget {budget:g}: size {row[3]:.3f}x, error {report.error:.4g} (held-out "
                  f"{held_out_error:.4g}), {row[6]}, {len(report.steps)} search models, {seconds:.0f} s "
                  f"({report.sensitivity_seconds:.0f} s sensitivity), latency "
                  f"{min(ratios):.2f}-{max(ratios):.2f}x fp32", flush=True)

    header = ("| model | input | budget | size / fp32 | error (calibration) | error (held-out) | layers per precision "
              "| search models | sensitivity s | search s | ORT latency / fp32 |")
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, shape, budget, size, error, held, counts, layers, steps, search_seconds, analysis, low, high in rows:
        analysis = f"{analysis:.0f}" if analysis is not None else "reused"
        lines.append(f"| {key} | {shape} | {budget:g} | {size:.3f} | {error:.2e} | {held:.2e} | {counts} "
                     f"({layers} layers) | {steps} | {analysis} | {search_seconds:.0f} | {low:.2f}-{high:.2f} |")
    table = "\n".join(lines)
    print(table)
    if args.no_write:
        return 0
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    body = (f"Measured {datetime.date.today()} on {platform.machine()}, onnxruntime {onnxruntime.__version__}, "
            f"load average {load:.1f} on 2 cores at the end; command: `python benchmarks/mixed.py --models "
            f"{args.models} --budgets {args.budgets} --samples {args.samples} --objective {args.objective}`. "
            "`ortx.quantization.mixed_precision` "
            "with precisions fp32, fp16 (weights stored fp16 + Cast), int8 (QDQ, mse calibration, uint8 "
            "activations), int4 (weight-only DequantizeLinear, MatMul blocked by 32 along K, Conv per output "
            f"channel), objective {args.objective}, metric relative L2 of the outputs against fp32 "
            f"(sqrt(sum |y - y32|^2 / sum |y32|^2)), {args.samples} random calibration samples (uniform [-1, 1], "
            f"seed 0); held-out: {args.evaluate} other random inputs (seed 1). Size: written model / fp32 model after "
            "the same -O2 passes and opset 21. Sensitivity s: measuring every layer alone at every precision (first "
            "budget; later budgets reuse the records); search s: the rest of each call (calibration, the measured "
            "candidate mixes). Latency: ORT CPU 2 threads, the two models "
            f"alternating in blocks of 5 runs, {args.blocks} blocks, ratio of medians, range over {args.repeats} "
            "repetitions (shared host: noisy). Random inputs measure numerical fidelity, not recognition "
            "accuracy.\n\n" + table)
    heading = "Mixed precision" + (", objective latency" if args.objective == "latency" else "")
    write_section(os.path.join(ROOT, "BENCHMARKS.md"), heading, body)
    print(f"wrote the {heading} section of BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
