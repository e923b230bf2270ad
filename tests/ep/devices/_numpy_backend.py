"""A test-only device backend: float32 elementwise ops evaluated with numpy, with a log of every run (device,
thread, start and end times) and an optional hook called at the start of a run (e.g. a barrier that passes only
when two devices' runs are in flight at once). Two device modules (numpy_device_a/_b) share it."""
from __future__ import annotations

import threading
import time

import numpy as np
import onnx_ir as ir

from ortx.ep.devices import Device, OpSupport
from ortx.ep.lowering._values import numpy_dtype

OPS = {
    "Relu": lambda x: np.maximum(x, 0), "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Tanh": np.tanh,
    "Neg": np.negative, "Add": np.add, "Mul": np.multiply,
    "GlobalAveragePool": lambda x: x.mean(axis=tuple(range(2, x.ndim)), keepdims=True),
}
RUNS: list[tuple[str, str, float, float]] = []  # (device, thread name, start, end), appended by every run
HOOKS: dict[str, object] = {}  # device name -> callable run at the start of that device's runs


def device(name: str, module: str) -> Device:
    return Device(name=name, kind="dsp", description=f"test device {name}: numpy elementwise ops",
                  ops=tuple(OpSupport("", op, ("float32",), "float32 only") for op in OPS),
                  memory_bytes=1 << 30, bandwidth_bytes_per_second=10e9,
                  peak_ops_per_second={"float32": 1e9}, compiler="numpy (tests)", backend=module)


def check(node: ir.Node) -> str | None:
    if node.domain not in ("", "ai.onnx") or node.op_type not in OPS:
        return f"{node.op_type}: not a numpy test op"
    for value in list(node.inputs) + list(node.outputs):
        if value is None or numpy_dtype(value) != np.float32:
            return f"{node.op_type}: float32 only"
    return None


class NumpyProgram:
    def __init__(self, name: str, nodes, inputs, outputs):
        self.name = name
        self.nodes = [(node.op_type, [v.name for v in node.inputs], node.outputs[0].name) for node in nodes]
        self.constants = {v.name: v.const_value.numpy() for node in nodes for v in node.inputs
                          if v is not None and v.const_value is not None}
        self.input_names = [value.name for value in inputs]
        self.output_names = [value.name for value in outputs]
        self.runs = 0

    def run(self, inputs, outputs) -> None:
        start = time.perf_counter()
        hook = HOOKS.get(self.name)
        if hook is not None:
            hook()
        values = dict(self.constants)
        values.update(zip(self.input_names, inputs))
        for op_type, names, output in self.nodes:
            values[output] = OPS[op_type](*[values[name] for name in names]).astype(np.float32)
        for name, array in zip(self.output_names, outputs):
            array[...] = values[name]
        self.runs += 1
        RUNS.append((self.name, threading.current_thread().name, start, time.perf_counter()))

    def stats(self) -> dict:
        return {"runs": self.runs}
