"""The NPU compiler: claimed nodes -> one command stream (ortx/npu/stream.py), the DRAM image and its layout.

1. DRAM (ortx/npu/dram.py): constants (weight matrices [M][K] row-major, int32 biases, fp32 multipliers) in
   region 0; the tensors the segment reads and writes in region 1 at offsets the memory planner reuses.
2. Each node lowers to work items (loads, compute, stores) run double-buffered (ortx/npu/schedule.py):
   Case QConv (ai.ortx, fuse_qdq's int8 Conv/Gemm/MatMul): a tiled GEMM (ortx/npu/gemm.py); REQUANT with
   integer.py's arithmetic (float output with residual and Relu/Clip as the CPU kernel).
   Case QuantizeLinear / DequantizeLinear / Add / Relu / Clip: VECTOR over chunks.
   Case MaxPool: POOL over chunks of whole channel planes.  Case Flatten: an alias of its input's bytes.
   Case QAveragePool (ai.ortx, fuse_qdq's int8 AveragePool/GlobalAveragePool): POOL_AVG over chunks of whole
   channel planes, its (m0, shift) divisor table (kernels/qpool.h) loaded into each slot once.
3. Per node the command range is recorded (Layer), so the simulator's timeline gives per-layer cycles.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from ortx.ep.lowering._values import NotStatic, attribute, numpy_dtype, static_shape, string_attribute
from ortx.ep.lowering.conv import Declined
from ortx.ep.lowering.elementwise import _clip_bounds
from ortx.ep.lowering.pool import _window_plan
from ortx.ep.lowering.qdq import _dequantize_plan, _qconv_plan, _quantize_plan
from ortx.ep.lowering.qpool import qpool_plan
from ortx.ep.macs import node_macs
from ortx.npu.dram import ALIGN, Dram, NpuUnsupported, TensorPlace, aligned, plan_work
from ortx.npu.gemm import QCONV_FIELDS, lower_qconv
from ortx.npu.params import DEFAULT_PARAMS, NpuParams
from ortx.npu.schedule import WorkItem, double_buffered
from ortx.npu.stream import ACTIVATIONS, KINDS, Stream, command, encode
from ortx.quantization.integer import INT_RANGES

ELEMENTWISE_OPS = ("QuantizeLinear", "DequantizeLinear", "Add", "Relu", "Clip")


@dataclasses.dataclass(frozen=True)
class Layer:
    node: str
    op_type: str
    first_command: int
    end_command: int  # one past the last
    macs: int  # the node's own multiply-accumulates (a depthwise conv's block-diagonal zeros are not counted)


@dataclasses.dataclass(frozen=True)
class CompiledStream:
    stream: bytes
    constants: np.ndarray  # uint8, DRAM region 0
    work_bytes: int
    inputs: tuple[TensorPlace, ...]
    outputs: tuple[TensorPlace, ...]
    layers: tuple[Layer, ...]
    params: NpuParams

    @property
    def macs(self) -> int:
        return sum(layer.macs for layer in self.layers)


# Checks ---------------------------------------------------------------------------------------------------------
def _check_qconv(node: ir.Node, params: NpuParams) -> str | None:
    try:
        plan = _qconv_plan(node)
    except (Declined, NotStatic) as error:
        return f"QConv: {error}"
    fields = dict(zip(QCONV_FIELDS, plan.ints))
    if fields["output_kind"] == KINDS["float32"] and fields["activation"] not in ACTIVATIONS.values():
        return f"QConv: activation {string_attribute(node, 'activation', '')!r} (the vector unit has Relu, Clip)"
    return None


def _check_elementwise(node: ir.Node) -> str | None:
    try:
        if node.op_type == "QuantizeLinear":
            _quantize_plan(node)
        elif node.op_type == "DequantizeLinear":
            _dequantize_plan(node)
            if numpy_dtype(node.inputs[0]).name not in INT_RANGES:
                return "DequantizeLinear: input dtype int32 (uint8 or int8 only)"
        else:
            operands = [value for value in node.inputs[:2 if node.op_type == "Add" else 1]]
            for value in operands + [node.outputs[0]]:
                if numpy_dtype(value) != np.float32:
                    return f"{node.op_type}: {value.name!r} is {numpy_dtype(value)} (float32 only)"
                if static_shape(value) != static_shape(node.outputs[0]):
                    return f"{node.op_type}: broadcasting {value.name!r} is not supported"
            if node.op_type == "Clip" and isinstance(_clip_bounds(node), str):
                return _clip_bounds(node)
    except (Declined, NotStatic) as error:
        return f"{node.op_type}: {error}"
    return None


def _check_max_pool(node: ir.Node, params: NpuParams) -> str | None:
    try:
        shape, out_shape = static_shape(node.inputs[0]), static_shape(node.outputs[0])
        dtype = numpy_dtype(node.inputs[0]).name
    except NotStatic as error:
        return f"MaxPool: {error}"
    if len(shape) != 4 or dtype not in ("uint8", "int8", "float32"):
        return f"MaxPool: input {shape} {dtype} (2-D pooling of uint8/int8/float32 only)"
    if len(node.outputs) > 1 and node.outputs[1] is not None and node.outputs[1].uses():
        return "MaxPool: the Indices output is used"
    if string_attribute(node, "auto_pad", "NOTSET") != "NOTSET" or int(attribute(node, "ceil_mode", 0)) or \
            any(d != 1 for d in attribute(node, "dilations", [1, 1])) or int(attribute(node, "storage_order", 0)):
        return "MaxPool: auto_pad, ceil_mode, dilations and storage_order are not supported"
    plane = (shape[2] * shape[3] + out_shape[2] * out_shape[3]) * np.dtype(dtype).itemsize
    if 4 * plane > params.sram_bytes:
        return f"MaxPool: one channel plane ({plane} bytes in and out) does not fit a quarter of the SRAM"
    return None


def _check_average_pool(node: ir.Node, params: NpuParams) -> str | None:
    try:
        plan = qpool_plan(node)
        shape, out_shape = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    except (Declined, NotStatic) as error:
        return f"QAveragePool: {error}"
    if len(shape) != 4:
        return f"QAveragePool: input rank {len(shape)} (2-D pooling only)"
    if string_attribute(node, "auto_pad", "NOTSET") != "NOTSET" or int(attribute(node, "ceil_mode", 0)) or \
            any(d != 1 for d in attribute(node, "dilations", [1, 1])):
        return "QAveragePool: auto_pad, ceil_mode and dilations are not supported"
    plane = shape[2] * shape[3] + out_shape[2] * out_shape[3]
    if 4 * (plane + plan.table.nbytes) > params.sram_bytes:
        return f"QAveragePool: one channel plane ({plane} bytes in and out) and the divisor table " \
               f"({plan.table.nbytes} bytes) do not fit a quarter of the SRAM"
    return None


def check_node(node: ir.Node, params: NpuParams = DEFAULT_PARAMS) -> str | None:
    """None when the NPU runs `node`, else the reason (naming the op and the attribute or tensor at fault)."""
    data = [node.inputs[index] for index in ((0, 8) if node.op_type == "QConv" else (0, 1) if node.op_type == "Add"
                                             else (0,)) if index < len(node.inputs) and node.inputs[index] is not None]
    constant = next((value.name for value in data if value.const_value is not None), None)
    if constant is not None:
        return f"{node.op_type}: input {constant!r} is a constant (the NPU reads computed tensors only)"
    if node.domain == "ai.ortx" and node.op_type == "QConv":
        return _check_qconv(node, params)
    if node.domain == "ai.ortx" and node.op_type == "QAveragePool":
        return _check_average_pool(node, params)
    if node.domain not in ("", "ai.onnx"):
        return f"{node.domain}::{node.op_type} is not an NPU op"
    if node.op_type in ELEMENTWISE_OPS:
        return _check_elementwise(node)
    if node.op_type == "MaxPool":
        return _check_max_pool(node, params)
    if node.op_type == "Flatten":
        try:
            static_shape(node.outputs[0])
            numpy_dtype(node.outputs[0])
        except NotStatic as error:
            return f"Flatten: {error}"
        return None
    return f"{node.op_type} is not an NPU op (int8 QConv, int8 QAveragePool, Quantize/DequantizeLinear, Add, Relu, " \
           f"Clip, MaxPool, Flatten)"


# Elementwise and pooling ----------------------------------------------------------------------------------------
def _vector_operands(node: ir.Node):
    """(op, [(value, scale, zero)], (scale, zero) of the output, activation code, p0, p1)."""
    if node.op_type == "QuantizeLinear":
        scale, zero = _quantize_plan(node)
        return "copy", [(node.inputs[0], 1.0, 0)], (scale, zero), 0, 0.0, 0.0
    if node.op_type == "DequantizeLinear":
        scale, zero = _dequantize_plan(node)
        return "copy", [(node.inputs[0], scale, zero)], (1.0, 0), 0, 0.0, 0.0
    if node.op_type == "Add":
        return "add", [(node.inputs[0], 1.0, 0), (node.inputs[1], 1.0, 0)], (1.0, 0), 0, 0.0, 0.0
    if node.op_type == "Relu":
        return "copy", [(node.inputs[0], 1.0, 0)], (1.0, 0), ACTIVATIONS["Relu"], 0.0, 0.0
    low, high = _clip_bounds(node)
    return "copy", [(node.inputs[0], 1.0, 0)], (1.0, 0), ACTIVATIONS["Clip"], low, high


def _lower_vector(node: ir.Node, dram: Dram, params: NpuParams):
    op, operands, (out_scale, out_zero), activation, p0, p1 = _vector_operands(node)
    places = [dram.tensor(value) for value, _, _ in operands]
    out = dram.tensor(node.outputs[0])
    sizes = [place.dtype.itemsize for place in places] + [out.dtype.itemsize]
    count = int(np.prod(out.shape, dtype=np.int64))
    chunk = max(ALIGN, params.sram_bytes // (2 * sum(sizes) + 2 * ALIGN) // ALIGN * ALIGN)
    chunk = min(chunk, count)
    low, high = INT_RANGES.get(out.dtype.name, (0, 0))
    items = []
    for first in range(0, count, chunk):
        size, slot = min(chunk, count - first), len(items) % 2
        item, areas, offset = WorkItem(), [], slot * params.sram_bytes // 2
        for place in places + [out]:
            areas.append(offset)
            offset += aligned(size * place.dtype.itemsize)
        for place, area in zip(places, areas):
            nbytes = size * place.dtype.itemsize
            item.loads.append(command("DMA_IN", region=1, dram=place.offset + first * place.dtype.itemsize,
                                      sram=area, rows=1, row_bytes=nbytes, dram_stride=nbytes, sram_stride=nbytes))
        second = operands[1] if len(operands) > 1 else operands[0]
        item.compute.append(command(
            "VECTOR", op=int(op == "add"), count=size, a=areas[0], a_kind=KINDS[places[0].dtype.name],
            a_scale_f=operands[0][1], a_zero=operands[0][2], b=areas[1] if len(places) > 1 else areas[0],
            b_kind=KINDS[places[-1].dtype.name], b_scale_f=second[1], b_zero=second[2], output=areas[-1],
            output_kind=KINDS[out.dtype.name], output_scale_f=out_scale, output_zero=out_zero, qmin=low, qmax=high,
            activation=activation, act_p0_f=p0, act_p1_f=p1))
        nbytes = size * out.dtype.itemsize
        item.stores.append(command("DMA_OUT", region=1, dram=out.offset + first * out.dtype.itemsize, sram=areas[-1],
                                   rows=1, row_bytes=nbytes, dram_stride=nbytes, sram_stride=nbytes))
        items.append(item)
    return double_buffered(items)


def _lower_max_pool(node: ir.Node, dram: Dram, params: NpuParams):
    source, out = dram.tensor(node.inputs[0]), dram.tensor(node.outputs[0])
    batch, channels, height, width = source.shape
    out_height, out_width = out.shape[2:]
    itemsize = source.dtype.itemsize
    kernel = list(attribute(node, "kernel_shape"))
    strides = list(attribute(node, "strides", [1, 1]))
    pads = list(attribute(node, "pads", [0, 0, 0, 0]))
    plane_in, plane_out = height * width * itemsize, out_height * out_width * itemsize
    per_slot = max(1, (params.sram_bytes // 2 - 2 * ALIGN) // (plane_in + plane_out))
    items = []
    for first in range(0, batch * channels, per_slot):
        count, slot = min(per_slot, batch * channels - first), len(items) % 2
        base = slot * params.sram_bytes // 2
        target = base + aligned(count * plane_in)
        item = WorkItem()
        item.loads.append(command("DMA_IN", region=1, dram=source.offset + first * plane_in, sram=base, rows=1,
                                  row_bytes=count * plane_in, dram_stride=count * plane_in,
                                  sram_stride=count * plane_in))
        item.compute.append(command(
            "POOL", mode=0, kind=KINDS[source.dtype.name], input=base, channels=count, height=height, width=width,
            kernel_h=kernel[0], kernel_w=kernel[1], stride_h=strides[0], stride_w=strides[1], pad_top=pads[0],
            pad_left=pads[1], out_height=out_height, out_width=out_width, output=target))
        item.stores.append(command("DMA_OUT", region=1, dram=out.offset + first * plane_out, sram=target, rows=1,
                                   row_bytes=count * plane_out, dram_stride=count * plane_out,
                                   sram_stride=count * plane_out))
        items.append(item)
    return double_buffered(items)


def _lower_average_pool(node: ir.Node, dram: Dram, params: NpuParams):
    plan = qpool_plan(node)
    source, out = dram.tensor(node.inputs[0]), dram.tensor(node.outputs[0])
    batch, channels, height, width = source.shape
    out_height, out_width = out.shape[2:]
    if string_attribute(node, "kind", "AveragePool") == "GlobalAveragePool":
        kernel, strides, begin, end = [height, width], [1, 1], [0, 0], [0, 0]
    else:
        window, _ = _window_plan(node)
        kernel, strides, begin, end = window["kernel"], window["strides"], window["begin"], window["end"]
    fields = dict(zip(("input_signed", "output_signed", "x_zero", "y_zero", "qmin", "qmax"), plan.ints[-8:-2]))
    table_offset = dram.constant(plan.table)
    table_bytes = aligned(plan.table.nbytes)
    plane_in, plane_out = height * width, out_height * out_width
    per_slot = max(1, (params.sram_bytes // 2 - table_bytes - 2 * ALIGN) // (plane_in + plane_out))
    items = []
    for first in range(0, batch * channels, per_slot):
        count, slot = min(per_slot, batch * channels - first), len(items) % 2
        base = slot * params.sram_bytes // 2
        source_area = base + table_bytes
        target = source_area + aligned(count * plane_in)
        item = WorkItem()
        if len(items) < 2:  # the table stays in its slot for the layer's later items
            item.loads.append(command("DMA_IN", region=0, dram=table_offset, sram=base, rows=1,
                                      row_bytes=plan.table.nbytes, dram_stride=plan.table.nbytes,
                                      sram_stride=plan.table.nbytes))
        item.loads.append(command("DMA_IN", region=1, dram=source.offset + first * plane_in, sram=source_area,
                                  rows=1, row_bytes=count * plane_in, dram_stride=count * plane_in,
                                  sram_stride=count * plane_in))
        item.compute.append(command(
            "POOL_AVG", input=source_area, input_kind=KINDS[source.dtype.name], channels=count, height=height,
            width=width, kernel_h=kernel[0], kernel_w=kernel[1], stride_h=strides[0], stride_w=strides[1],
            pad_top=begin[0], pad_left=begin[1], pad_bottom=end[0], pad_right=end[1],
            count_include_pad=int(attribute(node, "count_include_pad", 0)), out_height=out_height,
            out_width=out_width, input_zero=fields["x_zero"], output=target, output_kind=KINDS[out.dtype.name],
            output_zero=fields["y_zero"], qmin=fields["qmin"], qmax=fields["qmax"], table=base,
            count_base=plan.count_base, table_length=len(plan.table)))
        item.stores.append(command("DMA_OUT", region=1, dram=out.offset + first * plane_out, sram=target, rows=1,
                                   row_bytes=count * plane_out, dram_stride=count * plane_out,
                                   sram_stride=count * plane_out))
        items.append(item)
    return double_buffered(items)


def _lower_flatten(node: ir.Node, dram: Dram, params: NpuParams):
    source = dram.tensor(node.inputs[0])
    out = node.outputs[0]
    dram.places[out.name] = TensorPlace(out.name, source.offset, tuple(static_shape(out)), numpy_dtype(out))
    return []


def _lowering(node: ir.Node):
    if node.op_type == "QConv":
        return lower_qconv
    if node.op_type == "MaxPool":
        return _lower_max_pool
    if node.op_type == "QAveragePool":
        return _lower_average_pool
    if node.op_type == "Flatten":
        return _lower_flatten
    return _lower_vector


def lower(nodes: list[ir.Node], inputs: list[ir.Value], outputs: list[ir.Value],
          params: NpuParams = DEFAULT_PARAMS) -> tuple[Dram, list, list[Layer]]:
    """(the DRAM layout, the commands, the layers) of `nodes` in topological order, before encoding."""
    dram = Dram(*plan_work(nodes, inputs, outputs))
    for value in inputs:
        dram.tensor(value)
    commands, layers = [], []
    for node in nodes:
        reason = check_node(node, params)
        if reason is not None:
            raise NpuUnsupported(f"node {node.name!r} cannot run on the NPU: {reason}")
        first = len(commands)
        commands += _lowering(node)(node, dram, params)
        layers.append(Layer(node.name, node.op_type, first, len(commands), node_macs(node)))
    missing = [value.name for value in outputs if value.name not in dram.places]
    if missing:
        raise NpuUnsupported(f"outputs {missing} are not produced by the NPU segment's nodes or inputs")
    return dram, commands, layers


def compile_nodes(nodes: list[ir.Node], inputs: list[ir.Value], outputs: list[ir.Value],
                  params: NpuParams = DEFAULT_PARAMS) -> CompiledStream:
    """Nodes in topological order; `inputs` are what the caller passes to a run, `outputs` what it reads back."""
    dram, commands, layers = lower(nodes, inputs, outputs, params)
    stream = Stream(params, len(dram.constants), dram.work_bytes, tuple(commands))
    return CompiledStream(encode(stream), np.frombuffer(bytes(dram.constants), np.uint8).copy(), dram.work_bytes,
                          tuple(dram.places[v.name] for v in inputs), tuple(dram.places[v.name] for v in outputs),
                          tuple(layers), params)
