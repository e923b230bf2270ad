"""MixedPrecisionReport: per layer its precision, bytes and sensitivity; the search's measured steps; totals."""
from __future__ import annotations

import collections
import dataclasses
import math

from ortx.quantization.mixed_search import SearchStep
from ortx.quantization.sensitivity import SensitivityRecord


@dataclasses.dataclass
class LayerChoice:
    node: str
    op_type: str
    precision: str
    bytes: int                      # its parameters at the chosen precision
    fp32_bytes: int
    sensitivity: dict[str, float]   # precision -> output error with this layer alone at it (inf: failed)


@dataclasses.dataclass
class MixedPrecisionReport:
    budget: float
    objective: str
    metric: str
    precisions: list[str]
    samples: int                    # calibration samples the errors were measured on
    error: float                    # measured on the written model
    bytes_before: int               # serialized fp32 model (after -O2 and the opset upgrade int4 needs)
    bytes_after: int
    layers: list[LayerChoice]
    sensitivity: list[SensitivityRecord]
    steps: list[SearchStep]
    fell_back_to_fp32: bool
    seconds: float                  # the whole call
    sensitivity_seconds: float      # of which the one-layer-at-a-time analysis
    sensitivity_reused: bool        # the records came from an earlier report
    latency_ms: float | None = None       # median ORT CPU latency of the written model (objective latency)
    fp32_latency_ms: float | None = None  # of the fp32 model, interleaved with it
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return dict(collections.Counter(layer.precision for layer in self.layers))

    def to_dict(self) -> dict:
        def finite(value):
            return value if not isinstance(value, float) or math.isfinite(value) else None

        data = dataclasses.asdict(self)
        for layer in data["layers"]:
            layer["sensitivity"] = {key: finite(value) for key, value in layer["sensitivity"].items()}
        for record in data["sensitivity"]:
            record["error"] = finite(record["error"])
        data["counts"] = self.counts
        return data

    def summary(self) -> str:
        ratio = self.bytes_after / self.bytes_before if self.bytes_before else 0.0
        counts = ", ".join(f"{precision} {count}" for precision, count in sorted(self.counts.items()))
        lines = [f"mixed precision: budget {self.budget:g} ({self.metric}), objective {self.objective}, "
                 f"{self.samples} samples, {self.seconds:.1f} s (sensitivity "
                 + ("reused" if self.sensitivity_reused else f"{self.sensitivity_seconds:.1f} s") + ")",
                 f"measured error {self.error:.4g}; layers: {counts}; model size {self.bytes_before} -> "
                 f"{self.bytes_after} bytes ({ratio:.3f}x)"]
        if self.latency_ms is not None and self.fp32_latency_ms:
            lines.append(f"ORT CPU median latency {self.latency_ms:.2f} ms vs fp32 {self.fp32_latency_ms:.2f} ms "
                         f"({self.latency_ms / self.fp32_latency_ms:.2f}x)")
        if self.fell_back_to_fp32:
            lines.append("every layer's cheapest exact-alone mix measured over the budget together: all fp32")
        return "\n".join(lines)

    def table(self) -> str:
        """The summary, one row per layer (precision, bytes, error alone at each precision), the search steps."""
        header = ("layer", "op", "precision", "bytes", "fp32 bytes", *(f"err {p}" for p in self.precisions))
        rows = [header]
        for layer in self.layers:
            errors = [("failed" if not math.isfinite(layer.sensitivity[p]) else f"{layer.sensitivity[p]:.3g}")
                      if p in layer.sensitivity else "-" for p in self.precisions]
            rows.append((layer.node, layer.op_type, layer.precision, str(layer.bytes), str(layer.fp32_bytes),
                         *errors))
        widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
        lines = [self.summary(), ""]
        lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
        lines.append("")
        lines += [f"search: {step.upgrades} upgrades -> error {step.error:.4g} "
                  f"({'within' if step.within_budget else 'over'} budget) "
                  + ", ".join(f"{precision} {count}" for precision, count in step.counts.items())
                  + (f"; latency {step.latency_ratio:.2f}x fp32" if step.latency_ratio is not None else "")
                  for step in self.steps]
        lines += [f"sensitivity failed: {record.node} at {record.precision}: {record.note}"
                  for record in self.sensitivity if record.note]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)
