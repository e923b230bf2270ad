"""Quantization accuracy: PP-OCRv4 rec quantized by ortx (each calibration method) and by onnxruntime's
quantize_static, output cosine against fp32 and file size; writes BENCHMARKS.md's "Quantization" section.

Usage: python benchmarks/quantize.py [--samples 16] [--evaluate 8] [--model rec]
Calibration: `--samples` random inputs, uniform in [-1, 1] (the range of PP-OCR's normalised images), seed 0, shape
1x3x48x320 (the demo shape). Evaluation: `--evaluate` other random inputs (seed 1); per quantized model, the cosine of
its output with the fp32 model's output, mean and minimum over them. Every quantizer gets the same fp32 graph (the
model after `ortx optimize -O2`: BatchNormalization folded, opset 17) and the same calibration samples; ORT's is
quantize_static with QuantFormat.QDQ, per_channel=True, uint8 activations and int8 weights, MinMax (its default
calibration). Size: the quantized file's bytes over the packaged fp32 file's. Random inputs are not text images:
this measures numerical fidelity of the int8 graph, not recognition accuracy.
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
import onnxruntime  # noqa: E402

from benchmarks._report import write_section  # noqa: E402
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
                        calibrate_method: str = "MinMax") -> onnx.ModelProto:
    """onnxruntime's quantize_static: QDQ, per-channel, U8S8; `calibrate_method` names a CalibrationMethod."""
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{name: samples[index:index + 1]} for index in range(len(samples))])

        def get_next(self):
            return next(self.feeds, None)

    with tempfile.TemporaryDirectory() as directory:
        source, target = os.path.join(directory, "fp32.onnx"), os.path.join(directory, "int8.onnx")
        with open(source, "wb") as stream:
            stream.write(to_ort_bytes(fp32))
        quantize_static(source, target, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod[calibrate_method])
        return onnx.load(target)


def quantize_nodes(model: onnx.ModelProto) -> int:
    return sum(node.op_type == "QuantizeLinear" for node in model.graph.node)


def evaluate(model: onnx.ModelProto, name: str, inputs: np.ndarray, references: list[np.ndarray]) -> list[float]:
    session = onnxruntime.InferenceSession(to_ort_bytes(model), providers=["CPUExecutionProvider"])
    return [cosine(session.run(None, {name: inputs[index:index + 1]})[0], reference)
            for index, reference in enumerate(references)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--evaluate", type=int, default=8)
    parser.add_argument("--model", default="rec", choices=sorted(PACKAGED_MODELS))
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args()

    path = packaged_model_path(args.model)
    shape = PACKAGED_MODELS[args.model][1]
    fp32_bytes = os.path.getsize(path)
    fp32, _ = optimize(path, level=2)
    name = fp32.graph.input[0].name
    calibration = random_inputs(args.samples, shape, seed=0)
    inputs = random_inputs(args.evaluate, shape, seed=1)
    reference_session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    references = [reference_session.run(None, {name: inputs[index:index + 1]})[0] for index in range(len(inputs))]

    rows = []
    for method in METHODS:
        start = time.perf_counter()
        quantized, _ = quantize(fp32, {name: calibration}, method=method, optimize=False)
        seconds = time.perf_counter() - start
        cosines = evaluate(quantized, name, inputs, references)
        rows.append((f"ortx {method}", cosines, quantized.ByteSize(), seconds, quantize_nodes(quantized)))
        print(f"ortx {method}: mean cosine {np.mean(cosines):.5f}, min {np.min(cosines):.5f}, "
              f"{seconds:.1f} s", flush=True)
    start = time.perf_counter()
    ort_model = ort_quantize_static(fp32, name, calibration)
    seconds = time.perf_counter() - start
    cosines = evaluate(ort_model, name, inputs, references)
    rows.append(("ORT quantize_static (MinMax)", cosines, ort_model.ByteSize(), seconds, quantize_nodes(ort_model)))
    print(f"ORT quantize_static: mean cosine {np.mean(cosines):.5f}, min {np.min(cosines):.5f}, {seconds:.1f} s")

    header = "| quantizer | cosine vs fp32 (mean) | cosine (min) | size / fp32 | quantize s | QuantizeLinear nodes |"
    lines = [header, "|---|---|---|---|---|---|"]
    for label, cosines, size, seconds, quantized_nodes in rows:
        lines.append(f"| {label} | {np.mean(cosines):.5f} | {np.min(cosines):.5f} | {size / fp32_bytes:.3f} | "
                     f"{seconds:.1f} | {quantized_nodes} |")
    table = "\n".join(lines)
    print(table)
    if args.no_write:
        return 0
    body = (f"Measured {datetime.date.today()} on {platform.machine()}, onnxruntime {onnxruntime.__version__}; "
            f"command: `python benchmarks/quantize.py`. PP-OCRv4 {args.model} (input {'x'.join(map(str, shape))}), "
            f"{args.samples} random calibration samples (uniform [-1, 1], seed 0), output cosine against the fp32 "
            f"model over {args.evaluate} other random inputs (seed 1), run in plain ORT CPU. Every quantizer gets "
            "the same -O2 fp32 graph and samples; ortx: per-channel int8 weights, uint8 activations, int32 bias; "
            "ORT: quantize_static QDQ, per-channel, U8S8, MinMax. ortx quantizes only the inputs of Conv/Gemm/MatMul "
            "(Add, Mul, Sigmoid ... stay float until OrtxEP has int8 kernels for them); ORT's default also puts "
            "Q/DQ around Add, Mul and other ops it supports, hence more QuantizeLinear nodes: part of its larger "
            "error is that wider int8 coverage. Size: quantized file / packaged fp32 file "
            f"({fp32_bytes} bytes). Random inputs measure numerical fidelity, not recognition accuracy.\n\n" + table)
    write_section(os.path.join(ROOT, "BENCHMARKS.md"), "Quantization", body)
    print("wrote the Quantization section of BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
