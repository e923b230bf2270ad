"""`ortx devices` and `ortx optimize --partition-svg`."""
import json

import pytest

from ortx.cli import main
from tests.ep.devices.test_concurrency import _two_branch_model


def test_devices_lists_capabilities(capsys):
    assert main(["devices"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("cpu (cpu): ")
    assert "bandwidth" in text and "peak float32" in text and "compiler " in text
    assert "    Conv " in text and "float32" in text


def test_devices_json(capsys):
    assert main(["devices", "--json", "--devices", "cpu"]) == 0
    [record] = json.loads(capsys.readouterr().out)
    assert record["name"] == "cpu" and record["memory_bytes"] > 0 and record["peak_ops_per_second"]["float32"] > 0
    assert {"domain": "", "op_type": "Conv", "dtypes": ["float32"]}.items() <= record["ops"][0].items()


def test_devices_unknown_name_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["devices", "--devices", "tpu"])
    assert exit_info.value.code == 2
    assert "unknown device 'tpu'" in capsys.readouterr().err


def test_optimize_writes_the_partition_svg(tmp_path, capsys):
    source = tmp_path / "two.onnx"
    source.write_bytes(_two_branch_model().SerializeToString())
    svg = tmp_path / "partition.svg"
    assert main(["optimize", str(source), "-o", str(tmp_path / "out.onnx"), "--partition-svg", str(svg)]) == 0
    text = svg.read_text()
    assert text.startswith("<svg") and "Conv" in text and "Tanh" in text
    assert "nodes per device: cpu: 6" in capsys.readouterr().out
