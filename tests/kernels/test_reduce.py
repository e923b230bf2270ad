"""Reduce-family kernels (reduce_f32, softmax_f32, layer_norm_f32) and their lowerings.

Kernels: fast vs `_ref` over [outer, length, inner] layouts with odd sizes (inner 1 and > 1), every runnable
ISA, 1 and 2 threads, bitwise identical run to run. Lowerings: one-node models vs onnxruntime through
`assert_matches_onnxruntime` (test_elementwise.py), across opsets where axes move from attribute to input and
Softmax changes meaning; check() reasons for unclaimed cases.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ortx import _kernels
from ortx.ep.lowering.reduce import reduction_groups
from tests.kernels.test_elementwise import (  # noqa: F401  (isa is a fixture)
    assert_matches_onnxruntime, check_reason, isa, one_node_model, random_normal,
)
from tests.tolerances import assert_close

LAYOUTS = [(1, 1, 1), (1, 37, 1), (5, 33, 1), (3, 1000, 1), (2, 7, 9), (4, 5, 131), (1, 3, 5000), (2, 300, 7),
           # short rows (length <= 8: gathered lanes, pairs permuted), row counts off the 8/16-lane tile
           (1, 2, 1), (17, 2, 1), (33, 3, 1), (23, 8, 1), (7, 9, 1), (1001, 2, 1)]


@pytest.mark.parametrize("op, post", [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 2)])
def test_reduce_kernel_matches_reference(isa, op, post):
    rng = np.random.default_rng(op * 3 + post)
    for outer, length, inner in LAYOUTS:
        x = random_normal(rng, (outer, length, inner))
        ints, floats = [op, outer, length, inner, post], [1.0 / length]
        reference = np.empty((outer, inner), np.float32)
        _kernels.call("reduce_f32", ints, floats, [x, reference], use_ref=True)
        for threads in (1, 2):
            fast, again = np.empty_like(reference), np.empty_like(reference)
            _kernels.call("reduce_f32", ints, floats, [x, fast], num_threads=threads)
            _kernels.call("reduce_f32", ints, floats, [x, again], num_threads=threads)
            np.testing.assert_array_equal(fast, again)
            assert_close(fast, reference, what=f"op {op} post {post} layout {(outer, length, inner)}")


def test_reduce_max_propagates_nan(isa):
    x = np.arange(40, dtype=np.float32)
    x[13] = np.nan
    for inner, shape in ((1, (1, 40, 1)), (4, (1, 10, 4))):
        y = np.empty((1, inner), np.float32)
        _kernels.call("reduce_f32", [2, 1, 40 // inner, inner, 0], [0], [x.reshape(shape), y])
        assert np.isnan(y).any()


@pytest.mark.parametrize("length", [2, 5])
def test_reduce_short_rows_split_over_threads(isa, length):
    """Short rows count a sixteenth of their size towards the threading threshold: 2 threads only from ~262k
    rows of 2; the split lands mid-tile and must not change a row's value."""
    outer = 300_001 if length == 2 else 110_003
    x = random_normal(np.random.default_rng(length), (outer, length, 1))
    one, two = np.empty((outer, 1), np.float32), np.empty((outer, 1), np.float32)
    _kernels.call("reduce_f32", [1, outer, length, 1, 0], [0], [x, one], num_threads=1)
    _kernels.call("reduce_f32", [1, outer, length, 1, 0], [0], [x, two], num_threads=2)
    np.testing.assert_array_equal(two, one)
    assert_close(one[:, 0], np.sum(x.astype(np.float64) ** 2, axis=1)[:, 0].astype(np.float32))


@pytest.mark.parametrize("op", [2, 3])
def test_reduce_short_rows_propagate_nan_to_their_row_only(isa, op):
    x = np.arange(1, 41, dtype=np.float32)
    x[13] = np.nan  # row 6 of 20 rows of 2
    y = np.empty((20, 1), np.float32)
    _kernels.call("reduce_f32", [op, 20, 2, 1, 0], [0], [x.reshape(20, 2, 1), y])
    assert np.isnan(y[6, 0])
    pairs = np.delete(x.reshape(20, 2), 6, axis=0)
    np.testing.assert_array_equal(np.delete(y[:, 0], 6), pairs.max(axis=1) if op == 2 else pairs.min(axis=1))


@pytest.mark.parametrize("log", [0, 1])
def test_softmax_kernel_matches_reference(isa, log):
    rng = np.random.default_rng(log)
    for outer, length, inner in LAYOUTS:
        x = random_normal(rng, (outer, length, inner), 10.0)
        reference = np.empty_like(x)
        _kernels.call("softmax_f32", [outer, length, inner, log], [], [x, reference], use_ref=True)
        for threads in (1, 2):
            fast, again = np.empty_like(x), np.empty_like(x)
            _kernels.call("softmax_f32", [outer, length, inner, log], [], [x, fast], num_threads=threads)
            _kernels.call("softmax_f32", [outer, length, inner, log], [], [x, again], num_threads=threads)
            np.testing.assert_array_equal(fast, again)
            assert_close(fast, reference, what=f"log {log} layout {(outer, length, inner)}")


def test_softmax_is_stable_for_large_inputs(isa):
    x = np.array([[1000.0, 1000.0, -1000.0, 999.0]], np.float32)
    y = np.empty_like(x)
    _kernels.call("softmax_f32", [1, 4, 1, 0], [], [x, y])
    expected = np.exp(x.astype(np.float64) - 1000.0)
    assert_close(y, (expected / expected.sum()).astype(np.float32))


@pytest.mark.parametrize("has_bias", [0, 1])
def test_layer_norm_kernel_matches_reference(isa, has_bias):
    rng = np.random.default_rng(has_bias)
    for rows, length in ((1, 1), (3, 7), (5, 33), (2, 768), (65, 129)):
        x = random_normal(rng, (rows, length), 3.0) + np.float32(5.0)  # offset: tests the two-pass variance
        scale, bias = random_normal(rng, length), random_normal(rng, length)
        reference = np.empty_like(x)
        _kernels.call("layer_norm_f32", [rows, length, has_bias], [1e-5], [x, scale, bias, reference], use_ref=True)
        for threads in (1, 2):
            fast = np.empty_like(x)
            _kernels.call("layer_norm_f32", [rows, length, has_bias], [1e-5], [x, scale, bias, fast],
                          num_threads=threads)
            assert_close(fast, reference, what=f"rows {rows} length {length}")


# Lowerings vs onnxruntime ----------------------------------------------------------------------------------------
def test_reduction_groups_collapse_adjacent_axes():
    assert reduction_groups((2, 3, 4, 5), [1, 2]) == [(2, False), (12, True), (5, False)]
    assert reduction_groups((2, 1, 4, 5), [0, 2]) == [(8, True), (5, False)]  # the size-1 axis is dropped
    assert reduction_groups((2, 3, 4), [0, 2]) == [(2, True), (3, False), (4, True)]


REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceSumSquare"]
AXES_CASES = [[1], [-1], [0, 2], [1, 2], [0, 1, 2, 3], [3, 1], None]


@pytest.mark.parametrize("op_type", REDUCE_OPS)
@pytest.mark.parametrize("opset", [13, 18])
def test_reduce_nodes_match_onnxruntime(isa, op_type, opset):
    rng = np.random.default_rng(len(op_type) + opset)
    x = random_normal(rng, (3, 5, 1, 37), 2.0)
    axes_as_input = opset >= 18 or op_type == "ReduceSum"
    for axes in AXES_CASES:
        for keepdims in (0, 1):
            if axes is None:
                model = one_node_model(op_type, {"x": x}, opset=opset, keepdims=keepdims)
            elif axes_as_input:
                model = one_node_model(op_type, {"x": x}, constants={"axes": np.array(axes, np.int64)},
                                       opset=opset, keepdims=keepdims)
            else:
                model = one_node_model(op_type, {"x": x}, opset=opset, keepdims=keepdims, axes=axes)
            assert_matches_onnxruntime(model, {"x": x})


def test_reduce_noop_with_empty_axes(isa):
    x = random_normal(np.random.default_rng(3), (4, 9))
    model = one_node_model("ReduceMean", {"x": x}, opset=18, noop_with_empty_axes=1)
    assert_matches_onnxruntime(model, {"x": x})
    model = one_node_model("ReduceSum", {"x": x}, constants={"axes": np.zeros(0, np.int64)}, opset=13,
                           noop_with_empty_axes=1)
    assert_matches_onnxruntime(model, {"x": x})


def test_reduce_large_rows_use_threads(isa):
    x = random_normal(np.random.default_rng(4), (64, 2049))
    for op_type in ("ReduceMean", "ReduceMax"):
        model = one_node_model(op_type, {"x": x}, opset=13, axes=[1])
        assert_matches_onnxruntime(model, {"x": x})
        model = one_node_model(op_type, {"x": x}, opset=13, axes=[0])
        assert_matches_onnxruntime(model, {"x": x})


def test_reduce_check_reasons():
    x = np.ones((2, 3), np.float32)
    dynamic_axes = one_node_model("ReduceSum", {"x": x, "axes": np.array([1], np.int64)}, opset=13)
    assert check_reason(dynamic_axes) == "ReduceSum: input 1 (axes) must be a constant"
    ints = one_node_model("ReduceMax", {"x": np.ones((2, 3), np.int64)}, outputs=(("y", TensorProto.INT64),),
                          opset=13, axes=[1])
    assert check_reason(ints) == "ReduceMax: input 0 dtype int64 not supported (supported: float32)"
    noop_l2 = one_node_model("ReduceL2", {"x": x}, opset=18, noop_with_empty_axes=1)
    assert "noop_with_empty_axes" in check_reason(noop_l2)


SOFTMAX_CASES = [
    (11, (3, 4, 17), None), (11, (3, 4, 17), 2), (11, (2, 3, 4, 5), 0), (11, (5, 33), -1),
    (13, (3, 4, 17), None), (13, (3, 4, 17), 1), (13, (2, 3, 4, 5), 0), (13, (2, 3, 40, 41), 1), (13, (7,), 0),
]


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset, shape, axis", SOFTMAX_CASES)
def test_softmax_nodes_match_onnxruntime(isa, op_type, opset, shape, axis):
    x = random_normal(np.random.default_rng(len(shape) + opset), shape, 5.0)
    attributes = {} if axis is None else {"axis": axis}
    assert_matches_onnxruntime(one_node_model(op_type, {"x": x}, opset=opset, **attributes), {"x": x})


@pytest.mark.parametrize("axis, shape", [(-1, (2, 5, 768)), (-1, (3, 37)), (-2, (2, 6, 9)), (1, (2, 3, 4, 5))])
@pytest.mark.parametrize("with_bias", [False, True])
def test_layer_normalization_matches_onnxruntime(isa, axis, shape, with_bias):
    rng = np.random.default_rng(len(shape))
    x = random_normal(rng, shape, 2.0) + np.float32(1.0)
    normalised = shape[axis % len(shape):]
    constants = {"scale": random_normal(rng, normalised)}
    if with_bias:
        constants["bias"] = random_normal(rng, normalised)
    model = one_node_model("LayerNormalization", {"x": x}, constants=constants, opset=17, axis=axis, epsilon=1e-5)
    assert_matches_onnxruntime(model, {"x": x})


def test_layer_normalization_check_reasons():
    x = np.ones((2, 4), np.float32)
    used_mean = one_node_model("LayerNormalization", {"x": x}, constants={"scale": np.ones(4, np.float32)},
                               outputs=(("y", TensorProto.FLOAT), ("mean", TensorProto.FLOAT)), opset=17)
    assert "only output 0 is supported" in check_reason(used_mean)
    stash = one_node_model("LayerNormalization", {"x": x}, constants={"scale": np.ones(4, np.float32)}, opset=17,
                           stash_type=0)
    assert "stash_type" in check_reason(stash)
    broadcast_scale = one_node_model("LayerNormalization", {"x": np.ones((2, 3, 4), np.float32)},
                                     constants={"scale": np.ones((1, 4), np.float32)}, opset=17, axis=1)
    assert "broadcast scale not supported" in check_reason(broadcast_scale)


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("opset", [11, 13])
def test_arg_extreme_nodes_match_onnxruntime(op_type, opset):
    rng = np.random.default_rng(29)
    # few distinct values, so ties decide select_last_index
    x = rng.integers(-4, 4, (3, 5, 17)).astype(np.float32)
    for axis in (0, 1, -1):
        for keepdims in (0, 1):
            for last in ((0, 1) if opset >= 12 else (None,)):  # select_last_index arrived in opset 12
                extra = {} if last is None else {"select_last_index": last}
                model = one_node_model(op_type, {"x": x}, outputs=(("y", TensorProto.INT64),), opset=opset,
                                       axis=axis, keepdims=keepdims, **extra)
                assert_matches_onnxruntime(model, {"x": x})


def test_arg_extreme_first_nan_wins():
    x = np.array([[1.0, np.nan, 5.0, np.nan]], np.float32).reshape(1, 4, 1)
    for use_ref in (False, True):
        y = np.empty((1, 1), np.int64)
        _kernels.call("arg_extreme_f32", [1, 4, 1, 0, 1], [], [x, y], use_ref=use_ref)
        assert y[0, 0] == 1
