"""The simulated NPU as a device (ortx/npu): int8 QConv and QAveragePool, Quantize/DequantizeLinear, float
Add/Relu/Clip, MaxPool and Flatten, compiled to a command stream and run by the C simulator (kernels/npu_sim.c), bit-exact with the CPU int8
kernels. estimate_seconds is the simulator's cycle model at the NPU clock (data-independent, read off the stream).
"""
from __future__ import annotations

import onnx_ir as ir

from ortx.ep.devices.device import Device, OpSupport
from ortx.npu.params import DEFAULT_PARAMS

_QUANTIZED = ("uint8", "int8")
NPU = Device(
    name="npu",
    kind="npu",
    description=f"simulated systolic-array NPU: {DEFAULT_PARAMS.rows}x{DEFAULT_PARAMS.cols} int8 MACs at "
                f"{DEFAULT_PARAMS.clock_hz / 1e9:g} GHz, {DEFAULT_PARAMS.sram_bytes // 1024} KiB SRAM, "
                f"{DEFAULT_PARAMS.dma_bytes_per_cycle} B/cycle DMA; command streams run by kernels/npu_sim.c",
    ops=(
        OpSupport("ai.ortx", "QConv", _QUANTIZED, "fuse_qdq's int8 Conv (group 1 or depthwise) / Gemm / MatMul; "
                  "static shapes; float output: Relu/Clip and a residual only"),
        OpSupport("ai.ortx", "QAveragePool", _QUANTIZED, "fuse_qdq's int8 AveragePool / GlobalAveragePool; 2-D, no "
                  "dilations/ceil_mode/auto_pad; a channel plane fits a quarter of the SRAM"),
        OpSupport("", "QuantizeLinear", ("float32",) + _QUANTIZED, "per-tensor constant scale and zero point"),
        OpSupport("", "DequantizeLinear", _QUANTIZED + ("float32",), "per-tensor constant scale and zero point"),
        OpSupport("", "Add", ("float32",), "same shapes, no broadcasting"),
        OpSupport("", "Relu", ("float32",), ""),
        OpSupport("", "Clip", ("float32",), "constant bounds"),
        OpSupport("", "MaxPool", ("float32",) + _QUANTIZED, "2-D, no dilations/ceil_mode/auto_pad; a channel "
                  "plane fits a quarter of the SRAM"),
        OpSupport("", "Flatten", ("float32",) + _QUANTIZED, "static shapes (no data movement)"),
    ),
    memory_bytes=DEFAULT_PARAMS.sram_bytes,
    bandwidth_bytes_per_second=DEFAULT_PARAMS.dram_bytes_per_second,
    peak_ops_per_second={"int8": 2 * DEFAULT_PARAMS.peak_macs_per_second},
    compiler="ortx.npu.compile.compile_nodes (command stream, ortx npu dump)",
    backend="ortx.ep.devices.npu",
)


# Backend --------------------------------------------------------------------------------------------------------
def check(node: ir.Node) -> str | None:
    from ortx.npu.compile import check_node

    return check_node(node, DEFAULT_PARAMS)


def estimate_seconds(node: ir.Node) -> float:
    """Cycles of `node` compiled alone (its inputs and outputs in DRAM) at the NPU clock."""
    from ortx.npu.compile import lower
    from ortx.npu.cost import stream_cycles

    inputs = [value for value in node.inputs if value is not None and value.const_value is None]
    _, commands, _ = lower([node], inputs, list(node.outputs[:1]), DEFAULT_PARAMS)
    return stream_cycles(commands, DEFAULT_PARAMS) / DEFAULT_PARAMS.clock_hz


def compile(nodes: list[ir.Node], inputs: list[ir.Value], outputs: list[ir.Value], *,  # noqa: A001 (the interface)
            num_threads: int):
    """The simulator is single-threaded per run (num_threads is not used by it); runs may be concurrent."""
    from ortx.npu.compile import compile_nodes
    from ortx.npu.program import NpuProgram

    return NpuProgram(compile_nodes(nodes, inputs, outputs, DEFAULT_PARAMS))
