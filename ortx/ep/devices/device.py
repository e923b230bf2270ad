"""A device as data: what it runs (ops, dtypes, constraints), its memory, bandwidth and peak, and its backend.

The placement (ortx.ep.placement) reads only this record and the three functions of the backend module it names:
    check(node) -> str | None              None: the device can run `node`; else the reason, naming the op/attr
    estimate_seconds(node) -> float        the device's cost model for `node`
    compile(nodes, inputs, outputs, *, num_threads) -> DeviceProgram
A DeviceProgram's `run(inputs, outputs)` writes the preallocated output arrays in place (static shapes) and
`stats()` reports what the device counted (may be {}).
"""
from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType
from typing import Protocol

import numpy as np

KINDS = ("cpu", "npu", "dsp")


@dataclasses.dataclass(frozen=True)
class OpSupport:
    """One op a device runs: for documentation and `ortx devices`; the backend's `check` has the last word."""

    domain: str  # "" for the default ONNX domain
    op_type: str
    dtypes: tuple[str, ...]  # numpy dtype names, e.g. ("float32",) or ("int8", "uint8")
    constraints: str = ""  # e.g. "static shapes; 2-D kernels; group 1 or depthwise"


@dataclasses.dataclass(frozen=True)
class Device:
    name: str  # what provider option `devices` and `placement` spell, e.g. "npu"
    kind: str  # one of KINDS
    description: str
    ops: tuple[OpSupport, ...] = dataclasses.field(repr=False)
    memory_bytes: int
    bandwidth_bytes_per_second: float  # to and from host memory: what the placement charges a tensor crossing
    peak_ops_per_second: dict[str, float] = dataclasses.field(hash=False)  # per dtype; a MAC counts as 2 ops
    compiler: str  # what lowers a segment for it, e.g. "ortx.npu.compiler (command stream)"
    backend: str  # dotted module path with check / estimate_seconds / compile, imported on first use

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"device {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")

    def backend_module(self) -> ModuleType:
        """The backend module (imported lazily, so listing devices imports no compiler or simulator)."""
        try:
            return importlib.import_module(self.backend)
        except ImportError as error:
            raise ImportError(f"device {self.name!r}: backend module {self.backend!r} cannot be imported: {error}") \
                from error

    def to_dict(self) -> dict:
        """JSON-ready fields (`ortx devices --json`)."""
        record = dataclasses.asdict(self)
        record["ops"] = [dataclasses.asdict(op) for op in self.ops]
        record["peak_ops_per_second"] = dict(self.peak_ops_per_second)
        return record


class DeviceProgram(Protocol):
    """What a backend's `compile` returns."""

    def run(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None: ...

    def stats(self) -> dict: ...
