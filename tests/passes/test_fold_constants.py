import numpy as np
import onnx
import onnx_ir as ir

from ortx.passes.fold_constants import fold_constants
from ortx.passes.share_initializers import share_initializers
from tests.passes._helpers import feeds_for, from_text, op_types, run_ort, to_ir
from tests.tolerances import assert_close

# Constant nodes, a Shape of a static tensor, and arithmetic on constants: everything but Relu, Mul(relu, ...) and
# Reshape folds.
FOLDABLE = """
<ir_version: 10, opset_import: ["" : 17]>
agraph (float[2,3,4] X) => (float[2,12] Y) {
    twelve = Constant <value = int64[1] {12}> ()
    scale = Constant <value = float[1] {0.5}> ()
    scale2 = Mul (scale, scale)
    relu = Relu (X)
    scaled = Mul (relu, scale2)
    input_shape = Shape (scaled)
    zero = Constant <value = int64[1] {0}> ()
    one = Constant <value = int64[1] {1}> ()
    batch = Slice (input_shape, zero, one)
    flat = Concat <axis = 0> (batch, twelve)
    Y = Reshape (scaled, flat)
}
"""


def _foldable():
    return from_text(FOLDABLE)


def test_folds_constants_and_static_shape():
    proto = _foldable()
    model = to_ir(proto)
    report = fold_constants(model)
    assert op_types(model) == ["Relu", "Mul", "Reshape"]
    assert report.counts["constants_lifted"] == 4
    # Mul(scale, scale), Shape, Slice and Concat(batch, twelve).
    assert report.counts["nodes_folded"] == 4
    assert report.counts["folded_bytes"] > 0
    assert report.modified
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_size_limit_keeps_large_outputs():
    proto = from_text("""
    <ir_version: 10, opset_import: ["" : 17]>
    agraph (float[64] X) => (float[64] Y) {
        small = Constant <value = float[1] {2.0}> ()
        target = Constant <value = int64[1] {64}> ()
        big = Expand (small, target)
        Y = Add (X, big)
    }""")
    model = to_ir(proto)
    report = fold_constants(model, size_limit=16)
    assert op_types(model) == ["Expand", "Add"]
    assert report.counts["nodes_folded"] == 0
    assert any("Expand" in note and "size_limit" in note for note in report.notes)
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_does_not_fold_nodes_reading_inputs():
    proto = from_text("""
    <ir_version: 10, opset_import: ["" : 17]>
    agraph (float[2,3] X) => (float[2,3] Y) {
        Y = Relu (X)
    }""")
    model = to_ir(proto)
    report = fold_constants(model)
    assert op_types(model) == ["Relu"]
    assert not report.modified and report.counts == {"constants_lifted": 0, "nodes_folded": 0, "folded_bytes": 0}


def test_idempotent():
    model = to_ir(_foldable())
    assert fold_constants(model).modified
    second = fold_constants(model)
    assert not second.modified, second.counts


def _sequence_model(opset: int):
    """SplitToSequence with sizes from a graph input (not foldable), its length, and ConcatFromSequence of three
    inputs with new_axis: onnxscript's folder rewrites both into opset 13 forms (axes and sizes as inputs)."""
    return from_text(f"""
    <ir_version: 7, opset_import: ["" : {opset}]>
    agraph (float[6,3] X, int64[2] splits, float[2,3] A, float[2,3] B) => (int64 length, float[2,2,3] stacked) {{
        pieces = SplitToSequence (X, splits)
        length = SequenceLength (pieces)
        both = SequenceConstruct (A, B)
        stacked = ConcatFromSequence <axis = 0, new_axis = 1> (both)
    }}""")


def test_sequence_ops_keep_a_valid_model_below_opset_13():
    """At opset 12 the folder's rewrites would be invalid (Split-11 has no sizes input): the nodes stay, with a
    note each, and the model still checks and runs in ORT."""
    proto = _sequence_model(12)
    model = to_ir(proto)
    report = fold_constants(model)
    assert op_types(model) == ["SplitToSequence", "SequenceLength", "SequenceConstruct", "ConcatFromSequence"]
    assert sum("needs opset 13" in note for note in report.notes) == 2
    assert all(node.domain == "" for node in model.graph)
    folded = ir.serde.serialize_model(model)
    onnx.checker.check_model(folded, full_check=True)
    feeds = {"X": np.arange(18, dtype=np.float32).reshape(6, 3) * 0.5 - 3, "splits": np.array([2, 4], np.int64),
             "A": np.full((2, 3), 1.5, np.float32), "B": np.full((2, 3), -2.5, np.float32)}
    for got, want in zip(run_ort(folded, feeds), run_ort(proto, feeds)):
        np.testing.assert_array_equal(got, want)


def test_sequence_ops_are_rewritten_from_opset_13():
    model = to_ir(_sequence_model(13))
    report = fold_constants(model)
    assert "ConcatFromSequence" not in op_types(model)  # the folder's Unsqueeze + Concat, valid at 13
    assert not any("needs opset 13" in note for note in report.notes)
    onnx.checker.check_model(ir.serde.serialize_model(model), full_check=True)


def test_folded_transpose_of_a_weight_is_contiguous():
    """The folder returns a folded Transpose as a numpy view; the initializer it leaves must be a contiguous array
    (the level-2 pipeline's initializer sharing failed on the view: Transpose -> MatMul of any constant weight)."""
    proto = from_text("""
    <ir_version: 10, opset_import: ["" : 17]>
    agraph (float[2,3] X) => (float[2,4] Y) <float[4,3] w = {1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12.}> {
        wt = Transpose <perm = [1, 0]> (w)
        Y = MatMul (X, wt)
    }""")
    model = to_ir(proto)
    fold_constants(model)
    assert op_types(model) == ["MatMul"]
    folded = next(iter(model.graph)).inputs[1].const_value.numpy()
    assert folded.flags.c_contiguous and folded.shape == (3, 4)
    report = share_initializers(model)  # what failed on the view
    assert report.counts["initializers_shared"] == 0
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])
