"""A compiled NPU segment behind the DeviceProgram interface: run() feeds the simulator, stats() reports it.

Thread safe: every run gets its own work region (DRAM) and SRAM; the constants region is shared read-only. stats()
reports the most recent run's counts.
"""
from __future__ import annotations

import threading

import numpy as np

from ortx import _kernels
from ortx.npu.compile import CompiledStream
from ortx.npu.stream import decode


class NpuProgram:
    def __init__(self, compiled: CompiledStream):
        self.compiled = compiled
        self._lock = threading.Lock()
        self._stats: dict = {}

    def run(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        compiled = self.compiled
        if len(inputs) != len(compiled.inputs) or len(outputs) != len(compiled.outputs):
            raise ValueError(f"NPU program takes {len(compiled.inputs)} inputs and {len(compiled.outputs)} outputs, "
                             f"got {len(inputs)} and {len(outputs)}")
        work = self._work(inputs)
        counts = _kernels.npu_simulate(compiled.stream, compiled.constants, work)
        for place, array in zip(compiled.outputs, outputs):
            array[...] = work[place.offset:place.offset + place.nbytes].view(place.dtype).reshape(place.shape)
        with self._lock:
            self._stats = self._summary(counts)

    def profile(self, inputs: list[np.ndarray]) -> tuple[dict, list[dict]]:
        """One run's totals and per-layer cycles, MACs, utilisation and DMA bytes (the timeline of the phases)."""
        compiled = self.compiled
        work = self._work(inputs)
        commands = decode(compiled.stream).commands
        timeline = np.zeros(max(len(commands), 1), np.int64)
        counts = _kernels.npu_simulate(compiled.stream, compiled.constants, work, timeline)
        layers, previous = [], 0
        params = compiled.params
        for layer in compiled.layers:
            if layer.end_command == layer.first_command:
                continue
            end = int(timeline[layer.end_command - 1])
            macs = layer.macs
            dma = sum(_dma_bytes(c) for c in commands[layer.first_command:layer.end_command])
            cycles = end - previous
            layers.append({"node": layer.node, "op_type": layer.op_type, "cycles": cycles, "macs": macs,
                           "mac_utilisation": macs / (cycles * params.rows * params.cols) if cycles else 0.0,
                           "dma_bytes": dma})
            previous = end
        return self._summary(counts), layers

    def _work(self, inputs: list[np.ndarray]) -> np.ndarray:
        """A fresh work region (DRAM) with the inputs at their planned offsets."""
        work = np.zeros(max(self.compiled.work_bytes, 1), np.uint8)
        for place, array in zip(self.compiled.inputs, inputs):
            array = np.ascontiguousarray(array)
            if array.dtype != place.dtype or array.shape != place.shape:
                raise ValueError(f"NPU input {place.name!r}: {array.dtype} {array.shape}, compiled for "
                                 f"{place.dtype} {place.shape}")
            work[place.offset:place.offset + place.nbytes] = array.reshape(-1).view(np.uint8)
        return work

    def _summary(self, counts: np.ndarray) -> dict:
        params = self.compiled.params
        record = dict(zip(_kernels.NPU_STAT_NAMES, (int(value) for value in counts)))
        record["macs"] = self.compiled.macs
        record["mac_utilisation"] = record["macs"] / (record["cycles"] * params.rows * params.cols) \
            if record["cycles"] else 0.0
        record["seconds"] = record["cycles"] / params.clock_hz
        return record

    def stats(self) -> dict:
        with self._lock:
            return dict(self._stats)


def _dma_bytes(item) -> int:
    if item.op in ("DMA_IN", "DMA_OUT"):
        return item.fields["rows"] * item.fields["row_bytes"]
    if item.op == "DMA_IM2COL":
        return item.fields["k_count"] * item.fields["p_count"]
    return 0
