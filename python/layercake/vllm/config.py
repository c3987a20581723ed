"""The connector's configuration: `kv_connector_extra_config`, read once.

CONFIG is the one table of keys (docs/vllm.md's table is checked against it):
key, default, kind, meaning. parse_config() checks every value's type and
range and says which key is wrong; unknown keys are refused (a typo would
otherwise silently keep a default)."""
from dataclasses import dataclass

# (key, default, kind, meaning). kind: "str", "int", "float", "bool", "dict",
# "list", "load_mode". A default of None means "not set".
CONFIG = (
    ("bootstrap_host", "127.0.0.1", "str",
     "P: the address P's bootstrap server binds and advertises"),
    ("bootstrap_port", 0, "port",
     "P: the bootstrap server's port (0: any free one; fixed at TP > 1)"),
    ("bootstrap_file", None, "str",
     "P: write the bootstrap address (host:port) to this file once serving"),
    ("bootstrap", None, "str",
     "D: P's bootstrap address for requests that name none"),
    ("allowed_bootstrap", None, "list",
     "D: the bootstrap addresses a request may name: host, host:port, CIDR, CIDR:port "
     "or \"*\" (default: `bootstrap` if set, else loopback)"),
    ("require_pairing", True, "bool",
     "refuse requests without a pairing value (layercake_pair or transfer_id)"),
    ("shared_secret", None, "str",
     "one secret (32+ printable characters) that authenticates P, D and the bootstrap "
     "routes; unset: $LAYERCAKE_SHARED_SECRET or the file $LAYERCAKE_SHARED_SECRET_FILE "
     "(docs/security.md)"),
    ("listen_url", "tcp://127.0.0.1:0", "str", "D: its data plane's listen URL"),
    ("host", "127.0.0.1", "str", "D: the address of its control socket"),
    ("tp_size", None, "int", "override the TP size (tests driving several workers)"),
    ("tp_rank", None, "int", "override this worker's TP rank"),
    ("bootstrap_timeout_s", 30.0, "float",
     "how long P keeps a request's KV for D's grant, and D waits for its room to bootstrap"),
    ("transfer_timeout_s", 120.0, "float", "a room not ended by then is cancelled (both sides)"),
    ("layerwise_interval", 1, "int", "layers per submission; <= 0 whole-request"),
    ("load_mode", "async", "load_mode",
     "D: async (the request resumes once every byte landed) or per_layer"),
    ("layer_timeout_s", 30.0, "float", "D, per_layer: the longest wait for one layer"),
    ("idle_wait_ms", 10, "int",
     "in a step that computes nothing, sleep up to this long until a transfer changes "
     "(vLLM steps such an engine in a loop; 0 never sleeps)"),
    ("knobs", None, "dict", "layercake Context knobs (`layercake info --config`)"),
    ("timing_file", None, "str", "append JSON lines of per-room timings (benchmarks)"),
)

DEFAULTS = {k: d for k, d, _, _ in CONFIG}


class ConfigError(ValueError):
    pass


def _check(key, kind, v):
    if v is None:
        return None
    if kind == "str":
        if not isinstance(v, str) or not v or len(v) > 4096:
            raise ConfigError(f"kv_connector_extra_config[{key!r}]: a non-empty string, got {v!r}")
        return v
    if kind in ("int", "port"):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"kv_connector_extra_config[{key!r}]: an integer, got {v!r}")
        if kind == "port" and not 0 <= v <= 65535:
            raise ConfigError(f"kv_connector_extra_config[{key!r}]: a port 0..65535, got {v}")
        return v
    if kind == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 86400:
            raise ConfigError(f"kv_connector_extra_config[{key!r}]: seconds in (0, 86400], got {v!r}")
        return float(v)
    if kind == "bool":
        if not isinstance(v, bool):
            raise ConfigError(f"kv_connector_extra_config[{key!r}]: true or false, got {v!r}")
        return v
    if kind == "dict":
        if not isinstance(v, dict):
            raise ConfigError(f"kv_connector_extra_config[{key!r}]: an object, got {v!r}")
        return dict(v)
    if kind == "list":
        if isinstance(v, str):
            v = [s for s in v.replace(",", " ").split() if s]
        if not isinstance(v, (list, tuple)) or not all(isinstance(s, str) for s in v):
            raise ConfigError(f"kv_connector_extra_config[{key!r}]: a list of strings, got {v!r}")
        return list(v)
    if kind == "load_mode":
        if v not in ("async", "per_layer"):
            raise ConfigError(f"kv_connector_extra_config[{key!r}]: async or per_layer, got {v!r}")
        return v
    raise AssertionError(kind)


@dataclass(frozen=True)
class Config:
    values: dict

    def __getattr__(self, key):
        try:
            return self.__dict__["values"][key]
        except KeyError:
            raise AttributeError(key) from None


def parse_config(extra):
    """Config of kv_connector_extra_config (a dict or None); ConfigError
    names the first bad key."""
    extra = dict(extra or {})
    unknown = sorted(set(extra) - set(DEFAULTS))
    if unknown:
        raise ConfigError(f"kv_connector_extra_config: unknown key(s) {unknown}; "
                          f"known: {sorted(DEFAULTS)}")
    out = {}
    for key, default, kind, _ in CONFIG:
        v = _check(key, kind, extra.get(key))
        out[key] = default if v is None else v
    return Config(out)
