"""ortx.qat.export: standard QDQ ONNX that onnx.checker accepts and plain ORT runs, matching the torch
fake-quantized model; the same QDQ structure (and, before fine-tuning, the same scales) as ortx.quantize's
MinMax PTQ; the torch model's float modules stay float; scale groups ortx merges are noted."""
import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import numpy_helper

torch = pytest.importorskip("torch")

import ortx  # noqa: E402
import ortx.qat  # noqa: E402
from ortx.model_io import to_ort_bytes  # noqa: E402
from tests.qat import _torch_models  # noqa: E402


def _run(model, inputs, level=onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL):
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = level
    session = onnxruntime.InferenceSession(to_ort_bytes(model), options, providers=["CPUExecutionProvider"])
    return session.run(None, {model.graph.input[0].name: inputs.numpy()})[0]


def _initializer(model, name):
    return numpy_helper.to_array(next(tensor for tensor in model.graph.initializer if tensor.name == name))


def _input_scale_and_weight(model, op_type):
    """(activation scale, float weights) of the first `op_type` node: read through its DequantizeLinear inputs."""
    producers = {output: node for node in model.graph.node for output in node.output}
    node = next(node for node in model.graph.node if node.op_type == op_type)
    activation, weight = producers[node.input[0]], producers[node.input[1]]
    weight_values = _initializer(model, weight.input[0]).astype(np.float32)
    weight_scale = _initializer(model, weight.input[1])
    return float(_initializer(model, activation.input[1])), weight_values * weight_scale.reshape(-1, 1)


def _prepared(scales="observed", dtype="uint8", fine_tune=True):
    prepared = ortx.qat.prepare(_torch_models.residual_net(), activation_dtype=dtype, scales=scales)
    calibration = _torch_models.images(16, seed=1)
    ortx.qat.calibrate(prepared, [calibration[:8], calibration[8:]])
    if fine_tune:
        ortx.qat.fine_tune(prepared, [(calibration, torch.arange(16) % 4)], epochs=3, learning_rate=1e-3)
    return prepared, calibration


@pytest.mark.parametrize("scales, dtype", [("observed", "uint8"), ("learned", "int8")])
def test_export_runs_in_ort_and_matches_torch(scales, dtype, tmp_path):
    prepared, calibration = _prepared(scales, dtype)
    path = tmp_path / "qat.onnx"
    model, report = ortx.qat.export(prepared, calibration[:2], path, input_names=["images"])
    onnx.checker.check_model(onnx.load(path), full_check=True)
    assert report.counts["nodes_quantized"] == 4 and report.counts["weights_quantized"] == 4
    assert report.counts["biases_int32"] == 4  # first.0 had none: folding its BatchNorm gave it one
    assert not report.excluded and not report.notes
    assert not any(node.domain for node in model.graph.node)  # no marker left
    inputs = _torch_models.images(32, seed=2)  # a batch size other than the export's: the batch axis is dynamic
    with torch.no_grad():
        expected = prepared(inputs).numpy()
    # Tolerance: ORT and torch sum a Conv's products in different orders; where a result lies within that
    # rounding of a quantization tie the two round to neighbouring steps. One such flip moves one classifier
    # input by one step s, so an output by at most s x max|W|; allow two, plus float32 noise of the sums.
    step, weight = _input_scale_and_weight(model, "Gemm")
    tolerance = 2 * step * float(np.abs(weight).max()) + 1e-5 * float(np.abs(expected).max())
    for level in (onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL,    # Q/DQ run as written, float Conv
                  onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL):    # ORT's int8 QLinearConv/QGemm kernels
        np.testing.assert_allclose(_run(model, inputs, level), expected, rtol=0, atol=tolerance)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_calibrated_export_is_ortx_minmax_ptq(dtype):
    """Before fine-tuning, QAT's export and ortx PTQ (MinMax, same samples) are the same QDQ graph with the same
    scales, up to float32 rounding of the two BatchNorm folds (torch's in prepare, ortx -O2's on the ONNX)."""
    prepared, calibration = _prepared(dtype=dtype, fine_tune=False)
    qat_model, _ = ortx.qat.export(prepared, calibration[:2], input_names=["images"])
    fp32 = torch.onnx.export(_torch_models.residual_net(), (calibration[:2],), dynamo=True, verbose=False,
                             input_names=["images"], dynamic_shapes=({0: torch.export.Dim.DYNAMIC},)).model_proto
    ptq_model, _ = ortx.quantize(fp32, {"images": calibration.numpy()}, method="minmax", activation_dtype=dtype)
    assert [node.op_type for node in qat_model.graph.node] == [node.op_type for node in ptq_model.graph.node]

    def scales(model):
        return sorted(float(value) for tensor in model.graph.initializer if tensor.name.endswith("_scale")
                      for value in numpy_helper.to_array(tensor).ravel())

    np.testing.assert_allclose(scales(qat_model), scales(ptq_model), rtol=1e-5)
    inputs = _torch_models.images(32, seed=2)
    np.testing.assert_array_equal(_run(qat_model, inputs).argmax(1), _run(ptq_model, inputs).argmax(1))


def test_excluded_module_stays_float_in_onnx():
    prepared = ortx.qat.prepare(_torch_models.residual_net(), exclude=["classifier"])
    calibration = _torch_models.images(8, seed=1)
    ortx.qat.calibrate(prepared, [calibration])
    model, report = ortx.qat.export(prepared, calibration[:2])
    gemm = next(node for node in model.graph.node if node.op_type == "Gemm")
    assert gemm.input[1] in {tensor.name for tensor in model.graph.initializer}  # float weight, no DQ
    assert [(record.op_type, record.reason) for record in report.excluded] == [
        ("Gemm", "left float: the torch model does not fake-quantize its inputs")]
    assert report.counts["nodes_quantized"] == 3
    with torch.no_grad():
        expected = prepared(calibration).numpy()
    np.testing.assert_allclose(_run(model, calibration), expected, rtol=0, atol=1e-3 * np.abs(expected).max())


def test_scale_group_merged_across_concat_is_noted():
    prepared = ortx.qat.prepare(_torch_models.fan_out_concat_net())
    calibration = _torch_models.images(8, seed=1)
    ortx.qat.calibrate(prepared, [calibration])
    model, report = ortx.qat.export(prepared, calibration[:2])
    assert len(report.notes) == 1 and "share one scale in ONNX but had different quantizers" in report.notes[0]
    assert report.counts["scale_groups"] == 2  # the input; left, right and their Concat
    assert len(set(report.tensors.values())) == 2
    assert np.all(np.isfinite(_run(model, calibration)))


def test_export_before_calibration_fails():
    prepared = ortx.qat.prepare(_torch_models.residual_net())
    with pytest.raises(RuntimeError, match="is not calibrated: run ortx.qat.calibrate first"):
        ortx.qat.export(prepared, _torch_models.images(2, seed=1))
