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
    assert report.counts == {"biases_fused": 1, "residuals_fused": int(residual is not None)}
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
    assert report.counts == {"biases_fused": 1, "residuals_fused": 0}
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
