"""conv2d_winograd_f32 (kernels/conv_winograd.c, F(2x2, 3x3) and F(4x4, 3x3)): against its oracle (conv2d_f32's
reference on the same packed weights) and against onnxruntime, and the lowering's choice of it.

Tolerances: Winograd's transforms add rounding beyond a direct conv's reordering; measured on seeded normal inputs
(Cin up to 512) the error is at most 2.4e-6 (m = 2) and 1.2e-5 (m = 4) of max|y| before the activation, so the
oracle check allows 1e-5 and 5e-5 of that (about 4x margin); against onnxruntime the float32 tolerance of
tests/tolerances.py holds.
Shapes cover output sizes that are not multiples of m (partial tiles), tiles past a 32-tile column group and a
lone last panel, rows of tiles shorter and longer than 16, asymmetric and zero pads, more than 256 input channels
(two KC blocks), output channels not multiples of 6 or 12 and more than one block of them, batch 2, and every
activation with a residual.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from ortx import _kernels
from ortx.ep.compile_nodes import compile_graph, infer_shapes, run_graph
from tests.kernels.test_conv import RUNNABLE_ISAS, conv_model, make_model, random, run_ort, tensor
from tests.tolerances import assert_close

ORACLE_TOLERANCE = {2: 1e-5, 4: 5e-5}  # of max|y|, see the module docstring


@pytest.fixture(autouse=True)
def winograd_where_the_shape_rule_takes_it(monkeypatch):
    """The lowering's choice on NCHW tensors: off the CPUs where small-map stride-1 convs run blocked instead
    (ortx.ep.lowering.blocked_layout.dense_direct_pays, tested in tests/ep/test_blocked_layout.py)."""
    from ortx.ep.lowering import blocked_layout

    monkeypatch.setattr(blocked_layout, "dense_direct_pays", lambda: False)

# (N, Cin, H, W, Cout, pads (top, left, bottom, right))
KERNEL_CASES = [
    (1, 16, 8, 8, 16, (1, 1, 1, 1)),
    (1, 17, 19, 37, 23, (0, 0, 0, 0)),
    (1, 16, 5, 70, 16, (2, 1, 0, 2)),
    (2, 20, 13, 11, 30, (1, 2, 1, 0)),
    (1, 64, 30, 30, 64, (1, 1, 1, 1)),
    (1, 300, 9, 10, 17, (1, 1, 1, 1)),
    (1, 24, 7, 7, 100, (1, 1, 1, 1)),
    (1, 32, 16, 16, 200, (1, 1, 1, 1)),  # two column groups, each job running two output-channel blocks
]


def _run_kernel(case, m, threads, activation, residual, use_ref=False, seed=0):
    batch, cin, height, width, cout, pads = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, cin, height, width)).astype(np.float32)
    w = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    out_h, out_w = height + pads[0] + pads[2] - 2, width + pads[1] + pads[3] - 2
    r = rng.standard_normal((batch, cout, out_h, out_w)).astype(np.float32)
    ints = [batch, cin, height, width, cout, out_h, out_w, 3, 3, 1, 1, pads[0], pads[1], 1, 1, 1, 1, int(residual),
            activation, threads]
    sizes = np.zeros(3, np.int64)
    _kernels.call("conv_winograd_sizes_f32", ints + [m], [], [sizes])
    assert sizes[2] == m
    params = [0.1, 0.0] if activation == 2 else ([-0.5, 0.5] if activation == 3 else [0.2, 0.5])
    packed = np.empty(int(sizes[1]), np.float32)
    _kernels.call("conv_winograd_pack_f32", ints + [m], params, [w, packed])
    workspace = np.full(int(sizes[0]) // 4, np.nan, np.float32)  # stale bits must not reach the output
    y = np.full((batch, cout, out_h, out_w), np.nan, np.float32)
    _kernels.call("conv2d_winograd_f32", ints + [m], params, [x, packed, y, workspace, b, r], threads,
                  use_ref=use_ref)
    return y


@pytest.mark.parametrize("case", KERNEL_CASES, ids=str)
@pytest.mark.parametrize("m", [2, 4])
def test_winograd_matches_its_oracle(isa, case, m):
    for activation, residual in ((0, False), (1, True), (2, True), (3, False), (4, True), (5, False), (6, True),
                                 (7, False)):
        expected = _run_kernel(case, m, 1, activation, residual, use_ref=True)
        scale = np.abs(_run_kernel(case, m, 1, 0, residual, use_ref=True)).max()  # before the activation squashes
        for threads in (1, 2):
            got = _run_kernel(case, m, threads, activation, residual)
            assert np.isfinite(got).all()
            error = np.abs(got - expected).max() / scale
            assert error <= ORACLE_TOLERANCE[m], (case, m, activation, threads, error)


@pytest.mark.parametrize("m", [2, 4])
def test_winograd_bits_do_not_depend_on_thread_count(m):
    case = (1, 40, 23, 45, 50, (1, 1, 1, 1))
    one = _run_kernel(case, m, 1, 1, True)
    np.testing.assert_array_equal(one, _run_kernel(case, m, 1, 1, True))
    np.testing.assert_array_equal(one, _run_kernel(case, m, 2, 1, True))


def test_sizes_decline_what_winograd_cannot_run():
    def m_for(ints_changes, wanted=0):
        ints = [1, 32, 20, 20, 32, 20, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 2]
        for index, value in ints_changes.items():
            ints[index] = value
        sizes = np.zeros(3, np.int64)
        _kernels.call("conv_winograd_sizes_f32", ints + [wanted], [], [sizes])
        return int(sizes[2])

    assert m_for({9: 2, 10: 2, 5: 10, 6: 10}, wanted=4) == 0  # stride 2
    assert m_for({13: 2, 14: 2, 5: 18, 6: 18}, wanted=4) == 0  # dilation 2
    assert m_for({15: 2}, wanted=4) == 0  # groups
    assert m_for({7: 5, 8: 5, 5: 18, 6: 18}, wanted=4) == 0  # 5x5
    assert m_for({}, wanted=2) == 2 and m_for({}, wanted=4) == 4
    if _kernels.cpu_isa() == "avx512":
        assert m_for({2: 24, 3: 24, 5: 24, 6: 24}) == 4  # 36 tiles of 4: a full column group
        assert m_for({}) == 2  # 25 tiles of 4 are too few; 100 of 2
        assert m_for({5: 7, 6: 7, 2: 7, 3: 7}) == 0  # a 7x7 output: 16 tiles of 2
        assert m_for({1: 8}) == 0  # too few input channels
        previous = _kernels.allow_winograd(False)
        try:
            assert m_for({}) == 0
        finally:
            _kernels.allow_winograd(previous)


def _fused_conv_model(x_shape, cout, pads, activation):
    cin = x_shape[1]
    w = random((cout, cin, 3, 3), 1, scale=1.0 / np.sqrt(cin * 9))
    b = random(cout, 2)
    out_shape = (x_shape[0], cout, x_shape[2] + pads[0] + pads[2] - 2, x_shape[3] + pads[1] + pads[3] - 2)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=list(pads)),
             helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node(activation, ["s"], ["y"])]
    model = make_model(nodes, [tensor("x", x_shape), tensor("r", out_shape)], [tensor("y", None)],
                       [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return model, out_shape


@pytest.mark.skipif(_kernels.cpu_isa() != "avx512", reason="the shape rule takes Winograd on AVX-512 only")
@pytest.mark.parametrize("x_shape,cout,pads", [
    ((1, 64, 56, 56), 64, (1, 1, 1, 1)),
    ((1, 32, 12, 12), 48, (1, 1, 1, 1)),
    ((2, 16, 17, 29), 20, (0, 1, 2, 1)),
], ids=str)
@pytest.mark.parametrize("activation", ["Relu", "Sigmoid"])
def test_lowered_conv_add_activation_runs_winograd_and_matches_onnxruntime(x_shape, cout, pads, activation):
    model, out_shape = _fused_conv_model(x_shape, cout, pads, activation)
    feeds = {"x": random(x_shape, 3), "r": random(out_shape, 4)}
    compiled = compile_graph(infer_shapes(model).graph)
    assert "conv2d_winograd_f32" in compiled.program.kernel_names
    expected = run_ort(model, feeds)
    for threads in (1, 2):
        assert_close(run_graph(model, feeds, num_threads=threads)[0], expected, what=f"winograd, {threads} threads")
    assert_close(run_graph(model, feeds, use_reference_kernels=True)[0], expected, what="oracle")


@pytest.mark.skipif(_kernels.cpu_isa() != "avx512", reason="the shape rule takes Winograd on AVX-512 only")
def test_lowering_keeps_other_convs_off_winograd():
    for shape, w_shape, attributes in [
        ((1, 32, 20, 20), (32, 32, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
        ((1, 32, 20, 20), (32, 8, 3, 3), dict(group=4, pads=[1, 1, 1, 1])),
        ((1, 8, 20, 20), (32, 8, 3, 3), dict(pads=[1, 1, 1, 1])),
        ((1, 32, 7, 7), (32, 32, 3, 3), dict(pads=[1, 1, 1, 1])),  # 16 tiles of 2: less than a column group
    ]:
        model = conv_model("Conv", shape, w_shape, attributes)
        assert "conv2d_winograd_f32" not in compile_graph(infer_shapes(model).graph).program.kernel_names
