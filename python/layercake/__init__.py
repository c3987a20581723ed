"""layercake: layer-wise KV-cache streaming from prefill to decode.

A ctypes binding over liblayercake.so (no compiled extension). See
docs/python.md for the API and the mapping from TokenSpeed's KV manager.
"""
from .core import (  # noqa: F401
    MEM_NO_HUGEPAGE,
    MEM_SHAREABLE,
    WRITE_DTYPE,
    CompletionQueue,
    Connection,
    Context,
    Listener,
    Memory,
    Region,
    config_table,
    transports,
    unpack_region,
    version,
)
from .errors import LayercakeError, err_name, strerror  # noqa: F401

__version__ = "0.1.0"
