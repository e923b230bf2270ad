"""The simulator's cycle model (kernels/npu_sim.c, docs/npu.md) evaluated on a stream without executing it.

Timing does not depend on data, so the placement's estimate_seconds reads it from the commands; tests check that
it equals the cycles the simulator reports.
"""
from __future__ import annotations

import math

from ortx.npu.params import NpuParams
from ortx.npu.stream import Command

DMA_OPS = ("DMA_IN", "DMA_OUT", "DMA_IM2COL")


def command_cycles(item: Command, params: NpuParams) -> int:
    fields = item.fields
    if item.op in ("DMA_IN", "DMA_OUT"):
        return params.dma_setup_cycles + math.ceil(fields["rows"] * fields["row_bytes"] / params.dma_bytes_per_cycle)
    if item.op == "DMA_IM2COL":
        return params.dma_setup_cycles + math.ceil(fields["k_count"] * fields["p_count"] /
                                                   params.dma_bytes_per_cycle)
    if item.op == "MAC_TILE":
        passes = math.ceil(fields["m"] / params.cols) * math.ceil(fields["k"] / params.rows)
        return passes * (fields["p"] + 2 * params.rows + params.cols - 2)
    if item.op == "REQUANT":
        return math.ceil(fields["m"] * fields["p"] / params.cols)
    if item.op == "VECTOR":
        return math.ceil(fields["count"] / params.cols)
    if item.op in ("POOL", "POOL_AVG"):
        return math.ceil(fields["channels"] * fields["out_height"] * fields["out_width"] * fields["kernel_h"] *
                         fields["kernel_w"] / params.cols)
    return 0


def stream_cycles(commands, params: NpuParams) -> int:
    """Sum over barrier-delimited phases of max(DMA engine cycles, compute engine cycles)."""
    total = dma = compute = 0
    for index, item in enumerate(commands):
        cycles = command_cycles(item, params)
        if item.op in DMA_OPS:
            dma += cycles
        else:
            compute += cycles
        if item.op == "BARRIER" or index == len(commands) - 1:
            total += max(dma, compute)
            dma = compute = 0
    return total
