"""The NPU's parameters: a weight-stationary systolic array of int8 MACs, one SRAM, one DMA engine, a vector unit.

The default (32 x 32 MACs, 512 KiB SRAM, 32 bytes/cycle DMA, 1 GHz) is a small edge NPU: 1024 MACs/cycle, about 2
int8 TOPS, 32 GB/s to DRAM. The stream header carries these parameters; the simulator's cycle model reads them.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class NpuParams:
    rows: int = 32                 # MAC array rows: the reduction (K) dimension of one pass
    cols: int = 32                 # MAC array columns: output channels of one pass; also the vector unit's lanes
    sram_bytes: int = 512 * 1024   # one on-chip SRAM for weights, activations, int32 accumulators and outputs
    dma_bytes_per_cycle: int = 32  # DRAM <-> SRAM bandwidth
    dma_setup_cycles: int = 64     # fixed cost of every DMA command (descriptor fetch, DRAM latency)
    clock_hz: int = 1_000_000_000

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"NpuParams.{field.name} must be a positive int, got {value!r}")
        if self.rows > 65535 or self.cols > 65535 or self.sram_bytes >= 1 << 32:
            raise ValueError("NpuParams: rows/cols must fit 16 bits and sram_bytes 32 bits (the stream header)")

    @property
    def peak_macs_per_second(self) -> float:
        return float(self.rows * self.cols * self.clock_hz)

    @property
    def dram_bytes_per_second(self) -> float:
        return float(self.dma_bytes_per_cycle * self.clock_hz)


DEFAULT_PARAMS = NpuParams()
