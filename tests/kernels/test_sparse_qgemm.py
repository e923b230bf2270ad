"""sparse_qconv2d_i8 (int8 weights as quad CSR, issue #9) bit-exact against the numpy reference of
ortx/quantization/integer.py and against its reference kernel, for every ISA this CPU has, with 1 and 2 threads.
Weights are random with most quads zero, plus an all-zero output channel and an all-nonzero one; shapes leave
tails: K not a multiple of 4, K over several 64-quad panels, pixels not a multiple of a task's 4 x 32, channels
not a multiple of 8; im2col packing, direct mode (stride-1 KxK) and matrix input.
"""
from __future__ import annotations

import numpy as np
import pytest

from ortx.ep.lowering.sparse import QGEMM_MR, pack_quad_csr, unpack_quad_csr
from ortx.quantization.integer import INT_RANGES, conv_accumulators, requantization_multiplier, requantize
from tests.kernels.test_qgemm import isa, quantized, run_qconv  # noqa: F401  (isa: the fixture)


def sparse_weights(rng, shape, zeros):
    """int8 weights with a `zeros` fraction of zeros, output channel 1 all zero and the last one all nonzero."""
    qw = quantized(rng, shape, "int8", -127, 127)
    qw[rng.random(shape) < zeros] = 0
    qw[1] = 0
    qw[-1] = np.where(qw[-1] == 0, 5, qw[-1])
    return qw


CASES = [  # (N, C, H, W, M, K, stride, pad): im2col, direct mode (stride 1, K > 1) and 1x1
    (1, 3, 11, 13, 10, 3, 2, 1),      # K = 27, strided: im2col packing
    (1, 64, 9, 14, 19, 3, 1, 1),      # K = 576: 144 quads over 3 panels; direct mode; 126 pixels
    (2, 7, 6, 19, 12, 3, 1, 1),       # direct mode, channel-quad tail, two images
    (1, 40, 17, 17, 9, 1, 1, 0),      # 1x1: 289 pixels = 2 tasks of 4 blocks and a task of 2 blocks + tail
    (1, 300, 5, 6, 33, 1, 1, 0),      # 1x1 with K = 300 (75 quads: 2 panels), 30 pixels
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("x_dtype,zx", [("uint8", 131), ("int8", -128)])
def test_sparse_qconv_equals_integer_reference(isa, case, x_dtype, zx):
    n, c, h, w, m, k, stride, pad = case
    rng = np.random.default_rng(hash((case, x_dtype, zx)) % 2 ** 32)
    qx = quantized(rng, (n, c, h, w), x_dtype)
    qw = sparse_weights(rng, (m, c, k, k), 0.85)
    bias = rng.integers(-5000, 5000, m)
    geometry = dict(strides=(stride, stride), pads=(pad,) * 4)
    acc, out_size = conv_accumulators(qx, zx, qw, bias, **geometry)
    multiplier = requantization_multiplier(np.float32(0.02), rng.uniform(0.5, 1.5, m).astype(np.float32),
                                           np.float32(0.02 * np.abs(acc).max() / 150))
    expected = requantize(acc, multiplier, 20, 0, 255, "uint8").reshape(n, m, *out_size)
    residual = rng.standard_normal((n, m, *out_size)).astype(np.float32)
    expected_float = np.maximum(acc.astype(np.float32) * multiplier.reshape(-1, 1) + residual.reshape(n, m, -1), 0)
    for threads, use_ref in ((1, False), (2, False), (1, True)):
        actual = run_qconv(qx, zx, qw, bias, multiplier, y_dtype="uint8", zy=20, qmin=0, qmax=255,
                           out_size=out_size, threads=threads, use_ref=use_ref, sparse=True, **geometry)
        np.testing.assert_array_equal(actual, expected, err_msg=f"threads={threads} ref={use_ref}")
        actual = run_qconv(qx, zx, qw, bias, multiplier, y_dtype="float32", out_size=out_size, residual=residual,
                           activation=1, threads=threads, use_ref=use_ref, sparse=True, **geometry)
        np.testing.assert_array_equal(actual, expected_float.reshape(actual.shape))
    assert ((expected > 0) & (expected < 255)).any()


@pytest.mark.parametrize("rows,depth,channels", [(1, 512, 100), (7, 33, 21), (300, 1000, 24)])
def test_sparse_qgemm_matrix_input(isa, rows, depth, channels):
    rng = np.random.default_rng(rows * depth)
    qx = quantized(rng, (rows, depth), "int8")
    qw = sparse_weights(rng, (channels, depth), 0.9)
    bias = rng.integers(-3000, 3000, channels)
    acc = (qx.astype(np.int64) + 20) @ qw.astype(np.int64).T + bias
    multiplier = requantization_multiplier(np.float32(0.05), rng.uniform(0.5, 1.5, channels).astype(np.float32),
                                           np.float32(0.05 * np.abs(acc).max() / 100))
    expected = requantize(acc.T, multiplier, -3, -128, 127, "int8").T
    for threads, use_ref in ((1, False), (2, False), (1, True)):
        actual = run_qconv(qx, -20, qw, bias, multiplier, y_dtype="int8", zy=-3, qmin=-128, qmax=127,
                           out_size=None, threads=threads, use_ref=use_ref, gemm=True, sparse=True)
        np.testing.assert_array_equal(actual, expected)


def test_sparse_qconv_saturating_sums_and_dense_weights(isa):
    """x = 255 with weights +-127/-128 in every stored quad (no zeros at all: every quad stored) sums exactly."""
    qx = np.full((1, 64, 4, 37), 255, np.uint8)
    qw = np.where(np.arange(64 * 9).reshape(1, 64, 3, 3) % 2 == 0, 127, -128).astype(np.int8)
    qw = np.concatenate([qw, np.full_like(qw, 127), np.full_like(qw, -128)])
    acc, out_size = conv_accumulators(qx, 0, qw, None, pads=(1, 1, 1, 1))
    actual = run_qconv(qx, 0, qw, np.zeros(3), np.full(3, 1.0, np.float32), y_dtype="float32", pads=(1, 1, 1, 1),
                       out_size=out_size, sparse=True)
    np.testing.assert_array_equal(actual.astype(np.int64).reshape(acc.shape), acc)


@pytest.mark.parametrize("group,panel_quads", [(1, 64), (1, 5), (3, 2)])
def test_quad_csr_round_trip(group, panel_quads):
    """pack_quad_csr of qgemm.h's packed panels keeps exactly the quads with a nonzero and unpacks to the matrix
    (rows per group not a multiple of MR, K not a multiple of 4, several K panels, empty and full rows)."""
    rng = np.random.default_rng(group * panel_quads)
    per_group, k4 = 11, 9
    quads = rng.integers(-128, 128, (group * per_group, k4, 4)).astype(np.int8)
    quads[rng.random((group * per_group, k4)) < 0.7] = 0
    quads[0] = 0
    quads[:, -1, 3] = 0  # the K tail of a K = 35 weight
    quads[2] = np.where(quads[2] == 0, 1, quads[2])
    panels = -(-per_group // QGEMM_MR)
    packed = np.zeros((group, panels * QGEMM_MR, k4, 4), np.int8)
    packed[:, :per_group] = quads.reshape(group, per_group, k4, 4)
    packed = packed.reshape(group, panels, QGEMM_MR, k4, 4).transpose(0, 1, 3, 2, 4).reshape(-1)
    csr = pack_quad_csr(packed, group * per_group, group, panel_quads)
    assert csr.cols.size == int(np.any(quads != 0, axis=2).sum())
    assert csr.row_ptr.size == csr.panels * group * per_group + 1 and csr.panels == -(-k4 // panel_quads)
    np.testing.assert_array_equal(unpack_quad_csr(csr), quads)
