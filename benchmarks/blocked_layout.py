"""Blocked (NCHWc) runs of 1x1 and depthwise convs: OrtxEP with them against OrtxEP on NCHW kernels, and ORT.

Usage: python benchmarks/blocked_layout.py [--runs 20] [--threads 2] [--models mobilenetv2,cls,rec,det,resnet18,bert]
                                           [--precision fp32|bf16] [--quiet-wait 120] [--no-write]
"blocked" is OrtxEP compiled with ortx.pipeline.BLOCKED_LAYOUT on (sessions' default since session 15), "NCHW" with it
off, everything else equal (tuning off; --precision the sessions' precision option). Runs interleaved in blocks after
warm-up (benchmarks/int8.py's `interleaved`), medians; ratio = blocked / NCHW. The steps column counts the blocked
session's blocked conv steps (a fused expand and depthwise step once) and its reorders. Writes BENCHMARKS.md's
"Blocked layout" section (fp32) or "Blocked layout, bf16" (bf16: the 1x1 convs' bf16 kernels, on AMX CPUs their
tdpbf16ps steps, against the NCHW bf16 programs).
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402

import ortx  # noqa: E402
from benchmarks._report import (head_commit, host, kernel_counts, load_average, model_feeds,  # noqa: E402
                                pipeline_flag, row_arguments, write_section)
from ortx import _kernels  # noqa: E402
from benchmarks.int8 import interleaved  # noqa: E402

HEADINGS = {"fp32": "Blocked layout (issue #4)", "bf16": "Blocked layout, bf16 (issue #5)"}
BLOCKED_KERNELS = ("conv2d_to_nchwc_f32", "conv_pointwise_nchwc_f32", "conv_pointwise_nchwc_bf16",
                   "conv2d_depthwise_nchwc_f32", "conv_expand_depthwise_nchwc_f32", "conv_expand_depthwise_nchwc_bf16",
                   "conv_pointwise_pair_rows_bf16", "conv2d_depthwise_pair_rows")
REORDERS = ("reorder_to_nchwc_f32", "reorder_from_nchwc_f32")


def cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def measure(label: str, path: str, feeds: dict, threads: int, runs: int, precision: str = "fp32") -> str:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    provider_options = [{"input_shapes": {name: array.shape for name, array in feeds.items()}, "tuning": "off",
                         "precision": precision}, {}]
    engines = {"ORT": onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])}
    for name, on in (("NCHW", False), ("blocked", True)):
        with pipeline_flag("BLOCKED_LAYOUT", on):
            engines[name] = ortx.InferenceSession(path, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                                  provider_options=provider_options)
    outputs = {name: session.run(None, feeds)[0] for name, session in engines.items()}
    counts = kernel_counts(engines["blocked"])
    blocked_steps, reorders = sum(counts[k] for k in BLOCKED_KERNELS), sum(counts[k] for k in REORDERS)
    error = float(np.max(np.abs(outputs["blocked"] - outputs["ORT"])))
    similarity = cosine(outputs["blocked"], outputs["ORT"])
    load = load_average()
    times = interleaved(engines, feeds, runs)
    ratio = times["blocked"] / times["NCHW"]
    print(f"  {label}: ORT {times['ORT']:.3f} ms, OrtxEP NCHW {times['NCHW']:.3f}, blocked {times['blocked']:.3f} "
          f"({ratio:.2f}x), {blocked_steps} blocked steps, {reorders} reorders", flush=True)
    return (f"| {label} | {blocked_steps} / {reorders} | {times['ORT']:.3f} | {times['NCHW']:.3f} | "
            f"{times['blocked']:.3f} | {ratio:.2f} | {times['NCHW'] / times['ORT']:.2f} | "
            f"{times['blocked'] / times['ORT']:.2f} | {error:.1e} | {similarity:.6f} | {load:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    row_arguments(parser, "mobilenetv2,cls,rec,det,resnet18,bert")
    parser.add_argument("--precision", choices=sorted(HEADINGS), default="fp32",
                        help="OrtxEP's precision option for both sessions (default fp32)")
    args = parser.parse_args()
    rows = []
    for name, path, feeds in model_feeds(args.models, 0, args.quiet_wait):
        rows.append(measure(name, path, feeds, args.threads, args.runs, args.precision))
    commit = head_commit()
    bf16 = (f" Precision bf16 for both OrtxEP sessions (bf16 path {_kernels.bf16_isa()}); error and cosine then "
            f"measure bf16 against ORT's fp32." if args.precision == "bf16" else "")
    body = (f"Measured {datetime.date.today()} on commit {commit}, {host()}, {args.threads} threads, median of "
            f"{args.runs} runs interleaved in blocks after warm-up, seeded random inputs, tuning off.{bf16} "
            f"\"blocked\" is OrtxEP with "
            f"ortx.pipeline.BLOCKED_LAYOUT on (sessions' default), \"NCHW\" with it off, everything else equal; "
            f"steps = the blocked session's blocked conv steps / reorders; error and cosine: the blocked session's "
            f"first output against ORT's. Load = 1-minute load average (2 cores, shared). Written by "
            f"`python benchmarks/blocked_layout.py`.\n\n"
            "| model | steps | ORT ms | OrtxEP NCHW ms | OrtxEP blocked ms | blocked / NCHW | NCHW / ORT | "
            "blocked / ORT | max abs err vs ORT | cosine vs ORT | load |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n"
            + "\n".join(rows) + "\n")
    print(body)
    if not args.no_write:
        write_section(args.output, HEADINGS[args.precision], body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
