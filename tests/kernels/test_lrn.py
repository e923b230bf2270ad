"""lrn_f32 (kernels/lrn.c): fast vs reference vs a float64 numpy LRN, and one-node models vs onnxruntime.

Every case runs for each ISA this CPU has (conftest.py's `isa`; the AVX-512 path's exp and log are within ~2 ulp of libm, so fast and
reference agree to float32 tolerance, not bitwise), with 1 and 2 threads; sizes odd and even (the window is
asymmetric for even sizes), windows wider than the channels, pixel counts off the 16-pixel vector.
"""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

from ortx import _kernels
from ortx.ep.compile_nodes import run_graph
from tests.tolerances import assert_close

def numpy_lrn(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """ONNX's LRN in float64: the window [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] inside the channels."""
    x64 = x.astype(np.float64)
    squares = x64 ** 2
    channels = x.shape[1]
    total = np.zeros_like(x64)
    for c in range(channels):
        lo, hi = max(0, c - (size - 1) // 2), min(channels - 1, c + size // 2)
        total[:, c] = squares[:, lo:hi + 1].sum(axis=1)
    return x64 / (bias + alpha / size * total) ** beta


CASES = [  # (shape, size, alpha, beta, bias)
    ((1, 64, 7, 9), 5, 1e-4, 0.75, 1.0),   # GoogLeNet's attributes, 63 pixels (a partial vector)
    ((2, 10, 5, 5), 4, 0.02, 0.5, 2.0),    # even size: one more channel after than before
    ((1, 3, 17, 1), 7, 0.1, 0.9, 1.5),     # window wider than the channels
    ((1, 6, 33), 1, 1e-3, 0.75, 1.0),      # rank 3, size 1
    ((1, 5, 2, 3, 4), 3, 0.5, 1.25, 0.75), # rank 5, beta above 1
]


@pytest.mark.parametrize("shape,size,alpha,beta,bias", CASES)
def test_lrn_kernel_matches_reference_and_float64(isa, shape, size, alpha, beta, bias):
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32) * 3
    ints = [shape[0], shape[1], int(np.prod(shape[2:])), size]
    expected = numpy_lrn(x, size, alpha, beta, bias).astype(np.float32)
    reference = np.full_like(x, np.nan)
    _kernels.call("lrn_f32", ints, [alpha, beta, bias], [x, reference], use_ref=True)
    assert_close(reference, expected, what="reference vs float64")
    for threads in (1, 2):
        fast = np.full_like(x, np.nan)
        _kernels.call("lrn_f32", ints, [alpha, beta, bias], [x, fast], num_threads=threads)
        assert_close(fast, expected, what=f"{isa} {threads} threads vs float64")
        again = np.full_like(x, np.nan)
        _kernels.call("lrn_f32", ints, [alpha, beta, bias], [x, again], num_threads=threads)
        np.testing.assert_array_equal(fast, again)


def test_lrn_node_runs_on_ortx_and_matches_onnxruntime():
    shape = (1, 32, 12, 12)
    node = helper.make_node("LRN", ["x"], ["y"], size=5, alpha=2e-4, beta=0.75, bias=1.0)
    graph = helper.make_graph([node], "lrn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 9
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32) * 4
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    for threads in (1, 2):
        assert_close(run_graph(model, {"x": x}, num_threads=threads)[0], expected, what=f"{threads} threads")
