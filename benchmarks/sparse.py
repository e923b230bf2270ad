"""Pruned models on sparse kernels (issue #9): OrtxEP sparse vs OrtxEP dense vs ORT dense, side by side in one run.

Usage: python benchmarks/sparse.py [--runs 20] [--threads 2] [--models resnet18,mobilenetv2,bert]
                                   [--sparsities 0.5,0.7,0.9] [--precision fp32|int8] [--quiet-wait 120]
                                   [--output BENCHMARKS.md]
Each model is pruned per layer by magnitude (ortx.passes.prune_weights, unstructured, scope "layer", its default
min_elements) to each sparsity; the same pruned weights then run on three sessions: ORT CPU, OrtxEP with
sparse="off" (every layer dense) and OrtxEP with sparse="measure" (each candidate layer timed dense vs CSR vs 4x1 CSR
at session creation in rounds and recorded; sparse where it beat 0.9x dense in every round, and then only if the
segment holding those layers beat the same segment all dense in every round: ortx.tune.sparse_choice). All OrtxEP sessions use tuning "off" otherwise, so only the
sparse choice differs. Runs are interleaved in blocks of 4 after warm-up (ortx.measure's scheme, an uncounted
warm-in per block, after ortx.measure.SETTLE_S idle); medians. Quote only runs at host load < 1.0 (the script waits up to --quiet-wait s
for it and prints the load before and after each model).
--precision int8: the pruned model is then quantized on 8 random calibration samples, the same for both
quantizers: ortx.quantize (QDQ, uint8 activations, per-channel int8 weights) for the OrtxEP sessions, which run its
QConv layers on qconv2d_i8 (dense) or sparse_qconv2d_i8 (quad CSR; the choice times dense and quad CSR), and ORT's
own quantize_static (U8S8, per-channel; benchmarks/quantize.py) for ORT, whose CPU EP fuses its QDQ pattern into
QLinearConv and leaves ortx's Conv-Relu-Q as dequantized fp32 convs (measured 1.5x its fp32 time on
ResNet-18-style); the table goes to its own section.
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
HEADING_INT8 = "Sparse int8 kernels on pruned models (issue #9)"
CALIBRATION_SAMPLES = 8


def pruned(proto, sparsity: float):
    model = proto_to_ir(proto)
    report = prune_weights(model, sparsity=sparsity)
    return ir_to_proto(model), report


def quantized(proto, threads: int):
    """(ortx.quantize's QDQ model, ORT quantize_static's U8S8 QDQ model) of single-input `proto`, both calibrated
    on the same CALIBRATION_SAMPLES uniform [-1, 1) inputs."""
    from benchmarks.quantize import ort_quantize_static
    from ortx.quantization import quantize

    probe = onnxruntime.InferenceSession(to_ort_bytes(proto), providers=["CPUExecutionProvider"])
    (name, shape), = [(arg.name, arg.shape) for arg in probe.get_inputs()]
    samples = np.random.default_rng(100).uniform(-1, 1, (CALIBRATION_SAMPLES, *shape[1:])).astype(np.float32)
    model, _ = quantize(proto, {name: samples}, threads=threads)
    return model, ort_quantize_static(proto, name, samples)


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


def measure_model(key: str, sparsity: float, threads: int, runs: int, precision: str = "fp32"):
    name, builder, _ = BUILT[key]
    proto, report = pruned(builder(), sparsity)
    ort_proto = proto
    if precision == "int8":
        proto, ort_proto = quantized(proto, threads)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    providers = ["OrtxEP", "CPUExecutionProvider"]
    ort = onnxruntime.InferenceSession(to_ort_bytes(ort_proto), options, providers=["CPUExecutionProvider"])
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
    products = [row for row in assignment if row.op_type in ("Conv", "Gemm", "MatMul") and row.provider == "OrtxEP"
                and (precision != "int8" or row.precision == "int8")]
    errors, outputs = {}, {}
    for label, session in (("dense", dense), ("sparse", sparse)):
        outputs[label] = out = session.run(None, feeds)[0]
        errors[label] = float(np.max(np.abs(out - expected)) / max(float(np.max(np.abs(expected))), 1e-30))
    medians, minima = _median_blocks({"ort": ort, "dense": dense, "sparse": sparse}, feeds, runs)
    return dict(name=name, sparsity=sparsity, zeros=report.counts.get("weights_zeroed", 0), medians=medians,
                minima=minima,
                sparse_layers=len(assignment.sparse_nodes()), products=len(products), errors=errors,
                rejected=sum(1 for item in assignment.sparse_choices
                             if isinstance(item, SegmentCheck) and not item.kept),
                creation_s=creation, same_bits=bool(np.array_equal(outputs["dense"], outputs["sparse"])))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default="resnet18,mobilenetv2,bert")
    parser.add_argument("--sparsities", default="0.5,0.7,0.9")
    parser.add_argument("--precision", choices=("fp32", "int8"), default="fp32")
    parser.add_argument("--quiet-wait", type=float, default=120.0)
    parser.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"))
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    rows = []
    for key in args.models.split(","):
        for sparsity in (float(s) for s in args.sparsities.split(",")):
            before = wait_for_quiet(args.quiet_wait)
            result = measure_model(key, sparsity, args.threads, args.runs, args.precision)
            result["load"] = (before, load_average())
            medians = result["medians"]
            print(f"{result['name']} {sparsity:.0%}: ORT {medians['ort']:.2f} ms, OrtxEP dense {medians['dense']:.2f}, "
                  f"sparse {medians['sparse']:.2f} (ORT/sparse {medians['ort'] / medians['sparse']:.2f}x, "
                  f"dense/sparse {medians['dense'] / medians['sparse']:.2f}x), {result['sparse_layers']} of "
                  f"{result['products']} products sparse, load {before:.2f}->{result['load'][1]:.2f}", flush=True)
            rows.append(result)
    lines = table(rows, args) if args.precision == "fp32" else table_int8(rows, args)
    print("\n".join(lines))
    if not args.no_write:
        write_section(args.output, HEADING if args.precision == "fp32" else HEADING_INT8, "\n".join(lines))
    return 0


def _measured_line(rows, args) -> str:
    loads = [value for row in rows for value in row["load"]]
    return (f"Measured {datetime.date.today()} on commit {head_commit()}, {host()}, kernel ISA "
            f"{_kernels.selected_isa()}, {args.threads} threads for every engine, host load "
            f"{min(loads):.2f}-{max(loads):.2f} (1-min average, before/after each model); "
            f"`python benchmarks/sparse.py --runs {args.runs}" + (" --precision int8" if args.precision == "int8"
                                                                 else "") + "`.")


def table_int8(rows, args) -> list[str]:
    lines = [
        _measured_line(rows, args) + " Weights pruned per layer by magnitude (ortx.passes.prune_weights, layers of "
        f">= 1024 weights), then quantized by ortx.quantize (QDQ, uint8 activations, per-channel int8 weights, "
        f"{CALIBRATION_SAMPLES} random calibration samples) for OrtxEP, by ORT's quantize_static (U8S8, per-channel, "
        "same samples) for ORT (its CPU EP runs ortx's Conv-Relu-Q pattern as dequantized fp32 convs); OrtxEP "
        "dense = sparse='off' (qconv2d_i8), OrtxEP sparse = sparse='measure' (each candidate int8 layer timed "
        "qconv2d_i8 vs sparse_qconv2d_i8's quad CSR at session creation, then the segment check), both tuning "
        "'off'. Medians of interleaved blocks; speed-up = ORT ms / OrtxEP sparse ms. 'same bits': the sparse "
        "session's output equals the dense one's exactly (integer sums are exact); the error is against ORT's int8 "
        "output (two quantizers' rounding apart).",
        "",
        "| model | sparsity | ORT int8 ms | OrtxEP int8 dense ms | OrtxEP int8 sparse ms | vs ORT | vs OrtxEP dense | "
        "vs ORT (min) | sparse layers | same bits | max rel err vs ORT | creation s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(f"{_ratio_cells(row)} | {_layers_cell(row)} | {'yes' if row['same_bits'] else 'no'} | "
                     f"{row['errors']['sparse']:.1e} | {row['creation_s']:.1f} |")
    return lines


def _ratio_cells(row) -> str:
    """The cells both tables open with: model, sparsity, the three medians, vs ORT, vs dense, vs ORT (min)."""
    medians = row["medians"]
    return (f"| {row['name']} | {row['sparsity']:.0%} | {medians['ort']:.2f} | {medians['dense']:.2f} | "
            f"{medians['sparse']:.2f} | {medians['ort'] / medians['sparse']:.2f}x | "
            f"{medians['dense'] / medians['sparse']:.2f}x | {row['minima']['ort'] / row['minima']['sparse']:.2f}x")


def _layers_cell(row) -> str:
    return f"{row['sparse_layers']}/{row['products']}" + (" (segment check: dense)" if row["rejected"] else "")


def table(rows, args) -> list[str]:
    lines = [
        _measured_line(rows, args) + " Weights pruned per layer by magnitude "
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
        lines.append(f"{_ratio_cells(row)} | {row['minima']['dense'] / row['minima']['sparse']:.2f}x | "
                     f"{_layers_cell(row)} | {row['errors']['sparse']:.1e} | {row['creation_s']:.1f} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
