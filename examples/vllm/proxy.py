#!/usr/bin/env python3
"""A small HTTP proxy in front of two `vllm serve` processes, P (kv_producer)
and D (kv_consumer), both running layercake.vllm.LayercakeConnector:

    proxy.py --prefill http://127.0.0.1:8100 --decode http://127.0.0.1:8200 \\
             --bootstrap 127.0.0.1:8998 [--port 8000] [--protocol layercake|mooncake]
             [--order together|p-first]

Each POST /v1/completions (or /v1/chat/completions) is split: P gets a copy
with max_tokens=1, D the request as the client sent it, each with the
kv_transfer_params of one transfer:

* --protocol layercake (default): a random room (63 bits) and a random
  pairing value (128 bits): P {"layercake_room", "layercake_pair"}, D the
  same plus "layercake_bootstrap" (P's bootstrap address).
* --protocol mooncake: the fields vLLM's Mooncake connector, llm-d's sidecar
  and Dynamo send: P {"do_remote_decode": true, "transfer_id": uuid4}, D
  {"do_remote_prefill": true, "transfer_id", "remote_bootstrap_addr":
  "http://<bootstrap>", "remote_engine_id"}. The engine id is --engine-id,
  else P's as its bootstrap's GET /query tells it (llm-d's sidecar reads it
  there too), asked until P answers.

--order together (default) sends both at once (D grants its blocks while P
prefills); --order p-first sends P first and copies the kv_transfer_params
of P's answer into D's request, as NIXL's proxy does (P keeps the KV until
D asks for it, within bootstrap_timeout_s).

The client gets D's answer; with "stream": true it is streamed as D sends
it (server-sent events, vLLM's OpenAI format). A client that disconnects
has its upstream requests closed, so both engines abort the request. Any
other path (GET /v1/models, /health) goes to D. GET /proxy/stats counts
requests and each side's errors (and, with --protocol mooncake, names the
engine id D's requests carry).

--bootstrap is P's bootstrap address (kv_connector_extra_config
"bootstrap_port" on P fixes it); --bootstrap-file reads it from the file P's
connector writes ("bootstrap_file"), waiting up to --wait-s for it.
Standard library only. The proxy listens on 127.0.0.1 by default; --port 0
picks a free port, printed (and written to --addr-file) as host:port."""
import argparse
import http.client
import json
import os
import secrets
import select
import socket
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor, wait
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SPLIT_PATHS = ("/v1/completions", "/v1/chat/completions")


class Upstream:
    """One request to an upstream server on its own connection, which
    another thread may close (a client that went away)."""

    def __init__(self, base, timeout):
        u = urllib.parse.urlsplit(base)
        self.conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
        self.closed = False

    def request(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        hdrs = {"Content-Type": "application/json"} if data is not None else {}
        self.conn.request(method, path, body=data, headers=hdrs)
        return self.conn.getresponse()

    def fetch(self, method, path, body=None):
        """(status, bytes); a failure to reach it is 502 with the cause."""
        try:
            r = self.request(method, path, body)
            return r.status, r.read()
        except (OSError, http.client.HTTPException) as e:
            why = "closed: the client went away" if self.closed else str(e)
            return 502, json.dumps({"error": {"message": f"upstream: {why}"}}).encode()
        finally:
            self.conn.close()

    def close(self):
        self.closed = True
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Proxy:
    def __init__(self, prefill, decode, bootstrap, timeout_s=300.0, protocol="layercake",
                 order="together", engine_id=None):
        self.prefill, self.decode = prefill.rstrip("/"), decode.rstrip("/")
        self.bootstrap = bootstrap
        self.timeout = timeout_s
        self.protocol, self.order = protocol, order
        self.engine_id = engine_id
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="lc-proxy")
        self.stats = {"requests": 0, "p_errors": 0, "d_errors": 0, "client_gone": 0}

    def p_engine_id(self):
        """remote_engine_id: --engine-id, else P's from GET <bootstrap>/query
        (the Mooncake connector's registry: {dp_rank: {"engine_id": ...}}),
        kept once P has answered; None while it has not."""
        if self.engine_id is None:
            try:
                with urllib.request.urlopen(f"http://{self.bootstrap}/query", timeout=5) as r:
                    q = json.loads(r.read(1 << 20))
                e = q.get("0", {}).get("engine_id") if isinstance(q, dict) else None
                if isinstance(e, str) and e:
                    self.engine_id = e
            except (OSError, ValueError, AttributeError) as e:
                print(f"proxy: GET http://{self.bootstrap}/query: {e}", file=sys.stderr)
        return self.engine_id

    def transfer(self):
        """(P's kv_transfer_params, D's) of one new transfer."""
        if self.protocol == "mooncake":
            tid = str(uuid.uuid4())
            d = {"do_remote_prefill": True, "transfer_id": tid,
                 "remote_bootstrap_addr": f"http://{self.bootstrap}"}
            if self.p_engine_id() is not None:
                d["remote_engine_id"] = self.engine_id
            return {"do_remote_decode": True, "transfer_id": tid}, d
        room, pair = secrets.randbits(63) or 1, secrets.token_hex(16)
        return ({"layercake_room": room, "layercake_pair": pair},
                {"layercake_room": room, "layercake_pair": pair,
                 "layercake_bootstrap": self.bootstrap})

    def count(self, **kw):
        with self._lock:
            for k, v in kw.items():
                self.stats[k] += v


def p_body_of(body, kvp):
    p = dict(body, max_tokens=1, stream=False, kv_transfer_params=kvp)
    p.pop("max_completion_tokens", None)
    p.pop("stream_options", None)
    return p


def client_gone(sock):
    """Whether the client closed its side (readable with nothing to read)."""
    try:
        r, _, _ = select.select([sock], [], [], 0)
        return bool(r) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def make_handler(proxy):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _reply(self, status, data, ctype="application/json"):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status, msg):
            self._reply(status, json.dumps({"error": {"message": msg}}).encode())

        def _wait(self, futs, ups):
            """Wait for the futures, closing every upstream if the client goes."""
            deadline = time.monotonic() + proxy.timeout + 5
            while not all(f.done() for f in futs):
                if client_gone(self.connection):
                    proxy.count(client_gone=1)
                    for u in ups:
                        u.close()
                    return False
                if time.monotonic() > deadline:
                    for u in ups:
                        u.close()
                    return False
                wait(futs, timeout=0.05)
            return True

        def split(self, body):
            p_kvp, d_kvp = proxy.transfer()
            up_p = Upstream(proxy.prefill, proxy.timeout)
            up_d = Upstream(proxy.decode, proxy.timeout)
            fp = proxy._pool.submit(up_p.fetch, "POST", self.path, p_body_of(body, p_kvp))
            if proxy.order == "p-first":
                if not self._wait([fp], [up_p]):
                    return
                ps, pb = fp.result()
                if ps == 200:
                    try:
                        got = json.loads(pb).get("kv_transfer_params")
                    except ValueError:
                        got = None
                    if isinstance(got, dict):
                        d_kvp = got
                    else:
                        ps, pb = 502, json.dumps({"error": {"message":
                                                            "P returned no kv_transfer_params"}}).encode()
                if ps != 200:
                    proxy.count(requests=1, p_errors=1)
                    return self._reply(ps, pb)
            d_body = dict(body, kv_transfer_params=d_kvp)
            if body.get("stream"):
                return self._stream(d_body, up_d, fp, up_p)
            fd = proxy._pool.submit(up_d.fetch, "POST", self.path, d_body)
            if not self._wait([fd, fp], [up_d, up_p]):
                return
            ds, db = fd.result()
            ps, _ = fp.result()
            proxy.count(requests=1, p_errors=ps != 200, d_errors=ds != 200)
            self._reply(ds, db)

        def _stream(self, d_body, up_d, fp, up_p):
            try:
                r = up_d.request("POST", self.path, d_body)
            except (OSError, http.client.HTTPException) as e:
                up_p.close()
                proxy.count(requests=1, d_errors=1)
                return self._error(502, f"upstream D: {e}")
            if r.status != 200:
                data = r.read()
                up_d.conn.close()
                proxy.count(requests=1, d_errors=1)
                return self._reply(r.status, data)
            self.send_response(200)
            self.send_header("Content-Type", r.getheader("Content-Type", "text/event-stream"))
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            counted = False
            try:
                while True:
                    chunk = r.read1(65536)
                    if not chunk:
                        break
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                # Counted before the last chunk: a client that has its whole
                # answer finds it in /proxy/stats.
                proxy.count(requests=1, p_errors=fp.result()[0] != 200)
                counted = True
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                # The client went away: D's and P's requests are closed.
                proxy.count(requests=0 if counted else 1, client_gone=1)
                up_p.close()
                self.close_connection = True
            finally:
                up_d.close()
                up_d.conn.close()

        def do_POST(self):
            try:
                n = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                n = -1
            if n <= 0 or n > (64 << 20):
                return self._error(400, "a JSON body of at most 64 MiB is needed")
            try:
                body = json.loads(self.rfile.read(n))
            except ValueError as e:
                return self._error(400, f"bad JSON: {e}")
            if not isinstance(body, dict):
                return self._error(400, "the body must be a JSON object")
            if self.path not in SPLIT_PATHS:
                return self._reply(*Upstream(proxy.decode, proxy.timeout).fetch("POST", self.path, body))
            self.split(body)

        def do_GET(self):
            if self.path == "/proxy/stats":
                with proxy._lock:
                    st = dict(proxy.stats)
                if proxy.protocol == "mooncake":
                    st["engine_id"] = proxy.engine_id  # what D's requests name
                return self._reply(200, json.dumps(st).encode())
            self._reply(*Upstream(proxy.decode, proxy.timeout).fetch("GET", self.path))

        def log_message(self, fmt, *args):
            pass

    return Handler


def read_bootstrap(path, wait_s):
    t0 = time.monotonic()
    while not os.path.exists(path):
        if time.monotonic() - t0 > wait_s:
            raise SystemExit(f"proxy: no bootstrap address in {path} after {wait_s} s")
        time.sleep(0.2)
    return open(path).read().strip()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefill", required=True, help="P's base URL (vllm serve, kv_producer)")
    ap.add_argument("--decode", required=True, help="D's base URL (vllm serve, kv_consumer)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--bootstrap", help="P's bootstrap address host:port")
    g.add_argument("--bootstrap-file", help="file P's connector writes its bootstrap address to")
    ap.add_argument("--protocol", choices=("layercake", "mooncake"), default="layercake",
                    help="the request fields: layercake's or the routers' (Mooncake's)")
    ap.add_argument("--order", choices=("together", "p-first"), default="together",
                    help="send P and D at once, or P first and D with P's answer")
    ap.add_argument("--engine-id", help="remote_engine_id for --protocol mooncake "
                    "(default: P's, from GET <bootstrap>/query)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--addr-file", help="write host:port here once listening")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="per upstream request")
    ap.add_argument("--wait-s", type=float, default=300.0, help="for --bootstrap-file")
    a = ap.parse_args(argv)
    bootstrap = a.bootstrap or read_bootstrap(a.bootstrap_file, a.wait_s)
    proxy = Proxy(a.prefill, a.decode, bootstrap, a.timeout_s, a.protocol, a.order, a.engine_id)
    srv = ThreadingHTTPServer((a.host, a.port), make_handler(proxy))
    srv.daemon_threads = True
    addr = f"{srv.server_address[0]}:{srv.server_address[1]}"
    if a.addr_file:
        with open(a.addr_file + ".tmp", "w") as f:
            f.write(addr)
        os.replace(a.addr_file + ".tmp", a.addr_file)
    print(f"proxy: listening on {addr}; P {a.prefill}, D {a.decode}, bootstrap {bootstrap}, "
          f"{a.protocol} fields, {a.order}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
