"""Reads an onnxruntime profile file (ORT's own or OrtxEP's, ortx.ep.trace) into per-node and per-op times.

1. Runs: the "model_run" Session events; the first `skip` runs are warm-up and left out.
2. Nodes: "<node>_kernel_time" Node events, matched to the run whose time span holds them; per node the median
   of its per-run totals (a node with several events in one run, e.g. ORT's, is summed within the run).
3. Groups: per op type or per OrtxEP kernel, the sum of their nodes' medians (how a run's time divides up).
Limits: events outside every kept run (session set-up, warm-up) are ignored; the medians of the parts need not add
up to the median run.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import statistics

KERNEL_SUFFIX = "_kernel_time"


@dataclasses.dataclass(frozen=True)
class NodeTime:
    name: str
    op_type: str
    provider: str
    kernel: str  # OrtxEP's kernel ("" for ORT's nodes and segments)
    fused_from: str  # the user's nodes an OrtxEP fused node replaced ("" when none)
    median_ms: float


@dataclasses.dataclass(frozen=True)
class TraceSummary:
    runs: int
    run_ms: float  # median of the kept runs' wall times
    nodes: tuple[NodeTime, ...]  # slowest first

    def by(self, field: str) -> list[tuple[str, float, int]]:
        """(value of `field`, summed median ms, node count) per distinct value, largest first."""
        total: dict[str, float] = collections.defaultdict(float)
        count: dict[str, int] = collections.defaultdict(int)
        for node in self.nodes:
            key = getattr(node, field) or "-"
            total[key] += node.median_ms
            count[key] += 1
        return sorted(((key, total[key], count[key]) for key in total), key=lambda row: -row[1])


def read_trace(path: str) -> list[dict]:
    with open(path) as stream:
        events = json.load(stream)
    if not isinstance(events, list):
        raise ValueError(f"{path}: not an onnxruntime profile (expected a JSON list of trace events)")
    return events


def summarize(events: list[dict], *, skip: int = 1) -> TraceSummary:
    runs = sorted((event for event in events if event.get("name") == "model_run"), key=lambda event: event["ts"])
    kept = runs[skip:] if len(runs) > skip else runs
    if not kept:
        raise ValueError("the profile has no model_run event: was the session run with enable_profiling on?")
    spans = [(event["ts"], event["ts"] + event["dur"]) for event in kept]
    per_run: dict[str, list[float]] = collections.defaultdict(lambda: [0.0] * len(kept))
    described: dict[str, dict] = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith(KERNEL_SUFFIX):
            continue
        run = next((index for index, (start, end) in enumerate(spans) if start <= event["ts"] <= end), None)
        if run is None:
            continue
        node = name[:-len(KERNEL_SUFFIX)]
        per_run[node][run] += event["dur"] / 1e3
        described.setdefault(node, event.get("args", {}))
    nodes = [NodeTime(node, str(args.get("op_name", "")), str(args.get("provider", "")), str(args.get("kernel", "")),
                      str(args.get("fused_from", "")), statistics.median(per_run[node]))
             for node, args in described.items()]
    nodes.sort(key=lambda node: -node.median_ms)
    return TraceSummary(len(kept), statistics.median(end - start for start, end in spans) / 1e3, tuple(nodes))
