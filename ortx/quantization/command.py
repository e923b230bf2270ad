"""`ortx quantize IN.onnx -o OUT.onnx --calibration DATA`: post-training int8 quantization to standard QDQ ONNX.

ortx/cli.py adds it with `add_quantize_command(subparsers)`; the work is in ortx.quantization.quantize, this only
parses, shows a progress bar and renders the report.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from ortx.quantization.calibrate import DEFAULT_PERCENTILE

DESCRIPTION = """\
Quantizes a float ONNX model to int8 with calibration data and writes standard QDQ ONNX (QuantizeLinear /
DequantizeLinear pairs) that plain onnxruntime runs.

What is quantized: the inputs of Conv, Gemm and MatMul. Weights: int8, symmetric, one scale per output channel.
Activations: --activation-dtype (uint8 default, or int8), one scale and zero point per tensor; tensors joined by
Concat share one scale, and MaxPool/Reshape/Flatten/Transpose/Squeeze/Unsqueeze (and Relu between two quantized
tensors) pass the scale through instead of requantizing. Biases of Conv/Gemm: int32 at scale input x weight.
The model first goes through ortx's -O2 passes (BatchNormalization folded into Conv, ...); --exclude takes node
names of that optimized model, as listed in the report (--report writes it as JSON).

DATA: an .npz whose arrays are named after the model inputs and stacked on the batch axis (sample i is
array[i:i+1]), or a folder of such .npz files. Names, dtypes, shapes and finiteness are checked per sample.

Methods (the range each activation's scale covers): minmax (all values seen), percentile (clip the top
100 - P % of |x|; --percentile, default 99.999), entropy (TensorRT's KL-divergence threshold), mse (the threshold
of least quantization error over the histogram; the default: on PP-OCRv4 det, rec and cls text images it kept the
output closest to fp32 of all but minmax on rec, see BENCHMARKS.md 'Quantization'). The input file is never modified; OUT is written atomically.
exit status: 0 ok, 2 usage, input or calibration-data error."""


def add_quantize_command(subparsers) -> argparse.ArgumentParser:
    from ortx.quantization.quantize_model import ACTIVATION_DTYPES, METHODS

    parser = subparsers.add_parser(
        "quantize", help="post-training int8 quantization with calibration data, written as QDQ ONNX",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", metavar="IN.onnx", help="float model (never modified)")
    parser.add_argument("-o", "--output", metavar="OUT.onnx", required=True, help="where to write the QDQ model")
    parser.add_argument("--calibration", metavar="DATA", required=True,
                        help=".npz of arrays named after the inputs, stacked on the batch axis, or a folder of them")
    parser.add_argument("--method", choices=METHODS, default="mse",
                        help="activation range calibration (default mse)")
    parser.add_argument("--percentile", type=float, default=DEFAULT_PERCENTILE,
                        help=f"percentile of |x| kept by --method percentile (default {DEFAULT_PERCENTILE})")
    parser.add_argument("--activation-dtype", choices=ACTIVATION_DTYPES, default="uint8",
                        help="activation type (default uint8: VNNI multiplies unsigned activations by signed weights)")
    parser.add_argument("--exclude", metavar="NAME", action="append", default=[],
                        help="leave this node in float (repeatable)")
    parser.add_argument("--exclude-op-type", metavar="OP", action="append", default=[],
                        help="leave every node of this op type in float (repeatable)")
    parser.add_argument("--no-optimize", action="store_true", help="quantize the model as it is, without -O2 passes")
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime threads for calibration (default: ORT's)")
    parser.add_argument("--report", metavar="REPORT.json", help="also write the report as JSON")
    parser.set_defaults(handler=run_quantize_command)
    return parser


def run_quantize_command(args, out=None) -> int:
    from tqdm import tqdm

    from ortx.model_io import ModelLoadError, ModelSaveError, save
    from ortx.quantization import CalibrationDataError, CalibrationRunError, QuantizationError, quantize

    out = out or sys.stdout
    if not os.path.exists(args.input):
        print(f"ortx quantize: error: input model '{args.input}' does not exist", file=sys.stderr)
        return 2
    if os.path.abspath(args.output) == os.path.abspath(args.input) or (
            os.path.exists(args.output) and os.path.samefile(args.output, args.input)):
        print(f"ortx quantize: error: output '{args.output}' is the input model; ortx never overwrites its input",
              file=sys.stderr)
        return 2
    bar = tqdm(desc="calibrating", unit="sample", file=sys.stderr, leave=False)

    def progress(done: int, total: int | None) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        model, report = quantize(args.input, args.calibration, method=args.method, percentile=args.percentile,
                                 activation_dtype=args.activation_dtype, exclude_nodes=args.exclude,
                                 exclude_op_types=args.exclude_op_type, optimize=not args.no_optimize,
                                 progress=progress, threads=args.threads)
        save(model, args.output, protect=args.input)
    except (OSError, ModelLoadError, ModelSaveError, CalibrationDataError, CalibrationRunError,
            QuantizationError, ValueError) as error:
        bar.close()
        print(f"ortx quantize: error: {error}", file=sys.stderr)
        return 2
    bar.close()
    out.write(report.table() + "\n")
    out.write(f"wrote {args.output}\n")
    if args.report:
        with open(args.report, "w") as stream:
            json.dump(report.to_dict(), stream, indent=1)
        out.write(f"wrote {args.report}\n")
    return 0
