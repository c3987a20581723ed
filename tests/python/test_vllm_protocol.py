"""The vLLM connector's edge: kv_transfer_params (whatever an HTTP client of
vLLM's OpenAI server writes) and kv_connector_extra_config are parsed in one
place (layercake.vllm.protocol, layercake.vllm.config), which needs no vLLM.
Every hostile value is refused with a reason (BadRequest), never another
exception; D contacts only allowed bootstrap addresses."""
import random

import pytest

from layercake.vllm import config, protocol
from layercake.vllm.protocol import AddressPolicy, BadRequest, parse

LOOP = AddressPolicy.default(None)
PAIR = "0123456789abcdef" * 2


def d_params(**kw):
    p = {"layercake_room": 7, "layercake_pair": PAIR, "layercake_bootstrap": "127.0.0.1:8998"}
    p.update(kw)
    return p


def test_layercake_shape():
    t = parse(d_params(), False, LOOP)
    assert (t.room, t.pair, t.bootstrap, t.shape) == (7, bytes.fromhex(PAIR), "127.0.0.1:8998",
                                                       "layercake")
    t = parse({"layercake_room": 7, "layercake_pair": PAIR}, True, LOOP)
    assert t.bootstrap is None and t.room == 7
    assert parse(None, True, LOOP) is None
    assert parse({"unrelated": 1}, False, LOOP) is None


def test_router_shape_pairs_p_and_d():
    tid = "6f1c2a4e-3d0b-4b7e-9f55-0c2d8a1b9e77"
    p = parse({"do_remote_decode": True, "transfer_id": tid}, True, LOOP)
    d = parse({"do_remote_prefill": True, "transfer_id": tid,
               "remote_bootstrap_addr": "http://127.0.0.1:8998", "remote_engine_id": "e"},
              False, LOOP)
    assert (p.room, p.pair) == (d.room, d.pair) and len(p.pair) == 32
    assert d.bootstrap == "127.0.0.1:8998"
    other = parse({"do_remote_decode": True, "transfer_id": tid[:-1] + "8"}, True, LOOP)
    assert other.room != p.room and other.pair != p.pair
    # P first (NIXL's proxy): P names the transfer and returns it for D.
    p1 = parse({"do_remote_decode": True}, True, LOOP)
    reply = p1.reply("127.0.0.1:8998", "eng")
    d1 = parse(reply, False, LOOP)
    assert (d1.room, d1.pair) == (p1.room, p1.pair)
    # A flag for the other side is not a transfer from this one.
    assert parse({"do_remote_prefill": True, "transfer_id": tid}, True, LOOP) is None


@pytest.mark.parametrize("bad,why", [
    ("x", "an object"),
    ([1], "an object"),
    ({"layercake_room": "5", "layercake_pair": PAIR}, "an integer"),
    ({"layercake_room": True, "layercake_pair": PAIR}, "an integer"),
    ({"layercake_room": 0, "layercake_pair": PAIR}, "out of range"),
    ({"layercake_room": -3, "layercake_pair": PAIR}, "out of range"),
    ({"layercake_room": 1 << 63, "layercake_pair": PAIR}, "out of range"),
    ({"layercake_room": 1.5, "layercake_pair": PAIR}, "an integer"),
    ({"layercake_room": 5}, "no pairing value"),
    ({"layercake_room": 5, "layercake_pair": "ab"}, "hex digits"),
    ({"layercake_room": 5, "layercake_pair": "zz" * 16}, "hex digits"),
    ({"layercake_room": 5, "layercake_pair": 12345}, "a hex string"),
    ({"do_remote_decode": "yes", "transfer_id": "t" * 20}, "true or false"),
    ({"do_remote_decode": True, "transfer_id": "short"}, "printable"),
    ({"do_remote_decode": True, "transfer_id": "with space in it!!"}, "printable"),
    ({"do_remote_decode": True, "transfer_id": 12345678901234567890}, "a string"),
    ({"do_remote_decode": True, "transfer_id": "t" * 300}, "printable"),
])
def test_p_refuses(bad, why):
    with pytest.raises(BadRequest, match=why):
        parse(bad, True, LOOP)


@pytest.mark.parametrize("boot,why", [
    (8998, "string"),
    ("127.0.0.1", "host:port"),
    ("127.0.0.1:0", "port"),
    ("127.0.0.1:65536", "port"),
    ("127.0.0.1:-1", "port"),
    ("bad host:1", "host name"),
    ("[::1:1", "v6"),
    ("x" * 400 + ":1", "characters"),
    ("10.1.2.3:8998", "not allowed"),
    ("169.254.169.254:80", "not allowed"),
    ("example.com:8998", "not allowed"),
])
def test_d_refuses_address(boot, why):
    with pytest.raises(BadRequest, match=why):
        parse(d_params(layercake_bootstrap=boot), False, LOOP)


def test_d_needs_a_bootstrap():
    p = d_params()
    del p["layercake_bootstrap"]
    with pytest.raises(BadRequest, match="no P bootstrap address"):
        parse(p, False, LOOP)
    own = AddressPolicy.default("10.0.0.5:8998")
    t = parse(p, False, own, default_bootstrap="10.0.0.5:8998")
    assert t.bootstrap == "10.0.0.5:8998"
    # With a bootstrap in the config, loopback is no longer allowed by default.
    with pytest.raises(BadRequest, match="not allowed"):
        parse(d_params(), False, own)


def test_allow_list_forms():
    pol = AddressPolicy(["10.0.0.0/8", "p.example:8998", "[fd00::/8]:7000", "192.168.1.7"])
    assert pol.allows("10.2.3.4", 1) and pol.allows("192.168.1.7", 9)
    assert not pol.allows("11.0.0.1", 8998) and not pol.allows("127.0.0.1", 8998)
    assert pol.allows("p.example", 8998) and pol.allows("P.EXAMPLE", 8998)
    assert not pol.allows("p.example", 8999) and not pol.allows("q.example", 8998)
    assert pol.allows("fd00::1", 7000) and not pol.allows("fd00::1", 7001)
    assert AddressPolicy(["*"]).allows("203.0.113.9", 1)
    with pytest.raises(ValueError):
        AddressPolicy(["not a host!"])


def test_unpaired_allowed_only_when_configured():
    p = {"layercake_room": 9, "layercake_bootstrap": "127.0.0.1:1"}
    with pytest.raises(BadRequest):
        parse(p, False, LOOP)
    assert parse(p, False, LOOP, require_pairing=False).pair is None


HOSTILE = [None, True, False, 0, -1, 1, 2 ** 31, 2 ** 63, 2 ** 64, -2 ** 200, 1e308,
           float("nan"), float("inf"), "", "1", "x" * 100_000, "\x00", "\udcff", "é" * 50,
           [], [1, 2], {}, {"a": {"b": []}}, b"bytes", PAIR, "127.0.0.1:8998",
           "http://127.0.0.1:8998", "[::1]:8998", "6f1c2a4e-3d0b-4b7e-9f55-0c2d8a1b9e77"]
KEYS = ["layercake_room", "layercake_pair", "layercake_bootstrap", "do_remote_decode",
        "do_remote_prefill", "transfer_id", "remote_bootstrap_addr", "remote_engine_id",
        "remote_block_ids", "unknown_key"]


def test_fuzz_never_raises_anything_else():
    rng = random.Random(1234)
    ok = refused = 0
    for _ in range(20000):
        raw = {k: rng.choice(HOSTILE) for k in rng.sample(KEYS, rng.randint(0, len(KEYS)))}
        if rng.random() < 0.05:
            raw = rng.choice(HOSTILE)
        for producer in (True, False):
            try:
                t = parse(raw, producer, LOOP, default_bootstrap=rng.choice([None, "127.0.0.1:1"]))
            except BadRequest as e:
                assert str(e) and e.kind
                refused += 1
                continue
            if t is not None:
                ok += 1
                assert 1 <= t.room < 2 ** 63
                assert t.pair is not None and len(t.pair) >= 16
                assert producer or LOOP.allows(*protocol.split_hostport(t.bootstrap, "b"))
    assert ok and refused


def test_config_table():
    c = config.parse_config(None)
    for key, default, _, doc in config.CONFIG:
        assert getattr(c, key) == default and doc
    with pytest.raises(config.ConfigError, match="unknown key"):
        config.parse_config({"bootstrap_prot": 1})
    with pytest.raises(config.ConfigError, match="bootstrap_port"):
        config.parse_config({"bootstrap_port": "8998"})
    with pytest.raises(config.ConfigError, match="load_mode"):
        config.parse_config({"load_mode": "sync"})
    with pytest.raises(config.ConfigError, match="bootstrap_timeout_s"):
        config.parse_config({"bootstrap_timeout_s": -1})
    assert config.parse_config({"allowed_bootstrap": "10.0.0.0/8, 127.0.0.1"}).allowed_bootstrap == [
        "10.0.0.0/8", "127.0.0.1"]


def test_docs_config_table_matches_code():
    """docs/vllm.md's table of kv_connector_extra_config and config.CONFIG:
    the same keys, the same defaults, both ways."""
    import json
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    text = open(os.path.join(root, "docs", "vllm.md")).read()
    table = text.split("<!-- config-table begin -->")[1].split("<!-- config-table end -->")[0]
    rows = {}
    for line in table.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        key, default = cells[0].strip("`"), cells[1]
        rows[key] = None if default == "none" else json.loads(default.strip("`"))
    code = {k: d for k, d, _, _ in config.CONFIG}
    assert rows == code
