"""The precision explorer: a precision per layer, seeded by the sensitivity analysis, with measured size and error.

A thin view over ortx.quantization.mixed_precision's steps (prepare_mixed, the per-layer sensitivity, the search):
one dropdown per Conv/Gemm/MatMul layer (its options list each precision's error with that layer alone), seeded
with the search's choice for `budget`; every change rebuilds the mixed model and shows its serialized size and its
error on the calibration samples, both measured (ORT CPU); "measure latency" times it against fp32; "export" writes
the chosen model (standard ONNX, atomically).
"""
from __future__ import annotations

import html

import ipywidgets as widgets


class PrecisionExplorer(widgets.VBox):
    def __init__(self, model, calibration, *, budget: float = 0.01, precisions=None, metric: str = "relative_l2",
                 threads: int = 2):
        from ortx.quantization.mixed_precision import DEFAULT_PRECISIONS, check_budget, prepare_mixed
        from ortx.quantization.mixed_search import search

        self.budget = check_budget(budget)
        self.setup = prepare_mixed(model, calibration, precisions=precisions or DEFAULT_PRECISIONS, metric=metric,
                                   threads=threads)
        self.records = self.setup.sensitivity()
        self.seeded = search(self.records, self.budget, "size", self.setup.error).assignment
        self.fp32_bytes = self.setup.proto.ByteSize()
        errors = {}
        for record in self.records:
            errors.setdefault(record.node, {})[record.precision] = record.error
        self.layers: dict[str, widgets.Dropdown] = {}
        rows = []
        for layer in self.setup.layers:
            options = [(f"{precision} (alone: {errors[layer.node].get(precision, 0.0):.2e})", precision)
                       for precision in self.setup.precisions]
            dropdown = widgets.Dropdown(options=options, value=self.seeded.get(layer.node, "fp32"),
                                        description=layer.node[:24], layout=widgets.Layout(width="420px"),
                                        style={"description_width": "180px"})
            dropdown.observe(lambda _: self.update(), names="value")
            self.layers[layer.node] = dropdown
            rows.append(dropdown)
        self.estimate = widgets.HTML()
        self.latency = widgets.HTML()
        self.latency_button = widgets.Button(description="measure latency", icon="clock-o")
        self.path = widgets.Text(value="mixed.onnx", description="export to")
        self.export_button = widgets.Button(description="export", button_style="success", icon="download")
        self.latency_button.on_click(lambda _: self.measure_latency())
        self.export_button.on_click(lambda _: self.export())
        self.size_bytes = self.error = None
        self._holding = False
        header = widgets.HTML(f"<b>{len(rows)} layers</b>, seeded by the search for budget {self.budget:g} "
                              f"({html.escape(self.setup.evaluator.metric_name)} on "
                              f"{len(self.setup.evaluator.samples)} samples)")
        super().__init__([header, widgets.VBox(rows), self.estimate,
                          widgets.HBox([self.latency_button, self.latency]),
                          widgets.HBox([self.path, self.export_button])])
        self.update()

    @property
    def assignment(self) -> dict[str, str]:
        return {node: dropdown.value for node, dropdown in self.layers.items()}

    def set_precisions(self, precisions: dict[str, str] | str) -> None:
        """Sets several dropdowns (a dict node -> precision, or one precision for every layer) and measures once."""
        if isinstance(precisions, str):
            precisions = {node: precisions for node in self.layers}
        unknown = sorted(set(precisions) - set(self.layers))
        if unknown:
            raise ValueError(f"set_precisions: unknown layer(s) {unknown[:5]}; the layers are the dropdowns' nodes")
        self._holding = True
        try:
            for node, precision in precisions.items():
                self.layers[node].value = precision
        finally:
            self._holding = False
        self.update()

    def update(self) -> None:
        """Rebuilds the chosen mix and measures its size and error."""
        if self._holding:
            return
        model = self.setup.build(self.assignment)
        self.size_bytes = model.ByteSize()
        self.error = self.setup.error(self.assignment)
        within = "within" if self.error <= self.budget else "<b>over</b>"
        counts = {}
        for precision in self.assignment.values():
            counts[precision] = counts.get(precision, 0) + 1
        self.estimate.value = (f"size {self.size_bytes} B ({self.size_bytes / self.fp32_bytes:.3f} of fp32); error "
                               f"{self.error:.3e}, {within} the budget {self.budget:g}; "
                               + ", ".join(f"{count} {precision}" for precision, count in sorted(counts.items())))

    def measure_latency(self) -> tuple[float, float]:
        evaluator = self.setup.evaluator
        mixed_ms, fp32_ms = evaluator.latency_ms(evaluator.session(self.setup.build(self.assignment)))
        self.latency.value = f"{mixed_ms:.3f} ms vs fp32 {fp32_ms:.3f} ms (ORT CPU, median)"
        return mixed_ms, fp32_ms

    def export(self, path: str | None = None) -> str:
        from ortx.model_io import clamp_ir_version, save

        path = path or self.path.value
        save(clamp_ir_version(self.setup.build(self.assignment)), path)
        self.latency.value = f"wrote {html.escape(path)}"
        return path
