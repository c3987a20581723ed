"""Counters and rate-limited log lines of the connector (per process)."""
import logging
import threading
import time
from dataclasses import dataclass

log = logging.getLogger("layercake.vllm")


class RateLog:
    """At most `burst` lines per `period` seconds per kind; the lines held
    back are counted and said with the next line that goes out."""

    def __init__(self, period=10.0, burst=5):
        self.period, self.burst = period, burst
        self._state = {}
        self._lock = threading.Lock()

    def warning(self, kind, fmt, *args):
        now = time.monotonic()
        with self._lock:
            t0, n, held = self._state.get(kind, (now, 0, 0))
            if now - t0 > self.period:
                t0, n = now, 0
            if n >= self.burst:
                self._state[kind] = (t0, n, held + 1)
                return
            self._state[kind] = (t0, n + 1, 0)
        if held:
            fmt += " (%d more like this held back)"
            args = args + (held,)
        log.warning(fmt, *args)


class Counters(dict):
    def add(self, key, n=1):
        self[key] = self.get(key, 0) + n


ratelog = RateLog()


# ---- vLLM's connector stats and Prometheus series ---------------------------

def _vllm_stats_base():
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
        KVConnectorPromMetrics,
        KVConnectorStats,
    )
    return KVConnectorStats, KVConnectorPromMetrics


_KVStats, _KVProm = _vllm_stats_base()

# Observations (one value per room) and counts (name -> n) in one dict, so
# that it pickles between vLLM's processes as it is.
SERIES = ("transfer_s", "exposed_tail_s", "layer_wait_s", "bytes")


@dataclass
class LayercakeStats(_KVStats):
    """KVConnectorStats: per room, transfer_s (P: room opened to final; D:
    grant to every byte landed), exposed_tail_s (P: its last layer recorded to
    D having every byte), layer_wait_s (D, per_layer: time the forward waited
    for layers), bytes (D: bytes landed); counts: failed_<reason>,
    refused_<kind>, rooms_ok."""

    def __post_init__(self):
        if not self.data:
            self.reset()

    def reset(self):
        self.data = {k: [] for k in SERIES}
        self.data["counts"] = {}

    def observe(self, key, v):
        self.data[key].append(v)

    def count(self, key, n=1):
        c = self.data["counts"]
        c[key] = c.get(key, 0) + n

    def clone_and_reset(self):
        out = LayercakeStats(data=self.data)
        self.reset()
        return out

    def is_empty(self):
        return not any(self.data[k] for k in SERIES) and not self.data["counts"]

    def aggregate(self, other):
        if other is not None and not other.is_empty():
            for k in SERIES:
                self.data[k].extend(other.data.get(k, ()))
            for k, n in other.data.get("counts", {}).items():
                self.count(k, n)
        return self

    def reduce(self):
        out = {}
        for k in SERIES:
            v = sorted(self.data[k])
            if v:
                out[f"{k} n"] = len(v)
                out[f"{k} p50"] = round(v[len(v) // 2], 6)
                out[f"{k} max"] = round(v[-1], 6)
        out.update(self.data["counts"])
        return out


_BUCKETS_S = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
              10.0, 30.0]


class LayercakePromMetrics(_KVProm):
    """vLLM's /metrics series of the connector: vllm:layercake_*."""

    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._labelnames = list(labelnames)
        hist = {
            "transfer_s": ("vllm:layercake_transfer_seconds",
                           "KV transfer time per request (P: room opened to final; D: grant "
                           "to every byte landed)", _BUCKETS_S),
            "exposed_tail_s": ("vllm:layercake_exposed_tail_seconds",
                               "P: from its last layer to D holding every byte", _BUCKETS_S),
            "layer_wait_s": ("vllm:layercake_layer_wait_seconds",
                             "D, per_layer: time the forward waited for layers", _BUCKETS_S),
            "bytes": ("vllm:layercake_bytes_transferred", "KV bytes per request at D",
                      [2 ** (10 + 2 * i) for i in range(13)]),
        }
        self._hist = {}
        for key, (name, doc, buckets) in hist.items():
            h = self._histogram_cls(name=name, documentation=doc, buckets=buckets,
                                    labelnames=self._labelnames)
            self._hist[key] = {i: h.labels(*lv) for i, lv in per_engine_labelvalues.items()}
        self._events = self._counter_cls(
            name="vllm:layercake_events",
            documentation="Connector events: rooms_ok, failed_<reason>, refused_<kind>",
            labelnames=self._labelnames + ["event"])

    def observe(self, data, engine_idx=0):
        for key, per_engine in self._hist.items():
            h = per_engine.get(engine_idx)
            if h is None:
                continue
            for v in data.get(key, ()):
                h.observe(v)
        lv = self.per_engine_labelvalues.get(engine_idx)
        if lv is None:
            return
        for ev, n in data.get("counts", {}).items():
            self._events.labels(*lv, ev).inc(n)
