"""OrtxEP vs ONNX Runtime CPU, side by side in one run, on the five CNNs of issue #2; writes BENCHMARKS.md.

Usage: python benchmarks/run.py [--runs 30] [--threads 2] [--models det,rec,cls,resnet18,mobilenetv2] [--tuning cached]
--tuning is OrtxEP's provider option: "off" (default) measures ortx's untuned kernels on every segment it claims;
"cached" applies this machine's records from `ortx tune MODEL` (issue #4's end-to-end measurement).
Latency: runs interleaved in blocks after warm-up, medians (ortx.measure.compare). Peak memory: each engine in a fresh
subprocess that builds its session and runs it 5 times, reporting VmHWM (benchmarks/memory.py's peak_rss_mib; the
high-water RSS, which includes the Python interpreter and the libraries both engines load).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import onnx  # noqa: E402

from benchmarks._report import head_commit, host, write_section  # noqa: E402
from benchmarks.memory import models, peak_rss_mib  # noqa: E402
from ortx import _kernels  # noqa: E402
from ortx.measure import compare  # noqa: E402

# Issue #2's bar is the median over these five CNNs; other models are reported beside them.
CNN_KEYS = ("det", "rec", "cls", "resnet18", "mobilenetv2")

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default=",".join(CNN_KEYS + ("bert",)))
    parser.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"))
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-RSS subprocesses")
    parser.add_argument("--tuning", choices=("off", "cached"), default="off",
                        help="OrtxEP's tuning option: cached applies the records of `ortx tune` (default off)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        keys = args.models.split(",")
        for key, (name, path, shape) in zip(keys, models(keys, directory)):
            input_name = onnx.load(path, load_external_data=False).graph.input[0].name
            print(f"measuring {name} ...", flush=True)
            result = compare(name, path, shapes={input_name: shape}, threads=args.threads, runs=args.runs,
                             tuning=args.tuning)
            memory = (None, None)
            if not args.no_memory:
                memory = (peak_rss_mib(path, input_name, shape, args.threads, False),
                          peak_rss_mib(path, input_name, shape, args.threads, True))
            rows.append((result, shape, memory, key))
            print(f"  ORT {result.ort_ms:.2f} ms, OrtxEP {result.ortx_ms:.2f} ms, ratio {result.ratio:.2f}, "
                  f"claimed {100 * result.claimed_mac_share:.1f}%, host {result.host_note()}", flush=True)
    median = statistics.median(r.ratio for r, _, _, _ in rows)
    cnn_ratios = [r.ratio for r, _, _, key in rows if key in CNN_KEYS]
    cnn_median = statistics.median(cnn_ratios) if len(cnn_ratios) == len(CNN_KEYS) else None
    commit = head_commit()
    lines = [
        f"Measured {datetime.date.today()} on commit {commit}, {host()}, "
        f"kernel ISA {_kernels.selected_isa()}, {args.threads} thread{'s' if args.threads != 1 else ''} for both engines, OrtxEP tuning "
        f"{args.tuning!r}, median of {args.runs} runs "
        "interleaved in blocks of 4 (each block after 100 ms idle and an uncounted warm-in of at least 20 ms, see ortx/measure.py) after warm-up, seeded random inputs. Ratio = OrtxEP ms / ORT ms (lower is better); "
        "GFLOP/s = 2 x MACs / OrtxEP time; peak memory = VmHWM of a fresh process that builds the session and runs "
        "it 5 times. Host: rounds of blocks in which ortx.host_contention's probe found the two threads sharing one "
        "physical core (its multiply-add loop >= 1.4x slower per thread with both threads busy), one thread >= 1.2x "
        "slower than the other (uneven), or the threads far apart (a cache line's round trip between them >= 250 ns); "
        "the first run kernels near the core's multiply-add peak slower, the last every exchange of data between the "
        "threads (BENCHMARKS.md, \"End to end after ortx tune\"). Written by `python benchmarks/run.py`; these "
        "machines are shared and noisy, compare ratios.",
        "",
        "| model | input | ORT ms | OrtxEP ms | ratio | OrtxEP GFLOP/s | ORT GFLOP/s | claimed MACs | segments | "
        "max rel err | cosine | peak MiB ORT | peak MiB OrtxEP | host |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result, shape, (ort_peak, ortx_peak), _ in rows:
        peaks = ("-", "-") if ort_peak is None else (f"{ort_peak:.0f}", f"{ortx_peak:.0f}")
        lines.append(
            f"| {result.name} | {'x'.join(map(str, shape))} | {result.ort_ms:.2f} | {result.ortx_ms:.2f} | "
            f"{result.ratio:.2f} | {result.ortx_gflops:.1f} | {result.ort_gflops:.1f} | "
            f"{100 * result.claimed_mac_share:.1f}% | {result.segments} | {result.max_relative_error:.1e} | "
            f"{result.cosine:.6f} | {peaks[0]} | {peaks[1]} | {result.host_note()} |")
    lines += ["", f"Median OrtxEP/ORT ratio over these models: {median:.2f}."]
    if cnn_median is not None:
        lines.append(f"Median over the five CNNs (issue #2's bar, <= 1.5): {cnn_median:.2f}.")
    lines.append("")
    # 2 threads is the issues' setting; other counts get a section of their own.
    heading = "OrtxEP vs ONNX Runtime CPU" + ("" if args.threads == 2 else
                                              f" ({args.threads} thread{'s' if args.threads > 1 else ''})")
    write_section(args.output, heading, "\n".join(lines))
    print("\n".join(lines))
    print(json.dumps({"median_ratio": median, "cnn_median_ratio": cnn_median}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
