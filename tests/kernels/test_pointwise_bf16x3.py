"""conv_pointwise_bf16x3's two forms (kernels/conv_pointwise_nchwc_amx.c step 5): the 1x1 convs that provider option
fp32_nodes keeps fp32 in a bf16 session on AMX. Each input value and weight is split into its bf16 rounding and the
remainder's, and three products of each pair are summed, so the result is fp32-accurate to about 2^-16 of each
product: checked against the exact (float64) sums on random operands, within BF16X3_SUM_ERROR_UNITS x 2^-24 x sum_k
|x_k w_k| (plus the bias and residual), a bound plain bf16 (conv_pointwise_pair_rows_bf16) misses many times over; a
pair-rows output is that result rounded once. Form 2 (at most 16 input channels, rounded values and remainders in one
chunk) and form 1 (separate chunks); the oracle (use_ref, and the kernel with AMX off) sums the same terms. And
conv_depthwise_bf16x3, a depthwise conv fused with the bf16x3 1x1 conv reading it, against the two unfused."""
from __future__ import annotations

import numpy as np
import pytest

from ortx import _kernels
from ortx.ep.lowering.blocked_layout import pack_depthwise_chunks, pack_pointwise_bf16, pack_pointwise_bf16x3
from tests.kernels.test_conv_nchwc import (
    ACTIVATIONS, BF16_POINTWISE_CASES, activate, amx, conv_ints, random, to_blocked,
)
from tests.kernels.test_pair_rows import BF16_STEP, assert_agrees, output_buffer, read_output, to_pair_rows

__all__ = ["amx"]  # fixture (isa: conftest.py)
# bf16x3 leaves out lo x W_lo and the remainders' remainders: about 2^-16 = 256 units of 2^-24 of each product at
# most. Measured on these cases, 2 threads, with hard_swish's slope and the fp32 epilogue: at most 152 units
# (tdpbf16ps and the oracle alike), plain bf16 51834; the test's bound, 2 x 512 (the activation's factor 2), is a
# 6.7x margin.
BF16X3_SUM_ERROR_UNITS = 512
CASES = BF16_POINTWISE_CASES + [(1, 16, 96, 7, 37), (1, 96, 24, 9, 9)]


def run_split(x, weights, bias, residual, activation, threads, out_rows, use_ref=False, split=True):
    n, cin, h, w = x.shape
    cout = weights.shape[0]
    code, params = ACTIVATIONS[activation]
    if split:
        packed, packed_bias, remainders, form = pack_pointwise_bf16x3(weights, bias)
    else:
        (packed, packed_bias), remainders, form = pack_pointwise_bf16(weights, bias), np.zeros(1, np.uint16), 0
    y = output_buffer(out_rows, n, cout, h, w)
    scratch = np.empty(threads * 24 * ((cin + 31) // 32 * 16), np.uint32)
    ints = [n, cin, cout, h * w, int(residual is not None), code, threads]
    _kernels.call("conv_pointwise_bf16x3" if split else "conv_pointwise_pair_rows_bf16",
                  ints + ([int(out_rows), form] if split else [0, int(out_rows)]),
                  list(params), [to_blocked(x), packed, packed_bias, y,
                                 to_blocked(residual) if residual is not None else y, scratch, remainders],
                  num_threads=threads, use_ref=use_ref)
    return read_output(y, out_rows, cout, h, w)


def exact(x, weights, bias, residual, activation):
    """The float64 result and, per output, sum_k |x_k w_k| + |bias| + |residual| (the error bound's scale)."""
    x64, w64 = x.astype(np.float64), weights.astype(np.float64)
    sums = np.einsum("oc,nchw->nohw", w64, x64) + bias[None, :, None, None]
    scale = np.einsum("oc,nchw->nohw", np.abs(w64), np.abs(x64)) + np.abs(bias)[None, :, None, None]
    if residual is not None:
        sums, scale = sums + residual, scale + np.abs(residual)
    code, params = ACTIVATIONS[activation]
    return activate(sums, code, params), scale


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
@pytest.mark.parametrize("out_rows", [0, 1], ids=["blocked_out", "pair_rows_out"])
@pytest.mark.parametrize("activation,with_residual", [("clip", False), ("hard_swish", True)])
@pytest.mark.parametrize("threads", [1, 2])
def test_bf16x3_pointwise_is_fp32_accurate(isa, amx, case, out_rows, activation, with_residual, threads):
    """hard_swish's slope is at most 1.5 where it matters, so the bound doubles for the activation."""
    n, cin, cout, h, w = case
    x, weights, bias = random((n, cin, h, w), 80), random((cout, cin), 81) * 0.2, random(cout, 82)
    residual = random((n, cout, h, w), 83) if with_residual else None
    expected, scale = exact(x, weights, bias, residual, activation)
    bound = 2 * BF16X3_SUM_ERROR_UNITS * 2.0 ** -24 * scale + 1e-30
    for use_ref in (False, True):
        got = run_split(x, weights, bias, residual, activation, threads, out_rows, use_ref=use_ref)
        error = np.abs(got - expected)
        if out_rows:  # then rounded once to bf16: half a step of the value, and ties
            error = np.maximum(error - BF16_STEP * np.abs(expected), 0)
        assert np.all(error <= bound), (use_ref, float((error / bound).max()))
    if not out_rows:  # the test tells bf16x3 from plain bf16
        plain = np.abs(run_split(x, weights, bias, residual, activation, threads, 0, split=False) - expected)
        assert (plain / bound).max() > 10, float((plain / bound).max())


FUSED_CASES = [  # (N, C, H, W, kernel, stride, pads, Cout): depthwise conv, then the bf16x3 1x1 conv to Cout
    (1, 32, 30, 37, 3, 1, (1, 1, 1, 1), 16), (2, 40, 13, 12, 3, 2, (1, 1, 1, 1), 24),
    (1, 96, 14, 14, 5, 2, (2, 2, 1, 1), 40),
    (1, 24, 9, 33, 5, 1, (2, 2, 2, 2), 17), (1, 144, 7, 7, 3, 1, (1, 1, 1, 1), 24),
]


def _depthwise_then_bf16x3(case, activation, with_residual, in_rows, out_rows, threads, fused, use_ref=False):
    n, c, h, w, kernel, stride, pads, cout = case
    ints, (oh, ow) = conv_ints((n, c, h, w), kernel, stride, pads, 1, False, ACTIVATIONS["clip"][0], threads)
    x, weights, bias = random((n, c, h, w), 90), random((c, 1, kernel, kernel), 91), random(c, 92)
    pw_weights, pw_bias = random((cout, c), 93) * 0.2, random(cout, 94)
    residual = random((n, cout, oh, ow), 95) if with_residual else None
    code, params = ACTIVATIONS[activation]
    chunk_weights = pack_depthwise_chunks(weights.reshape(c, -1), bias, bool(in_rows))
    packed, packed_bias, remainders, form = pack_pointwise_bf16x3(pw_weights, pw_bias)
    source = to_pair_rows(x) if in_rows else to_blocked(x)
    y = output_buffer(out_rows, n, cout, oh, ow)
    extra = to_blocked(residual) if with_residual else y
    pw_ints = [n, c, cout, oh * ow, int(with_residual), code, threads, int(out_rows), form]
    if fused:
        band_floats = max(8 * 1024, -(-c // 16) * 16 * ow)
        _kernels.call("conv_depthwise_bf16x3", ints + [in_rows, cout, int(with_residual), code, out_rows, form,
                                                       band_floats],
                      list(ACTIVATIONS["clip"][1]) + list(params),
                      [source, weights, bias, chunk_weights, packed, packed_bias, y, extra,
                       np.empty(threads * band_floats, np.float32), remainders], num_threads=threads, use_ref=use_ref)
    else:
        between = np.full((n, (c + 15) // 16, oh, ow, 16), np.nan, np.float32)
        sizes = np.zeros(3, np.int64)
        _kernels.call("conv_sizes_f32", [1, *ints], [], [sizes])
        workspace = np.empty(max(int(sizes[0]), 4), np.float32)
        _kernels.call("conv2d_depthwise_pair_rows", ints + [in_rows, 0, 1], list(ACTIVATIONS["clip"][1]),
                      [source, weights, between, workspace, bias, between, chunk_weights],
                      num_threads=threads, use_ref=use_ref)
        _kernels.call("conv_pointwise_bf16x3", pw_ints, list(params),
                      [between, packed, packed_bias, y, extra, np.empty(4, np.uint32), remainders],
                      num_threads=threads, use_ref=use_ref)
    return read_output(y, out_rows, cout, oh, ow)


@pytest.mark.parametrize("case", FUSED_CASES, ids=[str(c) for c in FUSED_CASES])
@pytest.mark.parametrize("in_rows", [1, 0], ids=["pair_rows_in", "blocked_in"])
@pytest.mark.parametrize("out_rows", [0, 1], ids=["blocked_out", "pair_rows_out"])
@pytest.mark.parametrize("activation,with_residual", [("none", False), ("hard_swish", True)])
@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise_bf16x3_gives_the_unfused_kernels_bits(isa, amx, case, in_rows, out_rows, activation, with_residual,
                                                          threads):
    """conv_depthwise_bf16x3 (kernels/conv_depthwise_bf16x3.c) against conv2d_depthwise_pair_rows writing blocked
    fp32, then conv_pointwise_bf16x3: bitwise on the AVX-512 + AMX path (bands of the map, partial 32-pixel steps,
    chunks with one block, two images); elsewhere its oracle runs, within float32's tolerance of the pair."""
    args = (case, activation, with_residual, in_rows, out_rows, threads)
    unfused = _depthwise_then_bf16x3(*args, fused=False)
    fused = _depthwise_then_bf16x3(*args, fused=True)
    if amx == "amx" and isa == "avx512":
        np.testing.assert_array_equal(fused, unfused)
    else:
        assert_agrees(fused, unfused, bool(out_rows))
    assert_agrees(_depthwise_then_bf16x3(*args, fused=True, use_ref=True), unfused, bool(out_rows))
