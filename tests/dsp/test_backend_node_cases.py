"""The ONNX backend node tests for DFT/STFT/windows/MelWeightMatrix, run through the DSP compiler.

The cases feed their scalar parameters (dft_length, axis, frame_step, window size, mel parameters) as graph
inputs; the DSP compiles static transforms, so each scalar input is bound as an initializer holding the case's
value first (what a deployment with fixed parameters does), then every node must be claimed by ortx.dsp.check and
the outputs must match the case's expected data within its own tolerances, with the absolute one raised to an
FFT's float32 rounding (8 sqrt(log2 n + 1) eps max|X|, as tests/dsp/test_fft_kernels.py): test_dft_inverse's
atol of 1e-7 is below the rounding noise of its own expected values (1.9e-7 on entries of magnitude 45).
"""
import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from ortx.dsp import OPS, check, compile_nodes
from ortx.ep.compile_nodes import infer_shapes
from ortx.ep.lowering._values import numpy_dtype, static_shape

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from onnx.backend.test.case.node import collect_testcases

    CASES = [case for case in collect_testcases(None) if case.data_sets and
             any(node.op_type in OPS and node.op_type != "Conv" for node in case.model.graph.node)]


def bind_scalar_inputs(model: onnx.ModelProto, feeds: dict) -> tuple[onnx.ModelProto, dict]:
    bound = onnx.ModelProto()
    bound.CopyFrom(model)
    for node in bound.graph.node:
        if node.op_type == "STFT" and not any(attribute.name == "onesided" for attribute in node.attribute):
            # the spec's default, spelled out: onnx 1.23's shape inference reads a missing onesided as 0 and then
            # contradicts the case's own output shape (ORT and onnx.reference use 1)
            node.attribute.append(onnx.helper.make_attribute("onesided", 1))
    signals = {}
    for info in list(bound.graph.input):
        value = np.asarray(feeds[info.name])
        if value.size == 1 and value.ndim <= 1:
            bound.graph.initializer.append(numpy_helper.from_array(value, info.name))
            bound.graph.input.remove(info)
        else:
            signals[info.name] = value
    return bound, signals


def test_every_signal_op_has_backend_cases():
    covered = {node.op_type for case in CASES for node in case.model.graph.node}
    assert covered == set(OPS) - {"Conv"}
    assert len(CASES) >= 19


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_backend_case_runs_on_the_dsp(case):
    inputs, expected = case.data_sets[0]
    names = [info.name for info in case.model.graph.input]
    model, signals = bind_scalar_inputs(case.model, dict(zip(names, inputs)))
    graph = infer_shapes(model).graph
    for node in graph:
        assert check(node) is None, check(node)
    program = compile_nodes(list(graph), list(graph.inputs), list(graph.outputs), num_threads=2)
    outputs = [np.zeros(static_shape(value), numpy_dtype(value)) for value in graph.outputs]
    program.run([signals[value.name] for value in graph.inputs], outputs)
    for actual, wanted in zip(outputs, expected):
        length = max(wanted.shape[1:-1] or (1,))
        rounding = 8.0 * np.sqrt(np.log2(max(length, 2)) + 1.0) * np.finfo(np.float32).eps * np.max(np.abs(wanted))
        np.testing.assert_allclose(actual, wanted, rtol=case.rtol, atol=max(case.atol, rounding), err_msg=case.name)
