"""split(model, stages=N): a model cut into N stage models for pipeline parallelism (ortx.parallel.run).

1. Load (a checked copy), fix the input shapes (from `sample_inputs`, `input_shapes` or the model), run the graph
   passes of `level` (default 2: standard ONNX, BatchNormalization folded into its Conv, so no cut separates them)
   and specialise: every tensor gets a static shape (the rings between stages are planned in bytes).
2. Cost per node: measured on `sample_inputs` (ortx's step timings), else estimated from MACs (.costs).
3. Cuts: balanced by cost, then the fewest bytes crossing (.cuts).
4. Stage k: nodes [cut k-1, cut k) with the initializers they read; inputs are the tensors they read from earlier
   stages or the model's inputs; outputs the ones they make that later stages or the model's outputs need.
Each stage model passes onnx.checker and carries an IR version onnxruntime reads. stages=1 is the model itself.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnx_ir as ir

from ortx.ep.specialize import specialize
from ortx.model_io import ModelSource, clamp_ir_version, load
from ortx.optimize import optimize
from ortx.parallel.costs import estimated_costs, measured_costs
from ortx.parallel.cuts import choose_cuts, crossing_bytes
from ortx.parallel.plan import Boundary, PipelinePlan, Stage, TensorSpec

logger = logging.getLogger(__name__)


def split(model: ModelSource, stages: int, *, sample_inputs: Mapping[str, np.ndarray] | None = None,
          input_shapes: Mapping[str, Sequence[int]] | None = None, level: int = 2, balance_slack: float = 0.02,
          save_to: str | None = None) -> PipelinePlan:
    """`sample_inputs` ({input name: array}) are profiled for measured costs (MACs estimate without them);
    `input_shapes` fixes dynamic input dims when there are no samples; `balance_slack`: a split whose slowest
    stage is within this fraction of the best balance may be chosen for fewer cut bytes (2%: about the noise of
    the measured costs; copy time is already in each stage's cost); `save_to`: a directory
    to write the stage models and plan.json into (atomically)."""
    if not isinstance(stages, int) or isinstance(stages, bool) or stages < 1:
        raise ValueError(f"split: stages must be a positive integer, not {stages!r}")
    proto = load(model)
    shapes = _input_shapes(proto, sample_inputs, input_shapes)
    optimized, _ = optimize(proto, level=level, input_shapes=shapes)
    graph_model = specialize(ir.serde.deserialize_model(optimized), shapes)
    _name_nodes(graph_model)
    specs = _static_specs(graph_model)
    nodes = list(graph_model.graph)
    if stages > len(nodes):
        raise ValueError(f"split: stages={stages} but this graph allows at most {len(nodes)} (one node per stage; "
                         f"{len(nodes)} nodes after the level-{level} passes)")
    if sample_inputs is not None:
        costs = measured_costs(graph_model, dict(sample_inputs))
        source = "measured (ortx step timings, ORT's profiler for nodes ORT runs; 1 thread, fastest of runs)"
    else:
        costs = estimated_costs(graph_model)
        source = "estimated from MACs (no sample inputs)"
    full = clamp_ir_version(ir.serde.serialize_model(graph_model))
    definitions, last_uses, names = _lifetimes(full)
    sizes = np.array([specs[name].nbytes for name in names], dtype=np.float64)
    cut_bytes = crossing_bytes(definitions, last_uses, sizes, len(nodes))
    node_costs = np.array([costs[node.name] for node in nodes], dtype=np.float64)
    cuts = choose_cuts(node_costs, cut_bytes, stages, balance_slack=balance_slack) if stages > 1 else []
    bounds = [0, *cuts, len(nodes)]
    boundaries = tuple(Boundary(tuple(specs[names[t]] for t in range(len(names))
                                      if definitions[t] < position <= last_uses[t]))
                       for position in bounds)
    # The model's own inputs and outputs, in the model's order (a model input nothing reads is still fed).
    boundaries = (Boundary(tuple(specs[value.name] for value in full.graph.input)),) + boundaries[1:-1] + (
        Boundary(tuple(specs[value.name] for value in full.graph.output)),)
    stage_list = []
    for index in range(stages):
        start, end = bounds[index], bounds[index + 1]
        stage_model = (clamp_ir_version(proto) if stages == 1 else
                       _stage_model(full, start, end, boundaries[index], boundaries[index + 1], specs, index))
        stage_list.append(Stage(index, stage_model, tuple(node.name for node in nodes[start:end]),
                                tuple(value.name for value in stage_model.graph.input),
                                tuple(value.name for value in stage_model.graph.output),
                                float(node_costs[start:end].sum())))
    plan = PipelinePlan(tuple(stage_list), boundaries, source, len(nodes))
    logger.info("split:\n%s", plan.describe())
    if save_to is not None:
        plan.save(save_to)
    return plan


def _input_shapes(proto: onnx.ModelProto, sample_inputs, input_shapes) -> dict[str, tuple[int, ...]]:
    initializers = {tensor.name for tensor in proto.graph.initializer}
    shapes = {}
    for value in proto.graph.input:
        if value.name in initializers:
            continue
        if sample_inputs is not None:
            if value.name not in sample_inputs:
                raise ValueError(f"split: sample_inputs has no array for model input {value.name!r}")
            shapes[value.name] = tuple(np.asarray(sample_inputs[value.name]).shape)
        elif input_shapes and value.name in input_shapes:
            shapes[value.name] = tuple(int(dim) for dim in input_shapes[value.name])
        else:
            dims = value.type.tensor_type.shape.dim
            if not all(dim.HasField("dim_value") and dim.dim_value > 0 for dim in dims):
                raise ValueError(f"split: model input {value.name!r} has dynamic dims; give sample_inputs or "
                                 "input_shapes (stage boundaries are planned in bytes)")
            shapes[value.name] = tuple(dim.dim_value for dim in dims)
    return shapes


def _name_nodes(model: ir.Model) -> None:
    seen: set[str] = set()
    for index, node in enumerate(model.graph):
        name = node.name or f"{node.op_type}_{index}"
        while name in seen:
            name = f"{name}_{index}"
        node.name = name
        seen.add(name)


def _static_specs(model: ir.Model) -> dict[str, TensorSpec]:
    specs = {}
    for value in list(model.graph.inputs) + [value for node in model.graph for value in node.outputs]:
        if not value.name:
            continue
        if value.shape is None or value.dtype is None or not all(isinstance(dim, int) for dim in value.shape):
            raise ValueError(f"split: tensor {value.name!r} has no static shape and dtype after shape inference "
                             f"(shape {value.shape}, dtype {value.dtype}); stage boundaries need static shapes")
        specs[value.name] = TensorSpec(value.name, tuple(int(dim) for dim in value.shape),
                                       np.dtype(value.dtype.numpy()).name)
    return specs


def _used_names(node: onnx.NodeProto) -> set[str]:
    """The tensors a node reads, with those its subgraphs (If/Loop/Scan bodies) read from the outer scope."""
    used = {name for name in node.input if name}
    for attribute in node.attribute:
        graphs = [attribute.g] if attribute.HasField("g") else list(attribute.graphs)
        for graph in graphs:
            inner = {value.name for value in graph.input} | {tensor.name for tensor in graph.initializer}
            for inner_node in graph.node:
                used |= _used_names(inner_node) - inner
                inner |= set(inner_node.output)
    return used


def _lifetimes(full: onnx.ModelProto) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """For every non-constant tensor: the node that defines it (-1 for model inputs), the last node that reads it
    (len(nodes) for model outputs), and its name."""
    initializers = {tensor.name for tensor in full.graph.initializer}
    defined = {value.name: -1 for value in full.graph.input if value.name not in initializers}
    last_use: dict[str, int] = {}
    for index, node in enumerate(full.graph.node):
        for name in _used_names(node):
            if name in defined:
                last_use[name] = index
        for name in node.output:
            if name:
                defined[name] = index
    for value in full.graph.output:
        last_use[value.name] = len(full.graph.node)
    names = list(defined)
    return (np.array([defined[name] for name in names]), np.array([last_use.get(name, -2) for name in names]), names)


def _value_info(spec: TensorSpec) -> onnx.ValueInfoProto:
    element_type = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(spec.dtype))
    return onnx.helper.make_tensor_value_info(spec.name, element_type, list(spec.shape))


def _stage_model(full: onnx.ModelProto, start: int, end: int, before: Boundary, after: Boundary,
                 specs: dict[str, TensorSpec], index: int) -> onnx.ModelProto:
    nodes = list(full.graph.node[start:end])
    made = {name for node in nodes for name in node.output if name}
    used = set().union(*(_used_names(node) for node in nodes))
    inputs = [name for name in before.names if name in used and name not in made]
    outputs = [name for name in after.names if name in made]
    initializers = [tensor for tensor in full.graph.initializer if tensor.name in used]
    value_info = [info for info in full.graph.value_info if info.name in made and info.name not in outputs]
    graph = onnx.helper.make_graph(nodes, f"{full.graph.name}_stage{index}", [_value_info(specs[n]) for n in inputs],
                                   [_value_info(specs[n]) for n in outputs], initializer=initializers,
                                   value_info=value_info)
    stage = onnx.helper.make_model(graph, opset_imports=list(full.opset_import), producer_name="ortx.split")
    stage.ir_version = full.ir_version
    stage.functions.extend(full.functions)
    onnx.checker.check_model(stage)
    return clamp_ir_version(stage)
