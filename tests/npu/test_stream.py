"""The NPU command stream: round trip, and corrupt or truncated streams rejected by the decoder and the simulator."""
from __future__ import annotations

import numpy as np
import pytest

from ortx import _kernels
from ortx.npu.params import NpuParams
from ortx.npu.stream import HEADER, NpuStreamError, Stream, command, decode, disassemble, encode


def _stream() -> Stream:
    commands = (
        command("DMA_IN", region=0, dram=0, sram=0, rows=2, row_bytes=8, dram_stride=8, sram_stride=16),
        command("BARRIER"),
        command("VECTOR", op=0, count=16, a=0, a_kind=0, a_scale_f=0.25, a_zero=3, b=0, b_kind=0, b_scale_f=1.0,
                b_zero=0, output=64, output_kind=2, output_scale_f=1.0, output_zero=0, qmin=0, qmax=0, activation=1,
                act_p0_f=0.0, act_p1_f=0.0),
        command("BARRIER"),
        command("DMA_OUT", region=1, dram=0, sram=64, rows=1, row_bytes=64, dram_stride=64, sram_stride=64),
    )
    return Stream(NpuParams(rows=8, cols=8, sram_bytes=4096), 16, 64, commands)


def test_round_trip_and_disassembly():
    stream = _stream()
    data = encode(stream)
    assert data[:8] == b"ORTXNPU\x00" and len(data) == HEADER.size + sum(4 + 8 * len(c.fields) for c in stream.commands)
    assert decode(data) == stream
    text = disassemble(decode(data))
    assert "8x8 MACs" in text and "VECTOR" in text and "a_scale=0.25" in text and "region=constants" in text


def test_simulator_runs_the_stream():
    constants = np.arange(16, dtype=np.uint8) + 3
    work = np.zeros(64, np.uint8)
    stats = _kernels.npu_simulate(encode(_stream()), constants, work)
    # the 16 bytes landed at SRAM rows 0 and 16 (stride 16): the vector reads 0..15 = row 0 and zeros of the gap
    values = work.view(np.float32)
    expected = np.maximum((np.r_[constants[:8], np.zeros(8, np.uint8)].astype(np.int32) - 3).astype(np.float32)
                          * np.float32(0.25), 0)
    np.testing.assert_array_equal(values, expected)
    assert stats[0] > 0 and stats[2] == 16 + 64


@pytest.mark.parametrize("damage,message", [
    (lambda b: b[:-3], "truncated"),
    (lambda b: b[:HEADER.size - 1], "truncated"),
    (lambda b: b"XXXXXXXX" + b[8:], "magic"),
    (lambda b: b[:HEADER.size + 20] + bytes([b[HEADER.size + 20] ^ 1]) + b[HEADER.size + 21:], "CRC"),
    (lambda b: b[:8] + bytes([9, 0]) + b[10:], "version"),
])
def test_corrupt_streams_are_rejected(damage, message):
    data = damage(encode(_stream()))
    with pytest.raises(NpuStreamError, match=message):
        decode(data)
    with pytest.raises(ValueError, match="NPU stream"):
        _kernels.npu_simulate(data, np.zeros(16, np.uint8), np.zeros(64, np.uint8))


def test_simulator_names_the_command_at_fault():
    bad = Stream(NpuParams(rows=8, cols=8, sram_bytes=4096), 16, 64, (
        command("DMA_IN", region=0, dram=0, sram=4090, rows=1, row_bytes=16, dram_stride=16, sram_stride=16),))
    with pytest.raises(ValueError, match=r"NPU command 0 \(DMA_IN\).*outside the SRAM"):
        _kernels.npu_simulate(encode(bad), np.zeros(16, np.uint8), np.zeros(64, np.uint8))
    write_constants = Stream(NpuParams(rows=8, cols=8, sram_bytes=4096), 16, 64, (
        command("DMA_OUT", region=0, dram=0, sram=0, rows=1, row_bytes=16, dram_stride=16, sram_stride=16),))
    with pytest.raises(ValueError, match="read-only constants"):
        _kernels.npu_simulate(encode(write_constants), np.zeros(16, np.uint8), np.zeros(64, np.uint8))


def test_a_dma_racing_compute_in_one_phase_is_rejected():
    """Double buffering is only safe when a phase's loads and its compute touch different SRAM."""
    race = Stream(NpuParams(rows=8, cols=8, sram_bytes=4096), 16, 64, (
        command("DMA_IN", region=0, dram=0, sram=0, rows=1, row_bytes=16, dram_stride=16, sram_stride=16),
        command("VECTOR", op=0, count=16, a=0, a_kind=0, a_scale_f=1.0, a_zero=0, b=0, b_kind=0, b_scale_f=1.0,
                b_zero=0, output=64, output_kind=0, output_scale_f=1.0, output_zero=0, qmin=0, qmax=255,
                activation=0, act_p0_f=0.0, act_p1_f=0.0),
    ))
    with pytest.raises(ValueError, match=r"NPU command 1 \(VECTOR\).*races with command 0"):
        _kernels.npu_simulate(encode(race), np.zeros(16, np.uint8), np.zeros(64, np.uint8))
    safe = Stream(race.params, 16, 64, (race.commands[0], command("BARRIER"), race.commands[1]))
    _kernels.npu_simulate(encode(safe), np.zeros(16, np.uint8), np.zeros(64, np.uint8))


def test_vector_int8_add_with_requantization_matches_dequantize_add_quantize():
    """VECTOR add of uint8 and int8 operands into uint8: what DequantizeLinear x2 -> Add -> QuantizeLinear compute
    (ortx.quantization.integer, the CPU steps' arithmetic), on every pair of a seeded sample including saturation."""
    from ortx.quantization.integer import dequantize, quantize

    rng = np.random.default_rng(0)
    count = 1000
    a = rng.integers(0, 256, count).astype(np.uint8)
    b = rng.integers(-128, 128, count).astype(np.int8)
    scales, zeros = (np.float32(0.0123), np.float32(0.031), np.float32(0.02)), (131, -5, 7)
    stream = Stream(NpuParams(rows=8, cols=8, sram_bytes=8192), 0, 4096, (
        command("DMA_IN", region=1, dram=0, sram=0, rows=1, row_bytes=count, dram_stride=count, sram_stride=count),
        command("DMA_IN", region=1, dram=1024, sram=1024, rows=1, row_bytes=count, dram_stride=count,
                sram_stride=count),
        command("BARRIER"),
        command("VECTOR", op=1, count=count, a=0, a_kind=0, a_scale_f=scales[0], a_zero=zeros[0], b=1024, b_kind=1,
                b_scale_f=scales[1], b_zero=zeros[1], output=2048, output_kind=0, output_scale_f=scales[2],
                output_zero=zeros[2], qmin=0, qmax=255, activation=0, act_p0_f=0.0, act_p1_f=0.0),
        command("BARRIER"),
        command("DMA_OUT", region=1, dram=2048, sram=2048, rows=1, row_bytes=count, dram_stride=count,
                sram_stride=count),
    ))
    work = np.zeros(4096, np.uint8)
    work[:count] = a
    work[1024:1024 + count] = b.view(np.uint8)
    _kernels.npu_simulate(encode(stream), np.zeros(1, np.uint8), work)
    total = dequantize(a, scales[0], zeros[0]) + dequantize(b, scales[1], zeros[1])
    expected = quantize(total, scales[2], zeros[2], "uint8")
    np.testing.assert_array_equal(work[2048:2048 + count], expected)
    assert (expected == 255).any() and (expected == 0).any()


@pytest.mark.parametrize("fields,message", [
    (dict(rows=1 << 39, row_bytes=1 << 39), "outside"),
    (dict(rows=1 << 50, row_bytes=16), "beyond"),
    (dict(rows=-(1 << 30), row_bytes=16), "must be positive"),
])
def test_huge_or_negative_sizes_are_rejected_not_overflowed(fields, message):
    """A well-formed (CRC-valid) stream with absurd sizes: a clear error, no arithmetic overflow or stray copy."""
    dma = dict(region=0, dram=0, sram=0, rows=1, row_bytes=16, dram_stride=1 << 39, sram_stride=1 << 39)
    dma.update(fields)
    stream = Stream(NpuParams(rows=8, cols=8, sram_bytes=4096), 16, 64, (command("DMA_IN", **dma),))
    with pytest.raises(ValueError, match=message):
        _kernels.npu_simulate(encode(stream), np.zeros(16, np.uint8), np.zeros(64, np.uint8))
