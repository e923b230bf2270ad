"""Process-level settings: the only module that reads environment variables, and only when asked.

ORTX_CACHE_DIR  where JIT'd segments are cached (default: $XDG_CACHE_HOME/ortx, else ~/.cache/ortx)
ORTX_CC         the C compiler for the JIT (default: sysconfig's CC if it exists, else cc, else gcc)
Callers build an `Options` once (`Options.from_environment()`) and pass it down; nothing else looks at os.environ.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Options:
    jit: bool = True  # compile claimed segments to C at session creation (when a compiler is found)
    cache_dir: Path = dataclasses.field(default_factory=lambda: Path.home() / ".cache" / "ortx")
    compiler: str | None = None  # None: look one up (ortx.codegen.jit.find_compiler)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None, **overrides) -> "Options":
        """Options from `environ` (default os.environ); keyword `overrides` win (None values are ignored)."""
        environ = os.environ if environ is None else environ
        values: dict = {}
        if environ.get("ORTX_CACHE_DIR"):
            values["cache_dir"] = Path(environ["ORTX_CACHE_DIR"]).expanduser()
        elif environ.get("XDG_CACHE_HOME"):
            values["cache_dir"] = Path(environ["XDG_CACHE_HOME"]).expanduser() / "ortx"
        if environ.get("ORTX_CC"):
            values["compiler"] = environ["ORTX_CC"]
        values.update({key: value for key, value in overrides.items() if value is not None})
        if "cache_dir" in values:
            values["cache_dir"] = Path(values["cache_dir"]).expanduser()
        return cls(**values)
