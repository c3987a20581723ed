"""Low-level ctypes declarations of include/layercake.h.

Every struct here mirrors the C header field for field; tests check sizes
against the library (lc_*_sizeof is not exported, so the checks are made on
offsets that a mismatch would break: see tests/python/test_ffi.py).
"""
import ctypes
import ctypes.util
import os

c_u8, c_u32, c_i32, c_u64, c_i64 = ctypes.c_uint8, ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64, ctypes.c_int64
c_size, c_int, c_char_p, c_void_p = ctypes.c_size_t, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p

REASON_MAX = 160
TOKEN_LEN = 16
REGION_DESC_MAX = 512


def _find_library():
    env = os.environ.get("LAYERCAKE_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (
        os.path.join(here, "liblayercake.so"),
        os.path.join(here, "..", "..", "build", "liblayercake.so"),
    ):
        if os.path.exists(cand):
            return cand
    found = ctypes.util.find_library("layercake")
    if found:
        return found
    raise OSError(
        "liblayercake.so not found: set LAYERCAKE_LIB, build the project (make), "
        "or install the package with the library next to it"
    )


lib = ctypes.CDLL(_find_library())


class CtxParams(ctypes.Structure):
    _fields_ = [("size", c_size), ("name", c_char_p)]


class Completion(ctypes.Structure):
    _fields_ = [
        ("batch_id", c_u64),
        ("user_data", c_u64),
        ("room", c_u64),
        ("tag", c_u32),
        ("status", c_i32),
        ("bytes", c_u64),
        ("latency_ns", c_u64),
        ("reason", ctypes.c_char * REASON_MAX),
    ]


class Write(ctypes.Structure):
    _fields_ = [
        ("local", c_void_p),
        ("remote_offset", c_u64),
        ("length", c_u64),
        ("remote_region", c_u32),
        ("reserved", c_u32),
    ]


class BatchParams(ctypes.Structure):
    _fields_ = [
        ("size", c_size),
        ("room", c_u64),
        ("tag", c_u32),
        ("reserved", c_u32),
        ("timeout_ms", c_i64),
        ("user_data", c_u64),
    ]


class Token(ctypes.Structure):
    _fields_ = [("bytes", c_u8 * TOKEN_LEN)]


class ConnParams(ctypes.Structure):
    _fields_ = [
        ("size", c_size),
        ("cq", c_void_p),
        ("token", Token),
        ("has_token", c_int),
        ("lanes", c_int),
    ]


class LoopFaults(ctypes.Structure):
    _fields_ = [
        ("size", c_size),
        ("mask", c_u32),
        ("fail_tag", c_u32),
        ("fail_write", c_u64),
        ("drop_write", c_u64),
        ("delay_us", c_u64),
        ("fail_after_bytes", c_u64),
        ("fail_room", c_u64),
    ]


class ConfigInfo(ctypes.Structure):
    _fields_ = [
        ("name", c_char_p),
        ("env", c_char_p),
        ("default_str", c_char_p),
        ("help", c_char_p),
        ("min", c_i64),
        ("max", c_i64),
    ]


class RegionDesc(ctypes.Structure):
    _fields_ = [("owner", c_u64), ("region_id", c_u32), ("flags", c_u32), ("length", c_u64)]


P = ctypes.POINTER


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


# Errors, version, logging, config
lc_version = _fn("lc_version", c_char_p)
lc_strerror = _fn("lc_strerror", c_char_p, c_int)
lc_err_name = _fn("lc_err_name", c_char_p, c_int)
lc_log_set_level = _fn("lc_log_set_level", None, c_int)
lc_log_get_level = _fn("lc_log_get_level", c_int)
lc_config_count = _fn("lc_config_count", c_int)
lc_config_info = _fn("lc_config_info", P(ConfigInfo), c_int)
lc_transports = _fn("lc_transports", c_char_p)

# Context
lc_ctx_create = _fn("lc_ctx_create", c_int, P(CtxParams), P(c_void_p))
lc_ctx_destroy = _fn("lc_ctx_destroy", None, c_void_p)
lc_ctx_config_get_int = _fn("lc_ctx_config_get_int", c_int, c_void_p, c_char_p, P(c_i64))
lc_ctx_config_set = _fn("lc_ctx_config_set", c_int, c_void_p, c_char_p, c_char_p)
lc_counter_count = _fn("lc_counter_count", c_int)
lc_counter_name = _fn("lc_counter_name", c_char_p, c_int)
lc_ctx_counter = _fn("lc_ctx_counter", c_u64, c_void_p, c_int)

# Memory, regions, grants, tokens
lc_mem_alloc = _fn("lc_mem_alloc", c_int, c_size, ctypes.c_uint, P(c_void_p))
lc_mem_free = _fn("lc_mem_free", c_int, c_void_p)
lc_region_register = _fn("lc_region_register", c_int, c_void_p, c_void_p, c_size, P(c_void_p))
lc_region_deregister = _fn("lc_region_deregister", c_int, c_void_p)
lc_region_id = _fn("lc_region_id", c_u32, c_void_p)
lc_region_pack = _fn("lc_region_pack", c_int, c_void_p, c_void_p, c_size)
lc_region_unpack = _fn("lc_region_unpack", c_int, c_void_p, c_size, P(RegionDesc))
lc_grant_add = _fn("lc_grant_add", c_int, c_void_p, c_u64, c_void_p, c_u64, c_u64)
lc_grant_revoke = _fn("lc_grant_revoke", c_int, c_void_p, c_u64)
lc_token_issue = _fn("lc_token_issue", c_int, c_void_p, P(Token))

# Completion queues, listeners, connections, batches
lc_cq_create = _fn("lc_cq_create", c_int, c_void_p, P(c_void_p))
lc_cq_destroy = _fn("lc_cq_destroy", None, c_void_p)
lc_cq_fd = _fn("lc_cq_fd", c_int, c_void_p)
lc_cq_poll = _fn("lc_cq_poll", c_int, c_void_p, P(Completion), c_int)
lc_cq_wait = _fn("lc_cq_wait", c_int, c_void_p, P(Completion), c_int, c_int)
lc_listener_create = _fn("lc_listener_create", c_int, c_void_p, c_char_p, P(c_void_p))
lc_listener_url = _fn("lc_listener_url", c_int, c_void_p, c_char_p, c_size)
lc_listener_destroy = _fn("lc_listener_destroy", None, c_void_p)
lc_conn_create = _fn("lc_conn_create", c_int, c_void_p, c_char_p, P(ConnParams), P(c_void_p))
lc_conn_destroy = _fn("lc_conn_destroy", None, c_void_p)
lc_conn_import_region = _fn("lc_conn_import_region", c_int, c_void_p, c_void_p, c_size, P(c_u32))
lc_batch_post = _fn("lc_batch_post", c_int, c_void_p, c_void_p, c_size, P(BatchParams), P(c_u64))
lc_conn_cancel_room = _fn("lc_conn_cancel_room", c_int, c_void_p, c_u64)
lc_loop_set_faults = _fn("lc_loop_set_faults", c_int, c_void_p, P(LoopFaults))
