"""Band family (kernels/band_gemm*.c): panel-band packing, band_gemm_f32 fast vs `_ref` vs numpy, and MatMul's
lowering (ortx/ep/lowering/band.py): banded constants take the band kernel, scattered ones do not.

Kernel cases: rows not a multiple of the 6 (AVX-512) / 4 (AVX2) row block, columns not a multiple of the 16-column
panel, a panel without nonzeros, a panel dense over all of K; every runnable ISA, 1 and 2 threads (bitwise equal).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortx import _kernels
from ortx.ep.compile_nodes import compile_segment, infer_shapes
from ortx.ep.lowering.band import MAX_BAND_FRACTION, PANEL, panel_bands
from tests.kernels.test_elementwise import isa, run_onnxruntime  # noqa: F401  (isa is a fixture)
from tests.tolerances import assert_close


def banded(rng, depth: int, columns: int, width: int) -> np.ndarray:
    """Column n nonzero on a run of 1..width rows that moves down with n (a filterbank's shape)."""
    weights = np.zeros((depth, columns), np.float32)
    for n in range(columns):
        first = int(n * (depth - width) / max(columns - 1, 1))
        count = int(rng.integers(1, width + 1))
        weights[first:first + count, n] = rng.uniform(0.1, 1.0, count)
    return weights


def run_kernel(a: np.ndarray, weights: np.ndarray, *, threads: int = 1, use_ref: bool = False) -> np.ndarray:
    bands = panel_bands(weights)
    y = np.full((a.shape[0], weights.shape[1]), np.nan, np.float32)
    values = np.concatenate([bands.values, np.zeros((1, PANEL), np.float32)])
    _kernels.call("band_gemm_f32", [a.shape[0], weights.shape[1], weights.shape[0], len(bands.panel)], [],
                  [a, values, bands.panel.reshape(-1).copy(), y], num_threads=threads, use_ref=use_ref)
    return y


def test_panel_bands_round_trip():
    rng = np.random.default_rng(0)
    weights = banded(rng, 50, 37, 6)
    weights[:, 16:32] = 0  # a panel without nonzeros
    bands = panel_bands(weights)
    assert bands.panel.shape == (3, 3) and tuple(bands.panel[1, :2]) == (0, 0)
    rebuilt = np.zeros((50, 48), np.float32)
    for p, (first, count, offset) in enumerate(bands.panel):
        rebuilt[first:first + count, p * PANEL:(p + 1) * PANEL] = bands.values[offset:offset + count]
    np.testing.assert_array_equal(rebuilt[:, :37], weights)
    assert bands.fraction == pytest.approx(bands.panel[:, 1].sum() / (50 * 3))


@pytest.mark.parametrize("M, K, N, width", [
    (1, 7, 3, 2),        # one row, one partial panel
    (97, 257, 80, 30),   # the log-mel front end's shape (6-row blocks + 1 tail row; 5 panels)
    (23, 64, 33, 5),     # rows off both row blocks, 3 panels with a 1-column tail
    (5, 40, 16, 40),     # a panel dense over all of K
    (2000, 129, 40, 12),  # enough work for 2 threads (M x band rows >= 65536)
])
def test_band_gemm_matches_numpy_and_reference(isa, M, K, N, width):
    rng = np.random.default_rng(M + K + N)
    weights = banded(rng, K, N, width)
    a = rng.standard_normal((M, K)).astype(np.float32)
    expected = (a.astype(np.float64) @ weights.astype(np.float64)).astype(np.float32)
    reference = run_kernel(a, weights, use_ref=True)
    assert_close(reference, expected, what="reference vs numpy")
    one = run_kernel(a, weights)
    assert_close(one, reference, what=f"{isa} vs reference")
    np.testing.assert_array_equal(run_kernel(a, weights, threads=2), one)


def test_band_gemm_empty_panel_writes_zeros(isa):
    weights = np.zeros((9, 20), np.float32)
    weights[2:4, 17] = 1.0
    a = np.random.default_rng(1).standard_normal((7, 9)).astype(np.float32)
    y = run_kernel(a, weights)
    np.testing.assert_array_equal(y[:, :16], 0.0)
    assert_close(y, a @ weights)


def matmul_model(a_shape, weights: np.ndarray):
    node = helper.make_node("MatMul", ["A", "W"], ["Y"], name="project")
    model = helper.make_model(helper.make_graph(
        [node], "band", [helper.make_tensor_value_info("A", TensorProto.FLOAT, a_shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [*a_shape[:-1], weights.shape[1]])],
        [numpy_helper.from_array(weights, "W")]), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def run_lowered(model, feeds, threads=2):
    graph = infer_shapes(model).graph
    compiled = compile_segment(list(graph), list(graph.inputs), list(graph.outputs), num_threads=threads)
    arrays = [feeds[value.name] for value in graph.inputs]
    arrays += [np.full(value.shape.numpy(), np.nan, np.float32) for value in graph.outputs]
    externals = np.array([array.__array_interface__["data"][0] for array in arrays], np.uint64)
    compiled.program.run(np.empty(max(compiled.arena_bytes, 1), np.uint8), externals, threads, False)
    return arrays[-1], compiled.program.kernel_names


@pytest.mark.parametrize("a_shape", [(1, 97, 257), (3, 5, 257)])
def test_banded_matmul_lowers_to_band_kernel_and_matches_onnxruntime(isa, a_shape):
    rng = np.random.default_rng(7)
    weights = banded(rng, 257, 80, 30)
    assert panel_bands(weights).fraction <= MAX_BAND_FRACTION
    model = matmul_model(a_shape, weights)
    feeds = {"A": rng.standard_normal(a_shape).astype(np.float32)}
    actual, kernels = run_lowered(model, feeds)
    assert kernels == ("band_gemm_f32",)
    assert_close(actual, run_onnxruntime(model, feeds)[0])


def test_scattered_zeros_do_not_take_the_band_kernel():
    """A pruned matrix (90% zeros, scattered): every panel's band spans ~all of K, so the sparse/dense choice
    decides."""
    rng = np.random.default_rng(3)
    weights = rng.standard_normal((128, 64)).astype(np.float32) * (rng.random((128, 64)) > 0.9)
    assert panel_bands(weights).fraction > MAX_BAND_FRACTION
    model = matmul_model((1, 32, 128), weights)
    feeds = {"A": rng.standard_normal((1, 32, 128)).astype(np.float32)}
    actual, kernels = run_lowered(model, feeds)
    assert "band_gemm_f32" not in kernels
    assert_close(actual, run_onnxruntime(model, feeds)[0])
