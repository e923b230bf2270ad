"""The hardware fingerprint every tuning record carries: a time measured on one machine says nothing about another.

Read once per process from /proc/cpuinfo, sysfs and the compiler; on other systems the missing fields are "".
`key` hashes the canonical JSON of all fields, so any difference (a new compiler, another cache size, fewer usable
cores) gives records of their own.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from pathlib import Path

# The flags that change which kernels run or how fast: vector ISAs and their extensions.
_RELEVANT_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
                   "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16",
                   "asimd", "asimddp", "sve", "i8mm", "bf16")


@dataclasses.dataclass(frozen=True)
class HardwareFingerprint:
    cpu_model: str
    isa_flags: tuple[str, ...]
    kernel_isa: str  # the best ISA ortx's kernels dispatch to here
    cores: int  # usable by this process (sched_getaffinity), not the host's total
    caches: tuple[str, ...]  # "L1d:48K", "L2:1024K", "L3:32768K" ...
    compiler: str  # first line of `cc --version`, or "" without a compiler

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @property
    def key(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @classmethod
    def from_json(cls, text: str) -> "HardwareFingerprint":
        data = json.loads(text)
        return cls(data["cpu_model"], tuple(data["isa_flags"]), data["kernel_isa"], int(data["cores"]),
                   tuple(data["caches"]), data["compiler"])


def _cpuinfo(path: Path = Path("/proc/cpuinfo")) -> tuple[str, tuple[str, ...]]:
    model, flags = "", set()
    try:
        text = path.read_text()
    except OSError:
        return model, ()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model", "hardware") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return model, tuple(flag for flag in _RELEVANT_FLAGS if flag in flags)


def _caches(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> tuple[str, ...]:
    caches = []
    for index in sorted(root.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        caches.append(f"L{level}{'d' if kind == 'Data' else ''}:{size}")
    return tuple(caches)


@functools.lru_cache(maxsize=None)
def detected_caches() -> tuple[str, ...]:
    """This machine's data caches as in HardwareFingerprint.caches, without looking for a compiler."""
    return _caches()


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@functools.lru_cache(maxsize=None)
def _detect(compiler: str) -> HardwareFingerprint:
    from ortx import _kernels

    model, flags = _cpuinfo()
    return HardwareFingerprint(model, flags, _kernels.cpu_isa(), _usable_cores(), _caches(), compiler)


def current(options=None) -> HardwareFingerprint:
    """This machine's fingerprint, with the compiler `options` (ortx.config.Options) would use for the JIT."""
    from ortx.codegen.jit import find_compiler
    from ortx.config import Options

    compiler = find_compiler(options or Options.from_environment())
    return _detect(compiler.version if compiler else "")


@functools.lru_cache(maxsize=None)
def kernels_build() -> str:
    """A short hash of the prebuilt kernels this process loaded: of their C sources, flags and compiler as the build
    recorded them (_kernels.kernels_source), else of the library's bytes. Records of the prebuilt kernels' times (the
    engine choice, step thread counts, the prebuilt GEMM baseline, sparse crossovers, layout choices) carry it in
    their template, so a rebuilt or upgraded ortx measures again instead of deciding from another build's times,
    while an in-place build and a `pip install -e` build of the same C share their records."""
    from ortx import _kernels

    source = _kernels.kernels_source() if hasattr(_kernels, "kernels_source") else "unknown"
    if not source.startswith("unknown"):
        return hashlib.sha256(source.encode()).hexdigest()[:12]
    try:
        return hashlib.sha256(Path(_kernels.__file__).read_bytes()).hexdigest()[:12]
    except OSError:  # a library that cannot be read back: its records are never shared with another build
        return f"unreadable-{os.getpid()}"
