"""Never slower than ORT: per claimed segment, OrtxEP's compiled code or ONNX Runtime, whichever measured faster here.

1. A segment's signature hashes, per node in order, its op, attributes and input/output shapes and dtypes, plus
   the thread count, and the kernel precision when it is not fp32 (ortx.ep.precision: a bf16 segment's time is
   not its fp32 time): what its time depends on. Weight values are left out on purpose (dense fp32 kernels take the
   same time for any values), so one record serves every model with the same layers.
2. Records live in the tuning database (ortx.tune.records) under this machine's fingerprint, template ENGINE_TEMPLATE,
   schedule {"engine": "ortx"} or {"engine": "ort"}, each with its median.
3. Modes: "off" measures nothing and reads nothing; "cached" (the default) decides from records only, and a segment
   without both records stays on OrtxEP; "quick" / "full" also measure what has no record (QUICK_RUNS / FULL_RUNS
   timed runs per engine after warm-up, interleaved in blocks like ortx.measure) and store both.
4. ORT's time is measured on the segment's standard-ONNX nodes (before ai.ortx fusions), in an ORT sub-session made
   by ortx.ep.fallback with the options the session gives its sub-sessions; inputs are seeded random values
   (floats in [-1, 1), integers in [0, 10)), never zeros.
5. A segment goes back to ORT only when ORT's median is below OrtxEP's by more than MARGIN: on a tie it stays.
   A measurement that says ORT is faster is confirmed by fresh processes first (ortx.tune.engine_confirm: there
   are periods in which OrtxEP at 2 threads runs ~1.45x slower); each engine's fastest measurement decides, here
   and from the records.
Limits: a segment is timed alone, not with its neighbours (boundary tensors, caches); a segment whose inputs are
not all numeric tensors, or that holds ai.ortx ops the user's model already had (ORT cannot run them), is never
measured and stays on OrtxEP.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import statistics
import time

import numpy as np
import onnx_ir as ir

from ortx.ep.fallback import OrtSegment, segment_model
from ortx.ep.precision import PRECISION_KEY
from ortx.ep.runtime import ClaimedStep, ExecutionPlan
from ortx.measure import BLOCK, switch_over
from ortx.tune import engine_confirm
from ortx.tune.fingerprint import HardwareFingerprint, kernels_build
from ortx.tune.records import TuningDatabase, TuningRecord

logger = logging.getLogger(__name__)

MODES = ("off", "cached", "quick", "full")
ORTX_DOMAIN = "ai.ortx"
ORTX_ONLY_NOTE = "runs only on OrtxEP"  # in the source of a segment ORT cannot run
ENGINE_TEMPLATE = f"engine-choice-1|kernels={kernels_build()}"  # a rebuild measures again
MARGIN = 0.02
QUICK_RUNS = 8
FULL_RUNS = 24


@dataclasses.dataclass(frozen=True)
class EngineChoice:
    """The decision for one claimed segment; times are None when nothing was measured or recorded."""

    first_node: str
    nodes: tuple[str, ...]  # the segment's node names in the compiled graph
    original_nodes: frozenset[str]  # the nodes they stand for in the graph before ai.ortx fusions
    signature: str
    engine: str  # "ortx" or "ort"
    ortx_ms: float | None
    ort_ms: float | None
    source: str  # "measured", "measured in N processes" (confirmed), "records", or "no records"

    @property
    def describe(self) -> str:
        if self.ortx_ms is None or self.ort_ms is None:
            return f"{self.source}: stays on OrtxEP"
        return f"OrtxEP {self.ortx_ms:.3f} ms vs ORT {self.ort_ms:.3f} ms ({self.source})"


def _attribute_text(attribute: ir.Attr) -> str:
    value = attribute.value
    if isinstance(value, ir.TensorProtocol):
        array = value.numpy()
        return f"tensor{array.shape}:{array.dtype}:{hashlib.sha256(array.tobytes()).hexdigest()[:16]}"
    return repr(value)


def _value_text(value: ir.Value | None) -> str:
    if value is None:
        return "-"
    return f"{value.dtype}{list(value.shape) if value.shape is not None else '?'}"


def segment_signature(nodes, num_threads: int, precision: str = "fp32") -> str:
    digest = hashlib.sha256(f"threads={num_threads}".encode())
    if precision != "fp32":  # fp32 signatures stay as they were recorded before the option existed
        digest.update(f"|precision={precision}".encode())
    for node in nodes:
        attributes = ",".join(f"{name}={_attribute_text(attribute)}" for name, attribute in sorted(node.attributes.items()))
        digest.update(f"|{node.domain}::{node.op_type}({attributes})".encode())
        if node.metadata_props.get(PRECISION_KEY):  # provider option fp32_nodes: another program
            digest.update(f" precision={node.metadata_props[PRECISION_KEY]}".encode())
        digest.update((" in " + " ".join(_value_text(v) for v in node.inputs)).encode())
        digest.update((" out " + " ".join(_value_text(v) for v in node.outputs)).encode())
    return digest.hexdigest()


def standard_index(standard_model: ir.Model, fused_from_key: str) -> dict[str, tuple[ir.Node, ...]]:
    """Name -> (node,) for the graph before OrtxEP's own fusions, plus each original node name that a graph pass
    already fused -> the standard nodes holding it (from their fused_from). Fused nodes' fused_from name the user's
    original nodes (nested fusions expanded): e.g. a FusedConv from Conv@0,...,Div@0,Mul@0,Clip@0,Add@0, whose
    hardswish fuse_hardswish had already made into node_HardSigmoid_1 and node_Mul_2 (both fused_from
    Div@0,Mul@0,Clip@0,Add@0), stands for Conv@0 and both of those."""
    holders: dict[str, list[ir.Node]] = {}
    for node in standard_model.graph:
        for original in node.metadata_props.get(fused_from_key, "").split(","):
            if original:
                holders.setdefault(original, []).append(node)
    index = {original: tuple(nodes) for original, nodes in holders.items()}
    index.update({node.name: (node,) for node in standard_model.graph})
    return index


def standard_names(node: ir.Node, standard: dict[str, tuple[ir.Node, ...]], fused_from_key: str) -> list[str]:
    """The nodes of the graph before OrtxEP's own fusions that `node` stands for (`standard`: standard_index):
    itself (when it is there as the same op, e.g. an ai.ortx op the user's model already had), or the nodes the
    fusion replaced."""
    before = standard.get(node.name, (None,))[0]
    if before is not None and before.name == node.name and (before.domain, before.op_type) == (node.domain,
                                                                                                  node.op_type):
        return [node.name]
    fused = list(dict.fromkeys(holder.name for name in node.metadata_props.get(fused_from_key, "").split(",")
                               for holder in standard.get(name, ())))
    if not fused:
        raise ValueError(f"node {node.name!r} ({node.op_type}) is in neither the standard graph nor its fused_from")
    return fused


def _random_feeds(plan_tensors: dict, names: list[str], seed: int) -> dict[str, np.ndarray] | None:
    rng = np.random.default_rng(seed)
    feeds = {}
    for name in names:
        spec = plan_tensors.get(name)
        if spec is None or spec.shape is None or spec.dtype is None:
            return None
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            feeds[name] = rng.uniform(-1.0, 1.0, spec.shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[name] = rng.integers(0, 10, spec.shape).astype(dtype)
        else:
            return None
    return feeds


def median_ms(run, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def _measure(step: ClaimedStep, plan: ExecutionPlan, sub_model, ort_settings, runs: int, *,
             only_step: bool | None = None) -> tuple[float, float] | None:
    """(OrtxEP ms, ORT ms) of one segment, or None when its inputs cannot be made up. `sub_model`: its standard
    nodes as a model (ORT runs it). `only_step`: the segment is its model's only step (default: `plan`'s)."""
    feeds = _random_feeds(plan.tensors, step.inputs, seed=0)
    if feeds is None:
        return None
    alone = ExecutionPlan([step], plan.tensors, list(step.inputs), list(step.outputs), plan.num_threads,
                          plan.use_reference_kernels)
    # given back, ORT would run the whole model: its threads may spin
    alone_in_plan = len(plan.steps) == 1 if only_step is None else only_step
    ort = OrtSegment(sub_model, ort_settings.options_for(not alone_in_plan), ort_settings.providers,
                     ort_settings.provider_options)

    def run_ort():
        ort.run(dict(feeds), {})

    def run_ortx():
        alone.run(feeds)

    for _ in range(2):  # warm-up: first-run allocations, page faults, thread start
        run_ort()
        run_ortx()
    ortx_times, ort_times = [], []
    while len(ortx_times) < runs:
        count = min(BLOCK, runs - len(ortx_times))
        for run, medians in ((run_ort, ort_times), (run_ortx, ortx_times)):
            switch_over(run)
            medians.append(median_ms(run, count))
    return statistics.median(ortx_times), statistics.median(ort_times)


def choose_engines(compiled_plan: ExecutionPlan, model: ir.Model, standard_model: ir.Model, *, mode: str,
                   database: TuningDatabase | None, fingerprint: HardwareFingerprint | None, ort_settings,
                   fused_from_key: str) -> list[EngineChoice]:
    """One EngineChoice per claimed step of `compiled_plan` (compiled from `model`). `standard_model`: the same
    specialised graph before ai.ortx fusions (ORT is measured on it; given-back nodes are named in it).
    `database` None: nothing is read or stored (then `fingerprint` may be None too)."""
    if mode not in MODES:
        raise ValueError(f"OrtxEP option tuning: {mode!r} is not one of {', '.join(MODES)}")
    if mode == "off":
        return []
    nodes_by_name = {node.name: node for node in model.graph}
    standard_order = {node.name: position for position, node in enumerate(standard_model.graph)}
    standard = standard_index(standard_model, fused_from_key)
    standard_proto = ir.serde.serialize_model(standard_model) if mode != "cached" else None
    if database is not None and fingerprint is not None:
        database.add_fingerprint(fingerprint)
    choices = []
    for step in compiled_plan.steps:
        if not isinstance(step, ClaimedStep):
            continue
        nodes = [nodes_by_name[name] for name in step.node_names]
        names = tuple(step.node_names)
        original = sorted({name for node in nodes for name in standard_names(node, standard, fused_from_key)},
                          key=standard_order.__getitem__)
        precision = "bf16" if any(s.kernel.endswith("_bf16") for s in step.program.steps) else "fp32"
        signature = segment_signature(nodes, compiled_plan.num_threads, precision)
        times = _recorded(database, signature, fingerprint)
        source = "records" if times else "no records"
        ortx_only = sorted({standard[name][0].op_type for name in original
                            if standard[name][0].domain == ORTX_DOMAIN})
        if ortx_only:  # ORT cannot run these: the segment stays on OrtxEP whatever was recorded
            times, source = None, f"{', '.join(ortx_only)} {ORTX_ONLY_NOTE}"
        elif times is None and mode in ("quick", "full") and standard_proto is not None:
            runs = QUICK_RUNS if mode == "quick" else FULL_RUNS
            sub_model = segment_model(standard_proto, original, list(step.inputs), list(step.outputs))
            measured = _measure(step, compiled_plan, sub_model, ort_settings, runs)
            if measured is not None:
                measurements = [(measured, f"engine_choice:{mode}")]
                shapes = {name: tuple(compiled_plan.tensors[name].shape) for name in step.inputs}
                while _goes_back(_fastest(measurements)) and len(measurements) <= engine_confirm.CONFIRM_PROCESSES:
                    again = engine_confirm.measure_in_fresh_process(
                        sub_model, shapes, threads=compiled_plan.num_threads, runs=runs, precision=precision,
                        only_step=len(compiled_plan.steps) == 1)
                    if again is None:
                        break
                    measurements.append((again, "engine_choice:confirm"))
                times = _fastest(measurements)
                source = "measured" if len(measurements) == 1 else f"measured in {len(measurements)} processes"
                if database is not None and fingerprint is not None:
                    for pair, origin in measurements:
                        for engine, median in zip(("ortx", "ort"), pair):
                            database.add(TuningRecord(signature, fingerprint.key, ENGINE_TEMPLATE,
                                                      {"engine": engine}, "ok", median, source=origin))
        ortx_ms, ort_ms = times if times else (None, None)
        engine = "ort" if times and _goes_back(times) else "ortx"
        choices.append(EngineChoice(names[0] if names else step.arena_name, names, frozenset(original), signature,
                                    engine, ortx_ms, ort_ms, source))
        logger.info("OrtxEP segment at %s: %s -> %s", choices[-1].first_node, choices[-1].describe, engine)
    return choices


def _goes_back(times: tuple[float, float]) -> bool:
    """(OrtxEP ms, ORT ms): ORT faster by more than MARGIN."""
    return times[1] < times[0] * (1 - MARGIN)


def _fastest(measurements) -> tuple[float, float]:
    """Each engine's fastest median over [((OrtxEP ms, ORT ms), origin), ...], as _recorded reads the records."""
    return min(pair[0] for pair, _ in measurements), min(pair[1] for pair, _ in measurements)


def _recorded(database: TuningDatabase | None, signature: str, fingerprint: HardwareFingerprint | None):
    if database is None or fingerprint is None:
        return None
    medians = {}
    for engine in ("ortx", "ort"):
        best = min((r.median_ms for r in database.records(signature, fingerprint.key, ENGINE_TEMPLATE)
                    if r.status == "ok" and r.schedule == {"engine": engine}), default=None)
        if best is None:
            return None
        medians[engine] = best
    return medians["ortx"], medians["ort"]
