"""ortx.tune.search and ortx.tune.runner: known bests in synthetic spaces, guided vs random, failures as rows,
resumption without re-measuring, determinism with a seed."""
import math
import time

import numpy as np
import pytest

from ortx.tune.fingerprint import current
from ortx.tune.records import TuningDatabase
from ortx.tune.runner import CompileError, FunctionRunner, MeasureResult, TimingSettings
from ortx.tune.search import EvolutionarySearch, Exhaustive, RandomSearch, Task, TransferData, search
from ortx.tune.space import Space

# A tile-like space (464 valid of 1024) and a cost with one optimum (tile_m 32, tile_n 8, unroll 4, order mn):
# a bowl in log2 of each tile, a kink in unroll, a constant penalty for the other order.
SPACE = Space("synthetic", {"tile_m": (1, 2, 4, 8, 16, 32, 64, 128), "tile_n": (1, 2, 4, 8, 16, 32, 64, 128),
                            "unroll": (1, 2, 4, 8), "order": ("mn", "nm")},
              valid=lambda s: s["tile_m"] * s["tile_n"] <= 2048)


def synthetic_ms(schedule) -> float:
    return math.exp(0.3 * (math.log2(schedule["tile_m"]) - 5) ** 2 + 0.2 * (math.log2(schedule["tile_n"]) - 3) ** 2
                    + 0.5 * abs(math.log2(schedule["unroll"]) - 2) + (0.3 if schedule["order"] == "nm" else 0.0))


class SyntheticRunner:
    """Times are the synthetic cost; counts what it was asked to measure."""

    def __init__(self):
        self.measured = []

    def __call__(self, schedules):
        self.measured.extend(schedules)
        return [MeasureResult(s, "ok", synthetic_ms(s)) for s in schedules]


@pytest.fixture
def database(tmp_path):
    with TuningDatabase(tmp_path / "tuning.sqlite") as opened:
        yield opened


def run(strategy, database, trials, runner=None, space=SPACE, signature="synthetic", batch=1):
    return search(Task(signature, space, "test-template"), strategy, runner or SyntheticRunner(), database,
                  current(), trials=trials, batch=batch)


def trials_to(result, target_ms) -> int | None:
    return next((trial for trial, best in enumerate(result.best_so_far_ms, 1) if best <= target_ms), None)


def test_exhaustive_finds_the_known_best(database):
    small = Space("small", {"tile_m": (4, 8, 16, 32, 64), "unroll": (1, 2, 4, 8), "tile_n": (8,), "order": ("mn",)})
    expected = min(small.enumerate(), key=synthetic_ms)
    result = run(Exhaustive(small), database, trials=100, space=small)
    assert result.measured == 20 and result.best.schedule == expected
    assert result.best.median_ms == synthetic_ms(expected) == pytest.approx(1.0)


def test_guided_search_finds_the_known_best_with_a_seed(database):
    expected = min(SPACE.enumerate(), key=synthetic_ms)
    result = run(EvolutionarySearch(SPACE, seed=0), database, trials=64)
    assert result.best.schedule == expected  # 64 of 464 valid schedules measured


def test_guided_search_never_spends_a_trial_on_a_twin():
    """A knob the features do not see (here "spare", like an M block clipped to a task's rows) makes twins: the
    same loop nest, the same prediction; a batch takes at most one of them, and none of a measured schedule."""
    spare = Space("spare", {**SPACE.choices, "spare": (1, 2, 3, 4)}, valid=SPACE.valid,
                  featurize=lambda s: np.array([math.log2(s["tile_m"]), math.log2(s["tile_n"]),
                                                math.log2(s["unroll"]), float(s["order"] == "mn")]))
    guided = EvolutionarySearch(spare, seed=0, epsilon=0.0)

    def nest(schedule):
        return spare.features(schedule).tobytes()

    measured = set(RandomSearch(spare, seed=1).propose(8, set()))
    for schedule in measured:
        guided.observe(MeasureResult(schedule, "ok", synthetic_ms(schedule)))
    for _ in range(6):
        batch = guided.propose(4, measured)
        assert len(batch) == 4
        nests = [nest(schedule) for schedule in batch]
        assert len(set(nests)) == 4 and not set(nests) & {nest(schedule) for schedule in measured}
        for schedule in batch:
            guided.observe(MeasureResult(schedule, "ok", synthetic_ms(schedule)))
        measured |= set(batch)


def test_search_is_deterministic_given_a_seed(tmp_path):
    orders = []
    for attempt in range(2):
        for make in (lambda: RandomSearch(SPACE, seed=3), lambda: EvolutionarySearch(SPACE, seed=3)):
            runner = SyntheticRunner()
            with TuningDatabase(tmp_path / f"{attempt}-{len(orders)}.sqlite") as database:
                run(make(), database, trials=24, runner=runner)
            orders.append(runner.measured)
    assert orders[0] == orders[2] and orders[1] == orders[3]
    assert len(set(orders[0])) == 24  # never the same schedule twice


def test_guided_search_reaches_the_random_search_result_in_fewer_trials(tmp_path):
    trials = 64
    needed = []
    for seed in range(3):
        with TuningDatabase(tmp_path / f"random{seed}.sqlite") as database:
            random_best = run(RandomSearch(SPACE, seed=seed), database, trials, batch=4).best.median_ms
        with TuningDatabase(tmp_path / f"guided{seed}.sqlite") as database:
            guided = run(EvolutionarySearch(SPACE, seed=seed), database, trials, batch=4)
        reached = trials_to(guided, random_best)
        assert reached is not None, f"seed {seed}: guided never reached random's {random_best}"
        needed.append(reached)
    assert max(needed) < trials and sum(needed) <= len(needed) * trials / 2, needed


def test_guided_search_finds_the_known_best_in_fewer_trials_than_random_on_average(tmp_path):
    best_ms = min(synthetic_ms(s) for s in SPACE.enumerate())
    trials, found = 64, {"random": [], "guided": []}
    for seed in range(3):
        for name, strategy in (("random", RandomSearch(SPACE, seed=seed)),
                               ("guided", EvolutionarySearch(SPACE, seed=seed))):
            with TuningDatabase(tmp_path / f"{name}{seed}.sqlite") as database:
                reached = trials_to(run(strategy, database, trials, batch=4), best_ms)
            found[name].append(trials + 1 if reached is None else reached)  # never: counted past the end
    assert all(value <= trials for value in found["guided"]), found
    assert sum(found["guided"]) < sum(found["random"]) / 2, found


def test_transfer_from_another_task_finds_the_best_in_its_first_rounds(tmp_path):
    """Another task's records (a cost 2.7x slower everywhere, the same shape of bowl, 120 random schedules
    without this task's best) seed the model: the best is measured within 8 trials on every seed."""
    best = min(SPACE.enumerate(), key=synthetic_ms)
    rng = np.random.default_rng(7)
    others = [s for s in dict.fromkeys(SPACE.sample(rng) for _ in range(200)) if s != best][:120]
    transfer = TransferData(np.stack([SPACE.features(s) for s in others]),
                            np.log([synthetic_ms(s) for s in others]) + 1.0, tuple(others))
    for seed in range(4):
        with TuningDatabase(tmp_path / f"transfer{seed}.sqlite") as database:
            result = run(EvolutionarySearch(SPACE, seed=seed, transfer=transfer), database, 8, batch=4)
        assert result.best.schedule == best, (seed, result.best)


def test_own_measurements_correct_a_misleading_transfer(tmp_path):
    """Another task's records of every schedule put the bowl's tile_m optimum at 8 (this task's is 32): the stacked
    model (a prior on the transfer, a residual on this task's measurements) follows this task's own measurements
    however many transfer rows outnumber them, so most seeds measure the true best within 48 trials (one model
    fitted on both, the transfer weighted a quarter, did on 1 of these 8 seeds)."""
    def other_ms(schedule) -> float:
        return synthetic_ms(schedule) * math.exp(0.3 * ((math.log2(schedule["tile_m"]) - 3) ** 2
                                                        - (math.log2(schedule["tile_m"]) - 5) ** 2))

    best = min(SPACE.enumerate(), key=synthetic_ms)
    others = list(SPACE.enumerate())
    transfer = TransferData(np.stack([SPACE.features(s) for s in others]), np.log([other_ms(s) for s in others]),
                            tuple(sorted(others, key=other_ms)))
    found = 0
    for seed in range(8):
        with TuningDatabase(tmp_path / f"misled{seed}.sqlite") as database:
            result = run(EvolutionarySearch(SPACE, seed=seed, transfer=transfer), database, 48, batch=4)
        found += result.best.schedule == best
    assert found >= 5, found


def slow_sum(milliseconds):
    def run(inputs):
        time.sleep(milliseconds / 1e3)
        return [inputs[0].sum(axis=1)]
    return run


def build_candidate(schedule):
    """Five kinds of candidate by `variant`: a correct one, a wrong one, one that fails to compile, one that raises
    when run, and one too slow for the timeout."""
    variant = schedule["variant"]
    if variant == "compile_error":
        raise CompileError("error: expected ';' before '}' token")
    if variant == "wrong_result":
        return lambda inputs: [inputs[0].sum(axis=1) + 1e-3]
    if variant == "error":
        def crash(inputs):
            raise MemoryError("arena exhausted")
        return crash
    return slow_sum(300 if variant == "timeout" else 0)


def test_failures_are_stored_as_rows_and_never_raise(database):
    inputs = [np.random.default_rng(0).uniform(-1, 1, (64, 32)).astype(np.float32)]
    runner = FunctionRunner(build_candidate, inputs, [inputs[0].sum(axis=1)],
                            TimingSettings(warmup_runs=1, timed_runs=5, rotations=3, timeout_seconds=0.2))
    space = Space("variants", {"variant": ("ok", "wrong_result", "compile_error", "error", "timeout")})
    result = run(Exhaustive(space), database, trials=10, runner=runner, space=space, signature="variants")
    rows = {r.schedule["variant"]: r for r in database.records("variants", current().key, "test-template")}
    assert {name: row.status for name, row in rows.items()} == {
        "ok": "ok", "wrong_result": "wrong_result", "compile_error": "compile_error", "error": "error",
        "timeout": "timeout"}
    assert rows["ok"].median_ms > 0 and all(r.median_ms is None for n, r in rows.items() if n != "ok")
    assert "expected ';'" in rows["compile_error"].detail and "MemoryError" in rows["error"].detail
    assert "differ" in rows["wrong_result"].detail
    assert result.failures == 4 and result.best.schedule["variant"] == "ok"


def test_resume_never_measures_a_recorded_schedule_again(database):
    first = SyntheticRunner()
    run(EvolutionarySearch(SPACE, seed=1), database, trials=16, runner=first)
    second = SyntheticRunner()
    resumed = run(EvolutionarySearch(SPACE, seed=1), database, trials=40, runner=second)
    assert len(first.measured) == 16 and len(second.measured) == 24
    assert not set(first.measured) & set(second.measured)
    assert (resumed.recorded, resumed.measured) == (16, 24)
    third = SyntheticRunner()
    again = run(EvolutionarySearch(SPACE, seed=1), database, trials=40, runner=third)
    assert third.measured == [] and again.recorded == 40 and again.best == resumed.best
    assert len(database.records("synthetic")) == 40


def test_records_of_another_fingerprint_are_not_resumed(database):
    import dataclasses

    other = dataclasses.replace(current(), cpu_model="another machine")
    search(Task("synthetic", SPACE, "test-template"), RandomSearch(SPACE, seed=0), SyntheticRunner(), database,
           other, trials=8)
    runner = SyntheticRunner()
    result = run(RandomSearch(SPACE, seed=0), database, trials=8, runner=runner)
    assert result.recorded == 0 and len(runner.measured) == 8
