"""Compiles a whole ONNX graph whose nodes OrtxEP can all run into one program (one claimed segment).

The session compiles each claimed segment through `compile_graph`; tests use `run_graph` to check a lowering
against ONNX Runtime on a one-node model.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from ortx import _kernels
from ortx.ep.lowering import LOWERINGS, blocked_layout
from ortx.ep.lowering.conv import conv_plan_or_none
from ortx.ep.lowering._values import NotStatic, numpy_dtype, size_bytes, static_shape
from ortx.ep.lowering.layout import concat_in_place, lower_alias
from ortx.ep.partition import node_inputs
from ortx.ep.segment_builder import CompiledProgram, SegmentBuilder
from ortx.memory.schedule import Step, memory_order


class NotClaimable(ValueError):
    """A node the lowering table cannot run; the message names the node and the reason."""


def check_node(node: ir.Node) -> str | None:
    """Why OrtxEP cannot run `node`, or None when it can."""
    entry = LOWERINGS.get((node.domain if node.domain != "ai.onnx" else "", node.op_type))
    if entry is None:
        return f"{node.op_type}: op not supported"
    check, _ = entry
    return check(node)


class LoweringError(RuntimeError):
    """A lowering raised; carries the node's name so the session can decline that node and carry on."""

    def __init__(self, node_name: str, message: str):
        super().__init__(message)
        self.node_name = node_name


def _lowering(node: ir.Node):
    return LOWERINGS.get((node.domain if node.domain != "ai.onnx" else "", node.op_type))


def memory_ordered(nodes, inputs: list[ir.Value], outputs: list[ir.Value]) -> list[ir.Node]:
    """`nodes` in the order ortx.memory.schedule finds with a lower arena peak (or as given). Only arena tensors
    count: segment inputs and outputs are bound externally, constants live in the program; an alias (Reshape and
    the like) shares its input's buffer unless its output is bound externally (then it is a copy)."""
    nodes = list(nodes)
    external = {value.name for value in list(inputs) + list(outputs)}
    buffer_of: dict[str, str] = {}
    sizes: dict[str, int] = {}
    steps = []
    for node in nodes:
        reads = tuple(value.name for value in node_inputs(node))
        writes = tuple(value.name for value in node.outputs if value.name)
        entry = _lowering(node)
        if entry is not None and entry[1] is lower_alias and writes[0] not in external and node.inputs[0] is not None:
            buffer_of[writes[0]] = buffer_of.get(node.inputs[0].name, node.inputs[0].name)
        for value in node.outputs:
            if value.name in external or value.name in buffer_of or node.op_type == "Constant":  # not in the arena
                continue
            try:
                sizes[value.name] = size_bytes(value)
            except (NotStatic, TypeError):
                sizes[value.name] = 0  # not lowerable anyway: compile_segment declines the node
        steps.append(Step(reads, writes))
    return [nodes[index] for index in memory_order(steps, sizes, buffer_of)]


def compile_segment(nodes, inputs: list[ir.Value], outputs: list[ir.Value], *, num_threads: int = 1,
                    precision: str = "fp32", sparse_policy=None, blocked: bool = True,
                    fuse_expand: bool = True, pair_rows: str = "exact") -> CompiledProgram:
    """Lowers `nodes` (a topological order) into one program reading `inputs` and writing `outputs`; the steps run
    in `memory_ordered(nodes)`, which lowers the arena's peak where independent branches allow. `precision`:
    ortx.ep.precision's option ("bf16": constant-weight GEMMs and convs get bf16 kernels). `sparse_policy`:
    ortx.tune.sparse_choice's per-layer dense/sparse choice (None: its prior alone). `blocked`: runs of 1x1 and
    depthwise convs on blocked tensors where ortx.ep.lowering.blocked_layout finds them (False: NCHW kernels only);
    `fuse_expand`: within them, a 1x1 conv and the depthwise conv that alone reads it as one step (its
    expand_depthwise_pairs); `pair_rows`: which of their tensors a bf16 session on AMX keeps as bf16 pair rows
    (its pair_rows_values' mode: "all", "exact" or "off")."""
    for node in nodes:
        reason = check_node(node)
        if reason is not None:
            raise NotClaimable(f"node {node.name!r} ({node.op_type}): {reason}")
    builder = SegmentBuilder(list(inputs), list(outputs), num_threads=num_threads, precision=precision,
                             sparse_policy=sparse_policy)
    order = memory_ordered(nodes, inputs, outputs)
    builder.concat_slices = concat_in_place(order, inputs, outputs)
    if blocked:
        builder.blocked_nodes = blocked_layout.blocked_nodes(order, outputs, builder, conv_plan_or_none)
        builder.blocked_concats = frozenset(node.outputs[0].name for node in builder.blocked_nodes
                                            if node.op_type == "Concat")
        if fuse_expand:
            builder.expand_of = blocked_layout.expand_depthwise_pairs(order, outputs, builder, conv_plan_or_none,
                                                                      pair_rows)
        builder.pair_rows = blocked_layout.pair_rows_values(order, outputs, builder, conv_plan_or_none, pair_rows)
        builder.depthwise_of = blocked_layout.depthwise_bf16x3_pairs(order, outputs, builder, conv_plan_or_none)
    for node in order:
        builder.current_node = node.name or node.op_type
        _, lower = LOWERINGS[(node.domain if node.domain != "ai.onnx" else "", node.op_type)]
        try:
            lower(node, builder)
        except Exception as error:
            raise LoweringError(node.name, f"node {node.name!r} ({node.op_type}): {error}") from error
    return builder.finish()


def compile_graph(graph: ir.Graph, *, num_threads: int = 1, precision: str = "fp32") -> CompiledProgram:
    return compile_segment(list(graph), list(graph.inputs), list(graph.outputs), num_threads=num_threads,
                           precision=precision)


def infer_shapes(model: onnx.ModelProto) -> ir.Model:
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    return ir.serde.deserialize_model(inferred)


def run_graph(model: onnx.ModelProto, feeds: dict[str, np.ndarray], *, num_threads: int = 1,
              use_reference_kernels: bool = False, precision: str = "fp32") -> list[np.ndarray]:
    """Compiles `model` (every node must be claimable) and runs it once; for tests and debugging."""
    ir_model = infer_shapes(model)
    compiled = compile_graph(ir_model.graph, num_threads=num_threads, precision=precision)
    graph = ir_model.graph
    inputs = [np.asarray(feeds[value.name], dtype=numpy_dtype(value), order="C") for value in graph.inputs]
    outputs = [np.empty(static_shape(value), dtype=numpy_dtype(value)) for value in graph.outputs]
    externals = np.array([a.__array_interface__["data"][0] for a in inputs + outputs], dtype=np.uint64)
    arena = np.empty(max(compiled.arena_bytes, 1), dtype=np.uint8)
    try:
        compiled.program.run(arena, externals, num_threads, use_reference_kernels)
    except _kernels.KernelError as error:
        raise compiled.step_error(error) from None
    return outputs
