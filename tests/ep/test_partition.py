"""Partition: segments are consecutive in a topological order, so the segment graph is acyclic."""
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper

from ortx.ep.partition import partition


def _chain_model():
    # x -> A(claimed) -> B(declined) -> C(claimed) -> y, plus a side branch D(claimed) from x joining at E(claimed)
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="A"),
        helper.make_node("LSTMish", ["a"], ["b"], name="B", domain="test"),
        helper.make_node("Relu", ["b"], ["c"], name="C"),
        helper.make_node("Sigmoid", ["x"], ["d"], name="D"),
        helper.make_node("Add", ["c", "d"], ["y"], name="E"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("test", 1)])
    return ir.serde.deserialize_model(model)


def test_claimed_nodes_grouped_and_acyclic():
    model = _chain_model()
    claimed = {"A": True, "B": False, "C": True, "D": True, "E": True}
    segments = partition(model.graph, claimed)
    kinds = [(segment.claimed, [node.name for node in segment.nodes]) for segment in segments]
    # D is ready from the start and joins A's segment; C and E must wait for B.
    assert kinds == [(True, ["A", "D"]), (False, ["B"]), (True, ["C", "E"])]
    assert [v.name for v in segments[0].inputs] == ["x"]
    assert sorted(v.name for v in segments[0].outputs) == ["a", "d"]
    assert [v.name for v in segments[1].inputs] == ["a"]
    assert [v.name for v in segments[2].outputs] == ["y"]
    # Every segment input is produced by an earlier segment or is a graph input.
    produced = {"x"}
    for segment in segments:
        assert all(value.name in produced for value in segment.inputs)
        produced |= {value.name for node in segment.nodes for value in node.outputs}


def test_alias_only_claimed_segment_given_back():
    nodes = [
        helper.make_node("LSTMish", ["x"], ["a"], name="A", domain="test"),
        helper.make_node("Reshape", ["a", "shape"], ["b"], name="R"),
        helper.make_node("LSTMish", ["b"], ["y"], name="B", domain="test"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
                              initializer=[onnx.numpy_helper.from_array(__import__("numpy").array([2, 2]), "shape")])
    model = ir.serde.deserialize_model(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("test", 1)]))
    segments = partition(model.graph, {"A": False, "R": True, "B": False})
    assert len(segments) == 1 and not segments[0].claimed
