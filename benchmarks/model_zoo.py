"""OrtxEP vs ONNX Runtime CPU on the model-zoo architectures the onnx wheel ships, side by side in one run.

Usage: python benchmarks/model_zoo.py [--runs 20] [--threads 2] [--models resnet50,densenet121,...] [--tuning off]
       [--output BENCHMARKS.md]
The models: onnx/backend/test/data/light/light_*.onnx (AlexNet, DenseNet-121, Inception v1 and v2, ResNet-50,
ShuffleNet, SqueezeNet, VGG-19, ZFNet-512 as the ONNX model zoo exported them, IR version 3, opsets 7-9) with every
weight a ConstantOfShape of 0.02: the architectures and their compute, not trained values, so the outputs say
nothing and only the times and shares are compared; correctness on them is tests/test_conformance.py's. They are the
models this project did not tune its kernels on (benchmarks/run.py's are): a check that OrtxEP is not slower than
ORT on architectures it was not built around. Timing: ortx.measure.compare (interleaved blocks after warm-up,
medians, seeded random input), the same thread count for both engines. --tuning cached applies this machine's
records of `ortx tune MODEL` (the file under the onnx wheel). Writes the "Model zoo architectures" section.
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import onnx  # noqa: E402

from benchmarks._report import head_commit, host, write_section  # noqa: E402
from ortx.measure import compare  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = ("resnet50", "densenet121", "inception_v1", "inception_v2", "shufflenet", "squeezenet", "vgg19",
          "bvlc_alexnet", "zfnet512")


def model_path(key: str) -> str:
    path = os.path.join(LIGHT, f"light_{key}.onnx")
    if not os.path.exists(path):
        raise SystemExit(f"no model {key!r}: {path} is missing (onnx {onnx.__version__}); known: {', '.join(MODELS)}")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--tuning", choices=("off", "cached"), default="off")
    parser.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"))
    args = parser.parse_args()
    commit = head_commit()
    rows = []
    for key in args.models.split(","):
        path = model_path(key)
        print(f"measuring {key} ...", flush=True)
        result = compare(key, path, threads=args.threads, runs=args.runs, tuning=args.tuning)
        rows.append(result)
        print(f"  ORT {result.ort_ms:.2f} ms, OrtxEP {result.ortx_ms:.2f} ms, ratio {result.ratio:.2f}, claimed "
              f"{100 * result.claimed_mac_share:.1f}% in {result.segments} segments", flush=True)
    lines = [
        f"Measured {datetime.date.today()} on commit {commit}, {host()}, {args.threads} threads for both engines, "
        f"OrtxEP tuning {args.tuning!r}, median of {args.runs} runs interleaved in blocks after warm-up "
        "(ortx/measure.py), seeded random input. The ONNX backend's light model-zoo models from the onnx wheel "
        "(every weight a ConstantOfShape of 0.02: the architectures' compute, not their trained values), which "
        "this project never tuned its kernels on. Ratio = OrtxEP ms / ORT ms (lower is better); GFLOP/s = 2 x "
        "MACs / time. Written by `python benchmarks/model_zoo.py`; these machines are shared and noisy, compare "
        "ratios.",
        "",
        "| model | GMAC | ORT ms | OrtxEP ms | ratio | OrtxEP GFLOP/s | ORT GFLOP/s | claimed MACs | segments | host |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in rows:
        lines.append(f"| {result.name} | {result.total_macs / 1e9:.2f} | {result.ort_ms:.2f} | {result.ortx_ms:.2f} | "
                     f"{result.ratio:.2f} | {result.ortx_gflops:.1f} | {result.ort_gflops:.1f} | "
                     f"{100 * result.claimed_mac_share:.1f}% | {result.segments} | {result.host_note()} |")
    ratios = [result.ratio for result in rows]
    lines += ["", f"Median OrtxEP/ORT ratio: {statistics.median(ratios):.2f}; models slower than ORT: "
              f"{sum(ratio > 1.0 for ratio in ratios)} of {len(ratios)}.", ""]
    heading = "Model zoo architectures" + (" (after ortx tune)" if args.tuning == "cached" else "")
    write_section(args.output, heading, "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
