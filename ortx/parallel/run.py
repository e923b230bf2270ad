"""run(plan, micro_batches): streams micro-batches through a split model's stages, outputs in order.

backend "processes" (default): one process per stage on this machine, shared-memory rings between them
(ortx.parallel.processes). backend "dask": one stage per distributed worker (ortx.parallel.dask_workers; extra
ortx[distributed]). For repeated runs without restarting the stages, use ProcessPipeline / DaskPipeline directly.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ortx.parallel.plan import PipelinePlan
from ortx.parallel.processes import ProcessPipeline, checked_micro_batches

BACKENDS = ("processes", "dask")


def run(plan: PipelinePlan, micro_batches: Sequence[Mapping[str, np.ndarray]], *, backend: str = "processes",
        client=None, workers: Sequence[str] | None = None, resources: Sequence[Mapping[str, float]] | None = None,
        threads_per_stage: int = 1, slots: int = 2, start_method: str | None = None,
        provider_options: Mapping[str, str] | None = None) -> list[dict[str, np.ndarray]]:
    """One dict of model outputs per micro-batch, in order. `client`, `workers` (one address per stage) and
    `resources` (one Dask resource dict per stage) are for backend "dask"; `slots` (micro-batches each ring holds)
    and `start_method` ("forkserver" or "spawn") for "processes"; `provider_options` are OrtxEP's, for every
    stage's session."""
    if not isinstance(plan, PipelinePlan):
        raise TypeError(f"run: plan must be a PipelinePlan from ortx.pipeline.split, not {type(plan).__name__}")
    micro_batches = checked_micro_batches(micro_batches, plan.inputs)  # before any process starts
    if backend == "processes":
        if client is not None or workers is not None or resources is not None:
            raise ValueError("run: client, workers and resources are options of backend='dask'")
        with ProcessPipeline(plan, threads_per_stage=threads_per_stage, slots=slots, start_method=start_method,
                             provider_options=provider_options) as pipeline:
            return pipeline.run(micro_batches)
    if backend == "dask":
        if start_method is not None:
            raise ValueError("run: start_method is an option of backend='processes'")
        from ortx.parallel.dask_workers import DaskPipeline

        with DaskPipeline(plan, client, workers=workers, resources=resources, threads_per_stage=threads_per_stage,
                          provider_options=provider_options) as pipeline:
            return pipeline.run(micro_batches)
    raise ValueError(f"run: unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
