"""conv2d_bf16_nchwc (kernels/conv_bf16.c): conv2d_bf16 with blocked (NCHWc) or bf16 pair-rows input and/or output.
On the AMX direct form it reads blocked vectors into its chunk planes (pair rows: copies them) and stores C tile
rows without transposes; the operations per output are conv2d_bf16's, so its results must be conv2d_bf16's bits
(after the reorder; a pair-rows output those bits rounded once, zeros past C), pad lanes zero. A pair-rows input
holds the bf16 values the conv rounds its input to, so it changes nothing. Other convs and other paths run
conv2d_bf16 on NCHW copies. The reference kernel agrees within bf16's tolerance.
"""
from __future__ import annotations

import numpy as np
import pytest

from ortx import _kernels
from ortx.ep.precision import round_to_bf16
from tests.kernels.test_conv_nchwc import amx, from_blocked, random, to_blocked
from tests.kernels.test_pair_rows import assert_pads_zero, from_pair_rows, to_pair_rows

__all__ = ["amx"]  # fixture
# (X's layout, Y's[, the residual's]): 0 NCHW, 1 blocked, 2 pair rows
LAYOUTS = [(1, 0), (0, 1), (1, 1), (2, 1), (1, 2), (2, 2), (0, 2), (2, 1, 2), (2, 2, 2)]
CASES = [  # (N, Cin, Cout, size, kernel, stride, pad, residual, activation)
    (1, 64, 64, 56, 3, 1, 1, 1, 1),     # ResNet-18's layer-1 conv with its residual and Relu
    (1, 64, 128, 56, 3, 2, 1, 0, 1),    # a downsampling 3x3 conv, two phases
    (1, 64, 128, 56, 1, 2, 0, 0, 0),    # the 1x1 stride-2 shortcut: one phase of four
    (2, 40, 20, 17, 3, 1, 1, 1, 6),     # odd blocks: Cin 40 (a half-empty chunk), Cout 20 (pad lanes), batch 2
    (1, 24, 48, 13, 5, 2, 2, 0, 1),     # 5x5 stride 2, one partial chunk
    (1, 3, 64, 64, 7, 2, 3, 0, 1),      # an x-unfolded stem (NCHW in only)
]


def conv_case(n, cin, cout, size, kernel, stride, pad, residual, activation, threads):
    out = (size + 2 * pad - kernel) // stride + 1
    ints = [n, cin, size, size, cout, out, out, kernel, kernel, stride, stride, pad, pad, 1, 1, 1, 1, residual,
            activation, threads]
    sizes = np.zeros(3, np.int64)
    _kernels.call("conv_sizes_bf16", ints, [], [sizes])
    weights = random((cout, cin, kernel, kernel), 31) * 0.2
    packed = np.empty(int(sizes[1]), np.uint16)
    _kernels.call("conv_pack_bf16", ints, [], [weights, packed])
    workspace = np.empty(int(sizes[0]) // 4 + 16, np.float32)
    return ints, packed, workspace, out, int(sizes[2])


def _applies(case, layout) -> bool:
    """A stem (fewer than 8 channels) reads the graph's NCHW input; a residual layout needs a residual."""
    return not (case[1] < 8 and layout[0]) and not (len(layout) == 3 and not case[7])


@pytest.mark.parametrize("case,layout", [(case, layout) for case in CASES for layout in LAYOUTS
                                         if _applies(case, layout)])
@pytest.mark.parametrize("threads", [1, 2])
def test_blocked_conv_gives_the_nchw_kernels_bits(amx, case, layout, threads):
    n, cin, cout, size, kernel, stride, pad, residual, activation = case
    x_layout, y_layout, residual_layout = (*layout, 1) if len(layout) == 2 else layout
    ints, packed, workspace, out, form = conv_case(*case, threads)
    x, bias = random((n, cin, size, size), 32), random(cout, 33)
    res = random((n, cout, out, out), 34) if residual else np.zeros(1, np.float32)
    if residual_layout == 2:  # a pair-rows residual adds its bf16 values
        res = round_to_bf16(res)
    expected = np.full((n, cout, out, out), np.nan, np.float32)
    _kernels.call("conv2d_bf16", ints, [0.0, 0.0], [x, packed, expected, workspace, bias, res], threads)
    nans = np.full((n, cout, out, out), np.nan, np.float32)
    y = [nans, to_blocked(nans), np.full((n, -(-cout // 32), out * out, 32), 0xFFFF, np.uint16)][y_layout]
    res_buffer = [res, to_blocked(res), to_pair_rows(res)][residual_layout if y_layout else 0] if residual else y
    buffers = [[x, to_blocked(x), to_pair_rows(x)][x_layout], packed, y, workspace, bias, res_buffer]
    _kernels.call("conv2d_bf16_nchwc", ints + [x_layout, y_layout, residual_layout], [0.0, 0.0], buffers, threads)
    if y_layout == 2:
        assert_pads_zero(y, cout)
        got, expected = from_pair_rows(y, cout, out, out), round_to_bf16(expected)
    else:
        got = from_blocked(y, cout) if y_layout else y
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))
    if y_layout == 1:
        pads = y.transpose(0, 1, 4, 2, 3).reshape(n, -1, out, out)[:, cout:]
        assert np.all(pads == 0), "pad lanes of a blocked output must be zeros"
    # the AMX direct form runs every case here (the stem x-unfolded); the vdpbf16ps path goes through NCHW copies
    assert blocked_applies(ints) == (amx == "amx" and form == 1)


def blocked_applies(ints) -> bool:
    out = np.zeros(1, np.int64)
    _kernels.call("conv_bf16_nchwc_applies", ints, [], [out])
    return bool(out[0])


@pytest.mark.parametrize("case", CASES[3:5])
@pytest.mark.parametrize("layout", [(1, 1), (2, 2)])
def test_blocked_conv_reference_agrees(case, layout):
    n, cin, cout, size, kernel, stride, pad, residual, activation = case
    ints, packed, workspace, out, _ = conv_case(*case, 1)
    x, bias = random((n, cin, size, size), 35), random(cout, 36)
    res = random((n, cout, out, out), 37) if residual else np.zeros(1, np.float32)
    results = []
    for use_ref in (False, True):
        if layout == (2, 2):
            y = np.full((n, -(-cout // 32), out * out, 32), 0xFFFF, np.uint16)
            source = to_pair_rows(x)
        else:
            y, source = to_blocked(np.full((n, cout, out, out), np.nan, np.float32)), to_blocked(x)
        _kernels.call("conv2d_bf16_nchwc", ints + list(layout) + [1], [0.0, 0.0],
                      [source, packed, y, workspace, bias, to_blocked(res) if residual else y], 1, use_ref)
        results.append(from_pair_rows(y, cout, out, out) if layout == (2, 2) else from_blocked(y, cout))
    scale = np.abs(results[1]).max()
    np.testing.assert_allclose(results[0], results[1], rtol=0, atol=2e-3 * scale)
