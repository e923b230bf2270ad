"""A single-producer single-consumer ring of micro-batch slots in shared memory, between two pipeline processes.

One multiprocessing.shared_memory segment holds `slots` slots; a slot is a 64-byte header (sequence number, kind)
followed by the boundary's tensors at 64-byte aligned offsets, so both sides read and write numpy views of the same
pages and no tensor is pickled. Two semaphores count free and filled slots; the producer fills slot
sequence % slots, the consumer takes them in the same order. Every wait polls an abort event, so a failure
anywhere stops every process instead of leaving one blocked. The creator (the process that calls `run`) unlinks
the segment; the others only attach and close.
"""
from __future__ import annotations

import dataclasses
import logging
from multiprocessing import shared_memory

import numpy as np

from ortx.parallel.plan import TensorSpec

logger = logging.getLogger(__name__)

ALIGNMENT = 64
HEADER_BYTES = 64
DATA, END = 0, 1  # slot kinds: a micro-batch, or the end of the stream
POLL_SECONDS = 0.05  # how often a blocked wait looks at the abort event


def _aligned(size: int) -> int:
    return (size + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclasses.dataclass
class RingSpec:
    """What a process needs to attach to a ring (picklable for multiprocessing's spawn)."""

    name: str
    tensors: tuple[TensorSpec, ...]
    slots: int
    free: object  # multiprocessing.Semaphore: slots the producer may fill
    filled: object  # multiprocessing.Semaphore: slots the consumer may take

    @property
    def slot_bytes(self) -> int:
        return HEADER_BYTES + sum(_aligned(tensor.nbytes) for tensor in self.tensors)


class Aborted(Exception):
    """The pipeline's abort event was set while this process waited on a ring."""


class Ring:
    def __init__(self, spec: RingSpec, *, create: bool):
        self.spec = spec
        self.created = create
        size = max(spec.slot_bytes * spec.slots, 1)
        self.memory = shared_memory.SharedMemory(name=spec.name, create=create, size=size if create else 0)
        self._views = [self._slot_views(slot) for slot in range(spec.slots)]
        self._produced = 0
        self._consumed = 0

    def _slot_views(self, slot: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        offset = slot * self.spec.slot_bytes
        header = np.ndarray((2,), dtype=np.int64, buffer=self.memory.buf, offset=offset)
        offset += HEADER_BYTES
        tensors = {}
        for tensor in self.spec.tensors:
            tensors[tensor.name] = np.ndarray(tensor.shape, dtype=np.dtype(tensor.dtype), buffer=self.memory.buf,
                                              offset=offset)
            offset += _aligned(tensor.nbytes)
        return header, tensors

    @staticmethod
    def _wait(semaphore, abort) -> None:
        while not semaphore.acquire(timeout=POLL_SECONDS):
            if abort.is_set():
                raise Aborted()

    # Producer side ---------------------------------------------------------------------------------------------
    def reserve(self, abort) -> dict[str, np.ndarray]:
        """Waits for a free slot; returns views of its tensors to fill, then `publish`."""
        self._wait(self.spec.free, abort)
        return self._views[self._produced % self.spec.slots][1]

    def publish(self, kind: int = DATA) -> None:
        header = self._views[self._produced % self.spec.slots][0]
        header[0], header[1] = self._produced, kind
        self._produced += 1
        self.spec.filled.release()

    # Consumer side ---------------------------------------------------------------------------------------------
    def take(self, abort) -> tuple[int, dict[str, np.ndarray]]:
        """Waits for the next filled slot; returns (kind, views of its tensors), valid until `release`."""
        self._wait(self.spec.filled, abort)
        header, tensors = self._views[self._consumed % self.spec.slots]
        if int(header[0]) != self._consumed:
            raise RuntimeError(f"ring {self.spec.name}: slot holds micro-batch {int(header[0])}, expected "
                               f"{self._consumed}")
        return int(header[1]), tensors

    def release(self) -> None:
        self._consumed += 1
        self.spec.free.release()

    def close(self) -> None:
        """Drops the views and the mapping; the creator also unlinks the segment."""
        self._views = []
        try:
            self.memory.close()
        except BufferError:  # a caller still holds a view; the mapping goes when the process ends
            logger.debug("ring %s: views still alive at close", self.spec.name)
        if self.created:
            try:
                self.memory.unlink()
            except FileNotFoundError:
                pass

