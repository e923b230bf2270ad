"""SessionOptions.enable_profiling for OrtxEP sessions: onnxruntime's profile file, with OrtxEP's kernels in it.

onnxruntime writes a Chrome trace (a JSON list of "X" events, microseconds since profiling began) with one
"model_run" Session event per run and one "<node>_kernel_time" Node event per node, args op_name and provider;
`end_profiling()` writes it to `<profile_file_prefix>_<date>_<time>.json` and returns the path. This module
writes the same file for an OrtxEP session, so tools that read ORT's profiles (chrome://tracing, Perfetto, scripts
that sum kernel times per op) read OrtxEP's:
1. Each run is timed as a whole and per plan step (ExecutionPlan.run's segment_seconds); a JIT'd or interpreted
   CPU segment also per kernel step (step_seconds, keyed by the compiled node's name).
2. Events: "model_run" per run; per kernel step a Node event named after the compiled node (a fused node's args
   list the user's nodes it replaced, `fused_from`) with op_name, provider "OrtxEP", the kernel (a node of several
   kernel steps: their kernels joined by "+", as a reorder and the blocked conv that reads it) and the device;
   an ORT segment or a device segment is one Node event for the whole segment.
Limits: step timestamps are laid out back to back from the segment's start (the kernels report durations, not
start times), and segments from the run's start in plan order, so concurrent device lanes appear one after another.
"""
from __future__ import annotations

import datetime
import json
import os
import time

from ortx.ep.runtime import ClaimedStep, DeviceStep
from ortx.model_io import write_bytes_atomically

DEFAULT_PREFIX = "onnxruntime_profile_"  # onnxruntime's default profile_file_prefix


class RunTrace:
    """Collects a session's profiling events from the first run to end_profiling()."""

    def __init__(self, prefix: str | None):
        self.prefix = prefix or DEFAULT_PREFIX
        self.start_ns = time.time_ns()
        self._origin = time.perf_counter()
        self.events: list[dict] = []

    def run(self, compiled, feeds: dict, run_options=None, outputs: dict | None = None) -> dict:
        """Runs `compiled.plan` once, timed, and records its events; returns the plan's outputs."""
        steps, segments = {}, {}
        start = time.perf_counter()
        results = compiled.plan.run(feeds, run_options, step_seconds=steps, outputs=outputs,
                                    segment_seconds=segments)
        end = time.perf_counter()
        self._record(compiled, start, end, steps, segments)
        return results

    def _record(self, compiled, start: float, end: float, steps: dict, segments: dict) -> None:
        run_us = (start - self._origin) * 1e6
        pid, tid = os.getpid(), 0
        self.events.append({"cat": "Session", "pid": pid, "tid": tid, "dur": round((end - start) * 1e6),
                            "ts": round(run_us), "ph": "X", "name": "model_run", "args": {}})
        nodes = _compiled_nodes(compiled)
        cursor = run_us
        for position, step in enumerate(compiled.plan.steps):
            seconds = segments.get(position, 0.0)
            if isinstance(step, ClaimedStep):
                inner = cursor
                kernels: dict[str, list[str]] = {}  # a node's kernel steps, in order (a reorder and its conv, say)
                for listing in step.program.steps:
                    names = kernels.setdefault(listing.node, [])
                    if listing.kernel not in names:
                        names.append(listing.kernel)
                for listing in step.program.steps:
                    duration = steps.pop(listing.node, None)
                    if duration is None:  # a node with several kernel steps is counted once, at its first
                        continue
                    self.events.append(_node_event(pid, tid, inner, duration, listing.node, nodes, "OrtxEP",
                                                   {"kernel": "+".join(kernels[listing.node]), "device": "cpu"}))
                    inner += duration * 1e6
            else:
                device = step.device if isinstance(step, DeviceStep) else ""
                provider = "OrtxEP" if device else "CPUExecutionProvider"
                name = f"segment_{position}"
                self.events.append({"cat": "Node", "pid": pid, "tid": tid, "dur": round(seconds * 1e6),
                                    "ts": round(cursor), "ph": "X", "name": f"{name}_kernel_time",
                                    "args": {"op_name": f"{device or 'ORT'} segment", "provider": provider,
                                             "device": device or "ORT"}})
            cursor += seconds * 1e6

    def write(self) -> str:
        """Writes the trace (onnxruntime's file name pattern) and returns its path."""
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        path = f"{self.prefix}_{stamp}.json"
        write_bytes_atomically(path, json.dumps(self.events, indent=0).encode(), suffix=".json.tmp")
        return path


def _compiled_nodes(compiled) -> dict[str, tuple[str, str]]:
    """Compiled node name -> (op type, the user's nodes it replaced), from the partition graph."""
    graph = getattr(compiled.assignment, "graph", None)
    if graph is None:
        return {}
    fused_from = dict(graph.fused_from)
    return {name: (op_type, fused_from.get(name, "")) for name, op_type, _, _ in graph.nodes}


def _node_event(pid: int, tid: int, start_us: float, seconds: float, node: str, nodes: dict, provider: str,
                extra: dict) -> dict:
    op_type, fused_from = nodes.get(node, ("", ""))
    args = {"op_name": op_type, "provider": provider, **extra}
    if fused_from:
        args["fused_from"] = fused_from
    return {"cat": "Node", "pid": pid, "tid": tid, "dur": round(seconds * 1e6), "ts": round(start_us), "ph": "X",
            "name": f"{node}_kernel_time", "args": args}
