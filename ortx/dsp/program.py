"""Compiles a list of signal nodes into a DspProgram: one Step per node, run in order on one thread.

1. check(node): the op is in OPS and its lowering accepts the node (static shapes, constant scalars).
2. compile_nodes: lower every node, preallocate the tensors that pass between the nodes (segment inputs and
   outputs are bound per run), and keep constant inputs (initializers) as arrays.
3. DspProgram.run(inputs, outputs): binds the arrays, runs the steps. Runs are serialised by a lock: the DSP runs
   one program at a time, as the device it stands for would, and its intermediates are reused run to run.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import onnx_ir as ir

from ortx.dsp._common import DspError, NotStatic, Step, describe, numpy_dtype, static_shape
from ortx.dsp.fir import lower_conv
from ortx.dsp.generators import lower_generator
from ortx.dsp.spectral import lower_dft, lower_stft
from ortx.ep.lowering._values import constant_value

OPS = {
    "DFT": lower_dft,
    "STFT": lower_stft,
    "HannWindow": lower_generator,
    "HammingWindow": lower_generator,
    "BlackmanWindow": lower_generator,
    "MelWeightMatrix": lower_generator,
    "Conv": lower_conv,
}


def lower(node: ir.Node) -> Step:
    if node.domain not in ("", "ai.onnx") or node.op_type not in OPS:
        raise DspError(f"{describe(node)}: op {node.domain or 'ai.onnx'}.{node.op_type} is not a DSP op (the DSP "
                       f"runs {', '.join(OPS)})")
    return OPS[node.op_type](node)


def check(node: ir.Node) -> str | None:
    """None when the DSP can run `node`; else the reason, naming the node and the input or attribute."""
    try:
        lower(node)
    except DspError as error:
        return str(error)
    return None


class DspProgram:
    """A compiled DSP segment; see the module docstring for the run contract."""

    def __init__(self, steps: list[Step], input_names: list[str], output_names: list[str],
                 buffers: dict[str, np.ndarray], num_threads: int):
        self.steps = steps
        self.input_names = input_names
        self.output_names = output_names
        self._buffers = buffers
        self._num_threads = num_threads
        self._lock = threading.Lock()
        self._runs = 0
        self._busy_seconds = 0.0

    def run(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        if len(inputs) != len(self.input_names) or len(outputs) != len(self.output_names):
            raise ValueError(f"DSP program takes {len(self.input_names)} inputs and {len(self.output_names)} "
                             f"outputs, got {len(inputs)} and {len(outputs)}")
        with self._lock:
            start = time.perf_counter()
            buffers = self._buffers
            for name, array in zip(self.input_names, inputs):
                buffers[name] = np.ascontiguousarray(array, dtype=np.float32) if array.dtype != np.float32 or \
                    not array.flags.c_contiguous else array
            for name, array in zip(self.output_names, outputs):
                if not array.flags.c_contiguous:
                    raise ValueError(f"DSP program: output {name!r} is not C-contiguous")
                buffers[name] = array
            for step in self.steps:
                step.run([buffers[name] for name in step.reads], [buffers[name] for name in step.writes],
                         self._num_threads)
            self._runs += 1
            self._busy_seconds += time.perf_counter() - start

    def stats(self) -> dict:
        return {"steps": len(self.steps), "runs": self._runs, "busy_seconds": self._busy_seconds,
                "thread": "caller's (the executor's DSP lane)"}


def compile_nodes(nodes, inputs: list[ir.Value], outputs: list[ir.Value], *, num_threads: int = 1) -> DspProgram:
    nodes = list(nodes)
    steps = [lower(node) for node in nodes]
    input_names = [value.name for value in inputs]
    output_names = [value.name for value in outputs]
    bound = set(input_names) | set(output_names)
    buffers: dict[str, np.ndarray] = {}
    for node in nodes:
        for value in node.inputs:
            if value is None or value.name in bound or value.name in buffers:
                continue
            constant = constant_value(value)
            if constant is not None:
                buffers[value.name] = np.ascontiguousarray(constant)
        for value in node.outputs:
            if value.name in bound:
                continue
            try:
                buffers[value.name] = np.zeros(static_shape(value), numpy_dtype(value))
            except NotStatic as error:
                raise DspError(f"{describe(node)}: {error}") from error
    for step in steps:
        for name in step.reads:
            if name not in buffers and name not in bound:
                raise DspError(f"DSP segment: node {step.node_name!r} reads {name!r}, which is neither a segment "
                               f"input, a constant nor produced inside the segment")
    return DspProgram(steps, input_names, output_names, buffers, max(1, int(num_threads)))
