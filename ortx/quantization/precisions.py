"""Per-layer precision formats: each a rewrite of one Conv/Gemm/MatMul whose weight is a float32 initializer.

Case fp32: unchanged.
Case fp16: W -> Cast(W_fp16, to=float): half the weight bytes. ORT folds the Cast at session creation, so it
    computes in fp32 on fp16-rounded weights. A weight beyond fp16's range (|w| > 65504) cannot take it.
Case bf16: W -> Cast(W_bf16, to=float), likewise (ORT 1.32's CPU EP runs Cast from bfloat16).
Case int8: the activation input and the weight through QDQ (plan.py / insert_qdq.py: per-channel symmetric int8
    weights, int32 bias); all int8 layers of a model are written together so that shared scales stay shared.
Case int4: weight-only, W -> DequantizeLinear(W_int4, scale) at opset >= 21, symmetric in [-7, 7]. MatMul/Gemm:
    blocked along K with `block_size` (0: one scale per output channel); ORT fuses DequantizeLinear + MatMul into
    its MatMulNBits kernel. Conv: one scale per output channel (axis 0) always; blocking along the input channels
    would need a scale per (output channel, block, kh, kw) and ORT has no int4 conv kernel to gain from it.
Limits: a layer is a node whose input 0 is an activation and input 1 a float32 initializer (Gemm with a constant
A, Constant-node weights and activation x activation MatMuls stay fp32). Biases stay fp32 except under int8.
"""
from __future__ import annotations

import dataclasses
import functools

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

from ortx.quantization.insert_qdq import _Names, _remove_unread_initializers
from ortx.quantization.scales import MIN_SCALE

PRECISIONS = ("fp32", "fp16", "bf16", "int8", "int4")
WEIGHT_ONLY = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}
INT4_LIMIT = 7                 # symmetric like the int8 weights' [-127, 127]: -8 would have no positive mirror
INT4_MIN_OPSET = 21            # DequantizeLinear of int4 and block_size arrived in opset 21
DEFAULT_BLOCK_SIZE = 32        # MatMulNBits' common block (ORT's quantizers default to 32 or 128)
LAYER_OPS = ("Conv", "Gemm", "MatMul")


class PrecisionError(ValueError):
    """A precision cannot be applied to a layer or the model; the message names the precision and the node."""


@dataclasses.dataclass(frozen=True)
class Layer:
    node: str
    op_type: str
    weight: str                 # the float32 initializer at input 1
    shape: tuple[int, ...]
    bias: str | None            # a float32 initializer at input 2 (Conv/Gemm)
    output_axis: int            # the weight's output-channel axis
    reduction_axis: int | None  # the weight's K axis (MatMul/Gemm), None for Conv

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1


def _attribute(node: onnx.NodeProto, name: str, default):
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def default_opset(model: onnx.ModelProto) -> int:
    return next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), 0)


def find_layers(model: onnx.ModelProto) -> list[Layer]:
    """Every node that can take a precision, in graph order."""
    initializers = {tensor.name: tensor for tensor in model.graph.initializer}
    layers = []
    for node in model.graph.node:
        if node.op_type not in LAYER_OPS or len(node.input) < 2 or node.input[0] in initializers:
            continue
        weight = initializers.get(node.input[1])
        if weight is None or weight.data_type != onnx.TensorProto.FLOAT or len(weight.dims) < 2:
            continue
        rank = len(weight.dims)
        if node.op_type == "Conv":
            output_axis, reduction_axis = 0, None
        elif node.op_type == "Gemm":
            transposed = _attribute(node, "transB", 0)
            output_axis, reduction_axis = (0, 1) if transposed else (1, 0)
        else:
            output_axis, reduction_axis = rank - 1, rank - 2
        bias = node.input[2] if len(node.input) > 2 and node.input[2] in initializers else None
        if bias is not None and initializers[bias].data_type != onnx.TensorProto.FLOAT:
            bias = None
        layers.append(Layer(node.name, node.op_type, weight.name, tuple(weight.dims), bias, output_axis,
                            reduction_axis))
    return layers


def int4_weight(values: np.ndarray, layer: Layer, block_size: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """(int8 array of int4 values, float32 scale, DequantizeLinear attributes) for the layer's weight."""
    values = np.asarray(values, np.float32)
    blocked = layer.reduction_axis is not None and block_size > 0
    if not blocked:
        axis = layer.output_axis
        reduce_axes = tuple(index for index in range(values.ndim) if index != axis)
        scale = np.max(np.abs(values), axis=reduce_axes) / np.float32(INT4_LIMIT)
        scale = np.maximum(scale, np.float32(MIN_SCALE)).astype(np.float32)
        shape = [1] * values.ndim
        shape[axis] = scale.size
        full_scale = scale.reshape(shape)
        attributes = {"axis": axis}
    else:
        axis = layer.reduction_axis
        length = values.shape[axis]
        blocks = -(-length // block_size)
        padded = np.concatenate([values, np.zeros_like(np.take(values, [0] * (blocks * block_size - length), axis))],
                                axis=axis) if blocks * block_size != length else values
        moved = np.moveaxis(padded, axis, -1)
        grouped = moved.reshape(*moved.shape[:-1], blocks, block_size)
        scale = np.max(np.abs(grouped), axis=-1) / np.float32(INT4_LIMIT)
        scale = np.moveaxis(np.maximum(scale, np.float32(MIN_SCALE)).astype(np.float32), -1, axis)
        full_scale = np.take(np.repeat(scale, block_size, axis=axis), np.arange(length), axis=axis)
        attributes = {"axis": axis, "block_size": block_size}
    quantized = np.clip(np.rint(values / full_scale), -INT4_LIMIT, INT4_LIMIT).astype(np.int8)
    return quantized, scale, attributes


def dequantize_int4(quantized: np.ndarray, scale: np.ndarray, attributes: dict) -> np.ndarray:
    """The numpy reference of DequantizeLinear for int4_weight's output."""
    axis = attributes["axis"]
    if "block_size" in attributes:
        length = quantized.shape[axis]
        full_scale = np.take(np.repeat(scale, attributes["block_size"], axis=axis), np.arange(length), axis=axis)
    else:
        shape = [1] * quantized.ndim
        shape[axis] = scale.size
        full_scale = scale.reshape(shape)
    return (quantized.astype(np.float32) * full_scale).astype(np.float32)


def store_weight(model: onnx.ModelProto, layer: Layer, precision: str, *, block_size: int = DEFAULT_BLOCK_SIZE,
                 names: _Names | None = None) -> None:
    """Rewrites the layer's weight in place to fp16/bf16 storage + Cast, or int4 + DequantizeLinear (Case fp16,
    bf16, int4 of the module docstring); the fp32 initializer is removed when nothing else reads it."""
    if precision == "fp32":
        return
    if precision not in ("fp16", "bf16", "int4"):
        raise PrecisionError(f"store_weight handles fp16, bf16 and int4 weights, not {precision!r} "
                             f"(node '{layer.node}')")
    graph = model.graph
    names = names or _Names(graph)
    node = next(node for node in graph.node if node.name == layer.node)
    initializer = next(tensor for tensor in graph.initializer if tensor.name == node.input[1])
    values = numpy_helper.to_array(initializer)
    output = names.fresh(f"{initializer.name}_{precision}_float")
    if precision in WEIGHT_ONLY:
        largest = float(np.max(np.abs(values))) if values.size else 0.0
        if not largest <= float(ml_dtypes.finfo(WEIGHT_ONLY[precision]).max):
            raise PrecisionError(f"node '{layer.node}': weight '{initializer.name}' exceeds {precision}'s range "
                                 f"(max |w| {largest:.6g})")
        stored = values.astype(WEIGHT_ONLY[precision])
        stored_name = names.fresh(f"{initializer.name}_{precision}")
        graph.initializer.append(numpy_helper.from_array(stored, stored_name))
        new_node = onnx.helper.make_node("Cast", [stored_name], [output], to=onnx.TensorProto.FLOAT,
                                         name=names.fresh(f"{initializer.name}_Cast"))
    else:
        if default_opset(model) < INT4_MIN_OPSET:
            raise PrecisionError(f"int4 weights need opset >= {INT4_MIN_OPSET}; the model has opset "
                                 f"{default_opset(model)} (node '{layer.node}')")
        quantized, scale, attributes = int4_weight(values, layer, block_size)
        stored_name, scale_name = names.fresh(f"{initializer.name}_int4"), names.fresh(f"{initializer.name}_scale")
        graph.initializer.extend([numpy_helper.from_array(quantized.astype(ml_dtypes.int4), stored_name),
                                  numpy_helper.from_array(scale, scale_name)])
        new_node = onnx.helper.make_node("DequantizeLinear", [stored_name, scale_name], [output],
                                         name=names.fresh(f"{initializer.name}_DequantizeLinear"), **attributes)
    node.input[1] = output
    position = next(index for index, candidate in enumerate(graph.node) if candidate.name == layer.node)
    graph.node.insert(position, new_node)
    _remove_unread_initializers(graph, {initializer.name})


@functools.cache
def ort_support(precision: str) -> str | None:
    """None when ORT's CPU EP runs a MatMul whose weight is stored at `precision` (checked once per process on a
    tiny model against numpy), else the reason it does not."""
    import onnxruntime

    from ortx.model_io import to_ort_bytes

    if precision in ("fp32", "int8"):
        return None   # fp32 is the model itself; int8 is standard QDQ since opset 13
    if precision not in PRECISIONS:
        return f"unknown precision {precision!r}"
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((40, 8)).astype(np.float32)
    feed = rng.standard_normal((2, 40)).astype(np.float32)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")], "probe",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 40])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 8])],
        [numpy_helper.from_array(weight, "w")])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", INT4_MIN_OPSET)])
    layer = find_layers(model)[0]
    try:
        store_weight(model, layer, precision, block_size=16)
        session = onnxruntime.InferenceSession(to_ort_bytes(model), providers=["CPUExecutionProvider"])
        result = session.run(None, {"x": feed})[0]
    except Exception as error:  # onnxruntime raises its own exception types for unsupported ops and types
        return f"onnxruntime {onnxruntime.__version__} CPU cannot run it: {type(error).__name__}: {error}"
    expected = feed @ weight
    relative = float(np.linalg.norm(result - expected) / np.linalg.norm(expected))
    if not relative < 0.25:   # int4 on Gaussian weights is ~0.1; anything far beyond is a wrong kernel
        return (f"onnxruntime {onnxruntime.__version__} CPU runs it but its result is wrong (relative error "
                f"{relative:.3g})")
    return None
