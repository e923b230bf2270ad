"""The embedded pipeline backend: one process per stage, joined by shared-memory rings (ortx.parallel.rings).

1. The caller creates N+1 rings (model inputs, the N-1 cuts, model outputs), each of `slots` slots of its
   boundary's planned bytes, and starts N stage processes. start_method "forkserver" (the default where there is
   one) forks them from a server that imported ortx once (about 5 s per import on a loaded 2-core host, paid once
   per caller process); "spawn" starts each from scratch. Neither inherits the caller's threads or state.
2. Stage k builds an ortx.InferenceSession on its stage model (`threads_per_stage` intra-op threads), reports
   ready, then loops: take a slot from ring k, run on views of it (inputs are not copied), write its outputs and
   the tensors that pass through it into a slot of ring k+1, release ring k's slot. An END slot ends the loop and
   is passed on.
3. The caller feeds micro-batches into ring 0 from a thread and reads ring N in order on its own.
4. A stage that fails sends (stage, message naming its node) on the error queue and sets the abort event; every
   wait polls that event, the caller raises PipelineStageError, terminates what is left and unlinks the rings.
   Processes are daemons (ended when the caller exits) and also stop on their own when the caller is killed
   (their ring waits watch its sentinel); the resource tracker then unlinks the rings.
Limits: static shapes (those the plan was split for); one `run` at a time per pipeline.
"""
from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Mapping, Sequence

import numpy as np

from ortx.parallel.plan import Boundary, PipelinePlan
from ortx.parallel.rings import DATA, END, Aborted, Ring, RingSpec

logger = logging.getLogger(__name__)

JOIN_SECONDS = 10.0  # how long close() waits for a stage to finish its END before terminating it
ERROR_SECONDS = 5.0  # how long a failure waits for the failing stage's message
_ring_numbers = itertools.count()


class PipelineStageError(RuntimeError):
    """A stage process failed; the message names the stage and, when the error does, the node."""


def stage_error_message(stage: int, nodes: Sequence[str], error: BaseException, when: str) -> str:
    """`when` is 'starting' or 'running'; names the node the error names, else the stage's node range."""
    text = f"{type(error).__name__}: {error}"
    named = [node for node in nodes if node in text]
    where = f"node {max(named, key=len)}" if named else f"nodes {nodes[0]} .. {nodes[-1]}"
    return f"pipeline stage {stage} ({where}) failed while {when}: {text}"


def check_micro_batch(batch: Mapping[str, np.ndarray], inputs: Boundary, position: int) -> None:
    if not isinstance(batch, Mapping):
        raise TypeError(f"micro-batch {position}: expected a dict of input name -> array, got "
                        f"{type(batch).__name__}")
    missing = [name for name in inputs.names if name not in batch]
    unknown = sorted(set(batch) - set(inputs.names))
    if missing or unknown:
        raise ValueError(f"micro-batch {position}: inputs {list(inputs.names)} expected; missing {missing}, "
                         f"unknown {unknown}")
    for tensor in inputs.tensors:
        array = np.asarray(batch[tensor.name])
        if array.shape != tensor.shape or array.dtype != np.dtype(tensor.dtype):
            raise ValueError(f"micro-batch {position}: input {tensor.name!r} is {array.dtype}{list(array.shape)}, "
                             f"the plan was split for {tensor.dtype}{list(tensor.shape)}")


def checked_micro_batches(micro_batches, inputs: Boundary) -> list:
    """The micro-batches as a list, each checked against the plan's inputs (an error names the batch at fault)."""
    batches = list(micro_batches)
    for position, batch in enumerate(batches):
        check_micro_batch(batch, inputs, position)
    return batches


class _StopWhen:
    """The abort event as a stage sees it: also set once the caller is gone (killed before it could close the
    pipeline), so no stage outlives it blocked on a ring."""

    def __init__(self, abort):
        self.abort = abort
        self.parent = multiprocessing.parent_process()

    def is_set(self) -> bool:
        return self.abort.is_set() or (self.parent is not None and not self.parent.is_alive())

    def set(self) -> None:
        self.abort.set()


def _stage_main(stage: int, model: bytes, nodes: tuple[str, ...], outputs: tuple[str, ...],
                passing: tuple[str, ...], threads: int, provider_options: dict, source: RingSpec,
                target: RingSpec, abort, errors, ready) -> None:
    """A stage process's body (module level: spawn imports it by name)."""
    when = "starting"
    abort = _StopWhen(abort)
    rings = []
    try:
        import onnxruntime

        from ortx.ep.session import InferenceSession

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = InferenceSession(model, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                   provider_options=[dict(provider_options), {}])
        input_names = [arg.name for arg in session.get_inputs()]
        rings = [Ring(source, create=False), Ring(target, create=False)]
        incoming, outgoing = rings
        ready.put(stage)
        when = "running"
        while True:
            kind, tensors = incoming.take(abort)
            slot = outgoing.reserve(abort)
            if kind == END:
                outgoing.publish(END)
                incoming.release()
                break
            results = session.run(list(outputs), {name: tensors[name] for name in input_names})
            for name, result in zip(outputs, results):
                np.copyto(slot[name], result)
            for name in passing:
                np.copyto(slot[name], tensors[name])
            del tensors, slot, results
            outgoing.publish(DATA)
            incoming.release()
    except Aborted:
        pass
    except BaseException as error:  # reported to the caller, which raises it there
        errors.put((stage, stage_error_message(stage, nodes, error, when)))
        abort.set()
    finally:
        for ring in rings:
            ring.close()


START_METHODS = ("forkserver", "spawn")


def _context(start_method: str | None):
    available = multiprocessing.get_all_start_methods()
    if start_method is None:
        start_method = "forkserver" if "forkserver" in available else "spawn"
    if start_method not in START_METHODS or start_method not in available:
        raise ValueError(f"pipeline: start_method {start_method!r} is not one of "
                         f"{[method for method in START_METHODS if method in available]}")
    context = multiprocessing.get_context(start_method)
    if start_method == "forkserver":
        # Read when the server starts (once per process): stages fork with the session module already imported.
        context.set_forkserver_preload(["ortx.parallel.processes", "ortx.ep.session"])
    return context


class ProcessPipeline:
    """Stage processes started once and reused across `run` calls; a context manager (close() on exit)."""

    def __init__(self, plan: PipelinePlan, *, threads_per_stage: int = 1, slots: int = 2,
                 provider_options: Mapping[str, str] | None = None, start_method: str | None = None,
                 start_seconds: float = 600.0):
        if threads_per_stage < 1 or slots < 1:
            raise ValueError(f"threads_per_stage ({threads_per_stage}) and slots ({slots}) must be >= 1")
        self.plan = plan
        self._context = _context(start_method)
        self._abort = self._context.Event()
        self._errors = self._context.Queue()
        self._processes: list = []
        self._rings: list[Ring] = []
        self._closed = False
        prefix = f"ortx_pipe_{os.getpid()}_{next(_ring_numbers)}"
        try:
            for index, boundary in enumerate(plan.boundaries):
                spec = RingSpec(f"{prefix}_{index}", boundary.tensors, slots, self._context.Semaphore(slots),
                                self._context.Semaphore(0))
                self._rings.append(Ring(spec, create=True))
            ready = self._context.Queue()
            for stage in plan.stages:
                process = self._context.Process(
                    target=_stage_main, name=f"ortx-pipeline-stage-{stage.index}", daemon=True,
                    args=(stage.index, stage.model.SerializeToString(), stage.nodes, stage.outputs,
                          plan.passing_through(stage.index), threads_per_stage, dict(provider_options or {}),
                          self._rings[stage.index].spec, self._rings[stage.index + 1].spec, self._abort,
                          self._errors, ready))
                process.start()
                self._processes.append(process)
            self._wait_ready(ready, start_seconds)
        except BaseException:
            self.close()
            raise

    @property
    def ring_names(self) -> list[str]:
        return [ring.spec.name for ring in self._rings]

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self._processes]

    def _wait_ready(self, ready, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        started = set()
        while len(started) < len(self._processes):
            self._raise_if_failed()
            try:
                started.add(ready.get(timeout=0.1))
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"pipeline: stages {sorted(set(range(len(self._processes))) - started)} "
                                       f"not ready after {seconds:.0f} s")

    def _raise_if_failed(self) -> None:
        exited = [process for process in self._processes if process.exitcode not in (None, 0)]
        if not exited and not self._abort.is_set() and self._errors.empty():
            return
        try:
            # A stage sets the abort event right after putting its message; the queue's feeder thread may not
            # have written it yet.
            stage, message = self._errors.get(timeout=ERROR_SECONDS)
        except queue.Empty:
            if exited:
                stage = self.plan.stages[int(exited[0].name.rsplit("-", 1)[1])]
                raise PipelineStageError(f"pipeline stage {stage.index} (nodes {stage.nodes[0]} .. "
                                         f"{stage.nodes[-1]}) exited with code {exited[0].exitcode}") from None
            raise PipelineStageError("pipeline aborted") from None
        raise PipelineStageError(message)

    def run(self, micro_batches: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Streams the micro-batches through the stages; their outputs, in order (copies the caller owns)."""
        if self._closed:
            raise RuntimeError("pipeline: run() after close()")
        batches = checked_micro_batches(micro_batches, self.plan.inputs)
        feeder_error: list[BaseException] = []
        feeder = threading.Thread(target=self._feed, args=(batches, feeder_error), name="ortx-pipeline-feeder",
                                  daemon=True)
        feeder.start()
        results = []
        outputs = self._rings[-1]
        try:
            while len(results) < len(batches):
                try:
                    kind, tensors = outputs.take(self._abort)
                except Aborted:
                    self._raise_if_failed()
                    raise
                results.append({name: np.array(tensors[name]) for name in self.plan.outputs.names})
                del tensors
                outputs.release()
        except BaseException:
            self._abort.set()
            feeder.join()
            self.close()
            raise
        feeder.join()
        if feeder_error:
            self.close()
            raise feeder_error[0]
        return results

    def _feed(self, batches: list, feeder_error: list) -> None:
        ring = self._rings[0]
        try:
            for batch in batches:
                slot = ring.reserve(self._abort)
                for name, view in slot.items():
                    np.copyto(view, batch[name])
                del slot
                ring.publish(DATA)
        except Aborted:
            pass
        except BaseException as error:  # raised again by run()
            feeder_error.append(error)
            self._abort.set()

    def close(self) -> None:
        """Ends the stage processes (an END through the rings, else terminate) and unlinks every ring."""
        if self._closed:
            return
        self._closed = True
        if not self._abort.is_set() and self._rings and all(p.is_alive() for p in self._processes):
            try:
                self._rings[0].reserve(self._abort)
                self._rings[0].publish(END)
            except Aborted:
                pass
        deadline = time.monotonic() + JOIN_SECONDS
        for process in self._processes:
            process.join(timeout=max(deadline - time.monotonic(), 0.0) if not self._abort.is_set() else 1.0)
        for process in self._processes:
            if process.is_alive():
                logger.warning("pipeline: terminating %s", process.name)
                process.terminate()
                process.join(timeout=JOIN_SECONDS)
            if process.is_alive():
                process.kill()
                process.join()
        for ring in self._rings:
            ring.close()
        self._errors.close()
        self._errors.join_thread()

    def __enter__(self) -> "ProcessPipeline":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self):
        if not getattr(self, "_closed", True):
            self.close()
