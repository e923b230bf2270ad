"""Shape specialisation: fix the graph inputs' dynamic dims, then infer and fold to a fixed point.

Exported models compute shapes at run time (Shape -> Gather -> Concat -> Reshape); once the input shapes are
known those chains are constants, and folding them makes every downstream shape static, which is what the
kernels are compiled for. Each round: ONNX shape inference with data propagation (onnx_ir's pass, which leaves
large initializers out of the protobuf it hands to onnx), constant folding, Constant nodes lifted to initializers,
unused nodes removed; stop when a round changes neither the node count nor the number of dynamic values.
"""
from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from ortx.passes.fold_constants import fold_constants
from ortx.passes.infer_shapes import run_shape_inference

MAX_ROUNDS = 8


def _dynamic_count(model: ir.Model) -> int:
    count = 0
    for node in model.graph:
        for value in node.outputs:
            if value.shape is None or not all(isinstance(dim, int) for dim in value.shape):
                count += 1
    return count


def _fix_input_shapes(model: ir.Model, input_shapes: dict[str, tuple[int, ...]]) -> None:
    for value in model.graph.inputs:
        shape = input_shapes.get(value.name)
        if shape is None:
            continue
        if value.shape is not None:
            if len(value.shape) != len(shape):
                raise ValueError(f"input {value.name!r}: rank {len(shape)} given, the model has rank "
                                 f"{len(value.shape)}")
            for dim, size in zip(value.shape, shape):
                if isinstance(dim, int) and dim >= 0 and dim != size:  # -1 marks a dynamic dim in some exports
                    raise ValueError(f"input {value.name!r}: shape {tuple(shape)} given where the model has "
                                     f"{value.shape}")
        value.shape = ir.Shape([int(size) for size in shape])


def _forget_negative_dims(model: ir.Model) -> None:
    """Exporters that write -1 for dynamic dims would pin values to -1; make those dims unknown for inference."""
    for value in list(model.graph.outputs) + [v for node in model.graph for v in node.outputs]:
        if value.shape is not None and any(isinstance(dim, int) and dim < 0 for dim in value.shape):
            value.shape = ir.Shape([None if isinstance(dim, int) and dim < 0 else dim for dim in value.shape])


def _forget_declared_output_shapes(model: ir.Model) -> dict:
    """A graph output's declared shape is the exporter's word, not the producer's: where they differ, onnx's lenient
    inference kept the declared one, and the kernels, which compute the producer's, wrote past the buffer planned
    from it (a Concat of 48 + 48 channels declared 64: heap corruption). ONNX Runtime runs the inferred shape, so
    the standard ops' outputs are re-inferred from their inputs (custom-domain producers keep theirs); returns the
    declared shapes, which _restore_uninferred gives back where inference finds none."""
    declared = {}
    for value in model.graph.outputs:
        producer = value.producer()
        if producer is not None and producer.domain in ("", "ai.onnx") and value.shape is not None:
            declared[value] = value.shape
            value.shape = None
    return declared


def _restore_uninferred(declared: dict) -> bool:
    """Gives each output whose inferred shape is missing or partly unknown its declared shape back when the two
    agree on every dim inference knows (an Expand to a shape fed as a graph input: only the declaration is static);
    whether any changed."""
    changed = False
    for value, shape in declared.items():
        inferred = value.shape
        if inferred is not None and all(isinstance(dim, int) for dim in inferred):
            continue
        if inferred is not None and (len(inferred) != len(shape) or any(
                isinstance(known, int) and known != dim for known, dim in zip(inferred, shape))):
            continue
        value.shape = shape
        changed = True
    return changed


def specialize(model: ir.Model, input_shapes: dict[str, tuple[int, ...]]) -> ir.Model:
    """A copy of `model` with the given input shapes and every shape they imply made static where possible."""
    specialised = model.clone()
    _fix_input_shapes(specialised, input_shapes)
    _forget_negative_dims(specialised)
    declared = _forget_declared_output_shapes(specialised)
    def infer(model: ir.Model) -> None:
        run_shape_inference(model, check_type=True)

    previous = None
    for _ in range(MAX_ROUNDS):
        infer(specialised)
        if _dynamic_count(specialised) == 0 and previous is not None:
            break
        fold_constants(specialised)
        RemoveUnusedNodesPass()(specialised)
        state = (len(specialised.graph), _dynamic_count(specialised))
        if state == previous:
            break
        previous = state
    infer(specialised)
    if _restore_uninferred(declared):
        infer(specialised)
    return specialised
