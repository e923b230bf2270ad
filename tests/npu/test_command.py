"""`ortx npu dump`: a model's NPU segments, a saved stream, and a corrupt stream (exit 2 with the reason)."""
from __future__ import annotations

import io

import onnx

from ortx.cli import build_parser
from tests.ep.test_qdq import _qdq_conv_model


def _run(argv):
    args = build_parser().parse_args(argv)
    out = io.StringIO()
    return args.handler(args, out=out), out.getvalue()


def test_dump_model_then_stream(tmp_path, capsys):
    path = tmp_path / "conv.onnx"
    onnx.save(_qdq_conv_model(), str(path))
    status, text = _run(["npu", "dump", str(path), "-o", str(tmp_path / "conv")])
    assert status == 0
    assert "; conv_qconv (QConv)" in text and "MAC_TILE" in text and "DMA_IM2COL" in text and "REQUANT" in text
    status, text = _run(["npu", "dump", str(tmp_path / "conv.0.npu")])
    assert status == 0 and text.startswith("ortx NPU stream v1: 32x32 MACs")
    data = bytearray((tmp_path / "conv.0.npu").read_bytes())
    data[-1] ^= 0xFF
    (tmp_path / "bad.npu").write_bytes(bytes(data))
    status, _ = _run(["npu", "dump", str(tmp_path / "bad.npu")])
    assert status == 2 and "CRC-32" in capsys.readouterr().err
