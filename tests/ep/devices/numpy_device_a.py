"""Test-only device 'numpya' (see _numpy_backend)."""
from tests.ep.devices import _numpy_backend
from tests.ep.devices._numpy_backend import check  # noqa: F401 (the backend interface)

SECONDS_PER_NODE = 1e-7  # cheaper than the CPU's per-step overhead: the cost model prefers this device
DEVICE = _numpy_backend.device("numpya", __name__)


def estimate_seconds(node) -> float:
    return SECONDS_PER_NODE


def compile(nodes, inputs, outputs, *, num_threads):  # noqa: A001 (the backend interface)
    return _numpy_backend.NumpyProgram(DEVICE.name, nodes, inputs, outputs)
