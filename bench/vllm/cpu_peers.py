"""vLLM's own connectors for `make bench-vllm` on a CPU engine, loaded by
vLLM's factory through kv_connector_module_path "cpu_peers" (bench/vllm on
PYTHONPATH). Every adjustment is here and in docs/bench.md ("In the engine");
none changes how a peer moves its bytes:

* MooncakeConnector: its worker asks torch.accelerator.current_device_index()
  unconditionally, which raises without a GPU driver (the pinned torch is a
  CUDA build run on the CPU). On vLLM's CPU platform that call answers 0 (the
  one CPU device) while the worker is made, then torch's own is back.
* NixlConnector: as shipped, its worker pins its own main thread (the
  engine's OpenMP thread 0 and every thread it starts after) to the last core
  of each NUMA node, reserving it for the KV transfer: on one node P and D then
  share one core. With LC_BENCH_NIXL_AFFINITY=keep (run.py's "nixl") that call
  is left as is; with "skip" ("nixl-unpinned") it is not made, the threads
  keep the affinity the engine gave them. run.py runs both and the report
  takes NIXL's better figure as the peer's."""
import contextlib
import os

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake import mooncake_connector as _mc
from vllm.distributed.kv_transfer.kv_connector.v1.nixl import base_worker as _nx
from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import NixlConnector  # noqa: F401
from vllm.platforms import current_platform

MooncakeConnector = _mc.MooncakeConnector
_worker_init = _mc.MooncakeConnectorWorker.__init__


@contextlib.contextmanager
def _cpu_device_index():
    if not current_platform.is_cpu():
        yield
        return
    orig = torch.accelerator.current_device_index
    torch.accelerator.current_device_index = lambda: 0
    try:
        yield
    finally:
        torch.accelerator.current_device_index = orig


def _init(self, *a, **kw):
    with _cpu_device_index():
        _worker_init(self, *a, **kw)


_mc.MooncakeConnectorWorker.__init__ = _init


_nixl_init = _nx.NixlBaseConnectorWorker.__init__


@contextlib.contextmanager
def _nixl_affinity():
    if os.environ.get("LC_BENCH_NIXL_AFFINITY", "keep") != "skip":
        yield
        return
    orig = _nx.os.sched_setaffinity
    _nx.os.sched_setaffinity = lambda pid, cores: None
    try:
        yield
    finally:
        _nx.os.sched_setaffinity = orig


def _nixl_worker_init(self, *a, **kw):
    with _nixl_affinity():
        _nixl_init(self, *a, **kw)


_nx.NixlBaseConnectorWorker.__init__ = _nixl_worker_init
