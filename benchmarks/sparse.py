"""Pruned models on sparse kernels (issue #9): OrtxEP sparse vs OrtxEP dense vs ORT dense, side by side in one run.

Usage: python benchmarks/sparse.py [--runs 20] [--threads 2] [--models resnet18,mobilenetv2,bert]
                                   [--sparsities 0.5,0.7,0.9] [--quiet-wait 120] [--output BENCHMARKS.md]
Each model is pruned per layer by magnitude (ortx.passes.prune_weights, unstructured, scope "layer", its default
min_elements) to each sparsity; the same pruned weights then run on three sessions: ORT CPU, OrtxEP with
sparse="off" (every layer dense) and OrtxEP with sparse="measure" (each candidate layer timed dense vs CSR vs 4x1 CSR
at session creation in rounds and recorded; sparse where it beat 0.9x dense in every round, and then only if the
segment holding those layers beat the same segment all dense in every round: ortx.tune.sparse_choice). All OrtxEP sessions use tuning "off" otherwise, so only the
sparse choice differs. Runs are interleaved in blocks of 4 after warm-up (ortx.measure's scheme, an uncounted
warm-in per block, after ortx.measure.SETTLE_S idle); medians. Quote only runs at host load < 1.0 (the script waits up to --quiet-wait s
for it and prints the load before and after each model).
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402

import ortx  # noqa: E402
from benchmarks._report import head_commit, host, load_average, wait_for_quiet, write_section  # noqa: E402
from benchmarks.memory import BUILT  # noqa: E402
from ortx import _kernels  # noqa: E402
from ortx.measure import BLOCK, random_feeds, switch_over  # noqa: E402
from ortx.model_io import to_ort_bytes  # noqa: E402
from ortx.passes.prune_weights import prune_weights  # noqa: E402
from ortx.pipeline import ir_to_proto, proto_to_ir  # noqa: E402
from ortx.tune.sparse_choice import SegmentCheck  # noqa: E402

HEADING = "Sparse kernels on pruned models (issue #9)"


def pruned(proto, sparsity: float):
    model = proto_to_ir(proto)
    report = prune_weights(model, sparsity=sparsity)
    return ir_to_proto(model), report


def _median_blocks(sessions: dict, feeds: dict, runs: int) -> dict[str, float]:
    times = {name: [] for name in sessions}
    for session in sessions.values():  # warm-up
        for _ in range(2):
            session.run(None, feeds)
    for _ in range(max(1, runs // BLOCK)):
        for name, session in sessions.items():
            switch_over(lambda: session.run(None, feeds))
            for _ in range(BLOCK):
                start = time.perf_counter()
                session.run(None, feeds)
                times[name].append((time.perf_counter() - start) * 1e3)
    return ({name: statistics.median(values) for name, values in times.items()},
            {name: min(values) for name, values in times.items()})


def measure_model(key: str, sparsity: float, threads: int, runs: int):
    name, builder, _ = BUILT[key]
    proto, report = pruned(builder(), sparsity)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    providers = ["OrtxEP", "CPUExecutionProvider"]
    ort = onnxruntime.InferenceSession(to_ort_bytes(proto), options, providers=["CPUExecutionProvider"])
    dense = ortx.InferenceSession(proto, options, providers=providers,
                                  provider_options=[{"tuning": "off", "sparse": "off"}, {}])
    start = time.perf_counter()
    sparse = ortx.InferenceSession(proto, options, providers=providers,
                                   provider_options=[{"tuning": "off", "sparse": "measure"}, {}])
    feeds = random_feeds(ort)
    expected = ort.run(None, feeds)[0]
    sparse.run(None, feeds)
    creation = time.perf_counter() - start
    assignment = sparse.assignment
    products = [row for row in assignment if row.op_type in ("Conv", "Gemm", "MatMul") and row.provider == "OrtxEP"]
    errors = {}
    for label, session in (("dense", dense), ("sparse", sparse)):
        out = session.run(None, feeds)[0]
        errors[label] = float(np.max(np.abs(out - expected)) / max(float(np.max(np.abs(expected))), 1e-30))
    medians, minima = _median_blocks({"ort": ort, "dense": dense, "sparse": sparse}, feeds, runs)
    return dict(name=name, sparsity=sparsity, zeros=report.counts.get("weights_zeroed", 0), medians=medians,
                minima=minima,
                sparse_layers=len(assignment.sparse_nodes()), products=len(products), errors=errors,
                rejected=sum(1 for item in assignment.sparse_choices
                             if isinstance(item, SegmentCheck) and not item.kept),
                creation_s=creation)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default="resnet18,mobilenetv2,bert")
    parser.add_argument("--sparsities", default="0.5,0.7,0.9")
    parser.add_argument("--quiet-wait", type=float, default=120.0)
    parser.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"))
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    rows = []
    for key in args.models.split(","):
        for sparsity in (float(s) for s in args.sparsities.split(",")):
            before = wait_for_quiet(args.quiet_wait)
            result = measure_model(key, sparsity, args.threads, args.runs)
            result["load"] = (before, load_average())
            medians = result["medians"]
            print(f"{result['name']} {sparsity:.0%}: ORT {medians['ort']:.2f} ms, OrtxEP dense {medians['dense']:.2f}, "
                  f"sparse {medians['sparse']:.2f} (ORT/sparse {medians['ort'] / medians['sparse']:.2f}x, "
                  f"dense/sparse {medians['dense'] / medians['sparse']:.2f}x), {result['sparse_layers']} of "
                  f"{result['products']} products sparse, load {before:.2f}->{result['load'][1]:.2f}", flush=True)
            rows.append(result)
    commit = head_commit()
    loads = [value for row in rows for value in row["load"]]
    lines = [
        f"Measured {datetime.date.today()} on commit {commit}, {host()}, kernel ISA {_kernels.selected_isa()}, {args.threads} "
        f"threads for every engine, host load {min(loads):.2f}-{max(loads):.2f} (1-min average, before/after each "
        f"model); `python benchmarks/sparse.py --runs {args.runs}`. Weights pruned per layer by magnitude "
        "(ortx.passes.prune_weights, layers of >= 1024 weights); OrtxEP sparse = provider option sparse='measure' "
        "(each candidate layer timed dense / CSR / 4x1 CSR at session creation in rounds, sparse where it beat 0.9x "
        "dense in every round and its segment beat the segment all dense in every round), OrtxEP dense = "
        "sparse='off'; both tuning 'off'. Medians of interleaved blocks; speed-up = ORT ms / OrtxEP sparse ms; the "
        "min columns are the same ratios over each engine's fastest run (steadier on a busy host, where other "
        "processes only ever slow a run down).",
        "",
        "| model | sparsity | ORT ms | OrtxEP dense ms | OrtxEP sparse ms | vs ORT | vs OrtxEP dense | vs ORT (min) | "
        "vs OrtxEP dense (min) | sparse layers | max rel err | creation s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        medians = row["medians"]
        lines.append(f"| {row['name']} | {row['sparsity']:.0%} | {medians['ort']:.2f} | {medians['dense']:.2f} | "
                     f"{medians['sparse']:.2f} | {medians['ort'] / medians['sparse']:.2f}x | "
                     f"{medians['dense'] / medians['sparse']:.2f}x | "
                     f"{row['minima']['ort'] / row['minima']['sparse']:.2f}x | "
                     f"{row['minima']['dense'] / row['minima']['sparse']:.2f}x | "
                     f"{row['sparse_layers']}/{row['products']}"
                     f"{' (segment check: dense)' if row['rejected'] else ''} | "
                     f"{row['errors']['sparse']:.1e} | {row['creation_s']:.1f} |")
    print("\n".join(lines))
    if not args.no_write:
        write_section(args.output, HEADING, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
