"""Post-training static quantization to standard QDQ ONNX: `quantize(model, calibration) -> (model, report)`.

Modules, in the order quantize_model.quantize uses them: calibration_data (samples and their checks), plan (which
tensors, which shared scales, what is excluded), statistics (ORT runs, histograms), calibrate (MinMax, Percentile,
Entropy, MSE), scales (parameters and the QuantizeLinear/DequantizeLinear reference), insert_qdq (the rewrite),
report. The package is `quantization`, not `quantize`, so that `ortx.quantize` can be the function.
"""
from ortx.quantization.calibration_data import CalibrationDataError
from ortx.quantization.plan import QuantizationError
from ortx.quantization.quantize_model import ACTIVATION_DTYPES, METHODS, quantize
from ortx.quantization.report import QuantizationReport
from ortx.quantization.statistics import CalibrationRunError

__all__ = ["quantize", "QuantizationReport", "CalibrationDataError", "CalibrationRunError", "QuantizationError",
           "METHODS", "ACTIVATION_DTYPES"]
