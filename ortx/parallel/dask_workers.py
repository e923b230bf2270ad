"""The Dask backend: the same pipeline with one stage per distributed worker, across machines (extra ortx[distributed]).

1. A WorkerPlugin carrying the stage models goes to the workers; a worker builds a stage's ortx.InferenceSession
   the first time it runs that stage and keeps it until the pipeline closes (the plugin is unregistered).
2. Stage k is pinned: to the worker address `workers[k]`, or to the Dask `resources[k]` the user declared on
   workers; neither given: the client's workers in address order, stage k on worker k mod count. Tasks never run
   elsewhere (allow_other_workers=False).
3. Micro-batch i becomes a chain of tasks stage 0 -> ... -> N-1, each taking the previous task's boundary dict;
   Dask moves the tensors between workers, and stage k works on batch i+1 while stage k+1 works on batch i.
4. A failing stage raises PipelineStageError naming the stage and node (ortx.parallel.processes' wording).
"""
from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence

import numpy as np

from ortx.parallel.plan import PipelinePlan
from ortx.parallel.processes import PipelineStageError, checked_micro_batches, stage_error_message

try:
    from distributed import get_worker
    from distributed.diagnostics.plugin import WorkerPlugin
except ImportError as error:
    raise ImportError("ortx.pipeline.run(backend='dask') needs the 'distributed' package: "
                      "pip install 'ortx[distributed]'") from error

_pipeline_numbers = itertools.count()


class StageSessions(WorkerPlugin):
    """Sent to every worker: the stage models and, on the worker, the sessions of the stages it ran."""

    def __init__(self, models: list[bytes], nodes: list[tuple[str, ...]], threads: int, provider_options: dict):
        self.models = models
        self.nodes = nodes
        self.threads = threads
        self.provider_options = provider_options
        self.sessions: dict = {}

    def setup(self, worker=None) -> None:
        self.sessions = {}

    def teardown(self, worker=None) -> None:
        self.sessions.clear()

    def session(self, stage: int):
        if stage not in self.sessions:
            import onnxruntime

            from ortx.ep.session import InferenceSession

            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            self.sessions[stage] = InferenceSession(self.models[stage], options,
                                                    providers=["OrtxEP", "CPUExecutionProvider"],
                                                    provider_options=[dict(self.provider_options), {}])
        return self.sessions[stage]


def _stage_task(plugin_name: str, stage: int, outputs: tuple[str, ...], passing: tuple[str, ...],
                boundary: dict | None) -> dict:
    """Runs stage `stage` on a worker; `boundary` None only warms the session up."""
    plugin = get_worker().plugins[plugin_name]
    when = "starting"
    try:
        session = plugin.session(stage)
        if boundary is None:
            return {}
        when = "running"
        feeds = {arg.name: boundary[arg.name] for arg in session.get_inputs()}
        results = dict(zip(outputs, session.run(list(outputs), feeds)))
    except Exception as error:
        raise PipelineStageError(stage_error_message(stage, plugin.nodes[stage], error, when)) from None
    results.update({name: boundary[name] for name in passing})
    return results


class DaskPipeline:
    """Stage sessions kept on the workers across `run` calls; a context manager (close() on exit)."""

    def __init__(self, plan: PipelinePlan, client, *, workers: Sequence[str] | None = None,
                 resources: Sequence[Mapping[str, float]] | None = None, threads_per_stage: int = 1,
                 provider_options: Mapping[str, str] | None = None):
        if client is None:
            raise ValueError("pipeline run(backend='dask') needs client= (a distributed.Client)")
        self.plan = plan
        self.client = client
        self.placements = self._placements(workers, resources)
        self.plugin_name = f"ortx-pipeline-{os.getpid()}-{next(_pipeline_numbers)}"
        plugin = StageSessions([stage.model.SerializeToString() for stage in plan.stages],
                               [stage.nodes for stage in plan.stages], threads_per_stage,
                               dict(provider_options or {}))
        client.register_plugin(plugin, name=self.plugin_name)
        self._closed = False
        try:
            self._gather([self._submit(stage.index, None, "start") for stage in plan.stages])
        except BaseException:
            self.close()
            raise

    def _placements(self, workers, resources) -> list[dict]:
        count = len(self.plan.stages)
        if workers is not None and resources is not None:
            raise ValueError("pipeline (dask): give workers= or resources=, not both")
        if resources is not None:
            if len(resources) != count:
                raise ValueError(f"pipeline (dask): resources= has {len(resources)} entries for {count} stages")
            return [{"resources": dict(entry)} for entry in resources]
        known = sorted(self.client.scheduler_info()["workers"])
        if workers is None:
            if not known:
                raise ValueError("pipeline (dask): the client has no workers")
            workers = [known[index % len(known)] for index in range(count)]
        if len(workers) != count:
            raise ValueError(f"pipeline (dask): workers= has {len(workers)} addresses for {count} stages")
        unknown = sorted({address for address in workers if address not in known})
        if unknown:
            raise ValueError(f"pipeline (dask): workers {unknown} are not in the cluster; its workers: {known}")
        return [{"workers": [address]} for address in workers]

    def _submit(self, stage: int, boundary, token: str):
        return self.client.submit(_stage_task, self.plugin_name, stage, self.plan.stages[stage].outputs,
                                  self.plan.passing_through(stage), boundary, key=f"{self.plugin_name}-{token}-{stage}",
                                  allow_other_workers=False, pure=False, **self.placements[stage])

    def _gather(self, futures):
        try:
            return self.client.gather(futures)
        except PipelineStageError:
            raise
        except Exception as error:  # a lost worker, a cancelled task: name the pipeline and the cause
            raise PipelineStageError(f"pipeline (dask): {type(error).__name__}: {error}") from error

    def run(self, micro_batches: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        if self._closed:
            raise RuntimeError("pipeline: run() after close()")
        batches = checked_micro_batches(micro_batches, self.plan.inputs)
        run_id = next(_pipeline_numbers)
        finals = []
        for position, batch in enumerate(batches):
            boundary = {name: np.asarray(batch[name]) for name in self.plan.inputs.names}
            for stage in range(len(self.plan.stages)):
                boundary = self._submit(stage, boundary, f"{run_id}-{position}")
            finals.append(boundary)
        results = self._gather(finals)
        return [{name: result[name] for name in self.plan.outputs.names} for result in results]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.client.unregister_worker_plugin(self.plugin_name)

    def __enter__(self) -> "DaskPipeline":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
