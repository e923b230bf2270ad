"""ortx.pipeline.run(backend="dask") on a LocalCluster on 127.0.0.1: outputs equal the unsplit model's, each stage
stays on the worker it was pinned to, and errors name the stage, the node or the unknown worker."""
from __future__ import annotations

import distributed
import numpy as np
import onnxruntime
import pytest

import ortx
import ortx.pipeline
from ortx.parallel.dask_workers import DaskPipeline
from ortx.parallel.processes import PipelineStageError
from tests import _models
from tests.parallel.test_processes import _scatter_model
from tests.tolerances import assert_close


@pytest.fixture(scope="module")
def client():
    # Workers in threads of this process (no second ortx import: seconds, not tens of seconds on 2 cores), but
    # talking TCP on 127.0.0.1, so every tensor between stages is serialized and sent as between machines.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp://",
                                  host="127.0.0.1", dashboard_address=None) as cluster:
        with distributed.Client(cluster) as dask_client:
            yield dask_client


def _sessions_per_worker(dask_client, plugin_name: str) -> dict[str, list[int]]:
    def stages(dask_worker):
        return sorted(dask_worker.plugins[plugin_name].sessions)

    return dask_client.run(stages)


def test_stages_on_the_given_workers_match_the_unsplit_model(client):
    model = _models.transformer_block()
    plan = ortx.pipeline.split(model, stages=2)
    rng = np.random.default_rng(0)
    batches = [{"X": rng.uniform(-1, 1, (1, 16, 64)).astype(np.float32)} for _ in range(5)]
    addresses = sorted(client.scheduler_info()["workers"])[::-1]  # stage 0 on the second worker
    # jit off: the C compiles of the JIT are what this test would spend its time on, and they are the same in every
    # backend (tests/parallel/test_processes.py runs the default).
    with DaskPipeline(plan, client, workers=addresses, provider_options={"jit": "off"}) as pipeline:
        outputs = pipeline.run(batches)
        placed = _sessions_per_worker(client, pipeline.plugin_name)
    assert placed == {addresses[0]: [0], addresses[1]: [1]}
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    reference = ortx.InferenceSession(model.SerializeToString(), options, providers=["OrtxEP", "CPUExecutionProvider"],
                                      provider_options=[{"jit": "off"}, {}])
    for position, (batch, result) in enumerate(zip(batches, outputs)):
        assert_close(result["Y"], reference.run(None, batch)[0], what=f"micro-batch {position}")


def test_dask_errors_name_the_stage_node_or_worker(client):
    plan = ortx.pipeline.split(_scatter_model(), stages=2)
    with pytest.raises(ValueError, match=r"workers \['tcp://127.0.0.1:1'\] are not in the cluster"):
        ortx.pipeline.run(plan, [], backend="dask", client=client, workers=["tcp://127.0.0.1:1"] * 2)
    bad = {"X": np.array([1, 2, 3, 40], np.float32)}
    with pytest.raises(PipelineStageError, match=r"pipeline stage 1 \(node scatter_2\) failed while running"):
        ortx.pipeline.run(plan, [bad], backend="dask", client=client)
