"""int8 average pooling (issue #5): the int8 kernels against the float path they replace, and whole int8 models
through OrtxEP before and after.

Usage: python benchmarks/int8_pool.py [--runs 20] [--threads 2] [--quiet-wait 120] [--no-write]
1. Kernels, one process, the two paths timed in alternating blocks (block_medians of benchmarks/kernels.py, 5
   rounds, the median and range of the per-round ratios): qavgpool_i8 / qglobal_avgpool_i8 on uint8 against what
   OrtxEP ran before fuse_qdq made QAveragePool: dequantize_linear_f32 -> avgpool_f32 / global_avgpool_f32 ->
   quantize_linear_f32.
2. Models: ResNet-18-style and MobileNetV2-style quantized by ortx.quantize (8 samples, seed 0), "after" as it is,
   "before" with exclude_op_types AveragePool/GlobalAveragePool (the pool's input then stays float, as the
   quantizer left it before); both through OrtxEP (tuning off), interleaved as benchmarks/int8.py does, with the
   cosine of each output against ORT fp32 on another input.
Writes BENCHMARKS.md's "INT8 average pooling (issue #5)" section.
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402

import ortx  # noqa: E402
from benchmarks._report import head_commit, load_average, wait_for_quiet, write_section  # noqa: E402
from benchmarks.int8 import _options, inputs, interleaved  # noqa: E402
from benchmarks.kernels import block_medians  # noqa: E402
from ortx import _kernels  # noqa: E402
from ortx.quantization import quantize  # noqa: E402
from ortx.quantization.integer import average_multipliers  # noqa: E402
from tests import _models  # noqa: E402
from tests.tolerances import cosine  # noqa: E402

KERNEL_CASES = (  # (label, shape [N, C, H, W], kernel or None for global, pads)
    ("GlobalAveragePool 16x512x7x7", (16, 512, 7, 7), None, (0, 0, 0, 0)),
    ("GlobalAveragePool 16x1280x7x7", (16, 1280, 7, 7), None, (0, 0, 0, 0)),
    ("AveragePool 3x3 pads 1, 1x64x112x112", (1, 64, 112, 112), (3, 3), (1, 1, 1, 1)),
    ("AveragePool 2x2 stride 2, 1x128x56x57", (1, 128, 56, 57), (2, 2), (0, 0, 0, 0)),
)


def kernel_paths(shape, kernel, pads, threads):
    """{"int8": callable, "float": callable} computing the same pool (uint8 in and out)."""
    rng = np.random.default_rng(0)
    n, c, h, w = shape
    x = rng.integers(0, 256, shape).astype(np.uint8)
    stride = kernel if kernel == (2, 2) else (1, 1)
    if kernel is None:
        out_shape = (n, c, 1, 1)
        window = None
    else:
        out_shape = (n, c, (h + pads[0] + pads[2] - kernel[0]) // stride[0] + 1,
                     (w + pads[1] + pads[3] - kernel[1]) // stride[1] + 1)
        window = [n * c, 1, h, w, 1, *out_shape[2:], 1, *kernel, 1, *stride, 0, pads[0], pads[1], 0, pads[2],
                  pads[3], 1, 1, 1, 0]
    quant = [0, 0, 128, 120, 0, 255]
    if window is None:
        table = average_multipliers(0.03, 0.021, [h * w])
        int8_ints, int8_kernel = [n * c, h * w] + quant + [h * w, 1], "qglobal_avgpool_i8"
        float_ints, float_kernel = [n * c, h * w], "global_avgpool_f32"
    else:
        table = average_multipliers(0.03, 0.021, range(1, kernel[0] * kernel[1] + 1))
        int8_ints, int8_kernel = window + quant + [1, len(table)], "qavgpool_i8"
        float_ints, float_kernel = window, "avgpool_f32"
    y = np.empty(out_shape, np.uint8)
    dequantized, pooled = np.empty(shape, np.float32), np.empty(out_shape, np.float32)
    count_in, count_out = x.size, y.size

    def run_int8():
        _kernels.call(int8_kernel, int8_ints, [], [x, table, y], num_threads=threads)

    def run_float():
        _kernels.call("dequantize_linear_f32", [count_in, 128, 0], [0.03], [x, dequantized], num_threads=threads)
        _kernels.call(float_kernel, float_ints, [], [dequantized, pooled], num_threads=threads)
        _kernels.call("quantize_linear_f32", [count_out, 120, 0, 255, 0], [0.021], [pooled, y], num_threads=threads)

    return {"int8": run_int8, "float": run_float}


def model_sessions(builder, threads: int, samples: int):
    fp32 = builder()
    name = fp32.graph.input[0].name
    shape = tuple(d.dim_value for d in fp32.graph.input[0].type.tensor_type.shape.dim)
    calibration = {name: inputs("model", samples, shape, seed=0)}
    after, _ = quantize(fp32, calibration)
    before, _ = quantize(fp32, calibration, exclude_op_types=["AveragePool", "GlobalAveragePool"])
    options = [{"input_shapes": {name: shape}, "tuning": "off"}, {}]
    sessions = {label: ortx.InferenceSession(model, _options(threads), providers=["OrtxEP", "CPUExecutionProvider"],
                                             provider_options=options)
                for label, model in (("before", before), ("after", after))}
    reference = onnxruntime.InferenceSession(fp32.SerializeToString(), _options(threads),
                                             providers=["CPUExecutionProvider"])
    return name, shape, sessions, reference


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--quiet-wait", type=float, default=120.0,
                        help="seconds to wait, before each measurement, for the 1-minute load to drop below 1.0")
    parser.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    commit = head_commit()
    lines = [f"Measured {datetime.date.today()} on commit {commit} by `python benchmarks/int8_pool.py`, "
             f"{args.threads} threads, kernel ISA {_kernels.selected_isa()}. Kernels: the int8 kernel against the "
             "float steps it replaced (DequantizeLinear, fp32 pool, QuantizeLinear), timed in alternating blocks, "
             "5 rounds; ratio = int8 ms / float ms, median (range). Load avg: the 1-minute load when timing began.",
             "", "| kernel | int8 ms | float path ms | ratio int8 / float | load avg |", "|---|---|---|---|---|"]
    for label, shape, kernel, pads in KERNEL_CASES:
        wait_for_quiet(args.quiet_wait)
        load = load_average()
        paths = kernel_paths(shape, kernel, pads, args.threads)
        rounds = [block_medians(paths, args.runs) for _ in range(5)]
        ratios = [r["int8"] / r["float"] for r in rounds]
        int8_ms = 1e3 * statistics.median(r["int8"] for r in rounds)
        float_ms = 1e3 * statistics.median(r["float"] for r in rounds)
        row = (f"| {label} | {int8_ms:.4f} | {float_ms:.4f} | {statistics.median(ratios):.2f} "
               f"({min(ratios):.2f}-{max(ratios):.2f}) | {load:.1f} |")
        print(row, flush=True)
        lines.append(row)
    lines += ["", "Models through OrtxEP (ortx.quantize; before = the pools' inputs left float, as the quantizer did "
              "before QAveragePool): median ms over interleaved runs, cosine against ORT fp32.", "",
              "| model | before ms | after ms | after / before | cosine before / after | load avg |",
              "|---|---|---|---|---|---|"]
    for label, builder in (("ResNet-18-style", _models.resnet18_style),
                           ("MobileNetV2-style", _models.mobilenetv2_style)):
        name, shape, sessions, reference = model_sessions(builder, args.threads, args.samples)
        feeds = {name: inputs("model", 1, shape, seed=1)}
        expected = reference.run(None, feeds)[0]
        cosines = {key: cosine(session.run(None, feeds)[0], expected) for key, session in sessions.items()}
        wait_for_quiet(args.quiet_wait)
        load = load_average()
        times = interleaved(sessions, feeds, args.runs)
        row = (f"| {label} 1x3x224x224 | {times['before']:.2f} | {times['after']:.2f} | "
               f"{times['after'] / times['before']:.2f} | {cosines['before']:.5f} / {cosines['after']:.5f} | "
               f"{load:.1f} |")
        print(row, flush=True)
        lines.append(row)
    lines += ["", "The pool is a few microseconds of a several-millisecond model: each model ratio is one interleaved "
              "run, read it against the host's noise, not as a speed result."]
    body = "\n".join(lines)
    print(body)
    if not args.no_write:
        write_section(args.output, "INT8 average pooling (issue #5)", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
