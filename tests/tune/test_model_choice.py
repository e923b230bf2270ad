"""ortx.tune.model_choice: the whole model against ORT running all of it, recorded by `ortx tune` and applied by
sessions (every claimed segment given back when the latest record says ORT is faster)."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

import ortx
from ortx.tune import model_choice
from ortx.tune.fingerprint import current
from ortx.tune.records import TuningDatabase, TuningRecord
from tests import _models
from tests.tolerances import assert_close


def session(model, cache_dir, tuning="cached", threads=2):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return ortx.InferenceSession(model.SerializeToString(), options, providers=["OrtxEP", "CPUExecutionProvider"],
                                 provider_options=[{"tuning": tuning, "jit_cache_dir": str(cache_dir)}, {}])


def signature_of(sess) -> str:
    (compiled,) = sess._compiled.values()
    return compiled.model_signature


def record_model(cache_dir, signature, ortx_ms, ort_ms):
    with TuningDatabase(cache_dir / "tuning.sqlite") as database:
        model_choice.record(database, current(), signature, (ortx_ms, ort_ms), "test")


def check_numerics(sess, model, seed=0):
    feeds = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, want in zip(sess.run(None, feeds), expected.run(None, feeds)):
        assert_close(got, want)


def test_the_latest_whole_model_record_decides_for_every_segment(tmp_path):
    """A model of two claimed segments around an LSTM that ORT runs: no record keeps both on OrtxEP; a record that
    ORT ran the whole model faster gives both back (the assignment shows both times); a later record the other
    way claims them again."""
    model = _models.lstm_classifier()
    first = session(model, tmp_path)
    assert len(first.assignment.engine_choices) == 2 and first.assignment.model_choice is None
    signature = signature_of(first)
    record_model(tmp_path, signature, ortx_ms=2.0, ort_ms=1.0)
    given_back = session(model, tmp_path)
    assignment = given_back.assignment
    assert assignment.claimed_mac_share == 0.0
    assert {row.provider for row in assignment if row.provider != "(removed)"} == {"CPUExecutionProvider"}
    whole = assignment.model_choice
    assert (whole.engine, whole.ortx_ms, whole.ort_ms, whole.source) == ("ort", 2.0, 1.0, "records")
    assert "whole model: OrtxEP 2.000 ms vs ORT 1.000 ms (records): ORT runs it all" in str(assignment)
    assert all(choice.engine == "ort" and "whole model" in choice.source for choice in assignment.engine_choices)
    check_numerics(given_back, model, seed=1)
    record_model(tmp_path, signature, ortx_ms=1.0, ort_ms=1.5)
    claimed = session(model, tmp_path)
    assert claimed.assignment.claimed_mac_share > 0 and claimed.assignment.model_choice.engine == "ortx"
    check_numerics(claimed, model, seed=2)


def test_a_tie_and_tuning_off_keep_ortx(tmp_path):
    model = _models.tiny_conv_relu()
    record_model(tmp_path, signature_of(session(model, tmp_path)), ortx_ms=1.0, ort_ms=0.99)
    assert session(model, tmp_path).assignment.model_choice.engine == "ortx"  # within MARGIN
    off = session(model, tmp_path, tuning="off").assignment
    assert off.model_choice is None and off.claimed_mac_share > 0


def test_the_signature_follows_the_graph_threads_and_precision(tmp_path):
    model = _models.tiny_conv_relu()
    base = signature_of(session(model, tmp_path))
    assert signature_of(session(model, tmp_path)) == base
    assert signature_of(session(model, tmp_path, threads=1)) != base
    assert signature_of(session(_models.tiny_conv_relu(seed=1), tmp_path)) == base  # weights do not count
    assert signature_of(session(_models.resnet18_style(size=32), tmp_path)) != base
    import onnx_ir as ir

    proto = _models.tiny_conv_relu()
    graph = ir.serde.deserialize_model(proto)
    assert model_choice.model_signature(graph, 2, "bf16") != model_choice.model_signature(graph, 2, "fp32")


def test_records_of_other_templates_and_engines_are_ignored(tmp_path):
    model = _models.tiny_conv_relu()
    signature = signature_of(session(model, tmp_path))
    fingerprint = current()
    with TuningDatabase(tmp_path / "tuning.sqlite") as database:
        database.add_fingerprint(fingerprint)
        database.add(TuningRecord(signature, fingerprint.key, "engine-choice-model-1|kernels=another-build",
                                  {"engine": "ort"}, "ok", 0.5, source="test"))
        database.add(TuningRecord(signature, fingerprint.key, model_choice.MODEL_TEMPLATE, {"engine": "ort"}, "ok",
                                  0.5, source="test"))  # one engine alone decides nothing
        assert model_choice.recorded(database, fingerprint, signature) is None
    assert session(model, tmp_path).assignment.model_choice is None


def test_measure_plans_times_both_engines():
    """Both plans run on the same feeds in interleaved blocks; positive medians."""
    from ortx import pipeline
    from ortx.optimize import random_feeds
    from ortx.tune.tune_model import _ort_settings

    proto = _models.tiny_conv_relu()
    shapes = {proto.graph.input[0].name: tuple(d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim)}
    prepared = pipeline.prepare_loaded(proto)
    ort = _ort_settings(2)
    claimed = pipeline.compile_for_shapes(prepared, shapes, ort, num_threads=2)
    whole = pipeline.compile_for_shapes(prepared, shapes, ort, num_threads=2, claim=False)
    times = model_choice.measure_plans(claimed.plan, whole.plan, random_feeds(proto, shapes), runs=8)
    assert all(t > 0 for t in times)


def test_the_confirming_process_measures_the_whole_model(tmp_path):
    """python -m ortx.tune.engine_confirm --whole-model on a small model: both medians, positive."""
    from ortx.tune.engine_confirm import measure_model_in_fresh_process

    proto = _models.lstm_classifier()
    shapes = {value.name: tuple(d.dim_value for d in value.type.tensor_type.shape.dim) for value in proto.graph.input}
    times = measure_model_in_fresh_process(proto, shapes, threads=2, runs=4, precision="fp32",
                                           database_path=str(tmp_path / "tuning.sqlite"))
    assert times is not None and all(t > 0 for t in times)


@pytest.mark.parametrize("ort_wins", [False, True])
def test_ortx_tune_ends_with_the_whole_model_check(tmp_path, monkeypatch, ort_wins):
    """Step 5 of `ortx tune`: measured, confirmed in fresh processes when ORT wins (faked here), recorded, and the
    next cached session follows the record."""
    from ortx.tune import engine_confirm, tune_model

    measured = (1.0, 0.5) if ort_wins else (0.5, 1.0)
    monkeypatch.setattr(model_choice, "measure_plans", lambda *args, **kwargs: measured)
    asked = []
    monkeypatch.setattr(engine_confirm, "measure_model_in_fresh_process",
                        lambda *args, **kwargs: asked.append(kwargs) or (0.9, 0.6))
    proto = _models.lstm_classifier()
    shapes = {value.name: tuple(d.dim_value for d in value.type.tensor_type.shape.dim) for value in proto.graph.input}
    from ortx.config import Options

    result = tune_model.tune_model(proto, shapes, num_threads=2, mode="quick",
                                   database_path=str(tmp_path / "tuning.sqlite"), jit=Options(cache_dir=tmp_path),
                                   trials=0)
    whole = result.model_choice
    if ort_wins:
        assert len(asked) == model_choice.CONFIRM_PROCESSES
        assert (whole.engine, whole.ortx_ms, whole.ort_ms) == ("ort", 0.9, 0.5)
        assert whole.source == f"measured in {1 + model_choice.CONFIRM_PROCESSES} processes"
    else:
        assert asked == [] and (whole.engine, whole.source) == ("ortx", "measured")
    assert whole.signature in result.signatures
    cached = session(proto, tmp_path).assignment
    assert cached.model_choice.engine == whole.engine and cached.model_choice.source == "records"
    assert (cached.claimed_mac_share == 0.0) == ort_wins
