"""Kernel errors on runtime data: Gather whose indices are a graph input or computed, out of range.

onnxruntime raises InvalidArgument ("indices element out of data bounds, idx=I must be within the inclusive range
[-n,n-1]"); OrtxEP raises the same, naming the node, from the step interpreter and from JIT'd segments, and the
steps after the failing one do not run. Negative indices in range are valid ONNX (-1 is the last).
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper, numpy_helper
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

import ortx
from ortx import _kernels
from ortx.codegen import jit
from ortx.config import Options
from ortx.ep.compile_nodes import compile_graph, infer_shapes
from ortx.model_io import to_ort_bytes

ROWS, COLUMNS = 5, 37  # 37: not a multiple of any vector width


def gather_model(*, axis: int = 0, index_dtype=np.int64, computed: bool = False) -> onnx.ModelProto:
    """x[5, 37] -> Gather(x, indices) -> Relu -> Add(x-row-sum-like constant): the Gather sits mid-segment.
    computed=True: the indices are `i + 1 - 1` (two int Adds), not the graph input itself."""
    index_type = helper.np_dtype_to_tensor_dtype(np.dtype(index_dtype))
    nodes, indices = [], "i"
    if computed:
        nodes += [helper.make_node("Add", ["i", "one"], ["i_plus"], name="plus_one"),
                  helper.make_node("Sub", ["i_plus", "one"], ["i_computed"], name="minus_one")]
        indices = "i_computed"
    nodes += [helper.make_node("Gather", ["x", indices], ["g"], axis=axis, name="gather_rows"),
              helper.make_node("Relu", ["g"], ["r"], name="relu"),
              helper.make_node("Add", ["r", "bias"], ["y"], name="add_bias")]
    gathered = [4, COLUMNS] if axis == 0 else [ROWS, 4]
    graph = helper.make_graph(
        nodes, "gather_runtime_indices",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [ROWS, COLUMNS]),
         helper.make_tensor_value_info("i", index_type, [4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, gathered)],
        [numpy_helper.from_array(np.full(gathered[-1], 0.25, np.float32), "bias")]
        + ([numpy_helper.from_array(np.array(1, index_dtype), "one")] if computed else []))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model


def _x() -> np.ndarray:
    return np.random.default_rng(3).uniform(-1, 1, (ROWS, COLUMNS)).astype(np.float32) + 0.01


def _sessions(model, jit_option: str, reference: bool = False):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    ort = onnxruntime.InferenceSession(to_ort_bytes(model), options, providers=["CPUExecutionProvider"])
    ours = ortx.InferenceSession(model, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                 provider_options=[{"jit": jit_option, "tuning": "off",
                                                    "reference_kernels": str(reference)}, {}])
    assert {row.op_type for row in ours.assignment if row.provider == "OrtxEP"} >= {"Gather", "Relu"}
    return ort, ours


def _ort_message(error: Exception) -> str:
    """ORT's own text for the fault, from 'indices element' to the closing bracket."""
    text = str(error)
    start = text.index("indices element")
    return text[start:text.index("]", start) + 1]


@pytest.mark.parametrize("jit_option", ["on", "off"])
@pytest.mark.parametrize("axis, index_dtype, computed", [(0, np.int64, False), (1, np.int32, False),
                                                        (0, np.int64, True)])
def test_out_of_range_indices_raise_like_onnxruntime(jit_option, axis, index_dtype, computed):
    model = gather_model(axis=axis, index_dtype=index_dtype, computed=computed)
    ort, ours = _sessions(model, jit_option)
    dim = (ROWS, COLUMNS)[axis]
    x = _x()
    valid = np.array([0, -1, dim - 1, -dim], index_dtype)  # negatives in range: -1 is the last, -dim the first
    np.testing.assert_array_equal(ours.run(None, {"x": x, "i": valid})[0], ort.run(None, {"x": x, "i": valid})[0])
    for bad, position in (([1, dim, 0, 2], 1), ([0, 1, 2, -dim - 1], 3), ([-dim - 7, dim + 100, 0, 0], 0)):
        feeds = {"x": x, "i": np.array(bad, index_dtype)}
        with pytest.raises(InvalidArgument) as expected:
            ort.run(None, feeds)
        with pytest.raises(InvalidArgument) as raised:
            ours.run(None, feeds)
        message = str(raised.value)
        assert _ort_message(raised.value) == _ort_message(expected.value)
        assert f"idx={bad[position]} must be within the inclusive range [-{dim},{dim - 1}]" in message
        assert "Gather node. Name:'gather_rows'" in message and f"position {position} of the indices" in message
    # the failed runs left nothing behind: the next good run is right
    np.testing.assert_array_equal(ours.run(None, {"x": x, "i": valid})[0], ort.run(None, {"x": x, "i": valid})[0])


def test_reference_kernels_report_the_same_error():
    ort, ours = _sessions(gather_model(), "off", reference=True)
    x = _x()
    with pytest.raises(InvalidArgument, match=r"idx=5 must be within the inclusive range \[-5,4\]"):
        ours.run(None, {"x": x, "i": np.array([0, 5, 6, 1])})
    valid = {"x": x, "i": np.array([4, -4, 0, -1])}
    np.testing.assert_array_equal(ours.run(None, valid)[0], ort.run(None, valid)[0])


@pytest.mark.parametrize("native", [False, True])
def test_steps_after_the_failing_step_do_not_run(native, tmp_path):
    """The interpreter and the JIT'd segment stop after the Gather: the output (written by the last step) keeps its
    sentinel, and the error names step 0."""
    compiled = compile_graph(infer_shapes(gather_model()).graph, num_threads=2)
    assert [step.kernel for step in compiled.steps][0] == "gather"
    assert compiled.steps[0].buffers[-1][0] == 0  # the status record is in the arena
    x = _x()
    indices = np.array([0, 1, 9, 2], np.int64)
    y = np.full((4, COLUMNS), -7.0, np.float32)
    externals = np.array([a.__array_interface__["data"][0] for a in (x, indices, y)], np.uint64)
    arena = np.empty(compiled.arena_bytes, np.uint8)
    with pytest.raises(_kernels.KernelError) as raised:
        if native:
            built = jit.jit_compile(compiled, Options(cache_dir=tmp_path))
            assert built.native is not None
            built.program.run_native(built.native.address, built.native.kernel_table(False), arena, externals, 2)
        else:
            compiled.program.run(arena, externals, 2, False)
    error = raised.value
    assert (error.step, error.code, error.value, error.position, error.bound) == (
        0, _kernels.STATUS_INDEX_OUT_OF_RANGE, 9, 2, ROWS)
    assert (y == -7.0).all()


@pytest.mark.parametrize("use_ref", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_gather_kernel_zeroes_its_output_on_error(use_ref, threads):
    """The kernel ABI directly (a big enough gather to split over threads): error -> KernelError from `call`, the
    first bad position recorded, the output all zeros (defined for any step that would read it)."""
    data = np.random.default_rng(5).uniform(1, 2, (300, 131)).astype(np.float32)
    indices = np.array([3, -300, 299, 300, -301, 7], np.int64)
    out = np.full((len(indices), 131), np.nan, np.float32)
    ints = [4, 1, 300, 131, len(indices), 8]
    with pytest.raises(_kernels.KernelError) as raised:
        _kernels.call("gather", ints, [], [data, indices, out], threads, use_ref)
    assert (raised.value.value, raised.value.position, raised.value.bound) == (300, 3, 300)
    assert not out.any()
    good = indices[:3]
    out = np.empty((3, 131), np.float32)
    _kernels.call("gather", [4, 1, 300, 131, 3, 8], [], [data, good, out], threads, use_ref)
    np.testing.assert_array_equal(out, data[good])


def test_fallible_kernels_are_gather_only():
    """Of the ops that index by runtime data OrtxEP claims Gather only (checked above); GatherElements, GatherND,
    ScatterND, ScatterElements, OneHot and Compress are left to ORT. A new claim must come with a fallible kernel."""
    from ortx.ep.lowering import LOWERINGS

    assert _kernels.FALLIBLE_KERNELS == {"gather"}
    indexing = {"Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements", "Scatter", "OneHot",
                "Compress"}
    assert {op for _, op in LOWERINGS} & indexing == {"Gather"}
