"""ortx: a neural-network compiler toolkit for ONNX models that runs inside ONNX Runtime."""
