"""Collapses QDQ compute patterns into ai.ortx::QConv (int8 kernels, ortx/ep/lowering/qdq.py) and QDQ average pools
into ai.ortx::QAveragePool (ortx/ep/lowering/qpool.py), for OrtxEP only.

Before: DQ(xq) -> Conv/Gemm/MatMul(., DQ(wq const), DQ(bias int32 const)) -> [Add(., r)] -> [Relu/Clip] -> [Q]
After:  ai.ortx::QConv(xq, sx, zx, wq, sw, bias, sy, zy, r) with a quantized output when the chain ends in Q (no
        residual), else a float output (residual and activation in the float epilogue; a later Q stays a step).
Before: DQ(xq) -> AveragePool/GlobalAveragePool -> Q    After: ai.ortx::QAveragePool(xq, sx, zx, sy, zy) with the
        pool's attributes and kind; both Q/DQ per-tensor with constant parameters, the pool's output read by Q only.
Then every DequantizeLinear of a constant that is still read (weights of a depthwise conv, a bias kept float) is
folded into a float initializer, so those consumers run as float ops between the DQ/Q steps.
Does not apply (a note names the node and the reason) when: x's DQ is per-axis or not constant-parameterized,
weights are not constant int8 with zero points 0 (asymmetric), per-channel along another axis than the output
channels, the conv is grouped but not depthwise, the bias is not int32 at scale sx*sw, Gemm has transA/alpha/beta != 1,
MatMul's weights are not 2-D, or an intermediate has another reader or is a graph output.
Not in DEFAULT_PASSES: plain onnxruntime cannot run ai.ortx ops; the pipeline runs it when OrtxEP compiles.
Each QConv lists the nodes it replaced in metadata_props["ortx.fused_from"].
"""
from __future__ import annotations

import logging
import time

import numpy as np
import onnx_ir as ir

from ortx.ep.lowering._values import NotStatic, attribute, constant_value, opset_version, static_shape
from ortx.ep.lowering.conv import Declined
from ortx.passes._report import PassReport, record_fused_from, unique_initializer_name

logger = logging.getLogger(__name__)

ORTX_DOMAIN = "ai.ortx"
# Node metadata: why a Conv/Gemm/MatMul fed by DequantizeLinear was not made int8 (the session's assignment shows it).
INT8_DECLINED_KEY = "ortx.int8_declined"
CONV_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
# The bias scale written by quantizers is fp32 sx * sw[m]; allow its last-bit differences.
BIAS_SCALE_RTOL = 1e-6


def _producer(value: ir.Value | None, op_type: str) -> ir.Node | None:
    node = value.producer() if value is not None else None
    return node if node is not None and node.op_type == op_type and node.domain in ("", "ai.onnx") else None


def _only_reader(value: ir.Value) -> ir.Node | None:
    """The single node reading `value` (None when several, none, or it is a graph output)."""
    if value.is_graph_output():
        return None
    readers = {id(node): node for node, _ in value.uses()}
    return next(iter(readers.values())) if len(readers) == 1 else None


def _input(node: ir.Node, index: int) -> ir.Value | None:
    return node.inputs[index] if index < len(node.inputs) else None


def _weights(node: ir.Node, dq: ir.Node, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(int8 weights as [M, ...] with output channels first, scale [M] or scalar)."""
    quantized, scale = constant_value(dq.inputs[0]), constant_value(_input(dq, 1))
    zero = constant_value(_input(dq, 2))
    if quantized is None or scale is None or quantized.dtype != np.int8:
        raise Declined(f"weights {dq.inputs[0].name!r} are not a constant int8 tensor")
    if zero is not None and np.any(zero != 0):
        raise Declined(f"weights {dq.inputs[0].name!r} are asymmetric (zero point != 0)")
    if int(attribute(dq, "block_size", 0)):
        raise Declined("blocked weight quantization")
    axis = int(attribute(dq, "axis", 1))
    axis = axis + quantized.ndim if axis < 0 else axis
    per_channel = scale.size > 1
    if kind == "Conv":
        if per_channel and axis != 0:
            raise Declined(f"conv weights quantized along axis {axis}, not the output channels")
        return quantized, scale.reshape(-1)
    if quantized.ndim != 2:
        raise Declined(f"weights of rank {quantized.ndim} (2-D only)")
    transposed = node.op_type == "Gemm" and int(attribute(node, "transB", 0))
    channel_axis = 0 if transposed else 1
    if per_channel and axis != channel_axis:
        raise Declined(f"weights quantized along axis {axis}, not the output features")
    matrix = quantized if transposed else quantized.T
    return np.ascontiguousarray(matrix), scale.reshape(-1)


def _bias(node: ir.Node, x_scale: np.ndarray, w_scale: np.ndarray, channels: int) -> ir.Value | None:
    value = _input(node, 2)
    if value is None:
        return None
    dq = _producer(value, "DequantizeLinear")
    if dq is None:
        raise Declined(f"bias {value.name!r} is not a DequantizeLinear of int32")
    quantized, scale, zero = constant_value(dq.inputs[0]), constant_value(_input(dq, 1)), constant_value(_input(dq, 2))
    if quantized is None or quantized.dtype != np.int32 or quantized.size != channels or scale is None:
        raise Declined(f"bias {dq.inputs[0].name!r} is not a constant int32 [{channels}]")
    if zero is not None and np.any(zero != 0):
        raise Declined(f"bias {dq.inputs[0].name!r} has a non-zero zero point")
    expected = np.float32(x_scale) * np.broadcast_to(w_scale.astype(np.float32), (channels,))
    if not np.allclose(np.broadcast_to(scale.reshape(-1), (channels,)), expected, rtol=BIAS_SCALE_RTOL, atol=0):
        raise Declined(f"bias scale of {dq.inputs[0].name!r} is not input scale x weight scale")
    return dq.inputs[0]


def _activation(node: ir.Node) -> tuple[str, list[float]] | None:
    if node.op_type == "Relu":
        return "Relu", []
    if node.op_type == "Clip":
        bounds = []
        for index, default in ((1, float(np.finfo(np.float32).min)), (2, float(np.finfo(np.float32).max))):
            value = _input(node, index)
            if value is None:
                bounds.append(default)
                continue
            array = constant_value(value)
            if array is None or array.size != 1:
                return None
            bounds.append(float(array.reshape(())))
        return "Clip", bounds
    return None


def _fuse_one(graph: ir.Graph, node: ir.Node, excluded: frozenset[str] = frozenset()) -> list[ir.Node]:
    """Replaces `node`'s pattern with a QConv; returns the nodes replaced. Raises Declined with the reason."""
    kind = "Conv" if node.op_type == "Conv" else "Gemm"
    if node.op_type == "Gemm":
        if int(attribute(node, "transA", 0)) or float(attribute(node, "alpha", 1.0)) != 1.0 or \
                float(attribute(node, "beta", 1.0)) != 1.0:
            raise Declined("Gemm with transA, alpha or beta != 1")
        if len(static_shape(node.inputs[0])) != 2:
            raise Declined("Gemm input is not 2-D")
    if node.op_type == "MatMul" and len(node.inputs) > 2:
        raise Declined("MatMul with more than two inputs")
    x_dq = _producer(node.inputs[0], "DequantizeLinear")
    w_dq = _producer(_input(node, 1), "DequantizeLinear")
    if x_dq is None or w_dq is None:
        raise Declined("input or weights are not DequantizeLinear outputs")
    x_scale, x_zero = constant_value(_input(x_dq, 1)), _input(x_dq, 2)
    if x_scale is None or x_scale.size != 1 or (x_zero is not None and constant_value(x_zero) is None):
        raise Declined("input DequantizeLinear is per-axis or its parameters are not constant")
    group = int(attribute(node, "group", 1))
    if kind == "Conv" and group != 1 and not group == static_shape(node.inputs[0])[1] == \
            static_shape(node.outputs[0])[1]:
        raise Declined("grouped conv that is not depthwise (weights are dequantized to float instead)")
    weights, w_scale = _weights(node, w_dq, kind)
    channels = weights.shape[0]
    if w_scale.size not in (1, channels):
        raise Declined(f"weight scale of size {w_scale.size} for {channels} channels")
    bias = _bias(node, x_scale.reshape(()), w_scale, channels) if node.op_type != "MatMul" else None
    if node.op_type == "Gemm" and bias is None and _input(node, 2) is not None:
        raise Declined("Gemm C is not a quantized bias")
    replaced, output = [node], node.outputs[0]
    residual = activation = quantize = None
    reader = _only_reader(output)
    if reader is not None and reader.op_type == "Add" and len(reader.inputs) == 2:
        other = reader.inputs[1] if reader.inputs[0] is output else reader.inputs[0]
        if other is not output and other.dtype == ir.DataType.FLOAT and other.shape == output.shape:
            residual, output = other, reader.outputs[0]
            replaced.append(reader)
            reader = _only_reader(output)
    if reader is not None and _activation(reader) is not None:
        activation = _activation(reader)
        output = reader.outputs[0]
        replaced.append(reader)
        reader = _only_reader(output)
    if reader is not None and reader.op_type == "QuantizeLinear" and residual is None:
        y_scale, y_zero = constant_value(_input(reader, 1)), _input(reader, 2)
        if y_scale is not None and y_scale.size == 1 and (y_zero is None or constant_value(y_zero) is not None) \
                and not int(attribute(reader, "block_size", 0)):
            quantize = reader
            output = reader.outputs[0]
            replaced.append(reader)
    touched = [n.name for n in replaced + [x_dq, w_dq] if n.name in excluded]
    if touched:
        raise Declined(f"{touched[0]} runs on ORT (given back)")
    weight_value = w_dq.inputs[0]
    if kind != "Conv" and not (node.op_type == "Gemm" and int(attribute(node, "transB", 0))):  # [K, M] -> [M, K]
        name = unique_initializer_name(graph, f"{weight_value.name}_rows")
        weight_value = ir.Value(name=name, shape=ir.Shape(weights.shape), type=ir.TensorType(ir.DataType.INT8),
                                const_value=ir.tensor(weights, name=name))
        graph.register_initializer(weight_value)
    scale_name = unique_initializer_name(graph, f"{w_dq.inputs[0].name}_channel_scale")
    scale_array = w_scale.astype(np.float32)
    scale_value = ir.Value(name=scale_name, shape=ir.Shape(scale_array.shape), type=ir.TensorType(ir.DataType.FLOAT),
                           const_value=ir.tensor(scale_array, name=scale_name))
    graph.register_initializer(scale_value)
    attributes = {"kind": kind}
    if kind == "Conv":
        attributes.update({name: node.attributes[name].value for name in CONV_ATTRIBUTES if name in node.attributes})
    if activation is not None:
        attributes["activation"] = activation[0]
        if activation[1]:
            attributes["activation_params"] = [float(v) for v in activation[1]]
    inputs = [x_dq.inputs[0], x_dq.inputs[1], _input(x_dq, 2), weight_value, scale_value, bias,
              quantize.inputs[1] if quantize else None, _input(quantize, 2) if quantize else None, residual]
    new_output = ir.Value(name=output.name, shape=output.shape, type=output.type)
    qconv = ir.Node(ORTX_DOMAIN, "QConv", inputs, ir.convenience.convert_attributes(attributes),
                    outputs=[new_output], name=f"{node.name}_qconv")
    from ortx.ep.lowering.qdq import _qconv_plan  # the lowering's own check: fuse only what it will claim

    try:
        _qconv_plan(qconv)
    except (Declined, NotStatic):
        for index in range(len(qconv.inputs)):
            qconv.replace_input_with(index, None)
        raise
    bias_dq = _producer(_input(node, 2), "DequantizeLinear") if bias is not None else None
    ir.convenience.replace_nodes_and_values(graph, replaced[-1], replaced, [qconv], [output], [new_output])
    removed = list(replaced)
    for dq in (x_dq, w_dq, bias_dq):
        if dq is not None and dq.graph is graph and not any(v.uses() or v.is_graph_output() for v in dq.outputs):
            graph.remove(dq, safe=True)
            removed.append(dq)
    record_fused_from(qconv, removed)
    return removed


POOL_ATTRIBUTES = ("auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides")


def _per_tensor_qdq(node: ir.Node | None) -> bool:
    """A Q/DQ with a constant scalar scale, a constant (or absent) zero point and no blocks."""
    if node is None or int(attribute(node, "block_size", 0)):
        return False
    scale, zero = constant_value(_input(node, 1)), _input(node, 2)
    return scale is not None and scale.size == 1 and (zero is None or constant_value(zero) is not None)


def _fuse_pool(graph: ir.Graph, node: ir.Node, excluded: frozenset[str]) -> list[ir.Node]:
    """Replaces DQ -> `node` (AveragePool/GlobalAveragePool) -> Q with a QAveragePool; returns the nodes replaced."""
    x_dq = _producer(node.inputs[0], "DequantizeLinear")
    reader = _only_reader(node.outputs[0])
    quantize = reader if reader is not None and reader.op_type == "QuantizeLinear" and \
        reader.domain in ("", "ai.onnx") else None
    if not _per_tensor_qdq(x_dq) or not _per_tensor_qdq(quantize):
        raise Declined("not DequantizeLinear -> pool -> QuantizeLinear with per-tensor constant parameters")
    if node.op_type == "AveragePool" and attribute(node, "dilations") is not None and opset_version(node) < 19:
        raise Declined("AveragePool: dilations before opset 19")
    touched = [n.name for n in (x_dq, node, quantize) if n.name in excluded]
    if touched:
        raise Declined(f"{touched[0]} runs on ORT (given back)")
    attributes = {"kind": node.op_type}
    attributes.update({name: node.attributes[name].value for name in POOL_ATTRIBUTES if name in node.attributes})
    output = quantize.outputs[0]
    inputs = [x_dq.inputs[0], x_dq.inputs[1], _input(x_dq, 2), quantize.inputs[1], _input(quantize, 2)]
    new_output = ir.Value(name=output.name, shape=output.shape, type=output.type)
    qpool = ir.Node(ORTX_DOMAIN, "QAveragePool", inputs, ir.convenience.convert_attributes(attributes),
                    outputs=[new_output], name=f"{node.name}_qpool")
    from ortx.ep.lowering.qpool import qpool_plan  # the lowering's own check: fuse only what it will claim

    try:
        qpool_plan(qpool)
    except (Declined, NotStatic):
        for index in range(len(qpool.inputs)):
            qpool.replace_input_with(index, None)
        raise
    replaced = [node, quantize]
    ir.convenience.replace_nodes_and_values(graph, quantize, replaced, [qpool], [output], [new_output])
    removed = list(replaced)
    if x_dq.graph is graph and not any(v.uses() or v.is_graph_output() for v in x_dq.outputs):
        graph.remove(x_dq, safe=True)
        removed.append(x_dq)
    record_fused_from(qpool, removed)
    return removed


def _fold_constant_dequantize(graph: ir.Graph, excluded: frozenset[str]) -> int:
    """Replaces each DequantizeLinear of constants that is still read by a float initializer (except `excluded`
    ones); returns the count."""
    folded = 0
    for node in list(graph):
        if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx") or node.name in excluded:
            continue
        quantized, scale = constant_value(node.inputs[0]), constant_value(_input(node, 1))
        zero = constant_value(_input(node, 2)) if _input(node, 2) is not None else np.zeros((), np.int32)
        if quantized is None or scale is None or zero is None or int(attribute(node, "block_size", 0)):
            continue
        axis = int(attribute(node, "axis", 1))
        shape = [1] * quantized.ndim
        if scale.size > 1:
            shape[axis] = scale.size
        values = ((quantized.astype(np.int64) - zero.reshape(shape if zero.size > 1 else ()).astype(np.int64))
                  .astype(np.float32) * scale.reshape(shape if scale.size > 1 else ()).astype(np.float32))
        output = node.outputs[0]
        if output.is_graph_output():
            continue
        name = unique_initializer_name(graph, f"{output.name}_folded")
        value = ir.Value(name=name, shape=ir.Shape(values.shape), type=ir.TensorType(ir.DataType.FLOAT),
                         const_value=ir.tensor(values.astype(np.float32), name=name))
        graph.register_initializer(value)
        output.replace_all_uses_with(value)
        graph.remove(node, safe=True)
        folded += 1
    return folded


def fuse_qdq(model: ir.Model, *, excluded: frozenset[str] = frozenset()) -> PassReport:
    """`excluded`: node names that must stay standard ONNX (given back to ORT): a pattern touching one is left alone."""
    start = time.perf_counter()
    graph = model.graph
    notes, fused, pools = [], 0, 0
    for node in list(graph):
        if node.graph is not graph or node.domain not in ("", "ai.onnx") or \
                node.op_type not in ("Conv", "Gemm", "MatMul", "AveragePool", "GlobalAveragePool"):
            continue
        if _producer(node.inputs[0], "DequantizeLinear") is None:
            continue  # a float op, not a QDQ pattern
        try:
            if node.op_type in ("AveragePool", "GlobalAveragePool"):
                _fuse_pool(graph, node, excluded)
                pools += 1
            else:
                _fuse_one(graph, node, excluded)
                fused += 1
        except (Declined, NotStatic) as error:
            notes.append(f"{node.name}: {error}")
            node.metadata_props[INT8_DECLINED_KEY] = f"runs fp32 on dequantized inputs, int8 declined: {error}"
    folded = _fold_constant_dequantize(graph, excluded)
    for note in notes:
        logger.debug("fuse_qdq: %s", note)
    counts = {"qconv_fused": fused, "qpool_fused": pools, "dequantize_folded": folded}
    return PassReport(model=model, name="fuse_qdq", counts=counts, notes=notes, seconds=time.perf_counter() - start)
