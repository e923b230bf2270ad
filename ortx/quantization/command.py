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

--mixed: a precision per Conv/Gemm/MatMul layer instead of int8 everywhere: fp32, fp16 or bf16 weight storage
(+ Cast), int8 (QDQ as above), int4 weight-only (DequantizeLinear at opset 21; MatMul/Gemm blocked along K by
--block-size, Conv per output channel). Each layer is measured alone at each precision (the output error on the
calibration samples against the fp32 model, --metric), then the search keeps the measured error of the whole
model within --budget while minimising --objective size (bytes) or latency (ORT CPU median, --threads).
exit status: 0 ok, 2 usage, input or calibration-data error."""


def add_quantize_command(subparsers) -> argparse.ArgumentParser:
    from ortx.quantization.mixed_precision import DEFAULT_PRECISIONS
    from ortx.quantization.mixed_search import OBJECTIVES
    from ortx.quantization.precisions import DEFAULT_BLOCK_SIZE, PRECISIONS
    from ortx.quantization.quantize_model import ACTIVATION_DTYPES, METHODS
    from ortx.quantization.sensitivity import METRICS

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
    parser.add_argument("--threads", type=int, default=0,
                        help="onnxruntime threads for calibration (default: ORT's; 2 with --mixed)")
    parser.add_argument("--report", metavar="REPORT.json", help="also write the report as JSON")
    mixed = parser.add_argument_group("mixed precision")
    mixed.add_argument("--mixed", action="store_true", help="choose a precision per layer within --budget")
    mixed.add_argument("--budget", metavar="ERROR", help="largest output error of --metric against fp32 (e.g. 0.01)")
    mixed.add_argument("--objective", choices=OBJECTIVES, default="size", help="what to minimise (default size)")
    mixed.add_argument("--precisions", default=",".join(DEFAULT_PRECISIONS),
                       help=f"comma-separated, of {','.join(PRECISIONS)} (default {','.join(DEFAULT_PRECISIONS)})")
    mixed.add_argument("--metric", choices=tuple(METRICS), default="relative_l2",
                       help="relative_l2: ||y - y_fp32|| / ||y_fp32||; cosine: 1 - cosine (default relative_l2)")
    mixed.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE,
                       help=f"int4 block along K for MatMul/Gemm, 0 per channel (default {DEFAULT_BLOCK_SIZE})")
    mixed.add_argument("--error-samples", type=int, default=None,
                       help="measure errors on the first N calibration samples (default all)")
    mixed.add_argument("--sensitivity", metavar="REPORT.json",
                       help="reuse the per-layer measurements of an earlier --mixed --report on the same model, "
                            "data and options (to try another --budget)")
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
    if args.mixed:
        return _run_mixed(args, out)
    if args.budget is not None:
        print("ortx quantize: error: --budget needs --mixed", file=sys.stderr)
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


def _run_mixed(args, out) -> int:
    from tqdm import tqdm

    from ortx.model_io import ModelLoadError, ModelSaveError, save
    from ortx.quantization import CalibrationDataError, CalibrationRunError, QuantizationError
    from ortx.quantization.mixed_precision import check_budget, mixed_precision
    from ortx.quantization.precisions import PrecisionError

    try:
        budget = check_budget(float(args.budget) if args.budget is not None else None)
    except ValueError:
        print(f"ortx quantize: error: --budget must be a finite number >= 0 with --mixed, not {args.budget!r}",
              file=sys.stderr)
        return 2
    try:
        sensitivity = _read_sensitivity(args.sensitivity) if args.sensitivity else None
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"ortx quantize: error: --sensitivity '{args.sensitivity}': {error}", file=sys.stderr)
        return 2
    bars = {}

    def progress(stage: str, done: int, total: int | None) -> None:
        if stage not in bars:
            for bar in bars.values():
                bar.close()
            bars[stage] = tqdm(desc=stage, unit={"calibrating": "sample", "sensitivity": "model",
                                                 "search": "model"}[stage], file=sys.stderr, leave=False)
        bars[stage].total = total
        bars[stage].update(done - bars[stage].n)

    try:
        model, report = mixed_precision(
            args.input, args.calibration, budget=budget, objective=args.objective, precisions=args.precisions,
            metric=args.metric, method=args.method, percentile=args.percentile,
            activation_dtype=args.activation_dtype, block_size=args.block_size, exclude_nodes=args.exclude,
            exclude_op_types=args.exclude_op_type, error_samples=args.error_samples,
            optimize=not args.no_optimize, threads=args.threads or 2,
            progress=progress, sensitivity=sensitivity)
        save(model, args.output, protect=args.input)
    except PrecisionError as error:
        option = "--" if str(error).startswith("precisions:") else ""
        print(f"ortx quantize: error: {option}{error}", file=sys.stderr)
        return 2
    except (OSError, ModelLoadError, ModelSaveError, CalibrationDataError, CalibrationRunError,
            QuantizationError, ValueError) as error:
        print(f"ortx quantize: error: {error}", file=sys.stderr)
        return 2
    finally:
        for bar in bars.values():
            bar.close()
    out.write(report.table() + "\n")
    out.write(f"wrote {args.output}\n")
    if args.report:
        with open(args.report, "w") as stream:
            json.dump(report.to_dict(), stream, indent=1)
        out.write(f"wrote {args.report}\n")
    return 0


def _read_sensitivity(path: str) -> list:
    """The sensitivity records of a --mixed --report JSON (errors written as null were infinite: failed)."""
    import dataclasses
    import math

    from ortx.quantization.sensitivity import SensitivityRecord

    with open(path) as stream:
        data = json.load(stream)
    if not isinstance(data, dict) or not isinstance(data.get("sensitivity"), list):
        raise ValueError("not a --mixed report (no 'sensitivity' list)")
    names = {field.name for field in dataclasses.fields(SensitivityRecord)}
    records = []
    for entry in data["sensitivity"]:
        values = {key: value for key, value in entry.items() if key in names}
        values["error"] = math.inf if values.get("error") is None else float(values["error"])
        records.append(SensitivityRecord(**values))
    return records
