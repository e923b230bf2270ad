"""Compiles rendered C (segments, generated GEMMs) with the system C compiler into a disk cache keyed by content hash.

1. key = sha256(source, compiler path, `compiler --version`, flags, ortx version). An entry is <key>.so, its
   checksum sidecar <key>.so.sha256 and the source <key>.c (for reading; never compiled from the cache).
2. Under an exclusive flock on <key>.lock, so two processes never compile one key twice: an entry is loaded only
   when its checksum matches. A missing sidecar, a mismatch, a failed dlopen or a missing symbol is logged as a
   warning, the entry is deleted and rebuilt: a cache file is never trusted.
3. Build: compile to a temp file in the cache directory, write the sidecar, os.replace into place, so readers
   only ever see whole files.
4. Load with ctypes. A process keeps each loaded path for its lifetime, as the dynamic loader does anyway (dlopen
   of an already-loaded path returns the loaded copy without reading the file again).
No compiler, a compile error or an unusable cache directory: a warning, `build` returns None, and the step
interpreter runs the same kernels (`build_or_raise` raises JitError instead, for the tuner). Limit: like any shared
library, a loaded .so truncated in place by another process crashes this one on its next call; the cache itself
only ever replaces files, never rewrites them.
"""
from __future__ import annotations

import ctypes
import dataclasses
import fcntl
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import sysconfig
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import _ctypes
import numpy as np

from ortx import _kernels
from ortx.codegen.render import RenderedSegment, render
from ortx.config import Options
from ortx.ep.segment_builder import CompiledProgram

logger = logging.getLogger(__name__)

FLAGS = ("-O2", "-shared", "-fPIC", "-std=gnu11")
COMPILE_TIMEOUT_SECONDS = 300


@dataclasses.dataclass(frozen=True)
class Compiler:
    path: str
    version: str  # the first line of `<compiler> --version`


@dataclasses.dataclass(frozen=True, eq=False)
class NativeSegment:
    """A loaded JIT'd segment function and the kernel tables it calls through."""

    symbol: str
    path: Path
    address: int
    kernel_names: tuple[str, ...]
    origin: str  # "compiled" (the compiler ran), "cache" (read from disk) or "loaded" (already in this process)
    seconds: float  # spent in build(): compiling, or verifying and loading
    library: ctypes.CDLL = dataclasses.field(repr=False)
    fast_table: np.ndarray = dataclasses.field(repr=False)
    ref_table: np.ndarray = dataclasses.field(repr=False)
    step_threads: tuple[int | None, ...] | None = None  # the per-step thread schedule it was rendered with

    def kernel_table(self, use_ref: bool) -> np.ndarray:
        return self.ref_table if use_ref else self.fast_table


class _Corrupt(Exception):
    """A cache entry that must not be used; the message says why."""


# Libraries this process has loaded, by path (see step 4); the lock covers lookups racing a load.
_loaded: dict[str, ctypes.CDLL] = {}
_loaded_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _compiler_version(path: str) -> str:
    result = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    return (result.stdout or result.stderr).strip().splitlines()[0] if (result.stdout or result.stderr) else ""


def find_compiler(options: Options) -> Compiler | None:
    """The compiler `options` names, else sysconfig's CC, cc, gcc or clang, whichever exists first."""
    if options.compiler:
        candidates = [options.compiler]
    else:
        configured = (sysconfig.get_config_var("CC") or "").split()
        candidates = configured[:1] + ["cc", "gcc", "clang"]
    for candidate in candidates:
        path = shutil.which(candidate)
        if path is not None:
            try:
                return Compiler(path, _compiler_version(path))
            except (OSError, subprocess.SubprocessError) as error:
                logger.warning("ortx JIT: compiler %s does not run (%s)", path, error)
    return None


def cache_key(source: str, compiler: Compiler, flags=FLAGS) -> str:
    import ortx  # at call time: ortx/__init__ imports the session, which imports this module

    digest = hashlib.sha256()
    for part in (source, compiler.path, compiler.version, " ".join(flags), ortx.__version__):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_atomically(path: Path, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _load(library_path: Path, symbol: str) -> tuple[ctypes.CDLL, int, bool]:
    """(library, symbol address, whether it was already loaded); raises _Corrupt."""
    key = str(library_path)
    with _loaded_lock:
        library = _loaded.get(key)
        already = library is not None
        if library is None:
            sidecar = library_path.with_name(library_path.name + ".sha256")
            if not sidecar.exists():
                raise _Corrupt("no checksum sidecar")
            if _sha256_file(library_path) != sidecar.read_text().strip():
                raise _Corrupt("checksum mismatch")
            try:
                library = ctypes.CDLL(key)
            except OSError as error:
                raise _Corrupt(f"dlopen failed: {error}") from error
        try:
            address = ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value
        except AttributeError as error:
            _ctypes.dlclose(library._handle)  # so a rebuilt file at this path is read again, not this copy
            _loaded.pop(key, None)
            raise _Corrupt(f"symbol {symbol} missing") from error
        _loaded[key] = library
        return library, address, already


def _flags(rendered) -> tuple[str, ...]:
    """FLAGS, plus what the rendered source asks for (`extra_flags`, e.g. a generated GEMM's -ffp-contract=off)."""
    return FLAGS + tuple(getattr(rendered, "extra_flags", ()))


def _compile(rendered, compiler: Compiler, source_path: Path, library_path: Path) -> None:
    _write_atomically(source_path, rendered.source.encode())
    handle, temporary = tempfile.mkstemp(dir=library_path.parent, prefix=library_path.name + ".", suffix=".tmp")
    os.close(handle)
    try:
        command = [compiler.path, *_flags(rendered), "-o", temporary, str(source_path)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_SECONDS)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()[-2000:]}")
        _write_atomically(library_path.with_name(library_path.name + ".sha256"),
                          _sha256_file(Path(temporary)).encode())
        os.replace(temporary, library_path)
    finally:
        Path(temporary).unlink(missing_ok=True)


def _remove_entry(library_path: Path) -> None:
    for path in (library_path, library_path.with_name(library_path.name + ".sha256")):
        path.unlink(missing_ok=True)


def _load_or_compile(rendered, compiler: Compiler, cache_dir: Path) -> tuple[ctypes.CDLL, int, str, Path]:
    key = cache_key(rendered.source, compiler, _flags(rendered))
    library_path = cache_dir / f"{key}.so"
    with open(cache_dir / f"{key}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if library_path.exists() or str(library_path) in _loaded:
                try:
                    library, address, already = _load(library_path, rendered.symbol)
                    return library, address, "loaded" if already else "cache", library_path
                except _Corrupt as reason:
                    logger.warning("ortx JIT: cache entry %s is corrupt (%s); deleting and rebuilding it",
                                   library_path, reason)
                    _remove_entry(library_path)
            _compile(rendered, compiler, cache_dir / f"{key}.c", library_path)
            library, address, _ = _load(library_path, rendered.symbol)
            return library, address, "compiled", library_path
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class JitError(Exception):
    """Why a rendered segment could not be built (no compiler, compile error, unusable cache directory)."""


@dataclasses.dataclass(frozen=True, eq=False)
class NativeLibrary:
    """A loaded JIT'd shared object and the address of its entry symbol (what any rendered source builds to)."""

    symbol: str
    path: Path
    address: int
    origin: str  # "compiled", "cache" or "loaded", as NativeSegment.origin
    seconds: float
    library: ctypes.CDLL = dataclasses.field(repr=False)


def build_library(rendered, options: Options) -> NativeLibrary:
    """`rendered` (anything with `.symbol` and `.source`: a RenderedSegment, a rendered GEMM) compiled, or found in
    the cache, and loaded; JitError says why it cannot be (the tuner records that as a failed candidate)."""
    start = time.perf_counter()
    compiler = find_compiler(options)
    if compiler is None:
        raise JitError(f"no C compiler found ({options.compiler or 'looked for sysconfig CC, cc, gcc, clang'})")
    try:
        options.cache_dir.mkdir(parents=True, exist_ok=True)
        library, address, origin, path = _load_or_compile(rendered, compiler, options.cache_dir)
    except OSError as error:
        raise JitError(f"cache directory {options.cache_dir} is not usable ({error}); set ORTX_CACHE_DIR or the "
                       f"provider option jit_cache_dir") from error
    except (RuntimeError, subprocess.SubprocessError, _Corrupt) as error:
        raise JitError(f"{rendered.symbol} could not be built ({error})") from error
    seconds = time.perf_counter() - start
    logger.info("ortx JIT: %s %s in %.3f s (%s)", rendered.symbol, origin, seconds, path)
    return NativeLibrary(rendered.symbol, path, address, origin, seconds, library)


def _kernel_tables(rendered: RenderedSegment, substitutes: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """(fast, reference) kernel tables: a substitute's slot holds its address, and in the reference table the
    oracle of the kernel it stands in for."""
    originals = dict(rendered.replaced)
    missing = sorted(set(originals) - set(substitutes))
    if missing:
        raise JitError(f"{rendered.symbol}: no address for the substitute kernels {missing}")
    names = [originals.get(name, name) for name in rendered.kernel_names]
    fast = np.array(_kernels.kernel_functions(names, False), dtype=np.uint64)
    for slot, name in enumerate(rendered.kernel_names):
        if name in originals:
            fast[slot] = substitutes[name]
    return fast, _kernels.kernel_functions(names, True)


def build_or_raise(rendered: RenderedSegment, options: Options,
                   substitutes: Mapping[str, int] | None = None) -> NativeSegment:
    """The rendered segment compiled (or found in the cache) and loaded; JitError says why it cannot be.
    `substitutes`: the address of each substitute kernel the segment was rendered with (rendered.replaced)."""
    fast, reference = _kernel_tables(rendered, substitutes or {})
    native = build_library(rendered, options)
    return NativeSegment(rendered.symbol, native.path, native.address, rendered.kernel_names, native.origin,
                         native.seconds, native.library, fast, reference, rendered.step_threads)


def build(rendered: RenderedSegment, options: Options,
          substitutes: Mapping[str, int] | None = None) -> NativeSegment | None:
    """The rendered segment compiled (or found in the cache) and loaded; None, with a warning, when it cannot be."""
    try:
        return build_or_raise(rendered, options, substitutes)
    except JitError as error:
        logger.warning("ortx JIT: %s; claimed segments run on the step interpreter", error)
        return None


def jit_compile(compiled: CompiledProgram, options: Options, step_threads: tuple[int | None, ...] | None = None,
                step_substitutes: Mapping[int, tuple[str, int]] | None = None) -> CompiledProgram:
    """`compiled` with its native form attached, or unchanged when it cannot be built (the interpreter runs it).
    `step_threads`: per-step thread counts (ortx.codegen.render.render); None runs every step on the session's.
    `step_substitutes`: step index -> (name, address) of a step-ABI function to call in that step's kernel's place
    (a tuned generated GEMM); the interpreter, which runs when there is no compiler, keeps the step's kernel."""
    step_kernels = None
    if step_substitutes:
        step_kernels = tuple(step_substitutes[index][0] if index in step_substitutes else None
                             for index in range(len(compiled.steps)))
    native = build(render(compiled, step_threads, step_kernels), options,
                   {name: address for name, address in (step_substitutes or {}).values()})
    return compiled if native is None else dataclasses.replace(compiled, native=native)
