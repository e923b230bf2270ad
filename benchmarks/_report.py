"""BENCHMARKS.md is shared by several benchmark scripts: each owns one `## ` section and replaces only it."""
from __future__ import annotations

import collections
import contextlib
import os
import re
import tempfile
import time


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
