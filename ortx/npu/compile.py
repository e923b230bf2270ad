"""The NPU compiler: claimed nodes -> one command stream (ortx/npu/stream.py), the DRAM image and its layout.

1. DRAM: constants (weight matrices [M][K] row-major, int32 biases, fp32 multipliers) in region 0; every tensor
   the segment reads or writes gets its own 64-byte aligned range of the work region 1 (no reuse: a known limit).
2. Each node lowers to work items (loads, compute, stores) run double-buffered (ortx/npu/schedule.py):
   Case QConv (ai.ortx, fuse_qdq's int8 Conv/Gemm/MatMul): a GEMM acc[m][p] = sum_k w[m][k] (x[p][k] - zx) over
   tiles (mt, kt, pt) chosen by the cost model to fit SRAM twice; Conv activations are gathered by DMA_IM2COL,
   depthwise convs run as dense convs over chunks of C channels with block-diagonal weights; REQUANT on the last
   k tile (integer.py's arithmetic; float output with residual and Relu/Clip as the CPU kernel).
   Case QuantizeLinear / DequantizeLinear / Add / Relu / Clip: VECTOR over chunks.
   Case MaxPool: POOL over chunks of whole channel planes.  Case Flatten: an alias of its input's bytes.
3. Per node the command range is recorded (Layer), so the simulator's timeline gives per-layer cycles.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx_ir as ir

from ortx.ep.lowering._values import NotStatic, attribute, numpy_dtype, static_shape, string_attribute
from ortx.ep.lowering.conv import Declined
from ortx.ep.lowering.elementwise import _clip_bounds
from ortx.ep.lowering.qdq import _dequantize_plan, _qconv_plan, _quantize_plan
from ortx.ep.macs import node_macs
from ortx.npu.params import DEFAULT_PARAMS, NpuParams
from ortx.npu.schedule import WorkItem, double_buffered
from ortx.npu.stream import ACTIVATIONS, KINDS, NO_RESIDUAL, Stream, command, encode
from ortx.quantization.integer import INT_RANGES

ALIGN = 64
QCONV_FIELDS = ("batch", "in_channels", "in_height", "in_width", "out_channels", "out_height", "out_width",
                "kernel_h", "kernel_w", "stride_h", "stride_w", "pad_top", "pad_left", "dilation_h", "dilation_w",
                "group", "input_kind", "input_signed", "output_kind", "out_channel_stride", "out_pixel_stride",
                "out_image_stride", "has_residual", "activation", "x_zero", "y_zero", "qmin", "qmax")
ELEMENTWISE_OPS = ("QuantizeLinear", "DequantizeLinear", "Add", "Relu", "Clip")


class NpuUnsupported(ValueError):
    """A node the NPU cannot run; the message names the node and the reason."""


@dataclasses.dataclass(frozen=True)
class Layer:
    node: str
    op_type: str
    first_command: int
    end_command: int  # one past the last
    macs: int  # the node's own multiply-accumulates (a depthwise conv's block-diagonal zeros are not counted)


@dataclasses.dataclass(frozen=True)
class TensorPlace:
    name: str
    offset: int  # in the work region
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


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


def _aligned(size: int) -> int:
    return (size + ALIGN - 1) // ALIGN * ALIGN


class _Dram:
    def __init__(self):
        self.constants = bytearray()
        self.work_bytes = 0
        self.places: dict[str, TensorPlace] = {}

    def constant(self, array: np.ndarray) -> int:
        offset = len(self.constants)
        self.constants += np.ascontiguousarray(array).tobytes()
        self.constants += bytes(_aligned(len(self.constants)) - len(self.constants))
        return offset

    def tensor(self, value: ir.Value) -> TensorPlace:
        if value.name not in self.places:
            place = TensorPlace(value.name, self.work_bytes, tuple(static_shape(value)), numpy_dtype(value))
            self.places[value.name] = place
            self.work_bytes += _aligned(max(place.nbytes, 1))
        return self.places[value.name]


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


def check_node(node: ir.Node, params: NpuParams = DEFAULT_PARAMS) -> str | None:
    """None when the NPU runs `node`, else the reason (naming the op and the attribute or tensor at fault)."""
    if node.domain == "ai.ortx" and node.op_type == "QConv":
        return _check_qconv(node, params)
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
    return f"{node.op_type} is not an NPU op (int8 QConv, Quantize/DequantizeLinear, Add, Relu, Clip, MaxPool, " \
           f"Flatten)"


# QConv ----------------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Tiles:
    mt: int
    kt: int
    pt: int


def _tile_sram(tiles: Tiles, out_bytes: int, residual: bool) -> dict[str, int]:
    """SRAM offsets of one layer's buffers: two slots (weights, activations, bias, multiplier, residual), the
    int32 accumulators and two output buffers."""
    mt, kt, pt = tiles.mt, tiles.kt, tiles.pt
    parts = {"w": _aligned(mt * kt), "a": _aligned(pt * kt), "b": _aligned(4 * mt), "mu": _aligned(4 * mt),
             "r": _aligned(4 * mt * pt) if residual else 0}
    layout, offset = {}, 0
    for slot in (0, 1):
        for name, size in parts.items():
            layout[f"{name}{slot}"] = offset
            offset += size
    layout["acc"] = offset
    offset += _aligned(4 * mt * pt)
    for slot in (0, 1):
        layout[f"out{slot}"] = offset
        offset += _aligned(out_bytes * mt * pt)
    layout["end"] = offset
    return layout


def _estimate_cycles(tiles: Tiles, m: int, k: int, p: int, params: NpuParams) -> int:
    """The cycle model (kernels/npu_sim.c) applied to a tiling, roughly: items x max(DMA, MAC) per item."""
    items_m, items_k, items_p = math.ceil(m / tiles.mt), math.ceil(k / tiles.kt), math.ceil(p / tiles.pt)
    mac = math.ceil(tiles.mt / params.cols) * math.ceil(tiles.kt / params.rows) * \
        (tiles.pt + 2 * params.rows + params.cols - 2)
    weight_bytes = tiles.mt * tiles.kt if items_k > 1 else 0  # else loaded once per slot and m tile
    dma = 2 * params.dma_setup_cycles + (tiles.pt * tiles.kt + weight_bytes) // params.dma_bytes_per_cycle
    return items_m * items_k * items_p * max(mac, dma) + items_m * 2 * (tiles.mt * k // params.dma_bytes_per_cycle)


def choose_tiles(m: int, k: int, p: int, out_bytes: int, residual: bool, params: NpuParams) -> Tiles:
    """The tiling with the lowest estimated cycles among those whose buffers fit the SRAM."""
    ms = sorted({m} | {c * params.cols for c in (8, 4, 2, 1) if c * params.cols < m}, reverse=True)
    ks = sorted({k} | {c * params.rows for c in (64, 32, 16, 8, 4, 2, 1) if c * params.rows < k}, reverse=True)
    ps = sorted({min(p, size) for size in (2048, 1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1)}, reverse=True)
    best = None
    for kt in ks:
        for mt in ms:
            for pt in ps:
                tiles = Tiles(mt, kt, pt)
                if _tile_sram(tiles, out_bytes, residual)["end"] <= params.sram_bytes:
                    cost = _estimate_cycles(tiles, m, k, p, params)
                    if best is None or cost < best[0]:
                        best = (cost, tiles)
                    break  # smaller pt at this (kt, mt) only costs more passes
    if best is None:
        raise NpuUnsupported(f"no tiling of a {m}x{k}x{p} GEMM fits {params.sram_bytes} bytes of SRAM")
    return best[1]


@dataclasses.dataclass(frozen=True)
class _Chunk:
    in_channel: int   # first input channel (Conv) of the chunk
    in_channels: int
    out_channel: int
    weights: int      # DRAM constants offset of the [out_channels][k] matrix
    out_channels: int
    depth: int        # k


def _chunks(node: ir.Node, plan, fields: dict, dram: _Dram, params: NpuParams) -> list[_Chunk]:
    group, taps = fields["group"], fields["kernel_h"] * fields["kernel_w"]
    if group == 1:
        matrix = plan.weights[0]
        return [_Chunk(0, fields["in_channels"], 0, dram.constant(matrix), matrix.shape[0], matrix.shape[1])]
    chunks, width = [], params.cols  # depthwise: block-diagonal dense convs over `width` channels
    for first in range(0, group, width):
        count = min(width, group - first)
        matrix = np.zeros((count, count * taps), np.int8)
        for index in range(count):
            matrix[index, index * taps:(index + 1) * taps] = plan.weights[first + index, 0]
        chunks.append(_Chunk(first, count, first, dram.constant(matrix), count, count * taps))
    return chunks


class _SlotContents:
    """What each slot's weight/bias area holds, so an unchanged tile is not loaded again."""

    def __init__(self):
        self.keys: dict[tuple[str, int], object] = {}

    def needs(self, area: str, slot: int, key) -> bool:
        if self.keys.get((area, slot)) == key:
            return False
        self.keys[(area, slot)] = key
        return True


def _lower_qconv(node: ir.Node, dram: _Dram, params: NpuParams):
    plan = _qconv_plan(node)
    fields = dict(zip(QCONV_FIELDS, plan.ints))
    gemm = string_attribute(node, "kind", "Conv") == "Gemm"
    x, y = dram.tensor(node.inputs[0]), dram.tensor(node.outputs[0])
    residual = dram.tensor(node.inputs[8]) if plan.residual else None
    out_kind = fields["output_kind"]
    out_bytes = 4 if out_kind == KINDS["float32"] else 1
    bias = plan.bias
    if np.abs(bias).max(initial=0) >= 2 ** 31:
        raise NpuUnsupported(f"{node.name}: bias does not fit int32")
    bias_offset = dram.constant(bias.astype(np.int32))
    multiplier_offset = dram.constant(plan.multiplier.astype(np.float32))
    chunks = _chunks(node, plan, fields, dram, params)
    if gemm:
        shape = static_shape(node.inputs[0])
        batch, pixels = 1, int(np.prod(shape[:-1], dtype=np.int64))
    else:
        batch, pixels = fields["batch"], fields["out_height"] * fields["out_width"]
    channels_out = plan.weights.shape[0] * plan.weights.shape[1]
    items, contents = [], _SlotContents()
    # One tiling and SRAM layout for every chunk (the first is the largest): items of consecutive chunks share
    # phases, so their buffers must not move.
    tiles = choose_tiles(chunks[0].out_channels, chunks[0].depth, pixels, out_bytes, residual is not None, params)
    sram = _tile_sram(tiles, out_bytes, residual is not None)
    for chunk in chunks:
        for image in range(batch):
            for m0 in range(0, chunk.out_channels, tiles.mt):
                mt = min(tiles.mt, chunk.out_channels - m0)
                channel = chunk.out_channel + m0
                for p0 in range(0, pixels, tiles.pt):
                    pt = min(tiles.pt, pixels - p0)
                    for k0 in range(0, chunk.depth, tiles.kt):
                        kt = min(tiles.kt, chunk.depth - k0)
                        slot, last = len(items) % 2, k0 + kt == chunk.depth
                        item = WorkItem()
                        if contents.needs("w", slot, (chunk.weights, m0, k0)):
                            item.loads.append(command(
                                "DMA_IN", region=0, dram=chunk.weights + m0 * chunk.depth + k0, sram=sram[f"w{slot}"],
                                rows=mt, row_bytes=kt, dram_stride=chunk.depth, sram_stride=kt))
                        if last and contents.needs("b", slot, (bias_offset, channel)):
                            for area, base in (("b", bias_offset), ("mu", multiplier_offset)):
                                item.loads.append(command("DMA_IN", region=0, dram=base + 4 * channel,
                                                          sram=sram[f"{area}{slot}"], rows=1, row_bytes=4 * mt,
                                                          dram_stride=4 * mt, sram_stride=4 * mt))
                        if gemm:
                            item.loads.append(command(
                                "DMA_IN", region=1, dram=x.offset + p0 * chunk.depth + k0, sram=sram[f"a{slot}"],
                                rows=pt, row_bytes=kt, dram_stride=chunk.depth, sram_stride=kt))
                        else:
                            plane = fields["in_height"] * fields["in_width"]
                            item.loads.append(command(
                                "DMA_IM2COL", region=1,
                                dram=x.offset + (image * fields["in_channels"] + chunk.in_channel) * plane,
                                channels=chunk.in_channels, height=fields["in_height"], width=fields["in_width"],
                                kernel_h=fields["kernel_h"], kernel_w=fields["kernel_w"], stride_h=fields["stride_h"],
                                stride_w=fields["stride_w"], pad_top=fields["pad_top"], pad_left=fields["pad_left"],
                                dilation_h=fields["dilation_h"], dilation_w=fields["dilation_w"],
                                out_width=fields["out_width"], k0=k0, k_count=kt, p0=p0, p_count=pt,
                                sram=sram[f"a{slot}"], pad_value=fields["x_zero"] & 0xFF))
                        # Output tile layouts: Conv [mt][pt] into NCHW rows; Gemm [pt][mt] into [rows][M].
                        channel_stride, pixel_stride = (1, mt) if gemm else (pt, 1)
                        if gemm:
                            store = dict(dram=y.offset + out_bytes * (p0 * channels_out + channel), rows=pt,
                                         row_bytes=out_bytes * mt, dram_stride=out_bytes * channels_out)
                        else:
                            store = dict(dram=y.offset + out_bytes * ((image * channels_out + channel) * pixels + p0),
                                         rows=mt, row_bytes=out_bytes * pt, dram_stride=out_bytes * pixels)
                        if last and residual is not None:
                            item.loads.append(command(
                                "DMA_IN", region=1, dram=residual.offset + 4 * (store["dram"] - y.offset) // out_bytes,
                                sram=sram[f"r{slot}"], rows=store["rows"], row_bytes=4 * store["row_bytes"] // out_bytes,
                                dram_stride=4 * store["dram_stride"] // out_bytes,
                                sram_stride=4 * store["row_bytes"] // out_bytes))
                        item.compute.append(command(
                            "MAC_TILE", weights=sram[f"w{slot}"], weight_stride=kt, activations=sram[f"a{slot}"],
                            activation_stride=kt, acc=sram["acc"], acc_stride=pt, m=mt, k=kt, p=pt,
                            accumulate=int(k0 > 0), activation_kind=fields["input_signed"],
                            activation_zero=fields["x_zero"]))
                        if last:
                            item.compute.append(command(
                                "REQUANT", acc=sram["acc"], acc_stride=pt, m=mt, p=pt, bias=sram[f"b{slot}"],
                                multiplier=sram[f"mu{slot}"], output=sram[f"out{slot}"],
                                channel_stride=channel_stride, pixel_stride=pixel_stride, output_kind=out_kind,
                                zero_point=fields["y_zero"], qmin=fields["qmin"], qmax=fields["qmax"],
                                residual=sram[f"r{slot}"] if residual is not None else NO_RESIDUAL,
                                activation=fields["activation"] if out_kind == KINDS["float32"] else 0,
                                act_p0_f=plan.activation_params[0], act_p1_f=plan.activation_params[1]))
                            item.stores.append(command("DMA_OUT", region=1, sram=sram[f"out{slot}"],
                                                       sram_stride=store["row_bytes"], **store))
                        items.append(item)
    return double_buffered(items)


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


def _lower_vector(node: ir.Node, dram: _Dram, params: NpuParams):
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
            offset += _aligned(size * place.dtype.itemsize)
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


def _lower_max_pool(node: ir.Node, dram: _Dram, params: NpuParams):
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
        target = base + _aligned(count * plane_in)
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


def _lower_flatten(node: ir.Node, dram: _Dram, params: NpuParams):
    source = dram.tensor(node.inputs[0])
    out = node.outputs[0]
    dram.places[out.name] = TensorPlace(out.name, source.offset, tuple(static_shape(out)), numpy_dtype(out))
    return []


def _lowering(node: ir.Node):
    if node.op_type == "QConv":
        return _lower_qconv
    if node.op_type == "MaxPool":
        return _lower_max_pool
    if node.op_type == "Flatten":
        return _lower_flatten
    return _lower_vector


def compile_nodes(nodes: list[ir.Node], inputs: list[ir.Value], outputs: list[ir.Value],
                  params: NpuParams = DEFAULT_PARAMS) -> CompiledStream:
    """Nodes in topological order; `inputs` are what the caller passes to a run, `outputs` what it reads back."""
    dram = _Dram()
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
    stream = Stream(params, len(dram.constants), dram.work_bytes, tuple(commands))
    return CompiledStream(encode(stream), np.frombuffer(bytes(dram.constants), np.uint8).copy(), dram.work_bytes,
                          tuple(dram.places[v.name] for v in inputs), tuple(dram.places[v.name] for v in outputs),
                          tuple(layers), params)
