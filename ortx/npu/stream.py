"""The NPU command stream: a versioned binary format (docs/npu.md), its encoder, decoder and disassembler.

Layout (little-endian): a 64-byte header (magic "ORTXNPU\\0", version, header size, command count, the NpuParams,
the DRAM region sizes, the body's byte count and CRC-32), then the body: each command is a u16 opcode, a u16 word
count and that many int64 words, in the order OPCODES lists the fields (float fields hold float32 bit patterns).
kernels/npu_sim.c reads the same bytes. decode() rejects a stream whose magic, version, sizes, checksum, opcodes
or field counts are wrong, naming the byte offset.
"""
from __future__ import annotations

import dataclasses
import struct
import zlib

import numpy as np

from ortx.npu.params import NpuParams

MAGIC = b"ORTXNPU\x00"
VERSION = 1
HEADER = struct.Struct("<8sHHIHHIIIQQQII")  # 64 bytes
COMMAND_PREFIX = struct.Struct("<HH")

# Tensor element kinds in DRAM/SRAM (the kind fields of DMA_IM2COL, MAC_TILE, REQUANT, VECTOR, POOL).
KINDS = {"uint8": 0, "int8": 1, "float32": 2, "int32": 3}
KIND_NAMES = {code: name for name, code in KINDS.items()}
KIND_BYTES = {0: 1, 1: 1, 2: 4, 3: 4}
# DRAM regions: 0 constants (weights, biases, multipliers; read-only), 1 work (inputs, outputs, intermediates).
REGIONS = {"constants": 0, "work": 1}
ACTIVATIONS = {"": 0, "Relu": 1, "Clip": 3}  # kernels/activation.h's codes, the subset the vector unit has
VECTOR_OPS = {"copy": 0, "add": 1}
POOL_MODES = {"max": 0}
NO_RESIDUAL = -1

# opcode -> (name, field names); fields ending in "_f" are float32.
OPCODES = {
    1: ("DMA_IN", ("region", "dram", "sram", "rows", "row_bytes", "dram_stride", "sram_stride")),
    2: ("DMA_OUT", ("region", "dram", "sram", "rows", "row_bytes", "dram_stride", "sram_stride")),
    3: ("DMA_IM2COL", ("region", "dram", "channels", "height", "width", "kernel_h", "kernel_w", "stride_h",
                       "stride_w", "pad_top", "pad_left", "dilation_h", "dilation_w", "out_width", "k0", "k_count",
                       "p0", "p_count", "sram", "pad_value")),
    4: ("MAC_TILE", ("weights", "weight_stride", "activations", "activation_stride", "acc", "acc_stride", "m", "k",
                     "p", "accumulate", "activation_kind", "activation_zero")),
    5: ("REQUANT", ("acc", "acc_stride", "m", "p", "bias", "multiplier", "output", "channel_stride",
                    "pixel_stride", "output_kind", "zero_point", "qmin", "qmax", "residual", "activation",
                    "act_p0_f", "act_p1_f")),
    6: ("VECTOR", ("op", "count", "a", "a_kind", "a_scale_f", "a_zero", "b", "b_kind", "b_scale_f", "b_zero",
                   "output", "output_kind", "output_scale_f", "output_zero", "qmin", "qmax", "activation",
                   "act_p0_f", "act_p1_f")),
    7: ("POOL", ("mode", "kind", "input", "channels", "height", "width", "kernel_h", "kernel_w", "stride_h",
                 "stride_w", "pad_top", "pad_left", "out_height", "out_width", "output")),
    8: ("BARRIER", ()),
    9: ("POOL_AVG", ("input", "input_kind", "channels", "height", "width", "kernel_h", "kernel_w", "stride_h",
                     "stride_w", "pad_top", "pad_left", "pad_bottom", "pad_right", "count_include_pad", "out_height",
                     "out_width", "input_zero", "output", "output_kind", "output_zero", "qmin", "qmax", "table",
                     "count_base", "table_length")),
}
OPCODE_OF = {name: code for code, (name, _) in OPCODES.items()}
FIELDS_OF = {name: fields for name, fields in OPCODES.values()}


class NpuStreamError(ValueError):
    """A corrupt, truncated or inconsistent command stream."""


@dataclasses.dataclass(frozen=True)
class Command:
    op: str
    fields: dict

    def __post_init__(self):
        if self.op not in FIELDS_OF:
            raise NpuStreamError(f"unknown NPU command {self.op!r}; known: {', '.join(FIELDS_OF)}")
        expected = FIELDS_OF[self.op]
        if tuple(self.fields) != expected:
            missing = [name for name in expected if name not in self.fields]
            extra = [name for name in self.fields if name not in expected]
            if missing or extra:
                raise NpuStreamError(f"{self.op}: missing fields {missing}, unknown fields {extra}")
            object.__setattr__(self, "fields", {name: self.fields[name] for name in expected})


def command(name: str, /, **fields) -> Command:
    return Command(name, fields)


@dataclasses.dataclass(frozen=True)
class Stream:
    params: NpuParams
    constant_bytes: int
    work_bytes: int
    commands: tuple[Command, ...]


def _float_bits(value: float) -> int:
    return int(np.array(value, np.float32).view(np.int32))


def _bits_float(word: int) -> float:
    return float(np.array(word & 0xFFFFFFFF, np.uint32).view(np.float32))


def encode(stream: Stream) -> bytes:
    body = bytearray()
    for item in stream.commands:
        fields = FIELDS_OF[item.op]
        words = [_float_bits(item.fields[name]) if name.endswith("_f") else int(item.fields[name]) for name in fields]
        body += COMMAND_PREFIX.pack(OPCODE_OF[item.op], len(words))
        body += struct.pack(f"<{len(words)}q", *words)
    params = stream.params
    header = HEADER.pack(MAGIC, VERSION, HEADER.size, len(stream.commands), params.rows, params.cols,
                         params.sram_bytes, params.dma_bytes_per_cycle, params.dma_setup_cycles, params.clock_hz,
                         stream.constant_bytes, stream.work_bytes, len(body), zlib.crc32(bytes(body)))
    return header + bytes(body)


def decode(data: bytes) -> Stream:
    data = bytes(data)
    if len(data) < HEADER.size:
        raise NpuStreamError(f"NPU stream truncated: {len(data)} bytes, the header alone is {HEADER.size}")
    (magic, version, header_bytes, count, rows, cols, sram, dma_bytes, dma_setup, clock, constant_bytes,
     work_bytes, body_bytes, crc) = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise NpuStreamError(f"not an NPU stream: magic {magic!r} at byte 0, expected {MAGIC!r}")
    if version != VERSION:
        raise NpuStreamError(f"NPU stream version {version}; this ortx reads version {VERSION}")
    if header_bytes != HEADER.size:
        raise NpuStreamError(f"NPU stream header size {header_bytes} at byte 10, expected {HEADER.size}")
    if len(data) != HEADER.size + body_bytes:
        raise NpuStreamError(f"NPU stream truncated or padded: header says {body_bytes} body bytes, "
                             f"found {len(data) - HEADER.size}")
    body = data[HEADER.size:]
    if zlib.crc32(body) != crc:
        raise NpuStreamError(f"NPU stream corrupt: body CRC-32 {zlib.crc32(body):#010x} != header's {crc:#010x}")
    try:
        params = NpuParams(rows, cols, sram, dma_bytes, dma_setup, clock)
    except ValueError as error:
        raise NpuStreamError(f"NPU stream header: {error}") from None
    commands, offset = [], 0
    while offset < len(body):
        position = HEADER.size + offset
        if offset + COMMAND_PREFIX.size > len(body):
            raise NpuStreamError(f"NPU stream truncated inside the command at byte {position}")
        opcode, word_count = COMMAND_PREFIX.unpack_from(body, offset)
        if opcode not in OPCODES:
            raise NpuStreamError(f"unknown NPU opcode {opcode} at byte {position} (command {len(commands)})")
        name, fields = OPCODES[opcode]
        if word_count != len(fields):
            raise NpuStreamError(f"{name} at byte {position} has {word_count} fields, expected {len(fields)}")
        offset += COMMAND_PREFIX.size
        if offset + 8 * word_count > len(body):
            raise NpuStreamError(f"NPU stream truncated inside {name} at byte {position}")
        words = struct.unpack_from(f"<{word_count}q", body, offset)
        offset += 8 * word_count
        commands.append(Command(name, {field: _bits_float(word) if field.endswith("_f") else word
                                       for field, word in zip(fields, words)}))
    if len(commands) != count:
        raise NpuStreamError(f"NPU stream header says {count} commands, the body holds {len(commands)}")
    return Stream(params, constant_bytes, work_bytes, tuple(commands))


def _describe(value, name: str) -> str:
    if name.endswith("_f"):
        return f"{name[:-2]}={value:.9g}"
    if name in ("sram", "acc", "weights", "activations", "bias", "multiplier", "output", "input", "a", "b",
                "table") or \
            (name == "residual" and value != NO_RESIDUAL):
        return f"{name}=@{value:#x}"
    if name.endswith("kind"):
        return f"{name}={KIND_NAMES.get(value, value)}"
    if name == "region":
        return f"region={'constants' if value == 0 else 'work' if value == 1 else value}"
    return f"{name}={value}"


def disassemble(stream: Stream, labels: dict[int, str] | None = None) -> str:
    """One line per command (`labels`: command index -> a comment line printed before it, e.g. the layer)."""
    params = stream.params
    lines = [f"ortx NPU stream v{VERSION}: {params.rows}x{params.cols} MACs, SRAM {params.sram_bytes} B, "
             f"DMA {params.dma_bytes_per_cycle} B/cycle + {params.dma_setup_cycles} setup, "
             f"{params.clock_hz / 1e9:g} GHz; DRAM constants {stream.constant_bytes} B, work {stream.work_bytes} B; "
             f"{len(stream.commands)} commands"]
    labels = labels or {}
    for index, item in enumerate(stream.commands):
        if index in labels:
            lines.append(f"; {labels[index]}")
        text = " ".join(_describe(item.fields[name], name) for name in FIELDS_OF[item.op])
        lines.append(f"{index:6d}  {item.op:<10s} {text}".rstrip())
    return "\n".join(lines)
