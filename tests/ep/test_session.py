"""ortx.InferenceSession: onnxruntime's API, numerics against ORT CPU, bad input, concurrency, determinism."""
from __future__ import annotations

import concurrent.futures

import numpy as np
import onnx
import onnxruntime
import pytest

import ortx
from ortx.model_io import to_ort_bytes
from tests import _models
from tests.tolerances import assert_model_close

PROVIDERS = ["OrtxEP", "CPUExecutionProvider"]


def _options(threads: int = 2) -> onnxruntime.SessionOptions:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return options


def _ort_outputs(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(to_ort_bytes(model), _options(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _random_feeds(session, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {arg.name: rng.uniform(-1, 1, size=arg.shape).astype(np.float32) for arg in session.get_inputs()}


@pytest.fixture(scope="module")
def resnet():
    model = _models.resnet18_style(size=64)
    return model, ortx.InferenceSession(model, _options(), providers=PROVIDERS)


def test_api_surface_matches_onnxruntime(resnet):
    model, session = resnet
    reference = onnxruntime.InferenceSession(to_ort_bytes(model), providers=["CPUExecutionProvider"])
    assert [(a.name, a.type, a.shape) for a in session.get_inputs()] == \
        [(a.name, a.type, a.shape) for a in reference.get_inputs()]
    assert [(a.name, a.type, a.shape) for a in session.get_outputs()] == \
        [(a.name, a.type, a.shape) for a in reference.get_outputs()]
    assert session.get_providers() == PROVIDERS
    assert set(session.get_provider_options()) == set(PROVIDERS)
    assert session.get_session_options().intra_op_num_threads == 2
    assert session.get_modelmeta().graph_name == reference.get_modelmeta().graph_name
    with pytest.raises(NotImplementedError, match="io_binding"):
        session.io_binding()


def test_resnet_matches_ort_and_is_claimed(resnet):
    model, session = resnet
    feeds = _random_feeds(session, seed=1)
    assert_model_close(session.run(None, feeds)[0], _ort_outputs(model, feeds)[0])
    assert session.assignment.claimed_mac_share >= 0.95, str(session.assignment)


def test_run_with_ort_values(resnet):
    model, session = resnet
    feeds = _random_feeds(session, seed=2)
    ort_feeds = {name: onnxruntime.OrtValue.ortvalue_from_numpy(array) for name, array in feeds.items()}
    result = session.run_with_ort_values(None, ort_feeds)[0].numpy()
    np.testing.assert_array_equal(result, session.run(None, feeds)[0])


def test_assignment_table_names_every_original_node(resnet):
    model, session = resnet
    rows = session.assignment
    assert [row.name for row in rows] == [node.name or f"{node.op_type}_{i}" for i, node in enumerate(model.graph.node)]
    text = str(rows)
    assert "OrtxEP" in text and "provider" in text.splitlines()[0]


def test_unsupported_ops_run_on_ort_with_reasons():
    model = _models.lstm_classifier()
    session = ortx.InferenceSession(model, _options(), providers=PROVIDERS)
    feeds = _random_feeds(session, seed=3)
    for got, want in zip(session.run(None, feeds), _ort_outputs(model, feeds)):
        assert_model_close(got, want)
    lstm = [row for row in session.assignment if row.op_type == "LSTM"]
    assert lstm and lstm[0].provider == "CPUExecutionProvider"
    assert "LSTM: op not supported" in lstm[0].reason
    assert any(row.provider == "OrtxEP" for row in session.assignment)


def test_transformer_block_matches_ort():
    model = _models.transformer_block()
    session = ortx.InferenceSession(model, _options(), providers=PROVIDERS)
    feeds = _random_feeds(session, seed=4)
    for got, want in zip(session.run(None, feeds), _ort_outputs(model, feeds)):
        assert_model_close(got, want)


@pytest.mark.parametrize("fused_op", ["FusedConv", "MultiHeadAttention"])
def test_a_fused_node_that_fails_to_compile_runs_unfused(monkeypatch, caplog, fused_op):
    """Plain ORT cannot run an ai.ortx node, so when the lowering of one that OrtxEP's fusions made raises, the
    session compiles the graph without those fusions instead of handing the fused node to ORT."""
    from ortx.ep import lowering

    check, _ = lowering.LOWERINGS[("ai.ortx", fused_op)]

    def broken(node, builder):
        raise RuntimeError("lowering bug")

    monkeypatch.setitem(lowering.LOWERINGS, ("ai.ortx", fused_op), (check, broken))
    model = _models.tiny_conv_relu() if fused_op == "FusedConv" else _models.transformer_block()
    session = ortx.InferenceSession(model, _options(), providers=PROVIDERS)
    feeds = _random_feeds(session, seed=5)
    for got, want in zip(session.run(None, feeds), _ort_outputs(model, feeds)):
        assert_model_close(got, want)
    assert "fused node" in caplog.text and "compiling without OrtxEP's fusions" in caplog.text
    assert not any(row.op_type == fused_op for row in session.assignment)
    assert any(row.provider == "OrtxEP" for row in session.assignment)


def test_plain_ort_when_ortx_not_requested():
    model = _models.tiny_conv_relu()
    session = ortx.InferenceSession(model, providers=["CPUExecutionProvider"])
    feeds = _random_feeds(session)
    np.testing.assert_array_equal(session.run(None, feeds)[0], _ort_outputs(model, feeds)[0])
    with pytest.raises(RuntimeError, match="OrtxEP is not in this session"):
        session.assignment


def test_unknown_provider_and_option_are_errors_listing_valid_ones():
    model = _models.tiny_conv_relu()
    with pytest.raises(ValueError, match="valid providers here: OrtxEP, .*CPUExecutionProvider"):
        ortx.InferenceSession(model, providers=["NoSuchEP"])
    with pytest.raises(ValueError, match="unknown OrtxEP provider option 'tile'.*input_shapes"):
        ortx.InferenceSession(model, providers=PROVIDERS, provider_options=[{"tile": 4}, {}])


def test_bad_feeds_name_the_problem():
    model = _models.tiny_conv_relu()
    session = ortx.InferenceSession(model, providers=PROVIDERS)
    arg = session.get_inputs()[0]
    good = np.ones(arg.shape, np.float32)
    with pytest.raises(ValueError, match="unknown input name"):
        session.run(None, {"nope": good})
    with pytest.raises(ValueError, match=r"got tensor\(double\).*expects tensor\(float\)"):
        session.run(None, {arg.name: good.astype(np.float64)})
    with pytest.raises(ValueError, match="axis 2 must be"):
        session.run(None, {arg.name: np.ones(arg.shape[:2] + [arg.shape[2] + 1, arg.shape[3]], np.float32)})
    with pytest.raises(ValueError, match="unknown output name"):
        session.run(["nope"], {arg.name: good})


def test_invalid_model_is_a_clear_error(tmp_path):
    model = _models.tiny_conv_relu()
    model.graph.node[0].input[0] = "undefined_tensor"
    path = tmp_path / "bad.onnx"
    onnx.save(model, path)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="undefined_tensor|checker"):
        ortx.InferenceSession(str(path), providers=PROVIDERS)
    assert path.read_bytes() == before


def test_patch_onnxruntime_builds_ortx_sessions():
    model = _models.tiny_conv_relu()
    ortx.patch_onnxruntime()
    try:
        patched = onnxruntime.InferenceSession(to_ort_bytes(model), providers=PROVIDERS)
        plain = onnxruntime.InferenceSession(to_ort_bytes(model), providers=["CPUExecutionProvider"])
        assert isinstance(patched, ortx.InferenceSession)
        assert not isinstance(plain, ortx.InferenceSession)
        assert isinstance(plain, onnxruntime.InferenceSession)
    finally:
        ortx.unpatch_onnxruntime()
    assert onnxruntime.InferenceSession.__name__ == "InferenceSession"
    # Unpatched, ORT itself warns about the unknown provider and falls back to its CPU EP.
    with pytest.warns(UserWarning, match="OrtxEP"):
        unpatched = onnxruntime.InferenceSession(to_ort_bytes(model), providers=PROVIDERS)
    assert not isinstance(unpatched, ortx.InferenceSession)


def test_dynamic_shapes_compile_per_shape():
    model = _models.tiny_conv_relu()
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "height"
    model.graph.output[0].type.tensor_type.shape.dim[2].dim_param = "height_out"
    session = ortx.InferenceSession(model, providers=PROVIDERS)
    with pytest.raises(RuntimeError, match="has not run yet"):
        session.assignment
    arg = session.get_inputs()[0]
    for height in (8, 12):
        shape = [arg.shape[0], arg.shape[1], height, arg.shape[3]]
        feeds = {arg.name: np.random.default_rng(height).uniform(-1, 1, shape).astype(np.float32)}
        assert_model_close(session.run(None, feeds)[0], _ort_outputs(model, feeds)[0])
        assert session.assignment.claimed_mac_share == 1.0


def test_threads_share_one_session_and_results_are_bitwise_stable(resnet):
    model, session = resnet
    feeds = [_random_feeds(session, seed=10 + i) for i in range(8)]
    expected = [session.run(None, f)[0] for f in feeds]
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        for _ in range(3):
            results = list(pool.map(lambda f: session.run(None, f)[0], feeds))
            for got, want in zip(results, expected):
                np.testing.assert_array_equal(got, want)
    reference = _ort_outputs(model, feeds[0])[0]
    assert_model_close(expected[0], reference)


def test_a_declared_output_shape_that_contradicts_its_producer_runs_as_onnxruntime_runs_it():
    """Concat of 48 + 48 channels declared as 64: the kernels write 96 channels, so the output is planned from the
    producer's shape (before, the declared one sized the buffer and the Concat wrote past it)."""
    import warnings

    from onnx import TensorProto, helper

    node = helper.make_node("Concat", ["a", "b"], ["z"], axis=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 48, 4, 4])
                                            for name in ("a", "b")],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 64, 4, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    rng = np.random.default_rng(3)
    feeds = {name: rng.standard_normal((1, 48, 4, 4)).astype(np.float32) for name in ("a", "b")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = onnxruntime.InferenceSession(model.SerializeToString(),
                                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        session = ortx.InferenceSession(model, providers=["OrtxEP", "CPUExecutionProvider"])
        for _ in range(3):
            (actual,) = session.run(None, feeds)
            assert actual.shape == expected.shape == (1, 96, 4, 4)
            np.testing.assert_array_equal(actual, expected)


def test_a_declared_output_shape_inference_cannot_give_is_kept():
    """Expand to a shape given as a graph input: onnx infers no output dims, so the declared [2, 3, 6] stays and
    the node runs on OrtxEP as before (only a declaration that contradicts the producer is dropped)."""
    from onnx import TensorProto, helper

    node = helper.make_node("Expand", ["x", "shape"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1]),
                                            helper.make_tensor_value_info("shape", TensorProto.INT64, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    feeds = {"x": np.arange(3, dtype=np.float32).reshape(3, 1), "shape": np.array([2, 1, 6], np.int64)}
    expected = onnxruntime.InferenceSession(model.SerializeToString(),
                                            providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    session = ortx.InferenceSession(model, providers=["OrtxEP", "CPUExecutionProvider"])
    (actual,) = session.run(None, feeds)
    np.testing.assert_array_equal(actual, expected)
    assert [row.provider for row in session.assignment] == ["OrtxEP"]
