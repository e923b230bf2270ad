"""Argument types shared by the `ortx` subcommands."""
from __future__ import annotations

import argparse


def input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """NAME:D1xD2x... -> (name, dims); an argparse type, so a bad value is a usage error naming the flag."""
    name, separator, dims = text.rpartition(":")
    try:
        shape = tuple(int(dim) for dim in dims.lower().split("x"))
    except ValueError:
        shape = ()
    if not separator or not name or not shape or any(dim <= 0 for dim in shape):
        raise argparse.ArgumentTypeError(f"expected NAME:D1xD2x... with positive dims, e.g. x:1x3x640x640, "
                                         f"got {text!r}")
    return name, shape


def positive_int(text: str) -> int:
    """An integer >= 1 (an argparse type: anything else is a usage error naming the flag)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def device_list(text: str) -> str:
    """'npu,dsp,cpu' -> the same names, checked against ortx.ep.devices (an unknown name is a usage error)."""
    from ortx.ep.devices import select

    try:
        return ",".join(device.name for device in select(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error
