"""Raises the default-domain opset to 17 when that is what stands between the model and a LayerNormalization fusion.

Before: opset 12 model with decomposed LayerNorms (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div)
After:  the same model at opset 17 (onnx.version_converter), so fuse_layer_normalization can emit the standard op;
        tensor Constants become initializers (as fold_constants would make them), holding the same tensors.
Why raise the opset rather than emit an ai.ortx op: the result stays standard ONNX that plain onnxruntime and
OrtxEP both run (OrtxEP lowers opset-17 LayerNormalization), and the converter keeps every op's semantics by
construction (it rewrites what changed, e.g. Squeeze axes to inputs, opset-12 Softmax's 2-D coercion to
Flatten/Softmax/Reshape). The Flatten/Softmax/Reshape it inserts is undone when the softmax axis is the last one
(then both semantics agree). Measured on PP-OCRv4 rec (opset 12): outputs differ by <= 1e-6 after the upgrade,
which is a float reassociation in ORT, not a semantic change (tests/passes/test_upgrade_opset.py).
Does not apply when: the opset is already >= 17; no decomposed LayerNorm is present (the opset is then left
alone: an upgrade only adds risk); the converter or onnx.checker fails on the converted model (note, model kept).
"""
from __future__ import annotations

import logging
import time

import onnx
import onnx.version_converter
import onnx_ir as ir
from onnx_ir.passes.common import LiftConstantsToInitializersPass

from ortx.passes._report import PassReport
from ortx.passes.fuse_layer_normalization import MIN_OPSET, default_opset

logger = logging.getLogger(__name__)

_SOFTMAX_FAMILY = ("Softmax", "LogSoftmax", "Hardmax")

# Initializers of this many bytes or more reach the converter as typed graph inputs, not data: converting, checking
# and inferring shapes each copy the whole serialized model several times (PP-OCRv4 rec, 10 MiB of weights: +67 MiB
# peak RSS), and no upgrade adapter reads a weight's values (upgrades move attributes to inputs, not the reverse).
WITHHELD_MIN_BYTES = 1024


def _producer_type(value: ir.Value | None) -> str | None:
    producer = value.producer() if value is not None else None
    return producer.op_type if producer is not None and producer.domain in ("", "ai.onnx") else None


def has_decomposed_layer_norm(graph: ir.Graph) -> bool:
    """Div(Sub(x, ReduceMean(x)), Sqrt(Add(ReduceMean(Pow|Mul(...)), eps))): the op-type skeleton only; the fusion
    checks the rest."""
    for node in graph:
        if node.op_type != "Div" or len(node.inputs) != 2 or _producer_type(node.inputs[1]) != "Sqrt":
            continue
        deviation, root = node.inputs[0].producer(), node.inputs[1].producer()
        if deviation is None or deviation.op_type != "Sub" or _producer_type(deviation.inputs[1]) != "ReduceMean":
            continue
        if _producer_type(root.inputs[0]) == "Add" and \
                _producer_type(root.inputs[0].producer().inputs[0]) == "ReduceMean":
            return True
    return False


def _restore_softmaxes(graph: ir.Graph) -> int:
    """Reshape(Softmax(Flatten(x, axis=rank-1), axis=-1), Shape(x)) -> Softmax(x, axis=-1); returns the count."""
    restored = 0
    for node in list(graph):
        if node.op_type not in _SOFTMAX_FAMILY or _producer_type(node.inputs[0]) != "Flatten":
            continue
        flatten = node.inputs[0].producer()
        source = flatten.inputs[0]
        uses = node.outputs[0].uses()
        if source.shape is None or flatten.attributes.get_int("axis", 1) != len(source.shape) - 1 \
                or node.attributes.get_int("axis", -1) not in (-1, 1) or len(uses) != 1:
            continue
        reshape = uses[0].node
        shape = reshape.inputs[1].producer() if reshape.op_type == "Reshape" and len(reshape.inputs) > 1 else None
        if shape is None or shape.op_type != "Shape" or shape.inputs[0] is not source or len(shape.attributes):
            continue
        node.replace_input_with(0, source)
        node.attributes["axis"] = ir.AttrInt64("axis", -1)
        output = reshape.outputs[0]
        if output.is_graph_output():
            index = graph.outputs.index(output)
            name = output.name
            output.name = f"{name}_reshaped"
            node.outputs[0].name = name
            graph.outputs[index] = node.outputs[0]
        output.replace_all_uses_with(node.outputs[0])
        node.outputs[0].shape = source.shape
        for dead in (reshape, shape, flatten):
            if not any(value.uses() or value.is_graph_output() for value in dead.outputs):
                graph.remove(dead, safe=True)
        restored += 1
    return restored


def _constant_count(model: ir.Model) -> int:
    return sum(node.op_type == "Constant" for node in ir.traversal.RecursiveGraphIterator(model.graph))


def _weightless_proto(model: ir.Model) -> tuple[onnx.ModelProto, dict[str, ir.Tensor], int]:
    """A proto of `model` with its tensor Constants as initializers and the initializers of WITHHELD_MIN_BYTES or
    more as graph inputs (type and shape, no data), those withheld tensors by name, and the Constants lifted.
    Works on a clone sharing the tensors, so `model` is unchanged and nothing is copied."""
    copy = model.clone()
    constants = _constant_count(copy)
    LiftConstantsToInitializersPass(size_limit=1)(copy)  # paddle2onnx stores every weight as a Constant node
    lifted = constants - _constant_count(copy)
    graph = copy.graph
    inputs = set(graph.inputs)
    withheld = {}
    for name, value in list(graph.initializers.items()):
        tensor = value.const_value
        if tensor is None or tensor.nbytes < WITHHELD_MIN_BYTES or value in inputs:
            continue
        withheld[name] = tensor
        value.shape = value.shape if value.shape is not None else tensor.shape
        value.dtype = value.dtype if value.dtype is not None else tensor.dtype
        graph.inputs.append(value)
        graph.initializers.pop(name)
        value.const_value = None
    return ir.serde.serialize_model(copy), withheld, lifted


def _give_back_weights(graph: ir.Graph, withheld: dict[str, ir.Tensor]) -> None:
    """Turns the graph inputs `_weightless_proto` made back into initializers holding the original tensors."""
    for value in [value for value in graph.inputs if value.name in withheld]:
        graph.inputs.remove(value)
        value.const_value = withheld[value.name]
        graph.register_initializer(value)


def upgrade_opset(model: ir.Model, *, target: int = MIN_OPSET) -> PassReport:
    start = time.perf_counter()
    current = default_opset(model)

    def report(counts, notes=()):
        return PassReport(model, name="upgrade_opset", counts=counts, notes=list(notes),
                          seconds=time.perf_counter() - start)

    if current >= target:
        return report({"opset_raised": 0})
    if not has_decomposed_layer_norm(model.graph):
        return report({"opset_raised": 0}, [f"<model>: opset {current} kept: no decomposed LayerNormalization"])
    try:
        weightless, withheld, lifted = _weightless_proto(model)
        converted = onnx.version_converter.convert_version(weightless, target)
        del weightless
        onnx.checker.check_model(converted)
        converted = onnx.shape_inference.infer_shapes(converted)
    except Exception as error:  # the converter has no adapter for some op or produced an invalid model
        return report({"opset_raised": 0}, [f"<model>: opset {current} kept: version conversion to {target} "
                                            f"failed: {type(error).__name__}: {str(error).splitlines()[0][:200]}"])
    upgraded = ir.serde.deserialize_model(converted)
    del converted
    _give_back_weights(upgraded.graph, withheld)
    restored = _restore_softmaxes(upgraded.graph)
    # In place for the caller: the model object keeps its identity, its graph and opsets are the converted ones.
    model.graph = upgraded.graph
    logger.debug("upgrade_opset: %d -> %d, %d softmaxes restored", current, target, restored)
    return report({"opset_raised": target - current, "softmaxes_restored": restored, "constants_lifted": lifted})
