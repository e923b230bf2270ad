"""fuse_elementwise_chains: which nodes join a chain, and that OrtxEP's chain kernel computes what ORT computes on the
unfused model (every ISA, fast and reference kernels, 1 and 2 threads), bitwise equal to OrtxEP's unfused steps."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ortx import _kernels
from ortx.ep.compile_nodes import run_graph
from ortx.passes.fuse_elementwise_chains import fuse_elementwise_chains
from ortx.passes.infer_shapes import infer_shapes
from tests.passes._helpers import feeds_for, op_types, run_ort, to_ir
from tests.tolerances import assert_close

ISAS = ("portable", "avx2", "avx512")
RUNNABLE_ISAS = ISAS[: ISAS.index(_kernels.cpu_isa()) + 1]
FLOAT = TensorProto.FLOAT


def _model(nodes, inputs: dict, outputs: dict, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info(n, FLOAT, s) for n, s in inputs.items()],
                              [helper.make_tensor_value_info(n, FLOAT, s) for n, s in outputs.items()],
                              list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _neck(shape=(1, 6, 7, 9)) -> onnx.ModelProto:
    """PP-OCRv4 det's neck: y = (x + x * HardSigmoid(se)) + up, then a Relu; se is per channel."""
    channels = shape[1]
    return _model([
        helper.make_node("HardSigmoid", ["se"], ["gate"], name="gate", alpha=0.2, beta=0.5),
        helper.make_node("Mul", ["x", "gate"], ["scaled"], name="scaled"),
        helper.make_node("Add", ["x", "scaled"], ["sum"], name="sum"),
        helper.make_node("Add", ["sum", "up"], ["total"], name="total"),
        helper.make_node("Relu", ["total"], ["y"], name="relu"),
    ], {"x": list(shape), "se": [1, channels, 1, 1], "up": list(shape)}, {"y": list(shape)})


def _fused(model: onnx.ModelProto):
    ir_model = to_ir(model)
    infer_shapes(ir_model)  # the pass needs static shapes, as OrtxEP's pipeline has them
    report = fuse_elementwise_chains(ir_model)
    return ir_model, report


def test_neck_becomes_one_chain():
    ir_model, report = _fused(_neck())
    # HardSigmoid(se) has the per-channel shape, not the output's: it stays a node of its own.
    assert op_types(ir_model) == ["HardSigmoid", "ElementwiseChain"]
    assert report.counts == {"chains_fused": 1, "nodes_fused": 4}
    chain = next(node for node in ir_model.graph if node.op_type == "ElementwiseChain")
    assert list(chain.attributes["op_types"].value) == ["Mul", "Add", "Add", "Relu"]
    assert sorted(chain.metadata_props["ortx.fused_from"].split(",")) == ["relu", "scaled", "sum", "total"]
    assert not fuse_elementwise_chains(ir_model).modified  # idempotent


@pytest.fixture(params=RUNNABLE_ISAS)
def isa(request):
    previous = _kernels.selected_isa()
    _kernels.force_isa(request.param)
    yield request.param
    _kernels.force_isa(previous)


@pytest.mark.parametrize("shape", [(1, 6, 7, 9), (2, 3, 40, 33), (1, 5, 1, 600)])
@pytest.mark.parametrize("threads", [1, 2])
def test_neck_matches_onnxruntime(isa, shape, threads):
    model = _neck(shape)
    feeds = feeds_for(model, seed=3)
    expected = run_ort(model, feeds)[0]
    fused_model, _ = _fused(model)
    fused_proto = onnx.ModelProto.FromString(_serialize(fused_model))
    fast = run_graph(fused_proto, feeds, num_threads=threads)[0]
    reference = run_graph(fused_proto, feeds, use_reference_kernels=True)[0]
    unfused = run_graph(model, feeds, num_threads=threads)[0]
    assert_close(fast, expected)
    assert_close(reference, expected)
    np.testing.assert_array_equal(fast, unfused)  # the same row arithmetic, fused or not


def _serialize(ir_model) -> bytes:
    import onnx_ir as ir
    return ir.serde.serialize_model(ir_model).SerializeToString()


UNARY = [("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("LeakyRelu", {"alpha": 0.1}), ("Exp", {}), ("Neg", {}),
         ("HardSwish", {}), ("Softplus", {}), ("Abs", {}), ("Erf", {})]
BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min"]


def _random_chain(rng, shape) -> onnx.ModelProto:
    """A random chain over full, per-channel and scalar inputs; each op reads the previous result and an input or an
    earlier result, so the whole program is one chain."""
    rank = len(shape)
    inputs = {"x0": list(shape), "c": [1] * (rank - 3) + [shape[-3], 1, 1], "s": [1], "x1": list(shape)}
    names, nodes = ["x0"], []
    for index in range(int(rng.integers(3, 9))):
        previous = names[-1]
        if rng.random() < 0.4:
            op, attributes = UNARY[int(rng.integers(len(UNARY)))]
            nodes.append(helper.make_node(op, [previous], [f"t{index}"], name=f"n{index}", **attributes))
        else:
            op = BINARY[int(rng.integers(len(BINARY)))]
            other = str(rng.choice(list(inputs) + names[:-1]))
            operands = [previous, other] if rng.random() < 0.5 else [other, previous]
            nodes.append(helper.make_node(op, operands, [f"t{index}"], name=f"n{index}"))
        names.append(f"t{index}")
    nodes.append(helper.make_node("Identity", [names[-1]], ["y"], name="out"))
    return _model(nodes, inputs, {"y": list(shape)})


@pytest.mark.parametrize("seed", range(12))
def test_random_chains_match_onnxruntime(isa, seed):
    rng = np.random.default_rng(seed)
    shape = [(1, 3, 5, 7), (1, 4, 9, 31), (2, 2, 3, 300)][seed % 3]
    model = _random_chain(rng, shape)
    feeds = feeds_for(model, seed=seed)
    feeds["c"] = np.abs(feeds["c"]) + 0.5  # keep Div away from zero divisors
    feeds["s"] = np.abs(feeds["s"]) + 0.5
    feeds["x1"] = np.abs(feeds["x1"]) + 0.5
    expected = run_ort(model, feeds)[0]
    fused_model, report = _fused(model)
    assert report.counts["chains_fused"] == 1, op_types(fused_model)
    fused_proto = onnx.ModelProto.FromString(_serialize(fused_model))
    fast = run_graph(fused_proto, feeds, num_threads=2)[0]
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(np.isfinite(fast), finite)
    assert_close(np.where(finite, fast, 0), np.where(finite, expected, 0))
    reference = run_graph(fused_proto, feeds, use_reference_kernels=True)[0]
    assert_close(np.where(finite, reference, 0), np.where(finite, expected, 0))


def test_not_fused_when_an_intermediate_is_read_outside():
    shape = [1, 2, 3, 4]
    model = _model([
        helper.make_node("Mul", ["x", "x"], ["square"], name="square"),
        helper.make_node("Add", ["square", "x"], ["sum"], name="sum"),
        helper.make_node("Relu", ["sum"], ["y"], name="relu"),
    ], {"x": shape}, {"y": shape, "square": shape})
    ir_model, report = _fused(model)
    # square is a graph output: only sum and relu chain.
    assert op_types(ir_model) == ["Mul", "ElementwiseChain"]
    assert report.counts["nodes_fused"] == 2


def test_not_fused_across_a_shape_change_or_excluded_node():
    model = _model([
        helper.make_node("Add", ["a", "b"], ["sum"], name="sum"),  # [1, 4] + [3, 4] -> [3, 4]
        helper.make_node("Relu", ["sum"], ["r"], name="relu"),
        helper.make_node("ReduceSum", ["r"], ["y"], name="reduce", keepdims=0),
    ], {"a": [1, 4], "b": [3, 4]}, {"y": []})
    ir_model, report = _fused(model)
    assert op_types(ir_model) == ["ElementwiseChain", "ReduceSum"]
    excluded = to_ir(model)
    infer_shapes(excluded)
    assert not fuse_elementwise_chains(excluded, excluded=frozenset({"relu"})).modified
    single = _model([helper.make_node("Relu", ["a"], ["y"], name="relu")], {"a": [2, 3]}, {"y": [2, 3]})
    assert not _fused(single)[1].modified  # one op alone is not a chain


def test_chain_writes_over_an_input_that_dies_there():
    """A full-shape arena input the chain reads last takes the chain's output bytes (ortx.memory.inplace)."""
    from ortx.ep.compile_nodes import compile_graph
    shape = [1, 4, 10, 10]
    model = _model([
        helper.make_node("MaxPool", ["x"], ["pooled"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Mul", ["pooled", "c"], ["scaled"], name="scaled"),
        helper.make_node("Add", ["scaled", "pooled"], ["sum"], name="sum"),
        helper.make_node("Tanh", ["sum"], ["t"], name="tanh"),
        helper.make_node("MaxPool", ["t"], ["y"], name="pool2", kernel_shape=[1, 1]),
    ], {"x": [1, 4, 20, 20], "c": [1, 4, 1, 1]}, {"y": shape})
    fused_model, _ = _fused(model)
    compiled = compile_graph(fused_model.graph)
    assert [(listing.kernel, listing.input) for listing in compiled.in_place] == [("elementwise_chain_f32", "pooled")]
    feeds = feeds_for(model, seed=5)
    fused_proto = onnx.ModelProto.FromString(_serialize(fused_model))
    assert_close(run_graph(fused_proto, feeds, num_threads=2)[0], run_ort(model, feeds)[0])


def test_sessions_chain_only_when_switched_on(monkeypatch):
    """ortx.pipeline.ELEMENTWISE_CHAINS (on by default since the end-to-end gain was measured) decides whether
    sessions chain."""
    import onnxruntime

    import ortx
    import ortx.pipeline

    model = _neck().SerializeToString()
    feeds = feeds_for(_neck(), seed=2)

    def kernels() -> list[str]:
        session = ortx.InferenceSession(model, onnxruntime.SessionOptions(),
                                        providers=["OrtxEP", "CPUExecutionProvider"])
        result = session.run(None, feeds)[0]
        compiled = next(reversed(session._compiled.values()))
        return result, [listing.kernel for step in compiled.plan.steps
                        for listing in getattr(getattr(step, "program", None), "steps", ())]

    assert ortx.pipeline.ELEMENTWISE_CHAINS
    chained, chained_kernels = kernels()
    monkeypatch.setattr(ortx.pipeline, "ELEMENTWISE_CHAINS", False)
    plain, plain_kernels = kernels()
    assert "elementwise_chain_f32" not in plain_kernels
    assert chained_kernels.count("elementwise_chain_f32") == 1
    np.testing.assert_array_equal(chained, plain)
