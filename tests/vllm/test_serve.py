"""The online path: P and D as two OpenAI-compatible vLLM servers (the
`vllm serve` server, started as `python -m vllm.entrypoints.openai.api_server`:
see docs/vllm.md for why not the `vllm` script) with layercake.vllm, and
examples/vllm/proxy.py in front of them, all on loopback. Completions sent to
the proxy must carry D's greedy tokens equal to one engine's alone (the
offline reference of tests/vllm/engine_peer.py), with every prompt token but
the last taken from the connector (D's cached_tokens)."""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

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


def complete(addr, model, prompt):
    body = {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True}
    req = urllib.request.Request(f"http://{addr}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def test_proxy_two_servers(tmp_path):
    model = tiny_llama.write(str(tmp_path / "model"), seed=0)
    ps = [[(i * 37 + k * 11) % 500 + 3 for k in range(n)] for i, n in enumerate(LENGTHS)]
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(ps))
    bs = tmp_path / "bootstrap"
    pp, dp = free_port(), free_port()
    procs, logs = {}, []
    try:
        # The reference (one engine alone) runs while the servers start.
        rlog = open(tmp_path / "ref.log", "w")
        logs.append(rlog)
        ref = subprocess.Popen([sys.executable, PEER, "--role", "ref", "--model", str(model),
                                "--prompts", str(prompts), "--out", str(tmp_path / "ref.json")],
                               stdout=rlog, stderr=subprocess.STDOUT,
                               env=dict(os.environ, LC_VLLM_MAX_TOKENS=str(MAX_TOKENS)))
        for name, port, role, extra in (
                ("P", pp, "kv_producer", {"bootstrap_file": str(bs), "bootstrap_timeout_s": 60}),
                ("D", dp, "kv_consumer", {"bootstrap_timeout_s": 60})):
            procs[name], log = server(tmp_path, name, model, port, role, extra)
            logs.append(log)
        addr_file = tmp_path / "proxy.addr"
        plog = open(tmp_path / "proxy.log", "w")
        logs.append(plog)
        procs["proxy"] = subprocess.Popen(
            [sys.executable, PROXY, "--prefill", f"http://127.0.0.1:{pp}",
             "--decode", f"http://127.0.0.1:{dp}", "--bootstrap-file", str(bs), "--port", "0",
             "--addr-file", str(addr_file)], stdout=plog, stderr=subprocess.STDOUT)
        for port in (pp, dp):
            wait_http(f"http://127.0.0.1:{port}/health", procs, tmp_path)
        t0 = time.monotonic()
        while not addr_file.exists():
            assert procs["proxy"].poll() is None, (tmp_path / "proxy.log").read_text()
            assert time.monotonic() - t0 < 60, "proxy did not listen"
            time.sleep(0.2)
        addr = addr_file.read_text().strip()
        assert ref.wait(timeout=600) == 0, (tmp_path / "ref.log").read_text()[-4000:]
        want = json.loads((tmp_path / "ref.json").read_text())["tokens"]

        def one(p):
            return complete(addr, str(model), p)

        got = [one(ps[0])]  # one alone, then two at once
        with ThreadPoolExecutor(2) as ex:
            got += list(ex.map(one, ps[1:]))
        toks = [g["choices"][0]["token_ids"] for g in got]
        same = sum(a == b for a, b in zip(toks, want))
        print(f"tokens identical (proxy, two vllm servers): {same} of {len(want)}")
        assert same == len(want), (toks, want)
        cached = [(g["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") for g in got]
        assert cached == LENGTHS, cached  # D computed none of the prompt itself
        with urllib.request.urlopen(f"http://{addr}/proxy/stats", timeout=10) as r:
            st = json.loads(r.read())
        assert st == {"requests": 3, "p_errors": 0, "d_errors": 0}, st
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

