"""Exceptions carrying the library's error code, text and cause, and the
library's error codes, read from the loaded C library at import (its
LC_ERROR_CODES table through lc_err_count/lc_err_code/lc_err_name), so that
no number is copied here."""
import ctypes

from . import _convert as _cv
from . import _ffi


def _read_codes():
    out, code = {}, ctypes.c_int()
    for i in range(_ffi.lc_err_count()):
        if _ffi.lc_err_code(i, ctypes.byref(code)) == 0:
            out[_ffi.lc_err_name(code.value).decode()] = code.value
    return out


CODES = _read_codes()
"""Every code of the C table by its symbol: {"LC_EINVAL": -22, "LC_ERR_STATE": ...}."""

# The codes the package itself tests for.
LC_EINVAL = CODES["LC_EINVAL"]
LC_ENOENT = CODES["LC_ENOENT"]
LC_EBUSY = CODES["LC_EBUSY"]
LC_EAGAIN = CODES["LC_EAGAIN"]
LC_ERR_CLOSED = CODES["LC_ERR_CLOSED"]
LC_ERR_STATE = CODES["LC_ERR_STATE"]


class LayercakeError(Exception):
    """A layercake call failed. `code` is the negative code the C call
    returned, `name` its symbol (e.g. "LC_ERR_GRANT"), `text` lc_strerror,
    and `reason` the cause the library recorded for this failure
    (lc_last_error(), e.g. "buffer 7 is not inside any given region"), or
    `text` when it recorded none. The message is "where: NAME: reason"."""

    def __init__(self, code, where="", reason=None):
        self.code = _cv.c_int(code, "LayercakeError: code")
        self.name = _ffi.lc_err_name(self.code).decode()
        self.text = _ffi.lc_strerror(self.code).decode()
        self.reason = reason or self.text
        msg = f"{self.name}: {self.reason}"
        super().__init__(f"{where}: {msg}" if where else msg)


def last_error():
    """lc_last_error(): the cause of the calling thread's last failure ("" if none)."""
    return _ffi.lc_last_error().decode(errors="replace")


def _reason(rc):
    """The reason recorded on this thread for the failure rc that a call just
    returned, then forgotten (so a later failure that records none cannot
    inherit it); None when the recorded one is of another code."""
    if _ffi.lc_last_error_code() != rc:
        return None
    text = last_error()
    _ffi.lc_last_error_clear()
    return text or None


def check(rc, where=""):
    """Raise LayercakeError for a negative return; pass other values through."""
    if rc < 0:
        raise LayercakeError(rc, where, _reason(rc))
    return rc


def strerror(code):
    return _ffi.lc_strerror(_cv.c_int(code, "strerror: code")).decode()


def err_name(code):
    return _ffi.lc_err_name(_cv.c_int(code, "err_name: code")).decode()
