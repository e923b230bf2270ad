import os
import tempfile

import pytest

from tests import _summary


def pytest_addoption(parser):
    parser.addoption("--run-browser", action="store_true",
                     help="also run the tests marked browser (Voila + headless Chromium; see tests/browser)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-browser"):
        return
    browser = [item for item in items if item.get_closest_marker("browser")]
    if browser:  # deselected, not skipped: they need a browser CI does not have
        config.hook.pytest_deselected(items=browser)
        items[:] = [item for item in items if not item.get_closest_marker("browser")]


def pytest_configure(config):
    # The JIT cache of a test run lives and dies with the run, never in the user's ~/.cache/ortx.
    if "ORTX_CACHE_DIR" not in os.environ:
        os.environ["ORTX_CACHE_DIR"] = tempfile.mkdtemp(prefix="ortx-test-cache-")


def pytest_terminal_summary(terminalreporter):
    if _summary.CONFORMANCE:
        terminalreporter.write_line(
            "ONNX backend tests (node, model folders, light models) through OrtxEP: "
            + ", ".join(f"{key}: {count}" for key, count in sorted(_summary.CONFORMANCE.items())))


@pytest.fixture(autouse=True)
def bf16_kernels_on_every_cpu(monkeypatch):
    """A bf16 session runs fp32 kernels on a CPU where bf16 would be slower (ortx.ep.precision.effective_precision);
    the suite tests the bf16 kernels on every CPU, so here bf16 pays. tests/ep/test_bf16_compute.py tests the
    decision itself."""
    from ortx.ep import precision

    monkeypatch.setattr(precision, "bf16_compute_pays", lambda: (True, ""))
