"""Elementwise chains (ai.ortx ElementwiseChain): OrtxEP with the chains against OrtxEP without them, and ORT.

Usage: python benchmarks/elementwise_chains.py [--runs 20] [--threads 2] [--models det,rec,bert]
                                               [--quiet-wait 120] [--no-write]
1. Chains alone: small models of one chain each (PP-OCRv4 det's neck x + x * HardSigmoid(se) + up at 96x160x160, and
   the same at 96x40x40, which fits the L2 cache), followed by a GlobalAveragePool so that the chain writes into the
   arena and not into a fresh output array (whose page faults would dominate).
2. Whole models (benchmarks/memory.py's models): the same ORT and OrtxEP sessions as benchmarks/run.py (tuning off).
"Chains" is OrtxEP compiled with ortx.pipeline.ELEMENTWISE_CHAINS on (sessions' default since session 14),
"unfused" with it off (benchmarks/_report.py's `pipeline_flag`), everything else equal. Runs interleaved in blocks
after warm-up (benchmarks/int8.py's `interleaved`), medians; ratios are chains / unfused. Writes BENCHMARKS.md's
"Elementwise chains" section.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import ortx  # noqa: E402
from benchmarks._report import (head_commit, kernel_counts, load_average, model_feeds,  # noqa: E402
                               pipeline_flag, row_arguments, wait_for_quiet, write_section)
from benchmarks.int8 import interleaved  # noqa: E402

HEADING = "Elementwise chains (issue #4)"


def neck_model(channels: int, size: int) -> onnx.ModelProto:
    shape = [1, channels, size, size]
    nodes = [
        helper.make_node("HardSigmoid", ["se"], ["gate"], alpha=0.2, beta=0.5),
        helper.make_node("Mul", ["x", "gate"], ["scaled"]),
        helper.make_node("Add", ["x", "scaled"], ["sum"]),
        helper.make_node("Add", ["sum", "up"], ["total"]),
        helper.make_node("GlobalAveragePool", ["total"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "neck", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
        helper.make_tensor_value_info("se", TensorProto.FLOAT, [1, channels, 1, 1]),
        helper.make_tensor_value_info("up", TensorProto.FLOAT, shape),
    ], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def sessions(path_or_bytes, shapes: dict, threads: int) -> dict:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    provider_options = [{"input_shapes": shapes, "tuning": "off"}, {}]
    result = {"ORT": onnxruntime.InferenceSession(path_or_bytes, options, providers=["CPUExecutionProvider"])}
    with pipeline_flag("ELEMENTWISE_CHAINS", False):
        result["unfused"] = ortx.InferenceSession(path_or_bytes, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                                  provider_options=provider_options)
    with pipeline_flag("ELEMENTWISE_CHAINS", True):
        result["chains"] = ortx.InferenceSession(path_or_bytes, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                                 provider_options=provider_options)
    return result


def measure(label: str, path_or_bytes, feeds: dict, threads: int, runs: int) -> str:
    engines = sessions(path_or_bytes, {name: array.shape for name, array in feeds.items()}, threads)
    outputs = {name: session.run(None, feeds)[0] for name, session in engines.items()}
    error = float(np.max(np.abs(outputs["chains"] - outputs["ORT"])))
    same = bool(np.array_equal(outputs["chains"], outputs["unfused"]))
    load = load_average()
    times = interleaved(engines, feeds, runs)
    ratio = times["chains"] / times["unfused"]
    chain_steps = kernel_counts(engines["chains"])["elementwise_chain_f32"]
    print(f"  {label}: ORT {times['ORT']:.3f} ms, OrtxEP unfused {times['unfused']:.3f}, chains {times['chains']:.3f} "
          f"({ratio:.2f}x), {chain_steps} chain steps", flush=True)
    return (f"| {label} | {chain_steps} | {times['ORT']:.3f} | {times['unfused']:.3f} | "
            f"{times['chains']:.3f} | {ratio:.2f} | {times['chains'] / times['ORT']:.2f} | {error:.1e} | "
            f"{'yes' if same else 'no'} | {load:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    row_arguments(parser, "det,rec,bert")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for channels, size in ((96, 160), (96, 40)):
        wait_for_quiet(args.quiet_wait)
        feeds = {"x": rng.standard_normal((1, channels, size, size), np.float32),
                 "se": rng.standard_normal((1, channels, 1, 1), np.float32),
                 "up": rng.standard_normal((1, channels, size, size), np.float32)}
        rows.append(measure(f"det neck chain 1x{channels}x{size}x{size} (+GAP)",
                            neck_model(channels, size).SerializeToString(), feeds, args.threads, args.runs))
    for name, path, feeds in model_feeds(args.models, 0, args.quiet_wait):
        rows.append(measure(name, path, feeds, args.threads, args.runs))
    commit = head_commit()
    body = (f"Measured {datetime.date.today()} on commit {commit}, {args.threads} threads, median of {args.runs} runs "
            f"interleaved in blocks after warm-up, seeded random inputs. \"chains\" is OrtxEP with "
            f"ortx.pipeline.ELEMENTWISE_CHAINS on (sessions' default), \"unfused\" with it off, everything else "
            f"equal; ratio = chains / unfused; bitwise = the chained and "
            f"unfused OrtxEP outputs are identical. Load = 1-minute load average (2 cores, shared). Written by "
            f"`python benchmarks/elementwise_chains.py`.\n\n"
            "| model | chain steps | ORT ms | OrtxEP unfused ms | OrtxEP chains ms | chains / unfused | chains / ORT | "
            "max abs err vs ORT | bitwise vs unfused | load |\n|---|---|---|---|---|---|---|---|---|---|\n"
            + "\n".join(rows) + "\n")
    print(body)
    if not args.no_write:
        write_section(args.output, HEADING, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
