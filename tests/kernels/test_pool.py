"""Pool kernels (maxpool_f32, avgpool_f32, global_*pool_f32): fast vs reference vs onnxruntime on one-node models.

Every case runs for each ISA this CPU has, with 1 and 2 threads; windowed pools reduce taps in the reference's
order, so fast and reference agree bitwise, and every kernel is bitwise repeatable run to run.
"""
from __future__ import annotations

import warnings

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

from ortx import _kernels
from ortx.ep.compile_nodes import check_node, infer_shapes, run_graph
from tests.tolerances import assert_close

ISA_ORDER = ("portable", "avx2", "avx512")
RUNNABLE_ISAS = ISA_ORDER[: ISA_ORDER.index(_kernels.cpu_isa()) + 1]


def one_node_model(op_type, input_shape, opset, *, dtype=TensorProto.FLOAT, num_outputs=1, **attributes):
    outputs = ["y"] + [f"extra{i}" for i in range(1, num_outputs)]
    node = helper.make_node(op_type, ["x"], outputs, **attributes)
    graph = helper.make_graph(
        [node], "one_node", [helper.make_tensor_value_info("x", dtype, input_shape)],
        [helper.make_tensor_value_info(name, dtype if name == "y" else TensorProto.INT64, None)
         for name in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def run_ort(model, feeds):
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def check_against_ort(model, x, *, bitwise_ref=True):
    expected = run_ort(model, {"x": x})[0]
    reference = run_graph(model, {"x": x}, use_reference_kernels=True)[0]
    assert_close(reference, expected, what="reference vs onnxruntime")
    for threads in (1, 2):
        fast = run_graph(model, {"x": x}, num_threads=threads)[0]
        again = run_graph(model, {"x": x}, num_threads=threads)[0]
        np.testing.assert_array_equal(fast, again, err_msg="not bitwise repeatable")
        assert_close(fast, expected, what=f"fast ({threads} threads) vs onnxruntime")
        if bitwise_ref:
            np.testing.assert_array_equal(fast, reference, err_msg="fast vs reference not bitwise equal")


def random_input(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    x[x == 0] = 0.5
    return x


# (input shape, attributes, opset): 1-D, 2-D, 3-D; odd widths so vector tails are exercised
MAXPOOL_CASES = [
    ((1, 3, 37, 45), dict(kernel_shape=[2, 2], strides=[2, 2]), 11),
    ((2, 4, 33, 70), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]), 11),
    ((1, 5, 29, 51), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1), 12),
    ((1, 3, 20, 27), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), 12),
    ((1, 2, 17, 41), dict(kernel_shape=[3, 2], strides=[2, 1], auto_pad="SAME_UPPER"), 11),
    ((1, 2, 17, 41), dict(kernel_shape=[2, 3], strides=[1, 2], auto_pad="SAME_LOWER"), 11),
    ((1, 2, 17, 41), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="VALID"), 11),
    ((1, 4, 15, 112), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), 12),  # ResNet's stem pool rows
    ((1, 2, 19, 40), dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 1, 2, 1]), 12),
    ((1, 2, 19, 40), dict(kernel_shape=[2, 3], strides=[3, 3], dilations=[1, 2], ceil_mode=1), 12),
    ((2, 3, 61), dict(kernel_shape=[3], strides=[2], pads=[1, 0]), 11),
    ((1, 2, 7, 9, 19), dict(kernel_shape=[2, 2, 3], strides=[2, 2, 1], pads=[0, 1, 1, 1, 0, 1]), 11),
    ((1, 1, 5, 5), dict(kernel_shape=[5, 5]), 11),
]


@pytest.mark.parametrize("shape,attributes,opset", MAXPOOL_CASES)
def test_maxpool_matches_onnxruntime(isa, shape, attributes, opset):
    model = one_node_model("MaxPool", list(shape), opset, **attributes)
    check_against_ort(model, random_input(shape, 1))


AVGPOOL_CASES = [
    ((1, 3, 37, 45), dict(kernel_shape=[2, 2], strides=[2, 2]), 11),
    ((2, 4, 33, 70), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), 11),
    ((2, 4, 33, 70), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1), 11),
    ((1, 5, 29, 51), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1), 11),
    ((1, 5, 29, 51), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                          count_include_pad=1), 11),
    ((1, 3, 20, 27), dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1, count_include_pad=1), 11),
    ((1, 2, 17, 41), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER", count_include_pad=1), 11),
    ((1, 2, 17, 41), dict(kernel_shape=[3, 2], strides=[2, 1], auto_pad="SAME_LOWER"), 11),
    ((1, 6, 24, 80), dict(kernel_shape=[3, 2], strides=[3, 2]), 12),  # PP-OCRv4 rec's AveragePool
    ((1, 2, 19, 40), dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[1, 2, 1, 2]), 19),
    ((1, 2, 19, 40), dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[1, 2, 1, 2], count_include_pad=1), 19),
    ((2, 3, 61), dict(kernel_shape=[4], strides=[3], pads=[2, 1], count_include_pad=1), 11),
    ((1, 2, 7, 9, 19), dict(kernel_shape=[2, 2, 3], strides=[2, 2, 1], pads=[0, 1, 1, 1, 0, 1]), 11),
]


@pytest.mark.parametrize("shape,attributes,opset", AVGPOOL_CASES)
def test_avgpool_matches_onnxruntime(isa, shape, attributes, opset):
    model = one_node_model("AveragePool", list(shape), opset, **attributes)
    check_against_ort(model, random_input(shape, 2))


@pytest.mark.parametrize("op_type", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 5, 17, 23), (1, 3, 160, 160), (1, 4, 1, 1), (2, 3, 45), (1, 2, 3, 5, 7)])
def test_global_pool_matches_onnxruntime(isa, op_type, shape):
    model = one_node_model(op_type, list(shape), 13)
    # global averages use 8-lane partial sums: compared with tolerance, not bitwise, to the reference
    check_against_ort(model, random_input(shape, 3), bitwise_ref=op_type == "GlobalMaxPool")


def test_maxpool_with_used_indices_is_declined():
    model = one_node_model("MaxPool", [1, 1, 4, 4], 12, num_outputs=2, kernel_shape=[2, 2])
    node = infer_shapes(model).graph.node(0)
    assert check_node(node) == "MaxPool: Indices output is used (not supported)"


def test_unclaimed_pool_configurations_have_reasons():
    cases = [
        (one_node_model("MaxPool", [1, 1, 4, 4], 12, dtype=TensorProto.INT8, kernel_shape=[2, 2]), "dtype int8"),
        (one_node_model("AveragePool", [1, 1, 4, 4], 11, kernel_shape=[2, 2], dilations=[2, 2]),
         "dilations before opset 19"),
        (one_node_model("MaxPool", [1, 1, 8, 8], 12, kernel_shape=[2, 2], pads=[2, 2, 2, 2]), "not smaller than"),
        (one_node_model("GlobalAveragePool", ["batch", 3, 4, 4], 13), "dynamic shape"),
    ]
    for model, fragment in cases:
        reason = check_node(infer_shapes(model).graph.node(0))
        assert reason is not None and fragment in reason, (fragment, reason)


def test_kernels_direct_call_fast_equals_reference(isa):
    """Width 8k+r rows through the kernel ABI directly: the vector body, its overlapping last group and its scalar
    edges."""
    rng = np.random.default_rng(4)
    for stride in (1, 2):
        for width in (8, 15, 16, 33, 40, 112):  # 40, 112: interior outputs not a multiple of 8 at stride 2
            x = rng.standard_normal((3, 1, 5, width)).astype(np.float32)
            out_w = (width + 2 - 3) // stride + 1
            out_h = (5 + 2 - 3) // stride + 1
            ints = [3, 1, 5, width, 1, out_h, out_w, 1, 3, 3, 1, stride, stride, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0]
            for kernel in ("maxpool_f32", "avgpool_f32"):
                fast = np.zeros((3, out_h, out_w), np.float32)
                ref = np.zeros_like(fast)
                _kernels.call(kernel, ints, [], [x, fast], num_threads=2)
                _kernels.call(kernel, ints, [], [x, ref], use_ref=True)
                np.testing.assert_array_equal(fast, ref, err_msg=f"{kernel} stride {stride} width {width}")


# Pools a plane at a time on AVX-512 (pool_avx512.c), per w stride: (height, width, (kh, kw), (stride_h, dilation_h),
# (top, left, bottom, right), count_include_pad).
PLANE_CASES = {
    # 16 columns a vector with masked taps: narrow and vector-crossing widths, kernels 1-7, asymmetric pads (pad_end
    # past pad_begin, as ceil_mode makes), h stride 2 and h dilation 2; wider than 256 columns: the row functions
    1: [(7, 7, (3, 3), (1, 1), (1, 1, 1, 1), 0), (7, 7, (3, 3), (1, 1), (1, 1, 1, 1), 1),
        (5, 1, (3, 1), (1, 1), (1, 0, 1, 0), 0), (4, 2, (2, 2), (1, 1), (0, 0, 1, 1), 1),
        (9, 14, (5, 5), (2, 1), (2, 2, 2, 2), 0), (9, 16, (7, 7), (1, 1), (3, 3, 3, 3), 1),
        (8, 17, (3, 3), (1, 2), (2, 1, 2, 1), 0), (6, 31, (3, 4), (1, 1), (1, 1, 1, 3), 1),
        (6, 33, (1, 3), (2, 1), (0, 0, 0, 2), 0), (3, 300, (3, 3), (1, 1), (1, 1, 1, 1), 0)],
    # 1-3 w taps, even and odd columns split by permutes: output widths below, at and across 16 and 32 columns,
    # left and right padding (ceil_mode's larger pad_end), h strides 1-3
    2: [(27, 27, (3, 3), (2, 1), (0, 0, 0, 0), 0), (13, 13, (3, 3), (2, 1), (0, 0, 1, 1), 1),
        (9, 31, (3, 3), (2, 1), (1, 1, 1, 1), 0), (9, 31, (3, 3), (2, 1), (1, 1, 1, 1), 1),
        (8, 32, (2, 2), (2, 1), (0, 0, 0, 0), 0), (8, 33, (2, 2), (2, 1), (0, 0, 0, 1), 1),
        (5, 64, (3, 3), (1, 1), (1, 1, 1, 2), 0), (6, 97, (1, 3), (3, 1), (0, 1, 0, 1), 1),
        (7, 7, (3, 1), (2, 1), (1, 0, 1, 0), 0), (4, 3, (3, 3), (1, 1), (1, 1, 1, 1), 1)],
}


@pytest.mark.parametrize("stride_w", [1, 2])
def test_planes_equal_the_reference_bitwise(isa, stride_w):
    """Max and average pools through the plane kernels with count_include_pad on and off and NaN / infinity
    inputs: bitwise the reference, 1 and 2 threads."""
    rng = np.random.default_rng(4 + stride_w)
    for height, width, (kh, kw), (stride_h, dil_h), (top, left, bottom, right), include_pad in PLANE_CASES[stride_w]:
        x = rng.standard_normal((5, 1, height, width)).astype(np.float32)
        x[1, 0, 0, 0], x[2, 0, height // 2, width - 1], x[3, 0, -1, width // 2] = np.nan, np.inf, -np.inf
        out_h = (height + top + bottom - dil_h * (kh - 1) - 1) // stride_h + 1
        out_w = (width + left + right - kw) // stride_w + 1
        ints = [5, 1, height, width, 1, out_h, out_w, 1, kh, kw, 1, stride_h, stride_w, 0, top, left, 0, bottom,
                right, 1, dil_h, 1, include_pad]
        for kernel in ("maxpool_f32", "avgpool_f32"):
            ref = np.zeros((5, out_h, out_w), np.float32)
            _kernels.call(kernel, ints, [], [x, ref], use_ref=True)
            for threads in (1, 2):
                fast = np.full_like(ref, 7.0)
                _kernels.call(kernel, ints, [], [x, fast], num_threads=threads)
                np.testing.assert_array_equal(fast.view(np.uint32), ref.view(np.uint32),
                                              err_msg=f"{kernel} {height}x{width} k{kh}x{kw} threads {threads}")


def test_isas_above_this_cpu_are_not_runnable():
    """The ISAs this machine lacks cannot be forced; they are reported, not silently skipped."""
    missing = ISA_ORDER[len(RUNNABLE_ISAS):]
    for name in missing:
        assert _kernels.force_isa(name) == _kernels.cpu_isa()
    _kernels.force_isa(_kernels.cpu_isa())
    if missing:
        warnings.warn(f"pool kernels: ISAs not runnable on this CPU: {', '.join(missing)}")
    assert RUNNABLE_ISAS[-1] == _kernels.cpu_isa()


def _blocked(x: np.ndarray) -> np.ndarray:
    """[N, C, H, W] -> [N, C/16, H, W, 16] (pad lanes NaN: a max that read them into real lanes would show it)."""
    n, c, h, w = x.shape
    blocks = -(-c // 16)
    padded = np.full((n, blocks * 16, h, w), np.nan, np.float32)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, blocks, 16, h, w).transpose(0, 1, 3, 4, 2))


NCHWC_POOL_CASES = [  # (N, C, H, W, kernel, stride, pads (top, left, bottom, right), dilation)
    (1, 64, 112, 112, 3, 2, (1, 1, 1, 1), 1),  # ResNet's stem pool
    (2, 20, 9, 13, 2, 2, (0, 0, 0, 0), 1),     # two images, a partial block
    (1, 16, 10, 7, 3, 1, (1, 1, 1, 1), 1),     # stride 1 "same"
    (1, 32, 11, 11, 3, 2, (0, 0, 1, 1), 2),    # dilation 2, end padding only (a ceil_mode shape)
    (1, 16, 6, 300, 3, 2, (1, 1, 1, 1), 1),    # wider than the AVX-512 rows' column buffer: the portable loop
]


@pytest.mark.parametrize("case", NCHWC_POOL_CASES)
@pytest.mark.parametrize("threads", [1, 2])
def test_maxpool_nchwc_equals_maxpool_on_nchw(isa, case, threads):
    """maxpool_nchwc_f32 (blocked runs' MaxPool) gives maxpool_f32's bits on each channel; its reference too."""
    n, c, h, w, k, s, pads, d = case
    x = np.random.default_rng(5).standard_normal((n, c, h, w)).astype(np.float32)
    x[0, 0, 0, :3] = np.nan  # a NaN tap is skipped by both
    oh = (h + pads[0] + pads[2] - d * (k - 1) - 1) // s + 1
    ow = (w + pads[1] + pads[3] - d * (k - 1) - 1) // s + 1
    ints = [1, 1, h, w, 1, oh, ow, 1, k, k, 1, s, s, 0, pads[0], pads[1], 0, pads[2], pads[3], 1, d, d, 0]
    expected = np.zeros((n, c, oh, ow), np.float32)
    _kernels.call("maxpool_f32", [n * c] + ints[1:], [], [x, expected], num_threads=threads)
    blocks = -(-c // 16)
    for use_ref in (False, True):
        y = np.full((n, blocks, oh, ow, 16), np.nan, np.float32)
        _kernels.call("maxpool_nchwc_f32", [n * blocks] + ints[1:], [], [_blocked(x), y], num_threads=threads,
                      use_ref=use_ref)
        got = np.ascontiguousarray(y.transpose(0, 1, 4, 2, 3).reshape(n, blocks * 16, oh, ow)[:, :c])
        np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32), err_msg=f"ref {use_ref}")


@pytest.mark.parametrize("case", NCHWC_POOL_CASES + [(2, 40, 9, 9, 3, 2, (1, 1, 1, 1), 1)])  # + half a chunk
@pytest.mark.parametrize("threads", [1, 2])
def test_maxpool_pair_rows_equals_maxpool_of_the_rounded_input(isa, case, threads):
    """maxpool_pair_rows_f32 (a bf16 stem's pair rows into a blocked MaxPool output) gives maxpool_f32's bits on
    the bf16 values, block b of image n read from chunk n * chunks + b // 2's half b % 2; its reference too."""
    from ortx.ep.precision import round_to_bf16
    from tests.kernels.test_pair_rows import to_pair_rows

    n, c, h, w, k, s, pads, d = case
    x = np.random.default_rng(6).standard_normal((n, c, h, w)).astype(np.float32)
    x[0, 0, 0, :3] = np.nan
    oh = (h + pads[0] + pads[2] - d * (k - 1) - 1) // s + 1
    ow = (w + pads[1] + pads[3] - d * (k - 1) - 1) // s + 1
    ints = [1, 1, h, w, 1, oh, ow, 1, k, k, 1, s, s, 0, pads[0], pads[1], 0, pads[2], pads[3], 1, d, d, 0]
    expected = np.zeros((n, c, oh, ow), np.float32)
    _kernels.call("maxpool_f32", [n * c] + ints[1:], [], [round_to_bf16(x), expected], num_threads=threads)
    blocks = -(-c // 16)
    for use_ref in (False, True):
        y = np.full((n, blocks, oh, ow, 16), np.nan, np.float32)
        _kernels.call("maxpool_pair_rows_f32", [n * blocks] + ints[1:] + [blocks], [], [to_pair_rows(x), y],
                      num_threads=threads, use_ref=use_ref)
        got = np.ascontiguousarray(y.transpose(0, 1, 4, 2, 3).reshape(n, blocks * 16, oh, ow)[:, :c])
        np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32), err_msg=f"ref {use_ref}")


@pytest.mark.parametrize("case", NCHWC_POOL_CASES + [(2, 40, 9, 9, 3, 2, (1, 1, 1, 1), 1)])  # + half a chunk
@pytest.mark.parametrize("threads", [1, 2])
def test_maxpool_pair_rows_bf16_is_maxpool_of_the_rounded_input_rounded(isa, case, threads):
    """maxpool_pair_rows_bf16 (pair rows in and out, maxima on 16-bit order keys) gives maxpool_f32's values on the
    bf16 input: NaNs left out (a window of NaNs only, and one with a positive NaN beside values), infinities and
    both zeros ordered as floats (+0 above -0: maxpool_f32 may keep either, so zeros compare as values); a window
    with no value left is -inf (maxpool_f32's lowest float, rounded); channels past C stay zero; its reference
    too."""
    from ortx.ep.precision import bf16_bits, round_to_bf16
    from tests.kernels.test_pair_rows import assert_pads_zero, from_pair_rows, to_pair_rows

    n, c, h, w, k, s, pads, d = case
    x = np.random.default_rng(7).standard_normal((n, c, h, w)).astype(np.float32)
    x[0, 0, :, :] = np.nan  # windows of NaNs only
    x[0, 1, 0, :4] = [np.nan, -np.inf, np.inf, -np.nan]
    x[-1, -1] = -np.abs(x[-1, -1])  # a channel of no positive value: maxima of -0 alone and of -0 beside +0
    x[-1, -1, ::2, ::3] = -0.0
    x[-1, -1, h // 2 + 1::3, 1::3] = 0.0  # the top half: -0 alone
    oh = (h + pads[0] + pads[2] - d * (k - 1) - 1) // s + 1
    ow = (w + pads[1] + pads[3] - d * (k - 1) - 1) // s + 1
    ints = [1, 1, h, w, 1, oh, ow, 1, k, k, 1, s, s, 0, pads[0], pads[1], 0, pads[2], pads[3], 1, d, d, 0]
    maxima = np.zeros((n, c, oh, ow), np.float32)
    _kernels.call("maxpool_f32", [n * c] + ints[1:], [], [round_to_bf16(x), maxima], num_threads=threads)
    expected = (bf16_bits(maxima).astype(np.uint32) << 16).view(np.float32)  # rounded: -FLT_MAX becomes -inf
    assert np.isneginf(expected[0, 0]).all() and not np.isnan(expected).any()
    chunks = -(-c // 32)
    for use_ref in (False, True):
        y = np.full((n, chunks, oh * ow, 32), 0xFFFF, np.uint16)
        _kernels.call("maxpool_pair_rows_bf16", [n * chunks] + ints[1:], [], [to_pair_rows(x), y],
                      num_threads=threads, use_ref=use_ref)
        assert_pads_zero(y, c)
        got = from_pair_rows(y, c, oh, ow)
        np.testing.assert_array_equal(got, expected, err_msg=f"ref {use_ref}")
        if not use_ref:  # and its bits: +0 above -0, where maxpool_f32 keeps whichever zero it meets first
            keyed = key_maxpool(bf16_bits(x), k, s, pads, d, oh, ow)
            assert {0, 0x8000} <= set(np.unique(keyed[-1, -1]).tolist()), "both zeros must be maxima somewhere"
            np.testing.assert_array_equal(bf16_bits(got), keyed)


def key_maxpool(bits, k, s, pads, d, oh, ow):
    """Max pooling of bf16 bits as 16-bit order keys (magnitude flipped under a set sign; NaNs as -inf's key)."""
    keys = np.where(bits & 0x8000, bits ^ 0x7FFF, bits).astype(np.uint16).view(np.int16)
    lowest = np.int16(np.uint16(0x807F).view(np.int16))
    keys = np.where((bits & 0x7FFF) > 0x7F80, lowest, keys)
    padded = np.pad(keys, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=lowest)
    best = np.full(keys.shape[:2] + (oh, ow), lowest, np.int16)
    for ky in range(k):
        for kx in range(k):
            best = np.maximum(best, padded[:, :, ky * d:ky * d + s * (oh - 1) + 1:s, kx * d:kx * d + s * (ow - 1) + 1:s])
    bits = best.view(np.uint16)
    return np.where(bits & 0x8000, bits ^ 0x7FFF, bits).astype(np.uint16)
