"""Dense or sparse kernels per layer with constant weights, from the crossover measured on this machine (issue #9).

1. Candidates: a layer whose weights have at least MIN_ZEROS zeros (below that a CSR multiply-add, a broadcast and
   an indexed load per nonzero, cannot beat the packed dense GEMM); others stay dense without a look-up.
2. Signature: "sparse|<kind>|<shape>|z<zero fraction, 2 decimals>|t<threads>"; records (ortx.tune.records) hold
   one row per engine, schedule {"engine": "dense"} or {"engine": "sparse", "block_rows": R}, under this
   machine's fingerprint and template SPARSE_TEMPLATE.
3. Tuning "quick"/"full": the layer is compiled alone as dense, CSR (R=1) and 4x1-blocked CSR (R=4) programs and
   timed side by side (interleaved, QUICK_RUNS/FULL_RUNS runs each, medians recorded).
4. Choice ("cached", "quick", "full"): the layer's own records (the latest measurement of each engine) decide;
   sparse wins only when its median is below MARGIN x dense's (a measurement on a busy host swings by more than the
   gain of a near tie: at 50% zeros a 1-thread run at load 7 picked sparse for 9 of 21 ResNet layers without it).
   Without them, records of the same shape at other zero fractions give the crossover: sparse when sparse won at a
   fraction <= this one, dense when dense won at a fraction >= this one.
5. No record at all (and tuning "off"): the conservative prior, sparse CSR only at PRIOR_MIN_ZEROS zeros or more.
OrtxEP's provider option "sparse" (SPARSE_OPTIONS): "auto" as above, "measure" runs step 3 whatever the tuning mode,
"off" keeps every layer dense (ForcedPolicy; also what the measurement compiles each candidate with).
Limits: the measurement runs the step interpreter (no JIT), single layers with random inputs (cache state of a
whole network differs); SPARSE_TEMPLATE carries the kernel build (fingerprint.kernels_build), so a rebuild measures again.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import statistics
import time

import numpy as np
import onnx_ir as ir

from ortx.tune.fingerprint import kernels_build

logger = logging.getLogger(__name__)

MIN_ZEROS = 0.3
# Measured on this box (2-core Zen 4, AVX-512, benchmarks/sparse.py): sparse won most layers from ~70% zeros; the
# prior waits for 80%, so a layer without records is only made sparse where it very likely pays.
PRIOR_MIN_ZEROS = 0.8
SPARSE_TEMPLATE = f"sparse_f32:3|kernels={kernels_build()}"
QUICK_RUNS, FULL_RUNS = 11, 31
MARGIN = 0.9
MODES = ("off", "cached", "quick", "full")
SPARSE_OPTIONS = ("auto", "measure", "off")  # OrtxEP's provider option "sparse" (ortx/ep/options.py)


@dataclasses.dataclass(frozen=True)
class SparseChoice:
    engine: str  # "dense" or "sparse"
    block_rows: int = 1
    source: str = "prior"  # "prior", "record", "crossover", "forced", "measured"


DENSE = SparseChoice("dense", source="prior")


def zero_fraction(weights: np.ndarray) -> float:
    return float(np.count_nonzero(weights == 0)) / max(weights.size, 1)


def signature(kind: str, shape_text: str, zeros: float, num_threads: int) -> str:
    return f"sparse|{kind}|{shape_text}|z{zeros:.2f}|t{num_threads}"


@dataclasses.dataclass(frozen=True)
class ForcedPolicy:
    """Always the given engine (the measurement's programs; tests)."""
    choice: SparseChoice

    def choose(self, node: ir.Node, kind: str, shape_text: str, zeros: float, num_threads: int) -> SparseChoice:
        return self.choice


@dataclasses.dataclass
class SparsePolicy:
    mode: str = "off"
    database_path: str | None = None
    options: object = None  # ortx.config.Options for the fingerprint's compiler
    _fingerprint: object = dataclasses.field(default=None, repr=False)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"sparse choice: tuning mode {self.mode!r} is not one of {MODES}")

    def choose(self, node: ir.Node, kind: str, shape_text: str, zeros: float, num_threads: int) -> SparseChoice:
        if zeros < MIN_ZEROS:
            return DENSE
        key = signature(kind, shape_text, zeros, num_threads)
        readable = self.database_path and self.mode != "off" and (
            self.mode != "cached" or os.path.exists(self.database_path))
        if readable:
            from ortx.tune.records import TuningDatabase

            with TuningDatabase(self.database_path) as database:
                fingerprint = self._fingerprint_key(database)
                if self.mode in ("quick", "full"):
                    _record(database, fingerprint, key, measure(node, num_threads,
                                                                QUICK_RUNS if self.mode == "quick" else FULL_RUNS),
                            f"sparse_choice:{self.mode}")
                recorded = recorded_choice(database, fingerprint, kind, shape_text, zeros, num_threads)
            if recorded is not None:
                logger.debug("ortx sparse choice: node %s %s (%s)", node.name, recorded.engine, recorded.source)
                return recorded
        if zeros >= PRIOR_MIN_ZEROS:
            return SparseChoice("sparse", 1, "prior")
        return DENSE

    def _fingerprint_key(self, database) -> str:
        from ortx.tune.fingerprint import current

        if self._fingerprint is None:
            self._fingerprint = current(self.options)
        return database.add_fingerprint(self._fingerprint)


def _engine_of(schedule: dict) -> SparseChoice | None:
    if schedule.get("engine") == "dense":
        return SparseChoice("dense")
    if schedule.get("engine") == "sparse" and schedule.get("block_rows") in (1, 4):
        return SparseChoice("sparse", int(schedule["block_rows"]))
    return None


def _latest_times(records) -> dict[SparseChoice, float]:
    """The latest 'ok' time of each engine (one measurement compares engines side by side)."""
    latest: dict[SparseChoice, tuple[float, float]] = {}
    for record in records:
        choice = _engine_of(record.schedule)
        if record.status != "ok" or choice is None:
            continue
        if choice not in latest or record.created >= latest[choice][0]:
            latest[choice] = (record.created, record.median_ms)
    return {choice: ms for choice, (_, ms) in latest.items()}


def _winner(times: dict[SparseChoice, float]) -> SparseChoice | None:
    """The fastest sparse engine when it beats dense by MARGIN, else dense; None without dense and a sparse time."""
    dense = times.get(SparseChoice("dense"))
    sparse = {choice: ms for choice, ms in times.items() if choice.engine == "sparse"}
    if dense is None or not sparse:
        return None
    best = min(sparse, key=sparse.get)
    return best if sparse[best] < MARGIN * dense else SparseChoice("dense")


def recorded_choice(database, fingerprint: str, kind: str, shape_text: str, zeros: float,
                    num_threads: int) -> SparseChoice | None:
    """Step 4 of the module docstring; None when nothing recorded applies."""
    own = _winner(_latest_times(database.records(signature(kind, shape_text, zeros, num_threads), fingerprint,
                                                 SPARSE_TEMPLATE)))
    if own is not None:
        return dataclasses.replace(own, source="record")
    prefix, suffix = f"sparse|{kind}|{shape_text}|z", f"|t{num_threads}"
    by_level: dict[float, dict] = {}
    for record in database.records(None, fingerprint, SPARSE_TEMPLATE):
        if record.signature.startswith(prefix) and record.signature.endswith(suffix):
            level = float(record.signature[len(prefix):-len(suffix)])
            by_level.setdefault(level, []).append(record)
    winners = {level: _winner(_latest_times(records)) for level, records in by_level.items()}
    winners = {level: winner for level, winner in winners.items() if winner is not None}
    sparse_below = [(level, w) for level, w in winners.items() if w.engine == "sparse" and level <= zeros + 1e-9]
    if sparse_below:
        return dataclasses.replace(max(sparse_below, key=lambda item: item[0])[1], source="crossover")
    if any(w.engine == "dense" and level >= zeros - 1e-9 for level, w in winners.items()):
        return SparseChoice("dense", source="crossover")
    return None


def _record(database, fingerprint: str, key: str, times: dict[SparseChoice, float | str], source: str) -> None:
    from ortx.tune.records import TuningRecord

    for choice, value in times.items():
        schedule = {"engine": "dense"} if choice.engine == "dense" else {"engine": "sparse",
                                                                           "block_rows": choice.block_rows}
        if isinstance(value, str):  # a failed candidate is data, not an exception
            database.add(TuningRecord(key, fingerprint, SPARSE_TEMPLATE, schedule, "error", None, value, source))
        else:
            database.add(TuningRecord(key, fingerprint, SPARSE_TEMPLATE, schedule, "ok", value, "", source))


def measure(node: ir.Node, num_threads: int, runs: int) -> dict[SparseChoice, float | str]:
    """Median ms of the node alone as dense, CSR and 4x1-blocked CSR programs, timed interleaved; a candidate that
    fails to compile or run gets its error message instead."""
    from ortx.ep.compile_nodes import compile_segment
    from ortx.ep.lowering._values import constant_value, numpy_dtype, static_shape

    inputs = [value for value in node.inputs if value is not None and constant_value(value) is None]
    outputs = [node.outputs[0]]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(static_shape(value)).astype(numpy_dtype(value)) for value in inputs]
    arrays += [np.empty(static_shape(value), numpy_dtype(value)) for value in outputs]
    externals = np.array([array.__array_interface__["data"][0] for array in arrays], np.uint64)
    candidates = (SparseChoice("dense", 1, "forced"), SparseChoice("sparse", 1, "forced"),
                  SparseChoice("sparse", 4, "forced"))
    programs, results = {}, {}
    for choice in candidates:
        try:
            compiled = compile_segment([node], inputs, outputs, num_threads=num_threads,
                                       sparse_policy=ForcedPolicy(choice))
            arena = np.empty(max(compiled.arena_bytes, 1), np.uint8)
            compiled.program.run(arena, externals, num_threads)  # warm-up
            programs[choice] = (compiled, arena)
        except Exception as error:  # noqa: BLE001  (recorded as the candidate's failure)
            results[dataclasses.replace(choice, source="measured")] = f"{type(error).__name__}: {error}"
    times: dict[SparseChoice, list[float]] = {choice: [] for choice in programs}
    for _ in range(runs):
        for choice, (compiled, arena) in programs.items():
            start = time.perf_counter()
            compiled.program.run(arena, externals, num_threads)
            times[choice].append((time.perf_counter() - start) * 1e3)
    for choice, values in times.items():
        results[dataclasses.replace(choice, source="measured")] = statistics.median(values)
    return results
