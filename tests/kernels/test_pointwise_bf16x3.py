"""conv_pointwise_bf16x3's two forms (kernels/conv_pointwise_nchwc_amx.c step 5): the 1x1 convs that
provider option fp32_nodes keeps fp32 in a bf16 session on AMX. Each input value and weight is split into its bf16
rounding and the remainder's, and three products of each pair are summed, so the result is fp32-accurate to about
2^-16 of each product: checked against the exact (float64) sums on random operands, within BF16X3_SUM_ERROR_UNITS
x 2^-24 x sum_k |x_k w_k| (plus the bias and residual), a bound plain bf16 (conv_pointwise_pair_rows_bf16) misses many times over; a
pair-rows output is that result rounded once. Form 2 (at most 16 input channels, rounded values and remainders in
one chunk) and form 1 (separate chunks); the oracle (use_ref, and the kernel with AMX off) sums the same terms."""
from __future__ import annotations

import numpy as np
import pytest

from ortx import _kernels
from ortx.ep.lowering.blocked_layout import pack_pointwise_bf16, pack_pointwise_bf16x3
from tests.kernels.test_conv_nchwc import ACTIVATIONS, BF16_POINTWISE_CASES, activate, amx, isa, random, to_blocked
from tests.kernels.test_pair_rows import BF16_STEP, output_buffer, read_output

__all__ = ["amx", "isa"]  # fixtures
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
    packed_bias = pack_pointwise_bf16(weights, bias)[1]
    if split:
        packed, remainders, form = pack_pointwise_bf16x3(weights)
    else:
        packed, remainders, form = pack_pointwise_bf16(weights, None)[0], np.zeros(1, np.uint16), 0
    y = output_buffer(out_rows, n, cout, h, w)
    scratch = np.empty(threads * 6 * ((cin + 31) // 32 * 16), np.uint32)
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
