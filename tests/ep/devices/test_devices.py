"""The device table: select(), the CPU device's declaration and its backend (check / estimate / compile)."""
import dataclasses

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from ortx.ep.devices import DEVICES, Device, OpSupport, select
from ortx.ep.devices import cpu
from ortx.ep.lowering import LOWERINGS
from tests.tolerances import TOLERANCES


def _conv_add_model(height=7, width=9):
    # Conv 3->5 (3x3, pads 1) on 7x9 (not a multiple of any tile), + a bias tensor, then an LSTM the CPU declines.
    rng = np.random.default_rng(3)
    weight = helper.make_tensor("w", TensorProto.FLOAT, [5, 3, 3, 3], rng.standard_normal(135).astype(np.float32))
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "b"], ["y"], name="add"),
    ]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, height, width]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 5, height, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, height, width])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(model))


def test_select_keeps_order_and_rejects_unknown_names():
    assert select("cpu") == [cpu.CPU]
    assert select(" CPU ") == [cpu.CPU]
    with pytest.raises(ValueError, match=r"unknown device 'tpu'.*valid devices: .*cpu"):
        select("tpu,cpu")
    with pytest.raises(ValueError, match="listed twice"):
        select("cpu,cpu")
    with pytest.raises(ValueError, match="empty"):
        select(" , ")


def test_select_from_a_given_table():
    other = dataclasses.replace(cpu.CPU, name="other", kind="dsp")
    assert [device.name for device in select("other,cpu", (cpu.CPU, other))] == ["other", "cpu"]


def test_device_table_is_consistent():
    names = [device.name for device in DEVICES]
    assert len(names) == len(set(names)) and "cpu" in names
    for device in DEVICES:
        assert device.memory_bytes > 0 and device.bandwidth_bytes_per_second > 0
        assert device.peak_ops_per_second and all(peak > 0 for peak in device.peak_ops_per_second.values())
        module = device.backend_module()
        assert callable(module.check) and callable(module.estimate_seconds) and callable(module.compile)


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="kind 'gpu'"):
        dataclasses.replace(cpu.CPU, kind="gpu")


def test_cpu_ops_are_the_lowering_table():
    assert {(op.domain, op.op_type) for op in cpu.CPU.ops} == set(LOWERINGS)
    assert all(isinstance(op, OpSupport) and op.dtypes for op in cpu.CPU.ops)
    record = cpu.CPU.to_dict()
    assert record["name"] == "cpu" and len(record["ops"]) == len(LOWERINGS)


def test_cpu_check_names_the_op():
    model = _conv_add_model()
    conv, add = list(model.graph)
    assert cpu.check(conv) is None and cpu.check(add) is None
    hardmax = ir.Node("", "Hardmax", [conv.outputs[0]], name="hardmax")
    hardmax.outputs[0].shape = conv.outputs[0].shape
    hardmax.outputs[0].type = conv.outputs[0].type
    assert cpu.check(hardmax) == "Hardmax: op not supported"


def test_cpu_estimate_grows_with_work():
    small = [cpu.estimate_seconds(node) for node in _conv_add_model().graph]
    large = [cpu.estimate_seconds(node) for node in _conv_add_model(70, 90).graph]
    assert all(cpu.STEP_OVERHEAD_SECONDS < a < b for a, b in zip(small, large))


def test_cpu_backend_compile_matches_numpy():
    model = _conv_add_model()
    graph = model.graph
    nodes = list(graph)
    program = cpu.compile(nodes, list(graph.inputs), list(graph.outputs), num_threads=2)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 7, 9)).astype(np.float32)
    b = rng.standard_normal((1, 5, 7, 9)).astype(np.float32)
    y = np.empty((1, 5, 7, 9), np.float32)
    program.run([x, b], [y])
    weight = graph.initializers["w"].const_value.numpy()
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # 1,3,7,9,3,3
    expected = np.einsum("nchwij,ocij->nohw", windows, weight) + b
    np.testing.assert_allclose(y, expected, **TOLERANCES[np.dtype(np.float32)])
    assert program.stats()["steps"] >= 1
