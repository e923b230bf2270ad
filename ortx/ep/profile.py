"""Per-segment wall times of a compiled model: where a run's time goes across CPU, devices and ORT sub-sessions.

Each plan step (one segment) is timed around its call in ExecutionPlan.run (`segment_seconds`), over `runs` runs
after one warm-up; the median per segment is reported. Segments that run concurrently on other device lanes are
timed on their own threads, so the times of a wave may add up to more than the run's wall time.
"""
from __future__ import annotations

import collections
import dataclasses
import statistics

from ortx.ep.partition import ORT
from ortx.ep.runtime import ClaimedStep, DeviceStep, MAIN_LANE


@dataclasses.dataclass(frozen=True)
class SegmentTime:
    index: int  # the plan step (= segment) index
    device: str  # "cpu", another device's name, or "ORT"
    nodes: tuple[str, ...]  # the compiled graph's nodes in the segment
    median_ms: float


def _device(step) -> str:
    if isinstance(step, DeviceStep):
        return step.device
    return MAIN_LANE if isinstance(step, ClaimedStep) else ORT


def segment_times(compiled, feeds: dict, *, runs: int = 10) -> list[SegmentTime]:
    """`compiled`: a pipeline.CompiledModel; `feeds`: checked inputs of its shapes."""
    if runs < 1:
        raise ValueError(f"segment_times: runs must be >= 1, got {runs}")
    plan = compiled.plan
    nodes: dict[int, list[str]] = collections.defaultdict(list)
    graph = getattr(compiled.assignment, "graph", None)
    for name, _, _, segment in (graph.nodes if graph is not None else ()):
        nodes[segment].append(name)
    samples: dict[int, list[float]] = collections.defaultdict(list)
    for run in range(runs + 1):
        seconds: dict[int, float] = {}
        plan.run(feeds, segment_seconds=seconds)
        if run:  # the first run warms up
            for index, value in seconds.items():
                samples[index].append(value)
    return [SegmentTime(index, _device(step), tuple(nodes.get(index, ())),
                        1e3 * statistics.median(samples[index]) if samples[index] else 0.0)
            for index, step in enumerate(plan.steps)]
