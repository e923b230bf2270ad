"""Renders a compiled segment as C: templates/segment.c with one block of fixed arguments per step.

CompiledProgram -> C source of one function `ortx_segment_<hash>(arena, constants, externals, num_threads,
kernels, step_seconds)` that makes exactly the interpreter's kernel calls, in the same order, with the same
arguments: ints and floats become static arrays (floats as hex literals, so every bit survives), buffers become
`arena + offset`, `constants[i]` or `externals[i]`. Kernels are called through a table the caller passes in, listed
by name in the file, so the object never links against ortx and the source holds no build-specific kernel ids.
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

from ortx.ep.segment_builder import ARENA, CONSTANT, CompiledProgram
from ortx.memory.plan import ALIGNMENT

_STEP = string.Template("""\
    /* step ${index}: ${kernel}, node ${node} */
    {
        static const int64_t ints[${num_ints}] = {${ints}};
        static const float floats[${num_floats}] = {${floats}};
        void *const buffers[${num_buffers}] = {${buffers}};
        ortx_step(kernels[${slot}], ints, floats, buffers, num_threads, step_seconds ? step_seconds + ${index} : NULL);
    }""")

_ITEMS_WIDTH = 72  # characters of arguments per line: with the indent, lines stay within the repo's 120 columns


@dataclasses.dataclass(frozen=True)
class RenderedSegment:
    symbol: str
    source: str
    kernel_names: tuple[str, ...]  # the `kernels` table the function expects, in order


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


def render(compiled: CompiledProgram) -> RenderedSegment:
    if len(compiled.steps) != compiled.program.num_steps:
        raise ValueError("render: the program carries no step listing (build it with SegmentBuilder.finish)")
    kernel_names: list[str] = []
    blocks = []
    externals = 0
    indent = " " * 12
    for index, step in enumerate(compiled.steps):
        if step.kernel not in kernel_names:
            kernel_names.append(step.kernel)
        externals = max([externals] + [value + 1 for kind, value in step.buffers if kind not in (ARENA, CONSTANT)])
        floats = np.asarray(step.floats, dtype=np.float32)
        blocks.append(_STEP.substitute(
            index=index,
            kernel=step.kernel,
            node=_comment_text(step.node),
            num_ints=max(len(step.ints), 1),
            ints=_wrapped([_c_int(v) for v in step.ints] or ["0"], indent),
            num_floats=max(len(floats), 1),
            floats=_wrapped([_c_float(v) for v in floats] or ["0.0f"], indent),
            num_buffers=max(len(step.buffers), 1),
            buffers=_wrapped([_c_buffer(kind, value) for kind, value in step.buffers] or ["NULL"], indent),
            slot=kernel_names.index(step.kernel),
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
    return RenderedSegment(symbol, template.substitute(fields, symbol=symbol), tuple(kernel_names))


def export_c(compiled: CompiledProgram, path) -> RenderedSegment:
    """Writes the segment's C (the source the JIT compiles) for embedded builds; returns what was written."""
    rendered = render(compiled)
    Path(path).write_text(rendered.source)
    return rendered
