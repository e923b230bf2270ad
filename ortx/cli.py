"""The `ortx` command: argparse, progress and report rendering only; the work is in ortx.optimize and ortx.demo."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from ortx.cli_args import device_list, input_shape

DESCRIPTION = """\
ortx: a neural-network compiler toolkit for ONNX models.

  ortx optimize IN.onnx -o OUT.onnx   graph passes (-O1 cleanup, -O2 standard-ONNX fusions, -O3 ortx ops);
                                      the default (-O2) output is standard ONNX that plain onnxruntime runs
  ortx memory IN.onnx                 activation memory: naive, ORT-style reuse, the ortx plan, its lower bound
  ortx profile IN.onnx                where a run's time goes: per op type and kernel, ORT and OrtxEP side by side
  ortx fp32-nodes IN.onnx             which layers a bf16 OrtxEP session keeps fp32 to meet an output cosine target
  ortx tune IN.onnx --budget 10m      tunes kernels within a budget; records, per claimed segment, whether
                                      OrtxEP or ORT is faster here
  ortx quantize IN.onnx -o OUT.onnx   int8 post-training quantization (--calibration DATA) to QDQ ONNX;
                                      --mixed --budget 0.01: a precision per layer (fp32/fp16/bf16/int8/int4)
  ortx prune IN.onnx -o OUT.onnx      magnitude (--sparsity 0.8), N:M (--structured 2:4) or channel pruning
  ortx compile IN.onnx -o OUT.ortx    one portable artifact: optimized graph, partition, tuning records
  ortx npu dump STREAM|MODEL          disassembles an NPU command stream, or a model's NPU segments
  ortx split IN.onnx --stages N -o DIR   pipeline stages balanced by cost, cut where the fewest bytes cross
  ortx demo                           runs the packaged PP-OCRv4 models through ortx.InferenceSession
  ortx devices [--json]               the devices OrtxEP can place nodes on, with ops, memory, bandwidth, peak
"""

OPTIMIZE_EPILOG = """\
levels: -O0 a checked copy; -O1 shape inference, constant folding, dead code and no-op removal (no arithmetic
changes); -O2 (default) also fusions that emit standard ONNX ops (BatchNormalization folding, Gemm, LayerNormalization,
Gelu, HardSwish, ...); -O3 also ai.ortx fused ops that only OrtxEP (ortx.InferenceSession) runs.
--input-shape fixes an input's dynamic dims before shape inference (dims left dynamic stay symbolic).
--check runs onnxruntime on IN and OUT with the same seeded random inputs and requires, per output,
max|OUT - IN| <= 1e-3 * max|IN| and cosine >= 0.9999. Inputs with dynamic dimensions need --input-shape,
e.g. --input-shape x:1x3x640x640 (repeat the flag for several inputs).
The input file is never modified; OUT is written atomically (temp file + rename) and must differ from IN;
OUT is written even when --check fails, so it can be inspected.
exit status: 0 ok, 1 check failed, 2 usage or input error."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ortx", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    optimize = commands.add_parser(
        "optimize", help="run the graph passes and write a standard ONNX model",
        description="Optimize an ONNX model with ortx's graph passes and save the result.",
        epilog=OPTIMIZE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    optimize.add_argument("input", metavar="IN.onnx", help="model to optimize (never modified)")
    optimize.add_argument("-o", "--output", metavar="OUT.onnx", required=True, help="where to write the result")
    optimize.add_argument("-O", "--level", type=int, choices=(0, 1, 2, 3), default=2, metavar="LEVEL",
                          help="-O0 checked copy; -O1 cleanup; -O2 standard-ONNX fusions (default); -O3 ai.ortx "
                               "fused ops for OrtxEP")
    optimize.add_argument("--check", action="store_true",
                          help="validate the model after every pass and compare IN vs OUT in onnxruntime")
    optimize.add_argument("--input-shape", metavar="NAME:D1xD2x...", type=input_shape, action="append",
                          default=[], help="fixes an input's dynamic dims (shape inference, --check inputs)")
    optimize.add_argument("--seed", type=int, default=0, help="seed of the --check inputs (default 0)")
    optimize.add_argument("--report", metavar="REPORT.json", help="also write the pass reports as JSON")
    optimize.add_argument("--partition-svg", metavar="FILE.svg",
                          help="also compile OUT for OrtxEP (needs static input shapes) and draw its partition")
    optimize.add_argument("--devices", type=device_list, default="cpu", metavar="NAMES",
                          help="devices for --partition-svg, e.g. npu,dsp,cpu (default cpu; see `ortx devices`)")
    optimize.set_defaults(handler=_optimize)

    devices = commands.add_parser(
        "devices", help="list the devices OrtxEP can place nodes on",
        description="The devices of ortx.ep.devices: kind, memory, bandwidth, peak per dtype, compiler, backend, "
                    "and the ops each runs with their dtypes and constraints.")
    devices.add_argument("--devices", type=device_list, metavar="NAMES", help="only these, e.g. npu,cpu")
    devices.add_argument("--json", action="store_true", help="print the table as JSON")
    devices.add_argument("--no-ops", action="store_true", help="leave out the op lists")
    devices.set_defaults(handler=_devices)

    demo = commands.add_parser(
        "demo", help="run the packaged PP-OCRv4 models with and without OrtxEP",
        description="Runs the PP-OCRv4 det/rec/cls models shipped with rapidocr-onnxruntime through "
                    "ortx.InferenceSession and plain onnxruntime, and prints timings and which nodes ran where.")
    demo.add_argument("--models", default="det,rec,cls",
                      help="comma-separated subset of det,rec,cls (default: all three)")
    demo.add_argument("--runs", type=int, default=20, help="timed runs per model (default 20)")
    demo.add_argument("--threads", type=int, default=2, help="threads for OrtxEP and onnxruntime (default 2)")
    demo.set_defaults(handler=_demo)

    from ortx.compile_command import add_compile_command
    from ortx.ep.fp32_nodes_command import add_fp32_nodes_command
    from ortx.ep.profile_command import add_profile_command
    from ortx.memory.command import add_memory_command
    from ortx.pruning.command import add_prune_command
    from ortx.tune.command import add_tune_command
    from ortx.quantization.command import add_quantize_command
    from ortx.npu.command import add_npu_command
    from ortx.parallel.command import add_split_command

    add_memory_command(commands)
    add_profile_command(commands)
    add_fp32_nodes_command(commands)
    add_tune_command(commands)
    add_quantize_command(commands)
    add_prune_command(commands)
    add_compile_command(commands)
    add_npu_command(commands)
    add_split_command(commands)
    return parser


def _fail(message: str) -> int:
    print(f"ortx: error: {message}", file=sys.stderr)
    return 2


def render_reports(reports) -> str:
    """A fixed-width table: pass, nodes before -> after, bytes saved, seconds, the non-zero counts; notes below."""
    rows = [("pass", "nodes", "bytes saved", "seconds", "changes")]
    for report in reports:
        changes = ", ".join(f"{key}={value}" for key, value in report.counts.items() if value) or "-"
        rows.append((report.name, f"{report.nodes_before} -> {report.nodes_after}",
                     str(report.counts.get("bytes_saved", 0)), f"{report.seconds:.3f}", changes))
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths)) + "  " + row[4] for row in rows]
    for report in reports:
        lines.extend(f"  note [{report.name}] {note}" for note in report.notes)
    return "\n".join(lines)


def _optimize(args) -> int:
    from ortx.model_io import ModelLoadError, ModelSaveError, save
    from ortx.optimize import optimize
    from ortx.passes._report import PassError

    if not os.path.exists(args.input):
        return _fail(f"input model '{args.input}' does not exist")
    if os.path.abspath(args.output) == os.path.abspath(args.input) or (
            os.path.exists(args.output) and os.path.samefile(args.output, args.input)):
        return _fail(f"output '{args.output}' is the input model; ortx never overwrites its input")
    shapes = dict(args.input_shape)
    if args.check:  # fail on missing --input-shape before spending time on the passes
        from ortx.model_io import load
        from ortx.optimize import CheckInputError, random_feeds

        try:
            random_feeds(load(args.input), shapes)
        except (ModelLoadError, CheckInputError) as error:
            return _fail(str(error))
    start = time.perf_counter()
    try:
        model, reports = optimize(args.input, level=args.level, check=args.check, input_shapes=shapes)
    except (ModelLoadError, PassError) as error:
        return _fail(str(error))
    print(f"optimized {args.input} in {time.perf_counter() - start:.2f} s")
    print(render_reports(reports))
    status = 0
    if args.check:
        from ortx.optimize import CheckInputError, compare_with_onnxruntime

        try:
            results = compare_with_onnxruntime(args.input, model, shapes, seed=args.seed)
        except CheckInputError as error:
            return _fail(str(error))
        for result in results:
            print(f"check {result.name}: max abs error {result.max_abs_error:.3g} (max|ref| {result.max_abs_reference:.3g}),"
                  f" cosine {result.cosine:.6f}: {'ok' if result.ok else 'FAILED'}")
        status = 0 if all(result.ok for result in results) else 1
    try:
        save(model, args.output, protect=args.input)
    except (ModelSaveError, OSError) as error:
        return _fail(str(error))
    print(f"wrote {args.output}")
    if args.partition_svg:
        svg_status = _write_partition_svg(args, model)
        if svg_status:
            return svg_status
    if args.report:
        with open(args.report, "w") as stream:
            json.dump({"input": args.input, "output": args.output, "passes": [r.to_dict() for r in reports]},
                      stream, indent=2)
        print(f"wrote {args.report}")
    return status


def _write_partition_svg(args, model) -> int:
    import ortx
    from ortx.model_io import ModelLoadError

    options = {"devices": args.devices}
    if args.input_shape:
        options["input_shapes"] = ",".join(f"{name}:{'x'.join(map(str, dims))}" for name, dims in args.input_shape)
    try:
        session = ortx.InferenceSession(model.SerializeToString(), providers=["OrtxEP", "CPUExecutionProvider"],
                                        provider_options=[options, {}])
        svg = session.assignment.to_svg()
    except (ModelLoadError, RuntimeError, ValueError) as error:
        return _fail(f"--partition-svg: {error}")
    with open(args.partition_svg, "w") as stream:
        stream.write(svg)
    print(f"wrote {args.partition_svg} ({session.assignment.segments} segments; nodes per device: "
          f"{', '.join(f'{label}: {count}' for label, count in sorted(session.assignment.by_device().items()))})")
    return 0


def _format_bytes(count: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def _format_rate(value: float, unit: str) -> str:
    return f"{value / 1e9:.1f} G{unit}/s"


def render_devices(devices, *, ops: bool = True) -> str:
    lines = []
    for device in devices:
        peaks = ", ".join(f"{dtype} {_format_rate(peak, 'op')}" for dtype, peak in device.peak_ops_per_second.items())
        lines += [f"{device.name} ({device.kind}): {device.description}",
                  f"  memory {_format_bytes(device.memory_bytes)}, bandwidth "
                  f"{_format_rate(device.bandwidth_bytes_per_second, 'B')}, peak {peaks}",
                  f"  compiler {device.compiler}; backend {device.backend}",
                  f"  {len(device.ops)} ops" + (":" if ops else "")]
        if ops:
            width = max((len(f"{op.domain}::{op.op_type}" if op.domain else op.op_type) for op in device.ops),
                        default=0)
            for op in device.ops:
                name = f"{op.domain}::{op.op_type}" if op.domain else op.op_type
                lines.append(f"    {name.ljust(width)}  {','.join(op.dtypes)}  {op.constraints}")
    return "\n".join(lines)


def _devices(args) -> int:
    from ortx.ep.devices import DEVICES, select

    devices = select(args.devices) if args.devices else list(DEVICES)
    if args.json:
        records = [device.to_dict() for device in devices]
        if args.no_ops:
            for record in records:
                record.pop("ops")
        print(json.dumps(records, indent=2))
    else:
        print(render_devices(devices, ops=not args.no_ops))
    return 0


def _demo(args) -> int:
    import ortx.demo

    return ortx.demo.main(args)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return args.handler(args) or 0


if __name__ == "__main__":
    sys.exit(main())
