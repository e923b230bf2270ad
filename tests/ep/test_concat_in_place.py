"""Concat in place (ortx.ep.lowering.layout.concat_in_place): a Concat's inputs made in the segment are planned inside
its output's bytes, so the Concat copies nothing for them; inputs it cannot place (segment inputs, constants, an
input listed twice, strided slices of a batched output) are still copied. Results must be
the copying program's bits and ONNX Runtime's values, including when a placed input is read again after the
Concat and when in-place reuse would otherwise have merged a placed tensor with another.
"""
from __future__ import annotations

import collections

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import ortx
import ortx.ep.compile_nodes
from ortx.ep.runtime import ClaimedStep
from ortx.model_io import to_ort_bytes

PROVIDERS = ["OrtxEP", "CPUExecutionProvider"]


def _model(batch: int = 1, *, concat_is_output: bool = False, with_input_part: bool = False,
           with_constant_part: bool = False, repeated_part: bool = False, reshaped_part: bool = False):
    """x -> Relu -> a; x -> Conv 1x1 -> b; a * 2 -> c; Concat(a?, b, c, ...) -> Conv 3x3 -> y, plus Add(b, 1) -> z
    read after the Concat (b's bytes must survive until then)."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8, 1, 1)).astype(np.float32), "w1"),
             numpy_helper.from_array(np.float32(2.0).reshape(()), "two"),
             numpy_helper.from_array(np.float32(1.0).reshape(()), "one"),
             numpy_helper.from_array(rng.standard_normal((1, 8, 6, 6)).astype(np.float32)[:batch].repeat(batch, 0)
                                     if batch > 1 else rng.standard_normal((1, 8, 6, 6)).astype(np.float32), "k")]
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Conv", ["x", "w1"], ["b"]),
             helper.make_node("Mul", ["a", "two"], ["c"])]
    parts = ["b", "c", "a"]
    if with_input_part:
        parts.append("x")
    if with_constant_part:
        parts.append("k")
    if repeated_part:
        parts.append("c")
    if reshaped_part:
        nodes.append(helper.make_node("Reshape", ["c", "shape"], ["c2"]))
        inits.append(numpy_helper.from_array(np.array([batch, 8, 6, 6], np.int64), "shape"))
        parts.append("c2")
    channels = 16 + 8 + 8 + 8 * (with_input_part + with_constant_part + repeated_part + reshaped_part)
    nodes.append(helper.make_node("Concat", parts, ["cat"], axis=1))
    inits.append(numpy_helper.from_array(rng.standard_normal((4, channels, 3, 3)).astype(np.float32) * 0.1, "w2"))
    nodes += [helper.make_node("Conv", ["cat", "w2"], ["y"], pads=[1, 1, 1, 1]),
              helper.make_node("Add", ["b", "one"], ["z"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 6, 6]),
               helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, 16, 6, 6])]
    if concat_is_output:
        outputs.append(helper.make_tensor_value_info("cat", TensorProto.FLOAT, [batch, channels, 6, 6]))
    graph = helper.make_graph(nodes, "concat", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              [batch, 8, 6, 6])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _session(model, precision="fp32"):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    return ortx.InferenceSession(model, options, providers=PROVIDERS,
                                 provider_options=[{"precision": precision, "tuning": "off"}, {}])


def _copies(session) -> int:
    counts = collections.Counter(step.kernel for compiled in session._compiled.values()
                                 for claimed in compiled.plan.steps if isinstance(claimed, ClaimedStep)
                                 for step in claimed.program.steps)
    return counts["copy_rows"]


@pytest.mark.parametrize("case,copies", [
    ({}, 0),                                 # three parts made in the segment: nothing copied
    ({"with_input_part": True}, 1),          # the segment input is copied
    ({"with_constant_part": True}, 1),       # a constant is copied
    ({"repeated_part": True}, 2),            # c twice: both copied
    ({"reshaped_part": True}, 2),            # the identity Reshape is folded away: c twice, both copied
    ({"concat_is_output": True}, 3),         # the Concat writes a segment output: every part copied
    ({"batch": 2}, 3),                       # batch 2: the parts are strided in the output, copied
])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_concat_parts_are_written_in_place_and_results_do_not_change(case, copies, precision, monkeypatch):
    model = _model(**case)
    batch = case.get("batch", 1)
    feeds = {"x": np.random.default_rng(2).standard_normal((batch, 8, 6, 6)).astype(np.float32)}
    session = _session(model, precision)
    placed = session.run(None, feeds)
    assert _copies(session) == copies
    monkeypatch.setattr(ortx.ep.compile_nodes, "concat_in_place", lambda *args: {})
    copying = _session(model, precision)
    for got, expected in zip(placed, copying.run(None, feeds)):
        np.testing.assert_array_equal(got, expected)
    if precision == "fp32":
        reference = onnxruntime.InferenceSession(to_ort_bytes(model), providers=["CPUExecutionProvider"])
        for got, expected in zip(placed, reference.run(None, feeds)):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_placed_parts_share_the_concat_outputs_bytes_in_the_memory_plan():
    session = _session(_model())
    compiled = next(iter(session._compiled.values()))
    claimed = next(step for step in compiled.plan.steps if isinstance(step, ClaimedStep))
    tensors = {t.label: t for t in claimed.program.tensors}
    whole = tensors["cat"]
    offset = whole.offset
    for name, nbytes in (("b", 16 * 36 * 4), ("c", 8 * 36 * 4), ("a", 8 * 36 * 4)):
        assert tensors[name].offset == offset, name
        offset += nbytes
    assert offset == whole.offset + whole.nbytes
    # the memory accounting sees one buffer: the parts name their Concat and are folded into its lifetime
    assert {tensors[name].within for name in ("b", "c", "a")} == {"cat"} and whole.within == ""
    assert len(claimed.program.buffer_lifetimes) == len(claimed.program.tensors) - 3
    folded = max(item.last for item in claimed.program.buffer_lifetimes if item.nbytes == whole.nbytes)
    assert folded >= tensors["b"].last  # b is read again after the Concat (the Add)
