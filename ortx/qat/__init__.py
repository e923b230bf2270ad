"""Quantization-aware training for ortx (extra `ortx[torch]`): fake quantization in a torch model that follows
ortx PTQ's QDQ rules, a short fine-tuning loop, and export to the same standard QDQ ONNX `ortx quantize` writes.

    model = ortx.qat.prepare(torch_model)          # BatchNorm folded, fake-quant with a straight-through estimator
    ortx.qat.calibrate(model, calibration_batches) # activation ranges (ortx's MinMax parameters)
    ortx.qat.fine_tune(model, train_batches, epochs=2)
    onnx_model, report = ortx.qat.export(model, example_input, "model_int8.onnx")

Importing ortx.qat needs no torch; using any of the names below without torch raises ImportError naming the extra.
"""
from __future__ import annotations

import importlib

# name -> module; the modules are not named after their functions, so that importing one never shadows a name
_PUBLIC = {"prepare": "ortx.qat.prepare_model", "PrepareReport": "ortx.qat.prepare_model",
           "set_mode": "ortx.qat.prepare_model", "calibrate": "ortx.qat.training", "fine_tune": "ortx.qat.training",
           "FineTuneReport": "ortx.qat.training", "QuantizerRecord": "ortx.qat.training",
           "export": "ortx.qat.export_model", "ExportReport": "ortx.qat.export_model",
           "fake_quantize": "ortx.qat.fake_quant", "ActivationQuantizer": "ortx.qat.fake_quant"}
TORCH_EXTRA_MESSAGE = "ortx.qat needs the torch extra: pip install 'ortx[torch]'"

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'ortx.qat' has no attribute {name!r}")
    try:
        import torch  # noqa: F401
    except ImportError as error:
        raise ImportError(TORCH_EXTRA_MESSAGE) from error
    return getattr(importlib.import_module(_PUBLIC[name]), name)
