from ortx.passes.eliminate_dead_code import eliminate_dead_code
from tests.passes._helpers import feeds_for, from_text, op_types, run_ort, to_ir
from tests.tolerances import assert_close

DEAD = """
<ir_version: 10, opset_import: ["" : 17]>
agraph (float[2,8] X) => (float[2,8] Y) {
    a = Identity (X)
    b = Dropout (a)
    c = Relu (b)
    unused = Sigmoid (c)
    unused2 = Tanh (unused)
    d = Mul (c, c)
    Y = Identity (d)
}
"""


def test_removes_identity_dropout_and_dead_nodes():
    proto = from_text(DEAD)
    # An initializer nobody reads.
    proto.graph.initializer.append(__import__("onnx").numpy_helper.from_array(
        __import__("numpy").ones((4, 4), "float32"), "unused_weight"))
    model = to_ir(proto)
    report = eliminate_dead_code(model)
    assert op_types(model) == ["Relu", "Mul"]
    assert report.counts == {"identities_removed": 2, "dropouts_removed": 1, "nodes_removed": 2,
                             "initializers_removed": 1, "bytes_saved": 64}
    # The graph output keeps its name: Mul now writes Y directly.
    assert [value.name for value in model.graph.outputs] == ["Y"]
    assert model.graph.outputs[0].producer().op_type == "Mul"
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


def test_keeps_identity_between_input_and_output_and_training_dropout():
    proto = from_text("""
    <ir_version: 10, opset_import: ["" : 17]>
    agraph (float[2,8] X, bool T) => (float[2,8] Y, float[2,8] Z) {
        Y = Identity (X)
        ratio = Constant <value = float {0.5}> ()
        Z = Dropout (X, ratio, T)
    }""")
    model = to_ir(proto)
    report = eliminate_dead_code(model)
    assert op_types(model) == ["Identity", "Constant", "Dropout"]
    assert not report.modified
    assert any("Identity" in note and "graph input" in note for note in report.notes)
    assert any("Dropout" in note and "training_mode" in note for note in report.notes)


def test_identity_to_output_when_source_is_also_read():
    proto = from_text("""
    <ir_version: 10, opset_import: ["" : 17]>
    agraph (float[2,8] X) => (float[2,8] Y, float[2,8] Z) {
        r = Relu (X)
        Y = Identity (r)
        Z = Sigmoid (r)
    }""")
    model = to_ir(proto)
    eliminate_dead_code(model)
    assert op_types(model) == ["Relu", "Sigmoid"]
    assert [value.name for value in model.graph.outputs] == ["Y", "Z"]
    feeds = feeds_for(proto)
    for actual, expected in zip(run_ort(model, feeds), run_ort(proto, feeds)):
        assert_close(actual, expected)


def test_idempotent():
    model = to_ir(from_text(DEAD))
    assert eliminate_dead_code(model).modified
    assert not eliminate_dead_code(model).modified
