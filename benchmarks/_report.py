"""BENCHMARKS.md is shared by several benchmark scripts: each owns one `## ` section and replaces only it."""
from __future__ import annotations

import collections
import contextlib
import os
import re
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_section(path: str, heading: str, body: str) -> None:
    """Replaces (or appends) the section starting with `## {heading}`, atomically."""
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    section = f"## {heading}\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    directory = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile("w", dir=directory, delete=False, suffix=".tmp") as handle:
        handle.write(text.rstrip("\n") + "\n")
    os.replace(handle.name, path)


def head_commit() -> str:
    """The short hash of the checkout's HEAD: the commit a table was measured on (read it before anything runs)."""
    return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


def host() -> str:
    """The CPU a table was measured on, for its header: sessions have run on different hosts (an AMD EPYC with one
    512-bit FMA per core, an Intel Xeon with two and AMX), and a ratio from one says little about the other."""
    import platform

    from ortx.tune.fingerprint import _cpuinfo
    model, flags = _cpuinfo()
    extras = [flag for flag in ("avx512f", "avx512_bf16", "amx_bf16", "amx_int8") if flag in flags]
    return (f"{model or platform.machine()} ({len(os.sched_getaffinity(0))} cores"
            f"{', ' + ' '.join(extras) if extras else ''})")


def load_average() -> float:
    """The 1-minute load average (what the benchmarks print beside every measurement)."""
    return os.getloadavg()[0]


def wait_for_quiet(limit_seconds: float) -> float:
    """Waits up to `limit_seconds` for the 1-minute load to drop below 1.0; returns the load then."""
    deadline = time.time() + limit_seconds
    while load_average() >= 1.0 and time.time() < deadline:
        time.sleep(5)
    return load_average()


@contextlib.contextmanager
def pipeline_flag(name: str, on: bool):
    """OrtxEP sessions built inside compile with the module switch ortx.pipeline.<name> (ELEMENTWISE_CHAINS,
    BLOCKED_LAYOUT) set to `on`; the default comes back after."""
    import ortx.pipeline

    default = getattr(ortx.pipeline, name)
    setattr(ortx.pipeline, name, on)
    try:
        yield
    finally:
        setattr(ortx.pipeline, name, default)


def kernel_counts(session) -> collections.Counter:
    """How many steps of each kernel an OrtxEP session's latest compiled shapes run on its CPU segments."""
    compiled = next(reversed(session._compiled.values()))
    return collections.Counter(listing.kernel for step in compiled.plan.steps
                               for listing in getattr(getattr(step, "program", None), "steps", ()))


def row_arguments(parser, models: str) -> None:
    """The options of a benchmark that measures one table row per model: --runs, --threads, --models (default
    `models`), --quiet-wait, --output, --no-write."""
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default=models)
    parser.add_argument("--quiet-wait", type=float, default=0.0, help="before each row, wait up to this many "
                        "seconds for load average < 1.0")
    parser.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"))
    parser.add_argument("--no-write", action="store_true")


def model_feeds(keys: str, seed: int = 0, quiet_wait: float = 0.0):
    """(name, path, feeds) per comma-separated model key (benchmarks.memory.models; built ones live in a temporary
    directory until the loop ends), the feeds uniform in [-1, 1) for its first input, drawn from a generator seeded
    with `seed` for each model (one shared generator made a model's input depend on the models listed before it);
    before each, waits up to `quiet_wait` s for a quiet host."""
    import numpy as np
    import onnx

    from benchmarks.memory import models

    with tempfile.TemporaryDirectory() as directory:
        for name, path, shape in models([key for key in keys.split(",") if key], directory):
            wait_for_quiet(quiet_wait)
            input_name = onnx.load(path, load_external_data=False).graph.input[0].name
            rng = np.random.default_rng(seed)
            yield name, path, {input_name: rng.uniform(-1, 1, size=shape).astype(np.float32)}
