"""Search quality (issue #4): best-so-far against trials for random and cost-model-guided (evolutionary) search on
conv layers' GEMM schedule spaces, and how many trials the guided search needs to reach random's final result.

    python benchmarks/search_quality.py [--trials 64] [--seeds 3] [--threads 2] [--shapes LABEL,...]
                                        [--plot search_quality.png] [--write BENCHMARKS.md]

1. Tasks: each conv layer of CONV_LAYERS as the GEMM its im2col form computes (M = Cout, N = H*W of the output,
   K = Cin*kh*kw; weights [M, K] times patches [K, N], both contiguous) in the generated GEMM's schedule space
   (ortx.tune.gemm_space, the machine's widest ISA), measured by its runner (built, checked against a float64
   product, timed over rotating operand copies).
2. Per layer and seed, RandomSearch and EvolutionarySearch (ridge cost model) advance in lockstep, one batch each
   in turn, through one memoised measure: a schedule both propose is measured once, so both see the same time for
   it, and both see the same machine load over time. Each has its own record database (no resumption across);
   with the same seed both start from the same random samples (EvolutionarySearch's `initial` phase).
3. Printed: per layer, best-so-far after 1, 2, 4, ... trials (median over seeds), both finals, the default
   schedule's time, and per seed the first trial where guided's best-so-far is <= random's final (the issue's
   goal: at most half the trials); with matplotlib ([plot] extra), a PNG of best-so-far against trials.
Everything but the space and its runner goes through Task / Space / measure (`compare`), so any schedule space can
be compared the same way. Not run by CI: it compiles and times hundreds of kernels.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ortx.tune.fingerprint import current  # noqa: E402
from ortx.tune.records import TuningDatabase  # noqa: E402
from ortx.tune.search import EvolutionarySearch, RandomSearch, TaskProgress, measure_round  # noqa: E402

# Conv layers as (label, model and layer, Cout, Cin, kh, kw, output H, output W), from the models of issue #4.
CONV_LAYERS = (
    ("resnet18_64@56_3x3", "ResNet-18-style layer1 3x3 conv, 56x56", 64, 64, 3, 3, 56, 56),
    ("resnet18_256@14_3x3", "ResNet-18-style layer3 3x3 conv, 14x14", 256, 256, 3, 3, 14, 14),
    ("ppocr_det_24@160_3x3", "PP-OCRv4 det p2o.Conv.58 (neck, 96->24 3x3) at 640x640 input", 24, 96, 3, 3, 160, 160),
    ("ppocr_det_384@20_1x1", "PP-OCRv4 det p2o.Conv.28 (backbone 1x1, 384->384) at 640x640 input", 384, 384, 1, 1,
     20, 20),
)
STRATEGIES = {"random": RandomSearch, "guided": EvolutionarySearch}
CHECKPOINTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclasses.dataclass
class Comparison:
    label: str
    description: str
    default_ms: float | None
    curves: dict[str, list[list[float]]]  # strategy -> per seed, best-so-far ms after each trial
    measurements: int  # distinct schedules measured (the memo's size)
    seconds: float

    def final(self, strategy: str) -> list[float]:
        return [curve[-1] for curve in self.curves[strategy]]

    def trials_to_reach(self) -> list[int | None]:
        """Per seed: the first trial where guided's best-so-far <= random's final, None if never."""
        reached = []
        for random_curve, guided_curve in zip(self.curves["random"], self.curves["guided"]):
            target = random_curve[-1]
            reached.append(next((trial for trial, best in enumerate(guided_curve, 1) if best <= target), None))
        return reached


class MemoisedMeasure:
    """measure(pairs) that measures each distinct schedule once and answers repeats from memory."""

    def __init__(self, measure):
        self.measure = measure
        self.results = {}

    def __call__(self, pairs):
        fresh = [(task, schedule) for task, schedule in dict.fromkeys(pairs) if schedule not in self.results]
        if fresh:
            for (_, schedule), result in zip(fresh, self.measure(fresh), strict=True):
                self.results[schedule] = result
        return [self.results[schedule] for _, schedule in pairs]


def compare(task, measure, *, trials: int, seed: int, batch: int) -> dict[str, list[float]]:
    """Random and guided search on `task`, in lockstep through `measure` (pairs -> results): best-so-far per trial."""
    with tempfile.TemporaryDirectory() as directory:
        databases = {name: TuningDatabase(os.path.join(directory, f"{name}.sqlite")) for name in STRATEGIES}
        try:
            fingerprint = current()
            progress = {}
            for name, strategy in STRATEGIES.items():
                databases[name].add_fingerprint(fingerprint)
                progress[name] = TaskProgress(task, strategy(task.space, seed=seed))
            live = set(STRATEGIES)
            while live:
                for name in list(STRATEGIES):
                    state = progress[name]
                    left = min(batch, trials - len(state.measured))
                    proposals = state.strategy.propose(left, state.measured) if left > 0 and name in live else []
                    if not proposals:
                        live.discard(name)
                        continue
                    measure_round([(state, schedule) for schedule in proposals], measure, databases[name],
                                  fingerprint, f"search_quality:{name}")
            return {name: list(state.best_so_far) for name, state in progress.items()}
        finally:
            for database in databases.values():
                database.close()


def conv_gemm_space(threads: int):
    """(make_task(layer) -> (task, measure, default_ms)) over the generated GEMM's space, or the reason it is not
    there. Imported here so the rest of the script works on any Task/Space/measure."""
    try:
        from ortx.codegen import gemm
        from ortx.config import Options
        from ortx.tune import gemm_space
        from ortx.tune.runner import TimingSettings
    except ImportError as error:
        return None, f"the GEMM schedule space (ortx.tune.gemm_space, ortx.codegen.gemm) is not in this checkout: {error}"
    options = Options.from_environment()
    isa = gemm.runnable_isas()[-1]
    settings = TimingSettings(warmup_runs=2, timed_runs=10, rotations=4)

    def make_task(layer):
        _, _, cout, cin, kh, kw, height, width = layer
        problem = gemm.GemmProblem.dense(cout, height * width, cin * kh * kw)
        task = gemm_space.task_for(problem, threads, isa)
        runner = gemm_space.GemmRunner(problem, threads, options, settings)
        default = runner.measure(gemm_space.default_schedule(problem, isa, threads))
        return task, (lambda pairs: runner([schedule for _, schedule in pairs])), (
            default.median_ms if default.ok else None)

    return make_task, f"generated GEMM ({isa}), {threads} threads"


def run(layers, make_task, *, trials: int, seeds: int, batch: int) -> list[Comparison]:
    comparisons = []
    for layer in layers:
        start = time.perf_counter()
        task, measure, default_ms = make_task(layer)
        memo = MemoisedMeasure(measure)
        curves = {name: [] for name in STRATEGIES}
        for seed in range(seeds):
            for name, curve in compare(task, memo, trials=trials, seed=seed, batch=batch).items():
                curves[name].append(curve)
        comparisons.append(Comparison(layer[0], layer[1], default_ms, curves, len(memo.results),
                                      time.perf_counter() - start))
        print(render([comparisons[-1]], trials), flush=True)
    return comparisons


def render(comparisons: list[Comparison], trials: int) -> str:
    checkpoints = [c for c in CHECKPOINTS if c <= trials]
    lines = []
    for comparison in comparisons:
        reached = comparison.trials_to_reach()
        lines.append(f"{comparison.label}: {comparison.description}; default schedule "
                     + (f"{comparison.default_ms:.3f} ms" if comparison.default_ms is not None else "failed")
                     + f"; {comparison.measurements} schedules measured in {comparison.seconds:.0f} s")
        lines.append("  best-so-far ms (median over seeds) after trial " + " ".join(f"{c:>7}" for c in checkpoints))
        for name in STRATEGIES:
            medians = [statistics.median(curve[c - 1] for curve in comparison.curves[name]) for c in checkpoints]
            lines.append(f"  {name:<45} " + " ".join(f"{value:7.3f}" for value in medians))
        text = ", ".join("never" if value is None else str(value) for value in reached)
        finite = [value for value in reached if value is not None]
        verdict = ("yes" if len(finite) == len(reached) and max(finite) <= trials / 2 else "no")
        lines.append(f"  random final {_ms_list(comparison.final('random'))}, guided final "
                     f"{_ms_list(comparison.final('guided'))}; trials for guided to reach random's final, per seed: "
                     f"{text} (of {trials}; at most half in every seed: {verdict})")
    return "\n".join(lines)


def _ms_list(values: list[float]) -> str:
    return "[" + ", ".join(f"{value:.3f}" for value in values) + "] ms"


def plot(comparisons: list[Comparison], path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(1, len(comparisons), figsize=(4.2 * len(comparisons), 3.6), squeeze=False)
    for axis, comparison in zip(axes[0], comparisons):
        for name, color in (("random", "tab:gray"), ("guided", "tab:blue")):
            for index, curve in enumerate(comparison.curves[name]):
                axis.plot(range(1, len(curve) + 1), curve, color=color, alpha=0.8 if index == 0 else 0.35,
                          label=name if index == 0 else None)
        if comparison.default_ms is not None:
            axis.axhline(comparison.default_ms, color="tab:red", linestyle=":", label="default schedule")
        axis.set_title(comparison.label, fontsize=9)
        axis.set_xlabel("trials")
        axis.set_ylabel("best-so-far ms")
        axis.set_yscale("log")
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64, help="schedules per search (default 64)")
    parser.add_argument("--seeds", type=int, default=3, help="searches per strategy and layer (default 3)")
    parser.add_argument("--batch", type=int, default=4, help="schedules per round (default 4)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shapes", default=",".join(layer[0] for layer in CONV_LAYERS[:3]),
                        help=f"comma-separated labels of {', '.join(layer[0] for layer in CONV_LAYERS)}")
    parser.add_argument("--plot", default="search_quality.png", help="PNG path (needs matplotlib)")
    parser.add_argument("--write", metavar="BENCHMARKS.md", help="also write the 'Search quality' section there")
    args = parser.parse_args()
    known = {layer[0]: layer for layer in CONV_LAYERS}
    unknown = [label for label in args.shapes.split(",") if label not in known]
    if unknown:
        parser.error(f"--shapes: unknown {unknown}; known: {', '.join(known)}")
    make_task, description = conv_gemm_space(args.threads)
    if make_task is None:
        print(f"search_quality: {description}; nothing to measure", file=sys.stderr)
        return 1
    print(f"search quality on {description}: {args.trials} trials, {args.seeds} seeds, batches of {args.batch}")
    comparisons = run([known[label] for label in args.shapes.split(",")], make_task, trials=args.trials,
                      seeds=args.seeds, batch=args.batch)
    if plot(comparisons, args.plot):
        print(f"plot: {args.plot}")
    else:
        print("plot: matplotlib is not installed (pip install -e '.[plot]')")
    if args.write:
        from benchmarks._report import write_section

        body = (f"`python benchmarks/search_quality.py --trials {args.trials} --seeds {args.seeds}` on {description}"
                f"; plot: `{args.plot}`.\n\n```\n{render(comparisons, args.trials)}\n```")
        write_section(args.write, "Search quality", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
