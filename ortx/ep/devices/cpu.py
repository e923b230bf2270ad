"""The host CPU as a device: OrtxEP's own lowerings (ortx/ep/compile_nodes.py), unchanged, as its backend.

Ops come from the lowering table (ortx.ep.lowering.LOWERINGS), memory from the OS, peak from the core count, the
vector ISA and the clock in /proc/cpuinfo. The cost model is a roofline: 2 x MACs at a fraction of the fp32 peak,
or the bytes the node reads and writes at the memory bandwidth, whichever is longer, plus a per-step overhead.
"""
from __future__ import annotations

import os
import queue

import numpy as np
import onnx_ir as ir

from ortx import _kernels
from ortx.ep.devices.device import Device, OpSupport
from ortx.ep.lowering import LOWERINGS
from ortx.ep.lowering._values import NotStatic, size_bytes
from ortx.memory.lifetimes import aligned_empty

# Host memory bandwidth: np.copyto of 64 MiB on the development host (2 cores of an AMD EPYC, Zen 4 class),
# bytes read + written per second, best of 10: 13.8 GB/s. A constant, not measured at import.
HOST_BANDWIDTH_BYTES_PER_SECOND = 13.8e9
# fp32 FMA lanes per core per cycle x 2 ops: two 256-bit FMA pipes (Zen 4 issues AVX-512 as two halves; AVX2-only
# cores of the same width give the same figure).
FP32_OPS_PER_CORE_CYCLE = 32
# tdpbf16ps: 16 x 16 x 32 bf16 multiply-adds, one every 16 cycles per core (Sapphire Rapids)
AMX_BF16_OPS_PER_CORE_CYCLE = 1024
# Share of the fp32 peak OrtxEP's conv/GEMM kernels sustain on mid-sized layers (BENCHMARKS.md kernel rows: 60-75%).
GEMM_EFFICIENCY = 0.6
# Per compiled step: the interpreter's dispatch and thread wake-up, a few microseconds.
STEP_OVERHEAD_SECONDS = 2e-6

_FAMILY_DTYPES = {
    "ortx.ep.lowering.conv": ("float32",),
    "ortx.ep.lowering.pool": ("float32",),
    "ortx.ep.lowering.reduce": ("float32",),
    "ortx.ep.lowering.attention": ("float32",),
    "ortx.ep.lowering.layout": ("float32", "float16", "int64", "int32", "int8", "uint8", "bool"),
}
_OP_DTYPES = {
    "QConv": ("int8", "uint8"), "QAveragePool": ("int8", "uint8"), "QuantizeLinear": ("float32", "int8", "uint8"),
    "DequantizeLinear": ("int8", "uint8", "float32"), "Cast": ("float32", "int32", "int64", "bool"),
    "Add": ("float32", "int64", "int32"), "Sub": ("float32", "int64", "int32"), "Mul": ("float32", "int64", "int32"),
    "Div": ("float32", "int64", "int32"), "Max": ("float32", "int64", "int32"), "Min": ("float32", "int64", "int32"),
    "Equal": ("float32", "int64", "int32"), "Less": ("float32", "int64", "int32"),
    "Greater": ("float32", "int64", "int32"), "LessOrEqual": ("float32", "int64", "int32"),
    "GreaterOrEqual": ("float32", "int64", "int32"), "Where": ("float32", "int64", "int32"),
}


def _cpu_ops() -> tuple[OpSupport, ...]:
    ops = []
    for (domain, op_type), (check, _) in LOWERINGS.items():
        dtypes = _OP_DTYPES.get(op_type) or _FAMILY_DTYPES.get(check.__module__, ("float32",))
        ops.append(OpSupport(domain, op_type, dtypes, f"static shapes; checked by {check.__module__}.{check.__name__}"))
    return tuple(ops)


def _cpuinfo() -> tuple[float, set[str]]:
    """(clock in Hz, ISA flags) of the first core in /proc/cpuinfo; (2 GHz, {}) where there is none."""
    hertz, flags = 2.0e9, set()
    try:
        with open("/proc/cpuinfo") as stream:
            for line in stream:
                key, _, value = line.partition(":")
                if key.strip() == "cpu MHz" and hertz == 2.0e9:
                    hertz = float(value) * 1e6
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
                if flags and hertz != 2.0e9:
                    break
    except OSError:
        pass
    return hertz, flags


def _peak_ops_per_second() -> dict[str, float]:
    hertz, flags = _cpuinfo()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    fp32 = cores * FP32_OPS_PER_CORE_CYCLE * hertz
    peak = {"float32": fp32}
    if "avx512_bf16" in flags:
        peak["bfloat16"] = 2 * fp32  # vdpbf16ps: two bf16 products per fp32 lane
    if "amx_bf16" in flags and "amx_tile" in flags:  # the bf16 kernels' AMX path (kernels/gemm_bf16_amx.c)
        peak["bfloat16"] = cores * AMX_BF16_OPS_PER_CORE_CYCLE * hertz
    if "avx512_vnni" in flags or "avx_vnni" in flags:
        peak["int8"] = 4 * fp32  # vpdpbusd: four u8 x s8 products per int32 lane
    return peak


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


CPU = Device(
    name="cpu",
    kind="cpu",
    description="the host CPU: OrtxEP's kernels (ortx._kernels, JIT'd C); what it declines runs on ONNX Runtime",
    ops=_cpu_ops(),
    memory_bytes=_memory_bytes(),
    bandwidth_bytes_per_second=HOST_BANDWIDTH_BYTES_PER_SECOND,
    peak_ops_per_second=_peak_ops_per_second(),
    compiler="ortx.ep.compile_nodes.compile_segment (lowering table + arena plan; ortx.codegen.jit)",
    backend="ortx.ep.devices.cpu",
)


# Backend --------------------------------------------------------------------------------------------------------
def check(node: ir.Node) -> str | None:
    from ortx.ep.capability import decide

    decision = decide(node)
    return None if decision.claimed else decision.reason


def _node_bytes(node: ir.Node) -> int:
    total = 0
    for value in list(node.inputs) + list(node.outputs):
        if value is None or value.const_value is not None:
            continue
        try:
            total += size_bytes(value)
        except (NotStatic, TypeError):
            continue
    return total


def estimate_seconds(node: ir.Node, device: Device = CPU) -> float:
    """Roofline estimate for `node` on `device` (a CPU-like device; the host's by default)."""
    from ortx.ep.macs import node_macs

    dtype = "int8" if node.op_type == "QConv" else "float32"
    peak = device.peak_ops_per_second.get(dtype) or device.peak_ops_per_second["float32"]
    compute = 2 * node_macs(node) / (peak * GEMM_EFFICIENCY)
    memory = _node_bytes(node) / device.bandwidth_bytes_per_second
    return STEP_OVERHEAD_SECONDS + max(compute, memory)


class CpuProgram:
    """A compiled CPU segment behind the DeviceProgram interface. Thread safe: each concurrent run takes its own
    arena from a pool (one made at compile time)."""

    def __init__(self, compiled, num_threads: int):
        self.compiled = compiled
        self.num_threads = num_threads
        self._arenas: queue.SimpleQueue = queue.SimpleQueue()
        self._arenas.put(self._new_arena())

    def _new_arena(self) -> np.ndarray:
        return aligned_empty(self.compiled.arena_bytes)

    def run(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        arrays = [np.ascontiguousarray(array) for array in inputs]
        for array in outputs:
            if not array.flags.c_contiguous:
                raise ValueError("CpuProgram.run: outputs must be C-contiguous preallocated arrays")
        externals = np.array([array.__array_interface__["data"][0] for array in arrays + list(outputs)],
                             dtype=np.uint64)
        try:
            arena = self._arenas.get_nowait()
        except queue.Empty:
            arena = self._new_arena()
        try:
            self.compiled.program.run(arena, externals, self.num_threads, False)
        except _kernels.KernelError as error:
            raise self.compiled.step_error(error) from None
        finally:
            self._arenas.put(arena)

    def stats(self) -> dict:
        return {"steps": len(self.compiled.step_nodes), "arena_bytes": self.compiled.arena_bytes,
                "constant_bytes": self.compiled.constant_bytes}


def compile(nodes: list[ir.Node], inputs: list[ir.Value], outputs: list[ir.Value], *,  # noqa: A001 (the interface)
            num_threads: int) -> CpuProgram:
    from ortx.ep.compile_nodes import compile_segment

    return CpuProgram(compile_segment(nodes, inputs, outputs, num_threads=num_threads), num_threads)
