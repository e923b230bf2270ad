"""The memory view: a claimed segment's arena plan as offset-over-time rectangles, one buffer's details on selection.

A thin view over ortx.memory.report (what `ortx memory` prints): a segment dropdown, a buffer list (largest first),
the chart (ortx.memory.chart's rectangles, the selected buffer outlined in red) and the buffer's label, offset, size,
live steps and the buffers it shares bytes with at other times.
"""
from __future__ import annotations

import html

import ipywidgets as widgets

from ortx.widgets._figures import figure_png


class MemoryView(widgets.VBox):
    """`MemoryView(ortx.memory.report(model, shapes))` or `MemoryView.for_model(model, shapes)`."""

    def __init__(self, report):
        if not report.segments:
            raise ValueError("the memory report has no claimed segment: OrtxEP claimed nothing, so there is no arena")
        self.report = report
        self.segment = widgets.Dropdown(
            options=[(f"{s.name}: {s.arena_bytes} B, {len(s.tensors)} buffers", i)
                     for i, s in enumerate(report.segments)], description="segment")
        self.buffers = widgets.Select(rows=10, description="buffer", layout=widgets.Layout(width="520px"))
        self.chart = widgets.Image(format="png")
        self.details = widgets.HTML()
        self.summary = widgets.HTML(html.escape(
            f"naive {report.naive_bytes} B, ORT-style {report.ort_style_bytes} B (graph tensors only), planned "
            f"{report.planned_bytes} B (graph tensors and kernel scratch), lower bound {report.lower_bound_bytes} B "
            f"(graph tensors alone {report.activation_lower_bound_bytes} B; kernel scratch at most "
            f"{report.workspace_peak_bytes} B at once)"))
        self.segment.observe(lambda _: self._show_segment(), names="value")
        self.buffers.observe(lambda _: self._show_buffer(), names="value")
        super().__init__([self.summary, self.segment, widgets.HBox([self.buffers, self.details]), self.chart])
        self._show_segment()

    @classmethod
    def for_model(cls, model, input_shapes: dict, *, num_threads: int = 2) -> "MemoryView":
        import ortx.memory

        return cls(ortx.memory.report(model, input_shapes, num_threads=num_threads))

    @property
    def selected(self):
        """The TensorPlacement shown, or None."""
        tensors = self.report.segments[self.segment.value].tensors
        return tensors[self.buffers.value] if self.buffers.value is not None else None

    def _show_segment(self) -> None:
        tensors = self.report.segments[self.segment.value].tensors
        order = sorted(range(len(tensors)), key=lambda i: -tensors[i].nbytes)
        self.buffers.options = [(f"{tensors[i].label[:48]} ({tensors[i].nbytes} B)", i) for i in order]
        self.buffers.value = order[0] if order else None
        self._show_buffer()

    def _show_buffer(self) -> None:
        segment = self.report.segments[self.segment.value]
        tensor = self.selected
        self.chart.value = self.render_chart()
        if tensor is None:
            self.details.value = ""
            return
        sharing = [other.label for other in segment.tensors if other is not tensor
                   and other.offset < tensor.offset + tensor.nbytes and tensor.offset < other.offset + other.nbytes]
        self.details.value = (
            f"<b>{html.escape(tensor.label)}</b><br>offset {tensor.offset} B, {tensor.nbytes} B<br>"
            f"live at steps {tensor.first} to {tensor.last}<br>"
            f"shares bytes (at other steps) with {len(sharing)} buffer(s)"
            + "".join(f"<br>&nbsp;&nbsp;{html.escape(label[:60])}" for label in sharing[:8]))

    def render_chart(self) -> bytes:
        from matplotlib.patches import Rectangle

        from ortx.memory.chart import plot

        segment = self.report.segments[self.segment.value]
        tensor = self.selected

        def draw(axes):
            plot(segment.plan, ax=axes, title=f"{segment.name}: {segment.arena_bytes} B")
            if tensor is not None:
                axes.add_patch(Rectangle((tensor.first, tensor.offset), tensor.last - tensor.first + 1, tensor.nbytes,
                                         fill=False, edgecolor="red", linewidth=2.0))

        return figure_png(draw, size=(8.0, 3.5))
