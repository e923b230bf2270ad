"""OrtxEP precision="bf16" vs ONNX Runtime fp32 (and OpenVINO's default CPU inference), side by side in one run.

Usage: python benchmarks/bf16.py [--runs 20] [--threads 2] [--models resnet18,mobilenetv2,det,rec,bert]
                                 [--quiet-wait 120] [--no-openvino] [--fp32-nodes 'MODEL:NODE,...;...']
                                 [--tuning cached] [--no-amx] [--bf16-compute always]
Issue #5's bf16 acceptance: OrtxEP bf16 <= 0.45x ORT fp32's time and faster than OpenVINO on every model, output
cosine >= 0.999 against fp32. Models as benchmarks/run.py builds them. Timing: ortx.measure.compare (ORT, OrtxEP
and OpenVINO interleaved in blocks after warm-up, medians), the same thread count for all three. OpenVINO
(`pip install -e '.[bench]'`) compiles for its "CPU" device with only INFERENCE_NUM_THREADS set: its default
inference precision on a CPU with AVX512_BF16 is bf16 (the table states the precision it reports). For the PP-OCR
models the cosines are also measured on a rendered text image (benchmarks/text_image.py: a page for det, a line
for rec and cls), their own domain: on the seeded random input det's output is a near-empty map whose cosine swings
with any single rounding. --fp32-nodes adds a row per model named there with those OrtxEP fp32_nodes (by default
MobileNetV2-style with the layers where bf16's error comes from, benchmarks/bf16_sensitivity.py). --tuning
cached applies this machine's records from `ortx tune MODEL --precision bf16` (with --fp32-nodes for the second
row); the default, off, measures the untuned kernels. --no-amx runs both engines without AMX on a CPU that has it
(OrtxEP through _kernels.allow_amx(False), OpenVINO's oneDNN through ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16, set before
openvino loads; the run checks OpenVINO's executed kernels for AMX ones): the AVX512_BF16 path a CPU without AMX
(AMD Zen 4, Intel Cooper Lake) runs, on this core. --bf16-compute: OrtxEP's option of that name (default auto: fp32
kernels where this CPU's bf16 would be slower, which the header then says; always: the bf16 kernels). Writes the
"bf16 ... (N threads[, AMX off])" section of BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime  # noqa: E402

import ortx  # noqa: E402
from benchmarks import text_image  # noqa: E402
from benchmarks._report import head_commit, host, write_section  # noqa: E402
from benchmarks.memory import models  # noqa: E402
from ortx import _kernels  # noqa: E402
from ortx.ep.precision import BF16_COMPUTE, effective_precision  # noqa: E402
from ortx.measure import compare  # noqa: E402

GOAL_RATIO = 0.45
GOAL_COSINE = 0.999
# A second row per model with these OrtxEP fp32_nodes (ortx/ep/precision.py): MobileNetV2-style's first five
# expands and first two projections, the layers benchmarks/bf16_sensitivity.py's rows by role point to.
FP32_NODES = "mobilenetv2:conv_29,conv_56,conv_84,conv_111,conv_139,conv_22,conv_49"


OPENVINO_NO_AMX = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}  # oneDNN reads it once, when openvino first dispatches


def openvino_runner(path: str, input_name: str, shape, threads: int):
    """(run(feeds) -> outputs, inference precision) for OpenVINO's CPU device, or (None, why not)."""
    try:
        import openvino
    except ImportError as error:
        return None, f"openvino not importable ({error}); pip install -e '.[bench]'"
    core = openvino.Core()
    model = core.read_model(path)
    model.reshape({input_name: list(shape)})
    compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads})
    request = compiled.create_infer_request()
    outputs = len(compiled.outputs)

    def run(feeds):
        request.infer(feeds)
        return [request.get_output_tensor(index).data.copy() for index in range(outputs)]

    precision = compiled.get_property("INFERENCE_PRECISION_HINT")
    return run, precision.get_type_name() if hasattr(precision, "get_type_name") else str(precision)


def openvino_amx_kernels(path: str, input_name: str, shape, threads: int, feeds) -> list[str]:
    """The kernels (exec types) with "amx" in their name that OpenVINO's CPU device runs for this model: a second
    compilation with PERF_COUNT, one inference."""
    import openvino

    core = openvino.Core()
    model = core.read_model(path)
    model.reshape({input_name: list(shape)})
    compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads, "PERF_COUNT": "YES"})
    request = compiled.create_infer_request()
    request.infer(feeds)
    return sorted({info.exec_type for info in request.profiling_info if "amx" in info.exec_type.lower()})


def _cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def image_cosines(key: str, path: str, input_name: str, shape, threads: int, openvino_run,
                  ortx_options: dict | None = None) -> tuple | None:
    """(OrtxEP bf16's, OpenVINO's or None) first-output cosine against ORT fp32 on the model's rendered text
    input (text_image.for_model), or None for a model without one. `ortx_options`: further OrtxEP options."""
    x = text_image.for_model(key, shape)
    if x is None:
        return None
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    feeds = {input_name: x}
    reference = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    session = ortx.InferenceSession(path, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                    provider_options=[{"precision": "bf16", "input_shapes": {input_name: list(shape)},
                                                       **(ortx_options or {})}, {}])
    ours = _cosine(session.run(None, feeds)[0], reference)
    return ours, (_cosine(openvino_run(feeds)[0], reference) if openvino_run else None)


def wait_for_quiet(seconds: float) -> float:
    """Waits up to `seconds` for the 1-minute load average to drop below 1.0; returns the load it measured at."""
    deadline = time.monotonic() + seconds
    load = os.getloadavg()[0]
    while load >= 1.0 and time.monotonic() < deadline:
        time.sleep(5)
        load = os.getloadavg()[0]
    return load


def _image_cell(on_image) -> str:
    if not on_image:
        return "-"
    ours, openvino = on_image
    return f"{ours:.6f} / {openvino:.6f}" if openvino is not None else f"{ours:.6f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default="resnet18,mobilenetv2,det,rec,bert")
    parser.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"))
    parser.add_argument("--quiet-wait", type=float, default=0.0,
                        help="before each model, wait up to this many seconds for load average < 1.0")
    parser.add_argument("--no-openvino", action="store_true")
    parser.add_argument("--fp32-nodes", default=FP32_NODES, metavar="MODEL:NODE,...;...",
                        help="per model key, a second row with these OrtxEP fp32_nodes ('' for none)")
    parser.add_argument("--tuning", choices=("off", "cached"), default="off",
                        help="OrtxEP's tuning option: cached applies `ortx tune --precision bf16`'s records")
    parser.add_argument("--bf16-compute", choices=BF16_COMPUTE, default="auto",
                        help="OrtxEP's bf16_compute option (default auto)")
    parser.add_argument("--no-amx", action="store_true",
                        help="both engines without AMX (the AVX512_BF16 path of CPUs without it; see above)")
    args = parser.parse_args()
    if args.no_amx:
        if "openvino" in sys.modules:
            parser.error("--no-amx: openvino is loaded already; ONEDNN_MAX_CPU_ISA would not apply")
        os.environ.update(OPENVINO_NO_AMX)
        _kernels.allow_amx(False)
    fp32_nodes = dict(item.split(":", 1) for item in args.fp32_nodes.split(";") if item)
    rows, notes = [], []
    with tempfile.TemporaryDirectory() as directory:
        keys = args.models.split(",")
        for key, (name, path, shape) in zip(keys, models(keys, directory)):
            input_name = onnx.load(path, load_external_data=False).graph.input[0].name
            others, openvino_precision = {}, "-"
            if not args.no_openvino:
                run, openvino_precision = openvino_runner(path, input_name, shape, args.threads)
                if run is None:
                    notes.append(f"OpenVINO not measured: {openvino_precision}")
                    openvino_precision = "-"
                else:
                    others["OpenVINO"] = run
                    if args.no_amx:
                        feeds = {input_name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
                        amx = openvino_amx_kernels(path, input_name, shape, args.threads, feeds)
                        if amx:
                            notes.append(f"OpenVINO ran AMX kernels on {name} despite ONEDNN_MAX_CPU_ISA: {amx}")
            compute = {"bf16_compute": args.bf16_compute}
            for extra in [{}] + ([{"fp32_nodes": fp32_nodes[key]}] if key in fp32_nodes else []):
                label = name + (f", fp32_nodes {extra['fp32_nodes']}" if extra else "")
                extra = {**extra, **compute}
                load = wait_for_quiet(args.quiet_wait)
                print(f"measuring {label} (load {load:.2f}) ...", flush=True)
                result = compare(label, path, shapes={input_name: shape}, threads=args.threads, runs=args.runs,
                                 precision="bf16", others=others, extra_options=extra, tuning=args.tuning)
                on_image = image_cosines(key, path, input_name, shape, args.threads, others.get("OpenVINO"), extra)
                rows.append((result, shape, openvino_precision, load, on_image))
                line = f"  ORT fp32 {result.ort_ms:.2f} ms, OrtxEP bf16 {result.ortx_ms:.2f} ms ({result.ratio:.2f}x)"
                for other in result.others:
                    line += f", {other.name} {other.median_ms:.2f} ms"
                line += f", cosine {result.cosine:.6f}"
                print(line + (f", on a rendered text image {on_image[0]:.6f}" if on_image else ""), flush=True)
    threads = f"{args.threads} thread{'s' if args.threads != 1 else ''}"
    setting = threads + (", AMX off" if args.no_amx else "") + (", bf16_compute always"
                                                                 if args.bf16_compute == "always" else "")
    _, precision_note = effective_precision("bf16", args.bf16_compute)
    commit = head_commit()
    lines = [
        f"Measured {datetime.date.today()} on commit {commit}, {host()}, "
        f"kernel ISA {_kernels.selected_isa()}, bf16 path {_kernels.bf16_isa()}, {threads} for every "
        f"engine, OrtxEP tuning {args.tuning}, median of {args.runs} runs interleaved in blocks of 4 "
        "(ortx.measure.compare) after warm-up, seeded "
        "random inputs. OrtxEP runs precision='bf16' (constant-weight GEMMs and dense convs in bf16 with fp32 "
        "accumulation, the rest fp32); ratio = OrtxEP bf16 ms / ORT fp32 ms (goal <= 0.45); cosine = first output "
        "against ORT fp32's (goal >= 0.999) on the seeded random input and, for the PP-OCR models, on a rendered "
        "text image (benchmarks/text_image.py: a page for det, a line for rec and cls; OrtxEP / OpenVINO). "
        "Load = 1-minute load average when the model's measurement began "
        "(2 cores, shared); host = rounds of blocks in which ortx.host_contention's probe found the threads sharing "
        "one physical core, one thread slower than the other (uneven) or the threads far apart (a cache line's round "
        "trip >= 250 ns); paired = the median over rounds of OrtxEP's block median / OpenVINO's in the same round "
        "(lowest and highest round in brackets), which the host's drift between rounds moves less. Written by "
        "`python benchmarks/bf16.py`."
        + (" AMX off (`--no-amx`): OrtxEP's bf16 kernels on their AVX512_BF16 path, OpenVINO with "
           f"{', '.join(f'{k}={v}' for k, v in OPENVINO_NO_AMX.items())} (its kernels checked for AMX ones: "
           "none unless a note below says so), as on a CPU with AVX512_BF16 and no AMX." if args.no_amx else "")
        + (f" OrtxEP with bf16_compute 'auto': {precision_note}. Its rows are its fp32 kernels."
           if precision_note else ""),
        "",
        "| model | input | ORT fp32 ms | OrtxEP bf16 ms | ratio | OpenVINO ms (precision) | OrtxEP / OpenVINO | "
        "paired [range] | cosine OrtxEP | cosine OpenVINO | cosine on text image | load | host |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result, shape, openvino_precision, load, on_image in rows:
        other = result.others[0] if result.others else None
        openvino = f"{other.median_ms:.2f} ({openvino_precision})" if other else "-"
        versus = f"{result.ortx_ms / other.median_ms:.2f}" if other else "-"
        paired = f"{other.paired:.2f} [{other.paired_range[0]:.2f}, {other.paired_range[1]:.2f}]" if other else "-"
        lines.append(
            f"| {result.name} | {'x'.join(map(str, shape))} | {result.ort_ms:.2f} | {result.ortx_ms:.2f} | "
            f"{result.ratio:.2f} | {openvino} | {versus} | {paired} | {result.cosine:.6f} | "
            f"{f'{other.cosine:.6f}' if other else '-'} | {_image_cell(on_image)} | {load:.1f} | "
            f"{result.host_note()} |")
    met_ratio = sum(r.ratio <= GOAL_RATIO for r, *_ in rows)
    met_cosine = sum(r.cosine >= GOAL_COSINE for r, *_ in rows)
    # the PP-OCR models judged on their rendered text input, the others on the seeded one
    met_domain = sum((image[0] if image else r.cosine) >= GOAL_COSINE for r, *_, image in rows)
    beat_openvino = sum(bool(r.others) and r.ortx_ms < r.others[0].median_ms for r, *_ in rows)
    beat_paired = sum(bool(r.others) and r.others[0].paired < 1.0 for r, *_ in rows)
    lines += ["", f"Goals met: ratio <= {GOAL_RATIO} on {met_ratio} of {len(rows)} rows, cosine >= {GOAL_COSINE} "
              f"on {met_cosine} (seeded random inputs; {met_domain} with the PP-OCR models on rendered text), "
              f"faster than OpenVINO on {beat_openvino} (paired: {beat_paired})."]
    busiest = max((load for *_, load, _ in rows), default=0.0)
    if busiest >= 1.0 and args.threads == 1:
        lines.append(f"Caution: measured at a load average up to {busiest:.1f} on {os.cpu_count()} cores: each engine "
                     "shared its core with other processes (the interleaved blocks spread that over all three); "
                     "compare runs taken on a quiet host.")
    elif busiest >= 1.0:
        lines.append(f"Caution: measured at a load average up to {busiest:.1f} on {os.cpu_count()} cores. ORT's and "
                     "OpenVINO's thread pools (spinning workers, barriers) lose far more time than OrtxEP's "
                     "(kernels/threadpool.h) when the cores are oversubscribed, so these ratios flatter OrtxEP; "
                     "compare runs taken on a quiet host.")
    lines += [f"{note}." for note in dict.fromkeys(notes)]
    write_section(args.output, f"bf16: OrtxEP precision='bf16' vs ORT fp32 and OpenVINO ({setting})", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
