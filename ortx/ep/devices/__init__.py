"""The devices OrtxEP can place nodes on, as a literal tuple (one entry per device module), and `select`.

Provider option `devices` ("npu,dsp,cpu") names them in order of preference; `ortx devices` lists them.
"""
from __future__ import annotations

from ortx.ep.devices.cpu import CPU
from ortx.ep.devices.device import Device, DeviceProgram, OpSupport
from ortx.ep.devices.dsp import DSP
from ortx.ep.devices.npu import NPU

DEVICES: tuple[Device, ...] = (
    CPU,
    NPU,
    DSP,
)


def select(spec: str, devices: tuple[Device, ...] | None = None) -> list[Device]:
    """'npu,dsp,cpu' -> those devices, in that order. An unknown or repeated name is a ValueError listing the
    valid ones. `devices`: the table to pick from (default DEVICES)."""
    table = DEVICES if devices is None else devices
    by_name = {device.name: device for device in table}
    names = [name.strip().lower() for name in str(spec).split(",") if name.strip()]
    if not names:
        raise ValueError(f"devices: empty list {spec!r}; valid devices: {', '.join(by_name)}")
    chosen = []
    for name in names:
        if name not in by_name:
            raise ValueError(f"devices: unknown device {name!r} in {spec!r}; valid devices: {', '.join(by_name)}")
        if by_name[name] in chosen:
            raise ValueError(f"devices: {name!r} is listed twice in {spec!r}")
        chosen.append(by_name[name])
    return chosen


__all__ = ["DEVICES", "Device", "DeviceProgram", "OpSupport", "select"]
