"""The blocked-layout kernels (kernels/conv.h's NCHWc): reorder_to/from_nchwc_f32, conv_pointwise_nchwc_f32 and
conv2d_depthwise_nchwc_f32 against numpy sums and their reference kernels (conv_expand_depthwise_nchwc_f32 against
the two of them unfused), for each ISA this CPU has, 1 and 2
threads; channel counts with a partial last block, pixel counts that are not multiples of the 6-pixel tile, and
output channels that leave a partial group of 4 blocks. Pad lanes are never compared (no kernel promises them).
"""
from __future__ import annotations

import numpy as np
import pytest

from ortx import _kernels
from tests.tolerances import BF16_SUM_ERROR_UNITS, TOLERANCES

F32 = TOLERANCES[np.dtype(np.float32)]
ACTIVATIONS = {"none": (0, (0.0, 0.0)), "relu": (1, (0.0, 0.0)), "clip": (3, (0.0, 6.0)),
               "hard_swish": (6, (0.0, 0.0)), "hard_sigmoid": (5, (0.2, 0.5)),
               "hard_swish_affine": (9, (0.7, -0.3))}


@pytest.fixture(params=["amx", "no_amx"])
def amx(request):
    """The bf16 kernels' path on an AMX CPU: tdpbf16ps ("amx") or, with AMX off, vdpbf16ps; elsewhere "amx" is
    skipped and "no_amx" is the CPU's path."""
    if request.param == "amx" and not _kernels.cpu_has_amx_bf16():
        pytest.skip("no AMX-BF16")
    before = _kernels.bf16_isa() == "amx_bf16"
    _kernels.allow_amx(request.param == "amx")
    yield request.param
    _kernels.allow_amx(True)
    assert (_kernels.bf16_isa() == "amx_bf16") == before


def random(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def to_blocked(x: np.ndarray) -> np.ndarray:
    """[N, C, H, W] -> [N, C/16, H, W, 16] (pad lanes NaN: a kernel that read them would show it)."""
    n, c, h, w = x.shape
    blocks = (c + 15) // 16
    padded = np.full((n, blocks * 16, h, w), np.nan, np.float32)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, blocks, 16, h, w).transpose(0, 1, 3, 4, 2))


def from_blocked(y: np.ndarray, channels: int) -> np.ndarray:
    n, blocks, h, w, _ = y.shape
    return np.ascontiguousarray(y.transpose(0, 1, 4, 2, 3).reshape(n, blocks * 16, h, w)[:, :channels])


def activate(value, code, params):
    if code == 1:
        return np.maximum(value, 0)
    if code == 3:
        return np.clip(value, *params)
    if code == 5:
        return np.clip(params[0] * value + params[1], 0, 1)
    if code == 6:
        return value * np.clip(value / 6 + 0.5, 0, 1)
    if code == 9:
        return params[0] * value * np.clip(value / 6 + 0.5, 0, 1) + params[1]
    return value


def assert_close(actual, expected):
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(actual, expected, rtol=F32["rtol"], atol=F32["atol"] + F32["rtol"] * scale)


@pytest.mark.parametrize("shape", [(1, 3, 5, 7), (2, 16, 4, 4), (1, 40, 9, 513), (1, 32, 112, 112)])
@pytest.mark.parametrize("threads", [1, 2])
def test_reorders_round_trip_exactly(isa, shape, threads):
    x = random(shape, 1)
    n, c, h, w = shape
    blocked = np.full((n, (c + 15) // 16, h, w, 16), np.nan, np.float32)
    _kernels.call("reorder_to_nchwc_f32", [n, c, h * w], [], [x, blocked], num_threads=threads)
    expected = to_blocked(x)
    expected[np.isnan(expected)] = 0.0  # reorder_to_nchwc_f32 writes its pad lanes as zeros
    np.testing.assert_array_equal(blocked, expected)
    back = np.empty_like(x)
    _kernels.call("reorder_from_nchwc_f32", [n, c, h * w], [], [blocked, back], num_threads=threads)
    np.testing.assert_array_equal(back, x)


def pack_pointwise(weights: np.ndarray, bias: np.ndarray, precision: str = "fp32"):
    """conv.h's packing: fp32 [ceil(Cout/64)][Cin][64] weights, or bf16 [ceil(Cout/64)][ceil(Cin/32)*16][64][2];
    and ceil(Cout/64)*64 fp32 biases (zeros past Cin and Cout)."""
    from ortx.ep.precision import bf16_bits

    cout, cin = weights.shape
    groups, depth = (cout + 63) // 64, (cin + 31) // 32 * 32 if precision == "bf16" else cin
    padded = np.zeros((groups * 64, depth), np.float32)
    padded[:cout, :cin] = weights
    packed_bias = np.zeros(groups * 64, np.float32)
    packed_bias[:cout] = bias
    if precision == "bf16":
        packed = bf16_bits(padded).reshape(groups, 64, depth // 2, 2).transpose(0, 2, 1, 3)
    else:
        packed = padded.reshape(groups, 64, cin).transpose(0, 2, 1)
    return np.ascontiguousarray(packed), packed_bias


def run_pointwise(x, weights, bias, residual, activation, threads, use_ref=False, precision="fp32"):
    n, cin, h, w = x.shape
    cout = weights.shape[0]
    code, params = ACTIVATIONS[activation]
    packed, packed_bias = pack_pointwise(weights, bias, precision)
    y = np.full((n, (cout + 15) // 16, h, w, 16), np.nan, np.float32)
    buffers = [to_blocked(x), packed, packed_bias, y, to_blocked(residual) if residual is not None else y]
    if precision == "bf16":  # the per-thread pair scratch: 24 pixels x ceil(Cin/32)*16 words
        buffers.append(np.empty(threads * 24 * ((cin + 31) // 32 * 16), np.uint32))
    kernel = "conv_pointwise_nchwc_bf16" if precision == "bf16" else "conv_pointwise_nchwc_f32"
    _kernels.call(kernel, [n, cin, cout, h * w, int(residual is not None), code, threads], list(params), buffers,
                  num_threads=threads, use_ref=use_ref)
    return from_blocked(y, cout)


def check_fast_and_reference(run, expected):
    """run(use_ref) -> output: the fast kernel matches `expected` and gives the same bits on a second call; the
    reference kernel matches too."""
    fast = run(False)
    assert_close(fast, expected)
    np.testing.assert_array_equal(fast, run(False))
    assert_close(run(True), expected)


POINTWISE_CASES = [  # (N, Cin, Cout, H, W)
    (1, 16, 96, 11, 13), (1, 24, 40, 7, 7), (2, 3, 17, 5, 3), (1, 160, 960, 7, 7), (1, 576, 96, 14, 14),
    (1, 33, 130, 1, 1),
    # one output block: long 24-pixel tiles (conv.h's ortx_pointwise_tile_pixels) and a remainder of 4 in 1-6 runs
    (1, 40, 16, 10, 10),
    # weights over 128 KB, summed 128 input channels at a time on AVX-512: a last chunk of 72 channels ending in a
    # partial block, a partial last group; batch 2 with 5 groups
    (1, 200, 130, 9, 9), (2, 272, 320, 7, 7),
]


@pytest.mark.parametrize("case", POINTWISE_CASES, ids=[str(c) for c in POINTWISE_CASES])
@pytest.mark.parametrize("activation,residual", [("none", False), ("clip", False), ("relu", True),
                                                 ("hard_swish", True), ("hard_sigmoid", False),
                                                 ("hard_swish_affine", False)])
@pytest.mark.parametrize("threads", [1, 2])
def test_pointwise_matches_numpy_and_reference(isa, case, activation, residual, threads):
    n, cin, cout, h, w = case
    x, weights, bias = random((n, cin, h, w), 2), random((cout, cin), 3) * 0.2, random(cout, 4)
    extra = random((n, cout, h, w), 5) if residual else None
    code, params = ACTIVATIONS[activation]
    expected = np.einsum("oc,nchw->nohw", weights.astype(np.float64), x.astype(np.float64)) + bias[:, None, None]
    if residual:
        expected = expected + extra
    expected = activate(expected, code, params).astype(np.float32)
    check_fast_and_reference(lambda use_ref: run_pointwise(x, weights, bias, extra, activation, threads, use_ref),
                             expected)


@pytest.mark.parametrize("case", [(1, 200, 130, 9, 9), (2, 272, 320, 7, 7), (1, 1024, 256, 14, 14)],
                         ids=str)
def test_pointwise_with_large_weights_gives_the_same_bits_on_any_thread_count(isa, case):
    """Large weights take fewer pixel runs and, on AVX-512, channel chunks; every output is still summed in one
    order, so 1, 2 and 3 threads agree bitwise."""
    n, cin, cout, h, w = case
    x, weights, bias = random((n, cin, h, w), 6), random((cout, cin), 7) * 0.1, random(cout, 8)
    extra = random((n, cout, h, w), 9)
    outputs = [run_pointwise(x, weights, bias, extra, "relu", threads) for threads in (1, 2, 3)]
    for output in outputs[1:]:
        np.testing.assert_array_equal(output, outputs[0])


def conv_ints(x_shape, kernel, stride, pads, dilation, has_residual, activation, threads):
    n, c, h, w = x_shape
    oh = (h + pads[0] + pads[2] - dilation * (kernel - 1) - 1) // stride + 1
    ow = (w + pads[1] + pads[3] - dilation * (kernel - 1) - 1) // stride + 1
    return [n, c, h, w, c, oh, ow, kernel, kernel, stride, stride, pads[0], pads[1], dilation, dilation, c, 1,
            int(has_residual), activation, threads], (oh, ow)


DEPTHWISE_CASES = [  # (N, C, H, W, kernel, stride, pads, dilation)
    (1, 32, 112, 112, 3, 1, (1, 1, 1, 1), 1), (1, 96, 112, 112, 3, 2, (1, 1, 1, 1), 1),
    (1, 24, 9, 11, 3, 1, (1, 1, 1, 1), 1), (2, 20, 7, 7, 5, 1, (2, 2, 2, 2), 1),
    (1, 40, 14, 13, 5, 2, (2, 2, 1, 1), 1), (1, 17, 10, 10, 3, 1, (2, 2, 2, 2), 2), (1, 960, 7, 7, 3, 1, (1,) * 4, 1),
    (1, 24, 12, 20, 5, 2, (2, 2, 2, 2), 1), (1, 16, 9, 12, 5, 1, (2, 2, 2, 2), 1),
    (1, 16, 6, 30, 3, 2, (0, 0, 1, 1), 1),
    (2, 64, 28, 28, 3, 1, (1, 1, 1, 1), 1),  # two images, two bands a chunk: pair rows' band-major tasks on 2 threads
    # pair rows' column blocks with pad columns: both sides' two in one block of 5, two on the left of a 3x3, and
    # wider than a block takes (3: its columns tap by tap) beside a block with one
    (1, 40, 6, 5, 5, 1, (2, 2, 2, 2), 1), (1, 32, 5, 9, 3, 1, (1, 2, 1, 0), 1), (1, 24, 8, 21, 3, 2, (3, 3, 1, 1), 1),
]


@pytest.mark.parametrize("case", DEPTHWISE_CASES, ids=[str(c) for c in DEPTHWISE_CASES])
@pytest.mark.parametrize("activation,residual", [("clip", False), ("none", True), ("hard_swish", False)])
@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise_nchwc_matches_the_nchw_kernel(isa, case, activation, residual, threads):
    """The blocked form sums each output's taps as conv2d_depthwise_f32 does: equal to its NCHW result (which
    test_conv.py checks against onnxruntime) within float32's tolerance, and to the reference kernel. On AVX-512,
    outputs at least 8 columns wide at 3x3 or 5x5, stride 1 or 2, take the rows-in-place form (border columns,
    rows at the image's edges, asymmetric pads); the others the tiled form."""
    n, c, h, w, kernel, stride, pads, dilation = case
    code, params = ACTIVATIONS[activation]
    ints, (oh, ow) = conv_ints((n, c, h, w), kernel, stride, pads, dilation, residual, code, threads)
    x, weights, bias = random((n, c, h, w), 6), random((c, 1, kernel, kernel), 7), random(c, 8)
    extra = random((n, c, oh, ow), 9) if residual else np.zeros((n, c, oh, ow), np.float32)
    sizes = np.zeros(3, np.int64)
    _kernels.call("conv_sizes_f32", [1, *ints], [], [sizes])
    plain = np.empty((n, c, oh, ow), np.float32)
    workspace = np.empty(max(int(sizes[0]), 4), np.float32)
    _kernels.call("conv2d_depthwise_f32", ints, list(params), [x, weights, plain, workspace, bias, extra],
                  num_threads=threads)

    def blocked(use_ref):
        y = np.full((n, (c + 15) // 16, oh, ow, 16), np.nan, np.float32)
        _kernels.call("conv2d_depthwise_nchwc_f32", ints, list(params),
                      [to_blocked(x), weights, y, workspace, bias, to_blocked(extra)], num_threads=threads,
                      use_ref=use_ref)
        return from_blocked(y, c)

    check_fast_and_reference(blocked, plain)


def pack_to_nchwc(weights: np.ndarray, bias: np.ndarray):
    """conv.h's packing of conv2d_to_nchwc_f32: [Cin*KH*KW][ceil(Cout/16)*16] weights, the bias padded alike."""
    cout = weights.shape[0]
    width = (cout + 15) // 16 * 16
    packed = np.zeros((weights[0].size, width), np.float32)
    packed[:, :cout] = weights.reshape(cout, -1).T
    packed_bias = np.zeros(width, np.float32)
    packed_bias[:cout] = bias
    return packed, packed_bias


TO_NCHWC_CASES = [  # (N, Cin, H, W, Cout, kernel, stride, pads)
    (1, 3, 224, 224, 32, 3, 2, (1, 1, 1, 1)), (1, 3, 48, 320, 16, 3, 2, (1, 1, 1, 1)),
    (2, 3, 31, 57, 64, 7, 2, (3, 3, 3, 3)), (1, 4, 30, 40, 40, 3, 1, (1, 1, 1, 1)), (1, 2, 9, 9, 17, 3, 1, (0,) * 4),
    (1, 3, 60, 70, 96, 5, 2, (2, 1, 2, 1)), (1, 1, 3, 100, 8, 3, 1, (1, 1, 1, 1)),
    (1, 3, 224, 224, 64, 7, 2, (3, 3, 3, 3)),  # ResNet's stem: 3 border rows as tiles over their inside taps
    (1, 2, 12, 60, 32, 5, 1, (4, 2, 4, 2)),  # pads of 4 on a 5-tap kernel: border rows with one or two ky inside
]


@pytest.mark.parametrize("case", TO_NCHWC_CASES, ids=[str(c) for c in TO_NCHWC_CASES])
@pytest.mark.parametrize("activation", ["clip", "hard_swish", "none"])
@pytest.mark.parametrize("threads", [1, 2])
def test_conv_to_nchwc_matches_numpy_and_reference(isa, case, activation, threads):
    """Tiles (24 accumulators, the row's last tile moved left; in border rows over the taps whose ky lies inside)
    and border pixels, with Cout leaving partial groups of 4 blocks (17, 40, 96) and rows too short for a tile (7x7
    stride 2 on 57 columns: 23 interior columns)."""
    n, cin, h, w, cout, kernel, stride, pads = case
    code, params = ACTIVATIONS[activation]
    x, weights, bias = random((n, cin, h, w), 10), random((cout, cin, kernel, kernel), 11), random(cout, 12)
    ints = [n, cin, h, w, cout, 0, 0, kernel, kernel, stride, stride, pads[0], pads[1], 1, 1, 1, 1, 0, code, threads]
    oh = (h + pads[0] + pads[2] - kernel) // stride + 1
    ow = (w + pads[1] + pads[3] - kernel) // stride + 1
    ints[5], ints[6] = oh, ow
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    expected = np.zeros((n, cout, oh, ow))
    for ky in range(kernel):
        for kx in range(kernel):
            patch = padded[:, :, ky:ky + stride * (oh - 1) + 1:stride, kx:kx + stride * (ow - 1) + 1:stride]
            expected += np.einsum("oc,nchw->nohw", weights[:, :, ky, kx], patch)
    expected = activate(expected + bias[:, None, None], code, params).astype(np.float32)
    packed, packed_bias = pack_to_nchwc(weights, bias)

    def run(use_ref):
        y = np.full((n, (cout + 15) // 16, oh, ow, 16), np.nan, np.float32)
        _kernels.call("conv2d_to_nchwc_f32", ints, list(params), [x, packed, y, packed_bias], num_threads=threads,
                      use_ref=use_ref)
        return from_blocked(y, cout)

    check_fast_and_reference(run, expected)


def pack_dense_nchwc(weights: np.ndarray, bias: np.ndarray):
    """conv.h's packing of conv2d_nchwc_f32 (blocked_layout.pack_dense: per group of 64 output channels and chunk of
    128 input channels, [KH*KW][the chunk's channels][64]), ceil(Cout/64)*64 biases."""
    from ortx.ep.lowering.blocked_layout import pack_dense

    return pack_dense(weights, bias)


def dense_conv_numpy(x, weights, bias, stride, pads, dilation=1):
    n, _, h, w = x.shape
    cout, _, kh, kw = weights.shape
    oh = (h + pads[0] + pads[2] - dilation * (kh - 1) - 1) // stride + 1
    ow = (w + pads[1] + pads[3] - dilation * (kw - 1) - 1) // stride + 1
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    out = np.zeros((n, cout, oh, ow)) + bias[:, None, None]
    for ky in range(kh):
        for kx in range(kw):
            y0, x0 = ky * dilation, kx * dilation
            patch = padded[:, :, y0:y0 + stride * (oh - 1) + 1:stride, x0:x0 + stride * (ow - 1) + 1:stride]
            out += np.einsum("oc,nchw->nohw", weights[:, :, ky, kx].astype(np.float64), patch)
    return out


DENSE_NCHWC_CASES = [  # (N, Cin, H, W, Cout, kernel, stride, pads, dilation)
    (1, 128, 56, 56, 128, 3, 2, (1, 1, 1, 1), 1),  # ResNet-50 v1.5's stride-2 3x3 (layer 2)
    (1, 64, 15, 15, 80, 3, 2, (1, 1, 1, 1), 1),  # odd size: the last row and column inside
    (2, 200, 9, 11, 130, 3, 1, (1, 1, 1, 1), 1),  # two channel chunks, partial block and group, batch 2
    (1, 16, 13, 20, 32, 5, 2, (2, 1, 0, 3), 1),  # asymmetric pads, border columns on both sides
    (1, 3, 30, 31, 64, 7, 2, (3, 3, 3, 3), 1),  # a stem shape: three border rows and columns each side
    (1, 24, 12, 12, 16, 3, 1, (2, 2, 2, 2), 2),  # dilation
    (1, 32, 7, 7, 48, 3, 1, (0, 0, 0, 0), 1),  # no padding: interior strips only
    (1, 16, 4, 3, 16, 3, 2, (2, 2, 2, 2), 1),  # pads as wide as the map: border pixels only
]


@pytest.mark.parametrize("case", DENSE_NCHWC_CASES, ids=[str(c) for c in DENSE_NCHWC_CASES])
@pytest.mark.parametrize("activation,residual", [("relu", True), ("clip", False), ("none", False)])
def test_dense_conv_nchwc_matches_numpy_and_reference(isa, case, activation, residual):
    """conv2d_nchwc_f32 (conv_nchwc_direct.c): interior strips along rows, border columns as strips down the
    interior rows, border rows' border pixels alone, taps outside X skipped; within float32's tolerance of a float64
    numpy conv, the reference kernel too, and the same bits on 1, 2 and 3 threads."""
    n, cin, h, w, cout, kernel, stride, pads, dilation = case
    code, params = ACTIVATIONS[activation]
    x, weights, bias = random((n, cin, h, w), 14), random((cout, cin, kernel, kernel), 15) * 0.2, random(cout, 16)
    expected = dense_conv_numpy(x, weights, bias, stride, pads, dilation)
    oh, ow = expected.shape[2:]
    extra = random((n, cout, oh, ow), 17) if residual else None
    if residual:
        expected = expected + extra
    expected = activate(expected, code, params).astype(np.float32)
    packed, packed_bias = pack_dense_nchwc(weights, bias)

    def run(use_ref, threads=2):
        ints = [n, cin, h, w, cout, oh, ow, kernel, kernel, stride, stride, pads[0], pads[1], dilation, dilation, 1,
                1, int(residual), code, threads]
        y = np.full((n, (cout + 15) // 16, oh, ow, 16), np.nan, np.float32)
        _kernels.call("conv2d_nchwc_f32", ints, list(params),
                      [to_blocked(x), packed, packed_bias, y, to_blocked(extra) if residual else y],
                      num_threads=threads, use_ref=use_ref)
        return from_blocked(y, cout)

    check_fast_and_reference(run, expected)
    for threads in (1, 3):
        np.testing.assert_array_equal(run(False, threads), run(False))


WINOGRAD_NCHWC_CASES = [  # (N, Cin, H, W, Cout, pads): 3x3, stride 1
    (1, 64, 20, 20, 64, (1, 1, 1, 1)),  # whole 4x4 tiles
    (2, 40, 13, 11, 70, (1, 1, 1, 1)),  # partial tiles, blocks and group; batch 2
    (1, 16, 9, 14, 24, (0, 2, 1, 0)),  # asymmetric pads, no bottom or left padding
    (1, 200, 7, 7, 130, (1, 1, 1, 1)),  # Cin past 128, a 7x7 map (2x2 tiles, 16 pixels for 49)
    (2, 64, 60, 58, 70, (1, 1, 1, 1)),  # V and M past 2 MB: bands of tile rows (the last one shorter)
]


@pytest.mark.parametrize("case", WINOGRAD_NCHWC_CASES, ids=[str(c) for c in WINOGRAD_NCHWC_CASES])
@pytest.mark.parametrize("activation,residual", [("relu", True), ("clip", False)])
@pytest.mark.parametrize("threads", [1, 2])
def test_winograd_nchwc_matches_a_direct_conv(case, activation, residual, threads):
    """conv2d_winograd_nchwc_f32 (F(4x4, 3x3) on blocked tensors) and its scalar float64 reference against a float64
    direct conv within F(4x4)'s bound (test_conv_winograd.py's ORACLE_TOLERANCE[4] of max|y|); the same bits on
    1 and 2 threads."""
    from ortx.ep.lowering.blocked_layout import pack_winograd_nchwc

    n, cin, h, w, cout, pads = case
    code, params = ACTIVATIONS[activation]
    x, weights, bias = random((n, cin, h, w), 31), random((cout, cin, 3, 3), 32) * 0.2, random(cout, 33)
    expected = dense_conv_numpy(x, weights, bias, 1, pads)
    oh, ow = expected.shape[2:]
    extra = random((n, cout, oh, ow), 34) if residual else None
    if residual:
        expected = expected + extra
    expected = activate(expected, code, params)
    packed, packed_bias = pack_winograd_nchwc(weights, bias)
    ints = [n, cin, h, w, cout, oh, ow, 3, 3, 1, 1, pads[0], pads[1], 1, 1, 1, 1, int(residual), code, threads]
    sizes = np.zeros(1, np.int64)
    _kernels.call("conv_winograd_nchwc_sizes_f32", ints, [], [sizes])

    def run(use_ref, thread_count=threads):
        y = np.full((n, (cout + 15) // 16, oh, ow, 16), np.nan, np.float32)
        workspace = np.full(int(sizes[0]) // 4, np.nan, np.float32)
        _kernels.call("conv2d_winograd_nchwc_f32", ints[:-1] + [thread_count], list(params),
                      [to_blocked(x), packed, packed_bias, y, to_blocked(extra) if residual else y, workspace],
                      num_threads=thread_count, use_ref=use_ref)
        return from_blocked(y, cout)

    bound = 5e-5 * np.abs(expected).max()
    for use_ref in (False, True):
        np.testing.assert_allclose(run(use_ref), expected, rtol=0, atol=bound)
    np.testing.assert_array_equal(run(False, 1), run(False, 2))


DENSE_BF16_CASES = DENSE_NCHWC_CASES + [
    (1, 64, 14, 14, 64, 3, 1, (1, 1, 1, 1), 1),  # ResNet-18's 3x3 on a small map: tiles across row ends
    (1, 272, 7, 7, 130, 3, 1, (1, 1, 1, 1), 1),  # three channel chunks (8 blocks each), the last partial
    (1, 17, 9, 8, 20, 2, 1, (0, 1, 1, 0), 1),  # odd Cin (a half pair), even kernel, padding on two sides only
    (1, 32, 10, 52, 40, 3, 1, (1, 1, 1, 1), 1),  # 3 blocks: long tiles of 8 along 52-pixel rows, the rest cut
    (1, 32, 11, 61, 16, 3, 2, (1, 1, 1, 1), 1),  # 1 block at stride 2: a long tile of 24 along 31-pixel rows
]


def run_dense_bf16(x, weights, bias, extra, stride, pads, dilation, code, params, threads, use_ref, unfolded=False):
    """conv2d_nchwc_bf16 on blocked copies of x (`unfolded`: x itself, NCHW, the x-unfolded form) and the residual
    `extra`, unblocked output; the workspace from conv_nchwc_bf16_sizes (filled with NaN: the kernel must write
    every value it reads)."""
    from ortx.ep.lowering.blocked_layout import pack_dense_bf16

    n, cin, h, w = x.shape
    cout, _, kernel, _ = weights.shape
    oh = (h + pads[0] + pads[2] - dilation * (kernel - 1) - 1) // stride + 1
    ow = (w + pads[1] + pads[3] - dilation * (kernel - 1) - 1) // stride + 1
    ints = [n, cin, h, w, cout, oh, ow, kernel, kernel, stride, stride, pads[0], pads[1], dilation, dilation, 1, 1,
            int(extra is not None), code, threads, int(not unfolded)]
    sizes = np.zeros(1, np.int64)
    _kernels.call("conv_nchwc_bf16_sizes", ints, [], [sizes])
    workspace = np.full(int(sizes[0]) // 4 + 1, np.nan, np.float32)
    packed, packed_bias = pack_dense_bf16(weights, bias, unfolded)
    y = np.full((n, (cout + 15) // 16, oh, ow, 16), np.nan, np.float32)
    _kernels.call("conv2d_nchwc_bf16", ints, list(params),
                  [np.ascontiguousarray(x) if unfolded else to_blocked(x), packed, packed_bias, y,
                   to_blocked(extra) if extra is not None else y, workspace],
                  num_threads=threads, use_ref=use_ref)
    return from_blocked(y, cout)


UNFOLDED_BF16_CASES = [  # (N, Cin, H, W, Cout, kernel, stride, pads, dilation): stems read from NCHW
    (1, 3, 40, 38, 64, 7, 2, (3, 3, 3, 3), 1),  # ResNet's stem: 21 values, 11 pairs (a half pair)
    (2, 3, 33, 32, 32, 3, 2, (1, 1, 1, 1), 1),  # MobileNetV2's: 9 values; batch 2
    (1, 4, 17, 19, 40, 3, 1, (1, 1, 1, 1), 1),  # stride 1 (one masked load a value), partial block and group
    (1, 3, 20, 22, 20, 5, 3, (2, 1, 2, 1), 1),  # stride 3 (a gather), asymmetric pads
    (1, 2, 15, 16, 16, 3, 1, (2, 2, 2, 2), 2),  # dilation
    (1, 1, 9, 40, 70, 3, 2, (0, 0, 0, 0), 1),  # one channel: 3 values, 2 pairs; no padding; two groups
]


@pytest.mark.parametrize("case,unfolded", [(c, False) for c in DENSE_BF16_CASES] + [(c, True) for c in
                                                                                   UNFOLDED_BF16_CASES],
                         ids=[str(c) for c in DENSE_BF16_CASES] + [f"unfolded{c}" for c in UNFOLDED_BF16_CASES])
@pytest.mark.parametrize("activation,residual", [("relu", True), ("hard_swish", False)])
def test_dense_conv_nchwc_bf16_matches_the_bf16_definition(case, unfolded, activation, residual):
    """conv2d_nchwc_bf16 (conv_nchwc_bf16.c: vdpbf16ps tiles over a zero-padded bf16 image, tiles of equal size
    across row ends; stems from NCHW over x-unfolded pair rows) against the bf16 definition (operands rounded to
    bf16, float64 sums here) within float32's tolerance, the reference kernel too, the same bits on 1, 2 and 3
    threads; on this CPU's bf16 path (the reference where it has no AVX512_BF16)."""
    from ortx.ep.precision import round_to_bf16

    n, cin, h, w, cout, kernel, stride, pads, dilation = case
    code, params = ACTIVATIONS[activation]
    x, weights, bias = random((n, cin, h, w), 24), random((cout, cin, kernel, kernel), 25) * 0.2, random(cout, 26)
    expected = dense_conv_numpy(round_to_bf16(x), round_to_bf16(weights), bias, stride, pads, dilation)
    extra = random((n, cout) + expected.shape[2:], 27) if residual else None
    if residual:
        expected = expected + extra
    expected = activate(expected, code, params).astype(np.float32)

    def run(use_ref, threads=2):
        return run_dense_bf16(x, weights, bias, extra, stride, pads, dilation, code, params, threads, use_ref,
                              unfolded)

    check_fast_and_reference(run, expected)
    for threads in (1, 3):
        np.testing.assert_array_equal(run(False, threads), run(False))


def test_dense_conv_nchwc_bf16_sums_are_within_the_measured_bound_of_exact():
    """conv2d_nchwc_bf16's fp32 sums of bf16 products against float64 sums of the same rounded operands, within
    BF16_SUM_ERROR_UNITS (tests/tolerances.py) on log-normal-range operands: a 3x3 conv from 64 channels (576
    products an output: the bound's measured regime, the 1x1 tile's at Cin = 576; from 512 channels, 4608 products,
    it read 50 units, as a sequential sum's error grows with its length)."""
    from ortx.ep.precision import round_to_bf16

    rng = np.random.default_rng(42)
    x = (rng.standard_normal((1, 64, 7, 7)) * np.exp(3 * rng.standard_normal((1, 64, 7, 7)))).astype(np.float32)
    weights = (rng.standard_normal((70, 64, 3, 3)) * np.exp(3 * rng.standard_normal((70, 64, 3, 3)))).astype(
        np.float32)
    x16, w16 = round_to_bf16(x).astype(np.float64), round_to_bf16(weights).astype(np.float64)
    exact = dense_conv_numpy(x16, w16, np.zeros(70), 1, (1, 1, 1, 1))
    bound = BF16_SUM_ERROR_UNITS * 2.0 ** -24 * dense_conv_numpy(np.abs(x16), np.abs(w16), np.zeros(70), 1,
                                                                 (1, 1, 1, 1))
    actual = run_dense_bf16(x, weights, np.zeros(70, np.float32), None, 1, (1, 1, 1, 1), 1, 0, (0.0, 0.0), 2, False)
    error = np.abs(actual - exact)
    assert np.all(error <= bound), f"{np.max(error / bound) * BF16_SUM_ERROR_UNITS:.1f} units"


@pytest.mark.parametrize("shape", [(1, 40, 7, 9), (2, 16, 1, 1), (1, 200, 96, 96)])
@pytest.mark.parametrize("threads", [1, 2])
def test_global_avgpool_nchwc_matches_numpy_and_reference(shape, threads):
    n, c, h, w = shape
    x = random(shape, 13)
    expected = x.astype(np.float64).mean(axis=(2, 3), keepdims=True).astype(np.float32)
    blocks = (c + 15) // 16

    def run(use_ref):
        y = np.full((n, blocks, 1, 1, 16), np.nan, np.float32)
        _kernels.call("global_avgpool_nchwc_f32", [n * blocks, h * w], [], [to_blocked(x), y], num_threads=threads,
                      use_ref=use_ref)
        return from_blocked(y, c)

    assert_close(run(False), expected)
    assert_close(run(True), expected)


BF16_POINTWISE_CASES = POINTWISE_CASES + [(1, 17, 40, 3, 5), (1, 24, 40, 48, 47)]  # the last: runs of AMX steps


@pytest.mark.parametrize("case", BF16_POINTWISE_CASES, ids=[str(c) for c in BF16_POINTWISE_CASES])
@pytest.mark.parametrize("activation,residual", [("clip", False), ("hard_swish", True)])
@pytest.mark.parametrize("threads", [1, 2])
def test_pointwise_bf16_matches_the_bf16_definition(isa, amx, case, activation, residual, threads):
    """Against ortx.ep.precision's bf16 reference (operands rounded to bf16, fp32 sums): the reassociation
    tolerance (float32's), for the AMX steps (conv_pointwise_nchwc_amx.c: pixel counts past whole 16-pixel tiles,
    Cin past whole 32-channel chunks, partial groups of 4 output blocks, a 7x7 map's groups split over 2 threads,
    several 32-pixel steps a task at 48x47),
    the vdpbf16ps tile, the portable tile and the reference kernel; odd Cin (17, 33) leaves a half pair."""
    from ortx.ep.precision import bf16_matmul

    n, cin, cout, h, w = case
    x, weights, bias = random((n, cin, h, w), 20), random((cout, cin), 21) * 0.2, random(cout, 22)
    extra = random((n, cout, h, w), 23) if residual else None
    code, params = ACTIVATIONS[activation]
    flat = x.transpose(1, 0, 2, 3).reshape(cin, -1)
    expected = (bf16_matmul(weights, flat).reshape(cout, n, h, w).transpose(1, 0, 2, 3).astype(np.float64)
                + bias[:, None, None])
    if residual:
        expected = expected + extra
    expected = activate(expected, code, params).astype(np.float32)
    check_fast_and_reference(lambda use_ref: run_pointwise(x, weights, bias, extra, activation, threads, use_ref,
                                                           precision="bf16"), expected)


@pytest.mark.parametrize("distribution", ["normal", "positive", "wide"])
def test_pointwise_bf16_sums_are_within_the_measured_bound_of_exact(isa, amx, distribution):
    """The blocked 1x1 conv's fp32 sums of bf16 products (no bias, residual or activation) against float64 sums of
    the same rounded operands, within tests/tolerances.py's BF16_SUM_ERROR_UNITS (ortx/ep/precision.py step 3: the
    AMX steps' order and rounding are the hardware's); Cin past whole 16-pair chunks, log-normal-range operands."""
    from ortx.ep.precision import round_to_bf16

    rng = np.random.default_rng(41)
    for n, cin, cout, h, w in ((1, 301, 70, 7, 9), (1, 576, 40, 5, 7), (2, 33, 20, 6, 6)):
        x, weights = rng.standard_normal((n, cin, h, w)), rng.standard_normal((cout, cin))
        if distribution == "positive":
            x, weights = np.abs(x), np.abs(weights)
        elif distribution == "wide":
            x = x * np.exp(3 * rng.standard_normal(x.shape))
            weights = weights * np.exp(3 * rng.standard_normal(weights.shape))
        x, weights = x.astype(np.float32), weights.astype(np.float32)
        x16 = round_to_bf16(x).astype(np.float64).transpose(1, 0, 2, 3).reshape(cin, -1)
        w16 = round_to_bf16(weights).astype(np.float64)
        exact = (w16 @ x16).reshape(cout, n, h, w).transpose(1, 0, 2, 3)
        bound = BF16_SUM_ERROR_UNITS * 2.0 ** -24 * (np.abs(w16) @ np.abs(x16)).reshape(cout, n, h, w).transpose(
            1, 0, 2, 3)
        actual = run_pointwise(x, weights, np.zeros(cout, np.float32), None, "none", 2, precision="bf16")
        error = np.abs(actual - exact)
        assert np.all(error <= bound), f"{cin} -> {cout}: {np.max(error / bound) * BF16_SUM_ERROR_UNITS:.1f} units"


EXPAND_CASES = [  # (N, Cin, C, H, W, kernel, stride, pads); C: the expanded channels
    (1, 16, 96, 40, 40, 3, 2, (1, 1, 1, 1)), (1, 24, 144, 23, 30, 3, 1, (1, 1, 1, 1)),
    (2, 17, 40, 12, 9, 3, 1, (1, 1, 1, 1)), (1, 8, 36, 30, 21, 5, 2, (2, 2, 2, 2)),
    (1, 40, 200, 14, 14, 5, 1, (2, 2, 2, 2)), (1, 16, 32, 9, 33, 3, 2, (0, 1, 1, 1)),
    (1, 24, 48, 7, 7, 3, 1, (1, 1, 1, 1)), (1, 3, 20, 200, 16, 3, 1, (1, 1, 1, 1)),
]


@pytest.mark.parametrize("case", EXPAND_CASES, ids=[str(c) for c in EXPAND_CASES])
@pytest.mark.parametrize("activations", [("clip", "clip"), ("hard_swish", "none")])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("precision,group_blocks", [("fp32", 1), ("fp32", 2), ("fp32", 4), ("bf16", 1),
                                                    ("bf16", 4)])
def test_expand_depthwise_equals_the_two_kernels_unfused(isa, case, activations, threads, precision, group_blocks):
    """conv_expand_depthwise_nchwc_f32 (_bf16) against conv_pointwise_nchwc_f32 (_bf16) then
    conv2d_depthwise_nchwc_f32: bitwise where the AVX-512 blocked_rows form takes the depthwise shape (both compute
    every output the same way), within float32's tolerance elsewhere (7 output columns, other ISAs: scalar tap loops
    against the tiled form); and the reference kernel. The cases: partial blocks (C = 40, 36, 20), odd Cin (17, 3:
    a half bf16 pair), a band of one step and bands of many (200 rows walk the window), halo rows at stride 1 and
    2, 5x5, asymmetric pads, batch 2."""
    _kernels.allow_amx(False)  # the fused bf16 kernel's 1x1 conv is the vdpbf16ps tile's, not the AMX steps'
    try:
        _expand_depthwise_against_unfused(isa, case, activations, threads, precision, group_blocks)
    finally:
        _kernels.allow_amx(True)


def _expand_depthwise_against_unfused(isa, case, activations, threads, precision, group_blocks):
    n, cin, c, h, w, kernel, stride, pads = case
    (expand_activation, (p0, p1)), (activation, params) = ACTIVATIONS[activations[0]], ACTIVATIONS[activations[1]]
    x, expand_weights, expand_bias = random((n, cin, h, w), 30), random((c, cin), 31) * 0.3, random(c, 32)
    weights, bias = random((c, 1, kernel, kernel), 33), random(c, 34)
    ints, (oh, ow) = conv_ints((n, c, h, w), kernel, stride, pads, 1, False, activation, threads)
    packed, packed_bias = pack_pointwise(expand_weights, expand_bias, precision)
    blocks = (c + 15) // 16
    middle = np.full((n, blocks, h, w, 16), np.nan, np.float32)
    buffers = [to_blocked(x), packed, packed_bias, middle, middle]
    if precision == "bf16":  # the per-thread pair scratch: 24 pixels x ceil(Cin/32)*16 words
        buffers.append(np.empty(threads * 24 * ((cin + 31) // 32 * 16), np.uint32))
    suffix = "bf16" if precision == "bf16" else "f32"
    _kernels.call(f"conv_pointwise_nchwc_{suffix}", [n, cin, c, h * w, 0, expand_activation, threads], [p0, p1],
                  buffers, num_threads=threads)
    middle[np.isnan(middle)] = 0.0  # pad lanes: the depthwise kernels compute them too
    unfused = np.full((n, blocks, oh, ow, 16), np.nan, np.float32)
    sizes = np.zeros(3, np.int64)
    _kernels.call("conv_sizes_f32", [1, *ints], [], [sizes])
    _kernels.call("conv2d_depthwise_nchwc_f32", ints, list(params),
                  [middle, weights, unfused, np.empty(max(int(sizes[0]), 4), np.float32), bias, unfused],
                  num_threads=threads)
    unfused = from_blocked(unfused, c)

    def fused(use_ref):
        y = np.full((n, blocks, oh, ow, 16), np.nan, np.float32)
        _kernels.call(f"conv_expand_depthwise_nchwc_{suffix}", ints + [cin, expand_activation, group_blocks],
                      [*params, p0, p1], [to_blocked(x), packed, packed_bias, weights, y, bias],
                      num_threads=threads, use_ref=use_ref)
        return from_blocked(y, c)

    if isa == "avx512" and ow >= 8:
        np.testing.assert_array_equal(fused(False), unfused)
    check_fast_and_reference(fused, unfused)
