"""QConv (fuse_qdq's int8 Conv/Gemm/MatMul) on the MAC array: a GEMM acc[m][p] = sum_k w[m][k] (x[p][k] - zx).

1. Chunks: one per group-1 conv or Gemm ([M][K] weights); a depthwise conv becomes dense convs over chunks of `cols`
   channels with block-diagonal weights.
2. Tiles (mt, kt, pt): the lowest estimated cycles (the simulator's model) among tilings whose two slots (weights,
   activations, bias, multipliers, residual), int32 accumulators and two output buffers fit the SRAM; one tiling
   for all of a layer's chunks, since consecutive items share phases.
3. Work items in the order chunk, image, m tile, p tile, k tile: loads (weights unless the slot holds them,
   bias/multipliers on the last k tile, activations by DMA_IN rows (Gemm) or DMA_IM2COL (Conv), the fp32 residual
   tile), MAC_TILE accumulating over k, REQUANT on the last k tile, DMA_OUT.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx_ir as ir

from ortx.ep.lowering._values import static_shape, string_attribute
from ortx.ep.lowering.qdq import _qconv_plan
from ortx.npu.dram import Dram, NpuUnsupported, TensorPlace, aligned
from ortx.npu.params import NpuParams
from ortx.npu.schedule import WorkItem, double_buffered
from ortx.npu.stream import KINDS, NO_RESIDUAL, command

QCONV_FIELDS = ("batch", "in_channels", "in_height", "in_width", "out_channels", "out_height", "out_width",
                "kernel_h", "kernel_w", "stride_h", "stride_w", "pad_top", "pad_left", "dilation_h", "dilation_w",
                "group", "input_kind", "input_signed", "output_kind", "out_channel_stride", "out_pixel_stride",
                "out_image_stride", "has_residual", "activation", "x_zero", "y_zero", "qmin", "qmax")


@dataclasses.dataclass(frozen=True)
class Tiles:
    mt: int
    kt: int
    pt: int


def _tile_sram(tiles: Tiles, out_bytes: int, residual: bool) -> dict[str, int]:
    """SRAM offsets of one layer's buffers: two slots (weights, activations, bias, multiplier, residual), the
    int32 accumulators and two output buffers."""
    mt, kt, pt = tiles.mt, tiles.kt, tiles.pt
    parts = {"w": aligned(mt * kt), "a": aligned(pt * kt), "b": aligned(4 * mt), "mu": aligned(4 * mt),
             "r": aligned(4 * mt * pt) if residual else 0}
    layout, offset = {}, 0
    for slot in (0, 1):
        for name, size in parts.items():
            layout[f"{name}{slot}"] = offset
            offset += size
    layout["acc"] = offset
    offset += aligned(4 * mt * pt)
    for slot in (0, 1):
        layout[f"out{slot}"] = offset
        offset += aligned(out_bytes * mt * pt)
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


def _chunks(node: ir.Node, plan, fields: dict, dram: Dram, params: NpuParams) -> list[_Chunk]:
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


@dataclasses.dataclass(frozen=True)
class _QConvLayer:
    """One QConv's geometry, DRAM places and SRAM layout, shared by its work items."""
    fields: dict
    gemm: bool
    x: TensorPlace
    y: TensorPlace
    residual: TensorPlace | None
    out_kind: int
    out_bytes: int
    bias: int        # DRAM constants offsets of the int32 biases and fp32 multipliers
    multiplier: int
    batch: int
    pixels: int
    channels_out: int
    tiles: Tiles
    sram: dict
    activation_params: tuple[float, float]


def _qconv_layer(node: ir.Node, plan, chunks: list[_Chunk], dram: Dram, params: NpuParams) -> _QConvLayer:
    fields = dict(zip(QCONV_FIELDS, plan.ints))
    gemm = string_attribute(node, "kind", "Conv") == "Gemm"
    out_kind = fields["output_kind"]
    out_bytes = 4 if out_kind == KINDS["float32"] else 1
    if np.abs(plan.bias).max(initial=0) >= 2 ** 31:
        raise NpuUnsupported(f"{node.name}: bias does not fit int32")
    if gemm:
        batch, pixels = 1, int(np.prod(static_shape(node.inputs[0])[:-1], dtype=np.int64))
    else:
        batch, pixels = fields["batch"], fields["out_height"] * fields["out_width"]
    residual = dram.tensor(node.inputs[8]) if plan.residual else None
    # One tiling and SRAM layout for every chunk (the first is the largest): items of consecutive chunks share
    # phases, so their buffers must not move.
    tiles = choose_tiles(chunks[0].out_channels, chunks[0].depth, pixels, out_bytes, residual is not None, params)
    return _QConvLayer(fields, gemm, dram.tensor(node.inputs[0]), dram.tensor(node.outputs[0]), residual, out_kind,
                       out_bytes, dram.constant(plan.bias.astype(np.int32)),
                       dram.constant(plan.multiplier.astype(np.float32)), batch, pixels,
                       plan.weights.shape[0] * plan.weights.shape[1], tiles,
                       _tile_sram(tiles, out_bytes, residual is not None), tuple(plan.activation_params))


def _activation_load(layer: _QConvLayer, chunk: _Chunk, image: int, p0: int, pt: int, k0: int, kt: int, slot: int):
    """Case Gemm: rows of x [P][K] by DMA_IN; Case Conv: the im2col tile gathered by DMA_IM2COL."""
    fields, target = layer.fields, layer.sram[f"a{slot}"]
    if layer.gemm:
        return command("DMA_IN", region=1, dram=layer.x.offset + p0 * chunk.depth + k0, sram=target, rows=pt,
                       row_bytes=kt, dram_stride=chunk.depth, sram_stride=kt)
    plane = fields["in_height"] * fields["in_width"]
    return command(
        "DMA_IM2COL", region=1, dram=layer.x.offset + (image * fields["in_channels"] + chunk.in_channel) * plane,
        channels=chunk.in_channels, height=fields["in_height"], width=fields["in_width"],
        kernel_h=fields["kernel_h"], kernel_w=fields["kernel_w"], stride_h=fields["stride_h"],
        stride_w=fields["stride_w"], pad_top=fields["pad_top"], pad_left=fields["pad_left"],
        dilation_h=fields["dilation_h"], dilation_w=fields["dilation_w"], out_width=fields["out_width"], k0=k0,
        k_count=kt, p0=p0, p_count=pt, sram=target, pad_value=fields["x_zero"] & 0xFF)


def _output_tile(layer: _QConvLayer, image: int, channel: int, mt: int, p0: int, pt: int) -> dict:
    """Where an output tile goes: Conv tiles are [mt][pt] (rows of NCHW planes), Gemm tiles [pt][mt]."""
    size = layer.out_bytes
    if layer.gemm:
        return dict(dram=layer.y.offset + size * (p0 * layer.channels_out + channel), rows=pt, row_bytes=size * mt,
                    dram_stride=size * layer.channels_out)
    return dict(dram=layer.y.offset + size * ((image * layer.channels_out + channel) * layer.pixels + p0), rows=mt,
                row_bytes=size * pt, dram_stride=size * layer.pixels)


def _qconv_item(layer: _QConvLayer, chunk: _Chunk, image: int, m0: int, p0: int, k0: int, slot: int,
                contents: _SlotContents) -> WorkItem:
    tiles, sram, fields = layer.tiles, layer.sram, layer.fields
    mt, pt, kt = (min(tiles.mt, chunk.out_channels - m0), min(tiles.pt, layer.pixels - p0),
                  min(tiles.kt, chunk.depth - k0))
    channel, last = chunk.out_channel + m0, k0 + kt == chunk.depth
    item = WorkItem()
    if contents.needs("w", slot, (chunk.weights, m0, k0)):
        item.loads.append(command("DMA_IN", region=0, dram=chunk.weights + m0 * chunk.depth + k0, sram=sram[f"w{slot}"],
                                  rows=mt, row_bytes=kt, dram_stride=chunk.depth, sram_stride=kt))
    if last and contents.needs("b", slot, channel):
        for area, base in (("b", layer.bias), ("mu", layer.multiplier)):
            item.loads.append(command("DMA_IN", region=0, dram=base + 4 * channel, sram=sram[f"{area}{slot}"],
                                      rows=1, row_bytes=4 * mt, dram_stride=4 * mt, sram_stride=4 * mt))
    item.loads.append(_activation_load(layer, chunk, image, p0, pt, k0, kt, slot))
    store = _output_tile(layer, image, channel, mt, p0, pt)
    if last and layer.residual is not None:  # float output: the residual tile has the output's layout in fp32
        item.loads.append(command(
            "DMA_IN", region=1, dram=layer.residual.offset + store["dram"] - layer.y.offset, sram=sram[f"r{slot}"],
            rows=store["rows"], row_bytes=store["row_bytes"], dram_stride=store["dram_stride"],
            sram_stride=store["row_bytes"]))
    item.compute.append(command(
        "MAC_TILE", weights=sram[f"w{slot}"], weight_stride=kt, activations=sram[f"a{slot}"], activation_stride=kt,
        acc=sram["acc"], acc_stride=pt, m=mt, k=kt, p=pt, accumulate=int(k0 > 0),
        activation_kind=fields["input_signed"], activation_zero=fields["x_zero"]))
    if last:
        channel_stride, pixel_stride = (1, mt) if layer.gemm else (pt, 1)
        quantized = layer.out_kind != KINDS["float32"]
        item.compute.append(command(
            "REQUANT", acc=sram["acc"], acc_stride=pt, m=mt, p=pt, bias=sram[f"b{slot}"],
            multiplier=sram[f"mu{slot}"], output=sram[f"out{slot}"], channel_stride=channel_stride,
            pixel_stride=pixel_stride, output_kind=layer.out_kind, zero_point=fields["y_zero"], qmin=fields["qmin"],
            qmax=fields["qmax"], residual=NO_RESIDUAL if layer.residual is None else sram[f"r{slot}"],
            activation=0 if quantized else fields["activation"], act_p0_f=layer.activation_params[0],
            act_p1_f=layer.activation_params[1]))
        item.stores.append(command("DMA_OUT", region=1, sram=sram[f"out{slot}"], sram_stride=store["row_bytes"],
                                   **store))
    return item


def lower_qconv(node: ir.Node, dram: Dram, params: NpuParams):
    plan = _qconv_plan(node)
    chunks = _chunks(node, plan, dict(zip(QCONV_FIELDS, plan.ints)), dram, params)
    layer = _qconv_layer(node, plan, chunks, dram, params)
    tiles, items, contents = layer.tiles, [], _SlotContents()
    for chunk in chunks:
        for image in range(layer.batch):
            for m0 in range(0, chunk.out_channels, tiles.mt):
                for p0 in range(0, layer.pixels, tiles.pt):
                    for k0 in range(0, chunk.depth, tiles.kt):
                        items.append(_qconv_item(layer, chunk, image, m0, p0, k0, len(items) % 2, contents))
    return double_buffered(items)


