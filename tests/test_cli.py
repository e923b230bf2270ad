import json
import os

import pytest

from ortx.cli import main
from ortx.passes import DEFAULT_PASSES
from ortx.passes._report import pass_name
from ortx.tune.records import TuningDatabase
from tests import _models


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "resnet.onnx"
    path.write_bytes(_models.resnet18_style(size=32).SerializeToString())
    return path


def test_optimize_check_report(model_file, tmp_path, capsys):
    original = model_file.read_bytes()
    output, report = tmp_path / "out.onnx", tmp_path / "report.json"
    status = main(["optimize", str(model_file), "-o", str(output), "--check", "--report", str(report)])
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "fuse_conv_batchnorm" in printed and "batchnorms_fused=20" in printed and "69 -> 49" in printed
    assert "check logits" in printed and ": ok" in printed
    assert model_file.read_bytes() == original
    data = json.loads(report.read_text())
    assert [p["name"] for p in data["passes"]] == ["validate_model"] + [pass_name(p) for p in DEFAULT_PASSES]
    assert "bytes saved" in printed and all(p["seconds"] > 0 for p in data["passes"])
    assert output.exists()


def test_refuses_to_overwrite_input(model_file, capsys):
    original = model_file.read_bytes()
    assert main(["optimize", str(model_file), "-o", str(model_file)]) == 2
    assert "never overwrites its input" in capsys.readouterr().err
    assert model_file.read_bytes() == original


def test_missing_and_invalid_inputs(tmp_path, capsys):
    assert main(["optimize", str(tmp_path / "nope.onnx"), "-o", str(tmp_path / "o.onnx")]) == 2
    assert "nope.onnx' does not exist" in capsys.readouterr().err
    broken = _models.tiny_conv_relu()
    broken.graph.node[1].input[0] = "dangling"
    path = tmp_path / "broken.onnx"
    path.write_bytes(broken.SerializeToString())
    assert main(["optimize", str(path), "-o", str(tmp_path / "o.onnx")]) == 2
    error = capsys.readouterr().err
    assert "broken.onnx" in error and "relu_4" in error and "dangling" in error
    assert not (tmp_path / "o.onnx").exists()


def test_dynamic_input_needs_shape(tmp_path, capsys):
    proto = _models.tiny_conv_relu()
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    path = tmp_path / "dynamic.onnx"
    path.write_bytes(proto.SerializeToString())
    assert main(["optimize", str(path), "-o", str(tmp_path / "o.onnx"), "--check"]) == 2
    assert "--input-shape X:Nx3x8x8" in capsys.readouterr().err
    assert main(["optimize", str(path), "-o", str(tmp_path / "o.onnx"), "--check", "--input-shape", "X:2x3x8x8"]) == 0
    assert ": ok" in capsys.readouterr().out


def test_help_texts(capsys):
    for argv in (["--help"], ["optimize", "--help"], ["demo", "--help"]):
        with pytest.raises(SystemExit) as raised:
            main(argv)
        assert raised.value.code == 0
    printed = capsys.readouterr().out
    assert "ortx optimize IN.onnx -o OUT.onnx" in printed
    assert "--input-shape" in printed and "--runs" in printed and "--threads" in printed


def test_console_script_is_installed():
    import shutil
    import subprocess

    executable = shutil.which("ortx")
    assert executable, "the ortx console script is not on PATH (pip install -e .)"
    result = subprocess.run([executable, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "optimize" in result.stdout


def test_levels_and_input_shape(tmp_path, capsys):
    """-O1 leaves BatchNormalization, -O2 folds it, -O3 emits ai.ortx FusedConv; --input-shape fixes the batch."""
    import onnx

    proto = _models.resnet18_style(size=32)
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    path = tmp_path / "dynamic.onnx"
    path.write_bytes(proto.SerializeToString())
    outputs = {}
    for level in ("-O1", "-O2", "-O3"):
        outputs[level] = tmp_path / f"out{level}.onnx"
        assert main(["optimize", str(path), "-o", str(outputs[level]), level, "--input-shape", "input:2x3x32x32"]) == 0
    printed = capsys.readouterr().out
    assert "dims_fixed=1" in printed
    ops = {level: [node.op_type for node in onnx.load(str(out)).graph.node] for level, out in outputs.items()}
    assert "BatchNormalization" in ops["-O1"] and "BatchNormalization" not in ops["-O2"]
    assert "FusedConv" in ops["-O3"] and "FusedConv" not in ops["-O2"]
    fixed = onnx.load(str(outputs["-O2"])).graph.input[0].type.tensor_type.shape.dim
    assert [dim.dim_value for dim in fixed] == [2, 3, 32, 32]
    assert main(["optimize", str(path), "-o", str(tmp_path / "x.onnx"), "--input-shape", "nope:1x3"]) == 2
    assert "'nope', which is not a graph input" in capsys.readouterr().err


def test_memory_command(model_file, capsys):
    assert main(["memory", str(model_file)]) == 0
    printed = capsys.readouterr().out
    assert "ortx plan" in printed and "x lower bound" in printed and "segment0.arena" in printed
    assert main(["memory", str(model_file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["planned_bytes"] >= data["lower_bound_bytes"] > 0


def test_memory_command_names_dynamic_inputs_and_unknown_shapes(tmp_path, capsys):
    proto = _models.tiny_conv_relu()
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    path = tmp_path / "dynamic.onnx"
    path.write_bytes(proto.SerializeToString())
    assert main(["memory", str(path)]) == 2
    assert "--input-shape X:Nx3x8x8" in capsys.readouterr().err
    assert main(["memory", str(path), "--input-shape", "Y:1x3x8x8"]) == 2
    error = capsys.readouterr().err
    assert "'Y', which is not an input" in error and "its inputs: X" in error
    assert main(["memory", str(path), "--input-shape", "X:2x3x8x8"]) == 0
    assert main(["memory", str(tmp_path / "missing.onnx")]) == 2
    assert "missing.onnx" in capsys.readouterr().err


def test_tune_command_records_and_exports(tmp_path, capsys):
    path = tmp_path / "small.onnx"
    path.write_bytes(_models.mixed_precision_net().SerializeToString())  # convs, a Gemm and a MatMul, in seconds
    cache, exported = tmp_path / "cache", tmp_path / "records.json"
    # a budget: without one, every GEMM task of the model runs its whole search (minutes of compiles)
    assert main(["tune", str(path), "--budget", "15s", "--cache-dir", str(cache), "--export", str(exported)]) == 0
    printed = capsys.readouterr().out
    with TuningDatabase(cache / "tuning.sqlite") as database:
        recorded = len(database.records())  # engine, per-step thread and validation rows, all of this model
    assert "(measured) ->" in printed and f"wrote {recorded} records" in printed and recorded > 2
    assert main(["tune", "--import", str(exported), "--cache-dir", str(tmp_path / "other")]) == 0
    assert f"imported {recorded} new records" in capsys.readouterr().out
    proto = _models.tiny_conv_relu()
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    dynamic = tmp_path / "dynamic.onnx"
    dynamic.write_bytes(proto.SerializeToString())
    assert main(["tune", str(dynamic), "--cache-dir", str(cache)]) == 2
    assert "--input-shape X:Nx3x8x8" in capsys.readouterr().err
    assert main(["tune", "--cache-dir", str(cache)]) == 2
