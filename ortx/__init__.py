"""ortx: a neural-network compiler toolkit for ONNX models that runs inside ONNX Runtime."""
from ortx.ep.session import InferenceSession
from ortx.patch import patch_onnxruntime, unpatch_onnxruntime

__all__ = ["InferenceSession", "patch_onnxruntime", "unpatch_onnxruntime", "quantize", "distill"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # ortx.quantize loads the quantizer (calibration, statistics) on first use: a process that only runs
    # sessions does not hold it
    if name == "quantize":
        from ortx.quantization import quantize

        return quantize
    if name == "distill":  # the torch extra; ortx.distillation imports torch only when called
        from ortx.distillation import distill

        return distill
    raise AttributeError(f"module 'ortx' has no attribute {name!r}")
