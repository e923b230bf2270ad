from ortx.passes.replace_sum_with_add import replace_sum_with_add
from tests.passes._helpers import assert_same_outputs, from_text, op_types, to_ir

# A residual block as an opset 6-era exporter writes it: Conv, then Sum with the shortcut, then Relu; and a Sum of
# three inputs, which stays.
RESIDUAL_SUM = """
<ir_version: 10, opset_import: ["" : 13]>
agraph (float[1,4,6,6] X) => (float[1,4,6,6] Y, float[1,4,6,6] Z)
<float[4,4,1,1] w = {0.5, -0.25, 0.125, 1.0, 0.75, 0.5, -1.0, 0.25, 0.1, 0.2, 0.3, 0.4, -0.4, -0.3, -0.2, -0.1}> {
    conv = Conv (X, w)
    summed = Sum (conv, X)
    Y = Relu (summed)
    Z = Sum (conv, X, summed)
}
"""


def test_two_input_sum_becomes_add_and_three_stays():
    proto = from_text(RESIDUAL_SUM)
    model = to_ir(proto)
    report = replace_sum_with_add(model)
    assert op_types(model) == ["Conv", "Add", "Relu", "Sum"]
    assert report.counts == {"sums_replaced": 1}
    assert report.notes == [f"{list(model.graph)[3].name} (Sum): not replaced: 3 inputs, not 2"]
    assert_same_outputs(model, proto)


def test_a_sum_that_is_a_graph_output_keeps_its_name():
    proto = from_text("""
    <ir_version: 10, opset_import: ["" : 13]>
    agraph (float[3] A, float[3] B) => (float[3] S) {
        S = Sum (A, B)
    }""")
    model = to_ir(proto)
    replace_sum_with_add(model)
    assert op_types(model) == ["Add"] and [value.name for value in model.graph.outputs] == ["S"]
    assert_same_outputs(model, proto)


def test_idempotent():
    model = to_ir(from_text(RESIDUAL_SUM))
    assert replace_sum_with_add(model).modified
    assert not replace_sum_with_add(model).modified
