import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import pytest  # noqa: E402


@pytest.fixture(params=["speedups", "ctypes"])
def way(request, monkeypatch):
    """The test once the C module's way (skipped where it is not in use)
    and once the ctypes way (the module set aside for the test)."""
    from layercake import _ffi, core
    if request.param == "ctypes":
        monkeypatch.setattr(core, "_fast", None)
    elif core._fast is None:
        pytest.skip("layercake._speedups not in use: " + _ffi.SPEEDUPS_FROM)
    return request.param
