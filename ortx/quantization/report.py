"""QuantizationReport: what `quantize` did to each tensor, weight and bias, what it left in float and why."""
from __future__ import annotations

import dataclasses

from ortx.quantization.insert_qdq import BiasRecord, WeightRecord
from ortx.quantization.plan import Exclusion


@dataclasses.dataclass
class TensorRecord:
    name: str
    group: str            # the tensor whose scale this one shares (itself when it has its own)
    minimum: float        # observed over the calibration set
    maximum: float
    low: float            # the calibrated range of the tensor alone
    high: float
    scale: float          # of the group: covers the union of its members' calibrated ranges and 0
    zero_point: int
    note: str = ""


@dataclasses.dataclass
class QuantizationReport:
    method: str
    activation_dtype: str
    samples: int
    seconds: float
    tensors: list[TensorRecord]
    weights: list[WeightRecord]
    biases: list[BiasRecord]
    excluded: list[Exclusion]
    notes: list[str]
    counts: dict[str, int]
    quantized_op_types: dict[str, int]   # op type -> nodes quantized

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def summary(self) -> str:
        counts = self.counts
        ratio = counts["bytes_after"] / counts["bytes_before"] if counts["bytes_before"] else 0.0
        return (f"{self.method} calibration over {self.samples} samples, {self.activation_dtype} activations, "
                f"{self.seconds:.1f} s\n"
                f"quantized {counts['nodes_quantized']} nodes ("
                + ", ".join(f"{op} {count}" for op, count in sorted(self.quantized_op_types.items())) + "): "
                f"{counts['tensors_quantized']} activation tensors in {counts['scale_groups']} scale groups, "
                f"{counts['weights_quantized']} int8 weights, {counts['biases_int32']} int32 biases, "
                f"{counts['qdq_nodes_added']} Q/DQ nodes added\n"
                f"model size {counts['bytes_before']} -> {counts['bytes_after']} bytes ({ratio:.2f}x)")

    def table(self) -> str:
        """The summary, one row per activation tensor, then weights with notes, exclusions and notes."""
        rows = [("tensor", "observed", "calibrated", "scale", "zp", "shares scale with", "note")]
        for record in self.tensors:
            rows.append((record.name, f"[{record.minimum:.4g}, {record.maximum:.4g}]",
                         f"[{record.low:.4g}, {record.high:.4g}]", f"{record.scale:.4g}", str(record.zero_point),
                         record.group if record.group != record.name else "-", record.note))
        widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
        lines = [self.summary(), ""]
        lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
        lines += [f"weight {record.name}: {record.note}" for record in self.weights if record.note]
        lines += [f"bias {record.name} ({record.node}): {record.note}" for record in self.biases if record.note]
        lines += [f"excluded {record.node} ({record.op_type}): {record.reason}" for record in self.excluded]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)
