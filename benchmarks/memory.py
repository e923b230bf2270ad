"""Memory of OrtxEP vs ONNX Runtime CPU on the six models of issue #6; writes BENCHMARKS.md's "Memory" section.

Usage: python benchmarks/memory.py [--threads 2] [--models det,rec,cls,resnet18,mobilenetv2,transformer]
Peak RSS: each engine in a fresh subprocess that builds its session and runs it 5 times, reporting VmHWM from
/proc/self/status (Linux). Not ru_maxrss: Linux carries a process's maxrss across execve, so a child forked from
this (large) process would report at least this process's RSS. Both processes import the same libraries (numpy,
onnxruntime and ortx with onnx, onnx_ir and onnxscript), so the difference between the columns is what each engine's
session adds. Each engine gets the model file: ORT a copy with an IR version it reads (written here, before the
child starts), opened by path as an ORT user would; OrtxEP the file itself. "ORT alone" imports only numpy and
onnxruntime: what a process running plain ORT would peak at. Planned bytes: ortx.memory.report at the same shapes.
"""
from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import onnx  # noqa: E402

import ortx.memory  # noqa: E402
from benchmarks._report import head_commit, host, write_section  # noqa: E402
from ortx.demo import PACKAGED_MODELS, packaged_model_path  # noqa: E402
from ortx.model_io import load, to_ort_bytes  # noqa: E402
from tests import _models  # noqa: E402

BUILT = {
    "resnet18": ("ResNet-18-style (random weights)", _models.resnet18_style, (1, 3, 224, 224)),
    "mobilenetv2": ("MobileNetV2-style (random weights)", _models.mobilenetv2_style, (1, 3, 224, 224)),
    "transformer": ("BERT-like encoder block (seq 16, dim 64)", _models.transformer_block, None),
    "bert": ("BERT-like encoder block (seq 128, dim 256, 4 heads)",
             lambda: _models.transformer_block(seq=128, dim=256, heads=4), None),
}


def models(selected: list[str], directory: str):
    for key in selected:
        if key in PACKAGED_MODELS:
            yield f"PP-OCR {key}", packaged_model_path(key), PACKAGED_MODELS[key][1]
        elif key in BUILT:
            name, builder, shape = BUILT[key]
            proto = builder()
            path = os.path.join(directory, f"{key}.onnx")
            onnx.save(proto, path)
            if shape is None:
                shape = tuple(d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim)
            yield name, path, shape
        else:
            raise SystemExit(f"unknown model {key!r}")


_PEAK_SCRIPT = r"""
import sys, numpy as np, onnxruntime
if {import_ortx!r}:
    sys.path.insert(0, {root!r})
    import ortx
options = onnxruntime.SessionOptions(); options.intra_op_num_threads = {threads}
shape = {shape!r}
if {use_ortx!r}:
    session = ortx.InferenceSession({path!r}, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                    provider_options=[{{"input_shapes": {{"{input}": shape}}}}, {{}}])
else:
    session = onnxruntime.InferenceSession({path!r}, options, providers=["CPUExecutionProvider"])
x = np.random.default_rng(0).uniform(-1, 1, size=shape).astype(np.float32)
for _ in range(5):
    session.run(None, {{"{input}": x}})
status = open("/proc/self/status").read()
print(next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")))
"""


def peak_rss_mib(path: str, input_name: str, shape, threads: int, use_ortx: bool, *,
                 ort_libraries_only: bool = False) -> float:
    """VmHWM (MiB) of a fresh process that builds the session on `path` and runs it 5 times. ORT opens a copy with
    an IR version it reads, written here: building it in the child (ortx.model_io.load, to_ort_bytes) would
    charge ORT's peak for ortx's loader and for the serialized bytes it was handed. `ort_libraries_only`: the ORT
    process imports numpy and onnxruntime only (no ortx)."""
    with tempfile.TemporaryDirectory() as directory:
        if not use_ortx:
            ort_path = os.path.join(directory, "ort.onnx")
            with open(ort_path, "wb") as handle:
                handle.write(to_ort_bytes(load(path)))
            path = ort_path
        script = _PEAK_SCRIPT.format(root=ROOT, threads=threads, shape=tuple(shape), use_ortx=use_ortx, path=path,
                                     input=input_name, import_ortx=use_ortx or not ort_libraries_only)
        output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    return int(output.strip().splitlines()[-1]) / 1024.0


def mib(nbytes: int) -> str:
    return f"{nbytes / 2 ** 20:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default="det,rec,cls,resnet18,mobilenetv2,transformer")
    parser.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"))
    parser.add_argument("--no-rss", action="store_true", help="skip the peak-RSS subprocesses")
    args = parser.parse_args()
    lines = [
        f"Measured {datetime.date.today()} on commit "
        f"{head_commit()}"
        f", {host()}, {args.threads} threads. Activation memory in MiB: naive = "
        "one buffer per activation tensor; ORT-style = same-size reuse after last use (a model of ORT's planner, "
        "not its arena); ortx plan = the OrtxEP session arena (kernel workspaces included), lower bound = most "
        "bytes live at once over that arena's buffers; in place = bytes the in-place rules saved. Peak RSS (MiB) = "
        "high-water RSS (VmHWM) of a fresh process that builds the session from the model file and runs it 5 "
        "times, the interpreter and libraries included: the ORT and OrtxEP processes import the same libraries "
        "(onnxruntime, and ortx with onnx, onnx_ir and onnxscript), ORT alone imports only numpy and onnxruntime. "
        "Written by `python benchmarks/memory.py`.",
        "",
        "| model | input | naive | ORT-style | ortx plan | lower bound | plan / lower bound | naive / plan | "
        "in place | peak RSS ORT | peak RSS OrtxEP | peak RSS ORT alone |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as directory:
        for name, path, shape in models(args.models.split(","), directory):
            input_name = onnx.load(path, load_external_data=False).graph.input[0].name
            print(f"measuring {name} ...", flush=True)
            report = ortx.memory.report(path, {input_name: shape}, num_threads=args.threads)
            peaks = ("-", "-", "-")
            if not args.no_rss:
                peaks = (f"{peak_rss_mib(path, input_name, shape, args.threads, False):.0f}",
                         f"{peak_rss_mib(path, input_name, shape, args.threads, True):.0f}",
                         f"{peak_rss_mib(path, input_name, shape, args.threads, False, ort_libraries_only=True):.0f}")
            lines.append(
                f"| {name} | {'x'.join(map(str, shape))} | {mib(report.naive_bytes)} | {mib(report.ort_style_bytes)} "
                f"| {mib(report.planned_bytes)} | {mib(report.lower_bound_bytes)} | {report.ratio_to_lower_bound:.3f} "
                f"| {report.naive_bytes / max(report.planned_bytes, 1):.1f} | {mib(report.in_place_bytes_saved)} "
                f"| {peaks[0]} | {peaks[1]} | {peaks[2]} |")
            print(lines[-1], flush=True)
    write_section(args.output, "Memory", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
