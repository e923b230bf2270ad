"""Constant folding: Constant nodes -> initializers; nodes whose inputs are all constant -> initializers.

Before: Constant -> Reshape(shape=Concat(Constant, Constant)); Shape(x: [1,3,8,8]) -> Gather -> ...
After:  initializers feed the consumers directly; Shape of a statically-shaped tensor becomes a constant.
Does not apply to: outputs larger than `size_limit` elements, ConstantOfShape and (De)QuantizeLinear (kept as
onnxscript keeps them: folding them only grows the model), random ops, Constants that are graph outputs.
The folding itself is onnxscript.optimizer.fold_constants, which evaluates nodes with onnx.reference and runs
per-node shape inference so Shape/Size of static tensors fold.
"""
from __future__ import annotations

import logging
import re
import time

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common
import onnxscript.optimizer

from ortx.passes._report import PassReport

logger = logging.getLogger(__name__)

_RANDOM_OPS = {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Multinomial"}


def _is_constant_node(node: ir.Node) -> bool:
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx")


def _unfolded_notes(graph: ir.Graph, size_limit: int) -> list[str]:
    """One line per node left in the graph although every input is constant, with the likely reason."""
    notes = []
    for node in graph:
        inputs = [value for value in node.inputs if value is not None]
        if not inputs or _is_constant_node(node) or node.domain not in ("", "ai.onnx"):
            continue
        if not all(value.const_value is not None and not value.is_graph_input() for value in inputs):
            continue
        if node.op_type in _RANDOM_OPS:
            reason = "non-deterministic op"
        elif node.op_type in ("ConstantOfShape", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"):
            reason = "kept on purpose (folding only grows the model)"
        elif any(value.const_value.size > size_limit for value in inputs):
            reason = f"an input has more than size_limit={size_limit} elements"
        else:
            reason = f"output over size_limit={size_limit} elements, or the op could not be evaluated"
        notes.append(f"{node.name} ({node.op_type}): not folded: {reason}")
    return notes


# Each folder failure excludes one node and restarts; this bounds the restarts.
MAX_FOLD_FAILURES = 16


def _fold_skipping_failures(model: ir.Model, size_limit: int) -> dict[str, str]:
    """Runs onnxscript's folder; a node whose evaluation raises is excluded and folding restarts without it,
    so one op the folder cannot evaluate (e.g. SplitToSequence on some inputs) does not stop the pass."""
    excluded: dict[str, str] = {}
    for _ in range(MAX_FOLD_FAILURES):
        try:
            onnxscript.optimizer.fold_constants(
                model, onnx_shape_inference=True, input_size_limit=size_limit, output_size_limit=size_limit,
                should_fold=lambda node: False if node.name in excluded else None)
            return excluded
        except Exception as error:  # the folder wraps any evaluation error; find the node it names
            match = re.search(r"for node '([^']*)'", str(error))
            if match is None:
                raise
            if match.group(1) in excluded:
                # The folder fails on this node even when told not to fold it (its type inference runs
                # regardless): leave the model as the last attempt left it, with a note.
                excluded[match.group(1)] += "; folding stopped there"
                return excluded
            excluded[match.group(1)] = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
            logger.debug("fold_constants: excluding %s after %s", match.group(1), error)
    return excluded


# onnxscript's folder rewrites these (even where they cannot be folded) into Unsqueeze, Split and Squeeze with their
# axes and sizes as inputs, the opset 13 forms: in a model of an older opset the result is invalid (ONNX's
# backend test simple/test_sequence_model5 and 8, opset 12). Such models keep these nodes as they are.
_OPSET13_REWRITES = ("ConcatFromSequence", "SplitToSequence")
_HIDDEN_DOMAIN = "ortx.fold_constants.hidden"


def _hide_opset13_rewrites(model: ir.Model) -> list[tuple[ir.Node, str, list]]:
    """Puts the nodes the folder would rewrite into opset 13 forms in a domain it skips; returns them with their
    domains and their outputs' types and shapes (its type inference would take them for an unknown op's)."""
    if model.opset_imports.get("", model.opset_imports.get("ai.onnx", 13)) >= 13:
        return []
    hidden = [(node, node.domain, [(value.type, value.shape) for value in node.outputs])
              for node in ir.traversal.RecursiveGraphIterator(model.graph)
              if node.domain in ("", "ai.onnx") and node.op_type in _OPSET13_REWRITES]
    for node, _, _ in hidden:
        node.domain = _HIDDEN_DOMAIN
    return hidden


def _restore_hidden(hidden: list[tuple[ir.Node, str, list]]) -> None:
    for node, domain, outputs in hidden:
        node.domain = domain
        for value, (value_type, shape) in zip(node.outputs, outputs):
            value.type, value.shape = value_type, shape


def _make_contiguous(graph: ir.Graph, initializers_before: set[str]) -> None:
    """The folder's results can be numpy views (a folded Transpose of a weight is its transpose view), which later
    stages read as flat buffers: onnx_ir's initializer sharing raised "ndarray is not C-contiguous" on any model
    with Transpose -> MatMul of a constant weight. Each new initializer is made a contiguous copy."""
    for name, value in graph.initializers.items():
        tensor = value.const_value
        if name in initializers_before or not isinstance(tensor, ir.Tensor):
            continue
        array = tensor.raw
        if isinstance(array, np.ndarray) and not array.flags.c_contiguous:
            value.const_value = ir.Tensor(np.ascontiguousarray(array), name=tensor.name)


def fold_constants(model: ir.Model, *, size_limit: int = 1 << 16) -> PassReport:
    """Folds in place; `size_limit` bounds the elements of any folded input or output tensor."""
    start = time.perf_counter()
    graph = model.graph
    original_nodes = {id(node) for node in graph if not _is_constant_node(node)}
    constants_before = sum(1 for node in graph if _is_constant_node(node))
    constant_names = {node.outputs[0].name for node in graph if _is_constant_node(node)}
    initializers_before = set(graph.initializers)

    # Lift first so the folder sees every constant as an initializer, then lift again: the folder may emit
    # Constant nodes for values it computed.
    lift = onnx_ir.passes.common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)
    lift(model)
    hidden = _hide_opset13_rewrites(model)
    try:
        failed = _fold_skipping_failures(model, size_limit)
    finally:
        _restore_hidden(hidden)
    lift(model)

    _make_contiguous(graph, initializers_before)

    remaining = {id(node) for node in graph}
    constants_after = sum(1 for node in graph if _is_constant_node(node))
    new_initializers = [value for name, value in graph.initializers.items() if name not in initializers_before]
    counts = {
        "constants_lifted": max(constants_before - constants_after, 0),
        "nodes_folded": sum(1 for node_id in original_nodes if node_id not in remaining),
        # Bytes of the tensors folding computed (lifted Constants keep their names and are not counted).
        "folded_bytes": sum(value.const_value.nbytes for value in new_initializers
                            if value.const_value is not None and value.name not in constant_names),
    }
    notes = [f"{name}: not folded: the folder raised {error}" for name, error in failed.items()]
    notes += [f"{node.name} ({node.op_type}): not rewritten: the folder's rewrite needs opset 13, the model has "
              f"{model.opset_imports.get('', model.opset_imports.get('ai.onnx'))}" for node, _, _ in hidden]
    notes += _unfolded_notes(graph, size_limit)
    for note in notes:
        logger.debug(note)
    return PassReport(model, name="fold_constants", counts=counts, notes=notes,
                      seconds=time.perf_counter() - start)
