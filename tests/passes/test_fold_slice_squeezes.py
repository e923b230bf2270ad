from ortx.passes.fold_slice_squeezes import fold_slice_squeezes
from ortx.passes.infer_shapes import infer_shapes
from tests.passes._helpers import feeds_for, from_text, op_types, run_ort, to_ir
from tests.tolerances import assert_close

QKV = """
<ir_version: 10, opset_import: ["" : 17]>
agraph (float[3,2,5] X) => (float[2,5] Q, float[2,5] K, float[2,5] V) {
    zero = Constant <value = int64[1] {0}> ()
    one = Constant <value = int64[1] {1}> ()
    two = Constant <value = int64[1] {2}> ()
    last = Constant <value = int64[1] {-1}> ()
    big = Constant <value = int64[1] {1000}> ()
    q = Slice (X, zero, one, zero)
    Q = Squeeze (q, zero)
    k = Slice (X, one, two, zero)
    K = Squeeze (k, zero)
    v = Slice (X, last, big, zero)
    V = Squeeze (v, zero)
}
"""


def _run(text):
    proto = from_text(text)
    model = to_ir(proto)
    infer_shapes(model)
    return proto, model, fold_slice_squeezes(model)


def test_one_element_slices_become_gathers():
    proto, model, report = _run(QKV)
    assert [op for op in op_types(model) if op != "Constant"] == ["Gather"] * 3
    assert report.counts == {"nodes_removed": 3}
    assert [value.name for value in model.graph.outputs] == ["Q", "K", "V"]
    feeds = feeds_for(proto)
    for actual, expected in zip(run_ort(model, feeds), run_ort(proto, feeds)):
        assert_close(actual, expected)


def test_does_not_fire_on_a_two_element_slice_or_a_shared_slice():
    two_elements = QKV.replace("q = Slice (X, zero, one, zero)\n    Q = Squeeze (q, zero)",
                               "q = Slice (X, zero, two, zero)\n    Q = ReduceSum <keepdims = 0> (q, zero)")
    _, model, report = _run(two_elements)
    assert op_types(model).count("Slice") == 1 and report.counts == {"nodes_removed": 2}
    shared = QKV.replace("(float[2,5] Q,", "(float[1,2,5] q, float[2,5] Q,")
    proto, model, report = _run(shared)
    assert op_types(model).count("Slice") == 1 and any("other readers" in note for note in report.notes)
    feeds = feeds_for(proto)
    for actual, expected in zip(run_ort(model, feeds), run_ort(proto, feeds)):
        assert_close(actual, expected)


def test_idempotent():
    _, model, report = _run(QKV)
    assert report.modified and not fold_slice_squeezes(model).modified
