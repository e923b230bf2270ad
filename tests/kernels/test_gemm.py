"""GEMM kernels (gemm_f32, gemm_pack_f32) and the Gemm/MatMul lowerings: fast vs reference vs numpy/onnxruntime.

Every case runs for each ISA this CPU has, with 1 and 2 threads, on shapes whose M, N, K are not multiples of the
6x16 tile, the 256-deep K block or the 144-row M block. Results must be bitwise repeatable run to run.
"""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortx import _kernels
from ortx.ep.compile_nodes import check_node, infer_shapes, run_graph
from tests.tolerances import assert_close

ISA_ORDER = ("portable", "avx2", "avx512")
RUNNABLE_ISAS = ISA_ORDER[: ISA_ORDER.index(_kernels.cpu_isa()) + 1]
ACTIVATIONS = {  # code: (numpy definition, params), following kernels/activation.h
    0: (lambda x, a, b: x, (0.0, 0.0)),
    1: (lambda x, a, b: np.maximum(x, 0), (0.0, 0.0)),
    2: (lambda x, a, b: np.where(x >= 0, x, a * x), (0.1, 0.0)),
    3: (lambda x, a, b: np.clip(x, a, b), (-0.5, 0.75)),
    4: (lambda x, a, b: 1 / (1 + np.exp(-x)), (0.0, 0.0)),
    5: (lambda x, a, b: np.clip(a * x + b, 0, 1), (0.3, 0.4)),
    6: (lambda x, a, b: x * np.clip(x / 6 + 0.5, 0, 1), (0.0, 0.0)),
    7: (lambda x, a, b: np.tanh(x), (0.0, 0.0)),
}
# (M, N, K): tails in every dimension, K across two and three KC blocks, M across two MC blocks, N across NC
SHAPES = [(1, 1, 1), (5, 7, 3), (6, 16, 8), (13, 33, 17), (37, 70, 300), (150, 47, 519), (7, 2100, 33),
          (61, 5, 64)]


def test_isas_this_cpu_cannot_run_are_reported(record_property):
    """ISAs above the CPU's are not runnable here: force_isa clamps to what the CPU has, never higher."""
    missing = ISA_ORDER[len(RUNNABLE_ISAS):]
    record_property("isas_not_runnable", ",".join(missing) or "none")
    for name in missing:
        assert _kernels.force_isa(name) == _kernels.cpu_isa()
    _kernels.force_isa(_kernels.cpu_isa())
    assert _kernels.selected_isa() == _kernels.cpu_isa()


CANARY, CANARY_VALUE = 256, np.float32(-12345.5)


def sizes(M, N, K, threads, a_packed=0, b_packed=0):
    out = np.zeros(3, np.int64)
    _kernels.call("gemm_sizes_f32", [M, N, K, threads, a_packed, b_packed], [], [out])
    return out


def pack(matrix, rows, depth, row_stride, col_stride, which, scale=1.0):
    packed = np.empty(int(sizes(rows, rows, depth, 1)[1 + which]), np.float32)
    _kernels.call("gemm_pack_f32", [rows, depth, row_stride, col_stride, which], [scale],
                  [np.ascontiguousarray(matrix), packed])
    return packed


def gemm(a, b, M, N, K, *, a_packed=False, a_strides=None, b_packed=False, b_strides=None, alpha=1.0,
         bias_mode=0, bias=None, residual=None, residual_strides=(0, 0, 0), residual_scale=1.0, activation=0,
         params=(0.0, 0.0), a_offsets=(0,), b_offsets=(0,), threads=1, use_ref=False):
    batch = len(a_offsets)
    y = np.full((batch, M, N), np.nan, np.float32)
    # exactly gemm_sizes_f32's workspace for these operands, then a canary the kernel must never touch
    floats = int(sizes(M, N, K, threads, int(a_packed), int(b_packed))[0]) // 4
    workspace = np.full(floats + CANARY, CANARY_VALUE, np.float32)
    ints = [M, N, K, batch, int(a_packed), *(a_strides or (K, 1)), int(b_packed), *(b_strides or (N, 1)),
            bias_mode, int(residual is not None), *residual_strides, activation, threads, *a_offsets, *b_offsets]
    _kernels.call("gemm_f32", ints, [alpha, residual_scale, *params],
                  [a, b, y, workspace, bias if bias is not None else y, residual if residual is not None else y],
                  threads, use_ref)
    assert (workspace[floats:] == CANARY_VALUE).all(), f"gemm {M}x{N}x{K} wrote past its workspace"
    return y


def random(shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    x[x == 0] = 0.5
    return x


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_raw_operands_match_numpy_and_reference(isa, threads, trans_a, trans_b):
    for seed, (M, N, K) in enumerate(SHAPES):
        a, b = random((K, M) if trans_a else (M, K), seed), random((N, K) if trans_b else (K, N), seed + 100)
        expected = (a.T if trans_a else a) @ (b.T if trans_b else b)
        kwargs = dict(a_strides=(1, M) if trans_a else (K, 1), b_strides=(1, K) if trans_b else (N, 1))
        fast = gemm(a, b, M, N, K, threads=threads, **kwargs)[0]
        assert_close(fast, expected, what=f"fast {M}x{N}x{K}")
        np.testing.assert_array_equal(fast, gemm(a, b, M, N, K, threads=threads, **kwargs)[0],
                                      err_msg="not bitwise repeatable")
        if M * N * K < 200_000:
            assert_close(gemm(a, b, M, N, K, use_ref=True, **kwargs)[0], expected, what="reference")


@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_prepacked_operands(isa, threads):
    for seed, (M, N, K) in enumerate(SHAPES):
        a, b = random((M, K), seed), random((K, N), seed + 1)
        a_packed, b_packed = pack(a, M, K, K, 1, 0, 2.0), pack(b, N, K, 1, N, 1)
        expected = 2.0 * (a @ b)
        for a_arg, b_arg, flags in ((a_packed, b, (1, 0)), (a, b_packed, (0, 1)), (a_packed, b_packed, (1, 1))):
            kwargs = dict(a_packed=flags[0], b_packed=flags[1], alpha=1.0 if flags[0] else 2.0)
            fast = gemm(a_arg, b_arg, M, N, K, threads=threads, **kwargs)[0]
            assert_close(fast, expected, what=f"packed {flags} {M}x{N}x{K}")
            if M * N * K < 200_000:
                reference = gemm(a_arg, b_arg, M, N, K, use_ref=True, **kwargs)[0]
                assert_close(reference, expected, what=f"reference packed {flags}")


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_gemm_epilogue_bias_residual_activation(isa, activation):
    definition, params = ACTIVATIONS[activation]
    M, N, K = 29, 45, 70
    a, b = random((M, K), 1), random((K, N), 2)
    acc = 0.5 * (a @ b)
    row_bias, col_bias, full = random(M, 3), random(N, 4), random((M, N), 5)
    cases = [  # (bias_mode, bias, residual, strides, expected before activation)
        (1, row_bias, None, (0, 0, 0), acc + row_bias[:, None]),
        (2, col_bias, None, (0, 0, 0), acc + col_bias[None, :]),
        (0, None, full, (N, 1, 0), acc + 1.5 * full),
        (1, row_bias, col_bias, (0, 1, 0), acc + row_bias[:, None] + 1.5 * col_bias[None, :]),
        (0, None, row_bias, (1, 0, 0), acc + 1.5 * row_bias[:, None]),
        (0, None, np.array([0.25], np.float32), (0, 0, 0), acc + 1.5 * 0.25),
    ]
    for threads in (1, 2):
        for bias_mode, bias, residual, strides, before in cases:
            kwargs = dict(alpha=0.5, bias_mode=bias_mode, bias=bias, residual=residual, residual_strides=strides,
                          residual_scale=1.5, activation=activation, params=params)
            expected = definition(before, *params).astype(np.float32)
            fast = gemm(a, b, M, N, K, threads=threads, **kwargs)[0]
            assert_close(fast, expected, what=f"epilogue {bias_mode} {strides}")
            assert_close(gemm(a, b, M, N, K, use_ref=True, **kwargs)[0], expected, what="reference epilogue")


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_gemm_batched_offsets_and_determinism(isa, threads):
    M, N, K = 19, 23, 41
    a, b = random((3, M, K), 7), random((2, K, N), 8)
    a_offsets, b_offsets = [0, M * K, 2 * M * K, 0], [0, K * N, 0, K * N]
    expected = np.stack([a[0] @ b[0], a[1] @ b[1], a[2] @ b[0], a[0] @ b[1]])
    fast = gemm(a, b, M, N, K, a_offsets=a_offsets, b_offsets=b_offsets, threads=threads)
    assert_close(fast, expected, what="batched")
    one_thread = gemm(a, b, M, N, K, a_offsets=a_offsets, b_offsets=b_offsets, threads=1)
    np.testing.assert_array_equal(fast, one_thread, err_msg="thread count changed the sums")
    assert_close(gemm(a, b, M, N, K, a_offsets=a_offsets, b_offsets=b_offsets, use_ref=True), expected)


def test_gemm_large_is_bitwise_repeatable_with_two_threads(isa):
    M, N, K = 300, 257, 600
    a, b = random((M, K), 9), random((K, N), 10)
    first = gemm(a, b, M, N, K, threads=2)
    for _ in range(3):
        np.testing.assert_array_equal(gemm(a, b, M, N, K, threads=2), first)
    assert_close(first[0], a @ b)


def test_gemm_empty_reduction_is_the_epilogue_of_zero(isa):
    bias = random(4, 11)
    y = gemm(np.zeros(1, np.float32), np.zeros(1, np.float32), 4, 5, 0, bias_mode=1, bias=bias, activation=1)
    np.testing.assert_array_equal(y[0], np.repeat(np.maximum(bias, 0)[:, None], 5, axis=1))


# One-node models through the lowering ------------------------------------------------------------------------------

def make_model(node, inputs, output, initializers=(), opset=13):
    graph = helper.make_graph([node], "one_node", inputs, [output], initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def tensor(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def check_model(model, feeds):
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)[0]
    assert_close(run_graph(model, feeds, use_reference_kernels=True)[0], expected, what="reference vs onnxruntime")
    for threads in (1, 2):
        fast = run_graph(model, feeds, num_threads=threads)[0]
        np.testing.assert_array_equal(fast, run_graph(model, feeds, num_threads=threads)[0])
        assert_close(fast, expected, what=f"fast ({threads} threads) vs onnxruntime")


# (M, N, K, transA, transB, alpha, beta, C shape or None, constant A, constant B)
GEMM_CASES = [
    (7, 19, 23, 0, 0, 1.0, 1.0, None, False, True),
    (31, 40, 65, 1, 0, 0.5, 2.0, (40,), False, True),
    (31, 40, 65, 0, 1, 1.5, 0.5, (31, 1), False, True),
    (13, 17, 300, 1, 1, 1.0, -1.0, (13, 17), False, False),
    (13, 17, 30, 0, 0, 2.0, 1.0, (), False, False),
    (13, 17, 30, 0, 1, 1.0, 1.0, (1, 17), True, False),
    (5, 50, 30, 0, 0, 1.0, 0.25, (5, 50), False, True),
]


@pytest.mark.parametrize("case", GEMM_CASES, ids=lambda c: "x".join(map(str, c[:3])) + f"_t{c[3]}{c[4]}")
def test_gemm_node_matches_onnxruntime(isa, case):
    M, N, K, trans_a, trans_b, alpha, beta, c_shape, constant_a, constant_b = case
    a_shape, b_shape = ((K, M) if trans_a else (M, K)), ((N, K) if trans_b else (K, N))
    a, b = random(a_shape, 1), random(b_shape, 2)
    feeds, inputs, initializers = {}, [], []
    for name, array, constant in (("a", a, constant_a), ("b", b, constant_b)):
        if constant:
            initializers.append(numpy_helper.from_array(array, name))
        else:
            inputs.append(tensor(name, array.shape))
            feeds[name] = array
    names = ["a", "b"]
    if c_shape is not None:
        c = random(c_shape, 3)
        names.append("c")
        if constant_b:  # a constant C becomes a per-row/column bias, an input C a broadcast residual
            initializers.append(numpy_helper.from_array(c, "c"))
        else:
            inputs.append(tensor("c", c_shape))
            feeds["c"] = c
    node = helper.make_node("Gemm", names, ["y"], alpha=alpha, beta=beta, transA=trans_a, transB=trans_b)
    check_model(make_model(node, inputs, tensor("y", (M, N)), initializers), feeds)


# (A shape, B shape, constant B)
MATMUL_CASES = [
    ((7, 33), (33, 20), True),
    ((2, 3, 17, 40), (40, 9), True),
    ((2, 3, 17, 40), (3, 40, 9), False),
    ((4, 1, 6, 10), (1, 5, 10, 21), False),
    ((2, 1, 6, 10), (3, 10, 21), True),
    ((40,), (40, 9), True),
    ((3, 17, 40), (40,), False),
    ((40,), (40,), False),
    ((9, 300), (300, 70), False),
]


@pytest.mark.parametrize("case", MATMUL_CASES, ids=lambda c: f"{c[0]}@{c[1]}")
def test_matmul_node_matches_onnxruntime(isa, case):
    a_shape, b_shape, constant_b = case
    a, b = random(a_shape, 4), random(b_shape, 5)
    out_shape = np.matmul(a, b).shape
    inputs, feeds, initializers = [tensor("a", a_shape)], {"a": a}, []
    if constant_b:
        initializers.append(numpy_helper.from_array(b, "b"))
    else:
        inputs.append(tensor("b", b_shape))
        feeds["b"] = b
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    check_model(make_model(node, inputs, tensor("y", out_shape), initializers), feeds)


def test_checks_decline_what_the_lowering_cannot_run():
    matmul_int = make_model(helper.make_node("MatMul", ["a", "b"], ["y"]),
                            [tensor("a", (3, 4), TensorProto.INT32), tensor("b", (4, 5), TensorProto.INT32)],
                            tensor("y", (3, 5), TensorProto.INT32))
    node = next(iter(infer_shapes(matmul_int).graph))
    assert "dtype int32 not supported" in check_node(node)
    gemm_float = make_model(helper.make_node("Gemm", ["a", "b"], ["y"]),
                            [tensor("a", (3, 4)), tensor("b", (4, 5))], tensor("y", (3, 5)))
    assert check_node(next(iter(infer_shapes(gemm_float).graph))) is None
    dynamic = make_model(helper.make_node("MatMul", ["a", "b"], ["y"]),
                         [tensor("a", ("n", 4)), tensor("b", (4, 5))], tensor("y", ("n", 5)))
    assert "dynamic shape" in check_node(next(iter(infer_shapes(dynamic).graph)))
