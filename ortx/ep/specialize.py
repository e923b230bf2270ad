"""Shape specialisation: fix the graph inputs' dynamic dims, then infer and fold to a fixed point.

Exported models compute shapes at run time (Shape -> Gather -> Concat -> Reshape); once the input shapes are
known those chains are constants, and folding them makes every downstream shape static, which is what the
kernels are compiled for. Each round: ONNX shape inference (with data propagation), constant folding, Constant
nodes lifted to initializers, unused nodes removed; stop when a round changes nothing.
"""
from __future__ import annotations

import onnx
import onnx_ir as ir
import onnxscript.optimizer
from onnx_ir.passes.common import LiftConstantsToInitializersPass, RemoveUnusedNodesPass

MAX_ROUNDS = 8


def _dynamic_count(model: ir.Model) -> int:
    count = 0
    for node in model.graph:
        for value in node.outputs:
            if value.shape is None or not all(isinstance(dim, int) for dim in value.shape):
                count += 1
    return count


def input_signature(model: ir.Model, feeds_shapes: dict[str, tuple[int, ...]]) -> tuple:
    return tuple((value.name, tuple(feeds_shapes[value.name])) for value in model.graph.inputs
                 if value.name in feeds_shapes)


def specialize(model: ir.Model, input_shapes: dict[str, tuple[int, ...]]) -> ir.Model:
    """A copy of `model` with the given input shapes and every shape it implies made static where possible."""
    proto = ir.serde.serialize_model(model)
    for graph_input in proto.graph.input:
        shape = input_shapes.get(graph_input.name)
        if shape is None or not graph_input.type.HasField("tensor_type"):
            continue
        dims = graph_input.type.tensor_type.shape.dim
        if len(dims) != len(shape):
            raise ValueError(f"input {graph_input.name!r}: rank {len(shape)} given, the model has rank {len(dims)}")
        for dim, size in zip(dims, shape):
            if dim.HasField("dim_value") and dim.dim_value != size:
                raise ValueError(f"input {graph_input.name!r}: dim of size {size} given where the model has "
                                 f"{dim.dim_value}")
            dim.Clear()
            dim.dim_value = int(size)
    previous = None
    for _ in range(MAX_ROUNDS):
        proto = onnx.shape_inference.infer_shapes(proto, data_prop=True)
        specialised = ir.serde.deserialize_model(proto)
        onnxscript.optimizer.fold_constants(specialised)
        LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(specialised)
        RemoveUnusedNodesPass()(specialised)
        state = (len(specialised.graph), _dynamic_count(specialised))
        proto = ir.serde.serialize_model(specialised)
        if state == previous or state[1] == 0 and previous is not None and state[0] == previous[0]:
            break
        previous = state
    proto = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    return ir.serde.deserialize_model(proto)
