"""Quantization accuracy: PP-OCRv4 det, rec and cls quantized by ortx (each calibration method) and by
onnxruntime's quantize_static, output cosine against fp32 and file size; writes BENCHMARKS.md's "Quantization" section.

Usage: python benchmarks/quantize.py [--samples 16] [--evaluate 8] [--models det,rec,cls] [--inputs text|random]
Calibration: `--samples` synthetic printed-text images (benchmarks/text_images.py, normalised as PP-OCR does), seed 0,
at each model's demo shape (det 1x3x640x640, rec 1x3x48x320, cls 1x3x48x192); `--inputs random` uses uniform noise
in [-1, 1] instead (on noise det's output stays near zero, so its cosine says little). Evaluation: `--evaluate` other images of the same kind (seed 1); per quantized model, the cosine of
its output with the fp32 model's output, mean and minimum over them. Every quantizer gets the same fp32 graph (the
model after `ortx optimize -O2`: BatchNormalization folded, opset 17) and the same calibration samples; ORT's is
quantize_static with QuantFormat.QDQ, per_channel=True, uint8 activations and int8 weights, MinMax (its default
calibration), twice: with its default op types (it also quantizes Add, Mul, pooling, ...) and restricted to
Conv/Gemm/MatMul, the ops ortx quantizes (op_types_to_quantize), so one ORT row is like for like. Size: the quantized file's bytes over the packaged fp32 file's. This measures numerical fidelity of the int8 graph
against fp32, not recognition accuracy.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import version_converter  # noqa: E402
import onnxruntime  # noqa: E402

from benchmarks._report import write_section  # noqa: E402
from benchmarks.text_images import text_images  # noqa: E402
from ortx.demo import PACKAGED_MODELS, packaged_model_path  # noqa: E402
from ortx.model_io import to_ort_bytes  # noqa: E402
from ortx.optimize import optimize  # noqa: E402
from ortx.quantization import METHODS, quantize  # noqa: E402


def cosine(first: np.ndarray, second: np.ndarray) -> float:
    first, second = first.astype(np.float64).ravel(), second.astype(np.float64).ravel()
    return float(first @ second / (np.linalg.norm(first) * np.linalg.norm(second)))


def random_inputs(count: int, shape: tuple, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (count, *shape[1:])).astype(np.float32)


def ort_quantize_static(fp32: onnx.ModelProto, name: str, samples: np.ndarray, *,
                        calibrate_method: str = "MinMax", op_types: list[str] | None = None,
                        activation_type: str = "QUInt8") -> onnx.ModelProto:
    """onnxruntime's quantize_static: QDQ, per-channel, int8 weights, U8S8 (`activation_type` "QInt8": S8S8);
    `calibrate_method` names a CalibrationMethod;
    `op_types` restricts the quantized op types (ORT's default: every op type it supports). A model below opset 13
    is converted to 13 first (as ortx.quantize does), else ORT writes per-channel DequantizeLinear it can't load."""
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{name: samples[index:index + 1]} for index in range(len(samples))])

        def get_next(self):
            return next(self.feeds, None)

    opset = next((entry.version for entry in fp32.opset_import if entry.domain in ("", "ai.onnx")), 0)
    if opset < 13:  # per-channel DequantizeLinear (axis) needs opset 13; ORT's quantizer writes it regardless
        fp32 = version_converter.convert_version(fp32, 13)
    with tempfile.TemporaryDirectory() as directory:
        source, target = os.path.join(directory, "fp32.onnx"), os.path.join(directory, "int8.onnx")
        with open(source, "wb") as stream:
            stream.write(to_ort_bytes(fp32))
        quantize_static(source, target, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType[activation_type], weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod[calibrate_method], op_types_to_quantize=op_types)
        return onnx.load(target)


def quantize_nodes(model: onnx.ModelProto) -> int:
    return sum(node.op_type == "QuantizeLinear" for node in model.graph.node)


def evaluate(model: onnx.ModelProto, name: str, inputs: np.ndarray, references: list[np.ndarray]) -> list[float]:
    session = onnxruntime.InferenceSession(to_ort_bytes(model), providers=["CPUExecutionProvider"])
    return [cosine(session.run(None, {name: inputs[index:index + 1]})[0], reference)
            for index, reference in enumerate(references)]


LIKE_FOR_LIKE = ["Conv", "Gemm", "MatMul"]


def measure_model(key: str, samples: int, evaluate_count: int, make_inputs) -> tuple[list[tuple], int]:
    """Rows (label, cosines, size, seconds, QuantizeLinear count) for one packaged model, and its fp32 file size."""
    path = packaged_model_path(key)
    shape = PACKAGED_MODELS[key][1]
    fp32_bytes = os.path.getsize(path)
    fp32, _ = optimize(path, level=2)
    name = fp32.graph.input[0].name
    calibration = make_inputs(samples, shape, seed=0)
    inputs = make_inputs(evaluate_count, shape, seed=1)
    reference_session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    references = [reference_session.run(None, {name: inputs[index:index + 1]})[0] for index in range(len(inputs))]
    quantizers = [(f"ortx {method}", lambda method=method: quantize(fp32, {name: calibration}, method=method,
                                                                    optimize=False)) for method in METHODS]
    quantizers += [("ORT quantize_static (MinMax, default op types)",
                    lambda: ort_quantize_static(fp32, name, calibration)),
                   ("ORT quantize_static (MinMax, Conv/Gemm/MatMul)",
                    lambda: ort_quantize_static(fp32, name, calibration, op_types=LIKE_FOR_LIKE))]
    rows = []
    for label, make in quantizers:
        start = time.perf_counter()
        quantized = make()
        seconds = time.perf_counter() - start
        kept = ""
        if isinstance(quantized, tuple):  # ortx: (model, report); the share of each tensor's observed range kept
            quantized, report = quantized
            shares = [max(abs(t.low), abs(t.high)) / max(abs(t.minimum), abs(t.maximum))
                      for t in report.tensors if max(abs(t.minimum), abs(t.maximum)) > 0]
            kept = f"{np.median(shares):.2f} / {np.min(shares):.2f}"
        cosines = evaluate(quantized, name, inputs, references)
        rows.append((label, cosines, quantized.ByteSize(), seconds, quantize_nodes(quantized), kept))
        print(f"{key} {label}: mean cosine {np.mean(cosines):.5f}, min {np.min(cosines):.5f}, {seconds:.1f} s",
              flush=True)
    return rows, fp32_bytes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--evaluate", type=int, default=8)
    parser.add_argument("--models", default="det,rec,cls",
                        help=f"comma-separated, from {', '.join(sorted(PACKAGED_MODELS))}")
    parser.add_argument("--inputs", choices=["text", "random"], default="text",
                        help="synthetic text images (default) or uniform noise in [-1, 1]")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args()
    make_inputs = text_images if args.inputs == "text" else random_inputs
    keys = [key.strip() for key in args.models.split(",") if key.strip()]
    unknown = [key for key in keys if key not in PACKAGED_MODELS]
    if unknown or not keys:
        parser.error(f"--models: unknown {', '.join(unknown) or '(none given)'}; "
                     f"choose from {', '.join(sorted(PACKAGED_MODELS))}")

    header = ("| model | quantizer | cosine vs fp32 (mean) | cosine (min) | size / fp32 | quantize s "
              "| QuantizeLinear nodes | range kept (median / min) |")
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    sizes = []
    for key in keys:
        rows, fp32_bytes = measure_model(key, args.samples, args.evaluate, make_inputs)
        sizes.append(f"{key} {fp32_bytes}")
        for label, cosines, size, seconds, quantized_nodes, kept in rows:
            lines.append(f"| {key} | {label} | {np.mean(cosines):.5f} | {np.min(cosines):.5f} | "
                         f"{size / fp32_bytes:.3f} | {seconds:.1f} | {quantized_nodes} | {kept or 'n/a'} |")
    table = "\n".join(lines)
    print(table)
    if args.no_write:
        return 0
    shapes = ", ".join(f"{key} {'x'.join(map(str, PACKAGED_MODELS[key][1]))}" for key in keys)
    body = (f"Measured {datetime.date.today()} on {platform.machine()}, onnxruntime {onnxruntime.__version__}; "
            f"command: `python benchmarks/quantize.py --models {','.join(keys)} --inputs {args.inputs}`. PP-OCRv4 "
            f"models (inputs {shapes}), "
            + (f"{args.samples} synthetic printed-text calibration images (benchmarks/text_images.py: lines of random "
               "letters and digits, PP-OCR's normalisation; seed 0), output cosine against the fp32 model over "
               f"{args.evaluate} other such images (seed 1)" if args.inputs == "text" else
               f"{args.samples} random calibration samples (uniform [-1, 1], seed 0), output cosine against the fp32 "
               f"model over {args.evaluate} other random inputs (seed 1)")
            + ", run in plain ORT CPU. Every quantizer gets "
            "the same -O2 fp32 graph and samples; ortx: per-channel int8 weights, uint8 activations, int32 bias, "
            "inputs of Conv/Gemm/MatMul only; ORT: quantize_static QDQ, per-channel, U8S8, MinMax, once with its "
            "default op types (it also puts Q/DQ around Add, Mul, pooling ..., hence more QuantizeLinear nodes and "
            "part of its larger error) and once restricted to Conv/Gemm/MatMul (like for like with ortx). Size: "
            f"quantized model bytes / packaged fp32 file ({'; '.join(sizes)} bytes). This measures numerical "
            "fidelity against fp32, not recognition accuracy. Range kept: per quantized activation tensor, the largest |x| of "
            "its calibrated range over the largest |x| observed (1.00 = nothing clipped), median and minimum over the "
            "model's tensors; ortx entropy is TensorRT's KL threshold search over 2048 bins, which can clip a "
            "long-tailed activation (hard-swish outputs in rec and cls) to a fraction of its range.\n\n" + table)
    write_section(os.path.join(ROOT, "BENCHMARKS.md"), "Quantization", body)
    print("wrote the Quantization section of BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
