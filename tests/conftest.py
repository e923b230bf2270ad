from tests import _summary


def pytest_terminal_summary(terminalreporter):
    if _summary.CONFORMANCE:
        terminalreporter.write_line(
            "ONNX backend node tests through OrtxEP: "
            + ", ".join(f"{key}: {count}" for key, count in sorted(_summary.CONFORMANCE.items())))
