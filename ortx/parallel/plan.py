"""PipelinePlan: what `split` decided, printable and savable; what `run` executes.

A plan holds N stage models (valid ONNX, each a contiguous range of the split graph's nodes in topological order)
and the N+1 boundaries between them: boundary 0 is the model's inputs, boundary N its outputs, and boundary k
(0 < k < N) the cut after stage k-1: every tensor stage k-1 or an earlier stage made (or a model input) that stage
k or later, or the model's outputs, still need. A stage reads its model inputs from boundary k and writes its
outputs into boundary k+1; the boundary-(k+1) tensors it did not make pass through it unchanged.
"""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import onnx

from ortx.model_io import save


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name, e.g. "float32"

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclasses.dataclass(frozen=True)
class Stage:
    index: int
    model: onnx.ModelProto  # the stage alone: a valid ONNX model (IR version onnxruntime reads)
    nodes: tuple[str, ...]  # its nodes, in order
    inputs: tuple[str, ...]  # its model's inputs (a subset of the boundary before it)
    outputs: tuple[str, ...]  # its model's outputs (the boundary after it, less the tensors that pass through)
    cost_seconds: float  # measured or estimated compute time of one micro-batch (PipelinePlan.cost_source)


@dataclasses.dataclass(frozen=True)
class Boundary:
    tensors: tuple[TensorSpec, ...]

    @property
    def nbytes(self) -> int:
        return sum(tensor.nbytes for tensor in self.tensors)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(tensor.name for tensor in self.tensors)


@dataclasses.dataclass(frozen=True)
class PipelinePlan:
    stages: tuple[Stage, ...]
    boundaries: tuple[Boundary, ...]  # len(stages) + 1: model inputs, the cuts, model outputs
    cost_source: str  # how stage costs were found: "measured (...)" or "estimated from MACs (...)"
    max_stages: int  # the most stages this graph allows (one node each)

    @property
    def inputs(self) -> Boundary:
        return self.boundaries[0]

    @property
    def outputs(self) -> Boundary:
        return self.boundaries[-1]

    @property
    def cuts(self) -> tuple[Boundary, ...]:
        return self.boundaries[1:-1]

    def passing_through(self, stage: int) -> tuple[str, ...]:
        """Tensors of the boundary after `stage` that it did not make: copied from the boundary before it."""
        made = set(self.stages[stage].outputs)
        return tuple(name for name in self.boundaries[stage + 1].names if name not in made)

    def describe(self) -> str:
        """One line per stage (nodes, cost) and per cut (tensors, bytes)."""
        total = sum(stage.cost_seconds for stage in self.stages) or 1.0
        lines = [f"{len(self.stages)} stage(s) of at most {self.max_stages}; costs {self.cost_source}"]
        for stage in self.stages:
            first, last = stage.nodes[0], stage.nodes[-1]
            lines.append(f"  stage {stage.index}: {len(stage.nodes)} nodes ({first} .. {last}), "
                         f"{stage.cost_seconds * 1e3:.3f} ms ({100 * stage.cost_seconds / total:.0f}%)")
            if stage.index + 1 < len(self.stages):
                cut = self.boundaries[stage.index + 1]
                names = ", ".join(f"{t.name}{list(t.shape)}" for t in cut.tensors)
                lines.append(f"    cut {stage.index}|{stage.index + 1}: {cut.nbytes} bytes: {names}")
        return "\n".join(lines)

    def save(self, directory: str | os.PathLike) -> list[str]:
        """Writes stage_<k>.onnx per stage and plan.json (boundaries, costs), each atomically; returns the paths."""
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        paths = []
        for stage in self.stages:
            path = os.path.join(directory, f"stage_{stage.index}.onnx")
            save(stage.model, path)
            paths.append(path)
        summary = {
            "cost_source": self.cost_source,
            "max_stages": self.max_stages,
            "stages": [{"model": os.path.basename(path), "nodes": list(stage.nodes), "inputs": list(stage.inputs),
                        "outputs": list(stage.outputs), "cost_seconds": stage.cost_seconds}
                       for stage, path in zip(self.stages, paths)],
            "boundaries": [[dataclasses.asdict(tensor) for tensor in boundary.tensors]
                           for boundary in self.boundaries],
        }
        path = os.path.join(directory, "plan.json")
        temporary = path + ".tmp"
        with open(temporary, "w") as handle:
            json.dump(summary, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
        return paths + [path]
