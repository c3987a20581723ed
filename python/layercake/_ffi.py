"""Low-level ctypes declarations of include/layercake.h.

Every struct here mirrors the C header field for field. Each carries its C
name in `_c_name_`; tests/python/test_ffi.py compiles a tiny C program that
prints sizeof/offsetof of every one of them from include/layercake.h and
compares, and also round-trips structs through the library (layout buffers,
room info and metrics sizes).

Nothing here is Pythonic on purpose: the classes in core.py, engine.py and
control.py own the handles and turn codes into exceptions.
"""
import ctypes
import ctypes.util
import os

c_u8, c_u32, c_i32, c_u64, c_i64 = ctypes.c_uint8, ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64, ctypes.c_int64
c_size, c_int, c_char_p, c_void_p = ctypes.c_size_t, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p
c_double = ctypes.c_double

REASON_MAX = 160
TOKEN_LEN = 16
REGION_DESC_MAX = 512
METADATA_MAX = 4096
HIST_BUCKETS = 96
STEP_MOD = 1 << 62
BATCH_DEFER = 1  # LC_BATCH_DEFER


def _find_library():
    """(path, where from): the library to load, in this order."""
    env = os.environ.get("LAYERCAKE_LIB")
    if env:  # a build tree's, when asked (the tests set it)
        return env, "LAYERCAKE_LIB"
    here = os.path.dirname(os.path.abspath(__file__))
    try:  # written by `make install` (cmake/install.cmake): the prefix's library
        from ._paths import LIBRARY as installed
    except ImportError:
        installed = None
    for cand, source in (
        (os.path.join(here, "liblayercake.so"), "package"),  # the wheel's (pip install .)
        (installed, "installed prefix (_paths.py)"),
        (os.path.join(here, "..", "..", "build", "liblayercake.so"), "source tree build/"),
    ):
        if cand is None:
            continue
        if os.path.exists(cand):
            return cand, source
    found = ctypes.util.find_library("layercake")
    if found:
        return found, "loader search path"
    raise OSError(
        "liblayercake.so not found: set LAYERCAKE_LIB, build the project (make), "
        "or install the package with the library next to it (pip install .)"
    )


def _load(path):
    try:
        return ctypes.CDLL(path)
    except OSError as e:
        from ._deps import missing_message
        why = missing_message(path) if os.path.exists(path) else ""
        raise OSError(f"cannot load {path}: {e}" + (f"\n{why}" if why else "")) from None


LIBRARY_PATH, LIBRARY_SOURCE = _find_library()
lib = _load(LIBRARY_PATH)
P = ctypes.POINTER
FAIL_REASON_COUNT = lib.lc_fail_reason_count()  # LC_FAIL_REASON_COUNT of the loaded library


def _struct(c_name, fields):
    """A ctypes.Structure mirroring the C struct `c_name`."""
    return type(c_name, (ctypes.Structure,), {"_fields_": fields, "_c_name_": c_name})


# ---- data plane ------------------------------------------------------------

CtxParams = _struct("lc_ctx_params_t", [("size", c_size), ("name", c_char_p)])

ConfigInfo = _struct("lc_config_info_t", [
    ("name", c_char_p), ("env", c_char_p), ("default_str", c_char_p), ("help", c_char_p),
    ("min", c_i64), ("max", c_i64), ("is_text", c_int),
])

RegionDesc = _struct("lc_region_desc_t", [
    ("owner", c_u64), ("region_id", c_u32), ("flags", c_u32), ("length", c_u64),
    ("mem_kind", c_i32), ("device", c_i32),
])

RegionParams = _struct("lc_region_params_t", [
    ("size", c_size), ("kind", c_i32), ("device", c_i32),
])

Token = _struct("lc_token_t", [("bytes", c_u8 * TOKEN_LEN)])

Completion = _struct("lc_completion_t", [
    ("batch_id", c_u64), ("user_data", c_u64), ("room", c_u64), ("tag", c_u32),
    ("status", c_i32), ("bytes", c_u64), ("latency_ns", c_u64),
    ("reason", ctypes.c_char * REASON_MAX),
])

ConnParams = _struct("lc_conn_params_t", [
    ("size", c_size), ("cq", c_void_p), ("token", Token), ("has_token", c_int), ("lanes", c_int),
])

Write = _struct("lc_write_t", [
    ("local", c_void_p), ("remote_offset", c_u64), ("length", c_u64),
    ("remote_region", c_u32), ("count", c_u32), ("local_stride", c_u64),
    ("remote_stride", c_u64),
])

BatchParams = _struct("lc_batch_params_t", [
    ("size", c_size), ("room", c_u64), ("tag", c_u32), ("flags", c_u32),
    ("timeout_ms", c_i64), ("user_data", c_u64),
])

LoopFaults = _struct("lc_loop_faults_t", [
    ("size", c_size), ("mask", c_u32), ("fail_tag", c_u32), ("fail_write", c_u64),
    ("drop_write", c_u64), ("delay_us", c_u64), ("fail_after_bytes", c_u64),
    ("fail_room", c_u64),
])

# ---- engine ------------------------------------------------------------------

Buffer = _struct("lc_buffer_t", [
    ("base", c_void_p), ("length", c_u64), ("item_len", c_u64), ("layer", c_i32),
    ("kind", c_u32), ("flags", c_u32), ("rows", c_u32),
])

LayoutParams = _struct("lc_layout_params_t", [
    ("size", c_size), ("model", c_u32), ("layers", c_u32), ("draft_layers", c_u32),
    ("rows", c_u32), ("pages", c_u64), ("item_len", c_u64 * 3),
    ("bases", P(c_void_p)), ("kv_layer_ids", P(c_i32)),
    ("state_components", c_u32), ("state_layers", c_u32), ("state_layer_ids", P(c_i32)),
    ("state_slots", c_u64), ("state_item_len", c_u64), ("state_bases", P(c_void_p)),
])

RoomInfo = _struct("lc_room_info_t", [
    ("size", c_size), ("status", c_int), ("fail_reason", c_int),
    ("reason", ctypes.c_char * REASON_MAX), ("dst_count", c_u32),
    ("required_dst_count", c_u32), ("layers_landed", c_u32), ("reserved", c_u32),
])

Histogram = _struct("lc_histogram_t", [
    ("count", c_u64), ("sum_ns", c_u64), ("buckets", c_u64 * HIST_BUCKETS),
])

EngineMetrics = _struct("lc_engine_metrics_t", [
    ("size", c_size), ("rooms_opened", c_u64), ("rooms_succeeded", c_u64),
    ("rooms_failed", c_u64), ("rooms_expired_unread", c_u64), ("rooms_active", c_u64), ("chunks_added", c_u64),
    ("batches_posted", c_u64), ("batches_failed", c_u64), ("writes_posted", c_u64),
    ("bytes_posted", c_u64), ("bytes_acked", c_u64), ("bad_input", c_u64),
    ("session_failures", c_u64), ("tasks_pending", c_u64), ("tasks_inflight", c_u64),
    ("tasks_pending_max", c_u64), ("loop_iterations", c_u64),
    ("room_latency", Histogram), ("group_ack_latency", Histogram), ("step_to_post", Histogram),
    ("inline_submits", c_u64), ("records_refused", c_u64), ("counter_overruns", c_u64),
    ("chunks_held", c_u64), ("pages_held", c_u64), ("chunks_refused_held", c_u64),
])

RoomFinal = _struct("lc_room_final_t", [
    ("size", c_size), ("room", c_u64), ("session", c_char_p), ("status", c_int),
    ("fail_reason", c_int), ("reason_text", c_char_p), ("metadata", c_void_p),
    ("metadata_len", c_size), ("flags", c_u32), ("checksum", c_u64),
])

ROOM_FINAL_CB = ctypes.CFUNCTYPE(None, c_void_p, P(RoomFinal))
LAYERS_LANDED_CB = ctypes.CFUNCTYPE(None, c_void_p, c_u64, c_char_p, c_u32)
LOG_CB = ctypes.CFUNCTYPE(None, c_int, c_char_p, c_void_p)

EngineParams = _struct("lc_engine_params_t", [
    ("size", c_size), ("layout", c_void_p), ("name", c_char_p),
    ("final_cb", ROOM_FINAL_CB), ("final_arg", c_void_p),
    ("landed_cb", LAYERS_LANDED_CB), ("landed_arg", c_void_p),
    ("external_counter", c_int), ("reserved", c_int),
    ("cache_word", P(c_u64)), ("aux_word", P(c_u64)),
])

Chunk = _struct("lc_chunk_t", [
    ("size", c_size), ("room", c_u64), ("pages", c_void_p), ("page_count", c_size),
    ("dst_index", c_u64), ("is_last", c_int), ("reserved", c_int),
    ("state_slots", c_void_p), ("state_slot_count", c_size),
    ("src_mask", c_void_p), ("src_local", c_void_p), ("src_local_count", c_size),
    ("page_tokens", c_u64),
])

Fragment = _struct("lc_fragment_t", [
    ("buffer", c_u32), ("reserved", c_u32), ("src_offset", c_u64), ("dst_offset", c_u64),
    ("bytes", c_u64), ("dst_item_len", c_u64), ("count", c_u32), ("reserved2", c_u32),
    ("src_stride", c_u64), ("dst_stride", c_u64),
])

TpSide = _struct("lc_tp_side_t", [
    ("tp_size", c_int), ("tp_rank", c_int), ("item_len", c_u64), ("unit_len", c_u64),
    ("rows", c_u32), ("reserved", c_u32),
])

SessionParams = _struct("lc_session_params_t", [
    ("size", c_size), ("name", c_char_p), ("url", c_char_p), ("token", Token),
    ("has_token", c_int), ("reserved", c_int),
    ("region_descs", P(c_void_p)), ("region_desc_lens", P(c_size)), ("region_count", c_size),
    ("buffer_region", P(c_u32)), ("buffer_offset", P(c_u64)),
    ("fragments", P(Fragment)), ("fragment_count", c_size),
])

DstParams = _struct("lc_dst_params_t", [
    ("size", c_size), ("session", c_char_p), ("pages", c_void_p), ("page_count", c_size),
    ("prefix_len", c_u64), ("aux_index", c_i64), ("required_dst_count", c_u32),
    ("is_dummy", c_int), ("state_slots", c_void_p), ("state_slot_count", c_size),
    ("dst_mask", c_void_p), ("dst_local", c_void_p), ("dst_local_count", c_size),
])

# ---- control plane -----------------------------------------------------------

PAIR_MIN, PAIR_MAX = 16, 64  # LC_PAIR_MIN, LC_PAIR_MAX: a pairing value's length

BootstrapParams = _struct("lc_bootstrap_params_t", [
    ("size", c_size), ("host", c_char_p), ("port", c_int), ("reserved", c_int),
    ("secret", c_char_p), ("ctx", c_void_p), ("shared_secret", c_char_p),
])

PrefillParams = _struct("lc_prefill_params_t", [
    ("size", c_size), ("layout", c_void_p), ("bootstrap", c_char_p), ("host", c_char_p),
    ("name", c_char_p), ("world_size", c_int), ("dp_size", c_int), ("engine_rank", c_int),
    ("reserved", c_int), ("metrics_server", c_void_p), ("bootstrap_secret", c_char_p),
    ("external_counter", c_int), ("reserved2", c_int), ("cache_word", c_void_p),
    ("aux_word", c_void_p), ("shared_secret", c_char_p), ("engine_id", c_char_p),
])

DecodeParams = _struct("lc_decode_params_t", [
    ("size", c_size), ("layout", c_void_p), ("regions", P(c_void_p)), ("region_count", c_size),
    ("listen_url", c_char_p), ("host", c_char_p), ("session", c_char_p),
    ("tp_size", c_int), ("tp_rank", c_int), ("shared_secret", c_char_p),
])

SenderParams = _struct("lc_sender_params_t", [
    ("size", c_size), ("room", c_u64), ("pair", c_void_p), ("pair_len", c_size),
])

ReceiverParams = _struct("lc_receiver_params_t", [
    ("size", c_size), ("bootstrap", c_char_p), ("room", c_u64), ("pair", c_void_p),
    ("pair_len", c_size),
])

ReceiverPages = _struct("lc_receiver_pages_t", [
    ("size", c_size), ("pages", c_void_p), ("page_count", c_size), ("prefix_len", c_u64),
    ("aux_index", c_i64), ("state_slots", c_void_p), ("state_slot_count", c_size),
])

STRUCTS = [
    CtxParams, ConfigInfo, RegionDesc, Token, Completion, ConnParams, Write, BatchParams,
    LoopFaults, Buffer, LayoutParams, RoomInfo, Histogram, EngineMetrics, RoomFinal, EngineParams, Chunk,
    Fragment, TpSide, SessionParams, DstParams, BootstrapParams, PrefillParams, DecodeParams,
    SenderParams, ReceiverParams, ReceiverPages,
]


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


# Errors, version, logging, config
lc_version = _fn("lc_version", c_char_p)
lc_version_number = _fn("lc_version_number", c_int)
lc_strerror = _fn("lc_strerror", c_char_p, c_int)
lc_err_name = _fn("lc_err_name", c_char_p, c_int)
lc_err_count = _fn("lc_err_count", c_int)
lc_err_code = _fn("lc_err_code", c_int, c_int, P(c_int))
lc_last_error = _fn("lc_last_error", c_char_p)
lc_last_error_code = _fn("lc_last_error_code", c_int)
lc_last_error_clear = _fn("lc_last_error_clear", None)
lc_log_set_handler = _fn("lc_log_set_handler", None, LOG_CB, c_void_p)
lc_log_set_level = _fn("lc_log_set_level", None, c_int)
lc_log_get_level = _fn("lc_log_get_level", c_int)
lc_log_level_parse = _fn("lc_log_level_parse", c_int, c_char_p, P(c_int))
lc_config_count = _fn("lc_config_count", c_int)
lc_config_info = _fn("lc_config_info", P(ConfigInfo), c_int)
lc_transports = _fn("lc_transports", c_char_p)

# Context
lc_ctx_create = _fn("lc_ctx_create", c_int, P(CtxParams), P(c_void_p))
lc_ctx_destroy = _fn("lc_ctx_destroy", None, c_void_p)
lc_ctx_config_get = _fn("lc_ctx_config_get", c_int, c_void_p, c_char_p, c_char_p, c_size)
lc_ctx_config_get_int = _fn("lc_ctx_config_get_int", c_int, c_void_p, c_char_p, P(c_i64))
lc_ctx_config_set = _fn("lc_ctx_config_set", c_int, c_void_p, c_char_p, c_char_p)
lc_counter_count = _fn("lc_counter_count", c_int)
lc_counter_name = _fn("lc_counter_name", c_char_p, c_int)
lc_ctx_counter = _fn("lc_ctx_counter", c_int, c_void_p, c_int, P(c_u64))
lc_ctx_counter_by_name = _fn("lc_ctx_counter_by_name", c_int, c_void_p, c_char_p, P(c_u64))

# Memory, regions, grants, tokens
lc_mem_alloc = _fn("lc_mem_alloc", c_int, c_size, ctypes.c_uint, P(c_void_p))
lc_mem_free = _fn("lc_mem_free", c_int, c_void_p)
lc_region_register = _fn("lc_region_register", c_int, c_void_p, c_void_p, c_size, P(c_void_p))
lc_region_register_ex = _fn("lc_region_register_ex", c_int, c_void_p, c_void_p, c_size, P(RegionParams),
                            P(c_void_p))
lc_region_deregister = _fn("lc_region_deregister", c_int, c_void_p)
lc_region_id = _fn("lc_region_id", c_u32, c_void_p)
lc_region_addr = _fn("lc_region_addr", c_void_p, c_void_p)
lc_region_length = _fn("lc_region_length", c_size, c_void_p)
lc_region_pack = _fn("lc_region_pack", c_int, c_void_p, c_void_p, c_size)
lc_region_unpack = _fn("lc_region_unpack", c_int, c_void_p, c_size, P(RegionDesc))
lc_grant_issue = _fn("lc_grant_issue", c_int, c_void_p, c_u64, c_void_p, c_u64, c_u64)
lc_grant_revoke = _fn("lc_grant_revoke", c_int, c_void_p, c_u64)
lc_token_issue = _fn("lc_token_issue", c_int, c_void_p, P(Token))
lc_token_revoke = _fn("lc_token_revoke", c_int, c_void_p, P(Token))
lc_grant_bind = _fn("lc_grant_bind", c_int, c_void_p, c_u64, P(Token))

# Completion queues, listeners, connections, batches
lc_cq_create = _fn("lc_cq_create", c_int, c_void_p, P(c_void_p))
lc_cq_destroy = _fn("lc_cq_destroy", None, c_void_p)
lc_cq_shutdown = _fn("lc_cq_shutdown", c_int, c_void_p)
lc_cq_fd = _fn("lc_cq_fd", c_int, c_void_p)
lc_cq_poll = _fn("lc_cq_poll", c_int, c_void_p, P(Completion), c_int)
lc_cq_wait = _fn("lc_cq_wait", c_int, c_void_p, P(Completion), c_int, c_int)
# The same two with the completion array as a plain address: a
# CompletionQueue keeps its own array's (core.py), and an integer converts
# faster than a pointer type is checked.
lc_cq_poll_addr = lib["lc_cq_poll"]
lc_cq_poll_addr.restype = c_int
lc_cq_poll_addr.argtypes = [c_void_p, c_void_p, c_int]
lc_cq_wait_addr = lib["lc_cq_wait"]
lc_cq_wait_addr.restype = c_int
lc_cq_wait_addr.argtypes = [c_void_p, c_void_p, c_int, c_int]
lc_listener_create = _fn("lc_listener_create", c_int, c_void_p, c_char_p, P(c_void_p))
lc_listener_url = _fn("lc_listener_url", c_int, c_void_p, c_char_p, c_size)
lc_listener_destroy = _fn("lc_listener_destroy", None, c_void_p)
lc_conn_create = _fn("lc_conn_create", c_int, c_void_p, c_char_p, P(ConnParams), P(c_void_p))
lc_conn_destroy = _fn("lc_conn_destroy", None, c_void_p)
lc_conn_import_region = _fn("lc_conn_import_region", c_int, c_void_p, c_void_p, c_size, P(c_u32))
lc_batch_post = _fn("lc_batch_post", c_int, c_void_p, c_void_p, c_size, P(BatchParams), P(c_u64))
# The same C function called with plain addresses: Connection.post packs a
# small batch's writes and parameters into scratch memory of its own thread
# (core.py), with no ctypes structure built per call.
lc_batch_post_addr = lib["lc_batch_post"]  # a second function object
lc_batch_post_addr.restype = c_int
lc_batch_post_addr.argtypes = [c_void_p, c_void_p, c_size, c_void_p, c_void_p]
lc_conn_room_cancel = _fn("lc_conn_room_cancel", c_int, c_void_p, c_u64)
lc_conn_flush = _fn("lc_conn_flush", c_int, c_void_p)
lc_loop_set_faults = _fn("lc_loop_set_faults", c_int, c_void_p, P(LoopFaults))

# Layouts, steps, statuses, histograms
lc_layout_create = _fn("lc_layout_create", c_int, P(Buffer), c_size, P(c_void_p))
lc_layout_build = _fn("lc_layout_build", c_int, P(LayoutParams), P(c_void_p))
lc_layout_destroy = _fn("lc_layout_destroy", None, c_void_p)
lc_layout_buffer_count = _fn("lc_layout_buffer_count", c_int, c_void_p)
lc_layout_buffer = _fn("lc_layout_buffer", c_int, c_void_p, c_int, P(Buffer))
lc_layout_layer_count = _fn("lc_layout_layer_count", c_int, c_void_p)
lc_layout_layer_buffers = _fn("lc_layout_layer_buffers", c_int, c_void_p, c_int, P(c_u32), c_size)
lc_layout_fingerprint = _fn("lc_layout_fingerprint", c_u64, c_void_p)
lc_step_ready = _fn("lc_step_ready", c_int, c_u64, c_u64)
lc_room_status_name = _fn("lc_room_status_name", c_char_p, c_int)
lc_fail_reason_name = _fn("lc_fail_reason_name", c_char_p, c_int)
lc_fail_reason_symbol = _fn("lc_fail_reason_symbol", c_char_p, c_int)
lc_fail_reason_count = _fn("lc_fail_reason_count", c_int)
lc_histogram_bucket_le_us = _fn("lc_histogram_bucket_le_us", c_double, c_int)
lc_histogram_quantile_us = _fn("lc_histogram_quantile_us", c_double, P(Histogram), c_double)

# Engine
lc_engine_create = _fn("lc_engine_create", c_int, c_void_p, P(EngineParams), P(c_void_p))
lc_engine_destroy = _fn("lc_engine_destroy", None, c_void_p)
lc_engine_record_cache = _fn("lc_engine_record_cache", c_int, c_void_p)
lc_engine_record_aux = _fn("lc_engine_record_aux", c_int, c_void_p)
lc_engine_counter = _fn("lc_engine_counter", c_int, c_void_p, c_int, P(P(c_u64)))
lc_engine_record_cache_on_stream = _fn("lc_engine_record_cache_on_stream", c_int, c_void_p, c_void_p)
lc_engine_record_aux_on_stream = _fn("lc_engine_record_aux_on_stream", c_int, c_void_p, c_void_p)


class CudaInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("found", c_int), ("device_count", c_int),
                ("driver_version", c_int), ("reserved", c_int), ("errors", c_u64),
                ("library", ctypes.c_char * 256), ("why", ctypes.c_char * 256)]


class CudaDevice(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("ordinal", c_int), ("reserved", c_int),
                ("total_mem", c_u64), ("name", ctypes.c_char * 128), ("pci_bus_id", ctypes.c_char * 32)]


lc_cuda_info = _fn("lc_cuda_info", c_int, P(CudaInfo))
lc_cuda_device = _fn("lc_cuda_device", c_int, c_int, P(CudaDevice))
lc_cuda_pointer_kind = _fn("lc_cuda_pointer_kind", c_int, c_void_p, P(c_int), P(c_int))
lc_engine_batch_begin = _fn("lc_engine_batch_begin", c_int, c_void_p, c_int)
lc_engine_chunk_add = _fn("lc_engine_chunk_add", c_int, c_void_p, P(Chunk))
lc_engine_batch_end = _fn("lc_engine_batch_end", c_int, c_void_p)
lc_tp_fragment = _fn("lc_tp_fragment", c_int, P(TpSide), P(TpSide), P(Fragment))
lc_engine_session_add = _fn("lc_engine_session_add", c_int, c_void_p, P(SessionParams))
lc_engine_session_remove = _fn("lc_engine_session_remove", c_int, c_void_p, c_char_p)
lc_engine_session_blocked = _fn("lc_engine_session_blocked", c_int, c_void_p, c_char_p, P(c_u64))
lc_engine_room_open = _fn("lc_engine_room_open", c_int, c_void_p, c_u64)
lc_engine_room_dst_add = _fn("lc_engine_room_dst_add", c_int, c_void_p, c_u64, P(DstParams))
lc_engine_room_metadata_set = _fn("lc_engine_room_metadata_set", c_int, c_void_p, c_u64, c_void_p, c_size)
lc_engine_room_cancel = _fn("lc_engine_room_cancel", c_int, c_void_p, c_u64, c_char_p)
lc_engine_room_status = _fn("lc_engine_room_status", c_int, c_void_p, c_u64, P(RoomInfo))
lc_engine_room_close = _fn("lc_engine_room_close", c_int, c_void_p, c_u64)
lc_engine_metrics = _fn("lc_engine_metrics", c_int, c_void_p, P(EngineMetrics))
lc_engine_failed_by_reason = _fn("lc_engine_failed_by_reason", c_int, c_void_p, c_int, P(c_u64))

# Bootstrap server, prefill, senders, decode, receivers
lc_bootstrap_start = _fn("lc_bootstrap_start", c_int, P(BootstrapParams), P(c_void_p))
lc_bootstrap_stop = _fn("lc_bootstrap_stop", None, c_void_p)
lc_bootstrap_port = _fn("lc_bootstrap_port", c_int, c_void_p)
lc_bootstrap_addr = _fn("lc_bootstrap_addr", c_int, c_void_p, c_char_p, c_size)
lc_prefill_create = _fn("lc_prefill_create", c_int, c_void_p, P(PrefillParams), P(c_void_p))
lc_prefill_destroy = _fn("lc_prefill_destroy", None, c_void_p)
lc_prefill_engine = _fn("lc_prefill_engine", c_int, c_void_p, P(c_void_p))
lc_prefill_endpoint = _fn("lc_prefill_endpoint", c_int, c_void_p, c_char_p, c_size)
lc_prefill_counter = _fn("lc_prefill_counter", c_int, c_void_p, c_char_p, P(c_u64))
lc_prefill_wait = _fn("lc_prefill_wait", c_int, c_void_p, c_int)
lc_prefill_fd = _fn("lc_prefill_fd", c_int, c_void_p)
lc_sender_create = _fn("lc_sender_create", c_int, c_void_p, c_u64, P(c_void_p))
lc_sender_create_ex = _fn("lc_sender_create_ex", c_int, c_void_p, P(SenderParams), P(c_void_p))
lc_sender_metadata_set = _fn("lc_sender_metadata_set", c_int, c_void_p, c_void_p, c_size)
lc_sender_poll = _fn("lc_sender_poll", c_int, c_void_p, P(RoomInfo))
lc_sender_prefix_len = _fn("lc_sender_prefix_len", c_int, c_void_p, P(c_u64))
lc_sender_cancel = _fn("lc_sender_cancel", c_int, c_void_p, c_char_p)
lc_sender_destroy = _fn("lc_sender_destroy", None, c_void_p)
lc_decode_create = _fn("lc_decode_create", c_int, c_void_p, P(DecodeParams), P(c_void_p))
lc_decode_destroy = _fn("lc_decode_destroy", None, c_void_p)
lc_decode_endpoint = _fn("lc_decode_endpoint", c_int, c_void_p, c_char_p, c_size)
lc_decode_counter = _fn("lc_decode_counter", c_int, c_void_p, c_char_p, P(c_u64))
lc_decode_wait = _fn("lc_decode_wait", c_int, c_void_p, c_int)
lc_decode_fd = _fn("lc_decode_fd", c_int, c_void_p)
lc_receiver_create = _fn("lc_receiver_create", c_int, c_void_p, c_char_p, c_u64, P(c_void_p))
lc_receiver_create_ex = _fn("lc_receiver_create_ex", c_int, c_void_p, P(ReceiverParams), P(c_void_p))
lc_receiver_send = _fn("lc_receiver_send", c_int, c_void_p, P(ReceiverPages))
lc_receiver_poll = _fn("lc_receiver_poll", c_int, c_void_p, P(RoomInfo))
lc_receiver_layers_ready = _fn("lc_receiver_layers_ready", c_int, c_void_p)
lc_receiver_metadata = _fn("lc_receiver_metadata", c_int, c_void_p, c_void_p, c_size)
lc_receiver_cancel = _fn("lc_receiver_cancel", c_int, c_void_p, c_char_p)
lc_receiver_destroy = _fn("lc_receiver_destroy", None, c_void_p)


# ---- speedups --------------------------------------------------------------

SPEEDUPS_NAME = "_speedups.abi3.so"


def _load_speedups():
    """(module or None, where it came from or why there is none, whether
    one was found but cannot be used: a warning then): the C
    module of the data path's per-batch calls (python/speedups/speedups.c,
    docs/python.md "Speedups"), found beside the library it will call or
    beside this package, and bound to this library's functions.
    LAYERCAKE_SPEEDUPS=0 leaves it out; without it everything takes the
    ctypes way, with the same results."""
    if os.environ.get("LAYERCAKE_SPEEDUPS", "1") == "0":
        return None, "off (LAYERCAKE_SPEEDUPS=0)", False
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [here]
    if os.path.exists(LIBRARY_PATH):
        dirs.insert(0, os.path.dirname(os.path.realpath(LIBRARY_PATH)))
    path = next((p for p in (os.path.join(d, SPEEDUPS_NAME) for d in dirs) if os.path.exists(p)), None)
    if path is None:
        return None, "not built (no " + SPEEDUPS_NAME + " beside the library or the package)", False
    import importlib.util
    try:
        spec = importlib.util.spec_from_file_location("layercake._speedups", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        want = (lc_version_number(), ctypes.sizeof(Write), ctypes.sizeof(BatchParams),
                ctypes.sizeof(Completion))
        if tuple(mod.layout()) != want:
            return None, f"{path}: built for {tuple(mod.layout())}, the library is {want}", True
        addr = [ctypes.cast(lib[n], c_void_p).value for n in ("lc_batch_post", "lc_cq_poll", "lc_cq_wait")]
        mod.bind(*addr)
    except (ImportError, OSError, AttributeError, ValueError) as e:
        return None, f"{path}: {e}", True
    return mod, path, False


speedups, SPEEDUPS_FROM, _unusable = _load_speedups()
if _unusable:  # found, but it cannot be loaded or was built for another library
    import warnings
    warnings.warn(f"layercake: C module not used, the slower ctypes way instead: {SPEEDUPS_FROM} "
                  "(rebuild it with the library, or LAYERCAKE_SPEEDUPS=0 to silence this)",
                  RuntimeWarning, stacklevel=2)
