"""LayercakeConnector: vLLM's KVConnectorBase_V1, split by role.

The scheduler role delegates to SchedulerSide (scheduler.py), the worker
role to WorkerSide (worker.py). Every hook vLLM calls is guarded: an
unexpected exception while handling one request fails that request (its
id in the log line) and never reaches vLLM's engine loop, which would
stop the engine for everyone."""
import functools

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorRole,
    KVConnectorTransferResults,
    SupportsHMA,
)

from .config import parse_config
from .groups import Groups
from .layout import _tp_of
from .metadata import LayercakeMeta
from .scheduler import SchedulerSide
from .stats import LayercakePromMetrics, LayercakeStats, log, ratelog
from .worker import WorkerSide


def _guard(default=None, per_request=False):
    """A hook that never raises: the error is logged (rate-limited, with a
    traceback at debug level) and counted; per_request hooks fail the
    request they were given."""
    def wrap(fn):
        @functools.wraps(fn)
        def hook(self, *a, **kw):
            try:
                return fn(self, *a, **kw)
            except Exception as e:  # noqa: BLE001 - the engine must keep serving
                side = self._sched or self._worker
                if side is not None:
                    side.counters.add("hook_errors")
                if per_request and a and self._sched is not None:
                    rid = getattr(a[0], "request_id", "?")
                    self._sched.reject(rid, f"{fn.__name__}: {type(e).__name__}: {e}", "internal")
                    if fn.__name__ == "get_num_new_matched_tokens":
                        return self._sched.get_num_new_matched_tokens(*a, **kw)
                else:
                    ratelog.warning("hook-" + fn.__name__, "layercake: %s: %s: %s",
                                    fn.__name__, type(e).__name__, e)
                log.debug("layercake: %s", fn.__name__, exc_info=True)
                return default() if callable(default) else default
        return hook
    return wrap


class LayercakeConnector(KVConnectorBase_V1, SupportsHMA):
    """SupportsHMA: vLLM keeps its hybrid KV cache manager on; every KV
    cache group's blocks travel (groups.py)."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        tc = vllm_config.kv_transfer_config
        if tc.kv_role not in ("kv_producer", "kv_consumer"):
            raise ValueError(f"layercake: kv_role {tc.kv_role!r}: kv_producer or kv_consumer")
        cfg = parse_config(tc.kv_connector_extra_config)
        producer = tc.kv_role == "kv_producer"
        per_layer = cfg.load_mode == "per_layer" and not producer
        block_size = vllm_config.cache_config.block_size
        tp_size, tp_rank = _tp_of(vllm_config, cfg.values, role)
        groups = Groups(kv_cache_config, block_size)
        if per_layer and groups.hybrid:
            # A synchronous load reports failures by block, which vLLM
            # refuses with several KV cache groups.
            log.warning("layercake: load_mode per_layer is not supported with several KV cache "
                        "groups (a hybrid model): loading asynchronously")
            per_layer = False
        self._sched = self._worker = None
        if role == KVConnectorRole.SCHEDULER:
            self._sched = SchedulerSide(cfg, producer, tp_size, block_size, per_layer,
                                        getattr(tc, "engine_id", None), groups)
        else:
            self._worker = WorkerSide(cfg, producer, tp_size, tp_rank, block_size, per_layer,
                                      kv_cache_config, groups, getattr(tc, "engine_id", None))

    # ---- scheduler role ----

    @_guard(per_request=True)
    def on_new_request(self, request):
        self._sched.on_new_request(request)

    @_guard(default=(0, False), per_request=True)
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return self._sched.get_num_new_matched_tokens(request, num_computed_tokens)

    @_guard(per_request=True)
    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        self._sched.update_state_after_alloc(request, blocks, num_external_tokens)

    def bind_kv_cache_manager(self, kv_cache_manager):
        super().bind_kv_cache_manager(kv_cache_manager)
        if self._sched is not None:
            self._sched.kv_cache_manager = kv_cache_manager

    @_guard(default=LayercakeMeta)
    def build_connector_meta(self, scheduler_output):
        return self._sched.build_connector_meta(scheduler_output)

    @_guard()
    def update_connector_output(self, connector_output):
        self._sched.update_connector_output(connector_output)

    @_guard(default=False)
    def has_pending_push_work(self):
        return self._sched.has_pending_push_work()

    @_guard(default=(False, None), per_request=True)
    def request_finished(self, request, block_ids):
        return self._sched.request_finished(request, block_ids)

    @_guard(default=(False, None), per_request=True)
    def request_finished_all_groups(self, request, block_ids):
        return self._sched.request_finished(request, block_ids)

    # ---- worker role ----

    def register_kv_caches(self, kv_caches):
        self._worker.register_kv_caches(kv_caches)  # a setup error stops the engine: it should

    @_guard()
    def bind_connector_metadata(self, meta):
        super().bind_connector_metadata(meta)
        self._worker.bind_connector_metadata(meta)

    @_guard()
    def start_load_kv(self, forward_context, **kw):
        self._worker.start_load_kv(forward_context, **kw)

    @_guard()
    def wait_for_layer_load(self, layer_name):
        self._worker.wait_for_layer_load(layer_name)

    @_guard()
    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kw):
        self._worker.save_kv_layer(layer_name, kv_layer, attn_metadata, **kw)

    @_guard()
    def wait_for_save(self):
        self._worker.wait_for_save()

    @_guard(default=KVConnectorTransferResults)
    def get_transfer_results(self, finished_req_ids):
        return self._worker.get_transfer_results(finished_req_ids)

    def get_finished(self, finished_req_ids):
        r = self.get_transfer_results(finished_req_ids)
        return r.finished_sending or None, r.finished_recving or None

    @_guard(default=set)
    def get_block_ids_with_load_errors(self):
        return self._worker.get_block_ids_with_load_errors()

    @_guard()
    def build_connector_worker_meta(self):
        return self._worker.build_connector_worker_meta()

    def shutdown(self):
        if self._worker is not None:
            self._worker.shutdown()

    # ---- both: vLLM's stats and /metrics ----

    @_guard()
    def get_kv_connector_stats(self):
        side = self._sched or self._worker
        st = getattr(side, "kvstats", None)
        if st is None or st.is_empty():
            return None
        return st.clone_and_reset()

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return LayercakeStats(data=data) if data is not None else LayercakeStats()

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        return LayercakePromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    # ---- both ----

    @property
    def bootstrap_addr(self):
        return getattr(self._worker, "bootstrap_addr", None)

    @property
    def stats(self):
        return self._worker.stats if self._worker is not None else {}

    def counters(self):
        side = self._sched or self._worker
        if side is self._worker:
            return self._worker.all_counters()
        return dict(side.counters)


