"""`ortx split MODEL --stages N -o DIR`: cut a model into pipeline stages (ortx.pipeline.split) and print the cut.

ortx/cli.py adds it with `add_split_command(subparsers)`; the work is in ortx.parallel.split.
"""
from __future__ import annotations

import argparse
import sys

from ortx.cli_args import input_shape

DESCRIPTION = """\
Cuts MODEL into N stage models for pipeline parallelism (ortx.pipeline.split): the graph passes run first, stages
are balanced by cost and, within 2% of the best balance, cut where the fewest bytes cross. Prints each stage's
nodes and cost and each cut's tensors and bytes; -o DIR writes stage_<k>.onnx and plan.json (atomically).
--measure profiles the model in onnxruntime on seeded random inputs (1 thread) for the costs; without it they are
estimated from MACs. Dynamic input dims need --input-shape.
exit status: 0 ok, 2 usage or input error (a stage count larger than the graph allows says the maximum)."""


def add_split_command(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("split", help="cut a model into pipeline stages (ortx.pipeline.split)",
                                   description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="ONNX model path (never modified)")
    parser.add_argument("--stages", type=int, required=True, help="number of stages")
    parser.add_argument("-o", "--output", metavar="DIR", help="directory for stage_<k>.onnx and plan.json")
    parser.add_argument("--measure", action="store_true", help="measure node costs (ORT profiler) instead of "
                        "estimating them from MACs")
    parser.add_argument("--input-shape", metavar="NAME:D1xD2x...", type=input_shape, action="append", default=[],
                        help="fix an input's shape (repeat for several inputs); needed for dynamic dims")
    parser.set_defaults(handler=run_split_command)
    return parser


def run_split_command(args, out=None) -> int:
    from ortx.model_io import ModelLoadError, ModelSaveError, load
    from ortx.optimize import CheckInputError, random_feeds
    from ortx.parallel.split import split

    out = out or sys.stdout
    shapes = dict(args.input_shape)
    try:
        samples = random_feeds(load(args.model), shapes) if args.measure else None
        plan = split(args.model, args.stages, sample_inputs=samples, input_shapes=shapes or None,
                     save_to=args.output)
    except (OSError, ValueError, ModelLoadError, ModelSaveError, CheckInputError) as error:
        print(f"ortx split: error: {error}", file=sys.stderr)
        return 2
    print(plan.describe(), file=out)
    if args.output:
        print(f"wrote {len(plan.stages)} stage model(s) and plan.json to {args.output}", file=out)
    return 0
