"""GFLOP/s and milliseconds of ortx's GEMM and conv kernels vs numpy's BLAS and vs onnxruntime (not run by CI).

    python benchmarks/kernels.py [--threads 2] [--repeats 30] [--only gemm|conv|tuned|layers] [--trials 48]
    python benchmarks/kernels.py --only layers [--layer-set resnet18|mobilenetv2-depthwise|mobilenetv2-pointwise]
                                 [--layer-threads 1,2] [--rounds 3] [--runs 20] [--quiet-wait 120] [--write]

`layers`: each distinct conv shape of ResNet-18-style (224x224, BatchNorm folded: Conv with bias -> Relu) as its own
model, OrtxEP (tuning off) against ORT CPU through ortx.measure.compare (interleaved blocks, warm-in runs not
counted), per thread count; --rounds repetitions give the median and range of the ratio; --write puts the table in
BENCHMARKS.md's "Dense conv layers (issue #4)" section. `--layer-set mobilenetv2-depthwise`: the same for each
distinct depthwise conv of MobileNetV2-style (section "Depthwise conv layers (issue #4)"); `--layer-set
mobilenetv2-pointwise` for each distinct 1x1 conv (section "Pointwise conv layers (issue #4)").

`tuned`: generated GEMMs (ortx.codegen.gemm) tuned per shape (ortx.tune.gemm_space, records in --database), then
numpy, the prebuilt ortx_sgemm, the generated default schedule and the tuned one timed side by side in one run.

Every comparison uses the same thread count: OpenBLAS reads OPENBLAS_NUM_THREADS when numpy loads, so this
script sets it (and drops OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, which can mis-tune OpenBLAS on this machine)
before importing numpy, for this process only; onnxruntime gets intra_op_num_threads. Timings are medians over
`repeats` runs after warm-up, each library timed in its own block (see block_medians).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--only", choices=("gemm", "conv", "tuned", "layers"), default=None)
    parser.add_argument("--layer-threads", default="1,2", help="layers: thread counts")
    parser.add_argument("--layer-set", choices=("resnet18", "mobilenetv2-depthwise", "mobilenetv2-pointwise"),
                        default="resnet18",
                        help="layers: the model whose conv shapes are measured")
    parser.add_argument("--runs", type=int, default=20, help="layers: counted runs per engine per round")
    parser.add_argument("--write", action="store_true", help="layers: write the BENCHMARKS.md section")
    parser.add_argument("--trials", type=int, default=48, help="tuned: schedules measured per shape")
    parser.add_argument("--shapes", default=None, help="tuned: comma-separated labels (default: all)")
    parser.add_argument("--database", default=None, help="tuned: tuning records (default: the JIT cache's "
                        "tuning.sqlite, where sessions look)")
    parser.add_argument("--rounds", type=int, default=3, help="tuned: timing rounds, each library once per round; layers: compare() calls per shape")
    parser.add_argument("--quiet-wait", type=float, default=120.0, help="seconds to wait for the host to be idle: "
                        "tuned, before each shape (Linux /proc/stat); layers, once for load < 1 (0: do not wait)")
    return parser.parse_args()


ARGS = _parse() if __name__ == "__main__" else None
if ARGS is not None:
    os.environ.pop("OPENBLAS_CORETYPE", None)
    os.environ.pop("OPENBLAS_L2_SIZE", None)
    os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's ortx

import numpy as np  # noqa: E402  (after OPENBLAS_NUM_THREADS)
import onnxruntime  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from ortx import _kernels  # noqa: E402
from ortx.codegen import gemm  # noqa: E402
from ortx.config import Options  # noqa: E402
from ortx.ep.compile_nodes import compile_graph, infer_shapes  # noqa: E402
from ortx.ep.lowering._values import numpy_dtype, static_shape  # noqa: E402
from ortx.memory.lifetimes import aligned_empty  # noqa: E402


def block_medians(functions: dict, repeats: int) -> dict:
    """Median seconds of each callable, timed in consecutive blocks after warm-up. Not interleaved: ortx's pool,
    OpenBLAS and onnxruntime all keep their worker threads spinning for a while after a call, which would
    steal the cores from whichever library runs next."""
    medians = {}
    for name, function in functions.items():
        time.sleep(0.2)  # let the previous library's workers stop spinning
        # Warm-up: at least 3 calls and 0.25 s. OpenBLAS's first ~20 small calls after its threads were idle took
        # ~10 ms each here (a 1x512x1000 GEMV that then runs in 20 us).
        warm_until = time.perf_counter() + 0.25
        for count in range(1 << 30):
            function()
            if count >= 2 and time.perf_counter() > warm_until:
                break
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            function()
            times.append(time.perf_counter() - start)
        medians[name] = float(np.median(times))
    return medians


def _aligned(array: np.ndarray) -> np.ndarray:
    copy = aligned_empty(array.nbytes).view(array.dtype).reshape(array.shape)
    copy[...] = array
    return copy


def ortx_runner(model, feeds, threads):
    """Compiles `model` once and returns a callable that runs the compiled program on `feeds`."""
    ir_model = infer_shapes(model)
    compiled = compile_graph(ir_model.graph, num_threads=threads)
    # tensors and arena on 64-byte lines, as ORT's tensors and a session's arena are (ortx.memory.lifetimes)
    inputs = [_aligned(np.asarray(feeds[v.name], dtype=numpy_dtype(v))) for v in ir_model.graph.inputs]
    outputs = [_aligned(np.zeros(static_shape(v), dtype=numpy_dtype(v))) for v in ir_model.graph.outputs]
    externals = np.array([a.__array_interface__["data"][0] for a in inputs + outputs], dtype=np.uint64)
    arena = aligned_empty(compiled.arena_bytes)
    keep = (inputs, outputs)  # externals holds raw addresses: the arrays must outlive the callable

    def run():
        compiled.program.run(arena, externals, threads, False)
        return keep[1]
    return run


def ort_runner(model, feeds, threads):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda: session.run(None, feeds)


def one_node_model(op_type, inputs, initializers, attributes, opset=17):
    node = helper.make_node(op_type, [name for name, _ in inputs] + [i.name for i in initializers], ["y"],
                            **attributes)
    graph = helper.make_graph([node], op_type, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                                for n, s in inputs],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def bench_gemm(threads, repeats):
    rng = np.random.default_rng(0)
    print(f"SGEMM, {threads} thread(s), GFLOP/s (median of {repeats})")
    print(f"{'M x N x K':>20} {'ortx':>8} {'numpy':>8} {'ort':>8} {'ortx/numpy':>11}")
    for M, N, K in [(1024, 1024, 1024), (512, 512, 512), (2048, 2048, 2048), (196, 768, 3072), (3136, 64, 576)]:
        a = rng.standard_normal((M, K), dtype=np.float32)
        b = rng.standard_normal((K, N), dtype=np.float32)
        # MatMul of two inputs: ortx packs both operands at run time, as numpy does
        model = one_node_model("MatMul", [("a", (M, K)), ("b", (K, N))], [], {})
        feeds = {"a": a, "b": b}
        seconds = block_medians({"ortx": ortx_runner(model, feeds, threads), "numpy": lambda: a @ b,
                                       "ort": ort_runner(model, feeds, threads)}, repeats)
        flops = 2.0 * M * N * K
        rates = {name: flops / value / 1e9 for name, value in seconds.items()}
        print(f"{f'{M}x{N}x{K}':>20} {rates['ortx']:8.1f} {rates['numpy']:8.1f} {rates['ort']:8.1f} "
              f"{rates['ortx'] / rates['numpy']:11.2f}")


# (label, M, N, K). Convs as ortx lowers them: M = output channels, N = output pixels, K = input channels x kernel
# area; "pixel rows" convs the other way round; BERT-like: the encoder block of benchmarks/run.py (seq 128, dim 256).
TUNED_GEMM_SHAPES = [
    ("square 1024", 1024, 1024, 1024),
    ("square 512", 512, 512, 512),
    ("square 2048", 2048, 2048, 2048),
    ("ViT-B MLP down 196x768x3072", 196, 768, 3072),
    ("conv pixel rows 3136x64x576", 3136, 64, 576),
    ("resnet18 3x3 64 @56", 64, 3136, 576),
    ("resnet18 3x3 128 @28", 128, 784, 1152),
    ("resnet18 3x3 256 @14", 256, 196, 2304),
    ("resnet18 3x3 512 @7", 512, 49, 4608),
    ("resnet18 fc 512->1000", 1, 1000, 512),
    ("mbv2 1x1 16->96 @112", 96, 12544, 16),
    ("mbv2 1x1 144->24 @56", 24, 3136, 144),
    ("ppocr 1x1 64->64 @160", 64, 25600, 64),
    ("bert qkv 128x768x256", 128, 768, 256),
    ("bert ffn up 128x1024x256", 128, 1024, 256),
    ("bert ffn down 128x256x1024", 128, 256, 1024),
]


def prebuilt_gemm(a, b, M, N, K, threads):
    """ortx_sgemm (gemm_f32, raw row-major operands) as a callable."""
    sizes = np.zeros(3, np.int64)
    _kernels.call("gemm_sizes_f32", [M, N, K, threads, 0, 0], [], [sizes])
    y = np.empty((M, N), np.float32)
    workspace = np.empty(int(sizes[0]) // 4 + 1, np.float32)
    ints = [M, N, K, 1, 0, K, 1, 0, N, 1, 0, 0, 0, 0, 0, 0, threads, 0, 0]
    return lambda: _kernels.call("gemm_f32", ints, [1.0, 1.0, 0.0, 0.0], [a, b, y, workspace, y, y], threads)


def _busy_fraction(seconds: float = 2.0) -> float:
    """Share of all CPUs' time spent busy over `seconds` (from /proc/stat; 0 where there is none)."""
    def sample():
        with open("/proc/stat") as stat:
            values = [int(v) for v in stat.readline().split()[1:9]]
        return values[3] + values[4], sum(values)  # idle + iowait, total

    try:
        idle0, total0 = sample()
        time.sleep(seconds)
        idle1, total1 = sample()
    except OSError:
        return 0.0
    return 1.0 - (idle1 - idle0) / max(total1 - total0, 1)


def wait_for_quiet(limit_seconds: float, busy_below: float = 0.05) -> bool:
    """Waits (up to limit_seconds) until the host was idle for 2 s: on a shared host another job's burst makes
    numpy's OpenBLAS threads, which spin and synchronise, collapse far more than ortx's. True when it got quiet."""
    deadline = time.perf_counter() + limit_seconds
    while time.perf_counter() < deadline:
        if _busy_fraction() < busy_below:
            return True
    return False


def bench_tuned_gemm(threads, repeats, trials, labels, database_path, rounds, quiet_wait):
    from ortx.tune import fingerprint, gemm_space
    from ortx.tune.records import TuningDatabase

    options = Options.from_environment()
    database_path = database_path or options.cache_dir / "tuning.sqlite"
    machine = fingerprint.current(options)
    isa = gemm.runnable_isas()[-1]
    shapes = [shape for shape in TUNED_GEMM_SHAPES if labels is None or shape[0] in labels]
    print(f"Generated SGEMM ({isa}), {threads} thread(s), GFLOP/s: median over {rounds} rounds of block medians "
          f"of {repeats}; tuned with {trials} trials per shape, records in {database_path}")
    print(f"{'shape':>28} {'numpy':>7} {'prebuilt':>9} {'default':>8} {'tuned':>7} {'tuned/numpy':>12} "
          f"{'tune s':>7}  tuned schedule")
    ratios = []
    with TuningDatabase(database_path) as database:
        for label, M, N, K in shapes:
            problem = gemm.GemmProblem.dense(M, N, K)
            tuning = gemm_space.tune_gemm(problem, num_threads=threads, database=database, fingerprint=machine,
                                          options=options, trials=trials, isa=isa)
            rng = np.random.default_rng(2)
            a, b = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)
            kernels = {"default": gemm.build_gemm(problem, gemm_space.to_gemm_schedule(
                           gemm_space.default_schedule(problem, isa, threads)), options),
                       "tuned": gemm.build_gemm(problem, gemm_space.to_gemm_schedule(tuning.best.schedule), options)}
            outputs = {name: np.empty((M, N), np.float32) for name in kernels}
            functions = {"numpy": lambda: a @ b, "prebuilt": prebuilt_gemm(a, b, M, N, K, threads)}
            for name, kernel in kernels.items():
                functions[name] = lambda kernel=kernel, out=outputs[name]: kernel(a, b, out, num_threads=threads)
            quiet = quiet_wait <= 0 or wait_for_quiet(quiet_wait)
            per_round = [block_medians(functions, repeats) for _ in range(rounds)]
            rates = {name: problem.flops / float(np.median([r[name] for r in per_round])) / 1e9 for name in functions}
            ratios.append(rates["tuned"] / rates["numpy"])
            print(f"{label:>28} {rates['numpy']:7.1f} {rates['prebuilt']:9.1f} {rates['default']:8.1f} "
                  f"{rates['tuned']:7.1f} {ratios[-1]:12.2f} {tuning.seconds:7.1f}  {tuning.best.schedule}"
                  f"{'' if quiet else '  (host busy when timing began)'}", flush=True)
    print(f"median tuned/numpy over {len(ratios)} shapes: {float(np.median(ratios)):.2f}")


# (label, input shape, weight shape, attributes)
CONV_LAYERS = [
    ("resnet18 stem 7x7/2", (1, 3, 224, 224), (64, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),
    ("resnet18 3x3 64 @56", (1, 64, 56, 56), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
    ("resnet18 3x3/2 128 @28", (1, 64, 56, 56), (128, 64, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ("resnet18 3x3 128 @28", (1, 128, 28, 28), (128, 128, 3, 3), dict(pads=[1, 1, 1, 1])),
    ("resnet18 3x3 256 @14", (1, 256, 14, 14), (256, 256, 3, 3), dict(pads=[1, 1, 1, 1])),
    ("resnet18 3x3 512 @7", (1, 512, 7, 7), (512, 512, 3, 3), dict(pads=[1, 1, 1, 1])),
    ("resnet18 1x1/2 256 @14", (1, 128, 28, 28), (256, 128, 1, 1), dict(strides=[2, 2])),
    ("mbv2 1x1 16->96 @112", (1, 16, 112, 112), (96, 16, 1, 1), dict()),
    ("mbv2 1x1 144->24 @56", (1, 144, 56, 56), (24, 144, 1, 1), dict()),
    ("mbv2 1x1 192->32 @28", (1, 192, 28, 28), (32, 192, 1, 1), dict()),
    ("mbv2 1x1 960->160 @7", (1, 960, 7, 7), (160, 960, 1, 1), dict()),
    ("mbv2 dw3x3 32 @112", (1, 32, 112, 112), (32, 1, 3, 3), dict(group=32, pads=[1, 1, 1, 1])),
    ("mbv2 dw3x3/2 96 @112", (1, 96, 112, 112), (96, 1, 3, 3), dict(group=96, strides=[2, 2], pads=[1, 1, 1, 1])),
    ("mbv2 dw3x3 144 @56", (1, 144, 56, 56), (144, 1, 3, 3), dict(group=144, pads=[1, 1, 1, 1])),
    ("mbv2 dw3x3 576 @14", (1, 576, 14, 14), (576, 1, 3, 3), dict(group=576, pads=[1, 1, 1, 1])),
    ("ppocr stem 3x3/2 @640", (1, 3, 640, 640), (16, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ("ppocr dw3x3 16 @160", (1, 16, 160, 160), (16, 1, 3, 3), dict(group=16, pads=[1, 1, 1, 1])),
    ("ppocr dw3x3 64 @160", (1, 64, 160, 160), (64, 1, 3, 3), dict(group=64, pads=[1, 1, 1, 1])),
    ("ppocr dw5x5 32 @160", (1, 32, 160, 160), (32, 1, 5, 5), dict(group=32, pads=[2, 2, 2, 2])),
    ("ppocr dw5x5/2 64 @160", (1, 64, 160, 160), (64, 1, 5, 5), dict(group=64, strides=[2, 2], pads=[2, 2, 2, 2])),
    ("ppocr 1x1 64->64 @160", (1, 64, 160, 160), (64, 64, 1, 1), dict()),
    ("ppocr det 3x3 96->24 @160", (1, 96, 160, 160), (24, 96, 3, 3), dict(pads=[1, 1, 1, 1])),
    ("ppocr convT 2x2/2 64->16", (1, 64, 160, 160), (64, 16, 2, 2), dict(strides=[2, 2])),
]


def bench_conv(threads, repeats):
    rng = np.random.default_rng(1)
    print(f"Conv layers, {threads} thread(s), ms (median of {repeats}); ratio < 1 means ortx is faster")
    print(f"{'layer':>26} {'ortx ms':>9} {'ort ms':>9} {'ortx/ort':>9} {'ortx GFLOP/s':>13}")
    for label, x_shape, w_shape, attributes in CONV_LAYERS:
        op_type = "ConvTranspose" if "convT" in label else "Conv"
        weights = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
        out_channels = w_shape[1] if op_type == "ConvTranspose" else w_shape[0]
        bias = rng.standard_normal(out_channels).astype(np.float32)
        model = one_node_model(op_type, [("x", x_shape)], [numpy_helper.from_array(weights, "w"),
                                                           numpy_helper.from_array(bias, "b")], attributes)
        feeds = {"x": rng.standard_normal(x_shape, dtype=np.float32)}
        ortx = ortx_runner(model, feeds, threads)
        y_shape = ortx()[0].shape
        seconds = block_medians({"ortx": ortx, "ort": ort_runner(model, feeds, threads)}, repeats)
        if op_type == "Conv":
            flops = 2.0 * np.prod(y_shape) * np.prod(w_shape[1:])
        else:
            flops = 2.0 * np.prod(x_shape) * np.prod(w_shape[1:])
        print(f"{label:>26} {seconds['ortx'] * 1e3:9.3f} {seconds['ort'] * 1e3:9.3f} "
              f"{seconds['ortx'] / seconds['ort']:9.2f} {flops / seconds['ortx'] / 1e9:13.1f}")


# ResNet-18-style's conv shapes at 224x224 and its stem pool: (label, count in the model, x shape, w shape or None
# for a MaxPool, attributes)
RESNET_LAYERS = [
    ("stem 7x7/2 3->64 @112", 1, (1, 3, 224, 224), (64, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),
    ("maxpool 3x3/2 64 @56", 1, (1, 64, 112, 112), None, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("3x3 64->64 @56", 4, (1, 64, 56, 56), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
    ("3x3/2 64->128 @28", 1, (1, 64, 56, 56), (128, 64, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ("1x1/2 64->128 @28", 1, (1, 64, 56, 56), (128, 64, 1, 1), dict(strides=[2, 2])),
    ("3x3 128->128 @28", 3, (1, 128, 28, 28), (128, 128, 3, 3), dict(pads=[1, 1, 1, 1])),
    ("3x3/2 128->256 @14", 1, (1, 128, 28, 28), (256, 128, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ("1x1/2 128->256 @14", 1, (1, 128, 28, 28), (256, 128, 1, 1), dict(strides=[2, 2])),
    ("3x3 256->256 @14", 3, (1, 256, 14, 14), (256, 256, 3, 3), dict(pads=[1, 1, 1, 1])),
    ("3x3/2 256->512 @7", 1, (1, 256, 14, 14), (512, 256, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ("1x1/2 256->512 @7", 1, (1, 256, 14, 14), (512, 256, 1, 1), dict(strides=[2, 2])),
    ("3x3 512->512 @7", 3, (1, 512, 7, 7), (512, 512, 3, 3), dict(pads=[1, 1, 1, 1])),
]


# MobileNetV2-style's depthwise convs (tests/_models.py, 224x224): (label, count in the model, x, w, attributes)
MOBILENETV2_DEPTHWISE_LAYERS = [
    (f"dw{'/2' if stride == 2 else ''} {channels} @{size}", count, (1, channels, size, size), (channels, 1, 3, 3),
     dict(group=channels, strides=[stride, stride], pads=[1, 1, 1, 1]))
    for channels, size, stride, count in [(32, 112, 1, 1), (96, 112, 2, 1), (144, 56, 1, 1), (144, 56, 2, 1),
                                          (192, 28, 1, 2), (192, 28, 2, 1), (384, 14, 1, 4), (576, 14, 1, 2),
                                          (576, 14, 2, 1), (960, 7, 1, 3)]
]

# MobileNetV2-style's pointwise (1x1) convs, each distinct shape: (label, count in the model, x, w, attributes)
MOBILENETV2_POINTWISE_LAYERS = [
    (f"1x1 {cin}->{cout} @{size}", count, (1, cin, size, size), (cout, cin, 1, 1), {})
    for cin, cout, size, count in [(32, 16, 112, 1), (16, 96, 112, 1), (96, 24, 56, 1), (24, 144, 56, 2),
                                   (144, 24, 56, 1), (144, 32, 28, 1), (32, 192, 28, 3), (192, 32, 28, 2),
                                   (192, 64, 14, 1), (64, 384, 14, 4), (384, 64, 14, 3), (384, 96, 14, 1),
                                   (96, 576, 14, 3), (576, 96, 14, 2), (576, 160, 7, 1), (160, 960, 7, 3),
                                   (960, 160, 7, 2), (960, 320, 7, 1), (320, 1280, 7, 1)]
]

# --layer-set: (layers, BENCHMARKS.md section, what they are)
LAYER_SETS = {
    "resnet18": (RESNET_LAYERS, "Dense conv layers (issue #4)",
                 "Each distinct conv shape of ResNet-18-style (224x224, BatchNorm folded: Conv with bias -> Relu, "
                 "random weights) and its stem MaxPool"),
    "mobilenetv2-depthwise": (MOBILENETV2_DEPTHWISE_LAYERS, "Depthwise conv layers (issue #4)",
                              "Each distinct depthwise conv of MobileNetV2-style (224x224, Conv with bias and "
                              "group = channels -> Relu, random weights)"),
    "mobilenetv2-pointwise": (MOBILENETV2_POINTWISE_LAYERS, "Pointwise conv layers (issue #4)",
                              "Each distinct 1x1 conv of MobileNetV2-style (224x224, Conv with bias -> Relu, "
                              "random weights)"),
}


def conv_relu_model(x_shape, w_shape, attributes, seed=0):
    """Conv (bias) -> Relu on random weights: a ResNet layer after BatchNorm folding."""
    rng = np.random.default_rng(seed)
    weights = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    bias = (0.1 * rng.standard_normal(w_shape[0])).astype(np.float32)
    stride, pad, kernel = attributes.get("strides", [1, 1])[0], attributes.get("pads", [0] * 4)[0], w_shape[2]
    y_shape = [1, w_shape[0]] + [(size + 2 * pad - kernel) // stride + 1 for size in x_shape[2:]]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **attributes), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                              [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def max_pool_model(x_shape, attributes):
    """A lone MaxPool (2-D, symmetric pads)."""
    stride, pad, kernel = attributes["strides"][0], attributes["pads"][0], attributes["kernel_shape"][0]
    y_shape = list(x_shape[:2]) + [(size + 2 * pad - kernel) // stride + 1 for size in x_shape[2:]]
    graph = helper.make_graph([helper.make_node("MaxPool", ["x"], ["y"], **attributes)], "pool",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def bench_layers(thread_counts, rounds, runs, write, quiet_wait, layer_set="resnet18"):
    """Every conv shape of the layer set through OrtxEP vs ORT (ortx.measure.compare), per thread count; first
    waits up to quiet_wait seconds for the 1-minute load to drop below 1."""
    import datetime

    from benchmarks._report import head_commit, load_average, wait_for_quiet, write_section
    from ortx.measure import compare
    print(f"load before: {wait_for_quiet(quiet_wait) if quiet_wait else load_average():.2f}", flush=True)
    head = head_commit()
    lines = ["| layer | x in model | threads | ORT ms | OrtxEP ms | OrtxEP/ORT median (range) | OrtxEP GFLOP/s | "
             "max rel err | load |", "|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    totals = {threads: [0.0, 0.0] for threads in thread_counts}
    layers, section, description = LAYER_SETS[layer_set]
    convs = sum(layer[1] for layer in layers)
    for label, count, x_shape, w_shape, attributes in layers:
        model = max_pool_model(x_shape, attributes) if w_shape is None else conv_relu_model(x_shape, w_shape,
                                                                                           attributes)
        for threads in thread_counts:
            results, loads = [], []
            for _ in range(rounds):
                loads.append(load_average())
                results.append(compare(label, model, threads=threads, runs=runs))
            ratios = [row.ratio for row in results]
            ort_ms = statistics.median(row.ort_ms for row in results)
            ortx_ms = statistics.median(row.ortx_ms for row in results)
            totals[threads][0] += count * ort_ms
            totals[threads][1] += count * ortx_ms
            line = (f"| {label} | {count} | {threads} | {ort_ms:.3f} | {ortx_ms:.3f} | {statistics.median(ratios):.2f} "
                    f"({min(ratios):.2f}-{max(ratios):.2f}) | {statistics.median(r.ortx_gflops for r in results):.0f} "
                    f"| {max(r.max_relative_error for r in results):.1e} | {min(loads):.1f}-{max(loads):.1f} |")
            lines.append(line)
            print(line, flush=True)
    summary = "; ".join(f"{threads} thread(s): OrtxEP {ortx:.2f} ms vs ORT {ort:.2f} ms ({ortx / ort:.2f})"
                        for threads, (ort, ortx) in totals.items())
    print(f"Sum over the model's {convs} layers (medians x count): {summary}")
    if write:
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        body = (f"Measured {when} on {head}, x86_64 {_kernels.selected_isa()}, onnxruntime {onnxruntime.__version__}: "
                f"`python benchmarks/kernels.py --only layers --layer-set {layer_set} --layer-threads "
                f"{','.join(map(str, thread_counts))} --rounds {rounds} --runs {runs} --write`. {description} "
                "as its own model, OrtxEP (tuning off) "
                "against ORT CPU in ortx.measure.compare's interleaved blocks; milliseconds are medians over rounds, "
                "the ratio's median (range) over rounds.\n\n" + "\n".join(lines) +
                f"\n\nSum over the model's {convs} layers (medians x count): {summary}.")
        write_section(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "BENCHMARKS.md"),
                      section, body)


def main():
    print(f"ortx ISA {_kernels.selected_isa()}, onnxruntime {onnxruntime.__version__}, numpy {np.__version__}, "
          f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}")
    if ARGS.only in (None, "gemm"):
        bench_gemm(ARGS.threads, ARGS.repeats)
    if ARGS.only in (None, "conv"):
        bench_conv(ARGS.threads, ARGS.repeats)
    if ARGS.only == "layers":
        bench_layers([int(value) for value in ARGS.layer_threads.split(",")], ARGS.rounds, ARGS.runs, ARGS.write,
                     ARGS.quiet_wait, ARGS.layer_set)
        return 0
    if ARGS.only in (None, "tuned"):
        bench_tuned_gemm(ARGS.threads, ARGS.repeats, ARGS.trials,
                         None if ARGS.shapes is None else set(ARGS.shapes.split(",")), ARGS.database, ARGS.rounds,
                         ARGS.quiet_wait)
    return 0


if __name__ == "__main__":
    sys.exit(main())
