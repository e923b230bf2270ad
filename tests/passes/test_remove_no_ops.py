import numpy as np
from onnx import numpy_helper

from ortx.passes.infer_shapes import infer_shapes
from ortx.passes.remove_no_ops import remove_no_ops
from tests.passes._helpers import feeds_for, from_text, op_types, run_ort, to_ir
from tests.tolerances import assert_close

# One of each case; the shapes ([2,5,3]: no dim a power of two) are static so every check can decide.
NO_OPS = """
<ir_version: 10, opset_import: ["" : 17]>
agraph (float[2,5,3] X) => (float[5,3,2] Y) {
    a = Cast <to = 1> (X)
    shape = Constant <value = int64[3] {2, -1, 3}> ()
    b = Reshape (a, shape)
    c = Transpose <perm = [0, 1, 2]> (b)
    starts = Constant <value = int64[2] {0, -100}> ()
    ends = Constant <value = int64[2] {5, 1000}> ()
    axes = Constant <value = int64[2] {1, 2}> ()
    d = Slice (c, starts, ends, axes)
    pads = Constant <value = int64[6] {0, 0, 0, 0, 0, 0}> ()
    e = Pad (d, pads)
    expand_shape = Constant <value = int64[2] {5, 1}> ()
    f = Expand (e, expand_shape)
    g = Concat <axis = 0> (f)
    h = Relu (g)
    t1 = Transpose <perm = [1, 0, 2]> (h)
    t2 = Transpose <perm = [2, 0, 1]> (t1)
    u1 = Transpose <perm = [1, 2, 0]> (t2)
    Y = Transpose <perm = [0, 2, 1]> (u1)
}
"""


def _shaped(text):
    proto = from_text(text)
    model = to_ir(proto)
    infer_shapes(model)
    return proto, model


def test_removes_every_case_and_composes_transposes():
    proto, model = _shaped(NO_OPS)
    report = remove_no_ops(model)
    # The Constants stay (their readers are gone; eliminate_dead_code removes them), the four Transposes compose.
    assert [op for op in op_types(model) if op != "Constant"] == ["Relu", "Transpose"]
    assert report.counts == {"nodes_removed": 10, "casts_removed": 1, "reshapes_removed": 1, "transposes_removed": 1,
                             "slices_removed": 1, "pads_removed": 1, "expands_removed": 1, "concats_removed": 1,
                             "transposes_composed": 3}
    transpose = [node for node in model.graph if node.op_type == "Transpose"][0]
    assert list(transpose.attributes.get_ints("perm")) == [1, 2, 0] and transpose.outputs[0].name == "Y"
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_keeps_nodes_that_do_something():
    proto, model = _shaped("""
    <ir_version: 10, opset_import: ["" : 17]>
    agraph (float[2,5,3] X, int64[3] S) => (float[3,5,2] Y, float[10,3] Z, float[2,4,3] W, float[2,5,3] V) {
        a = Cast <to = 10> (X)
        b = Cast <to = 1> (a)
        Y = Transpose <perm = [2, 1, 0]> (b)
        shape = Constant <value = int64[2] {10, 3}> ()
        Z = Reshape (X, shape)
        starts = Constant <value = int64[1] {1}> ()
        ends = Constant <value = int64[1] {5}> ()
        axes = Constant <value = int64[1] {1}> ()
        W = Slice (X, starts, ends, axes)
        V = Reshape (X, S)
    }""")
    report = remove_no_ops(model)
    assert [op for op in op_types(model) if op != "Constant"] == ["Cast", "Cast", "Transpose", "Reshape", "Slice",
                                                                  "Reshape"]
    assert not report.modified


def test_identity_transpose_from_input_to_output_is_kept_with_a_note():
    proto, model = _shaped("""
    <ir_version: 10, opset_import: ["" : 17]>
    agraph (float[2,5] X) => (float[2,5] Y) {
        Y = Transpose <perm = [0, 1]> (X)
    }""")
    report = remove_no_ops(model)
    assert op_types(model) == ["Transpose"] and not report.modified
    assert "graph input" in report.notes[0]


def test_transpose_pair_with_shared_inner_is_composed_only_when_it_cancels():
    proto, model = _shaped("""
    <ir_version: 10, opset_import: ["" : 17]>
    agraph (float[2,5,3] X) => (float[2,5,3] Y, float[5,2,3] Z, float[3,2,5] W) {
        Z = Transpose <perm = [1, 0, 2]> (X)
        t = Transpose <perm = [1, 0, 2]> (Z)
        Y = Relu (t)
        W = Transpose <perm = [2, 0, 1]> (Z)
    }""")
    report = remove_no_ops(model)
    assert op_types(model) == ["Transpose", "Relu", "Transpose"]
    assert report.counts["nodes_removed"] == 1
    feeds = feeds_for(proto)
    for actual, expected in zip(run_ort(model, feeds), run_ort(proto, feeds)):
        assert_close(actual, expected)


def test_idempotent():
    _, model = _shaped(NO_OPS)
    assert remove_no_ops(model).modified
    assert not remove_no_ops(model).modified
