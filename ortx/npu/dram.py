"""The NPU's DRAM as the compiler lays it out: a constants region (read-only: weights, biases, multipliers) and a
work region (every tensor a segment reads or writes at its own 64-byte aligned offset; no reuse, a known limit)."""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from ortx.ep.lowering._values import numpy_dtype, static_shape

ALIGN = 64


class NpuUnsupported(ValueError):
    """A node the NPU cannot run; the message names the node and the reason."""




@dataclasses.dataclass(frozen=True)
class TensorPlace:
    name: str
    offset: int  # in the work region
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize



def aligned(size: int) -> int:
    return (size + ALIGN - 1) // ALIGN * ALIGN


class Dram:
    def __init__(self):
        self.constants = bytearray()
        self.work_bytes = 0
        self.places: dict[str, TensorPlace] = {}

    def constant(self, array: np.ndarray) -> int:
        offset = len(self.constants)
        self.constants += np.ascontiguousarray(array).tobytes()
        self.constants += bytes(aligned(len(self.constants)) - len(self.constants))
        return offset

    def tensor(self, value: ir.Value) -> TensorPlace:
        if value.name not in self.places:
            place = TensorPlace(value.name, self.work_bytes, tuple(static_shape(value)), numpy_dtype(value))
            self.places[value.name] = place
            self.work_bytes += aligned(max(place.nbytes, 1))
        return self.places[value.name]


