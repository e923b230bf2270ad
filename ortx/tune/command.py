"""`ortx tune MODEL`: measures, per claimed segment, OrtxEP against ORT here and records the faster engine.

Sessions created later on this machine (provider option tuning="cached", the default) read those records and run
each segment on the engine that was faster. The session it runs also searches each kernel step's thread count
(ortx.tune.step_threads) and records it; the other schedule knobs of issue #4 are not built yet.
"""
from __future__ import annotations

import argparse
import sys
import time

from ortx.cli_args import input_shape

DESCRIPTION = """\
Measures each segment OrtxEP claims in MODEL against ONNX Runtime running the same nodes (same threads, seeded
random inputs, medians after warm-up) and stores both times in the tuning database under this machine's
hardware fingerprint; before that, it measures every kernel step of OrtxEP's segments on 1, 2, 4 ... up to --threads
threads and records each time. Later sessions (OrtxEP option tuning="cached", the default) run a step on fewer
threads where that was faster and the whole segment was validated faster, and give a segment back to ORT when
ORT was faster by more than 2%. --mode full measures longer than quick; --export writes the records of this model's
segments to a JSON file that ships with the model, --import merges such a file (records measured on another
machine are kept but never used here). exit status: 0 ok, 2 usage or input error."""


def add_tune_command(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("tune", help="record, per claimed segment, whether OrtxEP or ORT is faster here",
                                   description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", help="ONNX model path (optional with --import alone)")
    parser.add_argument("--input-shape", metavar="NAME:D1xD2x...", type=input_shape, action="append", default=[],
                        help="fix an input's shape (repeat for several inputs); needed for dynamic dims")
    parser.add_argument("--threads", type=int, default=2, help="threads for both engines (default 2)")
    parser.add_argument("--mode", choices=("quick", "full"), default="quick", help="measurement length")
    parser.add_argument("--cache-dir", help="where the tuning database is (default: ORTX_CACHE_DIR or ~/.cache/ortx)")
    parser.add_argument("--export", metavar="RECORDS.json", help="write this model's records to a file")
    parser.add_argument("--import", dest="import_path", metavar="RECORDS.json", help="merge a records file first")
    parser.set_defaults(handler=run_tune_command)
    return parser


def run_tune_command(args, out=None) -> int:
    import onnxruntime

    import ortx
    from ortx.config import Options
    from ortx.model_io import ModelLoadError, load
    from ortx.optimize import CheckInputError, random_feeds
    from ortx.tune.records import TuningDatabase, TuningDatabaseError

    out = out or sys.stdout
    database_path = Options.from_environment(cache_dir=args.cache_dir).cache_dir / "tuning.sqlite"
    if args.model is None and not args.import_path:
        print("ortx tune: error: give a MODEL to tune or --import RECORDS.json", file=sys.stderr)
        return 2
    if args.threads < 1:
        print(f"ortx tune: error: --threads must be positive, got {args.threads}", file=sys.stderr)
        return 2
    try:
        if args.import_path:
            with TuningDatabase(database_path) as database:
                added = database.import_records(args.import_path)
            out.write(f"imported {added} new records from {args.import_path} into {database_path}\n")
        if args.model is None:
            return 0
        model = load(args.model)
        random_feeds(model, dict(args.input_shape))  # every dim must be known: names the input and the flag
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = args.threads
        provider_options = {"tuning": args.mode, "input_shapes": dict(args.input_shape)}
        if args.cache_dir:
            provider_options["jit_cache_dir"] = args.cache_dir
        out.write(f"tuning {args.model} ({args.mode}, {args.threads} threads) ...\n")
        out.flush()
        start = time.perf_counter()
        session = ortx.InferenceSession(model, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                        provider_options=[provider_options, {}])
        choices = session.assignment.engine_choices
        if not choices:
            out.write("OrtxEP claims no segment of this model: nothing to measure\n")
            return 0
        for choice in choices:
            out.write(f"  segment from {choice.first_node} ({len(choice.nodes)} nodes): {choice.describe} -> "
                      f"{'OrtxEP' if choice.engine == 'ortx' else 'ORT'}\n")
        out.write(f"done in {time.perf_counter() - start:.1f} s; records in {database_path}\n")
        if args.export:
            with TuningDatabase(database_path) as database:
                count = database.export(args.export, signatures={choice.signature for choice in choices})
            out.write(f"wrote {count} records to {args.export}\n")
    except (OSError, ValueError, ModelLoadError, CheckInputError, TuningDatabaseError) as error:
        print(f"ortx tune: error: {error}", file=sys.stderr)
        return 2
    return 0
