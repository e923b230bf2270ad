"""The pair-rows kernels (kernels/pair_rows.h: bf16 activations of a bf16 session on AMX): conv2d_depthwise_pair_rows
and conv_pointwise_pair_rows_bf16 against the blocked kernels they stand for. A pair-rows input holds exactly the
bf16 values the blocked kernels would round to, and a pair-rows output is their fp32 output rounded once, so each
fast kernel must give the blocked kernel's bits (on the rounded input, then rounded); the channels past C of every
pair-rows output must be zero (the AMX steps read them). The reference kernels agree within the tolerances.
"""
from __future__ import annotations

import numpy as np
import pytest

from ortx import _kernels
from ortx.ep.lowering.blocked_layout import pack_depthwise_chunks
from ortx.ep.precision import bf16_bits, round_to_bf16
from tests.kernels.test_conv_nchwc import (
    ACTIVATIONS, BF16_POINTWISE_CASES, DEPTHWISE_CASES, F32, amx, conv_ints, from_blocked, pack_pointwise, random,
    run_pointwise, to_blocked,
)

__all__ = ["amx"]  # fixture (isa: conftest.py)
BF16_STEP = 2.0 ** -8  # one bf16 rounding, relative
SIDES = [(1, 0), (0, 1), (1, 1)]  # (in_rows, out_rows)


def to_pair_rows(x: np.ndarray) -> np.ndarray:
    """[N, C, H, W] float32 -> [N, ceil(C/32), H*W, 32] bf16 bits, zeros past C."""
    n, c, h, w = x.shape
    chunks = -(-c // 32)
    padded = np.zeros((n, chunks * 32, h * w), np.uint16)
    padded[:, :c] = bf16_bits(x).reshape(n, c, h * w)
    return np.ascontiguousarray(padded.reshape(n, chunks, 32, h * w).transpose(0, 1, 3, 2))


def from_pair_rows(rows: np.ndarray, channels: int, height: int, width: int) -> np.ndarray:
    n, chunks = rows.shape[:2]
    values = (rows.astype(np.uint32) << 16).view(np.float32).transpose(0, 1, 3, 2).reshape(n, chunks * 32, -1)
    return np.ascontiguousarray(values[:, :channels].reshape(n, channels, height, width))


def output_buffer(out_rows: bool, n: int, channels: int, height: int, width: int) -> np.ndarray:
    """A pair-rows output of NaN bits (so every element a kernel fails to write shows), or a blocked one of NaNs."""
    if out_rows:
        return np.full((n, -(-channels // 32), height * width, 32), 0xFFFF, np.uint16)
    return np.full((n, (channels + 15) // 16, height, width, 16), np.nan, np.float32)


def read_output(y: np.ndarray, out_rows: bool, channels: int, height: int, width: int) -> np.ndarray:
    """An output_buffer's values as [N, C, H, W] float32; a pair-rows one must hold zeros past C."""
    if not out_rows:
        return from_blocked(y, channels)
    assert_pads_zero(y, channels)
    return from_pair_rows(y, channels, height, width)


def assert_pads_zero(rows: np.ndarray, channels: int):
    flat = rows.transpose(0, 1, 3, 2).reshape(rows.shape[0], -1, rows.shape[2])
    assert not np.any(flat[:, channels:]), "channels past C of a pair-rows output must be zero"


def assert_agrees(actual, expected, rounded: bool):
    """float32's tolerance (sums in another order), plus one bf16 step where both were rounded after."""
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(actual, expected, rtol=F32["rtol"] + (2 * BF16_STEP if rounded else 0.0),
                               atol=F32["atol"] + F32["rtol"] * scale)


@pytest.mark.parametrize("case", DEPTHWISE_CASES, ids=[str(c) for c in DEPTHWISE_CASES])
@pytest.mark.parametrize("sides", SIDES, ids=["in", "out", "both"])
@pytest.mark.parametrize("activation", ["clip", "hard_swish", "hard_sigmoid"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("chunk_weights", [False, True], ids=["per_task", "packed"])
def test_depthwise_pair_rows_gives_the_blocked_kernels_bits(isa, case, sides, activation, threads, chunk_weights):
    """Both the rows-in-place forms (AVX-512: 3x3 and 5x5, stride 1 or 2, >= 8 columns; a pair-rows output, or a
    blocked one from pair rows, a whole chunk at once, its weights made per task or packed by
    blocked_layout.pack_depthwise_chunks) and the tiled
    form (the others, and every shape on the portable ISA), bands at the image's edges, asymmetric pads, dilation;
    hard_sigmoid is 0.5 at 0, so channels past C show unless masked."""
    in_rows, out_rows = sides
    n, c, h, w, kernel, stride, pads, dilation = case
    code, params = ACTIVATIONS[activation]
    ints, (oh, ow) = conv_ints((n, c, h, w), kernel, stride, pads, dilation, False, code, threads)
    x, weights, bias = random((n, c, h, w), 60), random((c, 1, kernel, kernel), 61), random(c, 62)
    x_in = round_to_bf16(x) if in_rows else x
    sizes = np.zeros(3, np.int64)
    _kernels.call("conv_sizes_f32", [1, *ints], [], [sizes])
    workspace = np.empty(max(int(sizes[0]), 4), np.float32)
    blocked = np.full((n, (c + 15) // 16, oh, ow, 16), np.nan, np.float32)
    _kernels.call("conv2d_depthwise_nchwc_f32", ints, list(params),
                  [to_blocked(x_in), weights, blocked, workspace, bias, blocked], num_threads=threads)
    expected = from_blocked(blocked, c)
    if out_rows:
        expected = round_to_bf16(expected)

    def run(use_ref):
        source, y = to_pair_rows(x) if in_rows else to_blocked(x), output_buffer(out_rows, n, c, oh, ow)
        extra = [pack_depthwise_chunks(weights.reshape(c, -1), bias, bool(in_rows))] if chunk_weights else []
        _kernels.call("conv2d_depthwise_pair_rows", ints + [in_rows, out_rows, int(chunk_weights)], list(params),
                      [source, weights, y, workspace, bias, y, *extra], num_threads=threads, use_ref=use_ref)
        return read_output(y, out_rows, c, oh, ow)

    np.testing.assert_array_equal(run(False), expected)
    assert_agrees(run(True), expected, bool(out_rows))


@pytest.mark.parametrize("case", BF16_POINTWISE_CASES, ids=[str(c) for c in BF16_POINTWISE_CASES])
@pytest.mark.parametrize("sides", SIDES, ids=["in", "out", "both"])
@pytest.mark.parametrize("activation,residual", [("clip", False), ("hard_swish", True), ("hard_sigmoid", False)])
@pytest.mark.parametrize("threads", [1, 2])
def test_pointwise_pair_rows_gives_the_blocked_kernels_bits(isa, amx, case, sides, activation, residual, threads):
    """On the AMX steps (full and partial 32-pixel steps read from the rows, odd output blocks whose chunk's second
    half is zeroed, residuals read blocked) and on the AVX512_BF16 rows tile (AMX off or absent: pair words
    broadcast from the rows, long tiles of 1-3 blocks, pads past C zero though hard_sigmoid(0) is not); below
    AVX-512 the kernel runs the oracle, checked for agreement only."""
    in_rows, out_rows = sides
    n, cin, cout, h, w = case
    x, weights, bias = random((n, cin, h, w), 70), random((cout, cin), 71) * 0.2, random(cout, 72)
    extra = random((n, cout, h, w), 73) if residual else None
    code, params = ACTIVATIONS[activation]
    expected = run_pointwise(x, weights, bias, extra, activation, threads, precision="bf16")
    if out_rows:
        expected = round_to_bf16(expected)
    packed, packed_bias = pack_pointwise(weights, bias, "bf16")

    def run(use_ref):
        source, y = to_pair_rows(x) if in_rows else to_blocked(x), output_buffer(out_rows, n, cout, h, w)
        scratch = np.empty(threads * 24 * ((cin + 31) // 32 * 16), np.uint32)
        _kernels.call("conv_pointwise_pair_rows_bf16",
                      [n, cin, cout, h * w, int(residual), code, threads, in_rows, out_rows], list(params),
                      [source, packed, packed_bias, y, to_blocked(extra) if residual else y, scratch],
                      num_threads=threads, use_ref=use_ref)
        return read_output(y, out_rows, cout, h, w)

    if isa == "avx512" and (amx == "amx" or _kernels.bf16_isa() == "avx512_bf16"):  # AMX, or the rows tile
        np.testing.assert_array_equal(run(False), expected)
    else:
        assert_agrees(run(False), expected, bool(out_rows))
    assert_agrees(run(True), expected, bool(out_rows))
