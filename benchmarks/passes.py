"""Graph passes: node counts after `ortx optimize -O2` vs onnxsim, onnxslim and ONNX Runtime's own offline
optimizer, and ORT CPU latency of every optimized model; writes BENCHMARKS.md's "Graph passes" section.

Usage: python benchmarks/passes.py [--runs 20] [--threads 2] [--models det,rec,cls,resnet18,mobilenetv2,transformer]
Every tool gets the same input: the model with its input shape fixed (PP-OCR's dynamic dims set to the demo
shapes), so shape-dependent simplifications are open to all. ORT's optimizer is run at ORT_ENABLE_BASIC with
optimized_model_filepath (its output is standard ONNX). Latency: one ORT CPU session per variant, runs interleaved
variant by variant after warm-up (the starting
variant rotates each round), median per variant. onnxsim/onnxslim are optional (pip install onnxsim onnxslim);
a tool that is missing or fails is reported as such in its cell.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime  # noqa: E402

from benchmarks._report import host, write_section  # noqa: E402
from ortx.demo import PACKAGED_MODELS, packaged_model_path  # noqa: E402
from ortx.model_io import load, to_ort_bytes  # noqa: E402
from ortx.optimize import optimize  # noqa: E402
from tests import _models  # noqa: E402

BUILT = {"resnet18": ("resnet18_style", lambda: _models.resnet18_style()),
         "mobilenetv2": ("mobilenetv2_style", lambda: _models.mobilenetv2_style()),
         "transformer": ("transformer_block (BERT-like layer)", lambda: _models.transformer_block())}
TOOLS = ("input", "ortx -O2", "onnxsim", "onnxslim", "ORT basic")


def fixed_shape_model(key: str) -> tuple[str, onnx.ModelProto]:
    if key in PACKAGED_MODELS:
        proto = load(packaged_model_path(key))
        shape = PACKAGED_MODELS[key][1]
        dims = proto.graph.input[0].type.tensor_type.shape.dim
        for dim, size in zip(dims, shape):
            dim.Clear()
            dim.dim_value = size
        return f"PP-OCRv4 {key}", proto
    name, build = BUILT[key]
    return name, build()


def run_ortx(proto):
    optimized, _ = optimize(proto, level=2)
    return optimized


def run_onnxsim(proto):
    import onnxsim

    model, ok = onnxsim.simplify(proto)
    if not ok:
        raise RuntimeError("onnxsim's own check failed")
    return model


def run_onnxslim(proto):
    import onnxslim

    return onnxslim.slim(proto)


def run_ort_basic(proto):
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "optimized.onnx")
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = path
        onnxruntime.InferenceSession(to_ort_bytes(proto), options, providers=["CPUExecutionProvider"])
        return onnx.load(path)


RUNNERS = {"ortx -O2": run_ortx, "onnxsim": run_onnxsim, "onnxslim": run_onnxslim, "ORT basic": run_ort_basic}


def feeds_for(proto: onnx.ModelProto) -> dict:
    rng = np.random.default_rng(0)
    initializers = {tensor.name for tensor in proto.graph.initializer}
    return {value.name: rng.standard_normal([d.dim_value for d in value.type.tensor_type.shape.dim]).astype(np.float32)
            for value in proto.graph.input if value.name not in initializers}


def session(proto, threads: int):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(to_ort_bytes(proto), options, providers=["CPUExecutionProvider"])


def interleaved_medians(sessions: dict, feeds: dict, runs: int) -> dict:
    for current in sessions.values():
        for _ in range(3):
            current.run(None, feeds)
    times = {name: [] for name in sessions}
    names = list(sessions)
    for round_index in range(runs):
        # Rotate who goes first each round, so no variant always runs right after the same neighbour.
        for name in names[round_index % len(names):] + names[:round_index % len(names)]:
            current = sessions[name]
            start = time.perf_counter()
            current.run(None, feeds)
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(values)) * 1e3 for name, values in times.items()}


def measure(key: str, runs: int, threads: int) -> dict:
    title, proto = fixed_shape_model(key)
    variants, failures, seconds = {"input": proto}, {}, {}
    for tool, runner in RUNNERS.items():
        start = time.perf_counter()
        try:
            variants[tool] = runner(proto)
            seconds[tool] = time.perf_counter() - start
        except Exception as error:  # a failed tool is a row of data, not a crash
            failures[tool] = f"{type(error).__name__}: {str(error).splitlines()[0][:80] if str(error) else ''}"
    feeds = feeds_for(proto)
    sessions = {tool: session(model, threads) for tool, model in variants.items()}
    reference = sessions["input"].run(None, feeds)
    errors = {}
    for tool, current in sessions.items():
        outputs = current.run(None, feeds)
        errors[tool] = max(float(np.max(np.abs(a.astype(np.float64) - b))) / max(float(np.max(np.abs(b))), 1e-30)
                           for a, b in zip(outputs, reference))
    latency = interleaved_medians(sessions, feeds, runs)
    return {"title": title, "nodes": {tool: len(model.graph.node) for tool, model in variants.items()},
            "failures": failures, "latency_ms": latency, "errors": errors, "seconds": seconds}


def cell(result: dict, tool: str, value: str) -> str:
    return f"failed ({result['failures'][tool]})" if tool in result["failures"] else value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default="det,rec,cls,resnet18,mobilenetv2,transformer")
    parser.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"))
    args = parser.parse_args()
    results = []
    for key in args.models.split(","):
        result = measure(key, args.runs, args.threads)
        results.append(result)
        print(result["title"], result["nodes"], {k: round(v, 2) for k, v in result["latency_ms"].items()},
              result["failures"], flush=True)
    versions = {"onnxruntime": onnxruntime.__version__}
    for module in ("onnxsim", "onnxslim"):
        try:
            versions[module] = __import__(module).__version__
        except ImportError:
            versions[module] = "not installed"
    lines = [f"Measured {datetime.date.today()} on {host()}, {os.cpu_count()} "
             f"cores, ORT CPU with {args.threads} threads, {args.runs} interleaved runs per variant (median); "
             + ", ".join(f"{k} {v}" for k, v in versions.items()) + ". Command: `python benchmarks/passes.py`.",
             "", "Node count after each tool (fewer is better; every tool gets the input with its shape fixed):", "",
             "| model | " + " | ".join(TOOLS) + " |", "|---" * (len(TOOLS) + 1) + "|"]
    for result in results:
        lines.append(f"| {result['title']} | " + " | ".join(
            cell(result, tool, str(result["nodes"].get(tool, "-"))) for tool in TOOLS) + " |")
    lines += ["", "ORT CPU latency of each tool's output, ms (and ratio to the input model):", "",
              "| model | " + " | ".join(TOOLS) + " |", "|---" * (len(TOOLS) + 1) + "|"]
    for result in results:
        base = result["latency_ms"]["input"]
        lines.append(f"| {result['title']} | " + " | ".join(
            cell(result, tool, f"{result['latency_ms'][tool]:.2f} ({result['latency_ms'][tool] / base:.2f})")
            for tool in TOOLS) + " |")
    lines += ["", "Largest output error vs the input model, relative to max|output| (ORT CPU, seeded normal inputs):",
              "", "| model | " + " | ".join(TOOLS[1:]) + " |", "|---" * len(TOOLS) + "|"]
    for result in results:
        lines.append(f"| {result['title']} | " + " | ".join(
            cell(result, tool, f"{result['errors'][tool]:.1e}") for tool in TOOLS[1:]) + " |")
    write_section(args.output, "Graph passes", "\n".join(lines))
    print(f"wrote the 'Graph passes' section of {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
