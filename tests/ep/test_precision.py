"""OrtxEP's precision option (ortx/ep/precision.py): parsing, which steps run bf16, and numerics against ORT fp32."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

import ortx
from ortx import _kernels
from ortx.ep.lowering import blocked_layout
from ortx.ep.options import parse_providers
from ortx.model_io import to_ort_bytes
from tests import _models
from tests.tolerances import BF16_MODEL_MIN_COSINE, assert_close_bf16, cosine

PROVIDERS = ["OrtxEP", "CPUExecutionProvider"]


def _options(threads: int = 2) -> onnxruntime.SessionOptions:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return options


def _session(model, **ortx_options):
    return ortx.InferenceSession(model, _options(), providers=PROVIDERS,
                                 provider_options=[{"tuning": "off", **ortx_options}, {}])


def test_precision_option_is_validated():
    assert parse_providers(PROVIDERS, [{"precision": " BF16"}, {}]).ortx.precision == "bf16"
    assert parse_providers(PROVIDERS, [{}, {}]).ortx.precision == "fp32"
    with pytest.raises(ValueError, match=r"'precision'.*expected one of fp32, bf16, got 'fp16'"):
        parse_providers(PROVIDERS, [{"precision": "fp16"}, {}])


def _small_cnn():
    """Stem conv, an inverted residual (1x1, depthwise 3x3, 1x1 + Add), pooling, a Gemm classifier, Softmax."""
    builder = _models.GraphBuilder("small_cnn", seed=3)
    x = builder.conv("x", 3, 16, 3, stride=2)
    x = builder.node("Relu", [x])
    y = builder.node("Relu", [builder.conv(x, 16, 48, 1)])
    y = builder.node("Relu", [builder.conv(y, 48, 48, 3, group=48)])
    y = builder.conv(y, 48, 16, 1)
    x = builder.node("Add", [x, y])
    x = builder.node("Flatten", [builder.node("GlobalAveragePool", [x])])
    x = builder.node("Softmax", [builder.gemm(x, 16, 10)], axis=1)
    return builder.finish([_models._float_input("x", [1, 3, 40, 40])], [_models._float_input(x, [1, 10])])


@pytest.fixture(scope="module")
def cnn():
    return _small_cnn()


def test_bf16_runs_gemms_and_dense_convs_in_bf16_and_the_rest_in_fp32(cnn):
    session = _session(cnn, precision="bf16")
    rows = {row.name: row for row in session.assignment}
    by_op = {}
    for row in rows.values():
        by_op.setdefault(row.op_type, set()).add(row.precision)
    assert by_op["Gemm"] == {"bf16"}, str(session.assignment)
    assert by_op["Softmax"] == {"fp32"} and by_op["GlobalAveragePool"] == {"fp32"}
    convs = [node for node in cnn.graph.node if node.op_type == "Conv"]
    depthwise = {node.name for node in convs if any(a.name == "group" and a.i > 1 for a in node.attribute)}
    assert {rows[node.name].precision for node in convs if node.name in depthwise} == {"fp32"}
    # the 3-channel stem writes into a blocked run where those are planned, and stays fp32 there (ortx.ep.precision)
    stem = convs[0].name
    blocked = _kernels.selected_isa() == "avx512" and _kernels.bf16_isa() in blocked_layout.BF16_BLOCKED_PATHS
    assert rows[stem].precision == ("fp32" if blocked else "bf16")
    assert {rows[node.name].precision for node in convs[1:] if node.name not in depthwise} == {"bf16"}
    assert session.assignment.precision_counts()["bf16"] == len(convs) - len(depthwise) - blocked + 1
    assert "run bf16 kernels" in str(session.assignment)
    assert "bf16" not in _session(cnn).assignment.precision_counts()


def test_fp32_nodes_keep_the_named_layers_fp32_in_a_bf16_session(cnn):
    """Named by the model's names, a fused BatchNormalization's name reaching its conv; the other dense layers stay
    bf16; the outputs move towards fp32's; an unknown name is an error naming it."""
    convs = [node.name for node in cnn.graph.node if node.op_type == "Conv"]
    expand, project = convs[1], convs[3]  # the inverted residual's 1x1 convs
    gemm = next(node.name for node in cnn.graph.node if node.op_type == "Gemm")
    assert parse_providers(PROVIDERS, [{"fp32_nodes": f" {expand} ,{gemm},{expand}"}, {}]).ortx.fp32_nodes == (
        expand, gemm)
    plain, mixed = _session(cnn, precision="bf16"), _session(cnn, precision="bf16", fp32_nodes=f"{expand},{gemm}")
    rows = {row.name: row.precision for row in mixed.assignment}
    assert rows[expand] == rows[gemm] == "fp32" and rows[project] == "bf16", str(mixed.assignment)
    assert mixed.assignment.precision_counts()["bf16"] == plain.assignment.precision_counts()["bf16"] - 2
    feeds = {"x": np.random.default_rng(1).uniform(-1, 1, (1, 3, 40, 40)).astype(np.float32)}
    fp32 = _session(cnn).run(None, feeds)[0]
    all_fp32 = _session(cnn, precision="bf16", fp32_nodes=",".join(convs + [gemm])).run(None, feeds)[0]
    np.testing.assert_allclose(all_fp32, fp32, rtol=1e-4, atol=1e-6)
    assert np.abs(mixed.run(None, feeds)[0] - fp32).max() < np.abs(plain.run(None, feeds)[0] - fp32).max()
    with pytest.raises(ValueError, match=r"fp32_nodes: 'no_such_node' not in the graph"):
        _session(cnn, precision="bf16", fp32_nodes="no_such_node")


def test_fp32_nodes_marks_the_conv_a_batchnormalization_was_fused_into():
    model = _models.mobilenetv2_style(size=64)
    conv = [node for node in model.graph.node if node.op_type == "Conv"][2]  # the first 1x1 projection
    batchnorm = next(node.name for node in model.graph.node if node.input[0] == conv.output[0])
    assert {row.name: row.precision for row in _session(model, precision="bf16").assignment}[conv.name] == "bf16"
    rows = {row.name: row.precision for row in _session(model, precision="bf16", fp32_nodes=batchnorm).assignment}
    assert rows[conv.name] == "fp32", (conv.name, batchnorm)


def test_bf16_session_matches_ort_fp32_within_bf16_tolerance(cnn):
    feeds = {"x": np.random.default_rng(0).uniform(-1, 1, (1, 3, 40, 40)).astype(np.float32)}
    expected = onnxruntime.InferenceSession(to_ort_bytes(cnn), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    jit = _session(cnn, precision="bf16").run(None, feeds)[0]
    interpreted = _session(cnn, precision="bf16", jit="off").run(None, feeds)[0]
    np.testing.assert_array_equal(jit, interpreted, err_msg="JIT'd segment and step interpreter differ")
    assert_close_bf16(jit, expected)
    assert cosine(jit, expected) >= BF16_MODEL_MIN_COSINE


def test_transformer_block_bf16_runs_attention_products_in_bf16():
    model = _models.transformer_block(seq=16, dim=64, heads=4)
    session = _session(model, precision="bf16")
    feeds = {arg.name: np.random.default_rng(1).uniform(-1, 1, arg.shape).astype(np.float32)
             for arg in session.get_inputs()}
    expected = onnxruntime.InferenceSession(to_ort_bytes(model), providers=["CPUExecutionProvider"]).run(None,
                                                                                                         feeds)[0]
    actual = session.run(None, feeds)[0]
    assert_close_bf16(actual, expected)
    assert cosine(actual, expected) >= BF16_MODEL_MIN_COSINE
    counts = session.assignment.precision_counts()
    assert counts.get("bf16", 0) >= 4, str(session.assignment)  # Q, K, V, output and the MLP's projections
    kernels = {step.kernel for item in session._compiled.values() for step in _claimed_steps(item)}
    # the fused multi-head attention's scores and weighted sum in bf16 too (ortx.ep.precision), its softmax fp32
    assert "multi_head_attention_bf16" in kernels and "gemm_bf16" in kernels
    assert "multi_head_attention_f32" not in kernels


def _claimed_steps(compiled):
    from ortx.ep.runtime import ClaimedStep

    return [step for claimed in compiled.plan.steps if isinstance(claimed, ClaimedStep)
            for step in claimed.program.steps]
