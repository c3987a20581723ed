#!/usr/bin/env python3
"""A small HTTP proxy in front of two `vllm serve` processes, P (kv_producer)
and D (kv_consumer), both running layercake.vllm.LayercakeConnector:

    proxy.py --prefill http://127.0.0.1:8100 --decode http://127.0.0.1:8200 \
             --bootstrap 127.0.0.1:8998 [--port 8000] [--addr-file F]

Each POST /v1/completions (or /v1/chat/completions) gets a fresh room and is
sent to P and D *at the same time*: P's copy with max_tokens=1 and
kv_transfer_params {"layercake_room": N}, D's unchanged but for
kv_transfer_params {"layercake_room": N, "layercake_bootstrap": P's
bootstrap address}. D grants the blocks vLLM allocated for the request while
P holds the request until that grant arrives, then P streams the KV layer by
layer during its prefill and D decodes. The client gets D's answer. Any
other path (GET /v1/models, /health) goes to D.

--bootstrap is P's bootstrap address (kv_connector_extra_config
"bootstrap_port" on P fixes it); --bootstrap-file reads it from the file P's
connector writes ("bootstrap_file"), waiting up to --wait-s for it.
Standard library only; no streaming (a request with "stream": true is
refused with 400). The proxy listens on 127.0.0.1 by default; --port 0
picks a free port, printed (and written to --addr-file) as host:port."""
import argparse
import itertools
import json
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOM_KEY = "layercake_room"
BOOTSTRAP_KEY = "layercake_bootstrap"
SPLIT_PATHS = ("/v1/completions", "/v1/chat/completions")


def post(url, body, timeout):
    """(status, bytes) of a JSON POST; an HTTP error's status and body too."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError) as e:
        return 502, json.dumps({"error": {"message": f"upstream {url}: {e}"}}).encode()


class Proxy:
    def __init__(self, prefill, decode, bootstrap, timeout_s=300.0, room_base=None):
        self.prefill, self.decode = prefill.rstrip("/"), decode.rstrip("/")
        self.bootstrap = bootstrap
        self.timeout = timeout_s
        # Rooms are unique per P: a random base keeps a restarted proxy off old ones.
        base = random.randrange(1, 1 << 40) if room_base is None else room_base
        self._rooms = itertools.count(base)
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="lc-proxy")
        self.stats = {"requests": 0, "p_errors": 0, "d_errors": 0}

    def room(self):
        with self._lock:
            return next(self._rooms)

    def split(self, path, body):
        """Send one request to P and D together; (status, bytes) of D's answer."""
        room = self.room()
        p_body = dict(body, max_tokens=1, stream=False,
                      kv_transfer_params={ROOM_KEY: room})
        p_body.pop("max_completion_tokens", None)
        d_body = dict(body, kv_transfer_params={ROOM_KEY: room, BOOTSTRAP_KEY: self.bootstrap})
        fp = self._pool.submit(post, self.prefill + path, p_body, self.timeout)
        fd = self._pool.submit(post, self.decode + path, d_body, self.timeout)
        ds, db = fd.result()
        ps, pb = fp.result()
        with self._lock:
            self.stats["requests"] += 1
            self.stats["p_errors"] += ps != 200
            self.stats["d_errors"] += ds != 200
        if ps != 200:
            sys.stderr.write(f"proxy: room {room}: P answered {ps}: {pb[:300]!r}\n")
        return ds, db

    def forward_get(self, path):
        try:
            with urllib.request.urlopen(self.decode + path, timeout=self.timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except (urllib.error.URLError, OSError) as e:
            return 502, json.dumps({"error": {"message": str(e)}}).encode()


def make_handler(proxy):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _reply(self, status, data):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status, msg):
            self._reply(status, json.dumps({"error": {"message": msg}}).encode())

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            if n <= 0 or n > (64 << 20):
                return self._error(400, "a JSON body of at most 64 MiB is needed")
            try:
                body = json.loads(self.rfile.read(n))
            except ValueError as e:
                return self._error(400, f"bad JSON: {e}")
            if not isinstance(body, dict):
                return self._error(400, "the body must be a JSON object")
            if self.path not in SPLIT_PATHS:
                return self._reply(*post(proxy.decode + self.path, body, proxy.timeout))
            if body.get("stream"):
                return self._error(400, "this proxy does not stream")
            self._reply(*proxy.split(self.path, body))

        def do_GET(self):
            if self.path == "/proxy/stats":
                with proxy._lock:
                    return self._reply(200, json.dumps(proxy.stats).encode())
            self._reply(*proxy.forward_get(self.path))

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
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--addr-file", help="write host:port here once listening")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="per upstream request")
    ap.add_argument("--wait-s", type=float, default=300.0, help="for --bootstrap-file")
    ap.add_argument("--room-base", type=int, help="first room (default: random)")
    a = ap.parse_args(argv)
    bootstrap = a.bootstrap or read_bootstrap(a.bootstrap_file, a.wait_s)
    proxy = Proxy(a.prefill, a.decode, bootstrap, a.timeout_s, a.room_base)
    srv = ThreadingHTTPServer((a.host, a.port), make_handler(proxy))
    addr = f"{srv.server_address[0]}:{srv.server_address[1]}"
    if a.addr_file:
        with open(a.addr_file + ".tmp", "w") as f:
            f.write(addr)
        os.replace(a.addr_file + ".tmp", a.addr_file)
    print(f"proxy: listening on {addr}; P {a.prefill}, D {a.decode}, bootstrap {bootstrap}",
          flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
