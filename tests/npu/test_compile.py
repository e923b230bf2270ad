"""NPU compiler + simulator against the CPU int8 kernels (ortx.npu.verify): byte-identical outputs on seeded random
inputs, tile tails, the cycle count docs/npu.md works by hand, and clear errors."""
from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto

from ortx.ep.devices import npu as npu_device
from ortx.npu.compile import NpuUnsupported, check_node, compile_nodes
from ortx.memory.lifetimes import check_no_overlap
from ortx.npu.cost import stream_cycles
from ortx.npu.dram import plan_work
from ortx.npu.params import NpuParams
from ortx.npu.stream import decode
from ortx.npu.verify import check_model, prepared_graph
from ortx.quantization import quantize
from tests import _models
from tests.ep.test_qdq import _qdq_conv_model

# A small NPU forces m, k and p tiling with tails (13 -> 21 channels, K = 117, 17 x 23 pixels).
SMALL = NpuParams(rows=8, cols=8, sram_bytes=16 * 1024, dma_bytes_per_cycle=8, dma_setup_cycles=16)


def _feeds(model, seed=1):
    value = model.graph.input[0]
    shape = [dim.dim_value for dim in value.type.tensor_type.shape.dim]
    return {value.name: np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)}


def _assert_exact(checks, expected_segments=None):
    assert checks, "no NPU segment"
    for check in checks:
        assert check.bit_exact, f"segment {check.nodes[:3]}: max |npu - cpu| = {check.max_abs_difference}"
    if expected_segments is not None:
        assert len(checks) == expected_segments


@pytest.mark.parametrize("params", [NpuParams(), SMALL], ids=["default", "small"])
@pytest.mark.parametrize("x_dtype,zx,activation,stride,quantized", [
    (TensorProto.UINT8, 128, "Relu", 1, True), (TensorProto.INT8, -7, "", 2, True),
    (TensorProto.UINT8, 3, "Relu", 1, False),
])
def test_qconv_bit_exact(params, x_dtype, zx, activation, stride, quantized):
    model = _qdq_conv_model(x_dtype=x_dtype, zx=zx, activation=activation, stride=stride, quantized_output=quantized)
    _assert_exact(check_model(model, _feeds(model), params), expected_segments=1)


@pytest.fixture(scope="module")
def int8_models():
    models = {}
    for name, builder in (("resnet", _models.resnet18_style), ("mobilenet", _models.mobilenetv2_style)):
        model = builder(size=32)
        input_name = model.graph.input[0].name
        calibration = np.random.default_rng(0).uniform(-1, 1, (2, 3, 32, 32)).astype(np.float32)
        models[name] = quantize(model, {input_name: calibration})[0]
    return models


@pytest.fixture(scope="module")
def resnet_checks(int8_models):
    return check_model(int8_models["resnet"], _feeds(int8_models["resnet"]))


@pytest.mark.parametrize("name", ["resnet", "mobilenet"])
def test_int8_networks_bit_exact(int8_models, resnet_checks, name):
    """ResNet-18-style (residual QConv with float outputs, MaxPool, GlobalAveragePool, Gemm) and MobileNetV2-style
    (depthwise)."""
    checks = resnet_checks if name == "resnet" else check_model(int8_models[name], _feeds(int8_models[name]))
    _assert_exact(checks)
    assert sum(len(check.nodes) for check in checks) >= 20
    # the GlobalAveragePool (DQ -> pool -> Q since the quantizer quantizes its input) runs on the NPU
    assert any(layer["op_type"] == "QAveragePool" for check in checks for layer in check.layers)
    assert sum(check.totals["macs"] for check in checks) > 0


def test_resnet_bit_exact_on_a_small_npu(int8_models):
    _assert_exact(check_model(int8_models["resnet"], _feeds(int8_models["resnet"]), SMALL))


def _hand_layer():
    """docs/npu.md's worked layer: uint8 [1, 4, 48, 48] -> 3x3 conv, pads 1 -> 8 channels, requantized."""
    return _qdq_conv_model(channels=(4, 8), size=(48, 48), activation="", stride=1)


def test_cycles_match_the_hand_calculation_in_the_docs():
    model = _hand_layer()
    (check,) = check_model(model, _feeds(model))
    (layer,) = [layer for layer in check.layers if layer["op_type"] == "QConv"]
    assert layer["cycles"] == 8259  # docs/npu.md, "One layer by hand"
    assert layer["macs"] == 8 * 36 * 48 * 48
    assert layer["dma_bytes"] == 288 * 2 + 32 * 4 + 36 * 2304 + 8 * 2304


def test_static_cost_model_equals_the_simulated_cycles(resnet_checks):
    for check in resnet_checks:
        compiled = check.compiled
        assert stream_cycles(decode(compiled.stream).commands, compiled.params) == check.totals["cycles"]


def test_unsupported_nodes_are_declined_with_reasons():
    graph = prepared_graph(_models.tiny_conv_relu(), {"x": (1, 3, 8, 8)}).graph
    conv = next(node for node in graph if node.op_type in ("Conv", "FusedConv"))
    reason = npu_device.check(conv)
    assert reason is not None and conv.op_type in reason and "not an NPU op" in reason
    with pytest.raises(NpuUnsupported, match=f"node {conv.name!r} cannot run on the NPU"):
        compile_nodes([conv], [graph.inputs[0]], [conv.outputs[0]])
    x = ir.Value(name="x", shape=ir.Shape([2, 3]), type=ir.TensorType(ir.DataType.FLOAT))
    y = ir.Value(name="y", shape=ir.Shape([1, 3]), type=ir.TensorType(ir.DataType.FLOAT))
    out = ir.Value(name="out", shape=ir.Shape([2, 3]), type=ir.TensorType(ir.DataType.FLOAT))
    add = ir.Node("", "Add", [x, y], outputs=[out], name="broadcast_add")
    assert "broadcasting 'y'" in check_node(add)


def test_device_backend_compiles_and_estimates():
    model = _hand_layer()
    graph = prepared_graph(model, {"x": (1, 4, 48, 48)}).graph
    qconv = next(node for node in graph if node.op_type == "QConv")
    assert npu_device.check(qconv) is None
    assert npu_device.estimate_seconds(qconv) == pytest.approx(8259 / 1e9)
    program = npu_device.compile([qconv], [qconv.inputs[0]], [qconv.outputs[0]], num_threads=1)
    x = np.random.default_rng(0).integers(0, 256, (1, 4, 48, 48)).astype(np.uint8)
    y = np.empty((1, 8, 48, 48), np.uint8)
    program.run([x], [y])
    assert program.stats()["cycles"] == 8259 and 0 < program.stats()["mac_utilisation"] < 1


def test_depthwise_with_a_short_last_chunk_bit_exact():
    """40 depthwise channels on a 32-column array: chunks of 32 and 8 share one SRAM layout (they share phases)."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    initializers = [numpy_helper.from_array(rng.normal(0, 0.3, (40, 1, 3, 3)).astype(np.float32), "dw"),
                    numpy_helper.from_array(rng.normal(0, 0.2, (24, 40, 1, 1)).astype(np.float32), "pw"),
                    numpy_helper.from_array(rng.normal(0, 0.1, 24).astype(np.float32), "pb")]
    nodes = [helper.make_node("Conv", ["x", "dw"], ["d"], name="depthwise", group=40, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["d"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "pw", "pb"], ["y"], name="pointwise")]
    graph = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 40, 19, 21])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, 19, 21])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    calibration = rng.uniform(-1, 1, (2, 40, 19, 21)).astype(np.float32)
    quantized = quantize(model, {"x": calibration})[0]
    checks = check_model(quantized, _feeds(quantized))
    _assert_exact(checks)
    assert any(layer["op_type"] == "QConv" for check in checks for layer in check.layers)


def test_work_region_reuses_freed_tensors(int8_models, resnet_checks):
    """The memory planner's work layout: no two live tensors overlap, less than one range per tensor."""
    graph = prepared_graph(int8_models["resnet"], {"input": (1, 3, 32, 32)}).graph
    nodes = {node.name: node for node in graph}
    check = max(resnet_checks, key=lambda item: len(item.nodes))
    segment = [nodes[name] for name in check.nodes]
    values = {value.name: value for node in segment for value in list(node.inputs) + list(node.outputs)
              if value is not None}
    inputs = [values[place.name] for place in check.compiled.inputs]
    outputs = [values[place.name] for place in check.compiled.outputs]
    offsets, plan = plan_work(segment, inputs, outputs)
    check_no_overlap(plan.lifetimes, plan.offsets)
    assert plan.arena_bytes < plan.naive_bytes and check.compiled.work_bytes == plan.arena_bytes
    assert check.bit_exact


def test_constant_operands_are_declined():
    x = ir.Value(name="x", shape=ir.Shape([2, 3]), type=ir.TensorType(ir.DataType.FLOAT))
    constant = ir.Value(name="c", shape=ir.Shape([2, 3]), type=ir.TensorType(ir.DataType.FLOAT),
                        const_value=ir.tensor(np.ones((2, 3), np.float32), name="c"))
    out = ir.Value(name="out", shape=ir.Shape([2, 3]), type=ir.TensorType(ir.DataType.FLOAT))
    add = ir.Node("", "Add", [x, constant], outputs=[out], name="add_constant")
    assert check_node(add) == "Add: input 'c' is a constant (the NPU reads computed tensors only)"
