import os
import tempfile

from tests import _summary


def pytest_configure(config):
    # The JIT cache of a test run lives and dies with the run, never in the user's ~/.cache/ortx.
    if "ORTX_CACHE_DIR" not in os.environ:
        os.environ["ORTX_CACHE_DIR"] = tempfile.mkdtemp(prefix="ortx-test-cache-")


def pytest_terminal_summary(terminalreporter):
    if _summary.CONFORMANCE:
        terminalreporter.write_line(
            "ONNX backend node tests through OrtxEP: "
            + ", ".join(f"{key}: {count}" for key, count in sorted(_summary.CONFORMANCE.items())))
