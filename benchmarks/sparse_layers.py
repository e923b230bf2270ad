"""Single-layer timings of the sparse kernels (issue #9): dense vs CSR vs 4x1 CSR on the ResNet-18, MobileNetV2 and
BERT-like layer shapes, with GFLOP/s of useful (nonzero) multiply-adds. Not run by CI.

    python benchmarks/sparse_layers.py [--zeros 0.9] [--threads 1,2] [--runs 30] [--layers stem,s1_3x3,...]

Each layer alone is compiled three times (ortx.tune.sparse_choice.ForcedPolicy) and the three programs are run
interleaved, `runs` times each after a warm-up; the fastest run of each is reported (other processes only ever slow
a run down). At 1 thread the clock is the calling thread's CPU time (the kernels run on the caller), which a busy
host disturbs much less than wall time; at 2 threads it is wall time, so quote 2-thread numbers from a quiet host.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from benchmarks._report import load_average  # noqa: E402
from ortx.ep.compile_nodes import compile_segment, infer_shapes  # noqa: E402
from ortx.memory.lifetimes import aligned_empty  # noqa: E402
from ortx.tune.sparse_choice import ForcedPolicy, SparseChoice  # noqa: E402

ENGINES = (SparseChoice("dense", 1, "forced"), SparseChoice("sparse", 1, "forced"),
           SparseChoice("sparse", 4, "forced"))


def _pruned(shape, zeros: float, rng) -> np.ndarray:
    weights = rng.standard_normal(shape).astype(np.float32)
    weights[rng.random(shape) < zeros] = 0
    return weights


def conv_layer(cin: int, cout: int, size: int, kernel: int, stride: int, pad: int, zeros: float):
    """A Conv with bias on a 1 x cin x size x size input; returns (model, useful flops)."""
    rng = np.random.default_rng(0)
    weights = _pruned((cout, cin, kernel, kernel), zeros, rng)
    out = (size + 2 * pad - kernel) // stride + 1
    node = helper.make_node("Conv", ["X", "W", "B"], ["Y"], name="conv", pads=[pad] * 4, strides=[stride] * 2)
    graph = helper.make_graph([node], "layer", [helper.make_tensor_value_info("X", 1, [1, cin, size, size])],
                              [helper.make_tensor_value_info("Y", 1, [1, cout, out, out])],
                              initializer=[numpy_helper.from_array(weights, "W"),
                                           numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32),
                                                                   "B")])
    return _model(graph), 2 * np.count_nonzero(weights) * out * out


def matmul_layer(M: int, K: int, N: int, zeros: float):
    """A MatMul of an M x K activation by a constant K x N weight; returns (model, useful flops)."""
    weights = _pruned((K, N), zeros, np.random.default_rng(0))
    node = helper.make_node("MatMul", ["X", "W"], ["Y"], name="matmul")
    graph = helper.make_graph([node], "layer", [helper.make_tensor_value_info("X", 1, [M, K])],
                              [helper.make_tensor_value_info("Y", 1, [M, N])],
                              initializer=[numpy_helper.from_array(weights, "W")])
    return _model(graph), 2 * np.count_nonzero(weights) * M


def _model(graph):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


LAYERS = {  # ResNet-18-style at 224 (stem, one 3x3 per stage, the stride-2 3x3 and 1x1), MobileNetV2, BERT-like
    "stem": lambda z: conv_layer(3, 64, 224, 7, 2, 3, z),
    "s1_3x3": lambda z: conv_layer(64, 64, 56, 3, 1, 1, z),
    "s2_3x3s2": lambda z: conv_layer(64, 128, 56, 3, 2, 1, z),
    "s2_1x1s2": lambda z: conv_layer(64, 128, 56, 1, 2, 0, z),
    "s2_3x3": lambda z: conv_layer(128, 128, 28, 3, 1, 1, z),
    "s3_3x3": lambda z: conv_layer(256, 256, 14, 3, 1, 1, z),
    "s4_3x3": lambda z: conv_layer(512, 512, 7, 3, 1, 1, z),
    "mbv2_1x1": lambda z: conv_layer(24, 144, 56, 1, 1, 0, z),
    "bert_qkv": lambda z: matmul_layer(128, 256, 256, z),
    "bert_ffn1": lambda z: matmul_layer(128, 256, 1024, z),
    "bert_ffn2": lambda z: matmul_layer(128, 1024, 256, z),
}


def _aligned(array: np.ndarray) -> np.ndarray:
    """A copy on 64-byte lines, as ORT's tensors and a session's arena are (numpy gives 16)."""
    copy = aligned_empty(array.nbytes).view(array.dtype).reshape(array.shape)
    copy[...] = array
    return copy


def time_layer(model, threads: int, runs: int) -> dict[SparseChoice, float]:
    """Fastest ms of each engine, interleaved."""
    graph = infer_shapes(model).graph
    rng = np.random.default_rng(1)
    arrays = [_aligned(rng.standard_normal(value.shape.numpy()).astype(np.float32)) for value in graph.inputs]
    arrays += [_aligned(np.zeros(value.shape.numpy(), np.float32)) for value in graph.outputs]
    externals = np.array([array.__array_interface__["data"][0] for array in arrays], np.uint64)
    programs = {}
    for engine in ENGINES:
        compiled = compile_segment(list(graph), list(graph.inputs), list(graph.outputs), num_threads=threads,
                                   sparse_policy=ForcedPolicy(engine))
        arena = aligned_empty(compiled.arena_bytes)  # 64-byte lines, as a session's arena (RunContext)
        compiled.program.run(arena, externals, threads)  # warm-up
        programs[engine] = (compiled.program, arena)
    clock = time.thread_time if threads == 1 else time.perf_counter
    best = {engine: float("inf") for engine in ENGINES}
    for _ in range(runs):
        for engine, (program, arena) in programs.items():
            start = clock()
            program.run(arena, externals, threads)
            best[engine] = min(best[engine], (clock() - start) * 1e3)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--zeros", type=float, default=0.9)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--layers", default=",".join(LAYERS))
    args = parser.parse_args()
    print(f"zeros {args.zeros:.0%}, load {load_average():.2f}; ms are the fastest of {args.runs} interleaved runs")
    for threads in (int(t) for t in args.threads.split(",")):
        for name in args.layers.split(","):
            if name not in LAYERS:
                raise SystemExit(f"unknown layer {name!r}; known: {', '.join(LAYERS)}")
            model, flops = LAYERS[name](args.zeros)
            times = time_layer(model, threads, args.runs)
            dense, csr, blocked = (times[engine] for engine in ENGINES)
            print(f"{threads} thread(s) {name:10s} dense {dense:7.3f} ms  CSR {csr:7.3f} ms "
                  f"({flops / csr / 1e6:5.1f} useful GFLOP/s)  4x1 {blocked:7.3f} ms  dense/CSR {dense / csr:5.2f}x",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
