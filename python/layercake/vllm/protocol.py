"""The request protocol: a request's `kv_transfer_params`, parsed once.

`kv_transfer_params` comes from whoever calls vLLM's OpenAI server, so it is
untrusted input. parse() turns it into a TransferRequest (or None for a
request that asks for no transfer) and raises BadRequest with the reason for
anything else: a wrong type, a number out of range, a malformed or
disallowed address, a missing pairing value. Nothing else in the connector
reads the raw dict.

Two request shapes are understood (docs/vllm.md, "Request fields"):

* layercake's: P {"layercake_room": R, "layercake_pair": H}; D the same plus
  "layercake_bootstrap": "host:port" (P's bootstrap server). R is an integer
  in [1, 2^63), H 32-128 hex digits (at least 128 bits).
* the routers' (vLLM's Mooncake connector, llm-d's sidecar, Dynamo): P
  {"do_remote_decode": true, "transfer_id": T}; D {"do_remote_prefill": true,
  "transfer_id": T, "remote_bootstrap_addr": "http://host:port",
  "remote_engine_id": E}. The room and the pairing value are derived from T
  (a uuid4 carries 122 random bits). A P request with "do_remote_decode" and
  no transfer_id (NIXL's proxy sends P first) gets a fresh one from P, which
  returns it in its response's kv_transfer_params for the router to copy to D.
"""
import hashlib
import ipaddress
import re
import secrets
import uuid
from dataclasses import dataclass

ROOM_KEY = "layercake_room"
PAIR_KEY = "layercake_pair"
BOOTSTRAP_KEY = "layercake_bootstrap"
ROOM_MAX = (1 << 63) - 1
PAIR_HEX_MIN, PAIR_HEX_MAX = 32, 128
TRANSFER_ID_MIN, TRANSFER_ID_MAX = 16, 256
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
_HEX = re.compile(r"^[0-9a-fA-F]+$")
_TID = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII, no spaces


class BadRequest(ValueError):
    """A request's kv_transfer_params are refused; str() is the reason and
    .kind a short label for the counters."""

    def __init__(self, reason, kind="malformed"):
        super().__init__(reason)
        self.kind = kind


@dataclass(frozen=True)
class TransferRequest:
    room: int
    pair: bytes | None
    bootstrap: str | None      # D: P's bootstrap "host:port" (allowed); P: None
    shape: str                 # "layercake" or "router"
    transfer_id: str | None    # router shape: the transfer id
    engine_id: str | None = None

    def reply(self, bootstrap, engine_id):
        """P's kv_transfer_params for D (a router that sends P first copies
        them into D's request), in the shape the request came in."""
        if self.shape == "router":
            return {"do_remote_prefill": True, "do_remote_decode": False,
                    "transfer_id": self.transfer_id,
                    "remote_bootstrap_addr": f"http://{bootstrap}",
                    "remote_engine_id": engine_id}
        out = {ROOM_KEY: self.room, BOOTSTRAP_KEY: bootstrap}
        if self.pair is not None:
            out[PAIR_KEY] = self.pair.hex()
        return out


def derive(transfer_id):
    """(room, pair) of a transfer id: the same on P and D, unguessable
    without the id."""
    b = transfer_id.encode()
    room = int.from_bytes(hashlib.blake2b(b, digest_size=8, person=b"lc-room").digest(), "little")
    room &= ROOM_MAX
    return room or 1, hashlib.blake2b(b, digest_size=32, person=b"lc-pair").digest()


def new_transfer_id():
    return str(uuid.uuid4())


def new_pair():
    return secrets.token_bytes(16)


def split_hostport(s, what):
    """(host, port) of "host:port", "[v6]:port" (and, for the routers'
    field, "http://" before it); BadRequest naming `what` otherwise."""
    if not isinstance(s, str):
        raise BadRequest(f"{what}: a \"host:port\" string, got {type(s).__name__}")
    if len(s) > 300:
        raise BadRequest(f"{what}: {len(s)} characters (at most 300)")
    if s.startswith("["):
        end = s.find("]")
        if end < 0 or s[end + 1:end + 2] != ":":
            raise BadRequest(f"{what}: {s[:80]!r} is not \"[v6]:port\"")
        host, port = s[1:end], s[end + 2:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise BadRequest(f"{what}: {host[:80]!r} is not an IPv6 address") from None
    else:
        host, sep, port = s.rpartition(":")
        if not sep or not host:
            raise BadRequest(f"{what}: {s[:80]!r} is not \"host:port\"")
        if not _HOSTNAME.match(host):
            try:
                ipaddress.IPv4Address(host)
            except ValueError:
                raise BadRequest(f"{what}: {host[:80]!r} is not a host name or address") from None
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise BadRequest(f"{what}: port {port[:20]!r} is not 1..65535")
    return host, int(port)


def join_hostport(host, port):
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class AddressPolicy:
    """Which P bootstrap addresses a request may make D contact. Entries:
    "*" (any), "host", "host:port", "CIDR" or "CIDR:port" ("[v6 CIDR]:port").
    A host name matches only the same name (no lookup here: D resolves it
    later, so a CIDR never admits a name)."""

    def __init__(self, entries):
        self.any = False
        self._nets, self._names = [], []
        for e in entries:
            e = e.strip()
            if e == "*":
                self.any = True
                continue
            port = None
            host = e
            if e.startswith("["):
                end = e.find("]")
                host, rest = e[1:end], e[end + 1:]
                port = int(rest[1:]) if rest.startswith(":") else None
            elif e.count(":") == 1:
                host, p = e.split(":")
                port = int(p)
            try:
                self._nets.append((ipaddress.ip_network(host, strict=False), port))
            except ValueError:
                if not _HOSTNAME.match(host):
                    raise ValueError(f"allowed_bootstrap: {e!r} is not a host, CIDR or "
                                     "host:port") from None
                self._names.append((host.lower(), port))
        self.entries = list(entries)

    @classmethod
    def default(cls, own_bootstrap):
        return cls([own_bootstrap] if own_bootstrap else ["127.0.0.0/8", "::1"])

    def allows(self, host, port):
        if self.any:
            return True
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return any(h == host.lower() and p in (None, port) for h, p in self._names)
        return any(ip.version == n.version and ip in n and p in (None, port)
                   for n, p in self._nets)


def _room(v, key):
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest(f"{key}: an integer, got {type(v).__name__}")
    if not 1 <= v <= ROOM_MAX:
        raise BadRequest(f"{key}: {v} is out of range [1, 2^63)")
    return v


def _pair(v):
    if not isinstance(v, str):
        raise BadRequest(f"{PAIR_KEY}: a hex string, got {type(v).__name__}")
    if not PAIR_HEX_MIN <= len(v) <= PAIR_HEX_MAX or len(v) % 2 or not _HEX.match(v):
        raise BadRequest(f"{PAIR_KEY}: {PAIR_HEX_MIN}-{PAIR_HEX_MAX} hex digits, an even "
                         f"count (got {len(v)} characters)")
    return bytes.fromhex(v)


def _transfer_id(v):
    if not isinstance(v, str):
        raise BadRequest(f"transfer_id: a string, got {type(v).__name__}")
    if not TRANSFER_ID_MIN <= len(v) <= TRANSFER_ID_MAX or not _TID.match(v):
        raise BadRequest(f"transfer_id: {TRANSFER_ID_MIN}-{TRANSFER_ID_MAX} printable "
                         f"characters without spaces (got {len(v)})")
    return v


def _flag(p, key):
    v = p.get(key, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise BadRequest(f"{key}: true or false, got {type(v).__name__}")
    return v


def raw_params(request):
    """The request's kv_transfer_params as vLLM holds them (the OpenAI
    server's field, or SamplingParams.extra_args offline); None if absent."""
    p = getattr(request, "kv_transfer_params", None)
    if p is None:
        sp = getattr(request, "sampling_params", None)
        extra = getattr(sp, "extra_args", None)
        if isinstance(extra, dict):
            p = extra.get("kv_transfer_params")
    return p


def parse(raw, producer, policy, require_pairing=True, default_bootstrap=None):
    """TransferRequest of one request's kv_transfer_params, None when they
    ask for no transfer from this side; BadRequest otherwise."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise BadRequest(f"kv_transfer_params: an object, got {type(raw).__name__}")
    if len(raw) > 64:
        raise BadRequest(f"kv_transfer_params: {len(raw)} keys (at most 64)")
    ours = ROOM_KEY in raw
    remote_decode, remote_prefill = _flag(raw, "do_remote_decode"), _flag(raw, "do_remote_prefill")
    if ours:
        room = _room(raw[ROOM_KEY], ROOM_KEY)
        pair = _pair(raw[PAIR_KEY]) if raw.get(PAIR_KEY) is not None else None
        tid, shape, engine_id = None, "layercake", None
        boot = raw.get(BOOTSTRAP_KEY)
    elif (remote_decode and producer) or (remote_prefill and not producer):
        tid = raw.get("transfer_id")
        if tid is None and producer:
            tid = new_transfer_id()  # P first: P names the transfer
        tid = _transfer_id(tid)
        room, pair = derive(tid)
        shape = "router"
        boot = raw.get("remote_bootstrap_addr")
        engine_id = raw.get("remote_engine_id")
        if engine_id is not None and (not isinstance(engine_id, str) or len(engine_id) > 256):
            raise BadRequest("remote_engine_id: a string of at most 256 characters")
        if isinstance(boot, str):
            if boot.startswith("http://"):
                boot = boot[len("http://"):].rstrip("/")
            elif "://" in boot:
                raise BadRequest("remote_bootstrap_addr: only http:// is served by P's bootstrap")
    else:
        return None
    if pair is None and require_pairing:
        raise BadRequest(f"no pairing value: {PAIR_KEY} (or the routers' transfer_id) is "
                         "required (kv_connector_extra_config require_pairing)", "unpaired")
    if producer:
        return TransferRequest(room, pair, None, shape, tid, engine_id)
    if boot is None:
        boot = default_bootstrap
    if boot is None:
        raise BadRequest("no P bootstrap address: the request names none "
                         f"({BOOTSTRAP_KEY} / remote_bootstrap_addr) and the config has no "
                         "'bootstrap'")
    host, port = split_hostport(boot, BOOTSTRAP_KEY if ours else "remote_bootstrap_addr")
    if not policy.allows(host, port):
        raise BadRequest(f"bootstrap address {join_hostport(host, port)} is not allowed "
                         "(kv_connector_extra_config allowed_bootstrap)", "not_allowed")
    return TransferRequest(room, pair, join_hostport(host, port), shape, tid, engine_id)
