"""Per-node cost of one micro-batch, for balancing pipeline stages.

measured_costs: what the stages will run, timed at 1 intra-op thread (a stage's default): the split graph compiled
through ortx's data path (ortx.pipeline.compile_for_shapes, as ortx.InferenceSession does) and run with its
per-step timings; a fused step's time goes to the node it is named after (its fused partners cost 0). Nodes that
OrtxEP leaves to ORT are timed by onnxruntime's profiler (graph optimizations off, so every profiled kernel is one
of our nodes by name). Each node's fastest of `runs` runs after one warm-up: on a shared host other processes
only ever add time (medians of 5 runs at host load 5-6 put ResNet-18-style's chosen cut at 47/53 in one split and
44/56, another cut, in the next). estimated_costs (no sample inputs): MACs at ESTIMATED_MACS_PER_SECOND for
Conv/Gemm/MatMul, output bytes at ESTIMATED_BYTES_PER_SECOND for the rest. Only the ratios between stages matter
for the balance; the seconds are also compared with cut copy times (ortx.parallel.cuts).
"""
from __future__ import annotations

import collections
import json
import logging
import os
import tempfile

import numpy as np
import onnx_ir as ir
import onnxruntime

from ortx.ep.macs import node_macs
from ortx.model_io import to_ort_bytes

logger = logging.getLogger(__name__)

# About half of one Zen 4 core's fp32 FMA peak (224 GFLOP/s for two cores = 56 G MAC/s each), what ortx's and
# ORT's convolutions reach on ResNet-style layers at 1 thread.
ESTIMATED_MACS_PER_SECOND = 25e9
# Elementwise and data-movement ops are bound by memory: a few GB/s of output written per core.
ESTIMATED_BYTES_PER_SECOND = 5e9
PROFILE_RUNS = 5


def estimated_costs(model: ir.Model) -> dict[str, float]:
    costs = {}
    for node in model.graph:
        macs = node_macs(node)
        written = sum(_nbytes(value) for value in node.outputs)
        costs[node.name] = macs / ESTIMATED_MACS_PER_SECOND if macs else written / ESTIMATED_BYTES_PER_SECOND
    return costs


def _nbytes(value: ir.Value) -> int:
    if value.shape is None or value.dtype is None or not all(isinstance(dim, int) for dim in value.shape):
        return 0
    return int(np.prod(tuple(value.shape), dtype=np.int64)) * value.dtype.itemsize


def measured_costs(model: ir.Model, sample_inputs: dict[str, np.ndarray], *, runs: int = PROFILE_RUNS
                   ) -> dict[str, float]:
    """Seconds per node of `model` (static shapes) on `sample_inputs`, the fastest of `runs` runs."""
    step_seconds, on_ort = ortx_step_costs(model, sample_inputs, runs=runs)
    profiled = ort_profile_costs(model, sample_inputs, runs=runs) if on_ort else {}
    return {node.name: profiled.get(node.name, 0.0) if node.name in on_ort else step_seconds.get(node.name, 0.0)
            for node in model.graph}


def ortx_step_costs(model: ir.Model, sample_inputs: dict[str, np.ndarray], *, runs: int = PROFILE_RUNS
                    ) -> tuple[dict[str, float], set[str]]:
    """(fastest seconds per timed OrtxEP step, by node name; the nodes OrtxEP left to ORT)."""
    from ortx import pipeline
    from ortx.config import Options
    from ortx.ep.options import sub_session_options

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    prepared = pipeline.prepare_loaded(ir.serde.serialize_model(model))
    ort = pipeline.OrtSettings(sub_session_options(options, shares_cores_with_ortx=True), ["CPUExecutionProvider"],
                               [{}])
    shapes = {value.name: tuple(value.shape) for value in model.graph.inputs}
    compiled = pipeline.compile_for_shapes(prepared, shapes, ort, num_threads=1, jit=Options.from_environment())
    feeds = {name: np.ascontiguousarray(sample_inputs[name]) for name in shapes}
    samples: dict[str, list[float]] = collections.defaultdict(list)
    for run in range(runs + 1):
        seconds: dict[str, float] = {}
        compiled.plan.run(feeds, step_seconds=seconds)
        if run:  # the first run warms up
            for name, value in seconds.items():
                samples[name].append(value)
    on_ort = {row.name for row in compiled.assignment if row.provider not in ("OrtxEP", "(removed)")}
    return {name: min(values) for name, values in samples.items()}, on_ort


def ort_profile_costs(model: ir.Model, sample_inputs: dict[str, np.ndarray], *, runs: int = PROFILE_RUNS
                      ) -> dict[str, float]:
    """Fastest seconds per node over `runs` runs of onnxruntime's profiler; a node it never reports (none expected
    with optimizations off) costs 0 and is logged."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.enable_profiling = True
    with tempfile.TemporaryDirectory(prefix="ortx-split-") as directory:
        options.profile_file_prefix = os.path.join(directory, "profile")
        session = onnxruntime.InferenceSession(to_ort_bytes(model), options, providers=["CPUExecutionProvider"])
        feeds = {arg.name: sample_inputs[arg.name] for arg in session.get_inputs()}
        for _ in range(runs + 1):
            session.run(None, feeds)
        with open(session.end_profiling()) as handle:
            events = json.load(handle)
    durations: dict[str, list[float]] = collections.defaultdict(list)
    suffix = "_kernel_time"
    for event in events:
        if event.get("cat") == "Node" and event.get("name", "").endswith(suffix):
            durations[event["name"][:-len(suffix)]].append(event["dur"] * 1e-6)
    costs = {}
    for node in model.graph:
        times = durations.get(node.name, [])[1:]  # the first run warms up
        if not times:
            logger.info("split: the profiler reported no time for node %s (%s); cost 0", node.name, node.op_type)
        costs[node.name] = min(times) if times else 0.0
    return costs
