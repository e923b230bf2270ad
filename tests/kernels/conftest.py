"""Fixtures of the kernel tests. `isa`: every ISA this CPU can run, forced in turn (the CPU's own restored after).
Older test files still define their own copy of it; a file's own fixture takes precedence."""
import pytest

from ortx import _kernels

ISA_ORDER = ("portable", "avx2", "avx512")
RUNNABLE_ISAS = ISA_ORDER[: ISA_ORDER.index(_kernels.cpu_isa()) + 1]


@pytest.fixture(params=RUNNABLE_ISAS)
def isa(request):
    assert _kernels.force_isa(request.param) == request.param
    yield request.param
    _kernels.force_isa(_kernels.cpu_isa())
