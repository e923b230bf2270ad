"""int8 kernels (qconv2d_i8, quantize_linear_f32, dequantize_linear_f32) bit-exact against the numpy reference of
ortx/quantization/integer.py, for every ISA this CPU has (portable, AVX2 vpmaddwd, AVX-512 VNNI vpdpbusd), with
1 and 2 threads and the reference kernel. Shapes leave tails: output channels not a multiple of MR (8), pixels not
a multiple of NB (32), K not a multiple of 4; zero points at the extremes; sums that saturate vpmaddubsw.
"""
from __future__ import annotations

import numpy as np
import pytest

from ortx import _kernels
from ortx.ep.lowering.qdq import QConvPlan, effective_bias, pack_weights, qconv_sizes
from ortx.ep.lowering.sparse import pack_quad_csr
from ortx.quantization.integer import (INT_RANGES, conv_accumulators, dequantize, quantize, requantization_multiplier,
                                       requantize)

ISA_ORDER = ("portable", "avx2", "avx512")
RUNNABLE_ISAS = ISA_ORDER[: ISA_ORDER.index(_kernels.cpu_isa()) + 1]
QGEMM_ISA = {"portable": 0, "avx2": 1}


def _qgemm_isa(vbmi_off: int = 0) -> int:
    used = np.zeros(1, np.int64)
    _kernels.call("qgemm_isa", [vbmi_off], [], [used])
    return int(used[0])


# Each ISA level, and on AVX-512 machines also the VNNI variant without VBMI packing (what a VNNI CPU without
# AVX512_VBMI runs), when this CPU would otherwise pick the VBMI one.
VARIANTS = [(isa, 0) for isa in RUNNABLE_ISAS]
if _kernels.cpu_isa() == "avx512" and _qgemm_isa() == 3:
    VARIANTS.append(("avx512", 1))


@pytest.fixture(params=VARIANTS, ids=lambda v: v[0] + ("-novbmi" if v[1] else ""))
def isa(request):
    name, vbmi_off = request.param
    assert _kernels.force_isa(name) == name
    used = _qgemm_isa(vbmi_off)
    assert used == QGEMM_ISA.get(name, used if used >= 2 else -1)
    yield name
    _qgemm_isa(0)
    _kernels.force_isa(_kernels.cpu_isa())


def quantized(rng, shape, dtype, low=None, high=None):
    lo, hi = INT_RANGES[dtype]
    return rng.integers(lo if low is None else low, (hi if high is None else high) + 1, shape).astype(dtype)


def run_qconv(qx, zx, qw, bias, multiplier, *, y_dtype, zy=0, qmin=0, qmax=0, strides=(1, 1), pads=(0, 0, 0, 0),
              dilations=(1, 1), out_size, residual=None, activation=0, threads=1, use_ref=False, gemm=False, group=1,
              activation_params=(0.0, 0.0), sparse=False):
    """Calls qconv2d_i8 as the lowering does (sparse: sparse_qconv2d_i8 on the weights as quad CSR); conv: qx
    [N, C, H, W], qw [M, C, KH, KW]; gemm: qx [rows, K]."""
    signed = int(qx.dtype == np.int8)
    out_kind = {"uint8": 0, "int8": 1, "float32": 2}[y_dtype]
    if gemm:
        rows, depth = qx.shape
        channels = qw.shape[0]
        ints = [1, depth, 1, rows, channels, 1, rows, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, signed, out_kind, 1, channels, 0]
        out_shape = (rows, channels)
    else:
        n, c, h, w = qx.shape
        channels = qw.shape[0]
        pixels = out_size[0] * out_size[1]
        ints = [n, c, h, w, channels, *out_size, *qw.shape[2:], *strides, pads[0], pads[1], *dilations, group, 0,
                signed, out_kind, pixels, 1, channels * pixels]
        out_shape = (n, channels, *out_size)
    ints += [int(residual is not None), activation, zx, zy, qmin, qmax, threads]
    plan = QConvPlan(ints, qw.reshape(group, channels // group, -1), np.asarray(bias, np.int64), multiplier, zx + 128 * signed,
                     (0.0, 0.0), residual is not None)
    sizes = qconv_sizes(ints)
    packed = pack_weights(plan.weights, ints, sizes)
    y = np.full(out_shape, 7, dtype=y_dtype)
    workspace = np.empty(int(sizes[2 if sparse else 0]) + 64, np.uint8)
    residual_buffer = residual if residual is not None else y
    buffers = [np.ascontiguousarray(qx), packed, effective_bias(plan), multiplier, y, workspace, residual_buffer]
    kernel = plan.kernel
    if sparse:
        csr = pack_quad_csr(packed, channels, group, int(sizes[3]))
        kernel, buffers[1] = "sparse_qconv2d_i8", csr.values
        buffers += [csr.cols, csr.row_ptr]
    _kernels.call(kernel, ints, list(activation_params), buffers, num_threads=threads, use_ref=use_ref)
    return y


CONV_CASES = [  # (N, C, H, W, M, K, stride, pad, dilation)
    (1, 3, 11, 13, 10, 3, 1, 1, 1),     # the stem-like K = 27 (not a multiple of 4), M tail, pixel tail
    (1, 16, 7, 7, 24, 3, 1, 1, 1),      # 49 pixels: one full block and a tail
    (2, 8, 9, 10, 9, 1, 1, 0, 1),       # 1x1, batch 2, no planes for uint8
    (1, 5, 12, 9, 17, 3, 2, 1, 1),      # strided
    (1, 6, 10, 10, 8, 3, 1, 2, 2),      # dilated
    (1, 4, 15, 17, 33, 7, 2, 3, 1),     # 7x7 stride 2 stem
    # stride-1 KxK: direct mode (qgemm.h), channel quads with a tail (7 = 4 + 3), two images, no padding
    (2, 7, 6, 19, 12, 3, 1, 1, 1),
    (1, 9, 12, 40, 16, 5, 1, 0, 1),
]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("x_dtype,zx", [("uint8", 0), ("uint8", 255), ("uint8", 131), ("int8", -128), ("int8", 127),
                                        ("int8", 3)])
def test_qconv_quantized_output_bitexact(isa, case, x_dtype, zx):
    n, c, h, w, m, k, stride, pad, dilation = case
    rng = np.random.default_rng(hash((case, x_dtype, zx)) % 2 ** 32)
    qx = quantized(rng, (n, c, h, w), x_dtype)
    qw = quantized(rng, (m, c, k, k), "int8", -127, 127)
    bias = rng.integers(-5000, 5000, m)
    acc, out_size = conv_accumulators(qx, zx, qw, bias, strides=(stride, stride), pads=(pad,) * 4,
                                      dilations=(dilation, dilation))
    # a scale that spreads the accumulators over the output range, with some saturating
    multiplier = requantization_multiplier(np.float32(0.02), rng.uniform(0.5, 1.5, m).astype(np.float32),
                                           np.float32(0.02 * np.abs(acc).max() / 150))
    saturated = interior = False
    for y_dtype, zy, relu in (("uint8", 20, False), ("int8", -5, False), ("uint8", 0, True)):
        qmin, qmax = INT_RANGES[y_dtype]
        if relu:
            qmin = max(qmin, zy)
        expected = requantize(acc, multiplier, zy, qmin, qmax, y_dtype).reshape(n, m, *out_size)
        for threads, use_ref in ((1, False), (2, False), (1, True)):
            actual = run_qconv(qx, zx, qw, bias, multiplier, y_dtype=y_dtype, zy=zy, qmin=qmin, qmax=qmax,
                               strides=(stride, stride), pads=(pad,) * 4, dilations=(dilation, dilation),
                               out_size=out_size, threads=threads, use_ref=use_ref)
            np.testing.assert_array_equal(actual, expected, err_msg=f"{y_dtype} threads={threads} ref={use_ref}")
        saturated |= bool(((expected == qmin) | (expected == qmax)).any())
        interior |= bool(((expected > qmin) & (expected < qmax)).any())
    assert saturated and interior


@pytest.mark.parametrize("activation", ["none", "relu", "clip"])
def test_qconv_float_output_with_residual(isa, activation):
    rng = np.random.default_rng(5)
    qx = quantized(rng, (1, 12, 9, 11), "uint8")
    qw = quantized(rng, (19, 12, 3, 3), "int8", -127, 127)
    bias = rng.integers(-500, 500, 19)
    acc, out_size = conv_accumulators(qx, 128, qw, bias, pads=(1, 1, 1, 1))
    multiplier = requantization_multiplier(np.float32(0.01), rng.uniform(0.001, 0.002, 19).astype(np.float32))
    residual = rng.standard_normal((1, 19, *out_size)).astype(np.float32)
    expected = acc.astype(np.float32) * multiplier.reshape(-1, 1) + residual.reshape(1, 19, -1)
    if activation == "relu":
        expected = np.maximum(expected, 0)
    elif activation == "clip":  # bounds inside the values' range, so both clamp sides are hit
        expected = np.minimum(np.maximum(expected, np.float32(-0.5)), np.float32(0.75))
    expected = expected.reshape(1, 19, *out_size)
    code = {"none": 0, "relu": 1, "clip": 3}[activation]
    for threads, use_ref in ((1, False), (2, False), (1, True)):
        actual = run_qconv(qx, 128, qw, bias, multiplier, y_dtype="float32", pads=(1, 1, 1, 1), out_size=out_size,
                           residual=residual, activation=code, threads=threads, use_ref=use_ref,
                           activation_params=(-0.5, 0.75))
        np.testing.assert_array_equal(actual, expected)


DEPTHWISE_CASES = [  # (N, C, H, W, K, stride, pad, dilation)
    (1, 19, 13, 37, 3, 1, 1, 1), (2, 8, 14, 14, 3, 2, 1, 1), (1, 5, 11, 20, 5, 1, 2, 1), (1, 4, 9, 33, 3, 2, 0, 1),
    (1, 3, 12, 12, 3, 1, 2, 2), (1, 6, 10, 40, 3, 3, 1, 1),
    (1, 24, 7, 7, 3, 1, 1, 1), (1, 9, 14, 14, 3, 2, 1, 1), (1, 2, 5, 62, 3, 1, 1, 1), (1, 2, 4, 64, 3, 1, 0, 1),
    (1, 3, 6, 70, 3, 1, 1, 1),
]  # from 7x7: MobileNetV2-like small maps, rows at the 64-byte edge of the vector plane copy, one past it


@pytest.mark.parametrize("case", DEPTHWISE_CASES)
@pytest.mark.parametrize("x_dtype,zx", [("uint8", 255), ("uint8", 0), ("int8", -128), ("int8", 50)])
def test_qdepthwise_bitexact(isa, case, x_dtype, zx):
    n, c, h, w, k, stride, pad, dilation = case
    rng = np.random.default_rng(hash((case, x_dtype, zx)) % 2 ** 32)
    qx = quantized(rng, (n, c, h, w), x_dtype)
    qw = quantized(rng, (c, 1, k, k), "int8", -128, 127)
    bias = rng.integers(-900, 900, c)
    geometry = dict(strides=(stride, stride), pads=(pad,) * 4, dilations=(dilation, dilation))
    acc, out_size = conv_accumulators(qx, zx, qw, bias, group=c, **geometry)
    multiplier = requantization_multiplier(np.float32(0.02), rng.uniform(0.5, 1.5, c).astype(np.float32),
                                           np.float32(0.02 * np.abs(acc).max() / 200))
    expected = requantize(acc, multiplier, 9, 9, 255, "uint8").reshape(n, c, *out_size)  # a Relu at zero point 9
    residual = rng.standard_normal((n, c, *out_size)).astype(np.float32)
    expected_float = np.maximum(acc.astype(np.float32) * multiplier.reshape(-1, 1) + residual.reshape(n, c, -1), 0)
    for threads, use_ref in ((1, False), (2, False), (1, True)):
        actual = run_qconv(qx, zx, qw, bias, multiplier, y_dtype="uint8", zy=9, qmin=9, qmax=255, out_size=out_size,
                           threads=threads, use_ref=use_ref, group=c, **geometry)
        np.testing.assert_array_equal(actual, expected)
        actual = run_qconv(qx, zx, qw, bias, multiplier, y_dtype="float32", out_size=out_size, residual=residual,
                           activation=1, threads=threads, use_ref=use_ref, group=c, **geometry)
        np.testing.assert_array_equal(actual, expected_float.reshape(actual.shape))


def test_qconv_saturation_of_pairwise_int16_sums(isa):
    """255 * 127 + 255 * 127 overflows vpmaddubsw's int16; x = 255 and w = +-127/-128 must still sum exactly."""
    qx = np.full((1, 64, 4, 37), 255, np.uint8)
    qw = np.where(np.arange(64 * 9).reshape(1, 64, 3, 3) % 2 == 0, 127, -128).astype(np.int8)
    qw = np.concatenate([qw, np.full_like(qw, 127), np.full_like(qw, -128)])
    acc, out_size = conv_accumulators(qx, 0, qw, None, pads=(1, 1, 1, 1))
    assert acc.max() == 255 * 127 * 64 * 9
    multiplier = np.full(3, 1.0, np.float32)
    actual = run_qconv(qx, 0, qw, np.zeros(3), multiplier, y_dtype="float32", pads=(1, 1, 1, 1), out_size=out_size)
    np.testing.assert_array_equal(actual.astype(np.int64).reshape(acc.shape), acc)


@pytest.mark.parametrize("rows,depth,channels", [(1, 512, 1000), (7, 33, 21), (45, 64, 70)])
@pytest.mark.parametrize("x_dtype,zx", [("uint8", 77), ("int8", -20)])
def test_qgemm_matrix_input(isa, rows, depth, channels, x_dtype, zx):
    rng = np.random.default_rng(rows * depth)
    qx = quantized(rng, (rows, depth), x_dtype)
    qw = quantized(rng, (channels, depth), "int8", -127, 127)
    bias = rng.integers(-3000, 3000, channels)
    acc = (qx.astype(np.int64) - zx) @ qw.astype(np.int64).T + bias
    multiplier = requantization_multiplier(np.float32(0.05), rng.uniform(0.5, 1.5, channels).astype(np.float32),
                                           np.float32(0.05 * np.abs(acc).max() / 100))
    expected = requantize(acc.T, multiplier, 3, 0, 255, "uint8").T
    for threads, use_ref in ((1, False), (2, False), (1, True)):
        actual = run_qconv(qx, zx, qw, bias, multiplier, y_dtype="uint8", zy=3, qmin=0, qmax=255, out_size=None,
                           threads=threads, use_ref=use_ref, gemm=True)
        np.testing.assert_array_equal(actual, expected)
        values = acc.T.astype(np.float32) * multiplier.reshape(-1, 1)
        clip = (np.float32(-1.5), np.float32(2.0))
        for code, want in ((0, values), (1, np.maximum(values, 0)), (3, np.minimum(np.maximum(values, clip[0]), clip[1]))):
            # float output, rows x channels (the transposed epilogue); Clip (3) between -1.5 and 2
            actual = run_qconv(qx, zx, qw, bias, multiplier, y_dtype="float32", out_size=None, activation=code,
                               threads=threads, use_ref=use_ref, gemm=True, activation_params=clip)
            np.testing.assert_array_equal(actual, want.T)


@pytest.mark.parametrize("dtype,zero", [("uint8", 0), ("uint8", 200), ("int8", -128), ("int8", 7)])
def test_quantize_dequantize_match_reference(isa, dtype, zero):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(1003) * 3).astype(np.float32)
    x[:4] = [0.5 * 0.05, 1.5 * 0.05, -2.5 * 0.05, 1e9]  # ties (round half to even) and saturation
    q = np.empty(x.shape, dtype)
    low, high = INT_RANGES[dtype]
    _kernels.call("quantize_linear_f32", [x.size, zero, low, high, int(dtype == "int8")], [0.05], [x, q])
    np.testing.assert_array_equal(q, quantize(x, 0.05, zero, dtype))
    y = np.empty(x.shape, np.float32)
    _kernels.call("dequantize_linear_f32", [x.size, zero, int(dtype == "int8")], [0.05], [q, y])
    np.testing.assert_array_equal(y, dequantize(q, 0.05, zero))
