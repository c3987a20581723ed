"""Load the seed's MooncakeAsyncKVManager (../shared/seed/async_conn.py, or
$LAYERCAKE_SEED) with the tokenspeed modules it imports stubbed, as
../shared/tools/seed_planner_cost.py does, plus the base-class status rules
of spec 5.1 (manager.py: insert if absent, Failed sticky, else max).
Used by tests/python/test_tokenspeed.py and bench/python_overhead.py."""
import collections
import importlib.util
import logging
import os
import sys
import types

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def seed_path():
    p = os.environ.get("LAYERCAKE_SEED") or os.path.join(ROOT, "..", "shared", "seed", "async_conn.py")
    return p if os.path.exists(p) else None


# The enums the seed imports are TokenSpeed's; the adapter defines the same.
from layercake.tokenspeed import DisaggregationMode, TransferPoll  # noqa: E402


class FastQueue:
    class Empty(Exception):
        pass

    def __init__(self):
        self.items = collections.deque()

    def put(self, x):
        self.items.append(x)

    def get_nowait(self):
        if not self.items:
            raise FastQueue.Empty
        return self.items.popleft()

    def get(self):
        return self.get_nowait()


class StepCounter:
    COUNT_NUM_MAX = 1 << 62

    def __init__(self):
        self.cache_step = self.aux_step = 0

    def current_step(self):
        return self.cache_step, self.aux_step

    def advance_step(self, delta_cache_step, delta_aux_step):
        self.cache_step = (self.cache_step + delta_cache_step) % self.COUNT_NUM_MAX
        self.aux_step = (self.aux_step + delta_aux_step) % self.COUNT_NUM_MAX

    @staticmethod
    def is_step_ready(current, target):
        m = StepCounter.COUNT_NUM_MAX
        return target != current and ((target + m - current) % m) > m // 2


class TransferKVChunk:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class ManagerBase:
    """What the seed inherits from MooncakeKVManagerPrefill/DisaggManagerBase
    that its gating uses (spec 5.1)."""

    def __init__(self, *a, **k):
        pass

    def check_status(self, room):
        return self.request_status[room]

    def update_status(self, room, status):
        if room not in self.request_status:
            self.request_status[room] = status
        elif status == TransferPoll.Failed or self.request_status[room] == TransferPoll.Failed:
            self.request_status[room] = TransferPoll.Failed
        else:
            self.request_status[room] = max(self.request_status[room], status)

    def record_failure(self, room, reason):
        self.failure_records[room] = reason


def group_concurrent_contiguous(src_indices, dst_indices):
    if src_indices.size == 0:
        return [], []
    brk = np.where((np.diff(src_indices) != 1) | (np.diff(dst_indices) != 1))[0] + 1
    return ([g.tolist() for g in np.split(src_indices, brk)],
            [g.tolist() for g in np.split(dst_indices, brk)])


def load_seed(path=None):
    """The seed module, or None when the seed file is not there."""
    path = path or seed_path()
    if path is None:
        return None

    def mod(name, **kw):
        m = types.ModuleType(name)
        m.__dict__.update(kw)
        sys.modules[name] = m

    class _E:
        pass

    for name in ("tokenspeed", "tokenspeed.runtime", "tokenspeed.runtime.pd", "tokenspeed.runtime.pd.base",
                 "tokenspeed.runtime.pd.mooncake"):
        mod(name)
    mod("tokenspeed.runtime.pd.base.status", TransferPoll=TransferPoll)
    mod("tokenspeed.runtime.pd.mooncake.entities", KVArgs=_E, TransferInfo=_E, TransferKVChunk=TransferKVChunk)
    mod("tokenspeed.runtime.pd.mooncake.prefill", MooncakeKVManagerPrefill=ManagerBase)
    mod("tokenspeed.runtime.pd.utils", DisaggregationMode=DisaggregationMode, FastQueue=FastQueue,
        StepCounter=StepCounter, group_concurrent_contiguous=group_concurrent_contiguous)
    mod("tokenspeed.runtime.utils", get_colorful_logger=logging.getLogger)
    mod("tokenspeed.runtime.utils.server_args", ServerArgs=_E)
    spec = importlib.util.spec_from_file_location("seed_async_conn", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def seed_manager(seed, layer_num, mode=DisaggregationMode.PREFILL):
    """A seed manager in the state its constructor would leave (which cannot
    run: spec 0.1), with one transfer queue and a CPU step counter."""
    m = object.__new__(seed.MooncakeAsyncKVManager)
    m.disaggregation_mode = mode
    m.request_status, m.failure_records, m.transfer_infos = {}, {}, {}
    m.transfer_queues = [FastQueue()]
    m.current_transfer_batch = []
    m.layer_num = layer_num
    m.submit_interval = 1
    m.register_step_counter(StepCounter())
    return m
