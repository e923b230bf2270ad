"""What the guided search's cost model sees of a generated-GEMM schedule, and transfer across GEMM shapes.

1. Features (FEATURE_NAMES, one row per schedule): the problem (log2 M, N, K, so records of several shapes can
   share one model), the register tile against the ISA (vector registers used of those there are, multiply-adds
   per load), the cache footprint of each level of blocking against this machine's caches (the KC x NR B
   micro-panel and KC x MR A micro-panel vs L1, the MC x KC A block vs L2, the KC x NC B block vs L2 and, one per
   thread, vs L3), the waste of partial tiles and blocks in M, N and K, the task grid against the thread count
   (tiles per task, load balance), packing (its copies per multiply-add; the strides read in place), loop order,
   unroll and prefetch. The model predicts log(ms per GFLOP) (Space.work is the GFLOP), comparable across shapes.
2. Transfer: `transfer_data` reads this machine's records (same fingerprint key and GEMM template, same thread
   count and ISA) of every other GEMM signature, recomputes their features for their own problems and hands them
   to the guided search, which learns from them before its first measurement (weighted below its own).
Limits: cache sizes come from sysfs (defaults when missing); the features describe templates/gemm.c's loop nest
(whole operands packed once up front, tasks of whole tiles) and must change with it.
"""
from __future__ import annotations

import math
import re

import numpy as np

from ortx.codegen import gemm
from ortx.tune.fingerprint import HardwareFingerprint, detected_caches
from ortx.tune.records import TuningDatabase
from ortx.tune.search import Task, TransferData, clipped
from ortx.tune.space import Schedule

FLOAT_BYTES = 4
# Used when sysfs does not say (a typical x86-64 core: 32K L1d, 1M L2, 32M shared L3).
DEFAULT_CACHES = {"L1d": 32 << 10, "L2": 1 << 20, "L3": 32 << 20}
MIN_TRANSFER_RECORDS = 16  # fewer ok records of other shapes than this teach the model nothing: start randomly

FEATURE_NAMES = (
    "log2_m", "log2_n", "log2_k",
    "mr", "vectors_per_row", "register_fraction", "multiply_adds_per_load",
    "b_micro_panel_per_l1", "a_micro_panel_per_l1", "a_block_per_l2", "b_block_per_l2", "b_blocks_per_l3",
    "m_tail_waste", "n_tail_waste", "k_blocks", "k_last_block_fraction", "mc_fill", "nc_fill",
    "log2_tasks", "log2_tiles_per_task", "thread_efficiency", "tasks_m_share",
    "pack_a", "pack_b", "pack_a_copies_per_multiply_add", "pack_b_copies_per_multiply_add",
    "log2_a_stride_in_place", "log2_b_stride_in_place",
    "jr_outer", "log2_unroll", "log2_prefetch",
)


def cache_bytes(caches: tuple[str, ...]) -> dict[str, int]:
    """{"L1d": bytes, "L2": ..., "L3": ...} from a fingerprint's cache strings ("L1d:48K", "L2:1024K")."""
    sizes = dict(DEFAULT_CACHES)
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    for entry in caches:
        name, _, size = entry.partition(":")
        found = re.fullmatch(r"(\d+)\s*([KMG]?)", size.strip())
        if name in sizes and found:
            sizes[name] = int(found.group(1)) * units[found.group(2)]
    return sizes


def _log2(value: float) -> float:
    return math.log2(max(value, 1e-9))


def features(problem: gemm.GemmProblem, num_threads: int, caches: dict[str, int], schedule: Schedule) -> np.ndarray:
    """The FEATURE_NAMES row of `schedule` (a gemm_space schedule) for `problem` on `num_threads` threads."""
    values = schedule.as_dict()
    m, n, k = problem.m, problem.n, problem.k
    isa, mr, nr, kc = values["isa"], values["mr"], values["nr"], values["kc"]
    vectors = nr // gemm.VECTOR_WIDTH[isa]
    row_tiles, column_tiles = -(-m // mr), -(-n // nr)
    tasks_m, tasks_n = values["tasks_m"], values["tasks_n"]
    tasks = tasks_m * tasks_n
    # A task owns about row_tiles/tasks_m x column_tiles/tasks_n tiles (templates/gemm.c's compute_task split).
    task_rows, task_columns = -(-row_tiles // tasks_m), -(-column_tiles // tasks_n)
    mc_tiles, nc_tiles = min(values["mc_tiles"], task_rows), min(values["nc_tiles"], task_columns)
    depth = min(kc, k)
    k_blocks = -(-k // kc)
    makespan = -(-tasks // max(num_threads, 1)) * task_rows * task_columns
    registers = mr * vectors + vectors + 1
    row = (
        _log2(m), _log2(n), _log2(k),
        mr, vectors, registers / gemm.VECTOR_REGISTERS[isa], mr * vectors / (mr + vectors),
        _log2(depth * nr * FLOAT_BYTES / caches["L1d"]), _log2(depth * mr * FLOAT_BYTES / caches["L1d"]),
        _log2(mc_tiles * mr * depth * FLOAT_BYTES / caches["L2"]),
        _log2(depth * nc_tiles * nr * FLOAT_BYTES / caches["L2"]),
        _log2(num_threads * depth * nc_tiles * nr * FLOAT_BYTES / caches["L3"]),
        row_tiles * mr / m - 1, column_tiles * nr / n - 1, k_blocks, (k - (k_blocks - 1) * kc) / kc,
        task_rows / (-(-task_rows // mc_tiles) * mc_tiles), task_columns / (-(-task_columns // nc_tiles) * nc_tiles),
        _log2(tasks), _log2(row_tiles * column_tiles / tasks),
        row_tiles * column_tiles / (max(num_threads, 1) * makespan), tasks_m / tasks,
        float(values["pack_a"]), float(values["pack_b"]),
        float(values["pack_a"]) / n, float(values["pack_b"]) / m,
        0.0 if values["pack_a"] else _log2(problem.a_strides[0] * FLOAT_BYTES),
        0.0 if values["pack_b"] or problem.b_packed else _log2(problem.b_strides[0] * FLOAT_BYTES),
        float(values["loop_order"] == "jr_ir"), _log2(values["unroll"]), _log2(values["prefetch"] + 1),
    )
    return np.array(row, np.float64)


def featurizer(problem: gemm.GemmProblem, num_threads: int, caches: tuple[str, ...] | None = None):
    """features() bound to a problem and thread count, with this machine's caches (or the given ones)."""
    sizes = cache_bytes(detected_caches() if caches is None else caches)
    return lambda schedule: features(problem, num_threads, sizes, schedule)


_SIGNATURE = re.compile(r"gemm_f32\|(\d+)x(\d+)x(\d+)\|a=(\d+),(\d+)\|b=(packed|\d+,\d+)\|c=(\d+)\|alpha=([^|]+)"
                        r"\|bias=(\d+)\|act=(\d+):([^,|]+),([^|]+)(?:\|residual=(\d+):([^|]+))?"
                        r"\|threads=(\d+)\|isa=(\w+)$")


def parse_signature(signature: str) -> tuple[gemm.GemmProblem, int, str] | None:
    """(problem, threads, isa) of a gemm_space task signature, None for any other signature."""
    found = _SIGNATURE.match(signature)
    if found is None:
        return None
    (m, n, k, a_row, a_column, b_layout, c_stride, alpha, bias, activation, first, second, residual_stride,
     residual_scale, threads, isa) = found.groups()
    packed = b_layout == "packed"
    b_strides = (int(n), 1) if packed else tuple(int(part) for part in b_layout.split(","))  # packed: unused
    try:
        problem = gemm.GemmProblem(int(m), int(n), int(k), (int(a_row), int(a_column)), b_strides, int(c_stride),
                                   float(alpha), int(bias), int(activation), (float(first), float(second)), packed,
                                   int(residual_stride or 0), float(residual_scale or 1.0))
    except (gemm.GemmError, ValueError):
        return None
    return problem, int(threads), isa


def transfer_data(database: TuningDatabase, task: Task, fingerprint: HardwareFingerprint) -> TransferData | None:
    """This machine's ok records of other GEMM problems with the task's template, thread count and ISA, as
    features and log(ms per GFLOP); None when there are fewer than MIN_TRANSFER_RECORDS."""
    own = parse_signature(task.signature)
    if own is None:
        return None
    _, threads, isa = own
    caches = cache_bytes(fingerprint.caches)
    fastest: dict[tuple[str, Schedule], float] = {}
    for record in database.records(fingerprint=fingerprint.key, template=task.template):
        if record.status != "ok" or record.signature == task.signature or record.fingerprint != fingerprint.key:
            continue
        key = (record.signature, Schedule.of(record.schedule))
        fastest[key] = min(fastest.get(key, math.inf), record.median_ms)
    by_signature: dict[str, list[tuple[Schedule, float]]] = {}
    for (signature, schedule), median_ms in fastest.items():
        by_signature.setdefault(signature, []).append((schedule, median_ms))
    rows, targets, schedules = [], [], []
    for signature, measured in by_signature.items():
        other = parse_signature(signature)
        if other is None or other[1] != threads or other[2] != isa:
            continue
        problem = other[0]
        kept = []
        for schedule, median_ms in measured:
            try:
                rows.append(features(problem, threads, caches, schedule))
            except (KeyError, TypeError, ZeroDivisionError):
                continue  # a record of an older space's schedule: nothing to learn from
            kept.append(math.log(median_ms / (problem.flops / 1e9)))
            schedules.append(schedule)
        targets.extend(clipped(np.array(kept)))
    if len(rows) < MIN_TRANSFER_RECORDS:
        return None
    order = np.argsort(targets)
    return TransferData(np.stack(rows)[order], np.array(targets)[order], tuple(schedules[i] for i in order))
