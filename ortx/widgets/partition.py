"""The partition view: the compiled graph coloured by device, with each segment's measured time.

A thin view over `sess.assignment` (to_svg: ortx.ep.render's layered drawing, edges that cross devices labelled
with their bytes) and `sess.segment_times` (ortx.ep.profile): the drawing, a table of segments (device, nodes,
median ms, share of the run) and a "measure" button that times them again; choosing a segment lists its nodes.
"""
from __future__ import annotations

import html

import ipywidgets as widgets


class PartitionView(widgets.VBox):
    """`PartitionView(session, feeds)`: `session` an ortx.InferenceSession with OrtxEP, `feeds` one input dict."""

    def __init__(self, session, feeds: dict, *, runs: int = 10):
        self.session = session
        self.feeds = feeds
        self.runs = runs
        session.run(None, feeds)  # compiles for these shapes when the model has dynamic ones
        self.assignment = session.assignment
        self.drawing = widgets.HTML(self.assignment.to_svg())
        self.table = widgets.HTML()
        self.segment = widgets.Dropdown(description="segment")
        self.nodes = widgets.HTML()
        self.measure_button = widgets.Button(description="measure", icon="clock-o")
        self.measure_button.on_click(lambda _: self.measure())
        self.segment.observe(lambda _: self._show_nodes(), names="value")
        devices = ", ".join(f"{device}: {count}" for device, count in sorted(self.assignment.by_device().items()))
        summary = widgets.HTML(html.escape(f"{len(self.assignment)} nodes ({devices}); {self.assignment.segments} "
                                           f"segments; OrtxEP claims {100 * self.assignment.claimed_mac_share:.1f}% "
                                           "of the multiply-accumulates"))
        self.times = []
        super().__init__([summary, self.drawing, widgets.HBox([self.measure_button, self.segment]), self.table,
                          self.nodes])
        self.measure()

    def measure(self) -> list:
        self.times = self.session.segment_times(self.feeds, runs=self.runs)
        total = sum(time.median_ms for time in self.times) or 1.0
        rows = "".join(f"<tr><td>{time.index}</td><td>{html.escape(time.device)}</td><td>{len(time.nodes)}</td>"
                       f"<td>{html.escape(time.nodes[0] if time.nodes else '-')}</td><td>{time.median_ms:.4f}</td>"
                       f"<td>{100 * time.median_ms / total:.1f}%</td></tr>" for time in self.times)
        self.table.value = ("<table><tr><th>segment</th><th>device</th><th>nodes</th><th>first node</th>"
                            "<th>median ms</th><th>share</th></tr>" + rows + "</table>")
        self.segment.options = [(f"{time.index}: {time.device}, {len(time.nodes)} nodes", time.index)
                                for time in self.times]
        self._show_nodes()
        return self.times

    def _show_nodes(self) -> None:
        if self.segment.value is None:
            self.nodes.value = ""
            return
        chosen = self.times[self.segment.value]
        self.nodes.value = ", ".join(html.escape(name) for name in chosen.nodes)
