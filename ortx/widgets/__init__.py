"""Notebook views over ortx's reports and records (extra `ortx[widgets]`: ipywidgets and matplotlib).

TuningDashboard   start/stop `ortx tune` in a background thread, best-so-far per task, apply the records
PrecisionExplorer a precision per layer, seeded by the sensitivity analysis; size and error as you change them
MemoryView        the arena plan's offset-over-time chart, one buffer's details on selection
PartitionView     the graph colored by device, with per-segment times
Each widget calls the same functions the CLI does; none holds logic of its own beyond what it shows.
"""
from __future__ import annotations

import importlib

_PUBLIC = {"TuningDashboard": "ortx.widgets.tuning", "PrecisionExplorer": "ortx.widgets.precision",
           "MemoryView": "ortx.widgets.memory", "PartitionView": "ortx.widgets.partition"}
EXTRA_MESSAGE = "ortx.widgets needs the widgets extra: pip install 'ortx[widgets]'"

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'ortx.widgets' has no attribute {name!r}")
    try:
        import ipywidgets  # noqa: F401
        import matplotlib  # noqa: F401
    except ImportError as error:
        raise ImportError(EXTRA_MESSAGE) from error
    return getattr(importlib.import_module(_PUBLIC[name]), name)
