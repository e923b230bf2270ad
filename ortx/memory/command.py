"""`ortx memory MODEL [--input-shape NAME:D1xD2x...] [--json] [--plan]`: the memory report of one model.

The lead wires `add_memory_command(subparsers)` into ortx/cli.py and dispatches to `run_memory_command(args)`;
all logic is in ortx.memory.summary, this only parses and renders.
"""
from __future__ import annotations

import argparse
import sys


def _input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    name, separator, dims = text.rpartition(":")
    try:
        shape = tuple(int(dim) for dim in dims.lower().split("x"))
    except ValueError:
        shape = ()
    if not separator or not name or not shape or any(dim <= 0 for dim in shape):
        raise argparse.ArgumentTypeError(f"expected NAME:D1xD2x... with positive dims, e.g. x:1x3x640x640, "
                                         f"got {text!r}")
    return name, shape


def add_memory_command(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "memory", help="activation memory: naive, ORT-style reuse, the ortx plan and its lower bound",
        description=__doc__.splitlines()[0])
    parser.add_argument("model", help="ONNX model path")
    parser.add_argument("--input-shape", metavar="NAME:D1xD2x...", type=_input_shape, action="append", default=[],
                        help="fix an input's shape (repeat for several inputs); needed for dynamic dims")
    parser.add_argument("--threads", type=int, default=1, help="threads the segments are compiled for (workspace "
                        "sizes depend on it)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (offsets per tensor)")
    parser.add_argument("--plan", action="store_true", help="also print each segment's plan as a table")
    parser.set_defaults(run=run_memory_command)
    return parser


def run_memory_command(args, out=None) -> int:
    from ortx.memory.summary import report

    out = out or sys.stdout
    try:
        result = report(args.model, dict(args.input_shape), num_threads=args.threads)
    except (OSError, ValueError) as error:
        print(f"ortx memory: {error}", file=sys.stderr)
        return 2
    if args.json:
        out.write(result.to_json(indent=1) + "\n")
        return 0
    out.write(result.table() + "\n")
    if args.plan:
        for segment in result.segments:
            out.write(f"\n{segment.name}\n{segment.plan.table()}\n")
    return 0
