"""Search quality without the machine (issue #4): the guided search replayed inside each development layer's
measured uniform samples, so a change to the search method can be judged in a minute before it is measured.

    python benchmarks/search_replay.py [--table PATH] [--seeds 16] [--trials 24] [--against 48]
                                       [--caches L1d:48K,L2:1024K,L3:32M]

1. Universe: per development layer of benchmarks/search_quality.py, the seeded uniform samples that its `--sample`
   measured (regenerated from the same seed; those the table holds, ok), with their table times.
2. The guided search (ortx.tune.gemm_space.guided_search's EvolutionarySearch, transfer from the other five layers'
   rows of the table) runs `--trials` trials in batches of 4 inside the universe: its samples and neighbours are
   drawn from it, its measurements are the table's.
3. Score per layer: P(random's best of `--against` draws from the universe is not faster than guided's best),
   exact over random's draws (hypergeometric), averaged over seeds; 1.0 means guided always reaches random's final.
Limits: inside ~300 samples an elite schedule's neighbours are rarely there, so the evolution's local steps are not
exercised; features use the caches given (the table records only the fingerprint key), this machine's by default.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import search_quality  # noqa: E402
from ortx.codegen import gemm  # noqa: E402
from ortx.tune import gemm_features, gemm_space, search  # noqa: E402
from ortx.tune.fingerprint import detected_caches  # noqa: E402
from ortx.tune.runner import MeasureResult  # noqa: E402
from ortx.tune.space import Schedule  # noqa: E402

SAMPLE_SEED = 20261203  # search_quality.sample's


class UniverseView:
    """A Space seen through a finite set of its schedules: samples and neighbours come only from the set."""

    def __init__(self, space, universe: list, features: dict):
        self.universe, self.members, self._features = universe, set(universe), features
        self.inner, self.work, self.size = space, space.work, len(universe)

    def sample(self, rng):
        return self.universe[rng.integers(len(self.universe))]

    def neighbours(self, schedule):
        return [other for other in self.inner.neighbours(schedule) if other in self.members]

    def contains(self, schedule) -> bool:
        return schedule in self.members

    def features(self, schedule):
        return self._features[schedule]

    def enumerate(self):
        return iter(self.universe)


def layer_rows(layer, rows: dict, caches: dict, samples: int):
    """(problem, task, {schedule: ms} of every ok row, the uniform samples' subset of it)."""
    _, _, cout, cin, kh, kw, height, width = layer
    problem = gemm.GemmProblem.dense(cout, height * width, cin * kh * kw)
    task = gemm_space.task_for(problem, 1, "avx512")
    found = {}
    for *values, status, ms in rows["rows"]:
        schedule = Schedule.of(dict(zip(rows["choices"], values)))
        if status == "ok" and task.space.contains(schedule):
            found[schedule] = ms
    rng = np.random.default_rng(SAMPLE_SEED)
    wanted = dict.fromkeys([task.default] + [task.space.sample(rng) for _ in range(samples - 1)])
    return problem, task, found, {schedule: found[schedule] for schedule in wanted if schedule in found}


def p_not_better(values: np.ndarray, best: float, draws: int) -> float:
    """P(the minimum of `draws` draws without replacement from `values` is >= best)."""
    above = int(np.sum(values >= best))
    if above < draws:
        return 0.0
    return math.exp(math.lgamma(above + 1) - math.lgamma(above - draws + 1) - math.lgamma(len(values) + 1)
                    + math.lgamma(len(values) - draws + 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=search_quality.DEFAULT_TABLE)
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--trials", type=int, default=24, help="guided trials (default 24)")
    parser.add_argument("--against", type=int, default=48, help="random draws it is compared with (default 48)")
    parser.add_argument("--samples", type=int, default=300, help="the table's uniform samples per layer (--sample)")
    parser.add_argument("--caches", default=None, help="e.g. L1d:48K,L2:1024K,L3:32M (default: this machine's)")
    args = parser.parse_args()
    import json

    with open(args.table) as handle:
        table = json.load(handle)
    caches = gemm_features.cache_bytes(tuple(args.caches.split(",")) if args.caches else detected_caches())
    layers = {layer[0]: layer for layer in search_quality.DEVELOPMENT_LAYERS}
    missing = [label for label in layers if label not in table["layers"]]
    if missing:
        parser.error(f"{args.table} has no rows of {missing}: measure them with search_quality.py --sample")
    data = {label: layer_rows(layer, table["layers"][label], caches, args.samples) for label, layer in layers.items()}
    scores = []
    for label, (problem, task, _, universe) in data.items():
        rows, targets, schedules = [], [], []
        for other, (other_problem, _, found, _) in data.items():
            if other != label:  # as gemm_features.transfer_data hands them over: fastest first, with schedules
                rows += [gemm_features.features(other_problem, 1, caches, s) for s in found]
                targets += list(search.clipped(np.log(np.array(list(found.values())) / (other_problem.flops / 1e9))))
                schedules += list(found)
        order = np.argsort(targets)
        transfer = search.TransferData(np.stack(rows)[order], np.array(targets)[order],
                                       tuple(schedules[i] for i in order))
        members = list(universe)
        features = {s: gemm_features.features(problem, 1, caches, s) for s in members}
        values = np.array(list(universe.values()))
        chances = []
        for seed in range(args.seeds):
            guided = search.EvolutionarySearch(UniverseView(task.space, members, features), seed, transfer=transfer)
            measured: set = set()
            while len(measured) < min(args.trials, len(members)):
                picks = guided.propose(min(4, args.trials - len(measured)), measured)
                if not picks:
                    break
                for schedule in picks:
                    measured.add(schedule)
                    guided.observe(MeasureResult(schedule, "ok", universe[schedule]))
            chances.append(p_not_better(values, min(universe[s] for s in measured), args.against))
        scores.append(float(np.mean(chances)))
        print(f"{label:28s} {len(members)} samples: P(guided's best of {args.trials} <= random's best of "
              f"{args.against}) = {scores[-1]:.2f}", flush=True)
    print(f"mean over the development layers: {np.mean(scores):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
