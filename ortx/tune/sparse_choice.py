"""Dense or sparse kernels per layer with constant weights, from the crossover measured on this machine (issue #9).

1. Candidates: a layer whose weights have at least MIN_ZEROS zeros (below that a CSR multiply-add, a broadcast and
   an indexed load per nonzero, cannot beat the packed dense GEMM); others stay dense without a look-up. For int8
   layers (kind "qconv", sparse_qconv2d_i8) the fraction is of all-zero quads of k, the kernel's unit: 90% zeros
   scattered at random leave 34% of quads stored.
2. Signature: "sparse|<kind>|<shape>|z<zero fraction, 2 decimals>|t<threads>"; records (ortx.tune.records) hold
   one row per engine and round, schedule {"engine": "dense", "round": i} or {"engine": "sparse", "block_rows": R,
   "round": i}, all rows of one measurement with the same `created`, under this machine's fingerprint and template
   SPARSE_TEMPLATE.
3. Tuning "quick"/"full": the layer is compiled alone as dense, CSR (R=1) and 4x1-blocked CSR (R=4) programs (int8:
   dense and quad CSR) and timed as a session runs them (arena and tensors on 64-byte lines,
   ortx.memory.lifetimes.aligned_empty), in QUICK/FULL rounds; within a round the candidates alternate run by run,
   and each round's median is recorded.
4. Choice ("cached", "quick", "full"): the layer's own latest measurement decides. The sparse engine with the lowest
   median over rounds wins only when in every round it ran below MARGIN x dense's time of the same round: the
   margin covers a near tie, the rounds the noise (a shared host slows single rounds by 2x; one median of 11 runs
   picked sparse for BERT-like layers the session then ran slower, issue #9). Without its own records, records of
   the same shape at other zero fractions give the crossover: sparse when sparse won at a fraction <= this one,
   dense when dense won at a fraction >= this one.
5. No record at all (and tuning "off"): the conservative prior, sparse CSR only at PRIOR_MIN_ZEROS zeros or more
   (int8: PRIOR_MIN_ZERO_QUADS of the quads).
6. Segment check (measuring modes only, check_segment): a segment with sparse layers is timed in rounds against the
   same segment all dense, and runs all dense unless faster in every round.
Every layer considered is kept in SparsePolicy.decisions (the choice, its source and the rounds' times), each check
in SparsePolicy.segment_checks; the session shows both as sess.assignment.sparse_choices.
OrtxEP's provider option "sparse" (SPARSE_OPTIONS): "auto" as above, "measure" runs step 3 whatever the tuning mode,
"off" keeps every layer dense (ForcedPolicy; also what the measurement compiles each candidate with).
Limits: the measurements run the step interpreter (no JIT) on random inputs; a layer timed alone misses the cache
state of the whole network (step 6 checks the segment, not each layer in it); segments with non-float inputs are
not checked; SPARSE_TEMPLATE carries the kernel build (fingerprint.kernels_build), so a rebuild measures again.
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
# int8 (kernels/qgemm.h, 2 threads, five ResNet/BERT-like layer shapes): quad CSR against qconv2d_i8 at 41% of quads
# zero 0.93-1.19, 52% 0.83-1.06, 66% 0.71-0.91, 82% 0.56-0.78; the prior waits for 60%.
PRIOR_MIN_ZERO_QUADS = 0.6
SPARSE_TEMPLATE = f"sparse_f32:4|kernels={kernels_build()}"  # 4: rows per round (3: one median per engine)
QUICK, FULL = (3, 7), (5, 9)  # (rounds, timed runs per candidate and round)
MARGIN = 0.9
MODES = ("off", "cached", "quick", "full")
SPARSE_OPTIONS = ("auto", "measure", "off")  # OrtxEP's provider option "sparse" (ortx/ep/options.py)


@dataclasses.dataclass(frozen=True)
class SparseChoice:
    engine: str  # "dense" or "sparse"
    block_rows: int = 1
    source: str = "prior"  # "prior", "record", "crossover", "forced", "measured"

    @property
    def label(self) -> str:
        return "dense" if self.engine == "dense" else "CSR" if self.block_rows == 1 else f"{self.block_rows}x1 CSR"


DENSE = SparseChoice("dense", source="prior")


@dataclasses.dataclass(frozen=True)
class SparseDecision:
    """One layer's choice and what it rests on: per engine label, the rounds' median ms (empty without records of
    the layer's own signature); `worst_ratio`: the chosen or best sparse engine's slowest round over dense's."""
    node: str
    zeros: float
    choice: SparseChoice
    times: tuple[tuple[str, tuple[float, ...]], ...] = ()
    worst_ratio: float | None = None

    def describe(self) -> str:
        measured = ", ".join(f"{label} " + "/".join(f"{ms:.3f}" for ms in rounds) + " ms"
                             for label, rounds in self.times)
        against = f"; worst round sparse/dense {self.worst_ratio:.2f} (sparse needs < {MARGIN})" \
            if self.worst_ratio is not None else ""
        return (f"{self.node} ({self.zeros:.0%} zeros): {self.choice.label} ({self.choice.source})"
                + (f"; {measured}" if measured else "") + against)


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
    decisions: dict = dataclasses.field(default_factory=dict)  # node name -> SparseDecision, in choice order
    _fingerprint: object = dataclasses.field(default=None, repr=False)
    _measured: set = dataclasses.field(default_factory=set, repr=False)  # signatures measured by this policy
    segment_checks: list = dataclasses.field(default_factory=list)  # SegmentCheck per segment checked (step 6)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"sparse choice: tuning mode {self.mode!r} is not one of {MODES}")

    def choose(self, node: ir.Node, kind: str, shape_text: str, zeros: float, num_threads: int) -> SparseChoice:
        if zeros < MIN_ZEROS:
            return DENSE
        key = signature(kind, shape_text, zeros, num_threads)
        readable = self.database_path and self.mode != "off" and (
            self.mode != "cached" or os.path.exists(self.database_path))
        recorded, rounds = None, {}
        if readable:
            from ortx.tune.records import TuningDatabase

            with TuningDatabase(self.database_path) as database:
                fingerprint = self._fingerprint_key(database)
                # once per signature: layers of one shape and zero fraction, and a recompile after an error, share it
                if self.mode in ("quick", "full") and key not in self._measured:
                    self._measured.add(key)
                    rounds_and_runs = QUICK if self.mode == "quick" else FULL
                    _record(database, fingerprint, key, measure(node, num_threads, *rounds_and_runs,
                                                                candidates=candidates_of(kind)),
                            f"sparse_choice:{self.mode}")
                rounds = latest_rounds(database.records(key, fingerprint, SPARSE_TEMPLATE))
                recorded = recorded_choice(database, fingerprint, kind, shape_text, zeros, num_threads)
        prior = PRIOR_MIN_ZERO_QUADS if kind == "qconv" else PRIOR_MIN_ZEROS
        choice = recorded if recorded is not None else (
            SparseChoice("sparse", 1, "prior") if zeros >= prior else DENSE)
        self.decisions[node.name] = SparseDecision(
            node.name, zeros, choice, tuple((engine.label, tuple(ms for _, ms in sorted(by_round.items())))
                                            for engine, by_round in rounds.items()), _winner(rounds)[1])
        logger.debug("ortx sparse choice: %s", self.decisions[node.name].describe())
        return choice

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


def latest_rounds(records) -> dict[SparseChoice, dict[int, float]]:
    """Per engine, round -> ms of the latest measurement (the 'ok' rows sharing the newest `created`)."""
    usable = [(record, _engine_of(record.schedule)) for record in records if record.status == "ok"]
    usable = [(record, choice) for record, choice in usable if choice is not None]
    if not usable:
        return {}
    newest = max(record.created for record, _ in usable)
    rounds: dict[SparseChoice, dict[int, float]] = {}
    for record, choice in usable:
        if record.created == newest:
            rounds.setdefault(choice, {})[int(record.schedule.get("round", 0))] = record.median_ms
    return rounds


def _winner(rounds: dict[SparseChoice, dict[int, float]]) -> tuple[SparseChoice | None, float | None]:
    """(step 4's choice, the best sparse engine's worst round over dense's); (None, None) without dense and a sparse
    engine measured in the same rounds."""
    dense = rounds.get(SparseChoice("dense"), {})
    paired = {choice: {i: ms / dense[i] for i, ms in by_round.items() if i in dense and dense[i] > 0}
              for choice, by_round in rounds.items() if choice.engine == "sparse"}
    paired = {choice: ratios for choice, ratios in paired.items() if ratios}
    if not paired:
        return None, None
    best = min(paired, key=lambda choice: statistics.median(rounds[choice].values()))
    worst = max(paired[best].values())
    return (best if worst < MARGIN else SparseChoice("dense")), worst


def recorded_choice(database, fingerprint: str, kind: str, shape_text: str, zeros: float,
                    num_threads: int) -> SparseChoice | None:
    """Step 4 of the module docstring; None when nothing recorded applies."""
    own, _ = _winner(latest_rounds(database.records(signature(kind, shape_text, zeros, num_threads), fingerprint,
                                                    SPARSE_TEMPLATE)))
    if own is not None:
        return dataclasses.replace(own, source="record")
    prefix, suffix = f"sparse|{kind}|{shape_text}|z", f"|t{num_threads}"
    by_level: dict[float, list] = {}
    for record in database.records(None, fingerprint, SPARSE_TEMPLATE):
        if record.signature.startswith(prefix) and record.signature.endswith(suffix):
            level = float(record.signature[len(prefix):-len(suffix)])
            by_level.setdefault(level, []).append(record)
    winners = {level: _winner(latest_rounds(records))[0] for level, records in by_level.items()}
    winners = {level: winner for level, winner in winners.items() if winner is not None}
    sparse_below = [(level, w) for level, w in winners.items() if w.engine == "sparse" and level <= zeros + 1e-9]
    if sparse_below:
        return dataclasses.replace(max(sparse_below, key=lambda item: item[0])[1], source="crossover")
    if any(w.engine == "dense" and level >= zeros - 1e-9 for level, w in winners.items()):
        return SparseChoice("dense", source="crossover")
    return None


def _record(database, fingerprint: str, key: str, measured: dict[SparseChoice, list[float] | str],
            source: str) -> None:
    """One row per engine and round, all with one `created` (latest_rounds groups a measurement by it)."""
    from ortx.tune.records import TuningRecord

    created = time.time()
    for choice, value in measured.items():
        schedule = {"engine": "dense"} if choice.engine == "dense" else {"engine": "sparse",
                                                                           "block_rows": choice.block_rows}
        if isinstance(value, str):  # a failed candidate is data, not an exception
            database.add(TuningRecord(key, fingerprint, SPARSE_TEMPLATE, schedule, "error", None, value, source,
                                      created))
            continue
        for index, ms in enumerate(value):
            database.add(TuningRecord(key, fingerprint, SPARSE_TEMPLATE, {**schedule, "round": index}, "ok", ms, "",
                                      source, created))


def candidates_of(kind: str) -> tuple[SparseChoice, ...]:
    """The programs step 3 times: dense and the sparse block heights the kind's kernel has (int8: quads only)."""
    dense, csr = SparseChoice("dense", 1, "forced"), SparseChoice("sparse", 1, "forced")
    return (dense, csr) if kind == "qconv" else (dense, csr, SparseChoice("sparse", 4, "forced"))


def random_tensors(inputs, outputs, rng) -> tuple[list[np.ndarray], np.ndarray]:
    """Arrays on 64-byte lines for `inputs` (standard normal from rng; integers over the whole range for integer
    dtypes, the quantized activations of int8 layers) then `outputs`, and their addresses."""
    from ortx.ep.lowering._values import numpy_dtype, static_shape
    from ortx.memory.lifetimes import aligned_empty

    arrays = []
    for value in list(inputs) + list(outputs):
        shape, dtype = static_shape(value), numpy_dtype(value)
        arrays.append(aligned_empty(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize).view(dtype).reshape(shape))
    for array in arrays[:len(inputs)]:
        if array.dtype.kind in "iu":
            info = np.iinfo(array.dtype)
            array[...] = rng.integers(info.min, info.max, array.shape, dtype=array.dtype, endpoint=True)
        else:
            array[...] = rng.standard_normal(array.shape)
    return arrays, np.array([array.__array_interface__["data"][0] for array in arrays], np.uint64)


def time_rounds(programs: dict, externals: np.ndarray, num_threads: int, rounds: int, runs: int) -> dict:
    """Per key of `programs` (key -> compiled program), the median ms of each round; programs alternate run by run,
    each on its own 64-byte aligned arena, after one warm-up run."""
    from ortx.memory.lifetimes import aligned_empty

    arenas = {key: aligned_empty(compiled.arena_bytes) for key, compiled in programs.items()}
    for key, compiled in programs.items():
        compiled.program.run(arenas[key], externals, num_threads)
    medians: dict = {key: [] for key in programs}
    for _ in range(rounds):
        times: dict = {key: [] for key in programs}
        for _ in range(runs):
            for key, compiled in programs.items():
                start = time.perf_counter()
                compiled.program.run(arenas[key], externals, num_threads)
                times[key].append((time.perf_counter() - start) * 1e3)
        for key, values in times.items():
            medians[key].append(statistics.median(values))
    return medians


def measure(node: ir.Node, num_threads: int, rounds: int, runs: int,
            candidates: tuple[SparseChoice, ...] | None = None) -> dict[SparseChoice, list[float] | str]:
    """Per candidate (by default dense, CSR, 4x1-blocked CSR programs of the node alone), the median ms of each of
    `rounds` rounds of `runs` runs, the candidates alternating run by run; a candidate that fails to compile or run
    gets its error message instead. Arena and tensors start on 64-byte lines, as in a session
    (ortx.ep.runtime.RunContext; ORT's tensors): on numpy's 16-byte alignment the sparse kernels ran up to 2x slower
    than in the session."""
    from ortx.ep.compile_nodes import compile_segment
    from ortx.ep.lowering._values import constant_value

    inputs = [value for value in node.inputs if value is not None and constant_value(value) is None]
    outputs = [node.outputs[0]]
    rng = np.random.default_rng(0)
    tensors, externals = random_tensors(inputs, outputs, rng)  # tensors: kept alive for the addresses
    candidates = candidates or candidates_of("conv")
    programs, results = {}, {}
    for choice in candidates:
        try:
            compiled = compile_segment([node], inputs, outputs, num_threads=num_threads,
                                       sparse_policy=ForcedPolicy(choice))
            time_rounds({choice: compiled}, externals, num_threads, 0, 0)  # runs once: a failure is data
            programs[choice] = compiled
        except Exception as error:  # noqa: BLE001  (recorded as the candidate's failure)
            results[dataclasses.replace(choice, source="measured")] = f"{type(error).__name__}: {error}"
    for choice, values in time_rounds(programs, externals, num_threads, rounds, runs).items():
        results[dataclasses.replace(choice, source="measured")] = values
    return results


# Step 6: the segment check ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SegmentCheck:
    """The whole segment with the layers' sparse choices against the same segment all dense, timed in rounds."""
    first_node: str
    sparse_nodes: tuple[str, ...]
    sparse_ms: tuple[float, ...]
    dense_ms: tuple[float, ...]

    @property
    def worst_ratio(self) -> float:
        return max(sparse / dense for sparse, dense in zip(self.sparse_ms, self.dense_ms))

    @property
    def kept(self) -> bool:
        """The sparse choices stand (faster in every round); else every layer of the segment runs dense."""
        return self.worst_ratio < 1.0

    def describe(self) -> str:
        rounds = lambda values: "/".join(f"{ms:.3f}" for ms in values)  # noqa: E731
        return (f"segment from {self.first_node} with {len(self.sparse_nodes)} sparse layers: "
                f"{rounds(self.sparse_ms)} ms vs all dense {rounds(self.dense_ms)} ms, worst round "
                f"{self.worst_ratio:.2f} -> {'sparse layers kept' if self.kept else 'all dense'}")


def check_segment(compile_with, policy, inputs: list[ir.Value], outputs: list[ir.Value], num_threads: int):
    """Step 6: `compile_with(policy)` -> CompiledProgram. When `policy` measures (tuning "quick"/"full" or option
    "measure") and its choices put a sparse kernel in the segment, the segment is also compiled all dense and both are
    timed in rounds on random inputs; the sparse program is kept only when it is faster in every round (layers
    timed alone miss the cache state and the other steps of the whole segment). Returns the program to run."""
    program = compile_with(policy)
    sparse_nodes = tuple(dict.fromkeys(step.node for step in program.steps if step.kernel.startswith("sparse_")))
    if not isinstance(policy, SparsePolicy) or policy.mode not in ("quick", "full") or not sparse_nodes:
        return program
    if not all(value.dtype is not None and np.dtype(value.dtype.numpy()).kind == "f" for value in inputs):
        logger.debug("ortx sparse choice: segment from %s not checked (non-float inputs)", sparse_nodes[0])
        return program  # random integers could be out-of-range indices
    dense = compile_with(ForcedPolicy(SparseChoice("dense", source="segment check")))
    rng = np.random.default_rng(0)
    tensors, externals = random_tensors(inputs, outputs, rng)  # tensors: kept alive for the addresses
    rounds, runs = QUICK if policy.mode == "quick" else FULL
    times = time_rounds({"sparse": program, "dense": dense}, externals, num_threads, rounds, runs)
    check = SegmentCheck(program.step_nodes[0] if program.step_nodes else "", sparse_nodes, tuple(times["sparse"]),
                         tuple(times["dense"]))
    policy.segment_checks.append(check)
    logger.debug("ortx sparse choice: %s", check.describe())
    if check.kept:
        return program
    for name in sparse_nodes:
        if name in policy.decisions:
            policy.decisions[name] = dataclasses.replace(policy.decisions[name],
                                                         choice=SparseChoice("dense", source="segment check"))
    return dense
