"""Sparse family (kernels/sparse*.c): blocked-CSR packing round trips, and sparse_conv2d_f32 / sparse_gemm_f32 fast
vs reference vs numpy/onnxruntime on random sparse weights, for every ISA this CPU has, 1 and 2 threads.

Shapes include pixel/token tails that are not multiples of 8, 16, 32 or the 64-column tile, rows that are not a
multiple of the 4x1 block, empty rows, fully dense rows, an all-zero matrix, weights in several column panels (empty
panels too), and both conv paths: B built per tile and panel from padded phase planes (or from X for a 1x1 whose
pixels are not a multiple of 16), and the 1x1 path that reads X in place; convs at 1, 2 and 3 threads, with work cut
into tiles (maps of >= 4 tiles per thread) and into row chunks (smaller maps).
"""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import helper, numpy_helper

from ortx import _kernels
from ortx.ep.compile_nodes import compile_segment, infer_shapes
from ortx.ep.lowering.sparse import conv_columns, panel_count, pack_blocked_csr, unpack_blocked_csr, workspace_bytes
from ortx.tune.sparse_choice import ForcedPolicy, SparseChoice
from tests.tolerances import assert_close

def _gelu(v):
    from math import erf

    return 0.5 * v * (1 + np.vectorize(erf)(v / np.sqrt(2)))


ACTIVATIONS = {0: None, 1: lambda v: np.maximum(v, 0), 3: lambda v: np.clip(v, -0.5, 0.75),
               4: lambda v: 1 / (1 + np.exp(-v)), 8: _gelu}


def sparse_matrix(rows, depth, zeros, seed, *, empty_row=None, dense_row=None):
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((rows, depth)).astype(np.float32)
    matrix[matrix == 0] = 0.5
    matrix[rng.random(matrix.shape) < zeros] = 0
    if empty_row is not None:
        matrix[empty_row] = 0
    if dense_row is not None:
        matrix[dense_row] = rng.uniform(0.5, 1.5, depth).astype(np.float32)
    return matrix


@pytest.mark.parametrize("panels", [1, 3, 4])
@pytest.mark.parametrize("block_rows", [1, 4])
@pytest.mark.parametrize("rows, depth, zeros", [(1, 1, 0.0), (7, 13, 0.8), (16, 64, 0.5), (33, 5, 0.95),
                                                (9, 30, 1.0), (4, 4, 0.0)])
def test_csr_round_trip(rows, depth, zeros, block_rows, panels):
    matrix = sparse_matrix(rows, depth, zeros, seed=rows * depth, empty_row=0 if rows > 2 else None,
                           dense_row=rows - 1 if rows > 2 else None)
    csr = pack_blocked_csr(matrix, block_rows, panels)
    np.testing.assert_array_equal(unpack_blocked_csr(csr), matrix)
    block_count = -(-rows // block_rows)
    assert csr.row_ptr.shape == (panels * block_count + 1,) and csr.row_ptr[-1] == csr.blocks
    assert csr.values.size == csr.blocks * block_rows
    if block_rows == 1:
        assert csr.blocks == np.count_nonzero(matrix)
    width = -(-depth // panels)  # depth 5 in 4 panels: widths 2, 2, 1, 0
    for index in range(csr.row_ptr.size - 1):  # columns sorted within a block row, inside the block row's panel
        cols = csr.cols[csr.row_ptr[index]:csr.row_ptr[index + 1]]
        panel = index // block_count
        assert np.all(np.diff(cols) > 0)
        assert np.all((cols >= panel * width) & (cols < (panel + 1) * width))


def test_csr_all_zero_matrix_and_errors():
    csr = pack_blocked_csr(np.zeros((6, 10), np.float32), 4)
    assert csr.blocks == 0 and list(csr.row_ptr) == [0, 0, 0]
    np.testing.assert_array_equal(unpack_blocked_csr(csr), np.zeros((6, 10), np.float32))
    with pytest.raises(ValueError, match="block_rows 3"):
        pack_blocked_csr(np.ones((4, 4)), 3)
    with pytest.raises(ValueError, match="2-D"):
        pack_blocked_csr(np.ones(4), 1)
    with pytest.raises(ValueError, match="panels 0"):
        pack_blocked_csr(np.ones((4, 4)), 1, 0)


def _gemm(a, csr, bias, activation, threads, use_ref, residual=None):
    M, K = a.shape
    y = np.full((M, csr.rows), np.nan, np.float32)
    workspace = np.zeros(max(workspace_bytes(1, [M, csr.rows, K, threads]) // 4, 1), np.float32)
    _kernels.call("sparse_gemm_f32", [M, csr.rows, K, K, csr.block_rows, int(bias is not None), activation, threads,
                                      csr.panels, int(residual is not None)],
                  [-0.5, 0.75], [a, np.append(csr.values, np.float32(0)), np.append(csr.cols, np.int32(0)),
                                 csr.row_ptr, y, workspace, bias if bias is not None else y,
                                 residual if residual is not None else y],
                  num_threads=threads, use_ref=use_ref)
    return y


@pytest.mark.parametrize("block_rows, panels", [(1, 1), (4, 1), (1, 3), (4, 5)])
@pytest.mark.parametrize("M, K, N, zeros, activation", [
    (1, 7, 5, 0.5, 0), (63, 33, 18, 0.9, 1), (65, 64, 31, 0.7, 3), (130, 21, 70, 0.95, 4), (17, 50, 16, 1.0, 1),
    (8, 300, 9, 0.0, 0), (70, 96, 40, 0.9, 8)])
def test_sparse_gemm_matches_numpy_and_reference(isa, M, K, N, zeros, activation, block_rows, panels):
    rng = np.random.default_rng(M + K + N)
    weights_t = sparse_matrix(N, K, zeros, seed=M, empty_row=0 if N > 2 else None, dense_row=N - 1 if N > 2 else None)
    a = rng.standard_normal((M, K)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32) if activation != 4 else None
    csr = pack_blocked_csr(weights_t, block_rows, panels)
    expected = a.astype(np.float64) @ weights_t.T.astype(np.float64) + (0 if bias is None else bias)
    if ACTIVATIONS[activation] is not None:
        expected = ACTIVATIONS[activation](expected)
    expected = expected.astype(np.float32)
    reference = _gemm(a, csr, bias, activation, 1, True)
    assert_close(reference, expected, what="reference vs numpy")
    for threads in (1, 2, 3):  # 3: pieces of one tile on several threads, each transposing it into its own rows
        fast = _gemm(a, csr, bias, activation, threads, False)
        assert_close(fast, expected, what=f"{isa} fast ({threads} threads) vs numpy")
        np.testing.assert_array_equal(fast, _gemm(a, csr, bias, activation, threads, False))


@pytest.mark.parametrize("block_rows, panels", [(1, 1), (4, 3)])
@pytest.mark.parametrize("M, K, N, activation", [(130, 40, 37, 0), (64, 300, 16, 1), (5, 17, 70, 3), (66, 30, 20, 8)])
def test_sparse_gemm_residual_epilogue(isa, M, K, N, activation, block_rows, panels):
    """FusedMatMul's residual in the kernel (added after the transposed store, then the activation)."""
    rng = np.random.default_rng(M * N)
    weights_t = sparse_matrix(N, K, 0.8, seed=K)
    a, residual = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((M, N)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    csr = pack_blocked_csr(weights_t, block_rows, panels)
    expected = a.astype(np.float64) @ weights_t.T.astype(np.float64) + bias + residual
    if ACTIVATIONS[activation] is not None:
        expected = ACTIVATIONS[activation](expected)
    expected = expected.astype(np.float32)
    assert_close(_gemm(a, csr, bias, activation, 1, True, residual), expected, what="reference vs numpy")
    for threads in (1, 2, 3):
        assert_close(_gemm(a, csr, bias, activation, threads, False, residual), expected,
                     what=f"{isa} fast ({threads} threads) vs numpy")


@pytest.mark.parametrize("offset", [0, 4, 16, 48])
def test_sparse_gemm_workspace_at_any_alignment(offset):
    """The kernel starts A^T on a 64-byte line inside its workspace whatever the workspace's own alignment (numpy's
    16 made it 2x slower), within the bytes sparse_sizes_f32 reports: guard bytes after them stay untouched."""
    M, K, N, threads = 70, 96, 40, 2
    rng = np.random.default_rng(offset)
    a = rng.standard_normal((M, K)).astype(np.float32)
    csr = pack_blocked_csr(sparse_matrix(N, K, 0.5, seed=offset), 1, 1)
    size = workspace_bytes(1, [M, N, K, threads])
    raw = np.full(size + 256, 0xA5, np.uint8)
    start = -raw.__array_interface__["data"][0] % 64 + offset
    workspace = raw[start:start + size]
    y = np.full((M, N), np.nan, np.float32)
    _kernels.call("sparse_gemm_f32", [M, N, K, K, 1, 0, 0, threads, 1, 0], [0.0, 0.0],
                  [a, np.append(csr.values, np.float32(0)), np.append(csr.cols, np.int32(0)), csr.row_ptr, y,
                   workspace, y, y], num_threads=threads)
    assert_close(y, (a.astype(np.float64) @ unpack_blocked_csr(csr).T.astype(np.float64)).astype(np.float32))
    assert np.all(raw[:start] == 0xA5) and np.all(raw[start + size:] == 0xA5)


def _conv_model(cin, cout, size, kernel, stride, pad, batch, dilation, zeros, seed, *, fused):
    rng = np.random.default_rng(seed)
    weights = sparse_matrix(cout, cin * kernel * kernel, zeros, seed, empty_row=0,
                            dense_row=cout - 1).reshape(cout, cin, kernel, kernel)
    bias = rng.standard_normal(cout).astype(np.float32)
    out = (size[0] + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1, \
        (size[1] + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    inputs = [helper.make_tensor_value_info("X", 1, [batch, cin, *size])]
    conv_inputs = ["X", "W", "B"]
    attributes = dict(pads=[pad] * 4, strides=[stride] * 2, dilations=[dilation] * 2)
    opsets = [helper.make_opsetid("", 17)]
    if fused:  # FusedConv with a residual and Relu: the dense path's epilogue, checked against Conv -> Add -> Relu
        inputs.append(helper.make_tensor_value_info("R", 1, [batch, cout, *out]))
        node = helper.make_node("FusedConv", conv_inputs + ["R"], ["Y"], domain="ai.ortx", name="conv",
                                activation="Relu", **attributes)
        opsets.append(helper.make_opsetid("ai.ortx", 1))
        plain = [helper.make_node("Conv", conv_inputs, ["C"], **attributes), helper.make_node("Add", ["C", "R"], ["S"]),
                 helper.make_node("Relu", ["S"], ["Y"])]
    else:
        node = helper.make_node("Conv", conv_inputs, ["Y"], name="conv", **attributes)
        plain = [node]
    initializers = [numpy_helper.from_array(weights, "W"), numpy_helper.from_array(bias, "B")]
    output = [helper.make_tensor_value_info("Y", 1, [batch, cout, *out])]

    def model(nodes, opset_list):
        proto = helper.make_model(helper.make_graph(nodes, "sparse_conv", inputs, output, initializer=initializers),
                                  opset_imports=opset_list)
        proto.ir_version = 10
        return proto

    return model([node], opsets), model(plain, opsets[:1])


def run_forced(model, feeds, choice, *, threads=2, use_ref=False):
    graph = infer_shapes(model).graph
    compiled = compile_segment(list(graph), list(graph.inputs), list(graph.outputs), num_threads=threads,
                               sparse_policy=ForcedPolicy(choice))
    arrays = [feeds[value.name] for value in graph.inputs]
    arrays += [np.full(value.shape.numpy(), np.nan, np.float32) for value in graph.outputs]
    externals = np.array([array.__array_interface__["data"][0] for array in arrays], np.uint64)
    compiled.program.run(np.empty(max(compiled.arena_bytes, 1), np.uint8), externals, threads, use_ref)
    return arrays[-1], compiled.program.kernel_names


@pytest.mark.parametrize("block_rows", [1, 4])
@pytest.mark.parametrize("cin, cout, size, kernel, stride, pad, batch, dilation, zeros, fused", [
    (16, 24, (9, 11), 3, 1, 1, 1, 1, 0.85, False),   # stride 1: direct from padded planes, virtual-pixel tail
    (6, 10, (40, 37), 3, 2, 1, 1, 1, 0.8, False),    # stride 2, 380 pixels: im2col per 64-pixel tile
    (8, 40, (20, 20), 1, 1, 0, 1, 1, 0.9, True),     # 1x1: X read in place; residual + Relu
    (8, 37, (20, 21), 3, 2, 1, 2, 1, 0.7, True),     # stride 2, batch 2, rows not a multiple of 4: whole-image
    #                                                  patches (2 tiles)
    (5, 7, (13, 30), 3, 1, 2, 1, 2, 0.5, True),      # dilation 2, direct; residual + Relu in the scatter
    (3, 6, (5, 5), 3, 1, 1, 1, 1, 1.0, False),       # all-zero weights: bias only
    (3, 8, (70, 45), 7, 2, 3, 1, 1, 0.8, False),     # stem-like 7x7/2: 4 phase planes, tiles copied from them
    (3, 8, (23, 21), 7, 2, 3, 1, 1, 0.8, True),      # small 7x7/2: read in place from the phase planes
    (8, 12, (15, 17), 1, 2, 0, 1, 1, 0.6, False),    # 1x1/2: one phase of four used
    (4, 6, (19, 16), 3, 2, 2, 1, 2, 0.7, False),     # stride 2 with dilation 2: every tap in phase (0, 0)
    (3, 9, (26, 31), 7, 2, 3, 1, 1, 0.8, False),     # 7x7/2 to 13x16: shifted planes (out_width 16), 208 pixels
    (12, 10, (14, 14), 3, 1, 1, 2, 1, 0.85, True),   # 3x3 14x14 (rows of 16), batch 2; residual + Relu
    (6, 20, (28, 27), 3, 2, 1, 1, 1, 0.75, False),   # 3x3/2 to 14x14: shifted planes of two row phases
    (30, 10, (6, 7), 3, 1, 1, 1, 1, 0.9, True),      # K = 270: two panels, built per tile; residual + Relu
    (600, 9, (4, 4), 1, 1, 0, 1, 1, 0.9, False),     # 1x1, 16 pixels: in place, three panels
    (300, 6, (5, 7), 1, 1, 0, 2, 1, 0.9, True),      # 1x1, 35 pixels: built from X, two panels, batch 2
    (12, 7, (5, 7), 1, 1, 0, 1, 1, 0.5, False),      # 1x1, 35 pixels, one panel
    (16, 20, (24, 30), 3, 1, 1, 1, 1, 0.9, True),    # 720 pixels, 12 tiles: pieces are tiles at 2 and 3 threads
    (10, 9, (60, 50), 3, 2, 1, 1, 1, 0.85, False),   # 3x3/2 to 30x25, 12 tiles: pieces are tiles, planes per thread
    (40, 11, (30, 30), 3, 1, 1, 1, 1, 0.9, False),   # K = 360: two panels, pieces are tiles (15, the last of 4 px)
    (64, 9, (56, 55), 3, 1, 1, 1, 1, 0.9, True),     # shifted planes too large for one: bands of 6 output rows
])
def test_sparse_conv_matches_onnxruntime_and_reference(isa, cin, cout, size, kernel, stride, pad, batch, dilation,
                                                       zeros, fused, block_rows):
    model, plain = _conv_model(cin, cout, size, kernel, stride, pad, batch, dilation, zeros, seed=cin * cout,
                               fused=fused)
    rng = np.random.default_rng(1)
    feeds = {"X": rng.standard_normal((batch, cin, *size)).astype(np.float32)}
    if fused:
        residual_shape = [dim.dim_value for dim in model.graph.input[1].type.tensor_type.shape.dim]
        feeds["R"] = rng.standard_normal(residual_shape).astype(np.float32)
    session = onnxruntime.InferenceSession(plain.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)[0]
    choice = SparseChoice("sparse", block_rows, "forced")
    reference, kernels = run_forced(model, feeds, choice, use_ref=True)
    assert kernels == ("sparse_conv2d_f32",)
    assert_close(reference, expected, what="reference vs onnxruntime")
    for threads in (1, 2, 3):  # 3 on 2 cores: three lanes, one of them late
        fast, _ = run_forced(model, feeds, choice, threads=threads)
        assert_close(fast, expected, what=f"{isa} fast ({threads} threads) vs onnxruntime")
        np.testing.assert_array_equal(fast, run_forced(model, feeds, choice, threads=threads)[0])


def test_sparse_conv_banded_rows_at_many_threads():
    """16 lanes on a 56-tile banded map: pieces are row chunks, each thread runs every tile and refills its planes
    band after band (the path no 2-core thread count reaches)."""
    model, plain = _conv_model(64, 9, (56, 55), 3, 1, 1, 2, 1, 0.9, seed=5, fused=True)
    rng = np.random.default_rng(2)
    feeds = {"X": rng.standard_normal((2, 64, 56, 55)).astype(np.float32),
             "R": rng.standard_normal((2, 9, 56, 55)).astype(np.float32)}
    expected = onnxruntime.InferenceSession(plain.SerializeToString(),
                                            providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    fast, kernels = run_forced(model, feeds, SparseChoice("sparse", 1, "forced"), threads=16)
    assert kernels == ("sparse_conv2d_f32",)
    assert_close(fast, expected, what="16 threads vs onnxruntime")


@pytest.mark.parametrize("cin, size, kernel, stride, pad, layout", [
    (256, 14, 3, 1, 1, 1),   # ResNet-18-style 3x3 256@14: shifted planes (0.77 MiB)
    (128, 28, 3, 1, 1, 1),   # 3x3 128@28 (1.47 MiB)
    (64, 56, 3, 1, 1, 1),    # 3x3 64@56: shifted planes (2.85 MiB) in bands of 6 output rows (8 plane rows)
    (64, 56, 7, 1, 3, 0),    # 7x7 64@56: not even one tile's planes fit a band
    (512, 7, 3, 1, 1, 0),    # 7-wide rows: tiles of 64 pixels
    (64, 56, 3, 2, 1, 0),    # stride 2: phase planes
    (64, 14, 1, 1, 0, 0),    # 1x1 unpadded: X itself
])
def test_conv_column_layout(cin, size, kernel, stride, pad, layout):
    """Which convs read B from shifted planes (kernels/sparse.h), and that their packed columns map back."""
    out = (size + 2 * pad - kernel) // stride + 1
    conv_ints = [1, cin, size, size, 8, out, out, kernel, kernel, stride, stride, pad, pad, 1, 1, 1, 0, 0, 0, 2]
    csr = pack_blocked_csr(sparse_matrix(8, cin * kernel * kernel, 0.9, seed=cin), 1)
    chosen, packed = conv_columns(conv_ints, csr)
    assert chosen == layout
    if layout == 0:
        assert packed is csr
    else:  # shifted row of (c, ky, kx) = (kx * cin + c) * rows + ky, rows = band + kernel - 1 made odd
        band = out if size <= 28 else 6
        rows = (band + kernel - 1) | 1
        k = csr.cols.astype(np.int64)
        c, ky, kx = k // (kernel * kernel), k % (kernel * kernel) // kernel, k % kernel
        np.testing.assert_array_equal(packed.cols, (kx * cin + c) * rows + ky)


@pytest.mark.parametrize("conv_ints, panels", [
    ([1, 30, 6, 7, 10, 6, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2], 2),  # K = 270
    ([1, 600, 4, 4, 9, 4, 4, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 2], 3),  # K = 600
    ([1, 28, 8, 8, 8, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 2], 1),   # K = 252
])
def test_panel_count_keeps_a_panel_of_a_tile_within_its_budget(conv_ints, panels):
    """The conv cases above with K > 256 really run several panels: 256 rows x 64 floats is the 64 KiB budget."""
    assert panel_count(0, conv_ints) == panels
    assert panel_count(1, [128, 256, 256, 2]) == 1 and panel_count(1, [128, 256, 1025, 2]) == 5
