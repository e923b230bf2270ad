"""The NPU's DRAM as the compiler lays it out: a constants region (read-only: weights, biases, multipliers) and a
work region for the tensors a segment reads and writes.

Work offsets come from the house memory planner (ortx/memory/plan.py): a tensor lives from the layer that writes it
(segment inputs: from the start) to the last layer that reads it (segment outputs: to the end); a Flatten output is
its input's bytes, so it extends that tensor's life. Layers end with a BARRIER, so a range freed by layer i's last
read can take layer i + 1's output.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from ortx.ep.lowering._values import numpy_dtype, static_shape
from ortx.memory.lifetimes import Lifetime
from ortx.memory.plan import MemoryPlan, plan_offsets

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


def _nbytes(value: ir.Value) -> int:
    return int(np.prod(static_shape(value), dtype=np.int64)) * numpy_dtype(value).itemsize


def plan_work(nodes: list[ir.Node], inputs: list[ir.Value],
              outputs: list[ir.Value]) -> tuple[dict[str, int], MemoryPlan]:
    """(work offset per tensor name, Flatten aliases included; the memory plan over layer indices)."""
    root: dict[str, str] = {}  # Flatten output -> the tensor whose bytes it is
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    sizes: dict[str, int] = {}

    def touch(value: ir.Value, step: int) -> None:
        name = root.get(value.name, value.name)
        first.setdefault(name, step)
        last[name] = max(last.get(name, step), step)
        sizes.setdefault(name, _nbytes(value))

    for value in inputs:
        touch(value, 0)
    for step, node in enumerate(nodes):
        for value in node.inputs:
            if value is not None and value.const_value is None:
                touch(value, step)
        if node.op_type == "Flatten":
            root[node.outputs[0].name] = root.get(node.inputs[0].name, node.inputs[0].name)
            continue
        for value in node.outputs[:1]:
            touch(value, step)
    for value in outputs:
        touch(value, len(nodes))
    lifetimes = [Lifetime(name, sizes[name], first[name], last[name]) for name in sizes]
    plan = plan_offsets(lifetimes)
    offsets = dict(plan.offsets)
    for alias, source in root.items():
        offsets[alias] = offsets[source]
    return offsets, plan


class Dram:
    def __init__(self, offsets: dict[str, int], plan: MemoryPlan):
        self.constants = bytearray()
        self.work_bytes = plan.arena_bytes
        self.offsets = offsets
        self.places: dict[str, TensorPlace] = {}

    def constant(self, array: np.ndarray) -> int:
        offset = len(self.constants)
        self.constants += np.ascontiguousarray(array).tobytes()
        self.constants += bytes(aligned(len(self.constants)) - len(self.constants))
        return offset

    def tensor(self, value: ir.Value) -> TensorPlace:
        if value.name not in self.places:
            if value.const_value is not None or value.name not in self.offsets:
                raise NpuUnsupported(f"tensor {value.name!r} has no place in the NPU's work region (a constant "
                                     f"where a computed tensor is expected)")
            self.places[value.name] = TensorPlace(value.name, self.offsets[value.name], tuple(static_shape(value)),
                                                  numpy_dtype(value))
        return self.places[value.name]
