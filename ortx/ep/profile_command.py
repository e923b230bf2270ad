"""`ortx profile MODEL`: where a run's time goes, ONNX Runtime's CPU EP and OrtxEP side by side.

ortx/cli.py adds it with `add_profile_command(subparsers)`; the timing is the sessions' own profiling
(SessionOptions.enable_profiling: ORT's profiler, and ortx.ep.trace for OrtxEP), read by ortx.ep.trace_summary.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

from ortx.cli_args import input_shape, positive_int
from ortx.ep.precision import BF16_COMPUTE

DESCRIPTION = """\
Runs MODEL with ONNX Runtime's CPU EP and with OrtxEP (ortx.InferenceSession, providers OrtxEP then CPU), each
with its profiler on, one engine after the other (interleaving would let one engine's spinning threads slow the
other), on the same seeded random inputs and thread count, and prints: the median run of each without and with
its profiler (ORT's profiler adds a cost per node), the time per op type of each, OrtxEP's time per kernel, and OrtxEP's slowest
nodes with their kernels and the user's nodes they fused. The first run of each engine is a warm-up, left out.
--trace-dir keeps both profile files (Chrome trace JSON: chrome://tracing or ui.perfetto.dev).
Dynamic input dims need --input-shape. exit status: 0 ok, 2 usage or input error."""


def add_profile_command(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "profile", help="per-op and per-kernel times, ONNX Runtime and OrtxEP side by side",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="ONNX model path")
    parser.add_argument("--input-shape", metavar="NAME:D1xD2x...", type=input_shape, action="append", default=[],
                        help="fix an input's shape (repeat for several inputs); needed for dynamic dims")
    parser.add_argument("--runs", type=positive_int, default=20, help="profiled runs per engine after one warm-up "
                        "(default 20)")
    parser.add_argument("--threads", type=positive_int, default=None, help="intra-op threads of both engines "
                        "(default: ONNX Runtime's default)")
    parser.add_argument("--top", type=positive_int, default=15, help="how many of OrtxEP's slowest nodes to list")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="OrtxEP's precision option (ONNX Runtime runs fp32 either way)")
    parser.add_argument("--fp32-nodes", metavar="NODE,...", default="",
                        help="with --precision bf16: layers that keep fp32 kernels (OrtxEP's fp32_nodes option), to "
                        "see what keeping them costs")
    parser.add_argument("--bf16-compute", choices=BF16_COMPUTE, default="auto",
                        help="with --precision bf16: OrtxEP's bf16_compute option (default auto: fp32 kernels where "
                        "this CPU's bf16 would be slower; always: the bf16 kernels)")
    parser.add_argument("--trace-dir", default=None, help="keep the two profile files in this directory")
    parser.set_defaults(handler=run_profile_command)
    return parser


def _session(model: bytes, shapes: dict, threads: int | None, prefix: str | None, ortx_ep: bool,
             ortx_options: dict | None = None):
    import onnxruntime

    import ortx

    options = onnxruntime.SessionOptions()
    options.enable_profiling = prefix is not None
    if prefix is not None:
        options.profile_file_prefix = prefix
    if threads is not None:
        options.intra_op_num_threads = threads
    if ortx_ep:
        return ortx.InferenceSession(model, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                     provider_options=[{"input_shapes": shapes, **(ortx_options or {})}, {}])
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _profile(model: bytes, feeds: dict, shapes: dict, threads: int | None, runs: int, prefix: str,
             ortx_ep: bool, ortx_options: dict | None = None) -> tuple[str, float]:
    """(the profile file, the median ms of the same runs without the profiler)."""
    session = _session(model, shapes, threads, prefix, ortx_ep, ortx_options)
    for _ in range(runs + 1):
        session.run(None, feeds)
    path = session.end_profiling()
    plain = _session(model, shapes, threads, None, ortx_ep, ortx_options)
    plain.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        plain.run(None, feeds)
        times.append(time.perf_counter() - start)
    return path, 1e3 * statistics.median(times)


def run_profile_command(args, out=None) -> int:
    from ortx.ep.precision import effective_precision
    from ortx.ep.trace_summary import read_trace, summarize
    from ortx.model_io import ModelLoadError, load, to_ort_bytes
    from ortx.optimize import CheckInputError, check_input_shape_names, random_feeds

    out = out or sys.stdout
    if args.fp32_nodes and args.precision != "bf16":
        print("ortx profile: error: --fp32-nodes keeps layers fp32 in a bf16 session: give --precision bf16",
              file=sys.stderr)
        return 2
    ortx_options = {"precision": args.precision, "bf16_compute": args.bf16_compute,
                    **({"fp32_nodes": args.fp32_nodes} if args.fp32_nodes else {})}
    directory = args.trace_dir or tempfile.mkdtemp(prefix="ortx-profile-")
    try:
        os.makedirs(directory, exist_ok=True)
        model = load(args.model)
        shapes = dict(args.input_shape)
        check_input_shape_names(model, shapes, args.model)
        feeds = random_feeds(model, shapes)
        shapes = {name: array.shape for name, array in feeds.items()}
        model_bytes = to_ort_bytes(model)
        print(f"profiling {args.model}: ONNX Runtime, then OrtxEP, {args.runs} runs each", file=sys.stderr)
        _, precision_note = effective_precision(args.precision, args.bf16_compute)
        if precision_note:
            print(f"OrtxEP: {precision_note}", file=sys.stderr)
        ort_path, ort_ms = _profile(model_bytes, feeds, shapes, args.threads, args.runs,
                                    os.path.join(directory, "ort"), ortx_ep=False)
        ortx_path, ortx_ms = _profile(model_bytes, feeds, shapes, args.threads, args.runs,
                                      os.path.join(directory, "ortx"), ortx_ep=True, ortx_options=ortx_options)
        ort, ours = summarize(read_trace(ort_path)), summarize(read_trace(ortx_path))
    except (OSError, ValueError, ModelLoadError, CheckInputError) as error:
        print(f"ortx profile: error: {error}", file=sys.stderr)
        return 2
    finally:
        if args.trace_dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    out.write(render(ort, ours, args.top, ort_ms, ortx_ms) + "\n")
    if args.trace_dir:
        out.write(f"profile files kept in {args.trace_dir}\n")
    return 0


def render(ort, ours, top: int, ort_ms: float, ortx_ms: float) -> str:
    lines = [f"median run without the profilers: ONNX Runtime {ort_ms:.3f} ms, OrtxEP {ortx_ms:.3f} ms "
             f"(OrtxEP / ORT {ortx_ms / ort_ms:.2f}; one engine after the other, {ours.runs} runs each; a ratio "
             f"to quote comes from benchmarks/run.py)",
             f"median profiled run: ONNX Runtime {ort.run_ms:.3f} ms, OrtxEP {ours.run_ms:.3f} ms (ORT's profiler "
             f"adds a cost per node; compare the parts within one engine)", "",
             "time per op type (sum of the nodes' medians):"]
    left = [f"{op:<28} {ms:9.3f} {count:4d}" for op, ms, count in ort.by("op_type")]
    right = [f"{op:<28} {ms:9.3f} {count:4d}" for op, ms, count in ours.by("op_type")]
    lines.append(f"  {'ONNX Runtime op':<28} {'ms':>9} {'n':>4}    {'OrtxEP op':<28} {'ms':>9} {'n':>4}")
    for index in range(max(len(left), len(right))):
        lines.append(f"  {left[index] if index < len(left) else ' ' * 43}    "
                     f"{right[index] if index < len(right) else ''}".rstrip())
    lines += ["", "OrtxEP time per kernel:"]
    lines += [f"  {kernel:<32} {ms:9.3f} ms {count:4d} steps" for kernel, ms, count in ours.by("kernel")]
    lines += ["", f"OrtxEP's slowest {min(top, len(ours.nodes))} nodes:"]
    for node in ours.nodes[:top]:
        fused = f"  (fused: {node.fused_from})" if node.fused_from else ""
        lines.append(f"  {node.median_ms:9.3f} ms  {node.op_type:<18} {node.kernel or node.provider:<28} "
                     f"{node.name}{fused}")
    return "\n".join(lines)
