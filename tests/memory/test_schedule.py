"""Execution order for a lower peak (ortx.memory.schedule, applied by ortx.ep.compile_nodes.compile_segment): exact
peaks and orders on hand cases, legality and never-worse on random graphs and real models, numerics vs ORT."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import ortx
from ortx import pipeline
from ortx.ep import compile_nodes
from ortx.ep.runtime import ClaimedStep
from ortx.memory.lifetimes import check_no_overlap
from ortx.memory.plan import plan_offsets
from ortx.memory.schedule import Step, buffer_lifetimes, memory_order, peak_bytes
from tests import _models
from tests.tolerances import assert_close

# Two branches off one input, each a big buffer reduced to a small one, joined at the end; written breadth first.
BRANCHES = [Step(("x",), ("p",)), Step(("x",), ("r",)), Step(("p",), ("q",)), Step(("r",), ("s",)),
            Step(("q", "s"), ("y",))]
BRANCH_SIZES = {"p": 4096, "r": 4096, "q": 16, "s": 16}  # x and y: external, no arena bytes


def _is_topological(steps, order) -> bool:
    writer = {value: index for index, step in enumerate(steps) for value in step.writes}
    position = {index: at for at, index in enumerate(order)}
    return sorted(order) == list(range(len(steps))) and all(
        position[writer[value]] < position[index]
        for index, step in enumerate(steps) for value in step.reads if value in writer)


def test_branches_run_depth_first_exact_peaks():
    given_order = list(range(len(BRANCHES)))
    assert peak_bytes(BRANCHES, given_order, BRANCH_SIZES) == 4096 + 4096 + 16  # p, r and q live at step 2
    order = memory_order(BRANCHES, BRANCH_SIZES)
    assert order == [0, 2, 1, 3, 4]  # finish the first branch (freeing p) before starting the second
    assert peak_bytes(BRANCHES, order, BRANCH_SIZES) == 16 + 4096 + 16  # q, r, s at step 3


def test_keeps_the_given_order_when_nothing_is_lower():
    chain = [Step(("x",), ("a",)), Step(("a",), ("b",)), Step(("b",), ("y",))]
    assert memory_order(chain, {"a": 100, "b": 100}) == [0, 1, 2]
    # Equal peaks either way: the given order stays (ties never reorder).
    twins = [Step(("x",), ("a",)), Step(("x",), ("b",)), Step(("a", "b"), ("y",))]
    assert memory_order(twins, {"a": 64, "b": 64}) == [0, 1, 2]


def test_alias_shares_its_source_buffer():
    # r = Reshape(p): reading r keeps p's bytes live, so the branch that frees p is the one that reads r.
    steps = [Step(("x",), ("p",)), Step(("p",), ("r",)), Step(("x",), ("t",)), Step(("t",), ("u",)),
             Step(("r",), ("q",)), Step(("q", "u"), ("y",))]
    sizes = {"p": 1000, "t": 1000, "u": 10, "q": 10}
    lifetimes = {t.name: (t.first, t.last) for t in buffer_lifetimes(steps, list(range(6)), sizes, {"r": "p"})}
    assert lifetimes == {"p": (0, 4), "t": (2, 3), "u": (3, 5), "q": (4, 5)}
    order = memory_order(steps, sizes, {"r": "p"})
    assert order == [0, 1, 4, 2, 3, 5]
    assert peak_bytes(steps, list(range(6)), sizes, {"r": "p"}) == 2010
    assert peak_bytes(steps, order, sizes, {"r": "p"}) == 1020


def test_cycle_is_refused():
    with pytest.raises(ValueError, match="cycle"):
        memory_order([Step(("b",), ("a",)), Step(("a",), ("b",))], {"a": 1, "b": 1})


@st.composite
def _graphs(draw):
    """Random DAGs: step i reads 1-3 values written by earlier steps (or the input x), writes one value."""
    count = draw(st.integers(1, 14))
    steps, sizes = [], {}
    for index in range(count):
        sources = ["x"] + [f"v{j}" for j in range(index)]
        reads = draw(st.lists(st.sampled_from(sources), min_size=1, max_size=3, unique=True))
        steps.append(Step(tuple(reads), (f"v{index}",)))
        sizes[f"v{index}"] = draw(st.integers(0, 5000))
    return steps, sizes


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(_graphs())
def test_random_graphs_legal_never_worse_and_plannable(graph):
    steps, sizes = graph
    order = memory_order(steps, sizes)
    assert _is_topological(steps, order)
    assert peak_bytes(steps, order, sizes) <= peak_bytes(steps, list(range(len(steps))), sizes)
    lifetimes = buffer_lifetimes(steps, order, sizes)
    plan = plan_offsets(lifetimes)
    check_no_overlap(lifetimes, plan.offsets)
    assert plan.lower_bound_bytes == peak_bytes(steps, order, sizes)


def _branches_model():
    """BRANCHES as ONNX: x[1,4,16,16] (4096 B) -> Relu / Sigmoid -> GlobalAveragePool / GlobalMaxPool -> Add."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])
    nodes = [helper.make_node("Relu", ["x"], ["p"], name="relu"),
             helper.make_node("Sigmoid", ["x"], ["r"], name="sigmoid"),
             helper.make_node("GlobalAveragePool", ["p"], ["q"], name="average"),
             helper.make_node("GlobalMaxPool", ["r"], ["s"], name="max"),
             helper.make_node("Add", ["q", "s"], ["y"], name="add")]
    model = helper.make_model(helper.make_graph(nodes, "branches", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _claimed_program(model):
    prepared = pipeline.prepare(model, passes=())
    ort = pipeline.OrtSettings(onnxruntime.SessionOptions(), ["CPUExecutionProvider"], [{}])
    plan = pipeline.compile_for_shapes(prepared, {"x": (1, 4, 16, 16)}, ort, num_threads=2).plan
    (step,) = [step for step in plan.steps if isinstance(step, ClaimedStep)]
    return step.program


def test_onnx_branches_arena_halves_and_numerics_match_ort(monkeypatch):
    model = _branches_model()
    program = _claimed_program(model)
    assert program.step_nodes == ("relu", "average", "sigmoid", "max", "add")
    assert program.arena_bytes == 4096 + 64 + 64  # r reuses p's bytes; q and s take one aligned line each
    with monkeypatch.context() as patch:
        patch.setattr(compile_nodes, "memory_order", lambda steps, sizes, buffer_of=None: list(range(len(steps))))
        given_program = _claimed_program(model)
    assert given_program.step_nodes == ("relu", "sigmoid", "average", "max", "add")
    assert given_program.arena_bytes == 4096 + 4096 + 64
    x = np.random.default_rng(0).uniform(-1, 1, (1, 4, 16, 16)).astype(np.float32)
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    for jit in ("off", "on"):  # the step interpreter and the JIT'd C both run the reordered steps
        session = ortx.InferenceSession(model.SerializeToString(), providers=["OrtxEP", "CPUExecutionProvider"],
                                        provider_options=[{"jit": jit}, {}])
        assert [row.provider for row in session.assignment] == ["OrtxEP"] * 5
        assert_close(session.run(None, {"x": x})[0], expected)


@pytest.mark.parametrize("builder", [_models.resnet18_style, _models.mobilenetv2_style, _models.transformer_block])
def test_real_models_order_is_a_topological_order_of_each_segment(builder):
    prepared = pipeline.prepare(builder())
    graph_input = prepared.model.graph.inputs[0]
    shapes = {graph_input.name: tuple(graph_input.shape)}
    model = pipeline.specialize(prepared.model, shapes)
    claimed = {name: decision.claimed for name, decision in pipeline.assign(model.graph).items()}
    for segment in pipeline.partition(model.graph, claimed):
        if not segment.claimed:
            continue
        ordered = compile_nodes.memory_ordered(segment.nodes, segment.inputs, segment.outputs)
        assert sorted(id(node) for node in ordered) == sorted(id(node) for node in segment.nodes)
        produced_before: set[str] = {value.name for value in segment.inputs}
        produced_here = {value.name for node in segment.nodes for value in node.outputs}
        for node in ordered:
            assert all(value.name in produced_before or value.name not in produced_here
                       for value in compile_nodes.node_inputs(node)), node.name
            produced_before.update(value.name for value in node.outputs)
