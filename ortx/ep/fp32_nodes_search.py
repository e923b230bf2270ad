"""Which layers of a bf16 session keep fp32 (provider option fp32_nodes) so its outputs meet a cosine target.

Why: bf16's error is not spread evenly: on MobileNetV2-style most of it comes from the first layers
(benchmarks/bf16_sensitivity.py), and keeping every layer fp32 gives up bf16's speed. This measures it on the
user's inputs with OrtxEP's own kernels, not a simulation:
1. Inputs: the first `samples` calibration samples given (ortx.quantization.calibration_data: an .npz, a folder of
   them, a dict of stacked arrays or feed dicts), else `samples` seeded random inputs in [-1, 1) (ortx.measure's);
   the reference is ONNX Runtime's CPU EP in fp32 on the same inputs. A session's score is its worst cosine over
   every float output and input.
2. Candidates: the layers the all-bf16 session runs on bf16 kernels (its assignment's "bf16" rows), and its other
   convs and products: a depthwise conv there reads bf16 activations (pair rows), also those an fp32 1x1 conv writes
   for it (ortx/ep/precision.py), unless it is kept fp32 too.
3. Sensitivity: one session per candidate with that layer alone fp32; its gain is the score over the all-bf16 one.
   Cost (`cost_runs` > 0, the default): what keeping the layer fp32 adds to a run, its node's median time in a
   profile of the all-fp32 session minus that in the all-bf16 one (ortx.ep.trace_summary; both compiled as a user
   runs them); with cost_runs 0 every layer costs the same.
4. Greedy: layers added in order of gain per cost (each step one session) until the target is met; then pruning:
   each chosen layer, costliest first, is dropped again if the target still holds without it, in passes until none
   can go (roundings partly cancel, so the score is not monotonic in the set). Unreachable (even every layer fp32
   scores below it): reported, nothing chosen. So the choice keeps the measured time the kept layers add low, as
   far as a greedy order can (gains need not add up: each step is measured whole).
5. Timing (`time_runs` > 0): the all-bf16, the chosen and the all-fp32 sessions compiled as the user would run them
   (JIT on), interleaved in blocks of 4 runs with ortx.measure's idle and warm-in: block medians' medians, and per
   round each one's block median over the all-bf16 one's (paired, as ortx.measure.compare pairs). The search's own
   sessions run on the step interpreter with tuning off (the same kernels, so the same numbers, without a compile
   per candidate).
Cost: 2 + candidates + chosen + pruning tries sessions (+ 2 profiled); MobileNetV2-style: about 20 s.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import statistics
import tempfile
import time
from typing import Callable, Sequence

import numpy as np
import onnxruntime

from ortx.measure import random_feeds, switch_over
from ortx.model_io import ModelSource, load, to_ort_bytes

DEFAULT_TARGET = 0.999
DEFAULT_SAMPLES = 4
FLOAT_TYPES = ("tensor(float)", "tensor(double)", "tensor(float16)")

# progress(stage, done, total): stage "sensitivity", "cost", "greedy", "pruning" or "timing"
SearchProgress = Callable[[str, int, int], None]


@dataclasses.dataclass(frozen=True)
class Fp32NodesChoice:
    """What search_fp32_nodes found: the layers to keep fp32, the scores on the way and, when timed, the times."""

    target: float
    met: bool  # the chosen layers' score >= target (with none chosen when bf16 alone meets it)
    fp32_nodes: tuple[str, ...]  # the provider option's value, in graph order
    candidates: int  # layers the all-bf16 session runs on bf16 kernels
    score_bf16: float  # worst cosine of the all-bf16 session
    score_chosen: float  # ... with fp32_nodes
    score_fp32: float  # ... with every candidate fp32
    gains: dict  # layer -> its score alone fp32 minus score_bf16, every candidate
    costs_ms: dict  # layer -> what keeping it fp32 adds to a run (profiles; empty without cost_runs)
    sessions: int  # sessions built by the search
    seconds: float
    times_ms: dict = dataclasses.field(default_factory=dict)  # "bf16", "chosen", "fp32" -> median ms, when timed
    paired: dict = dataclasses.field(default_factory=dict)  # ... -> median over rounds of its time / bf16's

    def provider_options(self) -> dict:
        """OrtxEP's options for the chosen mix."""
        return {"precision": "bf16", **({"fp32_nodes": ",".join(self.fp32_nodes)} if self.fp32_nodes else {})}

    def summary(self) -> str:
        lines = [f"bf16 session: worst cosine {self.score_bf16:.6f} against ONNX Runtime fp32 (target "
                 f"{self.target:g}); {self.candidates} candidate layers (bf16 kernels or bf16 activations)"]
        if not self.met:
            lines.append(f"target unreachable: with every one of them fp32 the worst cosine is {self.score_fp32:.6f}")
        elif not self.fp32_nodes:
            lines.append("the bf16 session meets the target as it is: no layer needs fp32")
        else:
            lines.append(f"{len(self.fp32_nodes)} layer(s) kept fp32: worst cosine {self.score_chosen:.6f} (every "
                         f"layer fp32: {self.score_fp32:.6f})")
            chosen = [f"{name} ({self.gains[name]:+.2e}" + (f", +{self.costs_ms[name]:.3f} ms)" if self.costs_ms
                                                             else ")") for name in self.fp32_nodes]
            lines.append("kept fp32 (gain alone, cost): " + ", ".join(chosen))
        if self.times_ms:
            lines.append("median ms: " + ", ".join(f"{name} {ms:.3f} ({self.paired[name]:.2f}x bf16, paired)"
                                                   for name, ms in self.times_ms.items()))
        lines.append(f"{self.sessions} sessions, {self.seconds:.1f} s")
        if self.met:
            lines.append(f"provider_options={self.provider_options()!r}")
        return "\n".join(lines)


def _check_target(target: object) -> float:
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0.0 < float(target) < 1.0:
        raise ValueError(f"target cosine must be a number in (0, 1), not {target!r}")
    return float(target)


def _worst_cosine(outputs: Sequence[Sequence[np.ndarray]], references: Sequence[Sequence[np.ndarray]],
                  floats: Sequence[bool]) -> float:
    """The lowest cosine over inputs and float outputs (ortx.quantization.sensitivity's metric, per input); -1 when
    an output is not finite (no cosine to trust)."""
    from ortx.quantization.sensitivity import one_minus_cosine

    worst = 1.0
    for got, expected in zip(outputs, references):
        got = [np.asarray(value) for value, is_float in zip(got, floats) if is_float]
        expected = [np.asarray(value) for value, is_float in zip(expected, floats) if is_float]
        if not all(np.all(np.isfinite(value)) for value in got + expected):
            return -1.0
        worst = min(worst, 1.0 - one_minus_cosine([expected], [got]))
    return worst


def _session_options(threads: int | None) -> onnxruntime.SessionOptions:
    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return options


class _Sessions:
    """Builds and scores OrtxEP bf16 sessions with given fp32_nodes on the inputs."""

    def __init__(self, data: bytes, reference: onnxruntime.InferenceSession, feeds: list[dict], threads: int | None,
                 options: dict):
        from ortx.ep.session import InferenceSession

        self._factory = InferenceSession
        self.data, self.feeds, self.threads, self.options = data, feeds, threads, options
        self.built = 0
        self.floats = [output.type in FLOAT_TYPES for output in reference.get_outputs()]
        if not any(self.floats):
            raise ValueError("the model has no float output to compare")
        self.references = [reference.run(None, feed) for feed in feeds]

    def session_options(self) -> onnxruntime.SessionOptions:
        return _session_options(self.threads)

    def build(self, fp32_nodes: Sequence[str], *, fast_build: bool = True, profile_prefix: str | None = None):
        options = {"precision": "bf16", **self.options}
        if fp32_nodes:
            options["fp32_nodes"] = ",".join(fp32_nodes)
        if fast_build:  # the step interpreter, tuning off: the same kernels without a compile per session
            options.update(jit="off", tuning="off")
        session_options = self.session_options()
        if profile_prefix:
            session_options.enable_profiling = True
            session_options.profile_file_prefix = profile_prefix
        self.built += 1
        return self._factory(self.data, session_options, providers=["OrtxEP", "CPUExecutionProvider"],
                             provider_options=[options, {}])

    def score(self, fp32_nodes: Sequence[str]) -> float:
        session = self.build(fp32_nodes)
        return _worst_cosine([session.run(None, feed) for feed in self.feeds], self.references, self.floats)


def _layer_costs(sessions: _Sessions, candidates: list[str], runs: int) -> dict[str, float]:
    """Per candidate, its node's median ms in a profile of the all-fp32 session minus the all-bf16 one's (at least
    1 us: a layer never costs nothing); a layer neither profile names costs the median of the others."""
    from ortx.ep.trace_summary import read_trace, summarize

    directory = tempfile.mkdtemp(prefix="ortx-fp32-nodes-")
    try:
        per_layer = []
        for name, fp32_nodes in (("bf16", ()), ("fp32", candidates)):
            session = sessions.build(fp32_nodes, fast_build=False, profile_prefix=os.path.join(directory, name))
            for _ in range(runs + 1):  # the first is summarize's warm-up
                session.run(None, sessions.feeds[0])
            times = {}
            for node in summarize(read_trace(session.end_profiling())).nodes:
                for layer in [node.name, *filter(None, node.fused_from.split(","))]:
                    times.setdefault(layer, node.median_ms)
            per_layer.append(times)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    bf16, fp32 = per_layer
    costs = {name: max(1e-3, fp32[name] - bf16[name]) for name in candidates if name in bf16 and name in fp32}
    typical = statistics.median(costs.values()) if costs else 1.0
    return {name: costs.get(name, typical) for name in candidates}


CONV_LIKE = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def _bf16_layers(session) -> list[str]:
    """The bf16 rows, and the convs that may read bf16 activations (a depthwise conv reading pair rows)."""
    return [row.name for row in session.assignment if row.provider == "OrtxEP" and (
        row.precision == "bf16" or (row.precision == "fp32" and row.op_type in CONV_LIKE))]


def _time(sessions: dict, feed: dict, runs: int, progress: SearchProgress | None) -> tuple[dict, dict]:
    """Per session the median of its block medians (ms) and the median over rounds of its block median over the
    first session's in the same round (paired: the host's drift between rounds moves it less); rounds of blocks of
    4 runs, each after ortx.measure's idle and warm-in."""
    blocks = {name: [] for name in sessions}
    rounds = max(1, runs // 4)
    for index in range(rounds):
        for name, session in sessions.items():
            run = lambda: session.run(None, feed)  # noqa: E731
            switch_over(run)
            times = []
            for _ in range(4):
                start = time.perf_counter()
                run()
                times.append((time.perf_counter() - start) * 1e3)
            blocks[name].append(statistics.median(times))
        if progress:
            progress("timing", index + 1, rounds)
    first = next(iter(blocks.values()))
    return ({name: statistics.median(values) for name, values in blocks.items()},
            {name: statistics.median(a / b for a, b in zip(values, first)) for name, values in blocks.items()})


def search_fp32_nodes(model: ModelSource, *, target: float = DEFAULT_TARGET, calibration: object = None,
                      samples: int = DEFAULT_SAMPLES, threads: int | None = None, input_shapes: dict | None = None,
                      cost_runs: int = 20, time_runs: int = 0,
                      progress: SearchProgress | None = None) -> Fp32NodesChoice:
    """The layers a bf16 OrtxEP session keeps fp32 (greedy by measured gain per measured cost, then pruned) for its
    worst output cosine against ONNX Runtime fp32 to reach `target` on the inputs (see the module docstring).
    `input_shapes` fixes dynamic input dims (OrtxEP's option of that name) for random inputs and the sessions."""
    from ortx.quantization.calibration_data import calibration_set

    target = _check_target(target)
    if samples < 1:
        raise ValueError(f"samples must be >= 1, not {samples}")
    start = time.perf_counter()
    proto = load(model)
    data = to_ort_bytes(proto)
    options = {}
    if input_shapes:
        options["input_shapes"] = {name: tuple(shape) for name, shape in input_shapes.items()}
    reference = onnxruntime.InferenceSession(data, _session_options(threads), providers=["CPUExecutionProvider"])
    if calibration is not None:
        feeds = []
        for feed in calibration_set(calibration, proto):
            feeds.append(feed)
            if len(feeds) == samples:
                break
    else:
        feeds = [random_feeds(reference, input_shapes, seed=seed) for seed in range(samples)]
    sessions = _Sessions(data, reference, feeds, threads, options)
    bf16 = sessions.build(())
    candidates = _bf16_layers(bf16)
    if not candidates:
        raise ValueError("the bf16 session runs no layer on bf16 kernels (no constant-weight Conv, Gemm or MatMul "
                         "OrtxEP claims): there is nothing to keep fp32")
    score_bf16 = _worst_cosine([bf16.run(None, feed) for feed in feeds], sessions.references, sessions.floats)
    del bf16
    score_fp32 = sessions.score(candidates)
    gains: dict[str, float] = {}
    costs: dict[str, float] = {}
    chosen: list[str] = []
    score_chosen = score_bf16
    met = score_bf16 >= target
    if not met and score_fp32 >= target:
        for index, name in enumerate(candidates):
            gains[name] = sessions.score([name]) - score_bf16
            if progress:
                progress("sensitivity", index + 1, len(candidates))
        if cost_runs > 0:
            costs = _layer_costs(sessions, candidates, cost_runs)
            if progress:
                progress("cost", 1, 1)
        order = sorted(candidates, key=lambda name: -gains[name] / costs.get(name, 1.0))
        for name in order:  # greedy: the largest gains per cost first until the target holds
            chosen.append(name)
            score_chosen = sessions.score(chosen)
            if progress:
                progress("greedy", len(chosen), len(candidates))
            if score_chosen >= target:
                met = True
                break
        # pruning, costliest first (least gain first where costs are equal), in passes until no layer can go: the
        # score is not monotonic in the set (roundings partly cancel), so a layer kept in one pass may go in the next
        tried: set[tuple[str, ...]] = set()
        changed = met
        while changed:
            changed = False
            ordered = sorted(chosen, key=lambda name: (-costs.get(name, 1.0), gains[name]))
            for index, name in enumerate(ordered):
                trial = [other for other in chosen if other != name]
                if trial and tuple(trial) not in tried:
                    tried.add(tuple(trial))
                    score = sessions.score(trial)
                    if score >= target:
                        chosen, score_chosen, changed = trial, score, True
                if progress:  # a pass: done/total of the layers it tries
                    progress("pruning", len(ordered) if changed else index + 1, len(ordered))
                if changed:
                    break
    chosen_in_order = tuple(name for name in candidates if name in chosen) if met else ()
    times, paired = {}, {}
    if time_runs > 0:
        timed = {"bf16": sessions.build((), fast_build=False)}
        if chosen_in_order:
            timed["chosen"] = sessions.build(chosen_in_order, fast_build=False)
        timed["fp32"] = sessions.build(candidates, fast_build=False)
        times, paired = _time(timed, feeds[0], time_runs, progress)
    return Fp32NodesChoice(target, met, chosen_in_order, len(candidates), score_bf16,
                           score_chosen if met else score_bf16, score_fp32, gains, costs, sessions.built,
                           time.perf_counter() - start, times, paired)
