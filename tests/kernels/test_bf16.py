"""bf16 kernels (gemm_bf16, gemm_pack_bf16, conv2d_bf16): against the numpy reference of ortx/ep/precision.py (same
rounded operands: float32 tolerance) and against float32 (tests/tolerances.py's bf16 tolerance).

Every case runs for each path this CPU has: "amx" (tdpbf16ps tiles) on a CPU with AMX-BF16, under avx512 on a CPU
with AVX512_BF16 the vdpbf16ps path, else the portable path (round to bf16, fp32 multiply-adds), on shapes whose M,
N, K are not multiples of the 8x16 (AMX: 32x32 in 16x16 tiles, 16 k pairs) tile, the equal K blocks of at most 512
(odd K leaves a half pair) or the 144-row M block.
"""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortx import _kernels
from ortx.ep.compile_nodes import run_graph
from ortx.ep.precision import bf16_bits, bf16_matmul, round_to_bf16
from tests.tolerances import BF16_SUM_ERROR_UNITS, assert_close, assert_close_bf16

ISA_ORDER = ("portable", "avx2", "avx512")
RUNNABLE_ISAS = ISA_ORDER[: ISA_ORDER.index(_kernels.cpu_isa()) + 1]
RUNNABLE_PATHS = RUNNABLE_ISAS + (("amx",) if _kernels.cpu_has_amx_bf16() else ())
MR, NR, KC_MAX = 8, 16, 512  # kernels/gemm_bf16.h: ORTX_BGEMM_MR, ORTX_GEMM_NR, ORTX_BGEMM_KC_MAX
SHAPES = [(1, 1, 1), (5, 7, 3), (6, 16, 8), (13, 33, 17), (37, 70, 301), (150, 47, 519), (7, 1100, 33),
          (61, 5, 64), (9, 40, 1031)]


def use_path(name):
    """Selects an ISA (or "amx": avx512 with AMX allowed); "avx512" runs vdpbf16ps even on an AMX CPU."""
    _kernels.allow_amx(name == "amx")
    isa = "avx512" if name == "amx" else name
    assert _kernels.force_isa(isa) == isa


def default_path():
    _kernels.allow_amx(True)
    _kernels.force_isa(_kernels.cpu_isa())


@pytest.fixture(params=RUNNABLE_PATHS)
def isa(request):
    use_path(request.param)
    yield request.param
    default_path()


def test_bf16_path_follows_the_isa_and_the_cpu():
    expected = "avx512_bf16" if _kernels.cpu_has_avx512_bf16() else "portable"
    if _kernels.cpu_has_amx_bf16():
        expected = "amx_bf16"
    assert _kernels.bf16_isa() == expected
    for name in RUNNABLE_ISAS[:-1]:
        _kernels.force_isa(name)
        assert _kernels.bf16_isa() == "portable"
    _kernels.force_isa(_kernels.cpu_isa())
    if _kernels.cpu_has_amx_bf16():
        assert not _kernels.allow_amx(False)
        assert _kernels.bf16_isa() == "avx512_bf16"
    default_path()


def sizes(M, N, K, threads=1):
    out = np.zeros(3, np.int64)
    _kernels.call("gemm_sizes_bf16", [M, N, K, threads], [], [out])
    return out


def pack(matrix, rows, depth, row_stride, col_stride, which, scale=1.0):
    packed = np.full(int(sizes(rows, rows, depth)[1 + which]), 0xFFFF, np.uint16)
    _kernels.call("gemm_pack_bf16", [rows, depth, row_stride, col_stride, which], [scale],
                  [np.ascontiguousarray(matrix, dtype=np.float32), packed])
    return packed


def packed_index(row, k, rows, depth, panel):
    """kernels/gemm_bf16.h's K-pair format, written out again."""
    blocks = -(-depth // KC_MAX)
    per_block = -(-depth // blocks)
    block = max(2, -(-per_block // 2) * 2)
    k0 = k // block * block
    pairs = (np.minimum(block, depth - k0) + 1) // 2
    rows_padded = -(-rows // panel) * panel
    return k0 * rows_padded + row // panel * panel * 2 * pairs + ((k - k0) // 2 * panel + row % panel) * 2 + k % 2


def gemm(a, b, M, N, K, *, a_packed=False, a_strides=None, b_packed=False, b_strides=None, alpha=1.0,
         bias_mode=0, bias=None, residual=None, residual_strides=(0, 0, 0), residual_scale=1.0, activation=0,
         params=(0.0, 0.0), a_offsets=(0,), b_offsets=(0,), threads=1, use_ref=False):
    batch = len(a_offsets)
    y = np.full((batch, M, N), np.nan, np.float32)
    workspace = np.empty(int(sizes(M, N, K, threads)[0]) // 4 + 1, np.float32)
    ints = [M, N, K, batch, int(a_packed), *(a_strides or (K, 1)), int(b_packed), *(b_strides or (N, 1)),
            bias_mode, int(residual is not None), *residual_strides, activation, threads, *a_offsets, *b_offsets]
    _kernels.call("gemm_bf16", ints, [alpha, residual_scale, *params],
                  [a, b, y, workspace, bias if bias is not None else y, residual if residual is not None else y],
                  threads, use_ref)
    return y


def random(shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    x[x == 0] = 0.5
    return x


SPECIAL_BITS = np.array([
    0x3F808000,  # a tie: rounds to the even 0x3F80
    0x3F818000,  # a tie: rounds up to the even 0x3F82
    0x3F80FFFF, 0xBF7FFFFF, 0x00400000, 0x80000001,  # round up; carry into the exponent; denormals -> signed 0
    0x7F7FFFFF,  # the largest float rounds to infinity
    0x7F800000, 0xFF800000, 0x7FC00001, 0x7F800001,  # infinities; NaNs stay NaN (quieted)
    0x00800000, 0x3F800001, 0x42F6E979,
], dtype=np.uint32)


def test_reference_rounding_is_round_to_nearest_even():
    values = SPECIAL_BITS.view(np.float32)
    expected = [0x3F80, 0x3F82, 0x3F81, 0xBF80, 0x0000, 0x8000, 0x7F80, 0x7F80, 0xFF80, 0x7FC0, 0x7FC0, 0x0080,
                0x3F80, 0x42F7]
    assert bf16_bits(values).tolist() == expected


def tiles_index(row, k, rows, depth):
    """kernels/gemm_bf16.h's tiles format (AMX's A), written out again: per K block, rows padded to 16 and pairs
    to a multiple of 16, row-major."""
    blocks = -(-depth // KC_MAX)
    per_block = -(-depth // blocks)
    block = max(2, -(-per_block // 2) * 2)
    k0 = k // block * block
    width = lambda kc: 2 * (-(-((kc + 1) // 2) // 16) * 16)  # noqa: E731
    rows_padded = -(-rows // 16) * 16
    return k0 // block * rows_padded * width(block) + row * width(np.minimum(block, depth - k0)) + (k - k0)


@pytest.mark.parametrize("path", RUNNABLE_PATHS)
def test_packing_rounds_and_lays_out_k_pairs(path):
    rows, depth = 9, 2 * KC_MAX + 7  # a tail panel, three equal K blocks and an odd last block
    matrix = random((rows, depth), 3)
    matrix[0, :len(SPECIAL_BITS)] = SPECIAL_BITS.view(np.float32)
    use_path(path)
    try:
        for which, panel in ((0, MR), (1, NR)):
            packed = pack(matrix, rows, depth, depth, 1, which)
            expected = np.zeros_like(packed)  # padding rows and the odd block's missing half are zero
            r, k = np.meshgrid(np.arange(rows), np.arange(depth), indexing="ij")
            at = tiles_index(r, k, rows, depth) if which == 0 and path == "amx" else packed_index(r, k, rows, depth,
                                                                                                 panel)
            expected[at] = bf16_bits(matrix)
            np.testing.assert_array_equal(packed, expected, err_msg=f"which={which}")
    finally:
        default_path()


def test_activations_are_rounded_as_the_reference(isa):
    """The run-time rounding of both operands (A rows, B pairs) gives the reference's values: product by identity."""
    size = 40
    values = random((size, size), 4)
    # finite after rounding (an infinity times the identity's zeros would make its whole row NaN)
    values[3, :11] = SPECIAL_BITS[:6].view(np.float32).tolist() + [1e-40, -3e-39, 1.0000001, 2.5e38, -1.7e38]
    values[5, 7] = np.nan
    identity = np.eye(size, dtype=np.float32)
    products = (gemm(values, pack(identity, size, size, 1, size, 1), size, size, size, b_packed=True)[0],
                gemm(pack(identity, size, size, size, 1, 0), values, size, size, size, a_packed=True)[0])
    expected = round_to_bf16(values)
    for what, product in zip(("A", "B"), products):
        assert np.isnan(product[5, 7]), what
        finite = ~np.isnan(expected) & (np.arange(size) != 5)[:, None] & (np.arange(size) != 7)[None, :]
        # exact values (a sum of products cannot keep a zero's sign: -0 * 1 + 0 is +0)
        np.testing.assert_array_equal(product[finite], expected[finite], err_msg=f"rounding of {what}")


@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_matches_reference_and_fp32(isa, threads):
    for seed, (M, N, K) in enumerate(SHAPES):
        a, b = random((M, K), seed), random((K, N), seed + 100)
        reference, fp32 = bf16_matmul(a, b), a @ b
        a_packed, b_packed = pack(a, M, K, K, 1, 0), pack(b, N, K, 1, N, 1)
        for a_arg, b_arg, flags in ((a, b_packed, (0, 1)), (a_packed, b, (1, 0)), (a_packed, b_packed, (1, 1)),
                                    (a, b, (0, 0))):
            fast = gemm(a_arg, b_arg, M, N, K, a_packed=flags[0], b_packed=flags[1], threads=threads)[0]
            what = f"{M}x{N}x{K} packed {flags}"
            assert_close(fast, reference, what=what)
            assert_close_bf16(fast, fp32, what=what)
            np.testing.assert_array_equal(
                fast, gemm(a_arg, b_arg, M, N, K, a_packed=flags[0], b_packed=flags[1], threads=3 - threads)[0],
                err_msg=f"{what}: 1 and 2 threads differ")
        if M * N * K < 200_000:
            assert_close(gemm(a, b_packed, M, N, K, b_packed=True, use_ref=True)[0], reference, what="_ref")


def test_transposed_operands(isa):
    M, N, K = 23, 41, 77
    a_t, b_t = random((K, M), 5), random((N, K), 6)
    expected = bf16_matmul(a_t.T, b_t.T)
    assert_close(gemm(a_t, b_t, M, N, K, a_strides=(1, M), b_strides=(1, K), threads=2)[0], expected)
    a_packed = pack(a_t, M, K, 1, M, 0, 0.5)  # packing transposed and scaled
    assert_close(gemm(a_packed, b_t, M, N, K, a_packed=True, b_strides=(1, K))[0], 0.5 * expected)


@pytest.mark.parametrize("distribution", ["normal", "positive", "wide"])
def test_sums_are_within_the_measured_bound_of_exact(isa, distribution):
    """Each path's fp32 sums of bf16 products against float64 sums of the same rounded operands (AMX's order and
    rounding are the hardware's: ortx/ep/precision.py step 3), over K blocks, 16-pair tails and edge tiles."""
    rng = np.random.default_rng(17)
    for M, N, K in ((37, 70, 301), (64, 48, 576), (33, 20, 1031), (16, 16, 33)):
        a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
        if distribution == "positive":
            a, b = np.abs(a), np.abs(b)
        elif distribution == "wide":
            a, b = a * np.exp(3 * rng.standard_normal((M, K))), b * np.exp(3 * rng.standard_normal((K, N)))
        a, b = a.astype(np.float32), b.astype(np.float32)
        a16, b16 = round_to_bf16(a).astype(np.float64), round_to_bf16(b).astype(np.float64)
        bound = BF16_SUM_ERROR_UNITS * 2.0 ** -24 * (np.abs(a16) @ np.abs(b16))
        error = np.abs(gemm(a, b, M, N, K, threads=2)[0] - a16 @ b16)
        assert np.all(error <= bound), f"{M}x{N}x{K}: {np.max(error / bound) * BF16_SUM_ERROR_UNITS:.1f} units"


def test_avx512_bf16_path_is_bitwise_the_portable_path():
    """vdpbf16ps adds the odd product then the even one in fp32; the portable path does the same additions."""
    if not _kernels.cpu_has_avx512_bf16():
        pytest.xfail("no AVX512_BF16 on this CPU: only the portable path runs here")
    M, N, K = 37, 70, 301
    a, b = random((M, K), 7), random((K, N), 8)
    b_packed, bias = pack(b, N, K, 1, N, 1), random(N, 9)
    kwargs = dict(b_packed=True, bias_mode=2, bias=bias, activation=1, threads=2)
    use_path("avx512")
    try:
        fast = gemm(a, b_packed, M, N, K, **kwargs)[0]
        _kernels.force_isa("avx2")
        portable = gemm(a, b_packed, M, N, K, **kwargs)[0]
    finally:
        default_path()
    np.testing.assert_array_equal(fast, portable)


@pytest.mark.parametrize("activation,params", [(0, (0.0, 0.0)), (1, (0.0, 0.0)), (3, (-0.5, 0.75)),
                                               (4, (0.0, 0.0)), (6, (0.0, 0.0)), (9, (0.7, -0.3))])
def test_epilogue_runs_on_fp32_accumulators(isa, activation, params):
    definitions = {0: lambda x: x, 1: lambda x: np.maximum(x, 0), 3: lambda x: np.clip(x, -0.5, 0.75),
                   4: lambda x: 1 / (1 + np.exp(-x)), 6: lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
                   9: lambda x: 0.7 * x * np.clip(x / 6 + 0.5, 0, 1) - 0.3}
    M, N, K = 61, 45, 70  # on AMX: full 32x32 steps (the fused epilogue) and edge steps
    a, b = random((M, K), 1), random((K, N), 2)
    acc = 0.5 * bf16_matmul(a, b)
    row_bias, col_bias, full = random(M, 3), random(N, 4), random((M, N), 5)
    cases = [(1, row_bias, None, (0, 0, 0), acc + row_bias[:, None]),
             (2, col_bias, None, (0, 0, 0), acc + col_bias[None, :]),
             (0, None, full, (N, 1, 0), acc + 1.5 * full),
             (0, None, row_bias, (1, 0, 0), acc + 1.5 * row_bias[:, None])]
    for bias_mode, bias, residual, strides, before in cases:
        kwargs = dict(alpha=0.5, bias_mode=bias_mode, bias=bias, residual=residual, residual_strides=strides,
                      residual_scale=1.5, activation=activation, params=params)
        expected = definitions[activation](before).astype(np.float32)
        assert_close(gemm(a, b, M, N, K, threads=2, **kwargs)[0], expected, what=f"epilogue {bias_mode} {strides}")
        assert_close(gemm(a, b, M, N, K, use_ref=True, **kwargs)[0], expected, what="_ref epilogue")


def test_batched_offsets_with_packed_b(isa):
    M, N, K, batch = 9, 21, 35, 3
    a, b = random((batch, M, K), 10), random((batch, K, N), 11)
    each = int(sizes(M, N, K)[2])
    b_packed = np.concatenate([pack(b[i], N, K, 1, N, 1) for i in range(batch)])
    y = gemm(a, b_packed, M, N, K, b_packed=True, a_offsets=[i * M * K for i in range(batch)],
             b_offsets=[i * each for i in range(batch)], threads=2)
    assert_close(y, bf16_matmul(a, b))


# Convolutions through the lowering (weights packed by it): single-node models against ORT's fp32 and the oracle.
CONV_CASES = [  # (cin, cout, size, kernel, stride, pad, group, dilation)
    (16, 20, 9, 1, 1, 0, 1, 1),    # Case 1: pointwise, X read as B
    (8, 13, 40, 3, 1, 1, 1, 1),    # Case 2: bf16 planes (stride 1, >= 32 output columns), panels across row ends
    (3, 10, 36, 3, 1, 1, 1, 1),    # Case 2 with an odd K (27): the last pair's second row is zero
    (8, 13, 20, 3, 2, 1, 1, 1),    # Case 3: im2col, strided
    (3, 7, 17, 7, 2, 3, 1, 1),     # a stem
    (16, 24, 12, 3, 1, 1, 4, 1),   # grouped
    (4, 6, 20, 3, 3, 1, 1, 1),     # Case 3: im2col (stride 3)
    (6, 11, 15, 3, 1, 2, 1, 2),    # dilated, narrow output: im2col
    (6, 11, 18, 3, 1, 2, 1, 2),    # dilated from bf16 planes (output 18 wide: panels across row ends)
    (7, 12, 21, 3, 1, 1, 1, 1),    # stride 1, output 21 wide: one row end inside most panels
    (5, 9, 37, 3, 2, 1, 1, 1),     # stride 2 from bf16 planes (vpermt2w path), output 19 wide
    (3, 8, 64, 7, 2, 3, 1, 1),     # a stem from bf16 planes (K = 147, odd)
    (40, 70, 7, 3, 1, 1, 1, 1),    # K = 360 across two K blocks, few pixels
]


def conv_model(cin, cout, size, kernel, stride, pad, group, dilation, seed):
    weights = random((cout, cin // group, kernel, kernel), seed)
    bias = random(cout, seed + 1)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[pad] * 4, strides=[stride] * 2, group=group,
                            dilations=[dilation] * 2)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                             [2, cin, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(bias, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_matches_fp32_and_reference(isa, case):
    model = conv_model(*case, seed=sum(case))
    x = random((2, case[0], case[2], case[2]), 12)
    fp32 = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    fast = run_graph(model, {"x": x}, num_threads=2, precision="bf16")[0]
    assert_close_bf16(fast, fp32, what=f"conv {case}")
    reference = run_graph(model, {"x": x}, use_reference_kernels=True, precision="bf16")[0]
    assert_close(fast, reference, what=f"conv {case} vs _ref")
    np.testing.assert_array_equal(fast, run_graph(model, {"x": x}, num_threads=1, precision="bf16")[0],
                                  err_msg="1 and 2 threads differ")


# The direct form (kernels/conv_bf16_direct.c, conv_sizes_bf16's form 1): the input read in place from channel-pair
# planes. Every case must take it; odd channel counts leave a zero channel in the last pair, output counts that are
# not a multiple of 8 leave a partial panel, and few 32-pixel tiles on 2 threads split the rows into groups.
DIRECT_CASES = [  # (cin, cout, size, kernel, stride, pad, group, dilation)
    (8, 13, 40, 3, 1, 1, 1, 1),    # stride 1, 42-word phase rows: tiles across row ends
    (9, 16, 23, 3, 1, 1, 1, 1),    # odd Cin: the last pair's second channel is zero
    (16, 21, 29, 3, 2, 1, 1, 1),   # stride 2: four phases, 15 columns of 16 kept
    (12, 8, 19, 1, 2, 0, 1, 1),    # 1x1 at stride 2: one phase of four filled
    (10, 11, 22, 3, 1, 2, 1, 2),   # dilated
    (32, 24, 14, 3, 1, 1, 2, 1),   # two groups
    (72, 70, 7, 3, 1, 1, 1, 1),    # K = 648 in one pass (no K blocks), 9 panels on few tiles: row groups
    (17, 9, 31, 5, 1, 2, 1, 1),    # 5x5, odd Cin
    (40, 20, 37, 3, 2, 1, 1, 1),   # two 16-pair chunks (the second partial) at stride 2: gathered phase columns
]
# x-unfolded on AMX (conv_bf16_direct.c unfolds_x: fewer than 8 channels, Cin x KW of 16-32 values): the direct
# form there, the packed patch matrix on the other paths
UNFOLDED_CASES = [
    (3, 20, 45, 7, 2, 3, 1, 1),    # a 7x7/2 RGB stem (21 values): edge columns where some taps read padding
    (4, 9, 26, 5, 1, 3, 1, 2),     # 5x5 from 4 channels (20 values), dilation 2
    (3, 16, 66, 3, 2, 1, 1, 1),    # a 3x3/2 RGB stem (9 values: unfolded on the vdpbf16ps form only)
    (5, 12, 23, 5, 1, 2, 1, 1),    # windows 10 bytes apart (stride 1, odd Cin: 2-byte aligned tile rows)
    (2, 17, 50, 9, 3, 4, 1, 1),    # stride 3 (windows 12 bytes apart), 2 channels, columns dropped per row
    (7, 9, 30, 3, 1, 0, 1, 1),     # no padding: every window inside the row, 7 channels (two permutes a vector)
]


def conv_form(cin, cout, size, kernel, stride, pad, group, dilation):
    out_size = (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    ints = [2, cin, size, size, cout, out_size, out_size, kernel, kernel, stride, stride, pad, pad, dilation,
            dilation, group, 1, 0, 0, 2]
    out = np.zeros(3, np.int64)
    _kernels.call("conv_sizes_bf16", ints, [], [out])
    return int(out[2])


@pytest.fixture
def rows_off():
    """The pixel-rows form turned off (its small maps take the form they had before it)."""
    _kernels.call("conv_bf16_rows_off", [1], [], [])
    yield
    _kernels.call("conv_bf16_rows_off", [0], [], [])


@pytest.mark.parametrize("case", DIRECT_CASES)
def test_direct_conv_matches_fp32_and_reference(isa, case, rows_off):
    assert conv_form(*case) == 1, f"{case} does not take the direct form"
    test_conv_matches_fp32_and_reference(isa, case)


# The pixel-rows form (kernels/conv_bf16_rows.c, form 2; AVX512_BF16 without AMX): small maps where the direct form
# drops columns (7x7: 64 lanes for 49 pixels; not 1x1 convs), strided convs, odd channel counts, output channels
# not a multiple of 16 or 64 (masked last blocks), fewer than 7 pixels in the last tile (the residual: the
# epilogue test below).
ROWS_CASES = [  # (cin, cout, size, kernel, stride, pad, group, dilation)
    (72, 70, 7, 3, 1, 1, 1, 1),    # 7x7 output, 2 panels (the second 6 channels), 7 tiles of 7
    (33, 130, 14, 3, 2, 1, 1, 1),  # stride 2 to 7x7, odd Cin, 3 panels
    (16, 40, 9, 3, 2, 1, 1, 1),    # 3x3 stride 2 to 5x5: 25 pixels in tiles of 6 and 7
    (24, 64, 12, 3, 1, 2, 1, 2),   # dilated, 12x12
    (20, 17, 5, 5, 1, 2, 1, 1),    # 5x5 taps on a 5x5 map
]


@pytest.fixture
def rows_path():
    """The vdpbf16ps path, AMX off on a CPU that has it (the pixel-rows form's only path); skips without it."""
    if _kernels.cpu_isa() != "avx512" or not _kernels.cpu_has_avx512_bf16():
        pytest.skip("the pixel-rows form needs AVX512_BF16")
    use_path("avx512")
    assert conv_form(*ROWS_CASES[0]) == 2
    yield
    default_path()


@pytest.mark.parametrize("case", ROWS_CASES)
def test_rows_conv_matches_fp32_reference_and_the_other_forms_bits(case, rows_path):
    assert conv_form(*case) == 2, f"{case} does not take the pixel-rows form"
    test_conv_matches_fp32_and_reference("avx512", case)
    model = conv_model(*case, seed=sum(case))
    x = random((2, case[0], case[2], case[2]), 12)
    rows = run_graph(model, {"x": x}, num_threads=2, precision="bf16")[0]
    _kernels.call("conv_bf16_rows_off", [1], [], [])
    try:
        form = conv_form(*case)
        other = run_graph(model, {"x": x}, num_threads=2, precision="bf16")[0]
    finally:
        _kernels.call("conv_bf16_rows_off", [0], [], [])
    if form == 1:  # the direct form sums the same K pairs in the same order
        np.testing.assert_array_equal(rows, other)
    else:
        assert_close_bf16(rows, other, what=f"rows vs form {form}")


@pytest.mark.parametrize("case", UNFOLDED_CASES)
def test_x_unfolded_direct_conv_matches_fp32_and_reference(isa, case):
    """Unfolded on every path when Cin x KW fills 16-32 values (the AMX form's one chunk), and on the vdpbf16ps and
    portable paths from 8 values."""
    values = case[0] * case[3]
    assert conv_form(*case) == (1 if isa != "amx" or 16 <= values <= 32 else 0)
    test_conv_matches_fp32_and_reference(isa, case)


@pytest.mark.parametrize("special", [np.nan, np.inf])
def test_x_unfolded_conv_keeps_a_nan_or_an_infinity_in_its_windows(isa, special):
    """The AMX form's windows read the next pixels' values, which zero weights cancel unless one is a NaN or an
    infinity: such an input takes the zero-padded copies, so only the outputs whose window holds it are hit."""
    case = UNFOLDED_CASES[0]
    model = conv_model(*case, seed=sum(case))
    x = random((2, case[0], case[2], case[2]), 13)
    x[0, 1, 20, 30] = special
    x[1, 2, 0, 44] = -special
    fp32 = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    fast = run_graph(model, {"x": x}, num_threads=2, precision="bf16")[0]
    hit = ~np.isfinite(fp32)
    assert 0 < hit.sum() < hit.size // 8
    np.testing.assert_array_equal(~np.isfinite(fast), hit)
    np.testing.assert_array_equal(np.isnan(fast), np.isnan(fp32))
    np.testing.assert_array_equal(fast[np.isinf(fp32)], fp32[np.isinf(fp32)])
    assert_close_bf16(np.where(hit, 0, fast), np.where(hit, 0, fp32), what=f"conv {case} beside the {special}")


def numpy_conv_bf16(x, weights, stride, pad, group):
    """NCHW conv of bf16-rounded operands, products and sums in float64 (the float32 kernels differ by rounding)."""
    x16, w16 = round_to_bf16(x).astype(np.float64), round_to_bf16(weights).astype(np.float64)
    batch, cin, size, _ = x.shape
    cout, cin_g, kernel, _ = weights.shape
    padded = np.pad(x16, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out_size = (size + 2 * pad - kernel) // stride + 1
    y = np.zeros((batch, cout, out_size, out_size))
    cout_g = cout // group
    for g in range(group):
        for ky in range(kernel):
            for kx in range(kernel):
                patch = padded[:, g * cin_g:(g + 1) * cin_g, ky:ky + stride * out_size:stride,
                               kx:kx + stride * out_size:stride]
                y[:, g * cout_g:(g + 1) * cout_g] += np.einsum("bchw,oc->bohw", patch,
                                                               w16[g * cout_g:(g + 1) * cout_g, :, ky, kx])
    return y


@pytest.mark.parametrize("activation", [0, 1, 6])
def test_direct_conv_epilogue_adds_bias_and_residual_before_the_activation(isa, activation, rows_off):
    """conv2d_bf16 called directly with FusedConv's residual and activation, against numpy on the same rounded
    operands: the kept lanes of each vector are packed together, so the residual must be read at their outputs."""
    assert conv_form(11, 19, 13, 3, 1, 1, 1, 1) == 1
    _epilogue_check(11, 19, 13, 3, 1, 1, 1, activation)


@pytest.mark.parametrize("activation", [0, 1, 6])
def test_rows_conv_epilogue_adds_bias_and_residual_before_the_activation(activation, rows_path):
    """The same for the pixel-rows form, which scatters its channel vectors."""
    assert conv_form(11, 19, 13, 3, 1, 1, 1, 1) == 2
    _epilogue_check(11, 19, 13, 3, 1, 1, 1, activation)


def _epilogue_check(cin, cout, size, kernel, stride, pad, group, activation):
    x, weights = random((2, cin, size, size), 20), random((cout, cin, kernel, kernel), 21)
    bias, residual = random(cout, 22), random((2, cout, size, size), 23)
    ints = [2, cin, size, size, cout, size, size, kernel, kernel, stride, stride, pad, pad, 1, 1, group, 1, 1,
            activation, 2]
    sizes_out = np.zeros(3, np.int64)
    _kernels.call("conv_sizes_bf16", ints, [], [sizes_out])
    packed = np.empty(int(sizes_out[1]), np.uint16)
    _kernels.call("conv_pack_bf16", ints, [], [weights, packed])
    before = numpy_conv_bf16(x, weights, stride, pad, group) + bias[None, :, None, None] + residual
    expected = {0: before, 1: np.maximum(before, 0), 6: before * np.clip(before / 6 + 0.5, 0, 1)}[activation]
    for threads, use_ref in ((2, False), (1, False), (1, True)):
        y = np.full((2, cout, size, size), np.nan, np.float32)
        workspace = np.empty(int(sizes_out[0]) // 4 + 1, np.float32)
        _kernels.call("conv2d_bf16", ints, [0.0, 0.0], [x, packed, y, workspace, bias, residual], threads, use_ref)
        assert_close(y, expected.astype(np.float32), what=f"threads {threads} ref {use_ref}")


@pytest.mark.parametrize("case", [
    (9, 16, 23, 3, 2, 1, 1, 1),   # stride 2, phase rows of 12-13 words: one partial run
    (8, 16, 75, 3, 2, 1, 1, 1),   # stride 2, phase rows of 38 words: two whole runs of 16 and a tail
    (10, 16, 40, 1, 2, 0, 1, 1),  # 1x1 stride 2: one phase of four filled
    (8, 16, 50, 3, 3, 1, 1, 1),   # stride 3: gathered
])
def test_direct_conv_avx512_bf16_is_bitwise_the_portable_path(case, rows_off):
    """The strided phases' rows come from pair_run_strided (vpermt2ps's even lanes at stride 2) on AVX512_BF16."""
    if not _kernels.cpu_has_avx512_bf16():
        pytest.xfail("no AVX512_BF16 on this CPU: only the portable path runs here")
    assert conv_form(*case) == 1
    model, x = conv_model(*case, seed=3), random((2, case[0], case[2], case[2]), 4)
    use_path("avx512")
    try:
        fast = run_graph(model, {"x": x}, num_threads=2, precision="bf16")[0]
        _kernels.force_isa("avx2")
        portable = run_graph(model, {"x": x}, num_threads=2, precision="bf16")[0]
    finally:
        default_path()
    np.testing.assert_array_equal(fast, portable)


# conv_transpose2d_bf16 (kernels/conv_transpose_bf16.c): ConvTransposes whose kernel equals their stride.
TRANSPOSE_CASES = [  # (cin, cout, size, kernel (= stride), group, bias)
    (64, 24, 10, 2, 1, True),    # 2x2 stride 2: rows (kx 0, kx 1) interleaved
    (65, 1, 7, 2, 1, True),      # odd Cin, one output channel: a partial panel (4 rows)
    (128, 6, 5, 3, 2, False),    # 3x3 stride 3, two groups, no bias: the general scatter
]


def conv_transpose_model(cin, cout, size, kernel, group, bias, seed):
    weights = random((cin, cout // group, kernel, kernel), seed)
    inputs, initializers = ["x", "w"], [numpy_helper.from_array(weights, "w")]
    if bias:
        inputs.append("b")
        initializers.append(numpy_helper.from_array(random(cout, seed + 1), "b"))
    node = helper.make_node("ConvTranspose", inputs, ["y"], strides=[kernel] * 2, group=group)
    graph = helper.make_graph([node], "convT", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              [2, cin, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("activation", ["Relu", "Sigmoid"])
@pytest.mark.parametrize("case", TRANSPOSE_CASES[:2] + [(128, 6, 5, 3, 1, True)])
def test_fused_conv_transpose_applies_the_activation_in_its_scatter(isa, case, activation):
    """ai.ortx FusedConvTranspose on the bf16 path: the activation after the bias in the tile's scatter (KW 2 by
    runs, the general scatter), against fp32 ConvTranspose -> activation."""
    model = conv_transpose_model(*case, seed=sum(case[:5]))
    x = random((2, case[0], case[2], case[2]), 13)
    explicit = conv_transpose_model(*case, seed=sum(case[:5]))
    explicit.graph.node[0].output[0] = "t"
    explicit.graph.node.append(helper.make_node(activation, ["t"], ["y"]))
    fp32 = onnxruntime.InferenceSession(explicit.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    node = model.graph.node[0]
    node.domain, node.op_type = "ai.ortx", "FusedConvTranspose"
    node.attribute.append(helper.make_attribute("activation", activation))
    model.opset_import.append(helper.make_opsetid("ai.ortx", 1))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, fp32.shape))
    fast = run_graph(model, {"x": x}, num_threads=2, precision="bf16")[0]
    assert_close_bf16(fast, fp32, what=f"fused convT {case} {activation}")
    reference = run_graph(model, {"x": x}, use_reference_kernels=True, precision="bf16")[0]
    assert_close(fast, reference, what=f"fused convT {case} {activation} vs _ref")


def transpose_applies(cin, cout, size, kernel, group, pad=0):
    out_size = (size - 1) * kernel + kernel - 2 * pad
    ints = [2, cin, size, size, cout, out_size, out_size, kernel, kernel, kernel, kernel, pad, pad, 1, 1, group, 1,
            0, 0, 2]
    out = np.zeros(3, np.int64)
    _kernels.call("conv_transpose_sizes_bf16", ints, [], [out])
    return bool(out[2])


@pytest.mark.parametrize("case", TRANSPOSE_CASES)
def test_conv_transpose_matches_fp32_and_reference(isa, case):
    assert transpose_applies(*case[:5])
    model = conv_transpose_model(*case, seed=sum(case[:5]))
    x = random((2, case[0], case[2], case[2]), 13)
    fp32 = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    fast = run_graph(model, {"x": x}, num_threads=2, precision="bf16")[0]
    assert_close_bf16(fast, fp32, what=f"convT {case}")
    reference = run_graph(model, {"x": x}, use_reference_kernels=True, precision="bf16")[0]
    assert_close(fast, reference, what=f"convT {case} vs _ref")
    np.testing.assert_array_equal(fast, run_graph(model, {"x": x}, num_threads=1, precision="bf16")[0],
                                  err_msg="1 and 2 threads differ")


def test_conv_transpose_with_overlap_or_padding_stays_fp32():
    assert not transpose_applies(24, 24, 20, 2, 1, pad=1)
    assert not transpose_applies(24, 24, 20, 2, 1)  # PP-OCR det's: fewer than 64 input channels per group
