"""Side-by-side measurement of OrtxEP against ONNX Runtime's CPU EP on the same model and inputs.

Both sessions use the same thread count and ORT's default graph optimisations; runs are interleaved in short
blocks (BLOCK runs of ORT, then BLOCK of OrtxEP, repeated) after warm-up so machine noise hits both alike, and
medians are reported. Before each block the process idles SETTLE_S and the block starts with uncounted runs
(a switch-over): ORT's pool threads keep spinning on the cores 20-50 ms after a run ends, and OrtxEP's pool
worker up to 2 ms, so an engine started right after the other shares its cores with the other's threads. The
switch-over run alone did not absorb that (ResNet-18-style, 2 threads, one process, helpers paused, blocks of 4
after one switch-over run: ORT 28.9 / OrtxEP 33.8 ms with no idle, 22.8 / 27.5 after 5 ms, 20.2 / 24.6 after 50 ms),
so without the idle both engines were charged for the other's threads (ORT more), and one-run alternation measured
only that spin. The switch-over is a warm-in of at least WARM_IN_S, not one run: after the idle a sub-millisecond
model needs several runs to reach its steady time (BERT-like block, 2 threads, medians over 30 blocks by position
after 0.1 s idle, three processes: ORT 1.56, 1.08-1.17, 0.97-1.08, then 0.91-0.98 from the 5th run; OrtxEP 1.9,
1.3-1.5, 0.88-1.16, then 0.80-0.86), so counting from the second run put the median on that slope and the ratio
swung 0.65-1.14 between processes. Errors are measured on the same fresh random inputs (seeded, never zeros).
Other engines (`others`, e.g. OpenVINO in benchmarks/bf16.py) run in the same blocks, after OrtxEP. Each round
keeps every engine's block median: Comparison.paired_ratio and OtherEngine.paired are the medians over rounds of
OrtxEP's over the other's, which a host whose speed drifts from round to round moves less than the medians' ratio
(OpenVINO's times moved up to 2x between runs on a shared host, session 25). At more than
one thread each round of blocks starts, after its idle, with ortx.host_contention's probe, and the comparison
counts the rounds in which the host ran the threads on one core, one thread computed slower than the other, or
the threads exchanged data slowly (cores far apart) (Comparison.host_note).
"""
from __future__ import annotations

import dataclasses
import statistics
import time

import numpy as np
import onnxruntime

from ortx.ep.session import InferenceSession
from ortx.host_contention import fma_contention
from ortx.model_io import load, to_ort_bytes

BLOCK = 4  # counted runs per block; each block first makes uncounted warm-in runs (warm_in)
SETTLE_S = 0.1  # idle before each block, so the previous engine's pool threads have stopped spinning
WARM_IN_S = 0.02  # uncounted runs after the idle, at least one and until this much time has passed

_NUMPY_OF_TYPE = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64,
                  "tensor(int32)": np.int32, "tensor(float16)": np.float16, "tensor(uint8)": np.uint8,
                  "tensor(int8)": np.int8, "tensor(bool)": np.bool_}


@dataclasses.dataclass(frozen=True)
class OtherEngine:
    """A third engine measured in compare's blocks: its median and its output's cosine against ORT's; paired: the
    median over rounds of OrtxEP's block median / this engine's block median in the same round (and that ratio's
    lowest and highest round), which a host whose speed drifts between rounds moves less than the medians' ratio."""

    name: str
    median_ms: float
    cosine: float
    paired: float = float("nan")
    paired_range: tuple[float, float] = (float("nan"), float("nan"))


@dataclasses.dataclass(frozen=True)
class Comparison:
    name: str
    ort_ms: float
    ortx_ms: float
    max_abs_error: float
    max_relative_error: float  # max abs error / max |reference|
    cosine: float
    claimed_mac_share: float
    total_macs: int
    segments: int
    others: tuple[OtherEngine, ...] = ()
    # ortx.host_contention's probe once per round of blocks (after the idle, before ORT's block): how many rounds
    # found the threads sharing one core, where two-thread times are not this machine's usual ones
    shared_core_rounds: int = 0
    rounds: int = 0
    uneven_rounds: int = 0  # rounds where one thread ran the probe >= 1.2x slower than the other (host_contention)
    far_rounds: int = 0  # rounds where a cache line's round trip between the threads was >= 250 ns (far_cores)
    paired_ratio: float = float("nan")  # median over rounds of OrtxEP's block median / ORT's (OtherEngine.paired)

    def host_note(self) -> str:
        """'-' when every round had an even core per thread near the other, else e.g. '3/8 rounds on one core,
        1/8 uneven, 2/8 far apart'."""
        notes = [f"{count}/{self.rounds} {what}" for count, what in ((self.shared_core_rounds, "rounds on one core"),
                                                                      (self.uneven_rounds, "uneven"),
                                                                      (self.far_rounds, "far apart")) if count]
        return ", ".join(notes) or "-"

    @property
    def ratio(self) -> float:
        return self.ortx_ms / self.ort_ms

    @property
    def ortx_gflops(self) -> float:
        return 2.0 * self.total_macs / (self.ortx_ms * 1e-3) / 1e9

    @property
    def ort_gflops(self) -> float:
        return 2.0 * self.total_macs / (self.ort_ms * 1e-3) / 1e9


def warm_in(run, seconds: float | None = None) -> int:
    """Runs `run` once and again until `seconds` (default WARM_IN_S) have passed since it started (the switch-over
    after a block's idle, module docstring); returns how many runs it made."""
    seconds = WARM_IN_S if seconds is None else seconds
    start = time.perf_counter()
    count = 0
    while True:
        run()
        count += 1
        if time.perf_counter() - start >= seconds:
            return count


def switch_over(run, settle: float = SETTLE_S) -> int:
    """The start of a block (module docstring): idle `settle` s, so the previous engine's pool threads stop
    spinning, then warm_in(run). Returns the warm-in's run count; none of these runs is counted."""
    time.sleep(settle)
    return warm_in(run)


def random_feeds(session, shapes: dict[str, tuple[int, ...]] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs in [-1, 1) (floats) or [0, 10) (ints) for every model input; dynamic dims from `shapes`."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for arg in session.get_inputs():
        shape = (shapes or {}).get(arg.name)
        if shape is None:
            if not all(isinstance(dim, int) for dim in arg.shape):
                raise ValueError(f"input {arg.name!r} has dynamic shape {arg.shape}; give its shape")
            shape = tuple(arg.shape)
        dtype = _NUMPY_OF_TYPE.get(arg.type)
        if dtype is None:
            raise ValueError(f"input {arg.name!r}: random inputs of type {arg.type} are not supported")
        if np.issubdtype(dtype, np.floating):
            feeds[arg.name] = rng.uniform(-1.0, 1.0, size=shape).astype(dtype)
        else:
            feeds[arg.name] = rng.integers(0, 10, size=shape).astype(dtype)
    return feeds


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    denominator = np.linalg.norm(a) * np.linalg.norm(b)
    return 1.0 if denominator == 0 else float(a @ b / denominator)


def compare(name: str, model, *, shapes=None, threads: int = 2, runs: int = 20, warmup: int = 3,
            seed: int = 0, progress=None, tuning: str = "off", precision: str = "fp32",
            others: dict | None = None, settle: float = SETTLE_S, extra_options: dict | None = None) -> Comparison:
    """Builds an ORT CPU session and an OrtxEP session on `model` and measures both, interleaved. `tuning` and
    `precision` are OrtxEP's options: tuning "off" (default) measures OrtxEP's own kernels on every segment it can
    claim, whatever tuning records this machine holds. `others`: name -> run(feeds) returning the outputs as
    ORT orders them; each is timed in the same blocks and its first output's cosine against ORT's reported.
    `extra_options`: further OrtxEP provider options (fp32_nodes, say).
    `settle`: seconds of idle before each block (module docstring)."""
    proto = load(model)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    ort_session = onnxruntime.InferenceSession(to_ort_bytes(proto), options, providers=["CPUExecutionProvider"])
    feeds = random_feeds(ort_session, shapes, seed)
    ortx_options = onnxruntime.SessionOptions()
    ortx_options.intra_op_num_threads = threads
    input_shapes = {k: v.shape for k, v in feeds.items()}
    ortx_session = InferenceSession(proto, ortx_options, providers=["OrtxEP", "CPUExecutionProvider"],
                                    provider_options=[{"input_shapes": input_shapes, "tuning": tuning,
                                                       "precision": precision, **(extra_options or {})}, {}])
    expected = ort_session.run(None, feeds)
    actual = ortx_session.run(None, feeds)
    errors, relative, cosines = [], [], []
    for want, got in zip(expected, actual):
        want = np.asarray(want)
        got = np.asarray(got)
        if want.dtype.kind == "f":
            error = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
            errors.append(error)
            relative.append(error / max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-30))
            cosines.append(_cosine(got, want))
        else:
            mismatch = float(np.count_nonzero(got != want))
            errors.append(mismatch)
            relative.append(mismatch)
            cosines.append(1.0 if mismatch == 0 else 0.0)
    engines = [lambda: ort_session.run(None, feeds), lambda: ortx_session.run(None, feeds)]
    other_names = list(others or {})
    other_cosines = []
    for other in other_names:
        engines.append(lambda run=others[other]: run(feeds))
        other_cosines.append(_cosine(np.asarray(engines[-1]()[0]), np.asarray(expected[0])))
    for _ in range(warmup):
        for run in engines:
            run()
    all_times = [[] for _ in engines]
    block_medians = [[] for _ in engines]  # per engine, its median in each round
    ort_times, ortx_times = all_times[0], all_times[1]
    shared_core_rounds = uneven_rounds = far_rounds = rounds = 0
    while len(ortx_times) < runs:
        count = min(BLOCK, runs - len(ortx_times))
        rounds += 1
        if threads > 1:
            time.sleep(settle)  # the probe, too, must not share the cores with the last block's spinning threads
            reading = fma_contention(threads)
            shared_core_rounds += reading.shared_core
            uneven_rounds += reading.uneven
            far_rounds += reading.far_cores
        for run, times, medians in zip(engines, all_times, block_medians):
            switch_over(run, settle)
            for _ in range(count):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
            medians.append(statistics.median(times[-count:]))
        if progress is not None:
            progress(len(ortx_times), runs)
    assignment = ortx_session.assignment

    # OrtxEP's block median over each engine's, round by round
    paired = [[mine / theirs for mine, theirs in zip(block_medians[1], medians)] for medians in block_medians]
    return Comparison(
        name=name,
        ort_ms=1e3 * statistics.median(ort_times),
        ortx_ms=1e3 * statistics.median(ortx_times),
        max_abs_error=max(errors, default=0.0),
        max_relative_error=max(relative, default=0.0),
        cosine=min(cosines, default=1.0),
        claimed_mac_share=assignment.claimed_mac_share,
        total_macs=assignment.total_macs,
        segments=assignment.segments,
        others=tuple(OtherEngine(other, 1e3 * statistics.median(times), cosine, statistics.median(ratios),
                                 (min(ratios), max(ratios)))
                     for other, times, cosine, ratios in zip(other_names, all_times[2:], other_cosines, paired[2:])),
        shared_core_rounds=shared_core_rounds,
        rounds=rounds,
        uneven_rounds=uneven_rounds,
        far_rounds=far_rounds,
        paired_ratio=statistics.median(paired[0]),
    )


def format_table(rows: list[Comparison]) -> str:
    header = (f"{'model':<28} {'ORT ms':>9} {'OrtxEP ms':>10} {'ratio':>6} {'GFLOP/s':>8} {'max abs err':>12} "
              f"{'rel err':>9} {'cosine':>9} {'claimed':>8} {'segs':>5}")
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row.name:<28} {row.ort_ms:>9.2f} {row.ortx_ms:>10.2f} {row.ratio:>6.2f} {row.ortx_gflops:>8.1f} "
            f"{row.max_abs_error:>12.2e} {row.max_relative_error:>9.1e} {row.cosine:>9.6f} "
            f"{100 * row.claimed_mac_share:>7.1f}% {row.segments:>5}")
    return "\n".join(lines)
