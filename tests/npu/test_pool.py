"""NPU POOL_AVG (int8 AveragePool / GlobalAveragePool, fuse_qdq's QAveragePool) against the CPU int8 kernel
(kernels/qpool.h): byte-identical on seeded random inputs, tails of channel chunks on a small SRAM, the cycle model,
disassembly, and reasons for what it declines."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortx import _kernels
from ortx.npu.compile import check_node, compile_nodes
from ortx.npu.cost import stream_cycles
from ortx.npu.params import NpuParams
from ortx.npu.stream import Stream, command, decode, disassemble, encode
from ortx.npu.verify import check_model, prepared_graph
from ortx.quantization.integer import INT_RANGES, average_multipliers
from tests.ep.test_qpool import qdq_pool_model

SMALL = NpuParams(rows=8, cols=8, sram_bytes=16 * 1024, dma_bytes_per_cycle=8, dma_setup_cycles=16)
ELEMENT = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}


def two_pools(shape, x_dtype, y_dtype, **attributes):
    """xq -> DQ -> AveragePool(attributes) -> Q (y_dtype) -> DQ -> GlobalAveragePool -> Q (x_dtype)."""
    zeros = {"uint8": 140, "int8": -9}
    initializers = [numpy_helper.from_array(np.array(0.037, np.float32), "s0"),
                    numpy_helper.from_array(np.array(zeros[x_dtype], x_dtype), "z0"),
                    numpy_helper.from_array(np.array(0.0211, np.float32), "s1"),
                    numpy_helper.from_array(np.array(zeros[y_dtype] - 20, y_dtype), "z1"),
                    numpy_helper.from_array(np.array(0.0043, np.float32), "s2"),
                    numpy_helper.from_array(np.array(zeros[x_dtype] + 5, x_dtype), "z2")]
    nodes = [helper.make_node("DequantizeLinear", ["xq", "s0", "z0"], ["a"], name="dq0"),
             helper.make_node("AveragePool", ["a"], ["b"], name="average", **attributes),
             helper.make_node("QuantizeLinear", ["b", "s1", "z1"], ["bq"], name="q1"),
             helper.make_node("DequantizeLinear", ["bq", "s1", "z1"], ["c"], name="dq1"),
             helper.make_node("GlobalAveragePool", ["c"], ["d"], name="global"),
             helper.make_node("QuantizeLinear", ["d", "s2", "z2"], ["y"], name="q2")]
    graph = helper.make_graph(nodes, "two_pools", [helper.make_tensor_value_info("xq", ELEMENT[x_dtype], shape)],
                              [helper.make_tensor_value_info("y", ELEMENT[x_dtype], None)], initializers)
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]))


def _feeds(shape, dtype, seed=0):
    low, high = INT_RANGES[dtype]
    return {"xq": np.random.default_rng(seed).integers(low, high + 1, shape).astype(dtype)}


@pytest.mark.parametrize("params", [NpuParams(), SMALL], ids=["default", "small"])
@pytest.mark.parametrize("x_dtype,y_dtype,attributes", [
    ("uint8", "uint8", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ("int8", "int8", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("uint8", "int8", dict(kernel_shape=[2, 3], strides=[2, 2], pads=[0, 1, 1, 2], count_include_pad=1)),
])
def test_average_and_global_pools_bit_exact(params, x_dtype, y_dtype, attributes):
    shape = (2, 5, 23, 37)  # 10 planes: several chunks and both slots on the small SRAM
    model = two_pools(shape, x_dtype, y_dtype, **attributes)
    checks = check_model(model, _feeds(shape, x_dtype), params)
    assert len(checks) == 1 and checks[0].bit_exact, [(c.nodes, c.max_abs_difference) for c in checks]
    layers = [layer["op_type"] for layer in checks[0].layers]
    assert layers == ["QAveragePool", "QAveragePool"], layers
    commands = decode(checks[0].compiled.stream).commands
    assert stream_cycles(commands, params) == checks[0].totals["cycles"]
    pools = [item for item in commands if item.op == "POOL_AVG"]
    if params is SMALL:
        assert len(pools) >= 3  # chunks of channel planes
    for layer in checks[0].compiled.layers:  # the table is loaded into each slot once per layer
        own = commands[layer.first_command:layer.end_command]
        table_loads = [item for item in own if item.op == "DMA_IN" and item.fields["region"] == 0]
        assert len(table_loads) == min(2, sum(item.op == "POOL_AVG" for item in own))


def test_cycles_follow_the_max_pool_formula_and_disassemble():
    shape = (1, 3, 10, 12)
    model = qdq_pool_model(shape, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    graph = prepared_graph(model, {"xq": shape}).graph
    (pool,) = [node for node in graph if node.op_type == "QAveragePool"]
    compiled = compile_nodes([pool], [pool.inputs[0]], [pool.outputs[0]])
    stream = decode(compiled.stream)
    (command,) = [item for item in stream.commands if item.op == "POOL_AVG"]
    assert stream_cycles([command], compiled.params) == -(-3 * 10 * 12 * 9 // 32)  # outputs x taps / 32 lanes
    text = disassemble(stream)
    assert "POOL_AVG" in text and "table=@" in text and "count_include_pad=0" in text


@pytest.mark.parametrize("attributes,reason", [
    (dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), "ceil_mode"),
    (dict(kernel_shape=[2, 2], dilations=[2, 2]), "dilations"),
])
def test_unsupported_attributes_are_declined_with_a_reason(attributes, reason):
    shape = (1, 2, 11, 11)
    graph = prepared_graph(qdq_pool_model(shape, **attributes), {"xq": shape}).graph
    (pool,) = [node for node in graph if node.op_type == "QAveragePool"]  # the CPU runs it int8
    message = check_node(pool)
    assert message is not None and message.startswith("QAveragePool:") and reason in message


def _pool_avg_stream(table: np.ndarray, **overrides):
    """DMA the table (constants) and a 1x4x4 uint8 plane (work) in, POOL_AVG 2x2 stride 2, DMA 4 bytes out."""
    fields = dict(input=64, input_kind=0, channels=1, height=4, width=4, kernel_h=2, kernel_w=2, stride_h=2,
                  stride_w=2, pad_top=0, pad_left=0, pad_bottom=0, pad_right=0, count_include_pad=0, out_height=2,
                  out_width=2, input_zero=10, output=128, output_kind=0, output_zero=3, qmin=0, qmax=255, table=0,
                  count_base=1, table_length=len(table))
    fields.update(overrides)
    commands = (command("DMA_IN", region=0, dram=0, sram=0, rows=1, row_bytes=table.nbytes,
                        dram_stride=table.nbytes, sram_stride=table.nbytes),
                command("DMA_IN", region=1, dram=0, sram=64, rows=1, row_bytes=16, dram_stride=16, sram_stride=16),
                command("BARRIER"), command("POOL_AVG", **fields), command("BARRIER"),
                command("DMA_OUT", region=1, dram=16, sram=128, rows=1, row_bytes=4, dram_stride=4, sram_stride=4))
    return encode(Stream(NpuParams(), table.nbytes, 32, commands))


def test_simulator_pool_avg_by_hand_and_bad_tables():
    table = average_multipliers(1.0, 1.0, range(1, 5))  # sx = sy: y = round_half_even(mean of (x - 10)) + 3
    plane = np.array([[10, 11, 20, 20], [10, 11, 21, 20], [0, 0, 255, 255], [1, 0, 255, 254]], np.uint8)
    work = np.zeros(32, np.uint8)
    work[:16] = plane.reshape(-1)
    constants = np.frombuffer(table.tobytes(), np.uint8).copy()
    _kernels.npu_simulate(_pool_avg_stream(table), constants, work)
    # means of (x - 10): 0.5 -> 0 (half to even), 10.25 -> 10, -9.75 -> -10 (+ 3 clamps at 0), 244.75 -> 245
    np.testing.assert_array_equal(work[16:20], [3, 13, 0, 248])
    bad = table.copy()
    bad[3, 1] = 0
    with pytest.raises(ValueError, match="POOL_AVG.*table entry 3"):
        _kernels.npu_simulate(_pool_avg_stream(bad), np.frombuffer(bad.tobytes(), np.uint8).copy(), work)
    with pytest.raises(ValueError, match="divisor 4 outside the table"):
        _kernels.npu_simulate(_pool_avg_stream(table[:2]), constants[:16].copy(), work)
