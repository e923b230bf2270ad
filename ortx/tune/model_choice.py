"""Never slower than ORT, for the model as a whole: the tuned OrtxEP plan against ONNX Runtime running every node.

Why: ortx.tune.engine_choice decides per claimed segment, each timed alone against ORT on the same nodes, and the
assembled plan can still lose to ORT running the whole model (the segments' boundary tensors, ORT's own fusions
across the nodes OrtxEP splits, what a segment's neighbours leave in the caches): session 37's light GoogLeNet,
its LRNs then on ORT, stayed 1.10x ORT after `ortx tune` although every one of its segments measured faster alone.
1. `ortx tune` ends by timing the plan it tuned against the same model compiled with nothing claimed (one ORT
   session of the whole specialized graph, as a session that gave every segment back would run it): interleaved
   blocks after a switch-over idle (ortx.measure), medians. A result that says ORT is faster by more than MARGIN is
   confirmed by CONFIRM_PROCESSES fresh processes (ortx.tune.engine_confirm --whole-model; about one process in
   four starts in a period where OrtxEP's 2 threads run ~1.45x slow, see engine_confirm), and the fastest
   median of each engine over the measurements is recorded as one pair.
2. Records: the model's signature (engine_choice.segment_signature over every node of the specialized graph before
   ai.ortx fusions, behind a "model|" prefix, with the thread count and the kernels' precision), template
   MODEL_TEMPLATE, schedule {"engine": "ortx"} and {"engine": "ort"}; the latest pair decides, since a later
   `ortx tune` may have changed the plan it measured.
3. Sessions with tuning "cached", "quick" or "full" read that pair after their per-segment choices and, where ORT
   was faster by more than MARGIN, give every claimed segment back (sess.assignment shows both times). Not when a
   segment holds ai.ortx ops the user's model already had (ORT cannot run them).
Limits: the check times the model as tuned on this machine; records from before a rebuild of the kernels do not
apply (the template holds the build), and a model's plan changed by options other than the thread count and
precision (fp32_nodes, bf16_compute) shares its signature.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import statistics

import onnx_ir as ir

from ortx.ep.runtime import ExecutionPlan
from ortx.measure import BLOCK, switch_over
from ortx.tune import engine_choice
from ortx.tune.fingerprint import HardwareFingerprint, kernels_build
from ortx.tune.records import TuningDatabase, TuningRecord

logger = logging.getLogger(__name__)

MODEL_TEMPLATE = f"engine-choice-model-1|kernels={kernels_build()}"  # a rebuild measures again
MARGIN = engine_choice.MARGIN
RUNS = {"quick": 12, "full": 30}  # timed runs per engine (blocks of ortx.measure.BLOCK)
CONFIRM_PROCESSES = 2


@dataclasses.dataclass(frozen=True)
class ModelChoice:
    """The whole-model decision: times None when nothing was measured or recorded."""

    signature: str
    engine: str  # "ortx" or "ort"
    ortx_ms: float | None
    ort_ms: float | None
    source: str  # "measured", "measured in N processes", "records", "no records", or why it was not measured

    @property
    def times(self) -> tuple[float, float]:
        return self.ortx_ms, self.ort_ms

    @property
    def describe(self) -> str:
        if self.ortx_ms is None or self.ort_ms is None:
            return f"whole model against ORT: {self.source}"
        verdict = "ORT runs it all" if self.engine == "ort" else "OrtxEP kept"
        return (f"whole model: OrtxEP {self.ortx_ms:.3f} ms vs ORT {self.ort_ms:.3f} ms ({self.source}): "
                f"{verdict}")


def model_signature(standard_model: ir.Model, num_threads: int, precision: str = "fp32") -> str:
    nodes_hash = engine_choice.segment_signature(list(standard_model.graph), num_threads, precision)
    return hashlib.sha256(f"model|{nodes_hash}".encode()).hexdigest()


def goes_back(times: tuple[float, float]) -> bool:
    """(OrtxEP ms, ORT ms): ORT faster by more than MARGIN."""
    return times[1] < times[0] * (1 - MARGIN)


def recorded(database: TuningDatabase | None, fingerprint: HardwareFingerprint | None,
             signature: str) -> tuple[float, float] | None:
    """(OrtxEP ms, ORT ms) of the latest recorded pair, or None."""
    if database is None or fingerprint is None:
        return None
    latest: dict[str, float] = {}
    for record in database.records(signature, fingerprint.key, MODEL_TEMPLATE):  # in insertion order
        if record.status == "ok" and record.schedule.get("engine") in ("ortx", "ort"):
            latest[record.schedule["engine"]] = record.median_ms
    return (latest["ortx"], latest["ort"]) if len(latest) == 2 else None


def record(database: TuningDatabase, fingerprint: HardwareFingerprint, signature: str, times: tuple[float, float],
           source: str) -> None:
    database.add_fingerprint(fingerprint)
    for engine, median in zip(("ortx", "ort"), times):
        database.add(TuningRecord(signature, fingerprint.key, MODEL_TEMPLATE, {"engine": engine}, "ok", median,
                                  source=source))


def measure_plans(ortx_plan: ExecutionPlan, ort_plan: ExecutionPlan, feeds: dict, runs: int) -> tuple[float, float]:
    """(OrtxEP ms, ORT ms): medians of block medians, the engines' blocks interleaved, each after switch_over."""
    for _ in range(2):  # first-run allocations, page faults, thread start
        ort_plan.run(dict(feeds))
        ortx_plan.run(dict(feeds))
    ortx_times, ort_times = [], []
    while len(ortx_times) * BLOCK < runs:
        for plan, medians in ((ort_plan, ort_times), (ortx_plan, ortx_times)):
            switch_over(lambda: plan.run(dict(feeds)))
            medians.append(engine_choice.median_ms(lambda: plan.run(dict(feeds)), BLOCK))
    return statistics.median(ortx_times), statistics.median(ort_times)


def choose(measurements: list[tuple[tuple[float, float], str]], signature: str) -> ModelChoice:
    """The decision from [((OrtxEP ms, ORT ms), origin), ...]: each engine's fastest median."""
    times = (min(pair[0] for pair, _ in measurements), min(pair[1] for pair, _ in measurements))
    source = "measured" if len(measurements) == 1 else f"measured in {len(measurements)} processes"
    return ModelChoice(signature, "ort" if goes_back(times) else "ortx", times[0], times[1], source)
