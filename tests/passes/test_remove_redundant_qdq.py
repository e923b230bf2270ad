import numpy as np
import pytest

from ortx.passes.remove_redundant_qdq import remove_redundant_qdq
from tests.passes._helpers import feeds_for, from_text, op_types, run_ort, to_ir


def _model(second_scale: str = "0.05", second_zero: str = "128", extra_reader: bool = False) -> str:
    """X on a uint8 grid, then Reshape and Transpose each requantized the way quantizers write attention heads."""
    return f"""
    <ir_version: 10, opset_import: ["" : 17]>
    agraph (float[2,6,8] X) => (float[2,2,6,4] Y{", uint8[2,2,6,4] Yq" if extra_reader else ""}) {{
        s = Constant <value = float {{0.05}}> ()
        z = Constant <value = uint8 {{128}}> ()
        s2 = Constant <value = float {{{second_scale}}}> ()
        z2 = Constant <value = uint8 {{{second_zero}}}> ()
        shape = Constant <value = int64[4] {{2, 6, 2, 4}}> ()
        xq = QuantizeLinear (X, s, z)
        x = DequantizeLinear (xq, s, z)
        r = Reshape (x, shape)
        rq = QuantizeLinear (r, s, z)
        rd = DequantizeLinear (rq, s, z)
        t = Transpose <perm = [0, 2, 1, 3]> (rd)
        Yq = QuantizeLinear (t, s2, z2)
        td = DequantizeLinear (Yq, s2, z2)
        Y = Relu (td)
    }}"""


def test_pairs_after_data_movement_on_the_same_grid_are_removed_exactly():
    proto = from_text(_model())
    model = to_ir(proto)
    report = remove_redundant_qdq(model)
    assert report.counts == {"nodes_removed": 4, "pairs_moved": 0}
    assert [op for op in op_types(model) if op != "Constant"] == ["QuantizeLinear", "DequantizeLinear", "Reshape",
                                                                   "Transpose", "Relu"]
    feeds = feeds_for(proto)
    feeds["X"] = feeds["X"] * 5  # values beyond the grid's range saturate first: still exact after
    np.testing.assert_array_equal(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])
    assert not remove_redundant_qdq(model).modified


@pytest.mark.parametrize("scale, zero", [("0.1", "128"), ("0.05", "127")])
def test_another_grid_keeps_its_pair(scale, zero):
    model = to_ir(from_text(_model(scale, zero)))
    report = remove_redundant_qdq(model)
    assert report.counts == {"nodes_removed": 2, "pairs_moved": 0}  # only the Reshape's pair
    assert op_types(model).count("QuantizeLinear") == 2 and op_types(model).count("DequantizeLinear") == 2


def test_a_quantized_value_read_elsewhere_keeps_its_quantize():
    proto = from_text(_model(extra_reader=True))
    model = to_ir(proto)
    # Yq is a graph output: its Q stays
    assert remove_redundant_qdq(model).counts == {"nodes_removed": 3, "pairs_moved": 0}
    assert op_types(model).count("QuantizeLinear") == 2
    feeds = feeds_for(proto)
    for got, expected in zip(run_ort(model, feeds), run_ort(proto, feeds)):
        np.testing.assert_array_equal(got, expected)


def _merge_model(requantized: bool = True) -> str:
    """An int8 attention's output: quantized, then the heads merged (Transpose, Reshape), then requantized."""
    tail = "mq = QuantizeLinear (m, s, z)\n        md = DequantizeLinear (mq, s, z)\n        Y = Relu (md)" \
        if requantized else "Y = Relu (m)"
    return f"""
    <ir_version: 10, opset_import: ["" : 17]>
    agraph (float[2,2,6,4] X) => (float[2,6,8] Y) {{
        s = Constant <value = float {{0.05}}> ()
        z = Constant <value = uint8 {{128}}> ()
        shape = Constant <value = int64[3] {{2, 6, 8}}> ()
        a = Relu (X)
        aq = QuantizeLinear (a, s, z)
        ad = DequantizeLinear (aq, s, z)
        t = Transpose <perm = [0, 2, 1, 3]> (ad)
        m = Reshape (t, shape)
        {tail}
    }}"""


def test_a_pair_sinks_past_the_merge_into_the_requantization_it_duplicates():
    proto = from_text(_merge_model())
    model = to_ir(proto)
    report = remove_redundant_qdq(model)
    assert report.counts == {"nodes_removed": 2, "pairs_moved": 1}  # past Transpose and Reshape at once
    assert [op for op in op_types(model) if op != "Constant"] == ["Relu", "Transpose", "Reshape", "QuantizeLinear",
                                                                   "DequantizeLinear", "Relu"]
    feeds = feeds_for(proto)
    np.testing.assert_array_equal(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])
    assert not remove_redundant_qdq(model).modified


def test_a_pair_without_a_requantization_after_stays():
    model = to_ir(from_text(_merge_model(requantized=False)))
    before = op_types(model)
    assert not remove_redundant_qdq(model).modified and op_types(model) == before
