"""The online path: P and D as two OpenAI-compatible vLLM servers (the
`vllm serve` server, started as `python -m vllm.entrypoints.openai.api_server`:
see docs/vllm.md for why not the `vllm` script) with layercake.vllm, and
examples/vllm/proxy.py in front of them, all on loopback. Completions sent to
the proxy must carry D's greedy tokens equal to one engine's alone (the
offline reference of tests/vllm/engine_peer.py), with every prompt token but
the last taken from the connector (D's cached_tokens).

The same servers then take hostile requests straight at P and D (issue 43,
findings 1-3: a request body is untrusted input): each fails alone with an
error the client sees, no engine stops, D contacts no address outside its
allow-list, and the honest requests after them still get their tokens. And
the routers' protocol: P's bootstrap answers GET /query as the Mooncake
connector's does, and the Mooncake connector's fields go through the proxy,
streamed (server-sent events), 12 at once, in both dispatch orders. Last,
aborts (a client that hangs up) at P and at D in the states that real
servers reach deterministically: the other side ends within 2 s and both
engines' KV usage returns to 0."""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import tiny_llama  # noqa: E402

PEER = os.path.join(HERE, "engine_peer.py")
PROXY = os.path.join(ROOT, "examples", "vllm", "proxy.py")
LENGTHS = [7, 64, 150]
MAX_TOKENS = 8


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server(tmp, name, model, port, role, extra):
    cfg = {"kv_connector": "LayercakeConnector", "kv_connector_module_path": "layercake.vllm",
           "kv_role": role, "kv_connector_extra_config": extra}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--host", "127.0.0.1", "--port", str(port), "--skip-tokenizer-init",
           "--enforce-eager", "--dtype", "float32", "--block-size", "32",
           "--max-model-len", "512", "--no-enable-prefix-caching", "--seed", "0",
           "--enable-prompt-tokens-details", "--kv-transfer-config", json.dumps(cfg)]
    env = dict(os.environ, VLLM_NO_USAGE_STATS="1", HF_HUB_OFFLINE="1",
               VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind")
    log = open(tmp / f"{name}.log", "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log


def wait_http(url, procs, tmp, deadline_s=300):
    t0 = time.monotonic()
    while True:
        for name, p in procs.items():
            assert p.poll() is None, f"{name} exited: " + (tmp / f"{name}.log").read_text()[-4000:]
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        assert time.monotonic() - t0 < deadline_s, f"{url} not up after {deadline_s} s"
        time.sleep(1)


def post(addr, body, timeout=300):
    """(status, parsed JSON or raw text) of a POST /v1/completions."""
    req = urllib.request.Request(f"http://{addr}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, data = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, data = e.code, e.read()
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data.decode(errors="replace")


def body_of(model, prompt, **kw):
    return dict({"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
                 "ignore_eos": True, "return_token_ids": True}, **kw)


def complete(addr, model, prompt):
    status, out = post(addr, body_of(model, prompt))
    assert status == 200, out
    return out


def complete_stream(addr, model, prompt):
    """Token ids of a streamed completion (server-sent events)."""
    body = body_of(model, prompt, stream=True)
    req = urllib.request.Request(f"http://{addr}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    toks, events = [], 0
    with urllib.request.urlopen(req, timeout=300) as r:
        assert r.headers.get("Content-Type", "").startswith("text/event-stream"), r.headers
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            events += 1
            ch = json.loads(line[6:])["choices"][0]
            toks += ch.get("token_ids") or []
    assert events >= 2, events  # streamed, not one answer
    return toks


def start_proxy(tmp, procs, logs, name, pp, dp, bs, *args):
    addr_file = tmp / f"{name}.addr"
    log = open(tmp / f"{name}.log", "w")
    logs.append(log)
    procs[name] = subprocess.Popen(
        [sys.executable, PROXY, "--prefill", f"http://127.0.0.1:{pp}",
         "--decode", f"http://127.0.0.1:{dp}", "--bootstrap", bs, "--port", "0",
         "--addr-file", str(addr_file), *args], stdout=log, stderr=subprocess.STDOUT)
    t0 = time.monotonic()
    while not addr_file.exists():
        assert procs[name].poll() is None, (tmp / f"{name}.log").read_text()
        assert time.monotonic() - t0 < 60, "proxy did not listen"
        time.sleep(0.2)
    return addr_file.read_text().strip()


class FakeBootstrap:
    """An HTTP server on loopback that counts every request (a bootstrap
    address an attacker names)."""

    def __init__(self):
        hits = self.hits = []

        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                hits.append(self.path)
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.addr = f"127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture(scope="module")
def pd(tmp_path_factory):
    """P and D servers, the reference tokens, and proxies in each mode."""
    tmp_path = tmp_path_factory.mktemp("serve")
    model = tiny_llama.write(str(tmp_path / "model"), seed=0)
    ps = [[(i * 37 + k * 11) % 500 + 3 for k in range(n)] for i, n in enumerate(LENGTHS)]
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(ps))
    pp, dp, bport = free_port(), free_port(), free_port()
    bs = f"127.0.0.1:{bport}"
    procs, logs = {}, []
    try:
        # The reference (one engine alone) runs while the servers start.
        rlog = open(tmp_path / "ref.log", "w")
        logs.append(rlog)
        ref = subprocess.Popen([sys.executable, PEER, "--role", "ref", "--model", str(model),
                                "--prompts", str(prompts), "--out", str(tmp_path / "ref.json")],
                               stdout=rlog, stderr=subprocess.STDOUT,
                               env=dict(os.environ, LC_VLLM_MAX_TOKENS=str(MAX_TOKENS)))
        # D names P's bootstrap in its config: its allow-list is that address alone.
        for name, port, role, extra in (
                ("P", pp, "kv_producer", {"bootstrap_port": bport, "bootstrap_timeout_s": 20}),
                ("D", dp, "kv_consumer", {"bootstrap": bs, "bootstrap_timeout_s": 20})):
            procs[name], log = server(tmp_path, name, model, port, role, extra)
            logs.append(log)
        for port in (pp, dp):
            wait_http(f"http://127.0.0.1:{port}/health", procs, tmp_path)
        proxies = {
            "layercake": start_proxy(tmp_path, procs, logs, "proxy", pp, dp, bs),
            "mooncake": start_proxy(tmp_path, procs, logs, "proxy-mc", pp, dp, bs,
                                    "--protocol", "mooncake"),
            "mooncake-p-first": start_proxy(tmp_path, procs, logs, "proxy-mc-pf", pp, dp, bs,
                                            "--protocol", "mooncake", "--order", "p-first"),
        }
        assert ref.wait(timeout=600) == 0, (tmp_path / "ref.log").read_text()[-4000:]
        want = json.loads((tmp_path / "ref.json").read_text())["tokens"]
        yield dict(tmp=tmp_path, model=str(model), prompts=ps, want=want, pp=pp, dp=dp, bs=bs,
                   proxies=proxies, procs=procs)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs:
            f.close()


def proxy_stats(addr):
    with urllib.request.urlopen(f"http://{addr}/proxy/stats", timeout=10) as r:
        return json.loads(r.read())


def alive(pd):
    for name in ("P", "D"):
        assert pd["procs"][name].poll() is None, (pd["tmp"] / f"{name}.log").read_text()[-4000:]
        with urllib.request.urlopen(f"http://127.0.0.1:{pd[name.lower() + 'p']}/health",
                                    timeout=10) as r:
            assert r.status == 200


def test_proxy_two_servers(pd):
    addr, model, ps, want = pd["proxies"]["layercake"], pd["model"], pd["prompts"], pd["want"]

    def one(p):
        return complete(addr, model, p)

    got = [one(ps[0])]  # one alone, then two at once
    with ThreadPoolExecutor(2) as ex:
        got += list(ex.map(one, ps[1:]))
    toks = [g["choices"][0]["token_ids"] for g in got]
    same = sum(a == b for a, b in zip(toks, want))
    print(f"tokens identical (proxy, two vllm servers): {same} of {len(want)}")
    assert same == len(want), (toks, want)
    cached = [(g["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") for g in got]
    assert cached == LENGTHS, cached  # D computed none of the prompt itself
    st = proxy_stats(addr)
    assert st == {"requests": 3, "p_errors": 0, "d_errors": 0, "client_gone": 0}, st


HOSTILE_P = [
    {"layercake_room": "12345", "layercake_pair": "ab" * 16},
    {"layercake_room": 2 ** 64 - 1, "layercake_pair": "ab" * 16},
    {"layercake_room": 77, "layercake_pair": 5},
    {"layercake_room": 78},  # no pairing value
    {"do_remote_decode": "yes", "transfer_id": "x" * 40},
    "not an object",
]


def test_hostile_requests_fail_alone(pd):
    """Findings 1 and 2 of issue 43, through vLLM's OpenAI servers."""
    model, ps, want = pd["model"], pd["prompts"], pd["want"]
    p_addr, d_addr = f"127.0.0.1:{pd['pp']}", f"127.0.0.1:{pd['dp']}"
    fake = FakeBootstrap()
    try:
        for kvp in HOSTILE_P:
            status, out = post(p_addr, body_of(model, ps[0], max_tokens=1, kv_transfer_params=kvp))
            assert status != 200 or out["choices"][0]["finish_reason"] == "error", (kvp, out)
            alive(pd)
        # Two requests with the same room at P at once: the second is refused,
        # the first is served (P holds it for D's grant, then gives up).
        same = {"layercake_room": 4242, "layercake_pair": "cd" * 16}
        with ThreadPoolExecutor(2) as ex:
            outs = list(ex.map(lambda _: post(p_addr, body_of(model, ps[0], max_tokens=1,
                                                              kv_transfer_params=same)), range(2)))
        errors = sum(s != 200 or o["choices"][0]["finish_reason"] == "error" for s, o in outs)
        assert errors >= 1, outs
        alive(pd)
        hostile_d = [
            {"layercake_room": 9, "layercake_pair": "ab" * 16, "layercake_bootstrap": 8998},
            {"layercake_room": 9, "layercake_pair": "ab" * 16, "layercake_bootstrap": fake.addr},
            {"do_remote_prefill": True, "transfer_id": "y" * 40,
             "remote_bootstrap_addr": f"http://{fake.addr}"},
            {"layercake_room": 10, "layercake_pair": "ab" * 16,
             "layercake_bootstrap": "169.254.169.254:80"},
            {"layercake_room": [1], "layercake_bootstrap": pd["bs"]},
        ]
        for kvp in hostile_d:
            status, out = post(d_addr, body_of(model, ps[0], kv_transfer_params=kvp))
            assert status != 200 or out["choices"][0]["finish_reason"] == "error", (kvp, out)
            alive(pd)
        assert fake.hits == [], fake.hits  # D never contacted the address a request named
    finally:
        fake.close()
    # The honest path still serves, tokens unchanged.
    got = complete(pd["proxies"]["layercake"], model, ps[1])
    assert got["choices"][0]["token_ids"] == want[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_bootstrap_query(pd):
    """GET /query on P's bootstrap answers as the Mooncake connector's
    bootstrap server does ({dp_rank: {"engine_id", "worker_addr"}}), and the
    engine id is the one P names in its answers: a router that sends P
    first and copies P's kv_transfer_params to D, as NIXL's proxy does,
    gets D's tokens equal to the engine alone."""
    q = get_json(f"http://{pd['bs']}/query")
    assert list(q) == ["0"], q
    eid = q["0"]["engine_id"]
    assert isinstance(eid, str) and eid, q
    assert q["0"]["worker_addr"]["0"]["0"].startswith("tcp://127.0.0.1:"), q
    model, ps, want = pd["model"], pd["prompts"], pd["want"]
    status, out = post(f"127.0.0.1:{pd['pp']}", body_of(
        model, ps[1], max_tokens=1, kv_transfer_params={"do_remote_decode": True}))
    assert status == 200, out
    kvp = out["kv_transfer_params"]
    assert kvp["remote_engine_id"] == eid and kvp["remote_bootstrap_addr"] == f"http://{pd['bs']}"
    status, out = post(f"127.0.0.1:{pd['dp']}", body_of(model, ps[1], kv_transfer_params=kvp))
    assert status == 200 and out["choices"][0]["token_ids"] == want[1], out
    # Bad methods and parameters: refused with the reason.
    for method, path, code in (("POST", "/query", 405), ("GET", "/query?engine_rank=0", 400)):
        req = urllib.request.Request(f"http://{pd['bs']}{path}", method=method,
                                     data=b"{}" if method == "POST" else None)
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == code, (method, path, e.value.code)
    alive(pd)


@pytest.mark.parametrize("order", ["together", "p-first"])
def test_router_fields_streamed(pd, order):
    """The Mooncake connector's request fields, as llm-d's sidecar and
    vLLM's proxies send them, streamed; 12 requests at once, in both
    dispatch orders: P and D at once (llm-d's sidecar), P first and D with
    what P returned (NIXL's proxy)."""
    name = "mooncake" if order == "together" else "mooncake-p-first"
    addr, model, ps, want = pd["proxies"][name], pd["model"], pd["prompts"], pd["want"]
    jobs = [i % len(ps) for i in range(12)]
    with ThreadPoolExecutor(12) as ex:
        toks = list(ex.map(lambda i: complete_stream(addr, model, ps[i]), jobs))
    bad = [(i, t) for i, t in zip(jobs, toks) if t != want[i]]
    print(f"tokens identical (mooncake fields, {order}, streamed, 12 at once): "
          f"{12 - len(bad)} of 12")
    assert not bad, bad
    st = proxy_stats(addr)
    assert st["requests"] == 12 and st["p_errors"] == 0 and st["d_errors"] == 0, st
    # D's requests named P's engine, as the bootstrap's GET /query tells it.
    assert st["engine_id"] == get_json(f"http://{pd['bs']}/query")["0"]["engine_id"], st


def test_metrics_on_vllm(pd):
    """vLLM's /metrics on P and D carry the connector's series after a run
    (the tests above ran requests through both)."""
    complete(pd["proxies"]["layercake"], pd["model"], pd["prompts"][0])
    # One request D refuses (an address its allow-list lacks): counted by kind.
    status, out = post(f"127.0.0.1:{pd['dp']}", body_of(
        pd["model"], pd["prompts"][0], kv_transfer_params={
            "layercake_room": 31, "layercake_pair": "ab" * 16,
            "layercake_bootstrap": "127.0.0.9:8998"}))
    assert status != 200 or out["choices"][0]["finish_reason"] == "error", out
    for name in ("P", "D"):
        deadline = time.monotonic() + 30  # vLLM's stats reach its logger a step later
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{pd[name.lower() + 'p']}/metrics",
                                        timeout=10) as r:
                text = r.read().decode()
            ok = [ln for ln in text.splitlines()
                  if ln.startswith("vllm:layercake_events_total") and 'event="rooms_ok"' in ln]
            if ok and float(ok[0].rsplit(" ", 1)[1]) >= 1:
                break
            assert time.monotonic() < deadline, (name, [ln for ln in text.splitlines()
                                                        if "layercake" in ln][:20])
            time.sleep(1)
        assert "vllm:layercake_transfer_seconds_bucket" in text, name
    deadline = time.monotonic() + 30
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{pd['dp']}/metrics", timeout=10) as r:
            text = r.read().decode()
        if 'event="refused_not_allowed"' in text:
            break
        assert time.monotonic() < deadline, [ln for ln in text.splitlines()
                                             if "layercake_events" in ln]
        time.sleep(1)


def gauge(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    vals = [float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
            if ln.startswith(name + "{") or ln.startswith(name + " ")]
    return sum(vals)


class Stream:
    """A streaming completion on a raw socket, so that the test can hang
    up: vLLM's server aborts the request of a client that disconnects."""

    def __init__(self, addr, body):
        host, port = addr.split(":")
        data = json.dumps(dict(body, stream=True)).encode()
        self.s = socket.create_connection((host, int(port)), timeout=60)
        self.s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                       b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                       % (len(data), data))
        self.got = b""

    def first_event(self):
        """Wait for the first server-sent event (the engine is decoding)."""
        while b"data: " not in self.got:
            chunk = self.s.recv(4096)
            assert chunk, self.got
            self.got += chunk

    def ended(self, deadline_s):
        """Read to the end of the answer (the server closes: Connection:
        close); the seconds it took, None if it had not ended by then."""
        t0 = time.monotonic()
        self.s.settimeout(0.1)
        while time.monotonic() - t0 < deadline_s:
            try:
                chunk = self.s.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                return time.monotonic() - t0
            self.got += chunk
        return None

    def failed(self):
        """The answer was an error: a status other than 200, or an error
        event / finish_reason in the stream."""
        head = self.got.split(b"\r\n", 1)[0]
        return b" 200 " not in head or b'"error"' in self.got or b'"abort"' in self.got

    def close(self):
        self.s.close()


def busy(pd):
    """{engine: (requests running + waiting, KV cache usage)}."""
    out = {}
    for n in ("P", "D"):
        port = pd[n.lower() + "p"]
        out[n] = (gauge(port, "vllm:num_requests_running") + gauge(port, "vllm:num_requests_waiting"),
                  gauge(port, "vllm:kv_cache_usage_perc"))
    return out


def wait_idle(pd, deadline_s):
    """Seconds until both engines run no request and hold no KV; fails
    after deadline_s with what each still holds."""
    t0 = time.monotonic()
    while True:
        b = busy(pd)
        if all(v == (0, 0) for v in b.values()):
            return time.monotonic() - t0
        assert time.monotonic() - t0 < deadline_s, b
        time.sleep(0.1)


def test_client_disconnect_reaches_both(pd):
    """A client that goes away mid-stream: the proxy closes its requests to P
    and D, both engines abort, and both return to no request running and no
    KV in use."""
    addr, model = pd["proxies"]["layercake"], pd["model"]
    st = Stream(addr, body_of(model, pd["prompts"][2], max_tokens=300))
    st.first_event()  # D is decoding
    st.close()
    took = wait_idle(pd, 45)  # a room of an earlier test may still hold P
    print(f"client gone: both engines idle {took:.2f} s later")
    assert proxy_stats(addr)["client_gone"] >= 1


def router_fields(pd, tid):
    """(P's kv_transfer_params, D's) of transfer tid, the routers' shape."""
    return ({"do_remote_decode": True, "transfer_id": tid},
            {"do_remote_prefill": True, "transfer_id": tid,
             "remote_bootstrap_addr": f"http://{pd['bs']}"})


def test_abort_at_p_while_held(pd):
    """An abort at P while P holds a room's chunks for a D that has not come
    (the room still bootstrapping): D's request for that room, sent once
    vLLM has aborted P's, fails within 2 s (not after bootstrap_timeout_s),
    and both engines return to no request and no KV."""
    model, ps = pd["model"], pd["prompts"]
    p_addr, d_addr = f"127.0.0.1:{pd['pp']}", f"127.0.0.1:{pd['dp']}"
    wait_idle(pd, 45)
    p_kvp, d_kvp = router_fields(pd, str(uuid.uuid4()))
    p = Stream(p_addr, body_of(model, ps[2], max_tokens=300, kv_transfer_params=p_kvp))
    p.first_event()  # prefilled: the chunks wait for D in P's engine
    p.close()
    deadline = time.monotonic() + 30
    while busy(pd)["P"][0]:  # vLLM has aborted P's request
        assert time.monotonic() < deadline, busy(pd)
        time.sleep(0.05)
    d = Stream(d_addr, body_of(model, ps[2], kv_transfer_params=d_kvp))
    took = d.ended(30)
    d.close()
    assert took is not None, "D's request still waits 30 s after P's abort"
    print(f"abort at P (held, room bootstrapping): D's request ended {took:.2f} s after "
          f"it was sent")
    assert d.failed(), d.got[-2000:]
    assert took < 2, f"D's request ended {took:.2f} s after it was sent"
    print(f"both idle {wait_idle(pd, 5):.2f} s later")
    alive(pd)


def test_abort_at_p_after_it_sent(pd):
    """An abort at P after P's KV went to D (D came first and waited; P's
    request goes on decoding): D's request is not disturbed, its tokens
    equal the engine alone's, and both engines return to no request and no
    KV."""
    model, ps, want = pd["model"], pd["prompts"], pd["want"]
    p_addr, d_addr = f"127.0.0.1:{pd['pp']}", f"127.0.0.1:{pd['dp']}"
    wait_idle(pd, 45)
    p_kvp, d_kvp = router_fields(pd, str(uuid.uuid4()))
    with ThreadPoolExecutor(1) as ex:
        fd = ex.submit(post, d_addr, body_of(model, ps[2], kv_transfer_params=d_kvp))
        deadline = time.monotonic() + 60
        while busy(pd)["D"][0] < 1:  # D's request waits for P
            assert time.monotonic() < deadline, busy(pd)
            time.sleep(0.05)
        p = Stream(p_addr, body_of(model, ps[2], max_tokens=300, kv_transfer_params=p_kvp))
        p.first_event()
        p.close()
        status, out = fd.result(timeout=60)
    assert status == 200 and out["choices"][0]["token_ids"] == want[2], out
    print(f"abort at P after it sent: D's tokens identical; both idle "
          f"{wait_idle(pd, 5):.2f} s later")


def test_abort_at_d_while_waiting(pd):
    """An abort at D while D's request waits for a P that has not come: P's
    request for that room, sent after, ends and P's blocks come back
    within 2 s (not after bootstrap_timeout_s)."""
    model, ps = pd["model"], pd["prompts"]
    p_addr, d_addr = f"127.0.0.1:{pd['pp']}", f"127.0.0.1:{pd['dp']}"
    wait_idle(pd, 45)
    p_kvp, d_kvp = router_fields(pd, str(uuid.uuid4()))
    d = Stream(d_addr, body_of(model, ps[2], kv_transfer_params=d_kvp))
    deadline = time.monotonic() + 60
    while busy(pd)["D"][0] < 1:  # D's request waits for P
        assert time.monotonic() < deadline, busy(pd)
        time.sleep(0.05)
    d.close()
    t0 = time.monotonic()
    status, out = post(p_addr, body_of(model, ps[2], max_tokens=1, kv_transfer_params=p_kvp))
    wait_idle(pd, 30)
    print(f"abort at D (waiting for P): P's answer HTTP {status}; both idle "
          f"{time.monotonic() - t0:.2f} s after D's abort")
    assert time.monotonic() - t0 < 2, f"P held the room's blocks {time.monotonic() - t0:.2f} s"
    alive(pd)


def test_p_never_gets_the_request(pd):
    """D's request for a room P never receives (P alive, the router lost
    P's half): D fails it after bootstrap_timeout_s (20 s here: the
    library's own deadlines follow it), not after the library's defaults,
    and D's blocks come back."""
    model, ps = pd["model"], pd["prompts"]
    d_addr = f"127.0.0.1:{pd['dp']}"
    wait_idle(pd, 45)
    _, d_kvp = router_fields(pd, str(uuid.uuid4()))
    t0 = time.monotonic()
    status, out = post(d_addr, body_of(model, ps[2], kv_transfer_params=d_kvp))
    took = time.monotonic() - t0
    print(f"P never got the request: D answered HTTP {status} after {took:.1f} s")
    assert status != 200, out
    assert took < 20 + 8, f"D's request failed only after {took:.1f} s"
    wait_idle(pd, 5)
    alive(pd)
