"""vLLM's own connectors for `make bench-vllm` on a CPU engine, loaded by
vLLM's factory through kv_connector_module_path "cpu_peers" (bench/vllm on
PYTHONPATH). Every adjustment is here and in docs/bench.md ("In the engine");
none changes how a peer moves its bytes:

* MooncakeConnector: its worker asks torch.accelerator.current_device_index()
  unconditionally, which raises without a GPU driver (the pinned torch is a
  CUDA build run on the CPU). On vLLM's CPU platform that call answers 0 (the
  one CPU device) while the worker is made, then torch's own is back.
* NixlConnector: unchanged (re-exported so that both peers load alike)."""
import contextlib

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake import mooncake_connector as _mc
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
