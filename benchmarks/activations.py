"""Transcendental activations (Gelu, Erf): OrtxEP's unary kernel against ORT's, and against an older build.

Usage: python benchmarks/activations.py [--runs 20] [--threads 1,2] [--baseline OLD/_kernels.so] [--no-write]
1. One-node models (Gelu opset 20 and Erf on 128x1024, the BERT-like encoder's FFN activation; Gelu on 1x64x112x112
   as a conv-net-sized tensor), OrtxEP (tuning off) and ORT CPU sessions interleaved in blocks after warm-up
   (benchmarks/int8.py's `interleaved`), medians; ratio = OrtxEP / ORT.
2. With --baseline (an ortx/_kernels*.so built from an older commit): the unary_f32 kernel alone, this build's and
   the baseline's, on the same input in one process, blocks interleaved, medians of the blocks' medians; "bitwise"
   says whether both builds return the same bits (an optimisation that keeps the numerics must say yes).
Writes BENCHMARKS.md's "Transcendental activations" section.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import ortx  # noqa: E402
from benchmarks._report import head_commit, load_average, write_section  # noqa: E402
from benchmarks.int8 import interleaved  # noqa: E402
from ortx import _kernels  # noqa: E402

HEADING = "Transcendental activations (issue #4)"
UNARY_CODES = {"Gelu": 28, "Erf": 22}  # kernels/elementwise.h
CASES = (("Gelu", (128, 1024)), ("Erf", (128, 1024)), ("Gelu", (1, 64, 112, 112)))


def one_node_model(op_type: str, shape: tuple[int, ...]) -> bytes:
    graph = helper.make_graph([helper.make_node(op_type, ["x"], ["y"])], op_type,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    return model.SerializeToString()


def session_row(op_type: str, shape: tuple[int, ...], threads: int, runs: int) -> str:
    model = one_node_model(op_type, shape)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    engines = {"ORT": onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"]),
               "OrtxEP": ortx.InferenceSession(model, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                               provider_options=[{"tuning": "off"}, {}])}
    feeds = {"x": (np.random.default_rng(0).standard_normal(shape) * 1.5).astype(np.float32)}
    outputs = {name: session.run(None, feeds)[0] for name, session in engines.items()}
    error = float(np.max(np.abs(outputs["OrtxEP"] - outputs["ORT"])))
    load = load_average()
    times = interleaved(engines, feeds, runs)
    ratio = times["OrtxEP"] / times["ORT"]
    label = f"{op_type} {'x'.join(map(str, shape))}"
    print(f"  {label}, {threads} threads: ORT {times['ORT']:.3f} ms, OrtxEP {times['OrtxEP']:.3f} ms ({ratio:.2f})",
          flush=True)
    return (f"| {label} | {threads} | {times['ORT']:.3f} | {times['OrtxEP']:.3f} | {ratio:.2f} | {error:.1e} | "
            f"{load:.1f} |")


def load_kernels(path: str):
    spec = importlib.util.spec_from_file_location("ortx._kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_row(op_type: str, shape: tuple[int, ...], threads: int, baseline, rounds: int = 15) -> str:
    x = (np.random.default_rng(0).standard_normal(shape) * 1.5).astype(np.float32).ravel()
    builds = {"baseline": baseline, "this": _kernels}
    outputs = {name: np.empty_like(x) for name in builds}
    code = UNARY_CODES[op_type]
    medians = {name: [] for name in builds}
    for name, module in builds.items():
        module.call("unary_f32", [code, x.size], [0, 0], [x, outputs[name]], num_threads=threads)
    for _ in range(rounds):
        for name, module in builds.items():
            out = outputs[name]
            for _ in range(20):
                module.call("unary_f32", [code, x.size], [0, 0], [x, out], num_threads=threads)
            times = []
            for _ in range(50):
                start = time.perf_counter()
                module.call("unary_f32", [code, x.size], [0, 0], [x, out], num_threads=threads)
                times.append(time.perf_counter() - start)
            medians[name].append(float(np.median(times)) * 1e6)
    before, after = (float(np.median(medians[name])) for name in builds)
    same = bool(np.array_equal(outputs["baseline"].view(np.uint32), outputs["this"].view(np.uint32)))
    label = f"{op_type} {'x'.join(map(str, shape))}"
    print(f"  kernel {label}, {threads} threads: baseline {before:.1f} us, this build {after:.1f} us "
          f"({after / before:.2f}), bitwise {'yes' if same else 'no'}", flush=True)
    return f"| {label} | {threads} | {before:.1f} | {after:.1f} | {after / before:.2f} | {'yes' if same else 'no'} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--baseline", help="an older build's ortx/_kernels*.so to time the kernel against")
    parser.add_argument("--baseline-commit", default="", help="the commit the baseline was built from (for the table)")
    parser.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    threads = [int(value) for value in args.threads.split(",") if value]
    rows = [session_row(op_type, shape, count, args.runs) for op_type, shape in CASES for count in threads]
    kernel_rows = []
    if args.baseline:
        baseline = load_kernels(args.baseline)
        kernel_rows = [kernel_row(op_type, shape, count, baseline) for op_type, shape in CASES for count in threads]
    commit = head_commit()
    body = (f"Measured {datetime.date.today()} on commit {commit}, kernel ISA {_kernels.cpu_isa()}, median of "
            f"{args.runs} runs interleaved in blocks after warm-up, inputs standard normal x 1.5 (seed 0). One-node "
            "models, OrtxEP (tuning off) vs ORT CPU, the same thread count; ratio = OrtxEP / ORT; max abs err = "
            "OrtxEP against ORT. Load = 1-minute load average (2 cores, shared). Written by "
            "`python benchmarks/activations.py`.\n\n"
            "| node | threads | ORT ms | OrtxEP ms | ratio | max abs err vs ORT | load |\n"
            "|---|---|---|---|---|---|---|\n"
            + "\n".join(rows) + "\n")
    if kernel_rows:
        body += (f"\nThe unary_f32 kernel alone (no session), this build against {args.baseline_commit or 'a baseline'}"
                 "'s, one process, 15 interleaved blocks of 50 calls, medians; bitwise = both return the same "
                 "bits.\n\n| node | threads | baseline us | this build us | ratio | bitwise |\n"
                 "|---|---|---|---|---|---|\n"
                 + "\n".join(kernel_rows) + "\n")
    print(body)
    if not args.no_write:
        write_section(args.output, HEADING, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
