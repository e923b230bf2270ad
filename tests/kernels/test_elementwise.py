"""Elementwise kernels (unary_f32, binary_*, channel_affine_f32, cast) and their lowerings.

Kernels: fast vs `_ref` vs numpy over wide input ranges and lengths with tails, on every ISA this CPU has.
Lowerings: one-node models through run_graph vs onnxruntime with 1 and 2 threads (`assert_matches_onnxruntime`,
shared with test_reduce.py), fast vs reference kernels, and runs bitwise identical; check() reasons for cases we
do not claim.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortx import _kernels
from ortx.ep.compile_nodes import check_node, run_graph
from ortx.ep.lowering.elementwise import broadcast_layout
from tests.tolerances import assert_close

ISAS = ("portable", "avx2", "avx512")
RUNNABLE_ISAS = ISAS[: ISAS.index(_kernels.cpu_isa()) + 1]
UNRUNNABLE_ISAS = ISAS[ISAS.index(_kernels.cpu_isa()) + 1:]
FLOAT = TensorProto.FLOAT


@pytest.fixture(params=RUNNABLE_ISAS)
def isa(request):
    """Runs the test with the kernels' ISA lowered to each one this CPU has; restores the best afterwards."""
    assert _kernels.force_isa(request.param) == request.param
    yield request.param
    _kernels.force_isa(_kernels.cpu_isa())


# Shared one-node model helpers (test_reduce.py imports these) ---------------------------------------------------
def one_node_model(op_type: str, inputs: dict[str, np.ndarray], *, constants: dict[str, np.ndarray] | None = None,
                   input_order: list[str] | None = None, outputs: tuple[tuple[str, int], ...] = (("y", FLOAT),),
                   opset: int = 17, **attributes) -> onnx.ModelProto:
    """inputs become graph inputs, constants initializers; input_order names the node's inputs ("" = absent)."""
    constants = constants or {}
    order = input_order if input_order is not None else list(inputs) + list(constants)
    node = helper.make_node(op_type, order, [name for name, _ in outputs], **attributes)
    graph = helper.make_graph(
        [node], "one_node",
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)
         for name, array in inputs.items()],
        [helper.make_tensor_value_info(name, elem_type, None) for name, elem_type in outputs],
        [numpy_helper.from_array(np.asarray(array), name) for name, array in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10  # onnx 1.23 writes IR 14, which onnxruntime rejects
    return model


def run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_matches_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray], *, outputs: int = 1) -> None:
    """Fast kernels vs onnxruntime, reference kernels vs onnxruntime, two fast runs bitwise equal; 1 and 2 threads."""
    expected = run_onnxruntime(model, feeds)[:outputs]
    for threads in (1, 2):
        fast = run_graph(model, feeds, num_threads=threads)[:outputs]
        again = run_graph(model, feeds, num_threads=threads)[:outputs]
        reference = run_graph(model, feeds, num_threads=threads, use_reference_kernels=True)[:outputs]
        for index, (actual, wanted) in enumerate(zip(fast, expected)):
            what = f"output {index}, {threads} thread(s)"
            assert_close(actual, wanted, what=f"{what} vs onnxruntime")
            assert_close(reference[index], wanted, what=f"{what}: reference vs onnxruntime")
            np.testing.assert_array_equal(again[index], actual, err_msg=f"{what}: run to run")


def check_reason(model: onnx.ModelProto) -> str | None:
    inferred = onnx.shape_inference.infer_shapes(model)
    graph = ir.serde.deserialize_model(inferred).graph
    return check_node(next(iter(graph)))


def random_normal(rng, shape, scale=1.0) -> np.ndarray:
    return np.asarray(rng.standard_normal(shape) * scale, dtype=np.float32)


def test_isas_this_cpu_cannot_run_are_reported():
    """AVX-512 code compiles everywhere but runs only on CPUs that have it; force_isa caps at the CPU's best."""
    for name in UNRUNNABLE_ISAS:
        assert _kernels.force_isa(name) == _kernels.cpu_isa(), f"{name} is not runnable on this CPU"
    _kernels.force_isa(_kernels.cpu_isa())
    assert set(RUNNABLE_ISAS) | set(UNRUNNABLE_ISAS) == set(ISAS)


# Unary kernel: fast vs ref vs float64 math ----------------------------------------------------------------------
def _erf64(x):
    return np.vectorize(math.erf)(x.astype(np.float64))


def _float64_unary(name, x):
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        return {
            "exp": np.exp(x64), "tanh": np.tanh(x64), "sigmoid": 1 / (1 + np.exp(-x64)), "erf": _erf64(x),
            "gelu": 0.5 * x64 * (1 + _erf64(x / np.sqrt(2))), "log": np.log(x64),
        }[name]


UNARY_CODES = {"exp": 16, "tanh": 7, "sigmoid": 4, "erf": 22, "gelu": 28, "log": 17}
# ulp bounds measured over the whole float range (vector_math.h documents the algorithms); libm is within 1-2.
UNARY_MAX_ULP = {"exp": 2, "tanh": 3, "sigmoid": 4, "erf": 4, "log": 2}


def _wide_inputs(rng) -> np.ndarray:
    dense = np.linspace(-12.0, 12.0, 48_001)
    wide = np.linspace(-110.0, 110.0, 20_003)
    tiny = rng.standard_normal(2_001) * 1e-6
    special = np.array([0.0, -0.0, 1e-30, -1e-30, 88.7, 88.75, -87.3, -103.0, 0.625, -0.921875, 3.925, 9.1])
    # log's domain: every binade from denormals to the largest float, and 1 +- a few ulp (f near 0)
    positive = np.float32(2.0) ** rng.uniform(-149, 128, 20_000).astype(np.float32)
    near_one = 1 + np.arange(-64, 65, dtype=np.float32) * np.finfo(np.float32).eps
    limits = np.array([np.finfo(np.float32).tiny, np.finfo(np.float32).max, 1.4e-45, 0.70710677, 0.7071068, 1.0])
    return np.concatenate([dense, wide, tiny, special, positive, near_one, limits]).astype(np.float32)


@pytest.mark.parametrize("name", sorted(UNARY_MAX_ULP))
def test_unary_transcendental_within_ulp_of_float64(isa, name):
    x = _wide_inputs(np.random.default_rng(1))
    y = np.empty_like(x)
    _kernels.call("unary_f32", [UNARY_CODES[name], x.size], [0, 0], [x, y])
    expected = _float64_unary(name, x)
    normal = np.isfinite(expected) & (np.abs(expected) >= np.finfo(np.float32).tiny) & (np.abs(expected) < 3e38)
    ulp = np.abs(y[normal] - expected[normal]) / np.spacing(np.abs(expected[normal]).astype(np.float32))
    assert ulp.max() <= UNARY_MAX_ULP[name], f"{name} on {isa}: {ulp.max():.2f} ulp at x={x[normal][ulp.argmax()]}"
    overflow = np.isinf(expected)
    np.testing.assert_array_equal(y[overflow], expected[overflow].astype(np.float32))


def test_gelu_error_is_within_its_bound_of_float64(isa):
    """vector_math.h's gelu (one polynomial for log erfc and one exp, no erf; the portable path is libm's erff):
    error at most 2 |x| 2^-24 everywhere
    (1.7 measured on [-12, 12]: absolute near the negative tail, where gelu is ~0 and 1 + erf underflows relative
    accuracy) and at most 12 ulp where |gelu| > 0.01; NaN stays NaN, +inf is +inf, -inf is NaN (the reference's
    0.5 * -inf * (1 + erf(-inf)))."""
    x = _wide_inputs(np.random.default_rng(4))
    x = x[np.isfinite(x) & (np.abs(x) < 1e30)]  # 0.5 x overflows nothing below; the wide range covers saturation
    y = np.empty_like(x)
    _kernels.call("unary_f32", [UNARY_CODES["gelu"], x.size], [0, 0], [x, y])
    expected = _float64_unary("gelu", x)
    error = np.abs(y.astype(np.float64) - expected)
    bound = 2.0 * np.abs(x.astype(np.float64)) * 2.0 ** -24 + 2.0 ** -149  # + a denormal step for 0.5 x's rounding
    nonzero = x != 0
    assert np.all(error[nonzero] <= bound[nonzero]), f"gelu on {isa}: x={x[nonzero][np.argmax(error[nonzero] - bound[nonzero])]}"
    assert np.array_equal(y[~nonzero], x[~nonzero]) and np.array_equal(np.signbit(y[~nonzero]), np.signbit(x[~nonzero]))
    if isa != "portable":  # libm's 0.5 x (1 + erff(x / sqrt 2)) cancels in 1 + erf below 0 (46 ulp at -2.63)
        large = np.abs(expected) > 0.01
        ulp = error[large] / np.spacing(np.abs(expected[large]).astype(np.float32))
        assert ulp.max() <= 12, f"gelu on {isa}: {ulp.max():.1f} ulp at x={x[large][ulp.argmax()]}"
    special = np.array([np.nan, np.inf, -np.inf], np.float32)
    out = np.empty_like(special)
    _kernels.call("unary_f32", [UNARY_CODES["gelu"], 3], [0, 0], [special, out])
    assert np.isnan(out[0]) and out[1] == np.inf and np.isnan(out[2])


@pytest.mark.skipif("avx512" not in RUNNABLE_ISAS or "avx2" not in RUNNABLE_ISAS, reason="needs AVX2 and AVX-512")
@pytest.mark.parametrize("name", sorted(UNARY_CODES))
def test_transcendental_unaries_agree_bitwise_across_isas(name):
    """vector_math.h's AVX-512 functions are its AVX2 ones operation for operation (erf's exp of its Q range scales
    by vscalefps on AVX-512 and by an exponent-field multiply on AVX2: exact either way), so both give the same bits
    on every input: random bit patterns (NaNs, infinities, denormals) and the ulp test's ranges."""
    bits = np.random.default_rng(2).integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([bits.view(np.float32), _wide_inputs(np.random.default_rng(1)),
                        np.linspace(-6, 6, 100_001, dtype=np.float32)])
    results = {}
    try:
        for isa in ("avx2", "avx512"):
            assert _kernels.force_isa(isa) == isa
            results[isa] = np.empty_like(x)
            _kernels.call("unary_f32", [UNARY_CODES[name], x.size], [0, 0], [x, results[isa]])
    finally:
        _kernels.force_isa(_kernels.cpu_isa())
    differ = np.flatnonzero(results["avx2"].view(np.uint32) != results["avx512"].view(np.uint32))
    assert differ.size == 0, f"{name}: {differ.size} inputs differ, first x={x[differ[0]]!r}"


@pytest.mark.parametrize("name", ["exp", "tanh", "sigmoid", "erf", "log"])
def test_unary_special_values(isa, name):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)
    y = np.empty_like(x)
    _kernels.call("unary_f32", [UNARY_CODES[name], x.size], [0, 0], [x, y])
    assert np.isnan(y[0])
    expected = {"exp": [np.inf, 0, 1, 1], "tanh": [1, -1, 0, -0.0], "sigmoid": [1, 0, 0.5, 0.5],
                "erf": [1, -1, 0, -0.0], "log": [np.inf, np.nan, -np.inf, -np.inf]}[name]
    np.testing.assert_array_equal(y[1:], np.float32(expected))
    if name in ("tanh", "erf"):
        assert np.signbit(y[4]), f"{name}(-0) must be -0"


# every unary op code the kernel knows, with parameters and an input range where the op is defined
ALL_UNARY = [
    (0, 0, 0, 5), (1, 0, 0, 5), (2, 0.1, 0, 5), (3, -0.5, 2.5, 5), (4, 0, 0, 30), (5, 0.2, 0.5, 8), (6, 0, 0, 8),
    (7, 0, 0, 12), (16, 0, 0, 10), (17, 0, 0, -1), (18, 0, 0, -1), (19, 0, 0, 5), (20, 0, 0, 5), (21, 0, 0, -1),
    (22, 0, 0, 5), (23, 0, 0, 5), (24, 0, 0, 5), (25, 0, 0, 30), (26, 1.3, 0, 5), (27, 1.67, 1.05, 5),
    (28, 0, 0, 6), (29, 0, 0, 6), (30, 0, 0, 5), (31, 1.0, 0, 12), (31, 1.702, 0, 12),
]


@pytest.mark.parametrize("code, p0, p1, scale", ALL_UNARY, ids=[str(case[0]) for case in ALL_UNARY])
def test_unary_kernel_matches_reference_with_tails(isa, code, p0, p1, scale):
    rng = np.random.default_rng(code)
    for length in (1, 7, 8, 15, 16, 17, 33, 1000, 70_001):
        x = random_normal(rng, length, abs(scale))
        if scale < 0:  # positive-only domain (Log, Sqrt, Reciprocal)
            x = np.abs(x) + np.float32(0.01)
        fast, reference = np.empty_like(x), np.empty_like(x)
        for threads in (1, 2):
            _kernels.call("unary_f32", [code, length], [p0, p1], [x, fast], num_threads=threads)
            _kernels.call("unary_f32", [code, length], [p0, p1], [x, reference], use_ref=True)
            assert_close(fast, reference, what=f"op {code}, length {length}, {threads} thread(s)")


# Unary lowerings vs onnxruntime ---------------------------------------------------------------------------------
UNARY_NODES = [
    ("Relu", {}, 3.0), ("LeakyRelu", {"alpha": 0.2}, 3.0), ("Sigmoid", {}, 20.0),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 5.0), ("HardSwish", {}, 6.0), ("Tanh", {}, 10.0),
    ("Exp", {}, 20.0), ("Log", {}, -1), ("Sqrt", {}, -1), ("Neg", {}, 3.0), ("Abs", {}, 3.0),
    ("Reciprocal", {}, -1), ("Erf", {}, 4.0), ("Floor", {}, 5.0), ("Ceil", {}, 5.0), ("Softplus", {}, 30.0),
    ("Elu", {"alpha": 0.7}, 3.0), ("Selu", {}, 3.0), ("Sign", {}, 3.0),
]


@pytest.mark.parametrize("op_type, attributes, scale", UNARY_NODES, ids=[case[0] for case in UNARY_NODES])
def test_unary_node_matches_onnxruntime(isa, op_type, attributes, scale):
    rng = np.random.default_rng(len(op_type))
    x = random_normal(rng, (2, 3, 37, 29), abs(scale))
    if scale < 0:
        x = np.abs(x) + np.float32(0.05)
    assert_matches_onnxruntime(one_node_model(op_type, {"x": x}, opset=17, **attributes), {"x": x})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_opset20_matches_onnxruntime(isa, approximate):
    x = random_normal(np.random.default_rng(20), (3, 1000), 4.0)
    assert_matches_onnxruntime(one_node_model("Gelu", {"x": x}, opset=20, approximate=approximate), {"x": x})


@pytest.mark.parametrize("alpha", [1.0, 2.5])
def test_swish_opset24_matches_onnxruntime(isa, alpha):
    x = random_normal(np.random.default_rng(24), (3, 1001), 8.0)
    assert_matches_onnxruntime(one_node_model("Swish", {"x": x}, opset=24, alpha=alpha), {"x": x})


@pytest.mark.parametrize("op_type, attributes", [("Gelu", {}), ("FastGelu", {}), ("QuickGelu", {"alpha": 1.0}),
                                                 ("QuickGelu", {})])
def test_contrib_activations_match_onnxruntime(isa, op_type, attributes):
    """onnxruntime's com.microsoft activations that level 3 emits (Gelu, QuickGelu) or exporters write."""
    x = random_normal(np.random.default_rng(len(op_type)), (2, 9, 131), 6.0)
    model = one_node_model(op_type, {"x": x}, domain="com.microsoft", **attributes)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    # onnx's shape inference does not know contrib ops: the output shape is declared, as the fusions leave it.
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", FLOAT, x.shape))
    assert_matches_onnxruntime(model, {"x": x})


def test_contrib_fast_gelu_bias_and_old_swish_reasons():
    x = np.ones((2, 4), np.float32)
    model = one_node_model("FastGelu", {"x": x}, constants={"bias": np.ones(4, np.float32)}, domain="com.microsoft")
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    assert check_reason(model) == "FastGelu: the bias input is not supported"
    graph = ir.serde.deserialize_model(one_node_model("Swish", {"x": x}, opset=24)).graph
    graph.opset_imports[""] = 23
    node = next(iter(graph))
    node.version = None
    assert check_node(node) == "Swish: needs opset 24"


CLIP_CASES = [
    (6, {"min": -0.5, "max": 1.5}, {}, ["x"]),
    (6, {}, {}, ["x"]),
    (13, {}, {"low": np.float32(0.0), "high": np.float32(6.0)}, ["x", "low", "high"]),
    (13, {}, {"low": np.float32(-1.0)}, ["x", "low"]),
    (13, {}, {"high": np.float32(0.25)}, ["x", "", "high"]),
    (13, {}, {}, ["x"]),
]


@pytest.mark.parametrize("opset, attributes, constants, order", CLIP_CASES)
def test_clip_bounds_from_attributes_and_inputs(isa, opset, attributes, constants, order):
    x = random_normal(np.random.default_rng(6), (4, 5, 19), 4.0)
    model = one_node_model("Clip", {"x": x}, constants=constants, input_order=order, opset=opset, **attributes)
    assert_matches_onnxruntime(model, {"x": x})


def test_unary_check_reasons():
    x = np.ones((2, 3), np.float32)
    clip = one_node_model("Clip", {"x": x, "low": np.float32(0)}, input_order=["x", "low"], opset=13)
    assert check_reason(clip) == "Clip: input 1 (min) must be a constant"
    swapped = one_node_model("Clip", {"x": x}, opset=6, min=2.0, max=1.0)
    assert "min 2.0 > max 1.0" in check_reason(swapped)
    relu_int = one_node_model("Relu", {"x": np.ones((2, 3), np.int32)}, outputs=(("y", TensorProto.INT32),))
    assert check_reason(relu_int) == "Relu: input 0 dtype int32 not supported (supported: float32)"
    gelu_old = one_node_model("Gelu", {"x": x}, opset=17)
    assert check_reason(gelu_old) is not None


# Binary kernel and layout ----------------------------------------------------------------------------------------
def test_broadcast_layout_collapses_axes():
    # per-channel: [N,C,H,W] op [1,C,1,1] -> dims [N, C, H*W]
    assert broadcast_layout((2, 8, 5, 7), (1, 8, 1, 1), (2, 8, 5, 7)) == ([2, 8, 35], [280, 35, 1], [0, 1, 0])
    # same shape collapses to one axis; scalar operand gets stride 0
    assert broadcast_layout((2, 3, 4), (2, 3, 4), (2, 3, 4)) == ([24], [1], [1])
    assert broadcast_layout((2, 3, 4), (), (2, 3, 4)) == ([24], [1], [0])
    # last axis: [.., D] op [D]
    assert broadcast_layout((3, 4, 37), (37,), (3, 4, 37)) == ([12, 37], [37, 1], [0, 1])
    assert broadcast_layout((1,), (), (1,)) == ([1], [1], [1])


BROADCAST_SHAPES = [
    ((2, 3, 17), (2, 3, 17)), ((5, 33), ()), ((), (5, 33)), ((2, 8, 5, 7), (1, 8, 1, 1)), ((2, 8, 5, 7), (8, 1, 1)),
    ((2, 8, 5, 7), (2, 8, 1, 1)), ((3, 4, 37), (37,)), ((37,), (3, 4, 37)), ((3, 1, 5), (1, 4, 1)), ((4, 1), (1, 9)),
    ((2, 1, 3, 1, 5, 1), (1, 4, 1, 6, 1, 7)), ((1, 24, 40, 41), (1, 24, 1, 1)), ((3, 70_001), (1, 1)),
]


def _binary_operands(rng, op, a_shape, b_shape, dtype):
    if dtype == np.float32:
        a, b = random_normal(rng, a_shape, 3.0), random_normal(rng, b_shape, 3.0)
        if op == "Pow":
            a = np.abs(a) + np.float32(0.5)
            b = np.clip(b, -2, 2).astype(np.float32)
        if op == "Div":
            b = np.where(np.abs(b) < 0.1, np.float32(0.5), b).astype(np.float32)
        return np.asarray(a, np.float32), np.asarray(b, np.float32)  # 0-d arithmetic returns numpy scalars
    a = np.asarray(rng.integers(-1000, 1000, a_shape), dtype=dtype)
    b = np.asarray(rng.integers(-50, 50, b_shape), dtype=dtype)
    b[b == 0] = 7
    return a, b


@pytest.mark.parametrize("a_shape, b_shape", BROADCAST_SHAPES, ids=[f"{a}-{b}" for a, b in BROADCAST_SHAPES])
def test_binary_f32_node_matches_onnxruntime(isa, a_shape, b_shape):
    rng = np.random.default_rng(len(a_shape) * 10 + len(b_shape))
    for op in ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"):
        a, b = _binary_operands(rng, op, a_shape, b_shape, np.float32)
        assert_matches_onnxruntime(one_node_model(op, {"a": a, "b": b}, opset=13), {"a": a, "b": b})


@pytest.mark.parametrize("dtype, elem_type", [(np.int64, TensorProto.INT64), (np.int32, TensorProto.INT32)])
@pytest.mark.parametrize("a_shape, b_shape", BROADCAST_SHAPES[:8], ids=[f"{a}-{b}" for a, b in BROADCAST_SHAPES[:8]])
def test_binary_int_node_matches_onnxruntime(dtype, elem_type, a_shape, b_shape):
    rng = np.random.default_rng(3)
    for op in ("Add", "Sub", "Mul", "Div", "Max", "Min"):
        a, b = _binary_operands(rng, op, a_shape, b_shape, dtype)
        model = one_node_model(op, {"a": a, "b": b}, outputs=(("y", elem_type),), opset=13)
        assert_matches_onnxruntime(model, {"a": a, "b": b})


def test_integer_division_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 0, 5], np.int64)
    b = np.array([2, 2, -2, -2, 3, 0], np.int64)
    y = np.empty_like(a)
    _kernels.call("binary_i64", [3, 1, 6, 1, 1], [], [a, b, y])
    np.testing.assert_array_equal(y, [3, -3, -3, 3, 0, 0])  # x / 0 gives 0 rather than trapping


def test_binary_constant_operand_and_integer_exponent(isa):
    rng = np.random.default_rng(9)
    x = np.abs(random_normal(rng, (2, 16, 9, 11))) + np.float32(0.1)
    scale = random_normal(rng, (16, 1, 1))
    assert_matches_onnxruntime(one_node_model("Mul", {"x": x}, constants={"s": scale}), {"x": x})
    pow_model = one_node_model("Pow", {"x": x}, constants={"e": np.array(3, np.int64)}, opset=15)
    assert_matches_onnxruntime(pow_model, {"x": x})
    signed = random_normal(rng, (3, 7, 33), 3.0)
    square = one_node_model("Pow", {"x": signed}, constants={"e": np.array([2.0], np.float32)}, opset=15)
    assert_matches_onnxruntime(square, {"x": signed})  # lowered as x * x
    assert run_graph(square, {"x": signed})[0].tobytes() == (signed * signed).tobytes()


def test_binary_kernel_fast_matches_reference_bitwise_for_exact_ops(isa):
    """Add/Sub/Mul/Div/Max/Min are single correctly rounded operations: every ISA must agree to the bit."""
    rng = np.random.default_rng(11)
    for a_shape, b_shape in BROADCAST_SHAPES:
        out_shape = np.broadcast_shapes(a_shape, b_shape)
        dims, a_strides, b_strides = broadcast_layout(a_shape, b_shape, out_shape)
        for code in (0, 1, 2, 3, 5, 6):
            a, b = random_normal(rng, a_shape), random_normal(rng, b_shape)
            a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
            fast, reference = np.empty(out_shape, np.float32), np.empty(out_shape, np.float32)
            ints = [code, len(dims), *dims, *a_strides, *b_strides]
            _kernels.call("binary_f32", ints, [], [a, b, fast], num_threads=2)
            _kernels.call("binary_f32", ints, [], [a, b, reference], use_ref=True)
            np.testing.assert_array_equal(fast, reference, err_msg=f"op {code} {a_shape} {b_shape}")


def test_pp_ocr_hardswish_decomposition_and_se_block(isa):
    """x * Clip(x + 3, 0, 6) / 6 and x * Sigmoid(pool) as small graphs of our nodes, against onnxruntime."""
    rng = np.random.default_rng(5)
    x = random_normal(rng, (1, 16, 23, 31), 4.0)
    pooled = random_normal(rng, (1, 16, 1, 1))
    nodes = [
        helper.make_node("Add", ["x", "three"], ["shifted"]),
        helper.make_node("Clip", ["shifted", "zero", "six"], ["clipped"]),
        helper.make_node("Mul", ["x", "clipped"], ["scaled"]),
        helper.make_node("Div", ["scaled", "six"], ["hswish"]),
        helper.make_node("Sigmoid", ["p"], ["gate"]),
        helper.make_node("Mul", ["hswish", "gate"], ["y"]),
    ]
    constants = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("three", 3), ("zero", 0), ("six", 6))]
    graph = helper.make_graph(nodes, "hswish_se",
                              [helper.make_tensor_value_info("x", FLOAT, x.shape),
                               helper.make_tensor_value_info("p", FLOAT, pooled.shape)],
                              [helper.make_tensor_value_info("y", FLOAT, None)], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    assert_matches_onnxruntime(model, {"x": x, "p": pooled})


# Variadic --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op_type", ["Sum", "Mean", "Max", "Min"])
def test_variadic_nodes_match_onnxruntime(isa, op_type):
    rng = np.random.default_rng(13)
    inputs = {"a": random_normal(rng, (3, 1, 17)), "b": random_normal(rng, (4, 1)), "c": random_normal(rng, (3, 4, 17))}
    assert_matches_onnxruntime(one_node_model(op_type, inputs, opset=13), inputs)
    single = {"a": inputs["a"]}
    assert_matches_onnxruntime(one_node_model(op_type, single, opset=13), single)


def test_variadic_int_max_and_sum_int_reason():
    rng = np.random.default_rng(14)
    inputs = {"a": rng.integers(-9, 9, (3, 5)).astype(np.int64), "b": rng.integers(-9, 9, (5,)).astype(np.int64)}
    model = one_node_model("Max", inputs, outputs=(("y", TensorProto.INT64),), opset=13)
    assert_matches_onnxruntime(model, inputs)
    bad = one_node_model("Sum", {"a": np.ones((2,), np.int32)}, outputs=(("y", TensorProto.INT32),), opset=13)
    assert "dtype int32 not supported" in check_reason(bad)


# BatchNormalization ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("opset, shape", [(7, (2, 6, 5, 7)), (9, (3, 6)), (14, (1, 6, 33)), (15, (2, 6, 4, 5, 3))])
def test_batch_normalization_matches_onnxruntime(isa, opset, shape):
    rng = np.random.default_rng(opset)
    x = random_normal(rng, shape, 2.0)
    channels = shape[1]
    constants = {"scale": random_normal(rng, channels), "bias": random_normal(rng, channels),
                 "mean": random_normal(rng, channels), "var": np.abs(random_normal(rng, channels)) + np.float32(0.1)}
    model = one_node_model("BatchNormalization", {"x": x}, constants=constants, opset=opset, epsilon=1e-3)
    assert_matches_onnxruntime(model, {"x": x})


def test_batch_normalization_check_reasons():
    x = np.ones((2, 3, 4), np.float32)
    constants = {n: np.ones(3, np.float32) for n in ("scale", "bias", "mean", "var")}
    training = one_node_model("BatchNormalization", {"x": x}, constants=constants, opset=15, training_mode=1)
    assert check_reason(training) == "BatchNormalization: training_mode=1 not supported (inference only)"
    dynamic_mean = one_node_model("BatchNormalization", {"x": x, "mean": np.ones(3, np.float32)},
                                  constants={n: constants[n] for n in ("scale", "bias", "var")},
                                  input_order=["x", "scale", "bias", "mean", "var"], opset=15)
    assert check_reason(dynamic_mean) == "BatchNormalization: input 3 (input_mean) must be a constant"


def test_channel_affine_kernel_matches_reference(isa):
    rng = np.random.default_rng(21)
    for outer, channels, inner in ((1, 3, 1), (2, 5, 17), (3, 16, 1031)):
        x = random_normal(rng, (outer, channels, inner))
        scale, shift = random_normal(rng, channels), random_normal(rng, channels)
        fast, reference = np.empty_like(x), np.empty_like(x)
        _kernels.call("channel_affine_f32", [outer, channels, inner], [], [x, scale, shift, fast], num_threads=2)
        _kernels.call("channel_affine_f32", [outer, channels, inner], [], [x, scale, shift, reference], use_ref=True)
        assert_close(fast, reference)  # the vector row may fuse x * scale + shift into one FMA


# Cast ------------------------------------------------------------------------------------------------------------
CAST_VALUES = {
    np.float32: np.array([0.0, -0.0, 1.5, -1.5, 2.7, -2.7, 1e6, -3e5, 0.25, 7.0, -8.0], np.float32),
    np.int64: np.array([0, 1, -1, 5, 2**40, -(2**40), 123456789, 2**31 + 5, -7, 8, 9], np.int64),
    np.int32: np.array([0, 1, -1, 5, 2**30, -(2**30), 123456789, 77, -7, 8, 9], np.int32),
    np.bool_: np.array([True, False, True, True, False, False, True, False, True, True, False]),
}
CAST_TO = {TensorProto.FLOAT: np.float32, TensorProto.INT64: np.int64, TensorProto.INT32: np.int32,
           TensorProto.BOOL: np.bool_}


@pytest.mark.parametrize("source", list(CAST_VALUES), ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("to", list(CAST_TO), ids=lambda t: np.dtype(CAST_TO[t]).name)
def test_cast_matches_onnxruntime(source, to):
    x = np.tile(CAST_VALUES[source], 3).reshape(3, 11)
    if source == np.int64 and to == TensorProto.INT32:
        x = np.clip(x, -(2**31), 2**31 - 1)  # out-of-range narrowing is implementation-defined
    model = one_node_model("Cast", {"x": x}, outputs=(("y", to),), opset=19, to=to)
    assert_matches_onnxruntime(model, {"x": x})


def test_cast_check_reason():
    model = one_node_model("Cast", {"x": np.ones(3, np.float32)}, outputs=(("y", TensorProto.FLOAT16),),
                           to=TensorProto.FLOAT16)
    assert check_reason(model) == "Cast: target type 10 not supported (supported: float32, int32, int64, bool)"


# Comparisons and Where -------------------------------------------------------------------------------------------
COMPARE_OPS = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("a_shape, b_shape", [((3, 4, 17), (3, 4, 17)), ((2, 8, 5, 7), (8, 1, 1)), ((5, 33), ()),
                                              ((3, 1, 5), (1, 4, 1))])
def test_comparison_nodes_match_onnxruntime(dtype, a_shape, b_shape):
    rng = np.random.default_rng(17)
    # small integers, so Equal and the *OrEqual variants see ties
    a = np.asarray(rng.integers(-3, 3, a_shape), dtype=dtype)
    b = np.asarray(rng.integers(-3, 3, b_shape), dtype=dtype)
    for op in COMPARE_OPS:
        model = one_node_model(op, {"a": a, "b": b}, outputs=(("y", TensorProto.BOOL),), opset=13)
        assert_matches_onnxruntime(model, {"a": a, "b": b})


WHERE_SHAPES = [((3, 4, 17),) * 3, ((4, 1), (1, 9), ()), ((2, 1, 5), (3, 1), (2, 3, 1)),
                ((1, 6, 1, 1), (2, 6, 7, 9), (9,))]


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("shapes", [((3, 4, 17),) * 3, ((4, 1), (1, 9), ()), ((2, 1, 5), (3, 1), (2, 3, 1)),
                                    ((1, 6, 1, 1), (2, 6, 7, 9), (9,))])
def test_where_matches_onnxruntime(dtype, shapes):
    rng = np.random.default_rng(19)
    condition = np.asarray(rng.random(shapes[0]) > 0.5)
    x = np.asarray(rng.integers(-100, 100, shapes[1]), dtype=dtype)
    y = np.asarray(rng.integers(-100, 100, shapes[2]), dtype=dtype)
    elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = one_node_model("Where", {"c": condition, "x": x, "y": y}, outputs=(("out", elem_type),), opset=16)
    assert_matches_onnxruntime(model, {"c": condition, "x": x, "y": y})


def test_comparison_and_where_check_reasons():
    doubles = one_node_model("Less", {"a": np.ones(3), "b": np.ones(3)}, outputs=(("y", TensorProto.BOOL),), opset=13)
    assert check_reason(doubles) == "Less: input 0 dtype float64 not supported (supported: float32, int64, int32)"
    float_condition = one_node_model("Where", {"c": np.ones(3, np.float32), "a": np.ones(3, np.float32),
                                               "b": np.ones(3, np.float32)}, opset=16)
    assert "input 0 (condition) dtype float32 not supported" in check_reason(float_condition)


@pytest.mark.parametrize("shapes", WHERE_SHAPES)
def test_where_on_bool_values_matches_numpy(shapes):
    """onnxruntime's CPU provider has no bool Where kernel, so numpy is the oracle here."""
    rng = np.random.default_rng(23)
    condition, x, y = (np.asarray(rng.random(shape) > 0.5) for shape in shapes)
    model = one_node_model("Where", {"c": condition, "x": x, "y": y}, outputs=(("out", TensorProto.BOOL),), opset=16)
    for use_reference_kernels in (False, True):
        (actual,) = run_graph(model, {"c": condition, "x": x, "y": y}, use_reference_kernels=use_reference_kernels)
        np.testing.assert_array_equal(actual, np.where(condition, x, y))
