"""Tuned dense convs (issue #4): per ResNet-18-style conv layer that lowers to conv2d_f32, the prebuilt conv2d_f32
against the generated conv-mode kernel `ortx tune` would put in its place, both against ORT running the same
single-conv model, interleaved in one process.

    python benchmarks/conv_tuning.py [--trials 24] [--threads 1,2] [--rounds 7] [--runs 20] [--quiet-wait 0]
                                     [--database PATH] [--layers LABEL,...]

1. Layers: ResNet-18 at 224x224 with BatchNorm folded and Relu fused (bias + Relu epilogue), the convs the lowering
   gives conv2d_f32 (the 3x3 convs of 256 and 512 channels run conv2d_pixel_rows_f32, which is not tuned).
2. Tune: per layer and thread count, ortx.tune.gemm_space.tune_gemm (the prebuilt baseline, the default, then the
   guided search, then validation), limited to the workspace the lowering plans for conv2d_f32, into --database
   (a second run resumes). The schedule is recorded_schedule's: what a session with tuning "cached" would use,
   or none when no schedule beat the prebuilt conv by gemm_space.MARGIN (then the fastest is timed anyway).
3. Time: per round, each engine runs --runs calls in turn (prebuilt, generated, ORT), on the same input; the
   per-round median of each, then the median and range over rounds of the per-round ratios.
Not run by CI: it compiles and times hundreds of kernels.
"""
from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks._report import load_average, wait_for_quiet  # noqa: E402
from ortx import _kernels  # noqa: E402
from ortx.codegen import gemm  # noqa: E402
from ortx.config import Options  # noqa: E402
from ortx.model_io import clamp_ir_version  # noqa: E402
from ortx.tune import gemm_space  # noqa: E402
from ortx.tune.conv_problems import PrebuiltConv, conv_operands  # noqa: E402
from ortx.tune.fingerprint import current  # noqa: E402
from ortx.tune.records import TuningDatabase  # noqa: E402
from ortx.tune.runner import TimingSettings  # noqa: E402

# label -> (Cin, H, W, Cout, kernel, stride, pad): ResNet-18's conv2d_f32 layers at 224x224
LAYERS = {
    "stem 7x7/2 3->64 @112": (3, 224, 224, 64, 7, 2, 3),
    "3x3 64->64 @56": (64, 56, 56, 64, 3, 1, 1),
    "3x3/2 64->128 @28": (64, 56, 56, 128, 3, 2, 1),
    "3x3 128->128 @28": (128, 28, 28, 128, 3, 1, 1),
}


def conv_ints(layer, threads: int) -> list[int]:
    cin, height, width, cout, kernel, stride, pad = layer
    out_height, out_width = (height + 2 * pad - kernel) // stride + 1, (width + 2 * pad - kernel) // stride + 1
    return [1, cin, height, width, cout, out_height, out_width, kernel, kernel, stride, stride, pad, pad, 1, 1, 1,
            1, 0, 1, threads]


def ort_session(problem: gemm.GemmProblem, weights: np.ndarray, bias: np.ndarray, threads: int):
    _, cin, height, width, cout, out_height, out_width, kernel, _, stride, _, pad = problem.conv[:12]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[kernel, kernel], strides=[stride] * 2,
                              pads=[pad] * 4),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                            [1, cin, height, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, out_height, out_width])],
                              [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(bias, "b")])
    model = clamp_ir_version(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def timed_ms(call, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def measure_layer(label: str, layer, threads: int, args, database, options) -> dict:
    problem, reason = gemm.from_conv_step(conv_ints(layer, threads), (0.0, 0.0))
    assert problem is not None, reason
    sizes = np.zeros(3, np.int64)
    _kernels.call("conv_sizes_f32", [0, *problem.conv], [], [sizes])
    workspace = int(sizes[0]) // 4
    fingerprint = current(options)
    tuning = gemm_space.tune_gemm(problem, num_threads=threads, database=database, fingerprint=fingerprint,
                                  options=options, trials=args.trials, settings=TimingSettings(timed_runs=20),
                                  max_workspace_floats=workspace)
    chosen = gemm_space.recorded_schedule(problem, threads, database, fingerprint, max_workspace_floats=workspace)
    schedule = chosen or (gemm_space.to_gemm_schedule(tuning.best.schedule) if tuning.best else None)
    arrays, reference = conv_operands(problem, seed=1)
    packed, x, bias = arrays
    rng = np.random.default_rng(1)  # conv_operands' weights, drawn again in the same order for ORT
    weights = rng.uniform(-1.0, 1.0, (problem.m, layer[0], layer[4], layer[4])).astype(np.float32)
    ort = ort_session(problem, weights, bias, threads)
    feed = {"x": x.reshape(1, *layer[:3])}
    prebuilt, output = PrebuiltConv(problem), np.empty((problem.m, problem.n), np.float32)
    generated = gemm.build_gemm(problem, schedule, options)
    engines = {"prebuilt": lambda: prebuilt(packed, x, output, bias, num_threads=threads),
               "generated": lambda: generated(packed, x, output, bias, num_threads=threads),
               "ort": lambda: ort.run(None, feed)}
    for name, call in engines.items():  # each engine's result against the float64 conv before any timing
        call()
        result = ort.run(None, feed)[0].reshape(problem.m, -1) if name == "ort" else output
        error = float(np.max(np.abs(result - reference))) / float(np.max(np.abs(reference)))
        assert error < 1e-4, f"{label}: {name} is off by {error:.2g} of max|reference|"
    loads, rounds = [], {name: [] for name in engines}
    for _ in range(args.rounds):
        loads.append(load_average())
        for name, call in engines.items():
            rounds[name].append(timed_ms(call, args.runs))
    return dict(label=label, threads=threads, schedule=str(schedule) if schedule else "-", applied=chosen is not None,
                loads=loads, **{name: times for name, times in rounds.items()})


def summary(row: dict) -> str:
    def ratio(top: str, bottom: str) -> str:
        values = [a / b for a, b in zip(row[top], row[bottom])]
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"
    median = {name: statistics.median(row[name]) for name in ("prebuilt", "generated", "ort")}
    return (f"| {row['label']} | {row['threads']} | {median['prebuilt']:.3f} | {median['generated']:.3f} | "
            f"{median['ort']:.3f} | {ratio('generated', 'prebuilt')} | {ratio('prebuilt', 'ort')} | "
            f"{ratio('generated', 'ort')} | {'yes' if row['applied'] else 'no'} | "
            f"{min(row['loads']):.1f}-{max(row['loads']):.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--quiet-wait", type=float, default=0.0, help="seconds to wait for load < 1 first")
    parser.add_argument("--database", default=None, help="tuning records (default: a temporary file)")
    parser.add_argument("--layers", default=",".join(LAYERS))
    args = parser.parse_args()
    options = Options(cache_dir=pathlib.Path(tempfile.gettempdir()) / "ortx-conv-tuning-jit")
    database_path = args.database or str(pathlib.Path(tempfile.mkdtemp()) / "tuning.sqlite")
    print(f"load before: {wait_for_quiet(args.quiet_wait) if args.quiet_wait else load_average():.2f}")
    print("| layer | threads | prebuilt ms | generated ms | ORT ms | generated/prebuilt | prebuilt/ORT | "
          "generated/ORT | applied | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with TuningDatabase(database_path) as database:
        for label in args.layers.split(","):
            for threads in (int(value) for value in args.threads.split(",")):
                row = measure_layer(label, LAYERS[label], threads, args, database, options)
                print(summary(row), flush=True)
                print(f"  schedule: {row['schedule']}", flush=True)


if __name__ == "__main__":
    main()
