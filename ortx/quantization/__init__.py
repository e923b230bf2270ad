"""Post-training static quantization to standard QDQ ONNX: `quantize(model, calibration) -> (model, report)`.

Modules, in the order quantize_model.quantize uses them: calibration_data (samples and their checks), plan (which
tensors, which shared scales, what is excluded), statistics (ORT runs, histograms), calibrate (MinMax, Percentile,
Entropy, MSE), scales (parameters and the QuantizeLinear/DequantizeLinear reference), insert_qdq (the rewrite),
report. The package is `quantization`, not `quantize`, so that `ortx.quantize` can be the function.
`mixed_precision(model, calibration, budget=...) -> (model, report)` gives each layer its own precision: precisions
(the formats), mixed_model (assembling them), sensitivity (one layer at a time), mixed_search, mixed_report.
"""
from ortx.quantization.calibration_data import CalibrationDataError
from ortx.quantization.mixed_precision import mixed_precision
from ortx.quantization.mixed_report import MixedPrecisionReport
from ortx.quantization.plan import QuantizationError
from ortx.quantization.precisions import PRECISIONS, PrecisionError
from ortx.quantization.quantize_model import ACTIVATION_DTYPES, METHODS, quantize
from ortx.quantization.report import QuantizationReport
from ortx.quantization.statistics import CalibrationRunError

__all__ = ["quantize", "QuantizationReport", "CalibrationDataError", "CalibrationRunError", "QuantizationError",
           "METHODS", "ACTIVATION_DTYPES", "mixed_precision", "MixedPrecisionReport", "PrecisionError", "PRECISIONS"]
