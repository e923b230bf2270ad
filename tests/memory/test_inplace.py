"""In-place reuse (ortx.memory.inplace through SegmentBuilder.finish): which outputs take a dying input's bytes,
numerics equal to ONNX Runtime and to the same program without reuse, and the cases where reuse must not happen."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from ortx.ep.compile_nodes import check_node, infer_shapes
from ortx.ep.lowering import LOWERINGS
from ortx.ep.segment_builder import SegmentBuilder
from ortx.memory.lifetimes import Lifetime, check_no_overlap
from ortx.memory.plan import plan_offsets
from tests import _models
from tests.tolerances import assert_close


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                              initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _compile(model: onnx.ModelProto, *, in_place: bool = True):
    graph = infer_shapes(model).graph
    builder = SegmentBuilder(list(graph.inputs), list(graph.outputs), num_threads=2, in_place=in_place)
    for node in graph:
        assert check_node(node) is None, check_node(node)
        builder.current_node = node.name
        LOWERINGS[(node.domain, node.op_type)][1](node, builder)
    return graph, builder.finish()


def _run(graph, compiled, feeds) -> list[np.ndarray]:
    inputs = [np.ascontiguousarray(feeds[value.name], dtype=np.float32) for value in graph.inputs]
    outputs = [np.empty(tuple(value.shape), np.float32) for value in graph.outputs]
    externals = np.array([a.__array_interface__["data"][0] for a in inputs + outputs], dtype=np.uint64)
    arena = np.full(max(compiled.arena_bytes, 1), 0xFF, dtype=np.uint8)  # NaN garbage: unwritten reads show
    compiled.program.run(arena, externals, 2, False)
    return outputs


def _check(model, feeds, expected_pairs) -> object:
    """Compiles with and without reuse; asserts the reuses, no overlap, and numerics vs ORT and vs no reuse."""
    graph, compiled = _compile(model)
    _, without = _compile(model, in_place=False)
    assert [(r.input, r.output) for r in compiled.in_place] == expected_pairs
    placements = compiled.tensors
    lifetimes = [Lifetime(str(i), p.nbytes, p.first, p.last) for i, p in enumerate(placements)]
    merged = {(r.input, r.output) for r in compiled.in_place}
    # the overlap invariant holds for all buffers except the exact pairs reuse made (input dies as output starts)
    offsets = {str(i): p.offset for i, p in enumerate(placements)}
    for i, a in enumerate(placements):
        for j, b in enumerate(placements[i + 1:], start=i + 1):
            pair = {(a.label, b.label), (b.label, a.label)} & merged
            if pair or not lifetimes[i].conflicts(lifetimes[j]):
                continue
            check_no_overlap([lifetimes[i], lifetimes[j]], offsets)
    reference = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = reference.run(None, feeds)
    got = _run(graph, compiled, feeds)
    plain = _run(graph, without, feeds)
    for actual, want, same in zip(got, expected, plain):
        assert_close(actual, want)
        assert np.array_equal(actual, same), "reuse changed the bits"
    return compiled, without


def _feeds(**shapes):
    rng = np.random.default_rng(0)
    return {name: rng.uniform(-2, 2, size=shape).astype(np.float32) for name, shape in shapes.items()}


def test_unary_chain_reuses_each_dying_input():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Sigmoid", ["a"], ["b"], name="sig"),
             helper.make_node("Tanh", ["b"], ["c"], name="tanh"), helper.make_node("Abs", ["c"], ["y"], name="abs")]
    model = _model(nodes, [("x", [2, 3, 37])], ["y"])
    compiled, without = _check(model, _feeds(x=(2, 3, 37)), [("a", "b"), ("b", "c")])
    # a, b and c share one buffer: the arena holds one 888-byte tensor instead of two
    assert compiled.arena_bytes == 896
    assert without.arena_bytes == 2 * 896
    assert len({p.offset for p in compiled.tensors}) == 1


def test_input_still_used_later_is_not_overwritten():
    # a feeds both Sigmoid and the Add after it: Sigmoid must not write over a.
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Sigmoid", ["a"], ["b"], name="sig"),
             helper.make_node("Add", ["a", "b"], ["c"], name="add"), helper.make_node("Neg", ["c"], ["y"], name="neg")]
    model = _model(nodes, [("x", [5, 19])], ["y"])
    compiled, _ = _check(model, _feeds(x=(5, 19)), [("a", "c")])
    assert all(r.node != "sig" for r in compiled.in_place)
    offsets = {p.label: p.offset for p in compiled.tensors}
    assert offsets["a"] != offsets["b"]


def test_graph_inputs_and_outputs_are_never_reused():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    compiled, _ = _check(_model(nodes, [("x", [7])], ["y"]), _feeds(x=(7,)), [])
    assert compiled.arena_bytes == 0


def test_broadcast_operand_is_not_reused_but_the_full_one_is():
    bias = helper.make_tensor("bias_const", TensorProto.FLOAT, [1, 4, 1, 1], [0.5, -1.0, 2.0, 0.25])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Exp", ["s"], ["b"], name="exp"),
             helper.make_node("Add", ["b", "a"], ["c"], name="add"),
             helper.make_node("Mul", ["c", "bias_const"], ["d"], name="scale"),
             helper.make_node("Neg", ["d"], ["y"], name="neg")]
    model = _model(nodes, [("x", [2, 4, 5, 3]), ("s", [1, 4, 1, 1])], ["y"], [bias])
    # b [1,4,1,1] is broadcast in the Add: only a (same shape as c) may give its bytes; the constant never does.
    _check(model, _feeds(x=(2, 4, 5, 3), s=(1, 4, 1, 1)), [("a", "c"), ("c", "d")])


def test_batch_normalization_and_residual_add_run_in_place():
    builder = _models.GraphBuilder("bn_residual", seed=3)
    relu = builder.node("Relu", ["x"])
    normalized = builder.batchnorm(relu, 6)
    exp = builder.node("Exp", ["x"])
    residual = builder.node("Add", [normalized, exp])
    builder.node("Neg", [residual])
    model = builder.finish([_models._float_input("x", [1, 6, 9, 7])],
                           [_models._float_input(builder.nodes[-1].output[0], [1, 6, 9, 7])])
    compiled, without = _check(model, _feeds(x=(1, 6, 9, 7)),
                               [(relu, normalized), (normalized, residual)])
    assert {r.kernel for r in compiled.in_place} == {"channel_affine_f32", "binary_f32"}
    assert compiled.arena_bytes < without.arena_bytes


@pytest.mark.parametrize("key", ["resnet18_style_32", "mobilenetv2_style_32", "transformer_block"])
def test_models_bitwise_equal_with_and_without_reuse(key):
    model = {"resnet18_style_32": lambda: _models.resnet18_style(size=32),
             "mobilenetv2_style_32": lambda: _models.mobilenetv2_style(size=32),
             "transformer_block": _models.transformer_block}[key]()
    graph, compiled = _compile(model)
    _, without = _compile(model, in_place=False)
    feeds = {v.name: np.random.default_rng(1).uniform(-1, 1, size=tuple(v.shape)).astype(np.float32)
             for v in graph.inputs}
    got, plain = _run(graph, compiled, feeds), _run(graph, without, feeds)
    reference = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for actual, same, want in zip(got, plain, reference.run(None, feeds)):
        assert np.array_equal(actual, same)
        assert_close(actual, want)
    assert compiled.arena_bytes <= without.arena_bytes
    saved = plan_offsets(compiled.buffer_lifetimes).arena_bytes - compiled.arena_bytes
    assert saved == without.arena_bytes - compiled.arena_bytes
