"""`ortx fp32-nodes MODEL --target-cosine 0.999`: which layers a bf16 OrtxEP session keeps fp32 to meet a target.

ortx/cli.py adds it with `add_fp32_nodes_command(subparsers)`; the search is ortx.ep.fp32_nodes_search.
"""
from __future__ import annotations

import argparse
import json
import sys

from ortx.cli_args import input_shape, positive_int

DESCRIPTION = """\
Chooses the layers of MODEL that an OrtxEP session with precision 'bf16' keeps fp32 (its provider option
fp32_nodes) for the session's outputs to reach a cosine target against ONNX Runtime's CPU EP in fp32, at a low
added time, measured with OrtxEP's own kernels on the inputs given: each layer alone fp32 first (its gain), its
cost from profiles of the all-bf16 and all-fp32 sessions, then layers added by gain per cost until the target
holds, then each chosen layer, costliest first, dropped again where the target holds without it (in passes until
none can go). The score is the worst cosine over every float output and input. Prints the choice with each kept
layer's gain and cost and, with --time-runs, the medians of the all-bf16, chosen and all-fp32 sessions (paired
ratios to the all-bf16 one), and the provider_options to use.
Inputs: --calibration DATA (an .npz whose arrays are named after the model inputs and stacked on the batch axis,
or a folder of them: the first --samples samples), else --samples seeded random inputs in [-1, 1).
exit status: 0 target met, 1 target unreachable (even with every layer fp32), 2 usage or input error."""


def _cosine(text: str) -> float:
    value = float(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {value}")
    return value


def add_fp32_nodes_command(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "fp32-nodes", help="which layers a bf16 OrtxEP session keeps fp32 to meet an output cosine target",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="ONNX model path (never modified)")
    parser.add_argument("--target-cosine", type=_cosine, default=0.999,
                        help="worst output cosine against ONNX Runtime fp32 to reach (default 0.999)")
    parser.add_argument("--calibration", metavar="DATA", help="inputs: an .npz or a folder of .npz files")
    parser.add_argument("--samples", type=positive_int, default=4, help="inputs scored (default 4)")
    parser.add_argument("--threads", type=positive_int, default=None, help="intra-op threads of every session")
    parser.add_argument("--input-shape", metavar="NAME:D1xD2x...", type=input_shape, action="append", default=[],
                        help="fix an input's shape (repeat for several inputs); needed for dynamic dims")
    parser.add_argument("--cost-runs", type=int, default=20, metavar="N",
                        help="profiled runs for the layers' costs (default 20; 0: order by gain alone)")
    parser.add_argument("--time-runs", type=int, default=80, metavar="N",
                        help="timed runs of the all-bf16, chosen and all-fp32 sessions each, in blocks of 4 "
                        "(default 80; 0: no timing)")
    parser.add_argument("--json", metavar="OUT.json", help="also write the result as JSON")
    parser.set_defaults(handler=run_fp32_nodes_command)
    return parser


def run_fp32_nodes_command(args, out=None) -> int:
    from ortx.ep.fp32_nodes_search import search_fp32_nodes
    from ortx.ep.precision import effective_precision
    from ortx.model_io import ModelLoadError, write_bytes_atomically
    from ortx.quantization.calibration_data import CalibrationDataError

    out = out or sys.stdout

    _, precision_note = effective_precision("bf16")
    if precision_note:  # the sessions searched run fp32 kernels: nothing to choose
        print(f"ortx fp32-nodes: note: {precision_note}", file=sys.stderr)

    def progress(stage: str, done: int, total: int) -> None:
        end = "\n" if done == total else ""
        print(f"\r{stage}: {done}/{total}", end=end, file=sys.stderr, flush=True)

    try:
        choice = search_fp32_nodes(args.model, target=args.target_cosine, calibration=args.calibration,
                                   samples=args.samples, threads=args.threads,
                                   input_shapes=dict(args.input_shape) or None, cost_runs=max(0, args.cost_runs),
                                   time_runs=max(0, args.time_runs),
                                   progress=progress)
    except (OSError, ValueError, ModelLoadError, CalibrationDataError) as error:
        print(f"ortx fp32-nodes: error: {error}", file=sys.stderr)
        return 2
    print(choice.summary(), file=out)
    if args.json:
        document = {"target": choice.target, "met": choice.met, "fp32_nodes": list(choice.fp32_nodes),
                    "candidates": choice.candidates, "score_bf16": choice.score_bf16,
                    "score_chosen": choice.score_chosen, "score_fp32": choice.score_fp32, "gains": choice.gains,
                    "costs_ms": choice.costs_ms,
                    "times_ms": choice.times_ms, "paired_to_bf16": choice.paired, "sessions": choice.sessions,
                    "seconds": choice.seconds,
                    "provider_options": choice.provider_options() if choice.met else None}
        write_bytes_atomically(args.json, (json.dumps(document, indent=2) + "\n").encode())
    return 0 if choice.met else 1
