"""Provider option bf16_compute (ortx/ep/precision.py, "Where bf16 does not pay"): the multiply-add rate probe, the
decision, and a bf16 session that runs fp32 kernels where bf16 would be slower, saying so."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

import ortx
from ortx import _kernels
from ortx.ep import precision
from ortx.ep.options import parse_providers
from ortx.cli import main
from tests import _models

PROVIDERS = ["OrtxEP", "CPUExecutionProvider"]
MEASURED_PAYS = precision.bf16_compute_pays  # the real decision (tests/conftest.py makes bf16 pay in other tests)


def _session(model, **ortx_options):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    return ortx.InferenceSession(model, options, providers=PROVIDERS,
                                 provider_options=[{"tuning": "off", **ortx_options}, {}])


def _conv_gemm_model():
    builder = _models.GraphBuilder("conv_gemm", seed=5)
    x = builder.node("Relu", [builder.conv("x", 16, 32, 1)])
    x = builder.node("Flatten", [builder.node("GlobalAveragePool", [x])])
    y = builder.gemm(x, 32, 10)
    return builder.finish([_models._float_input("x", [1, 16, 24, 24])], [_models._float_input(y, [1, 10])])


def test_the_option_is_validated():
    assert parse_providers(PROVIDERS, [{}, {}]).ortx.bf16_compute == "auto"
    assert parse_providers(PROVIDERS, [{"bf16_compute": " Always"}, {}]).ortx.bf16_compute == "always"
    with pytest.raises(ValueError, match=r"'bf16_compute'.*expected one of auto, always, got 'sometimes'"):
        parse_providers(PROVIDERS, [{"bf16_compute": "sometimes"}, {}])


def test_dot_rates_measure_this_core():
    fp32, bf16 = precision.dot_rates()
    if _kernels.cpu_isa() != "avx512":
        assert (fp32, bf16) == (0.0, 0.0)
        return
    # one core's zmm multiply-adds: 16 lanes at 0.5-2 a cycle, 1-6 GHz
    assert 8 <= fp32 <= 200, fp32
    assert (bf16 > 0) == _kernels.cpu_has_avx512_bf16()
    if bf16:
        assert 4 <= bf16 <= 400, bf16


def test_the_decision_follows_the_bf16_path_and_the_measured_rates():
    amx = _kernels.cpu_has_amx_bf16()
    try:
        if amx:
            assert MEASURED_PAYS() == (True, "")
            _kernels.allow_amx(False)
        if _kernels.bf16_isa() == "avx512_bf16":
            fp32, bf16 = precision.dot_rates()
            pays, why = MEASURED_PAYS()
            assert pays == (bf16 >= precision.BF16_PAYS_FROM * fp32)
            assert pays or (f"{bf16:.1f} G multiply-adds/s" in why and f"{fp32:.1f} G in fp32" in why), why
        previous = _kernels.selected_isa()
        try:
            _kernels.force_isa("avx2" if previous != "portable" else "portable")
            pays, why = MEASURED_PAYS()
            assert not pays and "bf16 path is 'portable'" in why
        finally:
            _kernels.force_isa(previous)
    finally:
        _kernels.allow_amx(amx)


def test_effective_precision():
    assert precision.effective_precision("fp32") == ("fp32", "")
    assert precision.effective_precision("bf16", "always") == ("bf16", "")
    assert precision.effective_precision("bf16") == ("bf16", "")  # conftest: bf16 pays


def test_a_bf16_session_runs_fp32_kernels_where_bf16_does_not_pay(monkeypatch):
    model = _conv_gemm_model()
    x = np.random.default_rng(7).standard_normal((1, 16, 24, 24)).astype(np.float32)
    fp32 = _session(model).run(None, {"x": x})[0]
    bf16 = _session(model, precision="bf16")
    assert bf16.assignment.precision_counts().get("bf16", 0) == 2
    monkeypatch.setattr(precision, "bf16_compute_pays", lambda: (False, "the test's reason"))
    session = _session(model, precision="bf16")
    assert "bf16" not in session.assignment.precision_counts(), str(session.assignment)
    text = str(session.assignment)
    assert "precision 'bf16' runs fp32 kernels here: the test's reason" in text
    assert "bf16_compute='always'" in text
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], fp32)
    forced = _session(model, precision="bf16", bf16_compute="always")
    assert forced.assignment.precision_counts().get("bf16", 0) == 2
    assert "runs fp32 kernels here" not in str(forced.assignment)
    np.testing.assert_array_equal(forced.run(None, {"x": x})[0], bf16.run(None, {"x": x})[0])


def test_tune_tunes_the_fp32_kernels_a_bf16_session_would_run(tmp_path, monkeypatch, capsys):
    path = tmp_path / "tiny.onnx"
    path.write_bytes(_models.tiny_conv_relu().SerializeToString())
    monkeypatch.setattr(precision, "bf16_compute_pays", lambda: (False, "the test's reason"))
    cache = str(tmp_path / "cache")
    assert main(["tune", str(path), "--cache-dir", cache, "--budget", "5s", "--precision", "bf16"]) == 0
    err = capsys.readouterr().err
    assert "precision 'bf16' runs fp32 kernels here: the test's reason" in err
    assert "conv2d_f32|" in err and "bf16|" not in err
