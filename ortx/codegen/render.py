"""Renders a compiled segment as C: templates/segment.c with one block of fixed arguments per step.

CompiledProgram -> C source of one function `ortx_segment_<hash>(arena, constants, externals, num_threads,
kernels, step_seconds)` that makes exactly the interpreter's kernel calls, in the same order, with the same
arguments: ints and floats become static arrays (floats as hex literals, so every bit survives), buffers become
`arena + offset`, `constants[i]` or `externals[i]`. After a fallible kernel (_kernels.FALLIBLE_KERNELS) the
function tests the step's status record and returns step + 1 on an error, as the interpreter does; else 0. Each step runs on `num_threads` threads, or, with a
`step_threads` schedule (ortx.tune.step_threads), on min(its count, num_threads). Kernels are called through a
table the caller passes in, listed by name in the file, so the object never links against ortx and the source
holds no build-specific kernel ids. With `step_kernels`, a step calls another function with the same step ABI in
its kernel's place (a tuned generated GEMM's `_step`, ortx.codegen.gemm); `replaced` lists (substitute, kernel).
The symbol's hash is of the rest of the source, so equal programs render byte-identical files.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import string
from importlib import resources
from pathlib import Path

import numpy as np

from ortx import _kernels
from ortx.ep.segment_builder import ARENA, CONSTANT, CompiledProgram
from ortx.memory.plan import ALIGNMENT

_STEP = string.Template("""\
    /* step ${index}: ${kernel}, node ${node} */
    {
        static const int64_t ints[${num_ints}] = {${ints}};
        static const float floats[${num_floats}] = {${floats}};
        void *const buffers[${num_buffers}] = {${buffers}};
        ortx_step(kernels[${slot}], ints, floats, buffers, ${threads}, step_seconds ? step_seconds + ${index} : NULL);${check}
    }""")

# After a fallible kernel (ortx_kernels.h): stop when its status record, the step's last buffer, holds an error.
_CHECK = """
        if (*(const int64_t *)buffers[${last}] != 0) return ${status};"""

_ITEMS_WIDTH = 72  # characters of arguments per line: with the indent, lines stay within the repo's 120 columns


@dataclasses.dataclass(frozen=True)
class RenderedSegment:
    symbol: str
    source: str
    kernel_names: tuple[str, ...]  # the `kernels` table the function expects, in order
    step_threads: tuple[int | None, ...] | None = None  # the schedule it was rendered with (None: num_threads)
    replaced: tuple[tuple[str, str], ...] = ()  # (substitute in kernel_names, the ortx kernel it stands in for)


def _template() -> string.Template:
    return string.Template(resources.files("ortx.codegen").joinpath("templates/segment.c").read_text())


def _c_int(value: int) -> str:
    return "INT64_MIN" if value == -(1 << 63) else str(value)


def _c_float(value: np.float32) -> str:
    number = float(value)
    if math.isnan(number):
        return "(0.0f / 0.0f)"  # the only NaN the kernels see is the default one; C99 has no portable payload
    if math.isinf(number):
        return "(1.0f / 0.0f)" if number > 0 else "(-1.0f / 0.0f)"
    mantissa, _, exponent = number.hex().partition("p")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}p{exponent}f"


def _c_buffer(kind: int, value: int) -> str:
    if kind == ARENA:
        return f"arena + {value}"
    if kind == CONSTANT:
        return f"constants[{value}]"
    return f"externals[{value}]"


def _wrapped(items: list[str], indent: str) -> str:
    """Items joined by ', ', broken onto indented continuation lines of at most _ITEMS_WIDTH characters."""
    lines, current = [], ""
    for item in items:
        candidate = f"{current}, {item}" if current else item
        if current and len(candidate) > _ITEMS_WIDTH:
            lines.append(current + ",")
            current = item
        else:
            current = candidate
    lines.append(current)
    return f"\n{indent}".join(lines)


def _comment_text(text: str) -> str:
    """Text safe inside a C block comment: ASCII, one line, no comment terminator."""
    return repr(text).replace("*/", "*\\/")


def _c_threads(count: int | None) -> str:
    if count is None:
        return "num_threads"
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"render: a step's thread count must be a positive int or None, got {count!r}")
    return "1" if count == 1 else f"ortx_threads_at_most({count}, num_threads)"


def render(compiled: CompiledProgram, step_threads: tuple[int | None, ...] | None = None,
           step_kernels: tuple[str | None, ...] | None = None) -> RenderedSegment:
    """`step_threads`: None (every step on the session's num_threads) or one entry per step, None for the session's
    count or a positive int (at most that many threads). `step_kernels`: None or one entry per step, None for the
    step's own kernel or the name of the step-ABI function the caller's table will hold in its place."""
    if len(compiled.steps) != compiled.program.num_steps:
        raise ValueError("render: the program carries no step listing (build it with SegmentBuilder.finish)")
    if step_threads is not None and len(step_threads) != len(compiled.steps):
        raise ValueError(f"render: {len(step_threads)} step thread counts for {len(compiled.steps)} steps")
    if step_kernels is not None and len(step_kernels) != len(compiled.steps):
        raise ValueError(f"render: {len(step_kernels)} step kernels for {len(compiled.steps)} steps")
    replaced: dict[str, str] = {}
    kernel_names: list[str] = []
    blocks = []
    externals = 0
    indent = " " * 12
    for index, step in enumerate(compiled.steps):
        kernel = step.kernel
        if step_kernels is not None and step_kernels[index] is not None:
            kernel = step_kernels[index]
            if replaced.setdefault(kernel, step.kernel) != step.kernel:
                raise ValueError(f"render: {kernel} stands in for both {replaced[kernel]} and {step.kernel}")
        if kernel not in kernel_names:
            kernel_names.append(kernel)
        externals = max([externals] + [value + 1 for kind, value in step.buffers if kind not in (ARENA, CONSTANT)])
        floats = np.asarray(step.floats, dtype=np.float32)
        blocks.append(_STEP.substitute(
            index=index,
            kernel=kernel if kernel == step.kernel else f"{kernel} in place of {step.kernel}",
            node=_comment_text(step.node),
            num_ints=max(len(step.ints), 1),
            ints=_wrapped([_c_int(v) for v in step.ints] or ["0"], indent),
            num_floats=max(len(floats), 1),
            floats=_wrapped([_c_float(v) for v in floats] or ["0.0f"], indent),
            num_buffers=max(len(step.buffers), 1),
            buffers=_wrapped([_c_buffer(kind, value) for kind, value in step.buffers] or ["NULL"], indent),
            slot=kernel_names.index(kernel),
            threads=_c_threads(None if step_threads is None else step_threads[index]),
            check=string.Template(_CHECK).substitute(last=len(step.buffers) - 1, status=index + 1)
            if step.kernel in _kernels.FALLIBLE_KERNELS else "",
        ))
    constant_lines = [f" *     [{i}] {_comment_text(c.label)}: {c.dtype}{list(c.shape)}"
                      for i, c in enumerate(compiled.constants)] or [" *     (none)"]
    kernel_lines = [f" *     [{i}] {name}" for i, name in enumerate(kernel_names)] or [" *     (none)"]
    fields = dict(
        num_steps=len(compiled.steps),
        arena_bytes=compiled.arena_bytes,
        alignment=ALIGNMENT,
        constant_lines="\n".join(constant_lines),
        num_externals=externals,
        kernel_lines="\n".join(kernel_lines),
        steps="\n".join(blocks),
    )
    template = _template()
    digest = hashlib.sha256(template.substitute(fields, symbol="ortx_segment").encode()).hexdigest()
    symbol = f"ortx_segment_{digest[:16]}"
    schedule = None if step_threads is None or all(count is None for count in step_threads) else tuple(step_threads)
    return RenderedSegment(symbol, template.substitute(fields, symbol=symbol), tuple(kernel_names), schedule,
                           tuple(replaced.items()))


def export_c(compiled: CompiledProgram, path) -> RenderedSegment:
    """Writes the segment's C (the source the JIT compiles) for embedded builds; returns what was written."""
    rendered = render(compiled)
    Path(path).write_text(rendered.source)
    return rendered
