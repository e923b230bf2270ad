"""Are the pool's threads on separate cores right now? A reading benchmarks print beside their times.

On this workplace's VMs (2 vCPUs) there are periods, seconds to a minute long, in which the host runs both vCPUs on
the two hardware threads of one physical core. Measured with a standalone C probe on an AMD EPYC Zen 4 VM, 1374
rounds over 5 minutes, each timing three loops alone and on both vCPUs at once: in 51 rounds a loop bound by
multiply-add throughput (12 independent AVX-512 FMA chains) ran 1.77x slower per thread with both vCPUs busy (alone
unchanged), a latency-bound integer chain 1.10x, a 64 MB stream 1.49x; in the other rounds 1.00x, 1.01x, 1.22x.
That is the signature of two hardware threads sharing one core's multiply-add units. Inside such a period a
two-thread run of a kernel near the core's multiply-add peak gains little over one thread.

`fma_contention` measures it with the kernels' own probe (kernels/host_probe.c) on the kernels' own pool, and
also reads how much slower the slowest thread is than the fastest while both run ("uneven": one vCPU computing
slower than the other, seen at 1.3x at times with a per-vCPU probe).

The host's other slow state (BENCHMARKS.md, "End to end after ortx tune", (B)) is where it places the two vCPUs:
`core_round_trip_ns` passes a cache line between two pool threads (kernels/host_probe.c, host_core_latency). On
the Zen 4 VM it read ~55-170 ns in some minutes and ~320-480 ns (bursts to 700) in others, and the slow periods of
two-thread runs followed it: ONNX Runtime's PP-OCR rec at 2 threads (1 thread: 19.7-20.2 ms throughout) took
11.9-12.5 ms while a standalone ping-pong read 117-145 ns and 24.3-30.3 ms (slower than one thread) while it read
360-485 ns; OrtxEP's ResNet-18-style fp32 0.87x ORT's time near, 1.21x far apart (ORT's convs lose 4% there,
OrtxEP's 46%). The multiply-add probe reads nothing unusual then (each vCPU computes and reads memory at full speed,
alone or together): what slows is every exchange of data between the threads, as between cores that share no
cache. `fma_contention` reads the round trip too (HostContention.far_cores).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ortx import _kernels

ITERATIONS = 200_000  # 0.60 ms alone on a Zen 4 vCPU (2.4M zmm FMAs, ~1 a cycle)
SHARED_CORE_RATIO = 1.4  # per-thread slow-down at which the threads are taken to share a core (1.0 vs ~1.8 seen)
UNEVEN_RATIO = 1.2  # slowest over fastest thread, both running, at which one vCPU is taken to be slower (1.3 seen)
ROUND_TRIPS = 2000  # host_core_latency's exchanges per reading: 0.1-1.5 ms
FAR_ROUND_TRIP_NS = 250.0  # round trip at which the threads are taken to sit on far-apart cores (60-170 vs 350+)


@dataclasses.dataclass(frozen=True)
class HostContention:
    """The multiply-add probe alone on the caller's thread and on every pool thread at once (the smallest of
    `tries` readings of each, so that another process's burst does not count): `together_ms` the slowest thread's
    time, `fastest_ms` the fastest one's in that same reading."""

    threads: int
    alone_ms: float
    together_ms: float
    fastest_ms: float = float("nan")
    round_trip_ns: float = float("nan")  # core_round_trip_ns between two pool threads (NaN: not read)

    @property
    def ratio(self) -> float:
        return self.together_ms / self.alone_ms

    @property
    def spread(self) -> float:
        """Slowest over fastest thread while all run: one vCPU slower than the other, as when another tenant's
        thread shares its core; NaN without a concurrent reading."""
        return self.together_ms / self.fastest_ms

    @property
    def shared_core(self) -> bool:
        return self.threads > 1 and self.ratio >= SHARED_CORE_RATIO

    @property
    def uneven(self) -> bool:
        return self.threads > 1 and not self.shared_core and self.spread >= UNEVEN_RATIO

    @property
    def far_cores(self) -> bool:
        """The threads exchange data slowly (a cache line's round trip >= FAR_ROUND_TRIP_NS)."""
        return self.threads > 1 and self.round_trip_ns >= FAR_ROUND_TRIP_NS

    def describe(self) -> str:
        if self.threads < 2:
            return "one thread"
        notes = [what for what, flag in (("threads share a core", self.shared_core),
                                         ("one thread slower", self.uneven),
                                         ("cores far apart", self.far_cores)) if flag]
        note = f" ({', '.join(notes)})" if notes else ""
        trip = f", round trip {self.round_trip_ns:.0f} ns" if self.round_trip_ns == self.round_trip_ns else ""
        return f"x{self.ratio:.2f}, spread {self.spread:.2f}{trip}{note}"


def _probe(threads: int, iterations: int) -> tuple[float, float]:
    """Milliseconds of the slowest and the fastest of `threads` tasks, each on its own pool thread."""
    nanoseconds = np.zeros(threads, np.int64)
    thread_of = np.full(threads, -1, np.int64)
    _kernels.call("host_fma_probe", [threads, iterations], [], [nanoseconds, thread_of], num_threads=threads)
    if len(set(thread_of.tolist())) != threads:
        # a worker did not wake in time and another thread ran its task after its own: not a concurrent reading
        return float("nan"), float("nan")
    return float(nanoseconds.max()) / 1e6, float(nanoseconds.min()) / 1e6


def core_round_trip_ns(*, round_trips: int = ROUND_TRIPS, tries: int = 3) -> float:
    """Nanoseconds for a cache line to go from one pool thread to another and back (the smallest of `tries`
    readings); NaN when no reading had the two tasks on two threads at once."""
    readings = []
    for _ in range(tries):
        out = np.full(3, -1, np.int64)
        _kernels.call("host_core_latency", [round_trips], [], [out], num_threads=2)
        if out[0] > 0 and out[1] != out[2]:
            readings.append(float(out[0]) / round_trips)
    return min(readings, default=float("nan"))


def fma_contention(threads: int = 2, *, iterations: int = ITERATIONS, tries: int = 3) -> HostContention:
    """The probe alone and on `threads` pool threads at once, and the threads' round trip; a few milliseconds."""
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    alone = min(_probe(1, iterations)[0] for _ in range(tries))
    if threads == 1:
        return HostContention(1, alone, alone, alone)
    readings = [reading for reading in (_probe(threads, iterations) for _ in range(tries)) if reading[0] == reading[0]]
    slowest, fastest = min(readings, default=(float("nan"), float("nan")))
    return HostContention(threads, alone, slowest, fastest, core_round_trip_ns(tries=tries))
