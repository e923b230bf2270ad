"""ortx.ep.placement on hand-made graphs: the CPU-only shortcut, transfers that outweigh a faster device, forced
placements through fused nodes."""
import dataclasses

import onnx
import onnx_ir as ir
import pytest

from ortx.ep.capability import assign
from ortx.ep.devices import cpu
from ortx.ep.partition import ORT
from ortx.ep.placement import parse_placement, place
from tests.ep.devices import numpy_device_a
from tests.ep.devices.test_concurrency import _two_branch_model


def _graph(height=7, width=9):
    model = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(_two_branch_model(height=height,
                                                                                             width=width)))
    return model.graph


def test_cpu_alone_is_the_capability_decisions():
    graph = _graph()
    decisions = assign(graph)
    placed = place(graph, decisions, [cpu.CPU])
    assert placed.labels == {name: "cpu" if d.claimed else ORT for name, d in decisions.items()}
    assert placed.reasons == {} and placed.capability["conv"] == {"cpu": ""}


def test_a_fast_device_behind_a_slow_link_is_not_worth_the_transfers():
    graph = _graph(70, 90)  # 126 KB tensors: ~18 us per elementwise node on the CPU, 0.1 us on numpya
    fast_link = numpy_device_a.DEVICE  # 10 GB/s: 13 us per tensor (+ 20 us hand-off)
    slow_link = dataclasses.replace(fast_link, bandwidth_bytes_per_second=1e9)  # 126 us per tensor
    placed = place(graph, assign(graph), [fast_link, cpu.CPU])
    assert [placed.labels[name] for name in ("a1", "a2", "b1", "b2", "conv")] == ["numpya"] * 4 + ["cpu"]
    assert all(placed.reasons[name].startswith("numpya: ") for name in ("a1", "a2", "b1", "b2"))
    placed = place(graph, assign(graph), [slow_link, cpu.CPU])
    assert set(placed.labels.values()) == {"cpu"}


def test_tiny_tensors_stay_on_the_cpu():
    graph = _graph()  # 1.3 KB tensors: the 20 us hand-off outweighs 2 us of CPU time per node
    placed = place(graph, assign(graph), [numpy_device_a.DEVICE, cpu.CPU])
    assert set(placed.labels.values()) == {"cpu"}


def test_nodes_no_device_runs_go_to_ort():
    graph = _graph()
    placed = place(graph, assign(graph), [numpy_device_a.DEVICE])  # no CPU: Conv has nowhere to go
    assert placed.labels["conv"] == ORT and "numpya: Conv: not a numpy test op" in placed.reasons["conv"]


def test_forced_placement_and_exclusion():
    graph = _graph()
    placed = place(graph, assign(graph), [numpy_device_a.DEVICE, cpu.CPU], forced={"a1": "cpu"},
                   excluded={"b1": {"numpya"}})
    assert placed.labels["a1"] == "cpu" and placed.reasons["a1"].startswith("forced")
    assert placed.labels["b1"] == "cpu" and placed.capability["b1"]["numpya"] == "compile error on this device"


def test_parse_placement():
    assert parse_placement("a:npu, b:DSP") == {"a": "npu", "b": "dsp"}
    assert parse_placement({"a": "CPU"}) == {"a": "cpu"}
    with pytest.raises(ValueError, match="'a' is not NODE:DEVICE"):
        parse_placement("a")


def test_preferred_placement_is_followed_where_the_device_can_run_the_node():
    graph = _graph()  # tiny tensors: left alone, the cost model keeps everything on the CPU
    placed = place(graph, assign(graph), [numpy_device_a.DEVICE, cpu.CPU],
                   preferred={"a1": "numpya", "a2": "numpya", "conv": "numpya", "gone": "numpya"})
    assert placed.labels["a1"] == placed.labels["a2"] == "numpya"
    assert placed.reasons["a1"] == "on numpya as the compiled artifact placed it"
    assert placed.labels["conv"] == "cpu"  # numpya cannot run Conv: placed as usual


def test_vertical_cut_where_the_fewest_bytes_cross():
    # x [1,64,64,64] (1 MiB) -> Relu -> Sigmoid -> GlobalAveragePool (256 B) -> Conv 1x1 -> y. numpya runs the first
    # three far faster than the CPU (bandwidth-bound, ~150 us each) once x is across; it cannot run Conv. The cut
    # goes after the pool, where 256 bytes cross, not after Relu or Sigmoid (1 MiB each).
    from onnx import TensorProto, helper

    weight = helper.make_tensor("w", TensorProto.FLOAT, [8, 64, 1, 1], [0.01] * 512)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Sigmoid", ["r"], ["s"], name="sigmoid"),
             helper.make_node("GlobalAveragePool", ["s"], ["p"], name="pool"),
             helper.make_node("Conv", ["p", "w"], ["y"], name="conv")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    graph = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(model)).graph
    placed = place(graph, assign(graph), [numpy_device_a.DEVICE, cpu.CPU])
    assert [placed.labels[name] for name in ("relu", "sigmoid", "pool", "conv")] == ["numpya"] * 3 + ["cpu"]
