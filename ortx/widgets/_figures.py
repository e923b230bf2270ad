"""Figures for widgets, drawn with matplotlib's object API (no pyplot state, so a background thread may draw) and
handed to an ipywidgets.Image as PNG bytes."""
from __future__ import annotations

import io
from typing import Callable


def figure_png(draw: Callable, *, size: tuple[float, float] = (6.0, 3.0), dpi: int = 90) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, dpi=dpi)
    FigureCanvasAgg(figure)
    draw(figure.add_subplot(1, 1, 1))
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()
