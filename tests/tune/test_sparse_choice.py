"""ortx.tune.sparse_choice: the dense/sparse choice per layer (prior, records, crossover, measurement) and its effect
on a session: which layers run sparse (sess.assignment) and outputs equal to onnxruntime's."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

import ortx
from ortx.ep.compile_nodes import infer_shapes
from ortx.ep.options import parse_providers
from ortx.tune.fingerprint import current
from ortx.tune.records import TuningDatabase, TuningRecord
from ortx.tune.sparse_choice import (MARGIN, PRIOR_MIN_ZEROS, SPARSE_TEMPLATE, SparseChoice, SparsePolicy, signature,
                                     zero_fraction)
from tests import _models
from tests.kernels.test_sparse import _conv_model
from tests.tolerances import assert_close

SHAPE = "1x8x20x20|40x8x1x1|1,1,0,0,1,1"


def _node(zeros=0.9):
    model, _ = _conv_model(8, 40, (20, 20), 1, 1, 0, 1, 1, zeros, seed=3, fused=False)
    return list(infer_shapes(model).graph)[0]


def _record(database, zeros, engine_ms: dict, created=1.0):
    key = database.add_fingerprint(current())
    for (engine, block_rows), ms in engine_ms.items():
        schedule = {"engine": "dense"} if engine == "dense" else {"engine": "sparse", "block_rows": block_rows}
        database.add(TuningRecord(signature("conv", SHAPE, zeros, 2), key, SPARSE_TEMPLATE, schedule, "ok", ms,
                                  source="test", created=created))


def test_prior_without_records(tmp_path):
    node = _node()
    for mode, path in (("off", None), ("cached", str(tmp_path / "missing.sqlite"))):
        policy = SparsePolicy(mode, path)
        assert policy.choose(node, "conv", SHAPE, PRIOR_MIN_ZEROS, 2) == SparseChoice("sparse", 1, "prior")
        assert policy.choose(node, "conv", SHAPE, 0.6, 2).engine == "dense"
        assert policy.choose(node, "conv", SHAPE, 0.1, 2).engine == "dense"
    assert not (tmp_path / "missing.sqlite").exists()  # "cached" reads, never creates
    with pytest.raises(ValueError, match="tuning mode 'fast'"):
        SparsePolicy("fast")


def test_records_override_the_prior_and_give_the_crossover(tmp_path):
    path = str(tmp_path / "tuning.sqlite")
    node = _node()
    with TuningDatabase(path) as database:
        _record(database, 0.9, {("dense", 1): 1.0, ("sparse", 1): 2.0, ("sparse", 4): 3.0})  # dense won at 90%
        _record(database, 0.5, {("dense", 1): 1.0, ("sparse", 1): 2.0, ("sparse", 4): 0.5})  # 4x1 won at 50%
    policy = SparsePolicy("cached", path)
    assert policy.choose(node, "conv", SHAPE, 0.9, 2) == SparseChoice("dense", 1, "record")
    assert policy.choose(node, "conv", SHAPE, 0.5, 2) == SparseChoice("sparse", 4, "record")
    # no record at 0.6: sparse won at 0.5 <= 0.6, so sparse by the measured crossover (the prior would say dense)
    assert policy.choose(node, "conv", SHAPE, 0.6, 2) == SparseChoice("sparse", 4, "crossover")
    assert policy.choose(node, "conv", SHAPE, 0.6, 1).source == "prior"  # other thread count: not this record
    with TuningDatabase(path) as database:  # a later measurement replaces the earlier one
        _record(database, 0.9, {("dense", 1): 2.0, ("sparse", 1): 1.0}, created=2.0)
    assert policy.choose(node, "conv", SHAPE, 0.9, 2) == SparseChoice("sparse", 1, "record")
    with TuningDatabase(path) as database:  # a near tie (within MARGIN) keeps dense
        _record(database, 0.9, {("dense", 1): 1.0, ("sparse", 1): 0.95}, created=3.0)
    assert policy.choose(node, "conv", SHAPE, 0.9, 2) == SparseChoice("dense", 1, "record")


def test_quick_measures_and_records_every_engine(tmp_path):
    path = str(tmp_path / "tuning.sqlite")
    node = _node()
    zeros = zero_fraction(np.asarray(node.inputs[1].const_value.numpy()))
    choice = SparsePolicy("quick", path).choose(node, "conv", SHAPE, zeros, 2)
    with TuningDatabase(path) as database:
        rows = database.records(signature("conv", SHAPE, zeros, 2))
    assert sorted((row.schedule["engine"], row.schedule.get("block_rows", 1)) for row in rows) == [
        ("dense", 1), ("sparse", 1), ("sparse", 4)]
    assert all(row.status == "ok" and row.median_ms > 0 for row in rows)
    times = {(row.schedule["engine"], row.schedule.get("block_rows", 1)): row.median_ms for row in rows}
    sparse_ms, block_rows = min((times[("sparse", r)], r) for r in (1, 4))
    expected = ("sparse", block_rows) if sparse_ms < MARGIN * times[("dense", 1)] else ("dense", 1)
    assert (choice.engine, choice.block_rows) == expected and choice.source == "record"


def _pruned(model, zeros):
    """Zeroes the smallest-magnitude `zeros` of every conv/gemm weight (per layer)."""
    for initializer in model.graph.initializer:
        if len(initializer.dims) in (2, 4) and np.prod(initializer.dims) > 64:
            from onnx import numpy_helper

            weights = numpy_helper.to_array(initializer).copy()
            threshold = np.quantile(np.abs(weights), zeros)
            weights[np.abs(weights) <= threshold] = 0
            initializer.CopyFrom(numpy_helper.from_array(weights, initializer.name))
    return model


def test_session_reports_sparse_layers_and_matches_onnxruntime(tmp_path):
    model = _pruned(_models.resnet18_style(size=32), 0.9)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    expected = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                            providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    session = ortx.InferenceSession(model, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                    provider_options=[{"tuning": "off", "jit": "off"}, {}])
    assert_close(session.run(None, {"input": x})[0], expected)
    sparse = session.assignment.sparse_nodes()
    convs = [row.name for row in session.assignment if row.op_type == "Conv"]
    assert sparse and set(sparse) <= set(convs) | {row.name for row in session.assignment if row.op_type == "Gemm"}
    assert "run sparse (CSR) kernels" in str(session.assignment)
    dense = ortx.InferenceSession(model, options, providers=["OrtxEP", "CPUExecutionProvider"],
                                  provider_options=[{"tuning": "off", "jit": "off", "sparse": "off"}, {}])
    assert_close(dense.run(None, {"input": x})[0], expected)
    assert dense.assignment.sparse_nodes() == ()


def test_sparse_option_is_validated():
    providers = ["OrtxEP", "CPUExecutionProvider"]
    assert parse_providers(providers, [{"sparse": " Measure"}, {}]).ortx.sparse == "measure"
    assert parse_providers(providers, [{}, {}]).ortx.tuning_settings().sparse == "auto"
    with pytest.raises(ValueError, match=r"'sparse'.*expected one of auto, measure, off, got 'always'"):
        parse_providers(providers, [{"sparse": "always"}, {}])
