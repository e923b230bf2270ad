import pytest

from ortx.passes.fuse_pad import fuse_pad
from ortx.passes.infer_shapes import infer_shapes
from tests.passes._helpers import feeds_for, from_text, op_types, run_ort, to_ir
from tests.tolerances import assert_close

W = "w = Constant <value = float[4,3,3,3] {" + ", ".join(str((i % 7) / 7 - 0.4) for i in range(108)) + "}> ()"


def _model(consumer: str, *, pads: str = "0, 0, 1, 2, 0, 0, 2, 1", value: str = "", mode: str = "constant",
           extra: str = "") -> str:
    value_line = f"v = Constant <value = float {{{value}}}> ()" if value else ""
    pad_inputs = "X, pads, v" if value else "X, pads"
    return f"""
    <ir_version: 10, opset_import: ["" : 17]>
    agraph (float[1,3,9,7] X) => (float[1,4,9,9] Y) {{
        pads = Constant <value = int64[8] {{{pads}}}> ()
        {value_line}
        p = Pad <mode = "{mode}"> ({pad_inputs})
        {W}
        {extra}
        {consumer}
    }}"""


CONV = 'Y = Conv <kernel_shape = [3, 3], pads = [1, 0, 1, 0]> (p, w)'
AVERAGE = 'c = AveragePool <kernel_shape = [3, 3], strides = [1, 1]> (p)\n Y = Conv <kernel_shape = [1, 1]> (c, w1)'
MAX = 'c = MaxPool <kernel_shape = [3, 3]> (p)\n Y = Conv <kernel_shape = [1, 1]> (c, w1)'
W1 = "w1 = Constant <value = float[4,3,1,1] {1, 0.5, -1, 2, 1, 0.2, 0.3, -0.7, 1, 0.1, 0.4, 0.9}> ()"


def _run(text):
    proto = from_text(text)
    model = to_ir(proto)
    infer_shapes(model)
    return proto, model, fuse_pad(model)


@pytest.mark.parametrize("consumer,value,pads", [
    (CONV, "", "0, 0, 1, 2, 0, 0, 2, 1"),
    (AVERAGE, "0.0", "0, 0, 1, 2, 0, 0, 1, 1"),
    (MAX, "-inf", "0, 0, 1, 2, 0, 0, 1, 1"),
])
def test_fuses_into_consumer(consumer, value, pads):
    text = _model(consumer, value=value, pads=pads, extra=W1 if consumer != CONV else "")
    if consumer != CONV:  # pooled [1,3,8,9] -> 1x1 conv -> [1,4,8,9]
        text = text.replace("float[1,4,9,9] Y", "float[1,4,8,9] Y")
    else:  # (9 + 1 + 2 + 1 + 1 - 3 + 1, 7 + 2 + 1 - 3 + 1) = (12, 8)
        text = text.replace("float[1,4,9,9] Y", "float[1,4,12,8] Y")
    proto, model, report = _run(text)
    assert "Pad" not in op_types(model) and report.counts == {"pads_fused": 1}
    feeds = feeds_for(proto)
    assert_close(run_ort(model, feeds)[0], run_ort(proto, feeds)[0])


@pytest.mark.parametrize("mode,value,pads,reason", [
    ("reflect", "", "0, 0, 1, 1, 0, 0, 1, 1", "mode reflect"),
    ("constant", "0.5", "0, 0, 1, 1, 0, 0, 1, 1", "pad value 0.5"),
    ("constant", "", "0, 1, 1, 1, 0, 0, 1, 1", "channel dims are padded"),
])
def test_does_not_fire(mode, value, pads, reason):
    text = _model(CONV, value=value, pads=pads, mode=mode).replace("float[1,4,9,9] Y", "float[1,4,?,?] Y")
    proto, model, report = _run(text)
    assert "Pad" in op_types(model) and not report.modified
    assert any(reason in note for note in report.notes), report.notes


def test_max_pool_with_zero_pad_is_not_fused():
    text = _model(MAX, value="0.0", pads="0, 0, 1, 2, 0, 0, 1, 1", extra=W1).replace("9,9] Y", "8,9] Y")
    proto, model, report = _run(text)
    assert "Pad" in op_types(model) and "pad value 0.0 is not -inf" in report.notes[0]


def test_idempotent():
    text = _model(CONV).replace("float[1,4,9,9] Y", "float[1,4,12,8] Y")
    _, model, report = _run(text)
    assert report.modified and not fuse_pad(model).modified
