"""Exceptions carrying the library's error code and text."""
from . import _ffi


class LayercakeError(Exception):
    """A layercake call failed. `code` is the negative code the C call
    returned, `name` its symbol (e.g. "LC_ERR_GRANT"), `text` lc_strerror."""

    def __init__(self, code, where=""):
        self.code = int(code)
        self.name = _ffi.lc_err_name(self.code).decode()
        self.text = _ffi.lc_strerror(self.code).decode()
        msg = f"{self.name}: {self.text}"
        super().__init__(f"{where}: {msg}" if where else msg)


def check(rc, where=""):
    """Raise LayercakeError for a negative return; pass other values through."""
    if rc < 0:
        raise LayercakeError(rc, where)
    return rc


def strerror(code):
    return _ffi.lc_strerror(int(code)).decode()


def err_name(code):
    return _ffi.lc_err_name(int(code)).decode()
