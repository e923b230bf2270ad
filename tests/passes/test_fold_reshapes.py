from ortx.passes.fold_reshapes import fold_reshapes
from ortx.passes.infer_shapes import infer_shapes
from tests.passes._helpers import feeds_for, from_text, op_types, run_ort, to_ir
from tests.tolerances import assert_close

CHAIN = """
<ir_version: 10, opset_import: ["" : 17]>
agraph (float[1,6,5,1] X) => (float[6,5] Y, float[2,15] Z) {
    axes = Constant <value = int64[1] {3}> ()
    a = Squeeze (X, axes)
    axes0 = Constant <value = int64[1] {0}> ()
    b = Unsqueeze (a, axes0)
    f = Flatten <axis = 2> (b)
    shape = Constant <value = int64[2] {6, -1}> ()
    r = Reshape (f, shape)
    Y = Relu (r)
    shape2 = Constant <value = int64[2] {2, 15}> ()
    Z = Reshape (b, shape2)
}
"""


def _shaped(text):
    proto = from_text(text)
    model = to_ir(proto)
    infer_shapes(model)
    return proto, model


def test_folds_chain_into_one_reshape_per_reader():
    proto, model = _shaped(CHAIN)
    report = fold_reshapes(model)
    # Squeeze -> Unsqueeze -> Flatten -> Reshape becomes one Reshape; Z's Reshape reads X directly too.
    assert [op for op in op_types(model) if op != "Constant"] == ["Reshape", "Relu", "Reshape"]
    assert all(node.inputs[0].name == "X" for node in model.graph if node.op_type == "Reshape")
    assert report.counts == {"chains_folded": 4, "nodes_removed": 3}
    feeds = feeds_for(proto)
    for actual, expected in zip(run_ort(model, feeds), run_ort(proto, feeds)):
        assert_close(actual, expected)


def test_dynamic_shape_and_single_op_are_left():
    proto, model = _shaped("""
    <ir_version: 10, opset_import: ["" : 17]>
    agraph (float[N,6,5] X) => (float[N,30] Y, float[30] Z) {
        f = Flatten <axis = 1> (X)
        shape = Constant <value = int64[2] {0, -1}> ()
        Y = Reshape (f, shape)
        one = Constant <value = float[1,6,5] {0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0}> ()
        shape1 = Constant <value = int64[1] {30}> ()
        Z = Reshape (one, shape1)
    }""")
    report = fold_reshapes(model)
    assert [op for op in op_types(model) if op != "Constant"] == ["Flatten", "Reshape", "Reshape"]
    assert not report.modified and "not static" in report.notes[0]


def test_idempotent():
    _, model = _shaped(CHAIN)
    assert fold_reshapes(model).modified
    assert not fold_reshapes(model).modified
