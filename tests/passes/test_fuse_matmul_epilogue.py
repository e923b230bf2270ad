import numpy as np
import pytest

from ortx.ep.compile_nodes import run_graph
from ortx.passes.fold_constants import fold_constants
from ortx.passes.fuse_matmul_epilogue import fuse_matmul_epilogue
from ortx.pipeline import ir_to_proto, name_nodes
from tests.passes._helpers import feeds_for, from_text, op_types, ortx_session, run_ort, to_ir
from tests.tolerances import assert_close

_WEIGHTS = ", ".join(f"{((index * 37) % 23 - 11) / 16:.4f}" for index in range(8 * 12))


def _model(*, bias: str = "Add (P, b)", residual: str | None = "Add (Z, B)", bias_shape: str = "12",
           weights_input: bool = False) -> str:
    """X[2, 5, 8] @ W[8, 12] (+ b) (+ Z): a transformer projection's MatMul with rank-3 activations."""
    bias_values = ", ".join(str(0.1 * index) for index in range(int(np.prod([int(d) for d in bias_shape.split(",")]))))
    weights = "" if weights_input else f"W = Constant <value = float[8,12] {{{_WEIGHTS}}}> ()"
    tail = f"Y = {residual}" if residual else "Y = Identity (B)"
    return f"""
    <ir_version: 10, opset_import: ["" : 17]>
    agraph (float[2,5,8] X, float[2,5,12] Z{", float[8,12] W" if weights_input else ""}) => (float[2,5,12] Y) {{
        {weights}
        b = Constant <value = float[{bias_shape}] {{{bias_values}}}> ()
        P = MatMul (X, W)
        B = {bias}
        {tail}
    }}"""


def _ir(text: str):
    """Constant nodes lifted to initializers first, as the pipeline does before OrtxEP's fusions."""
    proto = from_text(text)
    name_nodes(proto)
    model = to_ir(proto)
    fold_constants(model)
    return model


def _on_ortx_ep(model, feeds, **options):
    return run_graph(ir_to_proto(model), feeds, **options)[0]


@pytest.mark.parametrize("bias, residual", [("Add (P, b)", "Add (Z, B)"), ("Add (b, P)", "Add (B, Z)"),
                                            ("Add (P, b)", None)])
def test_bias_and_residual_fold_into_the_gemm_epilogue(bias, residual):
    proto = from_text(_model(bias=bias, residual=residual))
    model = _ir(_model(bias=bias, residual=residual))
    report = fuse_matmul_epilogue(model)
    assert report.counts == {"biases_fused": 1, "residuals_fused": int(residual is not None), "activations_fused": 0}
    assert [op for op in op_types(model) if op not in ("Constant", "Identity")] == ["FusedMatMul"]
    node = next(node for node in model.graph if node.op_type == "FusedMatMul")
    assert node.domain == "ai.ortx" and len(node.inputs) == (4 if residual else 3)
    assert len(node.metadata_props["ortx.fused_from"].split(",")) == (3 if residual else 2)
    feeds = feeds_for(proto)
    expected = run_ort(proto, feeds)[0]
    for threads in (1, 2):
        assert_close(_on_ortx_ep(model, feeds, num_threads=threads), expected)
    assert_close(_on_ortx_ep(model, feeds, use_reference_kernels=True), expected)
    assert not fuse_matmul_epilogue(model).modified


def test_a_broadcast_residual_leaves_its_add_and_a_bias_per_row_does_not_fuse():
    model = _ir(_model(residual="Add (B, b)"))  # b: a [12] row, not the output's shape
    report = fuse_matmul_epilogue(model)
    assert report.counts == {"biases_fused": 1, "residuals_fused": 0, "activations_fused": 0}
    assert [op for op in op_types(model) if op != "Constant"] == ["FusedMatMul", "Add"]
    model = _ir(_model(bias_shape="5,1"))
    report = fuse_matmul_epilogue(model)
    assert not report.modified and any("is not a constant float32 row" in note for note in report.notes)


def test_weights_that_are_not_constant_do_not_fuse():
    model = _ir(_model(weights_input=True))
    report = fuse_matmul_epilogue(model)
    assert not report.modified and "not a constant 2-D float32 initializer" in report.notes[0]


def test_sparse_weights_keep_bias_and_residual():
    """90% zero weights: the session's sparse choice (auto: from 80% zeros) runs the CSR kernel with the bias and the
    residual in its epilogue (one step)."""
    import onnx

    rng = np.random.default_rng(3)
    weights = rng.standard_normal((64, 48)).astype(np.float32) * (rng.random((64, 48)) < 0.1)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["X", "W"], ["P"]), onnx.helper.make_node("Add", ["P", "b"], ["B"]),
         onnx.helper.make_node("Add", ["Z", "B"], ["Y"])], "sparse_projection",
        [onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, 40, 64]),
         onnx.helper.make_tensor_value_info("Z", onnx.TensorProto.FLOAT, [1, 40, 48])],
        [onnx.helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [1, 40, 48])],
        [onnx.numpy_helper.from_array(weights, "W"),
         onnx.numpy_helper.from_array(rng.standard_normal(48).astype(np.float32), "b")])
    proto = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=10)
    feeds = feeds_for(proto)
    expected = run_ort(proto, feeds)[0]
    for threads in (1, 2):
        session = ortx_session(proto, threads)
        assert [(row.name, row.sparse, row.reason) for row in session.assignment] == [
            (name, name == "MatMul_0", "fused into node_FusedMatMul_0") for name in ("MatMul_0", "Add_1", "Add_2")]
        kernels = [step.kernel for item in session._compiled.values() for segment in item.plan.steps
                   for step in segment.program.steps]
        assert kernels == ["sparse_gemm_f32"]  # the residual in the CSR kernel's epilogue
        assert_close(session.run(None, feeds)[0], expected)


def _activation_model(op_type: str, *, residual: bool, domain: str = "", attributes=None, sparse: bool = False,
                      clip_bounds=None):
    """X[1, 40, 64] @ W[64, 48] + b (+ Z) -> activation: a transformer FFN's first projection and its Gelu."""
    import onnx

    rng = np.random.default_rng(5)
    weights = rng.standard_normal((64, 48)).astype(np.float32) / 8
    if sparse:
        weights *= rng.random((64, 48)) < 0.1
    nodes = [onnx.helper.make_node("MatMul", ["X", "W"], ["P"]), onnx.helper.make_node("Add", ["P", "b"], ["B"])]
    if residual:
        nodes.append(onnx.helper.make_node("Add", ["B", "Z"], ["S"]))
    extra = []
    initializers = [onnx.numpy_helper.from_array(weights, "W"),
                    onnx.numpy_helper.from_array(rng.standard_normal(48).astype(np.float32), "b")]
    if clip_bounds is not None:
        extra = ["lo", "hi"]
        initializers += [onnx.numpy_helper.from_array(np.float32(bound), name)
                         for bound, name in zip(clip_bounds, extra)]
    nodes.append(onnx.helper.make_node(op_type, ["S" if residual else "B", *extra], ["Y"], domain=domain,
                                       **(attributes or {})))
    inputs = [onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, 40, 64])]
    if residual:
        inputs.append(onnx.helper.make_tensor_value_info("Z", onnx.TensorProto.FLOAT, [1, 40, 48]))
    graph = onnx.helper.make_graph(nodes, "projection", inputs,
                                   [onnx.helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [1, 40, 48])],
                                   initializers)
    opsets = [onnx.helper.make_opsetid("", 20)] + ([onnx.helper.make_opsetid(domain, 1)] if domain else [])
    proto = onnx.helper.make_model(graph, opset_imports=opsets, ir_version=10)
    name_nodes(proto)
    return onnx.shape_inference.infer_shapes(proto)  # the fusion reads the product's static shape


def _kernels_of(session) -> list[str]:
    return [step.kernel for item in session._compiled.values() for segment in item.plan.steps
            for step in segment.program.steps]


ACTIVATION_CASES = [("Relu", "", {}, None, ["gemm_f32"]), ("LeakyRelu", "", {"alpha": 0.3}, None, ["gemm_f32"]),
                    ("Clip", "", {}, (-0.5, 0.7), ["gemm_f32"]), ("Sigmoid", "", {}, None, ["gemm_f32", "unary_f32"]),
                    ("Tanh", "", {}, None, ["gemm_f32", "unary_f32"]), ("Gelu", "", {}, None, ["gemm_f32", "unary_f32"]),
                    ("Gelu", "com.microsoft", {}, None, ["gemm_f32", "unary_f32"])]


@pytest.mark.parametrize("residual", [False, True], ids=["bias", "bias+residual"])
@pytest.mark.parametrize("op_type, domain, attributes, clip_bounds, kernels", ACTIVATION_CASES,
                         ids=[f"{case[1]}{'.' if case[1] else ''}{case[0]}" for case in ACTIVATION_CASES])
def test_the_activation_after_the_epilogue_folds_in(op_type, domain, attributes, clip_bounds, kernels, residual):
    """The template's activations run in the dense GEMM's epilogue; the exp-based ones (Sigmoid, Tanh, Gelu) as an
    in-place unary step after it, so the GEMM keeps its tuning records."""
    proto = _activation_model(op_type, residual=residual, domain=domain, attributes=attributes,
                              clip_bounds=clip_bounds)
    model = to_ir(proto)
    report = fuse_matmul_epilogue(model)
    assert report.counts == {"biases_fused": 1, "residuals_fused": int(residual), "activations_fused": 1}
    node = next(node for node in model.graph if node.op_type == "FusedMatMul")
    assert node.attributes.get_string("activation") == op_type
    assert len(node.metadata_props["ortx.fused_from"].split(",")) == 3 + int(residual)
    params = list(node.attributes["activation_params"].value) if "activation_params" in node.attributes else []
    assert params == pytest.approx({"LeakyRelu": [0.3], "Clip": [-0.5, 0.7]}.get(op_type, []))
    feeds = feeds_for(proto)
    expected = run_ort(proto, feeds)[0]
    for threads in (1, 2):
        session = ortx_session(proto, threads)
        assert _kernels_of(session) == kernels
        assert_close(session.run(None, feeds)[0], expected)
    assert_close(_on_ortx_ep(model, feeds, use_reference_kernels=True), expected)


@pytest.mark.parametrize("op_type, domain, attributes, clip_bounds", [case[:4] for case in ACTIVATION_CASES],
                         ids=[f"{case[1]}{'.' if case[1] else ''}{case[0]}" for case in ACTIVATION_CASES])
def test_under_bf16_every_activation_runs_in_the_gemm_epilogue(op_type, domain, attributes, clip_bounds):
    """No generated GEMM replaces gemm_bf16, so its epilogue takes the exp-based activations too (one pass over the
    output fewer); the result within bf16's bar of ORT fp32."""
    import onnxruntime

    import ortx
    from tests.tolerances import BF16_MODEL_MIN_COSINE

    proto = _activation_model(op_type, residual=True, domain=domain, attributes=attributes, clip_bounds=clip_bounds)
    feeds = feeds_for(proto)
    expected = run_ort(proto, feeds)[0]
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    session = ortx.InferenceSession(proto.SerializeToString(), options, providers=["OrtxEP", "CPUExecutionProvider"],
                                    provider_options=[{"tuning": "off", "precision": "bf16",
                                                       "bf16_compute": "always"}, {}])
    assert _kernels_of(session) == ["gemm_bf16"]
    actual = session.run(None, feeds)[0].ravel().astype(np.float64)
    cosine = actual @ expected.ravel() / (np.linalg.norm(actual) * np.linalg.norm(expected))
    assert cosine >= BF16_MODEL_MIN_COSINE, cosine


def test_a_tanh_gelu_is_left_to_its_own_step():
    proto = _activation_model("Gelu", residual=False, attributes={"approximate": "tanh"})
    model = to_ir(proto)
    report = fuse_matmul_epilogue(model)
    assert report.counts["activations_fused"] == 0 and report.counts["biases_fused"] == 1
    assert [op for op in op_types(model)] == ["FusedMatMul", "Gelu"]


@pytest.mark.parametrize("residual", [False, True], ids=["bias", "bias+residual"])
def test_sparse_weights_run_the_gelu_in_the_csr_epilogue(residual):
    """90% zero weights: one sparse_gemm_f32 step adds the bias (and the residual) and applies the Gelu."""
    proto = _activation_model("Gelu", residual=residual, sparse=True)
    feeds = feeds_for(proto)
    expected = run_ort(proto, feeds)[0]
    for threads in (1, 2):
        session = ortx_session(proto, threads)
        assert _kernels_of(session) == ["sparse_gemm_f32"]
        assert [row.sparse for row in session.assignment if row.op_type == "MatMul"] == [True]
        assert_close(session.run(None, feeds)[0], expected)
