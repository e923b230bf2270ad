"""What every DSP lowering shares: the error type, the step record and constant/attribute helpers."""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import onnx_ir as ir

from ortx.ep.lowering._values import NotStatic, attribute, constant_value, numpy_dtype, present, static_shape

__all__ = ["DspError", "Step", "attribute", "constant_scalar", "float32_input", "present", "static_shape",
           "numpy_dtype", "NotStatic", "describe", "expect_output"]


class DspError(ValueError):
    """A node the DSP cannot run as written; the message names the node, and the input or attribute at fault."""


@dataclasses.dataclass(frozen=True)
class Step:
    """One lowered node: `run(reads, writes, num_threads)` fills the `writes` arrays from the `reads` arrays. A step
    keeps any scratch buffers of its own in its closure, allocated at compile time; DspProgram serialises runs, so
    they are never used by two runs at once. `points` is its work in FFT points (n log2 n), the cost model's unit."""

    node_name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    run: Callable[[list[np.ndarray], list[np.ndarray], int], None]
    points: float


def describe(node: ir.Node) -> str:
    return f"{node.op_type} node {node.name!r}"


def constant_scalar(node: ir.Node, index: int, what: str, *, required: bool = True):
    """Input `index` as a Python scalar; it must be a constant (initializer or Constant) with one element."""
    value = present(node, index)
    if value is None:
        if required:
            raise DspError(f"{describe(node)}: input {what} is missing")
        return None
    array = constant_value(value)
    if array is None:
        raise DspError(f"{describe(node)}: input {what} ({value.name!r}) is not a constant; the DSP compiles "
                       f"static transforms")
    if array.size != 1:
        raise DspError(f"{describe(node)}: input {what} ({value.name!r}) must be a scalar, has shape {array.shape}")
    return array.reshape(()).item()


def expect_output(node: ir.Node, shape: tuple[int, ...]) -> None:
    """The kernel writes `shape`; a different inferred output shape (e.g. onnx's STFT inference reading a missing
    onesided as 0 where the spec and ORT default to 1) is an error rather than a buffer overrun."""
    value = node.outputs[0]
    try:
        inferred = static_shape(value)
    except NotStatic as error:
        raise DspError(f"{describe(node)}: {error}") from error
    if tuple(inferred) != tuple(shape):
        raise DspError(f"{describe(node)}: output {value.name!r} has inferred shape {tuple(inferred)} but the op "
                       f"computes {tuple(shape)}")


def float32_input(node: ir.Node, index: int, what: str) -> tuple[int, ...]:
    """Static shape of a float32 input, or a DspError naming it."""
    value = present(node, index)
    if value is None:
        raise DspError(f"{describe(node)}: input {what} is missing")
    try:
        shape = static_shape(value)
        dtype = numpy_dtype(value)
    except NotStatic as error:
        raise DspError(f"{describe(node)}: {error}") from error
    if dtype != np.float32:
        raise DspError(f"{describe(node)}: input {what} ({value.name!r}) is {dtype}; the DSP runs float32")
    return shape
