"""Search quality without the machine (issue #4): the guided search replayed inside each development layer's
measured uniform samples, so a change to the search method can be judged in a minute before it is measured.

    python benchmarks/search_replay.py [--table PATH] [--seeds 16] [--trials 24] [--against 48]
                                       [--caches L1d:48K,L2:1024K,L3:32M]

1. Universe: per development layer of benchmarks/search_quality.py, the seeded uniform samples that its `--sample`
   measured (regenerated from the same seed; those the table holds, ok), with their table times.
2. The guided search (ortx.tune.gemm_space.guided_search's EvolutionarySearch, its transfer read by
   gemm_features.transfer_data from the other five layers' rows of the table, as search_quality.py hands them) runs `--trials` trials in batches of 4 inside the universe: its samples and neighbours are
   drawn from it, its measurements are the table's.
3. Score per layer: P(random's best of `--against` draws from the universe is not faster than guided's best),
   exact over random's draws (hypergeometric), averaged over seeds; 1.0 means guided always reaches random's final.
Limits: inside ~300 samples an elite schedule's neighbours are rarely there, so the evolution's local steps are not
exercised; features use the caches given (the table records only the fingerprint key), this machine's by default.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import search_quality  # noqa: E402
from ortx.tune import gemm_features, search  # noqa: E402
from ortx.tune.fingerprint import current  # noqa: E402
from ortx.tune.records import TuningDatabase  # noqa: E402
from ortx.tune.runner import MeasureResult  # noqa: E402


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


def uniform_samples(task, table, label: str, samples: int) -> dict:
    """{schedule: ms} of the layer's `--sample` schedules (search_quality.sample's seed) that the table holds, ok."""
    rng = np.random.default_rng(search_quality.SAMPLE_SEED)
    wanted = dict.fromkeys([task.default] + [task.space.sample(rng) for _ in range(samples - 1)])
    found = table.results(label, task.space)
    return {schedule: found[schedule].median_ms for schedule in wanted
            if schedule in found and found[schedule].ok}


def p_not_better(values: np.ndarray, best: float, draws: int) -> float:
    """P(the minimum of `draws` draws without replacement from `values` is >= best)."""
    above = int(np.sum(values >= best))
    if above < draws:
        return 0.0
    return math.exp(math.lgamma(above + 1) - math.lgamma(above - draws + 1) - math.lgamma(len(values) + 1)
                    + math.lgamma(len(values) - draws + 1))


def replay(task, universe: dict, transfer, caches: dict, args, seed: int) -> float:
    """One guided search inside `universe`; the chance that random's best of args.against is not faster."""
    problem = gemm_features.parse_signature(task.signature)[0]
    members = list(universe)
    features = {s: gemm_features.features(problem, 1, caches, s) for s in members}
    guided = search.EvolutionarySearch(UniverseView(task.space, members, features), seed, transfer=transfer)
    measured: set = set()
    while len(measured) < min(args.trials, len(members)):
        picks = guided.propose(min(4, args.trials - len(measured)), measured)
        if not picks:
            break
        for schedule in picks:
            measured.add(schedule)
            guided.observe(MeasureResult(schedule, "ok", universe[schedule]))
    return p_not_better(np.array(list(universe.values())), min(universe[s] for s in measured), args.against)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=search_quality.DEFAULT_TABLE)
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--trials", type=int, default=24, help="guided trials (default 24)")
    parser.add_argument("--against", type=int, default=48, help="random draws it is compared with (default 48)")
    parser.add_argument("--samples", type=int, default=300, help="the table's uniform samples per layer (--sample)")
    parser.add_argument("--caches", default=None, help="e.g. L1d:48K,L2:1024K,L3:32M (default: this machine's)")
    args = parser.parse_args()
    with open(args.table) as handle:
        context = json.load(handle)["context"]
    table = search_quality.MeasurementTable(args.table, context)  # its own machine's rows, whichever that was
    fingerprint = current()
    if args.caches:
        fingerprint = dataclasses.replace(fingerprint, caches=tuple(args.caches.split(",")))
    caches = gemm_features.cache_bytes(fingerprint.caches)
    make_task, _, _ = search_quality.conv_gemm_space(1)
    layers = search_quality.DEVELOPMENT_LAYERS
    missing = [layer[0] for layer in layers if layer[0] not in table.layers]
    if missing:
        parser.error(f"{args.table} has no rows of {missing}: measure them with search_quality.py --sample")
    scores = []
    for layer in layers:
        task = make_task(layer).task
        universe = uniform_samples(task, table, layer[0], args.samples)
        with tempfile.TemporaryDirectory() as directory, \
                TuningDatabase(os.path.join(directory, "transfer.sqlite")) as database:
            database.add_fingerprint(fingerprint)
            for record in search_quality.transfer_records(layers, make_task, table, fingerprint.key, layer[0]):
                database.add(record)
            transfer = gemm_features.transfer_data(database, task, fingerprint)
        scores.append(float(np.mean([replay(task, universe, transfer, caches, args, seed)
                                     for seed in range(args.seeds)])))
        print(f"{layer[0]:28s} {len(universe)} samples: P(guided's best of {args.trials} <= random's best of "
              f"{args.against}) = {scores[-1]:.2f}", flush=True)
    print(f"mean over the development layers: {np.mean(scores):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
