"""layercake: layer-wise KV-cache streaming from prefill to decode.

A ctypes binding over liblayercake.so (no compiled extension). See
docs/python.md for the API and the mapping from TokenSpeed's KV manager
(layercake.tokenspeed).
"""
from .core import (  # noqa: F401
    MEM_CUDA,
    MEM_HOST,
    MEM_NO_HUGEPAGE,
    MEM_PINNED,
    MEM_SIM,
    MEM_SHAREABLE,
    WRITE_DTYPE,
    CompletionQueue,
    Connection,
    Context,
    Listener,
    Memory,
    RawMemory,
    Region,
    config_table,
    log_to,
    set_log_level,
    transports,
    unpack_region,
    version,
)
from .engine import (  # noqa: F401
    STEP_MOD,
    Buffer,
    BufferKind,
    Engine,
    FailReason,
    Layout,
    Model,
    RoomInfo,
    RoomStatus,
    Steps,
    status_name,
    step_ready,
    tp_fragment,
)
from .control import BootstrapServer, Decode, Prefill, Receiver, Sender  # noqa: F401
from .errors import LayercakeError, err_name, strerror  # noqa: F401

# The loaded library's, which CMakeLists.txt's project(VERSION) fixes (so does
# the wheel's metadata): the version is said in one place.
__version__ = version()
