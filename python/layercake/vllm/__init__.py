"""layercake as a vLLM KV connector (the v1 connector API), loaded out of tree:

    kv_transfer_config={"kv_connector": "LayercakeConnector",
                        "kv_connector_module_path": "layercake.vllm",
                        "kv_role": "kv_producer" | "kv_consumer",
                        "kv_connector_extra_config": {...}}

One module per role, as vLLM's own connectors: config.py (the extra config,
one table), protocol.py (a request's kv_transfer_params, parsed once at the
edge), scheduler.py (the scheduler side: no sockets), worker.py (the worker
side: the layercake Context and its rooms), metadata.py (what passes
between them), layout.py (vLLM's KV tensors as layercake buffers),
stats.py (counters and rate-limited logs). docs/vllm.md is the guide."""
from .config import CONFIG, ConfigError, parse_config
from .protocol import BadRequest, TransferRequest

# The parts that import vLLM load on first use, so that config and protocol
# (and their tests) need no vLLM.
_LAZY = {"LayercakeConnector": "connector", "build_layout": "layout",
         "describe_kv_caches": "layout", "LayercakeMeta": "metadata",
         "LayercakeWorkerMeta": "metadata"}


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)


__all__ = ["LayercakeConnector", "LayercakeMeta", "LayercakeWorkerMeta", "describe_kv_caches",
           "build_layout", "CONFIG", "ConfigError", "parse_config", "BadRequest",
           "TransferRequest"]
