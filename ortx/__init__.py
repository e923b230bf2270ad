"""ortx: a neural-network compiler toolkit for ONNX models that runs inside ONNX Runtime."""
from ortx.ep.session import InferenceSession
from ortx.patch import patch_onnxruntime, unpatch_onnxruntime
from ortx.quantization import quantize

__all__ = ["InferenceSession", "patch_onnxruntime", "unpatch_onnxruntime", "quantize"]
__version__ = "0.1.0"
