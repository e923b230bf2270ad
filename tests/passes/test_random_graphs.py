"""Property test: random small graphs from the op set the passes touch, optimized at -O2, agree with the original
in onnxruntime on seeded non-zero inputs.

Each example grows a graph from X[1, C, H, W] by drawing ops whose inputs are earlier tensors, so shapes stay
static and known: Conv (1x1, 3x3), BatchNormalization, Relu, Clip, per-channel or tensor Add/Mul, MatMul by a
constant, Transpose pairs, Reshape round trips, Concat, decomposed HardSwish, Identity, same-dtype Cast, Pad.
Bounded (max_examples=30, no deadline) so it runs in CI in seconds; derandomized, so CI runs the same examples.
"""
import numpy as np
import onnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from ortx.optimize import optimize
from tests import _models
from tests.passes._helpers import feeds_for, run_ort
from tests.tolerances import assert_close

OPS = ("conv", "batchnorm", "relu", "clip", "add_const", "mul_const", "add_tensor", "matmul", "transpose_pair",
       "reshape_round_trip", "concat", "hardswish", "identity", "cast", "pad_conv")


class _Graph:
    def __init__(self, seed: int, channels: int, height: int, width: int):
        self.builder = _models.GraphBuilder("random", seed)
        self.tensors = {"X": (1, channels, height, width)}

    def add(self, name: str, shape: tuple[int, ...]) -> str:
        self.tensors[name] = shape
        return name


def _apply(graph: _Graph, op: str, source: str, other: str) -> None:
    builder, shape = graph.builder, graph.tensors[source]
    channels = shape[1]
    if op == "conv":
        out = builder.rng.integers(1, 6)
        kernel = int(builder.rng.choice([1, 3]))
        graph.add(builder.conv(source, channels, int(out), kernel, bias=bool(builder.rng.integers(2))),
                  (1, int(out)) + shape[2:])
    elif op == "pad_conv":
        pads = builder.constant(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")
        padded = builder.node("Pad", [source, pads])
        graph.add(builder.node("Conv", [padded, builder.constant(
            builder.rng.standard_normal((2, channels, 3, 3)).astype(np.float32) * 0.3, "w")], kernel_shape=[3, 3]),
            (1, 2) + shape[2:])
    elif op == "batchnorm":
        graph.add(builder.batchnorm(source, channels), shape)
    elif op in ("relu", "identity"):
        graph.add(builder.node(op.capitalize(), [source]), shape)
    elif op == "clip":
        graph.add(builder.clip6(source), shape)
    elif op == "cast":
        graph.add(builder.node("Cast", [source], to=onnx.TensorProto.FLOAT), shape)
    elif op in ("add_const", "mul_const"):
        constant = builder.constant(builder.rng.uniform(0.5, 1.5, (channels, 1, 1)).astype(np.float32), "c")
        graph.add(builder.node("Add" if op == "add_const" else "Mul", [source, constant]), shape)
    elif op == "add_tensor":
        partner = other if graph.tensors[other] == shape else source
        graph.add(builder.node("Add", [source, partner]), shape)
    elif op == "matmul":
        columns = int(builder.rng.integers(2, 6))
        weight = builder.constant(builder.rng.standard_normal((shape[3], columns)).astype(np.float32) * 0.5, "mm")
        graph.add(builder.node("MatMul", [source, weight]), shape[:3] + (columns,))
    elif op == "transpose_pair":
        first = builder.node("Transpose", [source], perm=[0, 2, 3, 1])
        graph.add(builder.node("Transpose", [first], perm=[0, 3, 1, 2]), shape)
    elif op == "reshape_round_trip":
        flat = builder.node("Reshape", [source, builder.constant(np.array([1, -1], np.int64), "flat")])
        graph.add(builder.node("Reshape", [flat, builder.constant(np.array(shape, np.int64), "back")]), shape)
    elif op == "concat":
        partner = other if graph.tensors[other][2:] == shape[2:] else source
        graph.add(builder.node("Concat", [source, partner], axis=1),
                  (1, channels + graph.tensors[partner][1]) + shape[2:])
    elif op == "hardswish":
        three = builder.constant(np.array(3.0, np.float32), "three")
        clipped = builder.clip6(builder.node("Add", [source, three]))
        product = builder.node("Mul", [source, clipped])
        graph.add(builder.node("Div", [product, builder.constant(np.array(6.0, np.float32), "six")]), shape)


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_optimized_random_graph_matches_original(data):
    seed = data.draw(st.integers(0, 2**16), label="seed")
    graph = _Graph(seed, data.draw(st.integers(1, 5)), data.draw(st.integers(3, 7)), data.draw(st.integers(3, 7)))
    for _ in range(data.draw(st.integers(1, 8), label="ops")):
        names = list(graph.tensors)
        source = data.draw(st.sampled_from(names[-3:]), label="source")
        other = data.draw(st.sampled_from(names), label="other")
        _apply(graph, data.draw(st.sampled_from(OPS), label="op"), source, other)
    last = list(graph.tensors)[-1]  # every op adds a tensor, so this is never X
    outputs = [helper.make_tensor_value_info(last, onnx.TensorProto.FLOAT, list(graph.tensors[last]))]
    proto = graph.builder.finish(
        [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, list(graph.tensors["X"]))], outputs)
    optimized, _ = optimize(proto, level=2, check=True)
    assert all(node.domain in ("", "ai.onnx") for node in optimized.graph.node)
    assert len(optimized.graph.node) <= len(proto.graph.node)
    feeds = feeds_for(proto, seed=seed)
    expected, actual = run_ort(proto, feeds)[0], run_ort(optimized, feeds)[0]
    assert_close(actual, expected, what=f"ops {[n.op_type for n in proto.graph.node]}")
