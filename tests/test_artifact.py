"""`ortx compile` artifacts: what they hold, that sessions load them with ORT's numerics, and that a damaged one is
an error naming the member at fault."""
import json
import zipfile

import numpy as np
import onnx
import onnxruntime
import pytest

import ortx
from ortx.artifact import ArtifactError, read_artifact
from ortx.cli import main
from ortx.compile_artifact import compile_artifact
from ortx.tune.fingerprint import HardwareFingerprint
from ortx.tune.records import TuningDatabase, TuningRecord
from tests import _models
from tests.tolerances import assert_close

PROVIDERS = ["OrtxEP", "CPUExecutionProvider"]


@pytest.fixture
def lstm_model(tmp_path):
    """Claimed nodes and an LSTM that ORT runs: the partition has both kinds."""
    path = tmp_path / "lstm.onnx"
    onnx.save(_models.lstm_classifier(), path)
    return path


def _feeds(path, seed=1):
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    return session, {arg.name: rng.standard_normal(arg.shape).astype(np.float32) for arg in session.get_inputs()}


def test_the_artifact_holds_the_optimized_graph_its_placement_and_a_manifest(lstm_model, tmp_path):
    output = tmp_path / "lstm.ortx"
    report = compile_artifact(lstm_model, output)
    artifact = read_artifact(output)
    model = onnx.load_from_string(artifact.model)
    onnx.checker.check_model(model)
    assert model.ir_version <= 11  # what onnxruntime reads (ortx.model_io clamps it)
    assert set(artifact.placement) == {node.name for node in model.graph.node}
    assert artifact.placement[next(n.name for n in model.graph.node if n.op_type == "LSTM")] == "ort"
    assert "cpu" in artifact.placement.values()
    assert report.placement_counts == {device: list(artifact.placement.values()).count(device)
                                       for device in set(artifact.placement.values())}
    assert artifact.manifest["compiled_on"]["kernel_isa"]
    assert artifact.manifest["input_shapes"]
    assert artifact.records is None


def test_a_session_runs_the_artifact_with_ort_numerics_with_and_without_ortxep(lstm_model, tmp_path):
    output = tmp_path / "lstm.ortx"
    compile_artifact(lstm_model, output)
    reference, feeds = _feeds(lstm_model)
    expected = reference.run(None, feeds)
    for providers in (PROVIDERS, ["CPUExecutionProvider"]):
        session = ortx.InferenceSession(str(output), providers=providers)
        for got, want in zip(session.run(None, feeds), expected):
            assert_close(got, want, what=f"artifact output with {providers[0]}")
    rows = {row.op_type: row.provider for row in ortx.InferenceSession(str(output), providers=PROVIDERS).assignment}
    assert rows["LSTM"] == "CPUExecutionProvider" and "OrtxEP" in rows.values()


def _records_file(tmp_path) -> str:
    """A records file measured on 'another machine' (a made-up fingerprint)."""
    elsewhere = HardwareFingerprint("Other CPU", ("neon",), "neon", 8, ("L2:2048K",), "cc 1")
    path = tmp_path / "records.json"
    with TuningDatabase(tmp_path / "elsewhere.sqlite") as database:
        database.add_fingerprint(elsewhere)
        database.add(TuningRecord("conv2d_f32|demo", elsewhere.key, "t0", {"threads": 1}, "ok", 0.5))
        database.export(path)
    return str(path)


def test_embedded_records_are_merged_into_the_loading_machines_database(lstm_model, tmp_path):
    output = tmp_path / "lstm.ortx"
    report = compile_artifact(lstm_model, output, records_path=_records_file(tmp_path))
    assert report.records == 1
    cache = tmp_path / "cache"
    ortx.InferenceSession(str(output), providers=PROVIDERS, provider_options=[{"jit_cache_dir": str(cache)}, {}])
    with TuningDatabase(cache / "tuning.sqlite") as database:
        records = database.records(signature="conv2d_f32|demo")
    assert len(records) == 1 and records[0].fingerprint != "" and records[0].median_ms == 0.5
    # tuning "off" leaves the database alone
    other = tmp_path / "cache-off"
    ortx.InferenceSession(str(output), providers=PROVIDERS,
                          provider_options=[{"jit_cache_dir": str(other), "tuning": "off"}, {}])
    assert not (other / "tuning.sqlite").exists()


def _rewrite_member(path, name, data):
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info.filename) for info in archive.infolist()}
    members[name] = data
    with zipfile.ZipFile(path, "w") as archive:
        for member, content in members.items():
            archive.writestr(member, content)


def test_a_damaged_artifact_is_an_error_naming_the_member(lstm_model, tmp_path):
    output = tmp_path / "lstm.ortx"
    compile_artifact(lstm_model, output)
    good = output.read_bytes()

    _rewrite_member(output, "partition.json", b'{"placement": {}}')
    with pytest.raises(ArtifactError, match="partition.json does not match its sha256"):
        ortx.InferenceSession(str(output), providers=PROVIDERS)

    output.write_bytes(good)
    manifest = json.loads(zipfile.ZipFile(output).read("manifest.json"))
    _rewrite_member(output, "manifest.json", json.dumps(dict(manifest, ortx_artifact=99)).encode())
    with pytest.raises(ArtifactError, match="format version 99"):
        read_artifact(output)

    output.write_bytes(good[:len(good) // 2])  # truncated: the zip directory is gone
    with pytest.raises(ArtifactError, match="not a readable zip archive"):
        read_artifact(output)

    output.write_bytes(good)
    _rewrite_member(output, "model.onnx", b"not a model")
    with pytest.raises(ArtifactError, match="model.onnx does not match"):
        read_artifact(output)


def test_the_cli_writes_the_artifact_and_never_overwrites_its_input(lstm_model, tmp_path, capsys):
    before = lstm_model.read_bytes()
    assert main(["compile", str(lstm_model), "-o", str(lstm_model)]) == 2
    assert "never overwrites its input" in capsys.readouterr().err
    assert lstm_model.read_bytes() == before
    output = tmp_path / "out.ortx"
    assert main(["compile", str(lstm_model), "-o", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "placement" in printed and "cpu:" in printed and "ort:" in printed
    assert main(["compile", str(tmp_path / "missing.onnx"), "-o", str(output)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["compile", str(lstm_model), "-o", str(output), "--records", str(lstm_model)]) == 2
    assert "not an ortx tuning record file" in capsys.readouterr().err


@pytest.mark.parametrize("isa", ["avx2", "portable"])
def test_an_artifact_compiled_here_runs_on_a_machine_with_another_isa(lstm_model, tmp_path, isa):
    """'Another machine': the kernels capped at an older ISA when the artifact is loaded; the session lowers for it."""
    from ortx import _kernels

    output = tmp_path / "lstm.ortx"
    compile_artifact(lstm_model, output)
    reference, feeds = _feeds(lstm_model, seed=3)
    try:
        assert _kernels.force_isa(isa) == isa
        session = ortx.InferenceSession(str(output), providers=PROVIDERS)
        got = session.run(None, feeds)
    finally:
        _kernels.force_isa(_kernels.cpu_isa())
    for value, want in zip(got, reference.run(None, feeds)):
        assert_close(value, want, what=f"artifact output with kernels capped at {isa}")
    assert read_artifact(output).manifest["compiled_on"]["kernel_isa"] == _kernels.cpu_isa()


def test_the_stored_placement_is_followed_where_the_device_exists_and_reassigned_where_not(tmp_path):
    from tests.ep.test_qdq import _qdq_conv_model

    model = _qdq_conv_model(activation="Relu")
    output = tmp_path / "int8.ortx"
    compile_artifact(model, output, provider_options={"devices": "npu,cpu",
                                                      "placement": {"conv": "npu", "quantize_x": "npu"}})
    stored = read_artifact(output).placement
    assert "npu" in stored.values()
    value = model.graph.input[0]
    shape = [dim.dim_value for dim in value.type.tensor_type.shape.dim]
    feeds = {value.name: np.random.default_rng(3).uniform(-1, 1, shape).astype(np.float32)}
    outputs = {}
    for devices in ("npu,cpu", "cpu"):  # this machine has the NPU / a machine without it
        session = ortx.InferenceSession(str(output), providers=PROVIDERS,
                                        provider_options=[{"devices": devices, "tuning": "off"}, {}])
        outputs[devices] = session.run(None, feeds)
        rows = {row.name: row for row in session.assignment}
        for name, device in stored.items():
            if device == "npu":
                assert rows[name].device == ("npu" if devices == "npu,cpu" else "cpu")
        followed = [row for row in rows.values() if "as the compiled artifact placed it" in row.reason]
        assert bool(followed) == (devices == "npu,cpu")
    for with_npu, without in zip(outputs["npu,cpu"], outputs["cpu"]):
        assert np.array_equal(with_npu, without)  # the NPU simulator is bit-exact with the CPU int8 kernels
