"""The DSP device's declaration and backend functions (check / estimate_seconds / compile) on signal nodes."""
import threading

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from ortx.ep.devices import DEVICES, select
from ortx.ep.devices import dsp
from tests import _models
from tests.tolerances import assert_close


def _ir(model):
    return ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(model, strict_mode=True))


def test_dsp_is_in_the_table_and_selectable():
    assert dsp.DSP in DEVICES
    assert [device.name for device in select("dsp,cpu")] == ["dsp", "cpu"]
    assert dsp.DSP.kind == "dsp"
    assert {op.op_type for op in dsp.DSP.ops} == {"DFT", "STFT", "HannWindow", "HammingWindow", "BlackmanWindow",
                                                  "MelWeightMatrix", "Conv"}


def test_check_claims_signal_nodes_and_names_the_others():
    graph = _ir(_models.log_mel_front_end(mel_bins=64)).graph
    verdicts = {node.name: dsp.check(node) for node in graph}
    assert verdicts["window"] is None and verdicts["stft"] is None and verdicts["mel"] is None
    assert "square" in verdicts["square"] and "not a DSP op" in verdicts["square"]


def test_estimate_is_calibrated_and_grows_with_length():
    assert 0 < dsp.seconds_per_point() < 1e-6  # a 2020s core does >= 1 FFT point per microsecond
    graph = _ir(_models.log_mel_front_end(mel_bins=64)).graph
    stft = next(node for node in graph if node.op_type == "STFT")
    longer = next(node for node in _ir(_models.log_mel_front_end(samples=64000, mel_bins=64)).graph if node.op_type == "STFT")
    assert 0 < dsp.estimate_seconds(stft) < dsp.estimate_seconds(longer)
    square = next(node for node in graph if node.op_type == "Mul")
    assert dsp.estimate_seconds(square) == float("inf")


def test_compiled_front_end_matches_ort_from_a_worker_thread():
    import onnxruntime as ort

    from ortx.model_io import to_ort_bytes

    model = _models.log_mel_front_end(mel_bins=64)
    graph = _ir(model).graph
    signal_nodes = [node for node in graph if dsp.check(node) is None]
    spectrum = next(node for node in signal_nodes if node.op_type == "STFT").outputs[0]
    mel = next(node for node in signal_nodes if node.op_type == "MelWeightMatrix").outputs[0]
    program = dsp.compile(signal_nodes, [graph.inputs[0]], [spectrum, mel], num_threads=2)
    audio = np.random.default_rng(5).standard_normal((1, 16000, 1)).astype(np.float32)
    outputs = [np.zeros(spectrum.shape.numpy(), np.float32), np.zeros(mel.shape.numpy(), np.float32)]
    worker = threading.Thread(target=program.run, args=([audio], outputs))
    worker.start()
    worker.join()
    # ORT computes the same two tensors when they are graph outputs
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend([helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
                               for name in ("spectrum", "mel")])
    session = ort.InferenceSession(to_ort_bytes(probe), providers=["CPUExecutionProvider"])
    expected_spectrum, expected_mel = session.run(["spectrum", "mel"], {"audio": audio})
    assert_close(outputs[0], expected_spectrum, what="STFT on the DSP vs ORT")
    assert_close(outputs[1], expected_mel, what="MelWeightMatrix on the DSP vs ORT")
    assert program.stats()["runs"] == 1


def _session(model, **options):
    import onnxruntime

    import ortx

    session_options = onnxruntime.SessionOptions()
    session_options.intra_op_num_threads = 2
    return ortx.InferenceSession(model.SerializeToString(), session_options,
                                 providers=["OrtxEP", "CPUExecutionProvider"], provider_options=[options, {}])


def _ort(model, feeds):
    import onnxruntime

    from ortx.model_io import to_ort_bytes

    return onnxruntime.InferenceSession(to_ort_bytes(model), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_session_with_dsp_claims_the_signal_ops_and_matches_ort():
    model = _models.log_mel_front_end(mel_bins=64)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("log_mel", TensorProto.FLOAT, [1, 97, 64]))
    feeds = {"audio": np.random.default_rng(9).standard_normal((1, 16000, 1)).astype(np.float32)}
    session = _session(model, devices="dsp,cpu")
    devices = {row.op_type: row.device for row in session.assignment}
    assert devices["STFT"] == "dsp"
    assert_close(session.run(None, feeds)[0], _ort(model, feeds)[0], what="log-mel through OrtxEP (dsp,cpu)")
    # without the DSP, OrtxEP declines STFT and ORT runs it
    assert {row.op_type: row.device for row in _session(model, devices="cpu").assignment}["STFT"] != "dsp"


def test_forcing_a_non_signal_node_onto_the_dsp_names_node_device_and_reason():
    import pytest

    model = _models.log_mel_front_end(mel_bins=64)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("log_mel", TensorProto.FLOAT, [1, 97, 64]))
    with pytest.raises(Exception, match=r"(?s)project.*dsp.*not a DSP op"):
        _session(model, devices="dsp,cpu", placement="project:dsp")
