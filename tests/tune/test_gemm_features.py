"""ortx.tune.gemm_features: features of every ISA's schedules, task signatures parsed back to their problems, and
transfer that reads only this machine's records (fingerprint key, template, threads and ISA) of other shapes."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ortx.codegen import gemm
from ortx.tune import gemm_features, gemm_space
from ortx.tune.fingerprint import current
from ortx.tune.records import TuningDatabase, TuningRecord
from ortx.tune.search import EvolutionarySearch, clipped


@pytest.fixture
def database(tmp_path):
    with TuningDatabase(tmp_path / "tuning.sqlite") as opened:
        yield opened


@pytest.mark.parametrize("isa", sorted(gemm_space.CHOICES))
def test_features_are_finite_and_carry_the_hardware(isa):
    problem = gemm.GemmProblem.dense(100, 90, 80)
    task = gemm_space.task_for(problem, 2, isa)
    rng = np.random.default_rng(0)
    rows = np.stack([task.space.features(task.space.sample(rng)) for _ in range(100)])
    assert rows.shape == (100, len(gemm_features.FEATURE_NAMES)) and np.all(np.isfinite(rows))
    column = dict(zip(gemm_features.FEATURE_NAMES, rows.T))
    assert np.all(column["register_fraction"] <= 1.0)  # the space keeps tiles that fit the vector registers
    assert np.all((column["thread_efficiency"] > 0) & (column["thread_efficiency"] <= 1.0))
    assert task.space.work == pytest.approx(problem.flops / 1e9)


def test_cache_sizes_are_read_from_the_fingerprint_strings():
    sizes = gemm_features.cache_bytes(("L1d:48K", "L2:1024K", "L3:32768K"))
    assert sizes == {"L1d": 48 << 10, "L2": 1 << 20, "L3": 32 << 20}
    assert gemm_features.cache_bytes(()) == gemm_features.DEFAULT_CACHES


@pytest.mark.parametrize("problem", [
    gemm.GemmProblem.dense(64, 3136, 576),
    gemm.GemmProblem.dense(7, 5, 3, transpose_a=True, transpose_b=True),
    gemm.GemmProblem.dense(33, 65, 17, alpha=0.5, bias=2, activation=3, params=(-1.0, 6.0)),
    dataclasses.replace(gemm.GemmProblem.dense(48, 40, 256), b_packed=True),
    dataclasses.replace(gemm.GemmProblem.dense(16, 24, 8), residual_row_stride=32, residual_scale=0.5),
])
def test_task_signatures_parse_back_to_their_problems(problem):
    task = gemm_space.task_for(problem, 3, "avx2")
    parsed, threads, isa = gemm_features.parse_signature(task.signature)
    assert (threads, isa) == (3, "avx2") and parsed.signature == problem.signature
    assert gemm_features.parse_signature("conv2d_f32|1x64x56x56") is None


def _records(task, fingerprint_key: str, count: int, *, template: str | None = None, signature: str | None = None):
    rng = np.random.default_rng(len(task.signature))
    return [TuningRecord(signature or task.signature, fingerprint_key, template or task.template,
                         task.space.sample(rng).as_dict(), "ok", float(rng.uniform(1, 2))) for _ in range(count)]


def test_transfer_reads_only_matching_records_of_other_shapes(database):
    here = current()
    elsewhere = dataclasses.replace(here, cpu_model=here.cpu_model + " (another machine)")
    database.add_fingerprint(here)
    database.add_fingerprint(elsewhere)
    target = gemm_space.task_for(gemm.GemmProblem.dense(64, 3136, 576), 2, "avx512")
    other = gemm_space.task_for(gemm.GemmProblem.dense(128, 784, 1152), 2, "avx512")
    other_threads = gemm_space.task_for(gemm.GemmProblem.dense(256, 196, 2304), 1, "avx512")
    assert gemm_features.transfer_data(database, target, here) is None  # nothing recorded yet
    kept, foreign = _records(other, here.key, 20), _records(other, elsewhere.key, 17)
    for record in (kept + _records(target, here.key, 20)  # the task's own shape: not transfer
                   + foreign  # another machine
                   + _records(other, here.key, 20, template="another template")
                   + _records(other_threads, here.key, 20)):  # another thread count
        database.add(record)
    transfer = gemm_features.transfer_data(database, target, here)
    assert transfer is not None and len(transfer.targets) == len({str(r.schedule) for r in kept})
    flops = other.space.work
    expected = np.sort(clipped(np.log([record.median_ms / flops for record in kept])))
    assert np.allclose(transfer.targets, expected)  # fastest first, log(ms per GFLOP) of the other problem
    assert len(gemm_features.transfer_data(database, target, elsewhere).targets) == len(
        {str(r.schedule) for r in foreign})  # the other machine's search would read only its own


def test_guided_search_starts_from_transfer_records(database):
    here = current()
    database.add_fingerprint(here)
    target = gemm_space.task_for(gemm.GemmProblem.dense(64, 3136, 576), 2, "avx512")
    other = gemm_space.task_for(gemm.GemmProblem.dense(128, 784, 1152), 2, "avx512")
    for record in _records(other, here.key, 24):
        database.add(record)
    search = gemm_space.guided_search(target, database, here, seed=0)
    assert isinstance(search, EvolutionarySearch) and search.transfer is not None
    first = search.propose(4, set())
    assert len(set(first)) == 4 and all(target.space.contains(schedule) for schedule in first)
