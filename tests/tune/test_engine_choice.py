"""Per-segment engine choice (ortx.tune.engine_choice through ortx.InferenceSession's `tuning` option): a claimed
segment that ORT runs faster here goes back to ORT, with both times in sess.assignment."""
import numpy as np
import onnxruntime
import pytest

import ortx
from ortx.tune.engine_choice import ENGINE_TEMPLATE
from ortx.tune.fingerprint import current
from ortx.tune.records import TuningDatabase, TuningRecord
from tests import _models
from tests.tolerances import assert_close


def session(model, cache_dir, tuning):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    return ortx.InferenceSession(model.SerializeToString(), options, providers=["OrtxEP", "CPUExecutionProvider"],
                                 provider_options=[{"tuning": tuning, "jit_cache_dir": str(cache_dir)}, {}])


def check_numerics(sess, model, seed=0):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {model.graph.input[0].name: np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)}
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert_close(sess.run(None, feeds)[0], expected.run(None, feeds)[0])


def record_times(cache_dir, signature, ortx_ms, ort_ms):
    fingerprint = current()
    with TuningDatabase(cache_dir / "tuning.sqlite") as database:
        database.add_fingerprint(fingerprint)
        for engine, median in (("ortx", ortx_ms), ("ort", ort_ms)):
            database.add(TuningRecord(signature, fingerprint.key, ENGINE_TEMPLATE, {"engine": engine}, "ok", median,
                                      source="test"))


def test_quick_measures_records_and_cached_reuses_without_measuring(tmp_path):
    model = _models.resnet18_style(size=32)
    measured = session(model, tmp_path, "quick")
    (choice,) = measured.assignment.engine_choices
    assert choice.source.startswith("measured") and choice.ortx_ms > 0 and choice.ort_ms > 0
    assert choice.engine == ("ort" if choice.ort_ms < 0.98 * choice.ortx_ms else "ortx")
    check_numerics(measured, model)
    with TuningDatabase(tmp_path / "tuning.sqlite") as database:
        rows = database.records(choice.signature, template=ENGINE_TEMPLATE)  # (a blocked segment: layouts too)
    processes = 1 if choice.source == "measured" else int(choice.source.split()[2])  # "measured in N processes"
    assert sorted(r.schedule["engine"] for r in rows) == ["ort"] * processes + ["ortx"] * processes
    assert min(r.median_ms for r in rows if r.schedule["engine"] == "ortx") == choice.ortx_ms
    assert min(r.median_ms for r in rows if r.schedule["engine"] == "ort") == choice.ort_ms
    cached = session(model, tmp_path, "cached")
    (again,) = cached.assignment.engine_choices
    assert again.source == "records" and again.engine == choice.engine
    assert (again.ortx_ms, again.ort_ms) == (choice.ortx_ms, choice.ort_ms)
    with TuningDatabase(tmp_path / "tuning.sqlite") as database:
        assert len(database.records(template=ENGINE_TEMPLATE)) == 2 * processes  # nothing measured again


def test_a_segment_recorded_slower_than_ort_goes_back_with_both_times_in_the_assignment(tmp_path):
    model = _models.mobilenetv2_style(size=32)
    (choice,) = session(model, tmp_path, "cached").assignment.engine_choices
    assert choice.source == "no records" and choice.engine == "ortx"
    record_times(tmp_path, choice.signature, ortx_ms=2.0, ort_ms=1.0)
    sess_given_back = session(model, tmp_path, "cached")
    assignment = sess_given_back.assignment
    assert assignment.claimed_mac_share == 0.0
    assert {row.provider for row in assignment if row.provider != "(removed)"} == {"CPUExecutionProvider"}
    reasons = {row.reason for row in assignment if row.provider == "CPUExecutionProvider"}
    given_back = {reason for reason in reasons if not reason.startswith("fused into ")}  # BN folded into a Conv
    assert given_back == {"given back to ORT, faster here: OrtxEP 2.000 ms vs ORT 1.000 ms (records)"}
    assert "-> ORT" in str(assignment).splitlines()[-1]
    check_numerics(sess_given_back, model, seed=1)


def test_a_model_given_back_whole_runs_its_ort_session_directly(tmp_path, monkeypatch):
    model = _models.mobilenetv2_style(size=32)
    (choice,) = session(model, tmp_path, "cached").assignment.engine_choices
    record_times(tmp_path, choice.signature, ortx_ms=2.0, ort_ms=1.0)
    sess_given_back = session(model, tmp_path, "cached")
    (plan,) = [compiled.plan for compiled in sess_given_back._compiled.values()]
    assert plan.whole_ort is plan.steps[0].segment
    monkeypatch.setattr(type(plan.whole_ort), "run", lambda *args: pytest.fail("IOBinding path taken"))
    check_numerics(sess_given_back, model, seed=2)
    # run_with_ort_values hands `outputs` to write into: the general path, still correct
    monkeypatch.undo()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feed = np.random.default_rng(3).uniform(-1, 1, shape).astype(np.float32)
    name = model.graph.input[0].name
    (value,) = sess_given_back.run_with_ort_values(None, {name: onnxruntime.OrtValue.ortvalue_from_numpy(feed)})
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert_close(value.numpy(), expected.run(None, {name: feed})[0])


def test_ties_and_off_stay_on_ortx(tmp_path):
    model = _models.mobilenetv2_style(size=32)
    (choice,) = session(model, tmp_path, "cached").assignment.engine_choices
    record_times(tmp_path, choice.signature, ortx_ms=1.0, ort_ms=0.99)  # within MARGIN: stays
    (tie,) = session(model, tmp_path, "cached").assignment.engine_choices
    assert tie.engine == "ortx" and tie.source == "records"
    off = session(model, tmp_path, "off")
    assert off.assignment.engine_choices == () and off.assignment.claimed_mac_share == 1.0


def test_only_the_slower_segment_of_several_goes_back(tmp_path):
    model = _models.lstm_classifier()  # claimed, LSTM on ORT, claimed
    choices = session(model, tmp_path, "cached").assignment.engine_choices
    assert len(choices) == 2
    record_times(tmp_path, choices[1].signature, ortx_ms=5.0, ort_ms=1.0)
    sess = session(model, tmp_path, "cached")
    engines = [c.engine for c in sess.assignment.engine_choices]
    assert engines == ["ortx", "ort"]  # the decisions, per segment of the first compile
    ortx_rows = {row.name for row in sess.assignment if row.provider == "OrtxEP"}
    assert ortx_rows and ortx_rows.isdisjoint(choices[1].original_nodes)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {"X": np.random.default_rng(2).uniform(-1, 1, shape).astype(np.float32)}
    expected = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert_close(sess.run(None, feeds)[0], expected.run(None, feeds)[0])


def test_unknown_tuning_mode_lists_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match="tuning.*off, cached, quick, full"):
        session(_models.tiny_conv_relu(), tmp_path, "fastest")


def test_a_model_already_holding_ai_ortx_ops_stays_on_ortx(tmp_path):
    """A model saved by `ortx optimize -O3` has FusedConv nodes of its own: ORT cannot run them, so they are never
    measured against ORT nor given back, whatever the records say."""
    import onnx_ir as ir

    from ortx import pipeline
    from ortx.passes.fuse_conv_epilogue import fuse_conv_epilogue

    model = pipeline.prepare(_models.resnet18_style(size=32)).model  # BatchNorm folded, so epilogues fuse
    assert fuse_conv_epilogue(model).counts["convs_fused"] > 0
    proto = ir.serde.serialize_model(model)
    for mode in ("cached", "quick"):
        sess = session(proto, tmp_path, mode)
        (choice,) = sess.assignment.engine_choices
        assert choice.engine == "ortx" and choice.source == "FusedConv runs only on OrtxEP"
        assert sess.assignment.claimed_mac_share == 1.0
    record_times(tmp_path, choice.signature, ortx_ms=9.0, ort_ms=1.0)
    (choice,) = session(proto, tmp_path, "cached").assignment.engine_choices
    assert choice.engine == "ortx"
    check_numerics(sess, _models.resnet18_style(size=32))


def conv_decomposed_hardswish_conv():
    """X -> Conv -> x * Clip(x + 3, 0, 6) / 6 (PaddlePaddle's export) -> Conv -> Y at opset 13: fuse_hardswish makes
    the four nodes HardSigmoid + Mul (no HardSwish below opset 14), then OrtxEP fuses both into the first Conv."""
    from onnx import helper

    builder = _models.GraphBuilder("conv_hardswish_conv", seed=0)
    x = builder.conv("X", 3, 8, 3, bias=True)
    shifted = builder.node("Add", [x, builder.constant(np.array(3.0, np.float32))])
    product = builder.node("Mul", [x, builder.clip6(shifted)])
    hardswish = builder.node("Div", [product, builder.constant(np.array(6.0, np.float32))])
    builder.node("Conv", [hardswish, builder.constant(
        builder.rng.standard_normal((4, 8, 1, 1)).astype(np.float32), "conv_w")], kernel_shape=[1, 1])
    builder.nodes[-1].output[0] = "Y"
    proto = builder.finish([helper.make_tensor_value_info("X", 1, [1, 3, 16, 16])],
                           [helper.make_tensor_value_info("Y", 1, [1, 4, 16, 16])])
    proto.opset_import[0].version = 13
    return proto


def test_a_fused_node_holding_a_graph_pass_fusion_is_measured_on_the_nodes_it_stands_for(tmp_path):
    """The FusedConv's fused_from names the user's Div/Mul/Clip/Add; the graph ORT is measured on holds
    fuse_hardswish's HardSigmoid and Mul instead (fused_from the same four): ORT's segment needs both (PP-OCR cls
    and rec failed with 'hardswish_0.tmp_0 is not a graph input' before)."""
    model = conv_decomposed_hardswish_conv()
    sess = session(model, tmp_path, "quick")
    (choice,) = sess.assignment.engine_choices
    assert choice.source.startswith("measured") and choice.ortx_ms > 0 and choice.ort_ms > 0
    assert sorted(name.split("_")[1] for name in choice.original_nodes if name.startswith("node_")) == [
        "HardSigmoid", "Mul"]
    assert len(choice.original_nodes) == 4  # two Convs, HardSigmoid, Mul
    check_numerics(sess, model)


def test_records_of_another_kernel_build_do_not_decide(tmp_path):
    """A record measured with other prebuilt kernels (an older ortx) says nothing about this build's speed."""
    model = _models.mobilenetv2_style(size=32)
    (choice,) = session(model, tmp_path, "cached").assignment.engine_choices
    fingerprint = current()
    older = ENGINE_TEMPLATE.split("|kernels=")[0] + "|kernels=000000000000"
    assert older != ENGINE_TEMPLATE
    with TuningDatabase(tmp_path / "tuning.sqlite") as database:
        database.add_fingerprint(fingerprint)
        for engine, median in (("ortx", 2.0), ("ort", 1.0)):
            database.add(TuningRecord(choice.signature, fingerprint.key, older, {"engine": engine}, "ok", median,
                                      source="test"))
    (again,) = session(model, tmp_path, "cached").assignment.engine_choices
    assert again.source == "no records" and again.engine == "ortx"


def fake_measurements(monkeypatch, first, confirming):
    """engine_choice's in-process measurement returns `first`; each confirming process the next of `confirming`
    (None: the process failed). Returns the list of confirmations asked for."""
    from ortx.tune import engine_choice, engine_confirm

    asked = []
    monkeypatch.setattr(engine_choice, "_measure", lambda *args: first)

    def confirm(sub_model, shapes, *, threads, runs, precision, only_step):
        asked.append((sub_model, shapes, threads, runs, precision, only_step))
        return confirming[len(asked) - 1]

    monkeypatch.setattr(engine_confirm, "measure_in_fresh_process", confirm)
    return asked


@pytest.mark.parametrize("confirming, engine, source, recorded", [
    ([(1.0, 1.5)], "ortx", "measured in 2 processes", 4),  # a fresh process runs OrtxEP fast: it stays
    ([(2.1, 1.1), (1.9, 0.9)], "ort", "measured in 3 processes", 6),  # every process agrees: it goes back
    ([None], "ort", "measured", 2),  # no confirmation possible: the first measurement decides
])
def test_a_give_back_is_confirmed_in_fresh_processes(tmp_path, monkeypatch, confirming, engine, source, recorded):
    model = _models.mobilenetv2_style(size=32)
    asked = fake_measurements(monkeypatch, (2.0, 1.0), confirming)
    (choice,) = session(model, tmp_path, "quick").assignment.engine_choices
    assert (choice.engine, choice.source) == (engine, source)
    assert len(asked) == len(confirming)
    sub_model, shapes, threads, runs, precision, only_step = asked[0]
    assert {i.name for i in sub_model.graph.input} == set(shapes) and threads == 2 and precision == "fp32"
    assert only_step  # MobileNetV2-style is one claimed segment
    assert shapes["input"] == (1, 3, 32, 32) and runs > 1
    times = [(2.0, 1.0)] + [pair for pair in confirming if pair]
    assert (choice.ortx_ms, choice.ort_ms) == (min(p[0] for p in times), min(p[1] for p in times))
    with TuningDatabase(tmp_path / "tuning.sqlite") as database:
        assert len(database.records(choice.signature, template=ENGINE_TEMPLATE)) == recorded
    monkeypatch.undo()
    (cached,) = session(model, tmp_path, "cached").assignment.engine_choices  # records decide the same way
    assert (cached.engine, cached.ortx_ms, cached.ort_ms) == (engine, choice.ortx_ms, choice.ort_ms)


def test_ortx_faster_at_once_asks_no_confirmation(tmp_path, monkeypatch):
    asked = fake_measurements(monkeypatch, (1.0, 2.0), [])
    (choice,) = session(_models.mobilenetv2_style(size=32), tmp_path, "quick").assignment.engine_choices
    assert (choice.engine, choice.source, asked) == ("ortx", "measured", [])


def test_the_confirming_process_measures_both_engines(tmp_path):
    """The real subprocess (python -m ortx.tune.engine_confirm) on a small model: both medians, positive, for a
    segment alone in its model and for one that shares the cores with other segments."""
    from ortx.tune.engine_confirm import measure_in_fresh_process

    model = _models.tiny_conv_relu()
    shapes = {model.graph.input[0].name: tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)}
    for only_step in (True, False):
        times = measure_in_fresh_process(model, shapes, threads=2, runs=4, precision="fp32", only_step=only_step)
        assert times is not None and all(t > 0 for t in times)


def test_the_confirming_process_measures_one_claimed_segment_only(tmp_path):
    """A model that does not compile to one claimed segment (here an LSTM between two claimed parts) is refused
    with its step count, not measured as something else."""
    from ortx.tune.engine_confirm import measure_segment

    model = _models.lstm_classifier()
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    with pytest.raises(ValueError, match="compiles to 3 steps, not one claimed segment"):
        measure_segment(str(path), {"X": shape}, threads=2, runs=2, precision="fp32", only_step=True)


def test_a_failing_confirming_process_is_reported_not_trusted(tmp_path, caplog):
    from onnx import helper

    from ortx.tune.engine_confirm import measure_in_fresh_process

    broken = helper.make_model(helper.make_graph([helper.make_node("NoSuchOp", ["X"], ["Y"])], "broken",
                                                 [helper.make_tensor_value_info("X", 1, [2])],
                                                 [helper.make_tensor_value_info("Y", 1, [2])]))
    with caplog.at_level("WARNING"):
        assert measure_in_fresh_process(broken, {"X": (2,)}, threads=1, runs=2, precision="fp32") is None
    assert "confirming process failed" in caplog.text
