"""`ortx compile MODEL -o MODEL.ortx`: argument parsing and the report only (the work: ortx.compile_artifact)."""
from __future__ import annotations

import argparse
import os
import sys

from ortx.cli_args import input_shape

DESCRIPTION = """\
Compiles MODEL into one artifact file that loads on any machine: ortx.InferenceSession("MODEL.ortx", ...) (or
onnxruntime, on the model.onnx inside: the file is a zip archive) runs it.
The artifact holds (1) the graph after ortx's standard passes (standard ONNX), (2) the partition: per node the
device it was placed on for --devices and why, (3) optionally tuning records from `ortx tune MODEL --export FILE`.
Nothing is compiled for this machine's ISA: a loading session lowers the graph for the devices and ISA it finds
(the JIT), follows the stored placement where the device exists there and can run the node, and assigns the rest
again. Records measured on another machine are merged but never used as if measured there.
The input is never modified; the artifact is written atomically. exit status: 0 ok, 2 usage or input error."""


def add_compile_command(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("compile", help="compile a model into a portable .ortx artifact (graph, "
                                   "partition, tuning records)", description=DESCRIPTION,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", metavar="MODEL", help="ONNX model (never modified)")
    parser.add_argument("-o", "--output", metavar="MODEL.ortx", required=True, help="the artifact to write")
    parser.add_argument("--devices", default=None, metavar="LIST",
                        help="devices to place nodes on, e.g. npu,dsp,cpu (default: OrtxEP's default); see "
                             "`ortx devices`")
    parser.add_argument("--input-shape", metavar="NAME:D1xD2x...", type=input_shape, action="append", default=[],
                        help="fix an input's dynamic dims (repeat for several inputs); the partition needs static "
                             "shapes")
    parser.add_argument("--records", metavar="RECORDS.json", help="tuning records to embed (ortx tune --export)")
    parser.add_argument("--threads", type=int, default=2, help="threads the partition is computed for (default 2)")
    parser.set_defaults(handler=run_compile_command)
    return parser


def run_compile_command(args, out=None) -> int:
    out = out or sys.stdout
    from ortx.artifact import ArtifactError
    from ortx.compile_artifact import compile_artifact
    from ortx.model_io import ModelLoadError
    from ortx.passes._report import PassError

    def fail(message: str) -> int:
        print(f"ortx compile: error: {message}", file=sys.stderr)
        return 2

    if not os.path.exists(args.model):
        return fail(f"model {args.model!r} does not exist")
    if args.records and not os.path.exists(args.records):
        return fail(f"records file {args.records!r} does not exist")
    options = {"devices": args.devices} if args.devices else {}
    try:
        report = compile_artifact(args.model, args.output, provider_options=options,
                                  input_shapes=dict(args.input_shape), num_threads=args.threads,
                                  records_path=args.records)
    except (ModelLoadError, PassError, ArtifactError, ValueError, OSError) as error:
        return fail(str(error))
    if report.claimed_mac_share is None:
        placement = "no placement stored (dynamic input shapes: pass --input-shape); sessions assign per shape"
    else:
        counts = ", ".join(f"{device}: {count}" for device, count in sorted(report.placement_counts.items()))
        placement = f"placement {counts}; OrtxEP claims {100 * report.claimed_mac_share:.1f}% of the MACs"
    out.write(f"wrote {report.output} in {report.seconds:.2f} s: {report.nodes} nodes; {placement}; "
              f"{report.records} tuning records\n")
    return 0
