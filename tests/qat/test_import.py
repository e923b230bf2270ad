"""ortx.qat imports without torch and fails only when used, naming the extra to install."""
import sys

import pytest

import ortx.qat


def test_use_without_torch_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError, as when not installed
    for name in ("prepare", "calibrate", "fine_tune", "export"):
        with pytest.raises(ImportError, match=r"ortx\.qat needs the torch extra: pip install 'ortx\[torch\]'"):
            getattr(ortx.qat, name)


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'quantise'"):
        ortx.qat.quantise
