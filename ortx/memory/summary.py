"""Memory report of one model at fixed input shapes: what a naive runtime, an ORT-style planner and ortx need.

1. naive_bytes: one buffer per activation tensor (every node output that is not a graph output) of the
   specialised, optimised model; graph inputs and outputs are the caller's buffers and are left out everywhere.
2. ort_style_bytes: a model of ONNX Runtime's planner: nodes in order, each output takes a freed buffer of
   exactly its size if one exists (ORT reuses same-size buffers after their last use), else a new one; inputs
   are freed after the node that last reads them. ORT's own in-place rules and its BFC arena's rounding and
   fragmentation are not modelled, so this is an estimate of ORT's planned bytes, not of its RSS.
3. planned_bytes: the ortx session arena (boundary tensors between segments + each claimed segment's arena, see
   ortx.ep.runtime), lower_bound_bytes: the most bytes live at once over every ortx arena buffer on one timeline
   (a claimed segment's steps are spread over its slot), after in-place merging.
4. in_place_bytes_saved: per segment, the arena planned without reuse minus the arena with it, summed.
5. The ortx arena also holds the kernels' scratch (im2col planes, packing buffers: builder.workspace), which ORT's
   kernels allocate outside its planner, so 2 has no such bytes: workspace_peak_bytes is the most scratch live at
   once, and activation_lower_bound_bytes the lower bound over graph tensors alone (before in-place merging), the
   number to hold against 2.
Limits: tensors whose shape stays dynamic after specialisation are left out of 1 and 2 (counted in
`dynamic_tensors`).
"""
from __future__ import annotations

import dataclasses
import json

import onnxruntime

from ortx import pipeline
from ortx.ep.lowering._values import NotStatic, size_bytes
from ortx.ep.runtime import ClaimedStep
from ortx.ep.specialize import specialize
from ortx.memory.lifetimes import Lifetime, lower_bound_bytes
from ortx.memory.plan import MemoryPlan, plan_offsets


@dataclasses.dataclass(frozen=True)
class SegmentMemory:
    """One claimed segment: its arena, where each buffer lives in it, and what reuse saved."""

    name: str  # the arena's name in the session plan, e.g. "segment0.arena"
    session_offset: int  # where this arena starts in the session arena
    arena_bytes: int
    lower_bound_bytes: int
    without_in_place_bytes: int
    algorithm: str
    tensors: tuple  # ortx.ep.segment_builder.TensorPlacement
    in_place: tuple  # ortx.ep.segment_builder.InPlaceListing
    plan: MemoryPlan

    def to_dict(self) -> dict:
        return {
            "name": self.name, "session_offset": self.session_offset, "arena_bytes": self.arena_bytes,
            "lower_bound_bytes": self.lower_bound_bytes, "without_in_place_bytes": self.without_in_place_bytes,
            "algorithm": self.algorithm,
            "tensors": [dataclasses.asdict(t) for t in self.tensors],
            "in_place": [dataclasses.asdict(r) for r in self.in_place],
        }


@dataclasses.dataclass(frozen=True)
class MemoryReport:
    naive_bytes: int
    ort_style_bytes: int
    planned_bytes: int
    lower_bound_bytes: int
    in_place_bytes_saved: int
    boundary_offsets: dict  # tensor name -> offset in the session arena (tensors between segments)
    segments: tuple[SegmentMemory, ...]
    session_plan: MemoryPlan
    dynamic_tensors: int = 0
    workspace_peak_bytes: int = 0
    activation_lower_bound_bytes: int = 0

    @property
    def ratio_to_lower_bound(self) -> float:
        return self.planned_bytes / self.lower_bound_bytes if self.lower_bound_bytes else 1.0

    def to_dict(self) -> dict:
        return {
            "naive_bytes": self.naive_bytes, "ort_style_bytes": self.ort_style_bytes,
            "planned_bytes": self.planned_bytes, "lower_bound_bytes": self.lower_bound_bytes,
            "in_place_bytes_saved": self.in_place_bytes_saved, "ratio_to_lower_bound": self.ratio_to_lower_bound,
            "dynamic_tensors": self.dynamic_tensors, "boundary_offsets": dict(self.boundary_offsets),
            "workspace_peak_bytes": self.workspace_peak_bytes,
            "activation_lower_bound_bytes": self.activation_lower_bound_bytes,
            "segments": [segment.to_dict() for segment in self.segments],
        }

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def table(self) -> str:
        def mib(nbytes: int) -> str:
            return f"{nbytes / 2 ** 20:10.3f} MiB"

        lines = [
            f"naive (one buffer per tensor)   {mib(self.naive_bytes)}",
            f"ORT-style same-size reuse       {mib(self.ort_style_bytes)}  (graph tensors only)",
            f"ortx plan                       {mib(self.planned_bytes)}  ({self.ratio_to_lower_bound:.3f} x lower "
            "bound; graph tensors and kernel scratch)",
            f"lower bound (most bytes live)   {mib(self.lower_bound_bytes)}",
            f"  graph tensors alone           {mib(self.activation_lower_bound_bytes)}",
            f"  kernel scratch (most at once) {mib(self.workspace_peak_bytes)}",
            f"saved by in-place reuse         {mib(self.in_place_bytes_saved)}",
        ]
        for segment in self.segments:
            lines.append(f"{segment.name}: arena {segment.arena_bytes} B at {segment.session_offset}, lower bound "
                         f"{segment.lower_bound_bytes} B, {len(segment.tensors)} buffers, {len(segment.in_place)} "
                         f"in place, by {segment.algorithm}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _activations(model) -> tuple[list, set[str], int]:
    """(nodes as (input names, [(output name, bytes)]), graph output names, count of dynamic tensors)."""
    outside = {value.name for value in model.graph.outputs} | {value.name for value in model.graph.inputs}
    nodes, dynamic = [], 0
    for node in model.graph:
        outputs = []
        for value in node.outputs:
            if value.name in outside or not value.name:
                continue
            try:
                outputs.append((value.name, size_bytes(value)))
            except (NotStatic, TypeError, ValueError):
                dynamic += 1
        nodes.append(([value.name for value in node.inputs if value is not None], outputs))
    return nodes, outside, dynamic


def ort_style_bytes(nodes) -> int:
    """Same-size reuse after last use (see the module docstring, step 2)."""
    last_use: dict[str, int] = {}
    for position, (inputs, _) in enumerate(nodes):
        for name in inputs:
            last_use[name] = position
    sizes: dict[str, int] = {}
    free: dict[int, int] = {}  # size -> free buffers of that size
    total = 0
    for position, (inputs, outputs) in enumerate(nodes):
        for name, nbytes in outputs:
            sizes[name] = nbytes
            if free.get(nbytes):
                free[nbytes] -= 1
            else:
                total += nbytes
        for name, nbytes in outputs:
            if name not in last_use:  # never read: freed at once
                free[nbytes] = free.get(nbytes, 0) + 1
        for name in set(inputs):
            if name in sizes and last_use.get(name) == position:
                free[sizes[name]] = free.get(sizes[name], 0) + 1
    return total


def _session_slots(plan) -> list[tuple[int, int]]:
    """(first step, step count) of each plan step on one session timeline (a claimed segment spans its steps)."""
    slots, time = [], 0
    for step in plan.steps:
        length = max(step.program.program.num_steps, 1) if isinstance(step, ClaimedStep) else 1
        slots.append((time, length))
        time += length
    return slots


def _boundary_lifetimes(plan, slots) -> list[Lifetime]:
    session_lifetimes = {t.name: t for t in plan.memory_plan.lifetimes}
    lifetimes = []
    for name in plan.boundary:
        item = session_lifetimes[name]
        lifetimes.append(Lifetime(name, item.nbytes, slots[item.first][0],
                                  slots[item.last][0] + slots[item.last][1] - 1))
    return lifetimes


def session_lower_bound_bytes(plan) -> int:
    """Lower bound over boundary tensors and every segment buffer on one timeline."""
    slots = _session_slots(plan)
    lifetimes = _boundary_lifetimes(plan, slots)
    for position, step in enumerate(plan.steps):
        if isinstance(step, ClaimedStep):
            start = slots[position][0]
            lifetimes += [Lifetime(f"{position}:{t.name}", t.nbytes, start + t.first, start + t.last)
                          for t in step.program.plan.lifetimes]
    return lower_bound_bytes(lifetimes)


def session_split_bounds(plan) -> tuple[int, int]:
    """(graph tensors' lower bound, most kernel scratch live at once) on the session timeline, from each segment's
    buffers before in-place merging."""
    slots = _session_slots(plan)
    tensors, scratch = _boundary_lifetimes(plan, slots), []
    for position, step in enumerate(plan.steps):
        if isinstance(step, ClaimedStep):
            start = slots[position][0]
            # a Concat input planned inside its output lives in the output's bytes: the output's span covers both
            spans = {}
            for t in step.program.tensors:
                if t.within:
                    first, last = spans.get(t.within, (t.first, t.last))
                    spans[t.within] = (min(first, t.first), max(last, t.last))
            for index, t in enumerate(step.program.tensors):
                if t.within:
                    continue
                first, last = spans.get(t.label, (t.first, t.last))
                first, last = min(first, t.first), max(last, t.last)
                item = Lifetime(f"{position}:{index}", t.nbytes, start + first, start + last)
                (scratch if t.workspace else tensors).append(item)
    return lower_bound_bytes(tensors), lower_bound_bytes(scratch)


def report(model, input_shapes: dict[str, tuple[int, ...]], *, num_threads: int = 1) -> MemoryReport:
    """`model`: a path, bytes or ModelProto. Compiles it as an OrtxEP session would (same passes and partition)."""
    prepared = pipeline.prepare(model)
    ort = pipeline.OrtSettings(onnxruntime.SessionOptions(), ["CPUExecutionProvider"], [{}])
    compiled = pipeline.compile_for_shapes(prepared, dict(input_shapes), ort, num_threads=num_threads)
    nodes, _, dynamic = _activations(specialize(prepared.model, dict(input_shapes)))
    plan = compiled.plan
    segments = []
    for step in plan.steps:
        if not isinstance(step, ClaimedStep):
            continue
        program = step.program
        without = plan_offsets(program.buffer_lifetimes).arena_bytes if program.in_place else program.arena_bytes
        segments.append(SegmentMemory(step.arena_name, plan.memory_plan.offsets[step.arena_name],
                                      program.arena_bytes, program.plan.lower_bound_bytes, without,
                                      program.plan.algorithm, program.tensors, program.in_place, program.plan))
    activation_bound, scratch_peak = session_split_bounds(plan)
    return MemoryReport(
        naive_bytes=sum(nbytes for _, outputs in nodes for _, nbytes in outputs),
        ort_style_bytes=ort_style_bytes(nodes),
        planned_bytes=plan.memory_plan.arena_bytes,
        lower_bound_bytes=session_lower_bound_bytes(plan),
        in_place_bytes_saved=sum(s.without_in_place_bytes - s.arena_bytes for s in segments),
        boundary_offsets={name: plan.memory_plan.offsets[name] for name in plan.boundary},
        segments=tuple(segments),
        session_plan=plan.memory_plan,
        dynamic_tensors=dynamic,
        workspace_peak_bytes=scratch_peak,
        activation_lower_bound_bytes=activation_bound,
    )
