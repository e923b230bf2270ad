"""Tuned generated GEMMs in JIT'd segments: which gemm_f32 and conv2d_f32 steps call a generated kernel in the
prebuilt one's place.

1. A step qualifies when ortx.codegen.gemm.from_gemm_step reads it (a residual only row-major, no prepacked A,
   no activation that needs exp), it has one batch (the prebuilt kernel runs batches of small problems one per thread, which
   tuning a single problem does not measure) and at least MIN_MULTIPLY_ADDS. A conv2d_f32 step qualifies the same
   way through from_conv_step (conv mode: one image, one group; the generated kernel packs the patch matrix
   through kernels/conv_source.c), its workspace the one conv_sizes_f32 planned.
2. Its schedule: tuning "cached" reads the records (gemm_space.recorded_schedule: measured on this machine,
   faster than the prebuilt kernel by MARGIN, fitting the workspace the lowering planned for gemm_f32); "quick"
   and "full" first tune the step (QUICK_TRIALS or FULL_TRIALS schedules after the prebuilt baseline and the
   default; not when `search` is False: ortx tune's task scheduler searches under its own budget), then read the
   records the same way; "off" uses none.
3. The kernel is built through the JIT cache; its `_step` entry takes the step's arguments unchanged
   (ortx.codegen.jit.jit_compile puts its address in the segment's kernel table). A step whose kernel cannot be
   built keeps the prebuilt kernel, with a warning.
Limits: a prepacked B fixes KC at the packed format's 256. Not covered: batched or grouped convs, the lowering's
other conv kernels (conv2d_pixel_rows_f32 has its weights packed as B panels, depthwise and transposed convs are not
one GEMM, bf16 convs run the bf16 kernel), and activations that need exp; their prebuilt kernels stay.
"""
from __future__ import annotations

import logging
import os

import numpy as np

from ortx import _kernels
from ortx.codegen import gemm
from ortx.codegen.jit import JitError
from ortx.config import Options
from ortx.ep.segment_builder import CompiledProgram
from ortx.tune import gemm_space
from ortx.tune.fingerprint import HardwareFingerprint, current
from ortx.tune.records import TuningDatabase
from ortx.tune.runner import TimingSettings

logger = logging.getLogger(__name__)

QUICK_TRIALS = 8
FULL_TRIALS = 48
# Below ~1M multiply-adds a GEMM runs in ~10-20 us on this class of machine: a schedule cannot win more than the
# noise of one session step, and each candidate costs a compile (~0.4 s).
MIN_MULTIPLY_ADDS = 1 << 20
MODES = ("off", "cached", "quick", "full")


def _conv_step(step) -> tuple[gemm.GemmProblem | None, str, int]:
    """(its problem or None, why not, the workspace floats conv_sizes_f32 planned) of a conv2d_f32 step."""
    problem, reason = gemm.from_conv_step(step.ints, step.floats)
    sizes = np.zeros(3, np.int64)
    if problem is not None:
        _kernels.call("conv_sizes_f32", [0, *problem.conv], [], [sizes])
    return problem, reason, int(sizes[0]) // 4


def gemm_steps(compiled: CompiledProgram) -> dict[int, tuple[gemm.GemmProblem, int]]:
    """Step index -> (its problem, the workspace floats the lowering planned) for every qualifying step."""
    found = {}
    for index, step in enumerate(compiled.steps):
        if step.kernel == "conv2d_f32":
            problem, reason, workspace = _conv_step(step)
            if problem is None or problem.m * problem.n * problem.k < MIN_MULTIPLY_ADDS:
                logger.debug("ortx tuned GEMM: step %d (node %s) keeps conv2d_f32: %s", index, step.node,
                             reason or "too small to tune")
            else:
                found[index] = (problem, workspace)
            continue
        if step.kernel != "gemm_f32" or int(step.ints[3]) != 1:
            continue
        problem, reason = gemm.from_gemm_step(step.ints, step.floats)
        if problem is None or problem.m * problem.n * problem.k < MIN_MULTIPLY_ADDS:
            logger.debug("ortx tuned GEMM: step %d (node %s) keeps gemm_f32: %s", index, step.node,
                         reason or "too small to tune")
            continue
        sizes = np.zeros(3, np.int64)
        _kernels.call("gemm_sizes_f32", [problem.m, problem.n, problem.k, int(step.ints[16]), int(step.ints[4]),
                                          int(step.ints[7])], [], [sizes])
        found[index] = (problem, int(sizes[0]) // 4)
    return found


def step_substitutes(compiled: CompiledProgram, *, num_threads: int, options: Options, mode: str,
                     database: TuningDatabase, fingerprint: HardwareFingerprint,
                     settings: TimingSettings | None = None, search: bool = True) -> dict[int, tuple[str, int]]:
    """Step index -> (name, address) of the generated `_step` function to call in its gemm_f32's place."""
    if mode not in MODES:
        raise ValueError(f"tuned GEMM steps: tuning mode {mode!r} is not one of {MODES}")
    substitutes = {}
    if mode == "off":
        return substitutes
    for index, (problem, workspace) in gemm_steps(compiled).items():
        if mode in ("quick", "full") and search:
            gemm_space.tune_gemm(problem, num_threads=num_threads, database=database, fingerprint=fingerprint,
                                 options=options, trials=QUICK_TRIALS if mode == "quick" else FULL_TRIALS,
                                 settings=settings or TimingSettings(timed_runs=10 if mode == "quick" else 30),
                                 max_workspace_floats=workspace)
        schedule = gemm_space.recorded_schedule(problem, num_threads, database, fingerprint,
                                                max_workspace_floats=workspace)
        if schedule is None:
            continue
        try:
            kernel = gemm.build_gemm(problem, schedule, options)
        except JitError as error:
            logger.warning("ortx tuned GEMM: step %d keeps its prebuilt kernel: %s", index, error)
            continue
        substitutes[index] = (f"{kernel.rendered.symbol}_step", kernel.step_address)
    return substitutes


def segment_substitutes(programs: dict, *, num_threads: int, options: Options, mode: str, database_path: str,
                        search: bool = True) -> dict[int, dict[int, tuple[str, int]]]:
    """step_substitutes for each claimed segment's program (by position); "cached" with no database file reads
    nothing (and creates no file)."""
    if mode == "off" or not programs or (mode == "cached" and not os.path.exists(database_path)):
        return {}
    with TuningDatabase(database_path) as database:
        fingerprint = current(options)
        found = {position: step_substitutes(program, num_threads=num_threads, options=options, mode=mode,
                                            database=database, fingerprint=fingerprint, search=search)
                 for position, program in programs.items()}
    return {position: substitutes for position, substitutes in found.items() if substitutes}
