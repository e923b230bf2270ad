"""Opt-in: make `onnxruntime.InferenceSession(..., providers=["OrtxEP", ...])` build an ortx session.

For third-party code that constructs ORT sessions itself. Sessions without OrtxEP in their providers stay plain
ORT sessions of ORT's own class. `unpatch_onnxruntime()` restores the original.
"""
from __future__ import annotations

import threading

import onnxruntime

_lock = threading.Lock()
_original = None


def _wants_ortx(args, kwargs) -> bool:
    providers = kwargs.get("providers")
    if providers is None and len(args) >= 3:
        providers = args[2]
    names = [p[0] if isinstance(p, tuple) else p for p in (providers or [])]
    return "OrtxEP" in names


def patch_onnxruntime() -> None:
    global _original
    with _lock:
        if _original is not None:
            return
        original = onnxruntime.InferenceSession

        class InferenceSession(original):
            def __new__(cls, *args, **kwargs):
                if _wants_ortx(args, kwargs):
                    from ortx.ep.session import InferenceSession as OrtxSession

                    return OrtxSession(*args, **kwargs)
                return super().__new__(cls)

        InferenceSession.__qualname__ = original.__qualname__
        InferenceSession.__module__ = original.__module__
        _original = original
        onnxruntime.InferenceSession = InferenceSession


def unpatch_onnxruntime() -> None:
    global _original
    with _lock:
        if _original is None:
            return
        onnxruntime.InferenceSession = _original
        _original = None


def is_patched() -> bool:
    return _original is not None
