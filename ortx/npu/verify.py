"""Bit-exactness of the NPU against the CPU int8 kernels on a whole model, segment by segment.

1. The model goes through OrtxEP's preparation (passes, shape specialisation, fuse_qdq and the other fusions), the
   graph OrtxEP (and the device placement) sees.
2. Nodes the NPU can run (ortx.npu.compile.check_node) form segments (ortx.ep.partition); every segment runs on
   the CPU's OrtxEP lowering in order, producing every tensor; each NPU segment also runs on the simulator with the
   same inputs and its outputs are compared byte for byte with the CPU's.
Limit: a segment that OrtxEP's CPU lowering does not claim cannot be checked (raises, naming the node).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx

from ortx.ep.compile_nodes import compile_segment
from ortx.ep.partition import partition
from ortx.npu.compile import CompiledStream, check_node, compile_nodes
from ortx.npu.params import DEFAULT_PARAMS, NpuParams
from ortx.npu.program import NpuProgram


@dataclasses.dataclass(frozen=True)
class SegmentCheck:
    nodes: tuple[str, ...]
    bit_exact: bool
    max_abs_difference: float
    totals: dict
    layers: tuple[dict, ...]
    compiled: CompiledStream


def prepared_graph(model: onnx.ModelProto, input_shapes: dict[str, tuple[int, ...]]):
    """The fused, shape-specialised ir.Model OrtxEP compiles."""
    from ortx import pipeline
    from ortx.ep.capability import assign
    from ortx.ep.specialize import specialize

    prepared = pipeline.prepare_loaded(model)
    specialised = specialize(prepared.model, input_shapes)
    fused, _, _ = pipeline._fuse_for_ortxep(specialised, assign(specialised.graph))
    return fused


def _run_cpu(segment, values: dict[str, np.ndarray]) -> list[np.ndarray]:
    compiled = compile_segment(segment.nodes, segment.inputs, segment.outputs, num_threads=1)
    arrays = [np.ascontiguousarray(values[value.name]) for value in segment.inputs]
    outputs = [np.empty(value.shape.numpy(), value.dtype.numpy()) for value in segment.outputs]
    externals = np.array([array.__array_interface__["data"][0] for array in arrays + outputs], np.uint64)
    arena = np.empty(max(compiled.arena_bytes, 1), np.uint8)
    compiled.program.run(arena, externals, 1, False)
    return outputs


def check_model(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                params: NpuParams = DEFAULT_PARAMS) -> list[SegmentCheck]:
    graph = prepared_graph(model, {name: array.shape for name, array in feeds.items()}).graph
    claimed = {node.name: check_node(node, params) is None for node in graph}
    values = dict(feeds)
    checks = []
    for segment in partition(graph, claimed):
        expected = _run_cpu(segment, values)
        if segment.claimed:
            compiled = compile_nodes(segment.nodes, segment.inputs, segment.outputs, params)
            program = NpuProgram(compiled)
            inputs = [values[value.name] for value in segment.inputs]
            actual = [np.empty_like(array) for array in expected]
            program.run(inputs, actual)
            totals, layers = program.profile(inputs)
            exact = all(a.dtype == e.dtype and np.array_equal(a, e) for a, e in zip(actual, expected))
            difference = max((float(np.max(np.abs(a.astype(np.float64) - e.astype(np.float64)), initial=0.0))
                              for a, e in zip(actual, expected)), default=0.0)
            checks.append(SegmentCheck(tuple(node.name for node in segment.nodes), exact, difference, totals,
                                       tuple(layers), compiled))
        for value, array in zip(segment.outputs, expected):
            values[value.name] = array
    return checks
