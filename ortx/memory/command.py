"""`ortx memory MODEL [--input-shape NAME:D1xD2x...] [--json] [--plan]`: the memory report of one model.

ortx/cli.py adds it with `add_memory_command(subparsers)`; all logic is in ortx.memory.summary, this only parses
and renders.
"""
from __future__ import annotations

import argparse
import sys

from ortx.cli_args import input_shape


DESCRIPTION = """\
Plans the activation memory of a model as ortx.InferenceSession would (OrtxEP first, static shapes) and prints,
per claimed segment and in total: naive bytes (every tensor its own buffer), ORT-style reuse (a freed buffer of
the same size is reused), the ortx plan (lifetime-based offsets in one arena, in-place ops applied), and the lower
bound (the largest set of tensors alive at once), with plan / lower bound and naive / plan ratios.
--json prints the same report with every tensor's offset, size and lifetime; --plan prints each segment's plan.
Dynamic input dims need --input-shape. exit status: 0 ok, 2 usage or input error."""


def add_memory_command(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "memory", help="activation memory: naive, ORT-style reuse, the ortx plan and its lower bound",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="ONNX model path")
    parser.add_argument("--input-shape", metavar="NAME:D1xD2x...", type=input_shape, action="append", default=[],
                        help="fix an input's shape (repeat for several inputs); needed for dynamic dims")
    parser.add_argument("--threads", type=int, default=1, help="threads the segments are compiled for (workspace "
                        "sizes depend on it)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (offsets per tensor)")
    parser.add_argument("--plan", action="store_true", help="also print each segment's plan as a table")
    parser.set_defaults(handler=run_memory_command)
    return parser


def run_memory_command(args, out=None) -> int:
    from ortx.memory.summary import report

    from ortx.model_io import ModelLoadError, load
    from ortx.optimize import CheckInputError, check_input_shape_names, random_feeds

    out = out or sys.stdout
    shapes = dict(args.input_shape)
    try:
        model = load(args.model)
        check_input_shape_names(model, shapes, args.model)
        random_feeds(model, shapes)  # a plan needs every dim: names the dynamic input and the flag that fixes it
        result = report(model, shapes, num_threads=args.threads)
    except (OSError, ValueError, ModelLoadError, CheckInputError) as error:
        print(f"ortx memory: error: {error}", file=sys.stderr)
        return 2
    if args.json:
        out.write(result.to_json(indent=1) + "\n")
        return 0
    out.write(result.table() + "\n")
    if args.plan:
        for segment in result.segments:
            out.write(f"\n{segment.name}\n{segment.plan.table()}\n")
    return 0
