"""`ortx prune IN.onnx -o OUT.onnx --sparsity 0.8 [--structured 2:4|channel]`: parsing, progress and the report only
(the work is in ortx.pruning)."""
from __future__ import annotations

import argparse
import json
import os
import sys

from ortx.cli_args import input_shape

DESCRIPTION = """\
Prunes a float ONNX model and writes standard ONNX that any runtime loads. The model first goes through ortx's -O2
passes (BatchNormalization folded into Conv, ...), so the weights pruned are the deployed ones; --exclude takes node
names of that optimized model (the per-layer table lists them).

Structures:
  (default) unstructured  the smallest-magnitude --sparsity share of each Conv/Gemm/MatMul weight becomes zero
                          (--scope global: one magnitude threshold over all layers instead); the graph is unchanged,
                          OrtxEP's sparse kernels turn the zeros into speed where they win on this machine
  --structured N:M        e.g. 2:4: in every M consecutive weights along the reduction axis, the M-N smallest are zero
  --structured channel    --sparsity of each Conv's output channels are removed (smallest filter L1 norms), with the
                          matching inputs of their consumers, through BatchNormalization, activations, depthwise
                          Convs and residual Adds (those keep the same channels on both branches); the model shrinks
Weights under --min-elements entries are left dense (stems and small layers cost accuracy and gain little).
--sensitivity prunes each layer alone and prints, most sensitive first, the output cosine against the dense model on
--calibration samples (or seeded random inputs): the data for --exclude. Every run prints the pruned model's output
cosine against the dense model on the same inputs.
The input file is never modified; OUT is written atomically. exit status: 0 ok, 2 usage or input error."""


def add_prune_command(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("prune", help="magnitude, N:M or channel pruning, written as standard ONNX",
                                   description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", metavar="IN.onnx", help="float model (never modified)")
    parser.add_argument("-o", "--output", metavar="OUT.onnx", required=True, help="where to write the pruned model")
    parser.add_argument("--sparsity", type=float, required=True,
                        help="share of weights (or, with --structured channel, of channels) removed, in [0, 1)")
    parser.add_argument("--structured", metavar="N:M|channel", default="unstructured",
                        help="N:M (e.g. 2:4) or channel; default unstructured")
    parser.add_argument("--scope", choices=("layer", "global"), default="layer",
                        help="unstructured: a threshold per layer (default) or one over all layers")
    parser.add_argument("--min-elements", type=int, default=1024, help="leave smaller weights dense (default 1024)")
    parser.add_argument("--channel-multiple", type=int, default=1,
                        help="--structured channel: keep a multiple of this many channels (default 1)")
    parser.add_argument("--exclude", metavar="NODE", action="append", default=[], help="leave this node dense")
    parser.add_argument("--input-shape", metavar="NAME:D1xD2x...", type=input_shape, action="append", default=[],
                        help="fix an input's dynamic dims (shape inference; the comparison inputs)")
    parser.add_argument("--calibration", metavar="DATA",
                        help=".npz (or folder of .npz) of input samples for the comparisons (default: 2 seeded "
                             "random samples)")
    parser.add_argument("--sensitivity", action="store_true", help="also prune each layer alone and report it")
    parser.add_argument("--threads", type=int, default=2, help="ORT threads for the comparisons (default 2)")
    parser.add_argument("--report", metavar="REPORT.json", help="also write the reports as JSON")
    parser.set_defaults(handler=run_prune_command)
    return parser


def _samples(args, model) -> list[dict]:
    from ortx.optimize import random_feeds

    if args.calibration:
        from ortx.quantization.calibration_data import calibration_set

        return list(calibration_set(args.calibration, model))[:8]
    return [random_feeds(model, dict(args.input_shape), seed=seed) for seed in (0, 1)]


def run_prune_command(args, out=None) -> int:
    out = out or sys.stdout
    import onnx_ir as ir

    from ortx.model_io import ModelLoadError, ModelSaveError, load, save, to_ort_bytes
    from ortx.optimize import CheckInputError
    from ortx.passes._report import PassError
    from ortx.pruning import prune
    from ortx.pruning.sensitivity import _compare, _outputs, layer_sensitivity
    from ortx.quantization.calibration_data import CalibrationDataError

    def fail(message: str) -> int:
        print(f"ortx prune: error: {message}", file=sys.stderr)
        return 2

    if not os.path.exists(args.input):
        return fail(f"input model {args.input!r} does not exist")
    if os.path.exists(args.output) and os.path.samefile(args.output, args.input):
        return fail(f"output {args.output!r} is the input model; ortx never overwrites its input")
    if args.sensitivity and args.structured == "channel":
        return fail("--sensitivity measures single layers; it supports unstructured and N:M pruning")
    try:
        samples = _samples(args, load(args.input))
        result = prune(args.input, sparsity=args.sparsity, structure=args.structured, scope=args.scope,
                       min_elements=args.min_elements, exclude=args.exclude, channel_multiple=args.channel_multiple,
                       input_shapes=dict(args.input_shape))
    except (ModelLoadError, PassError, CheckInputError, CalibrationDataError, ValueError) as error:
        return fail(str(error))
    from ortx.cli import render_reports

    out.write(render_reports(result.reports[-1:]) + "\n")
    shares = sorted(result.layer_sparsity.items(), key=lambda item: -item[1])
    out.write(f"prunable weights: {result.parameters_before} -> {result.parameters_after} entries, "
              f"{100 * result.zeros_after / max(1, result.parameters_after):.1f}% zero\n")
    for name, share in shares if args.structured != "channel" else ():
        out.write(f"  {name:<40} {100 * share:5.1f}% zero\n")
    dense = _outputs(to_ort_bytes(load(args.input)), samples, args.threads)
    cosine, error = _compare(dense, _outputs(result.model.SerializeToString(), samples, args.threads))
    out.write(f"output against the dense model on {len(samples)} samples: cosine {cosine:.6f}, relative error "
              f"{error:.4f}\n")
    layers = []
    if args.sensitivity:
        def on_layer(index: int, total: int, name: str) -> None:
            print(f"\r[sensitivity {index + 1}/{total}] {name[:50]:<50}", end="", file=sys.stderr, flush=True)

        from ortx.optimize import level_passes
        from ortx.passes._report import run_passes

        optimized = ir.serde.deserialize_model(load(args.input))
        run_passes(optimized, level_passes(2, dict(args.input_shape)))
        layers = layer_sensitivity(optimized, samples, sparsity=args.sparsity, structure=args.structured,
                                   min_elements=args.min_elements, threads=args.threads, on_layer=on_layer)
        print(file=sys.stderr)
        out.write("sensitivity (each layer pruned alone; most sensitive first):\n")
        for layer in layers:
            out.write(f"  {layer.node:<40} {layer.op_type:<7} {layer.parameters:>9} params  cosine {layer.cosine:.6f}"
                      f"  rel. error {layer.relative_error:.4f}\n")
    try:
        save(result.model, args.output, protect=args.input)
    except (ModelSaveError, OSError) as error:
        return fail(str(error))
    out.write(f"wrote {args.output}\n")
    if args.report:
        document = {"input": args.input, "output": args.output, "passes": [r.to_dict() for r in result.reports],
                    "layer_sparsity": result.layer_sparsity, "cosine": cosine, "relative_error": error,
                    "sensitivity": [layer.__dict__ for layer in layers]}
        with open(args.report, "w") as stream:
            json.dump(document, stream, indent=2)
    return 0
