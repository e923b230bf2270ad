"""Shape inference, with symbolic dims kept symbolic; `input_shapes` fixes the dims of named graph inputs first.

Before: x: float[N, 3, H, W] -> Conv -> Relu (intermediate shapes unknown)
After:  x: float[1, 3, 640, 640] with input_shapes={"x": (1, 3, 640, 640)}, and every inferable value shaped
        (dims that depend on N/H/W stay named dims when no shape is given).
Does not apply to: values onnx.shape_inference cannot infer (custom domains, data-dependent shapes); when
inference fails as a whole the model keeps its old shapes and the reason is a note. A given shape whose rank or
fixed dims contradict the model is an error naming the input. Values an op outputs as sequences, optionals or maps
keep the type they had: onnx_ir's merge of the inferred types sets only a tensor dtype and shape, so a
SplitToSequence output became a float tensor shaped like one element, which ORT rejects.
"""
from __future__ import annotations

import logging
import time
from typing import Mapping, Sequence

import onnx
import onnx_ir as ir
import onnx_ir.passes.common

from ortx.model_io import forget_removed_graph_io
from ortx.passes._ort_shapes import pool_output_size, pool_pads
from ortx.passes._report import PassReport

logger = logging.getLogger(__name__)


def _fix_input_shapes(graph: ir.Graph, input_shapes: Mapping[str, Sequence[int]]) -> int:
    """Sets the given inputs' shapes; returns the number of dims that were not already those numbers."""
    inputs = {value.name: value for value in graph.inputs}
    changed = 0
    for name, dims in input_shapes.items():
        if name not in inputs:
            raise ValueError(f"--input-shape names '{name}', which is not a graph input "
                             f"(inputs: {', '.join(inputs)})")
        value, dims = inputs[name], tuple(int(dim) for dim in dims)
        if value.shape is not None:
            if len(value.shape) != len(dims):
                raise ValueError(f"input '{name}' has rank {len(value.shape)}, the given shape {dims} has rank "
                                 f"{len(dims)}")
            for axis, (old, new) in enumerate(zip(value.shape, dims)):
                if isinstance(old, int) and old >= 0 and old != new:  # -1 marks a dynamic dim in some exports
                    raise ValueError(f"input '{name}' dim {axis} is fixed at {old}, the given shape says {new}")
            changed += sum(1 for old, new in zip(value.shape, dims) if old != new)
        else:
            changed += len(dims)
        value.shape = ir.Shape(dims)
    return changed


def _shaped_values(graph: ir.Graph) -> tuple[int, int]:
    """(values with a known shape, of which fully static) over node outputs."""
    shaped = static = 0
    for node in graph:
        for output in node.outputs:
            if output.shape is not None:
                shaped += 1
                static += all(isinstance(dim, int) for dim in output.shape)
    return shaped, static


_NON_TENSOR_TYPES = ("seq(", "optional(", "map(", "sparse_tensor(")


def _non_tensor_output(node: ir.Node, index: int, opsets: Mapping[str, int]) -> bool:
    """Whether the op's schema allows only sequence, optional, map or sparse types for this output."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    try:
        schema = onnx.defs.get_schema(node.op_type, opsets.get(domain, 1), domain)
    except onnx.defs.SchemaError:
        return False
    if not schema.outputs:
        return False
    formal = schema.outputs[min(index, len(schema.outputs) - 1)]
    allowed = next((constraint.allowed_type_strs for constraint in schema.type_constraints
                    if constraint.type_param_str == formal.type_str), [formal.type_str])
    return bool(allowed) and all(type_str.startswith(_NON_TENSOR_TYPES) for type_str in allowed)


def _non_tensor_values(model: ir.Model) -> list[tuple[ir.Value, object, object]]:
    """Node outputs of non-tensor types, with their types and shapes now."""
    opsets = dict(model.opset_imports)
    return [(value, value.type, value.shape)
            for node in ir.traversal.RecursiveGraphIterator(model.graph)
            for index, value in enumerate(node.outputs) if _non_tensor_output(node, index, opsets)]


_WINDOWED_POOLS = ("MaxPool", "AveragePool", "LpPool")


def _ort_output_shape(node: ir.Node) -> ir.Shape | None:
    """The output shape ONNX Runtime computes for a node whose rule onnx's inference does not follow
    (ortx.passes._ort_shapes: windowed pools, ConvTranspose with auto_pad SAME_*), else None; static spatial
    input dims only."""
    if node.domain not in ("", "ai.onnx") or not node.outputs or node.op_type not in (*_WINDOWED_POOLS,
                                                                                      "ConvTranspose"):
        return None
    shape, attributes = node.inputs[0].shape, node.attributes
    if shape is None or len(shape) < 3 or not all(isinstance(dim, int) for dim in list(shape)[2:]):
        return None
    spatial, in_sizes = len(shape) - 2, list(shape)[2:]
    auto_pad = attributes.get_string("auto_pad", "NOTSET")
    strides = list(attributes.get_ints("strides", [1] * spatial))
    if len(strides) != spatial:
        return None
    if node.op_type == "ConvTranspose":  # N and C as inferred (from W), the size in * stride
        out_shape = node.outputs[0].shape
        if auto_pad not in ("SAME_UPPER", "SAME_LOWER") or "output_shape" in attributes or out_shape is None:
            return None
        return ir.Shape(list(out_shape)[:2] + [size * stride for size, stride in zip(in_sizes, strides)])
    kernel = list(attributes.get_ints("kernel_shape", []))
    dilations = list(attributes.get_ints("dilations", [1] * spatial))
    pads = list(attributes.get_ints("pads", [0] * 2 * spatial))
    if not len(kernel) == len(dilations) == spatial or len(pads) != 2 * spatial:
        return None
    resolved = pool_pads(in_sizes, kernel, strides, pads, auto_pad)
    if resolved is None:
        return None
    begin, end = resolved
    ceil_mode = attributes.get_int("ceil_mode", 0)
    return ir.Shape(list(shape)[:2] + [  # N and C as the input's
        pool_output_size(in_sizes[axis], kernel[axis], strides[axis], begin[axis] + end[axis], dilations[axis],
                         begin[axis], ceil_mode) for axis in range(spatial)])


def _correct_to_onnxruntime_shapes(graph: ir.Graph, declared: dict[ir.Value, ir.Shape | None]) -> int:
    """Sets ONNX Runtime's output shape (_ort_output_shape) where onnx inferred another, and clears the inferred
    shapes downstream for the next inference (graph outputs back to their `declared` shapes); returns how many
    outputs it corrected."""
    corrected = {}
    for node in graph:
        shape = _ort_output_shape(node)
        for output in node.outputs if shape is not None else ():  # MaxPool's Indices output has Y's shape
            if output is not None and output.name and output.shape is not None and list(output.shape) != list(shape):
                corrected[output] = ir.Shape(list(shape))
    stack = list(corrected)
    seen = set()
    while stack:
        value = stack.pop()
        for consumer in value.consumers():
            for output in consumer.outputs:
                if output not in seen and output not in corrected:
                    seen.add(output)
                    stack.append(output)
                    output.shape = declared.get(output) if output.is_graph_output() else None
    for value, shape in corrected.items():
        value.shape = shape
    return len(corrected)


def run_shape_inference(model: ir.Model, *, check_type: bool = False, data_prop: bool = True) -> None:
    """onnx_ir's ShapeInferencePass (strict mode off; raises what it raises), then the non-tensor node outputs'
    types back as they were and the initializers it listed as graph inputs forgotten (model_io). Where onnx's rule
    disagrees with ONNX Runtime's (_ort_output_shape), those outputs get ORT's shapes and inference runs again from
    them (an opset-13 ceil_mode MaxPool inferred 8x8 where ORT computes 7x7: the session bound an 8x8 buffer to ORT's
    output and failed). Every pass that needs inferred shapes calls this, not the pass itself."""
    non_tensors = _non_tensor_values(model)
    inference = onnx_ir.passes.common.ShapeInferencePass(check_type=check_type, strict_mode=False,
                                                          data_prop=data_prop)
    declared = {value: value.shape for value in model.graph.outputs}
    try:
        inference(model)
        if _correct_to_onnxruntime_shapes(model.graph, declared):
            inference(model)
    finally:
        for value, value_type, shape in non_tensors:
            value.type, value.shape = value_type, shape
        forget_removed_graph_io(model)


def infer_shapes(model: ir.Model, *, input_shapes: Mapping[str, Sequence[int]] | None = None) -> PassReport:
    start = time.perf_counter()
    graph = model.graph
    notes: list[str] = []
    dims_fixed = _fix_input_shapes(graph, input_shapes) if input_shapes else 0
    if dims_fixed:
        # Intermediate shapes recorded with the old symbolic dims would be merged with, not replaced by, the new
        # inference; drop them (graph outputs keep their declared shapes, which inference refines).
        for node in graph:
            for output in node.outputs:
                if not output.is_graph_output():
                    output.shape = None
    shaped_before, static_before = _shaped_values(graph)
    try:
        run_shape_inference(model)
    except Exception as error:  # inference is best effort; later passes check the shapes they rely on
        notes.append(f"<model>: shape inference failed: {type(error).__name__}: {error}")
    shaped_after, static_after = _shaped_values(graph)
    counts = {"dims_fixed": dims_fixed, "values_shaped": max(shaped_after - shaped_before, 0),
              "values_made_static": max(static_after - static_before, 0)}
    for note in notes:
        logger.debug(note)
    return PassReport(model, name="infer_shapes", counts=counts, notes=notes, seconds=time.perf_counter() - start)
