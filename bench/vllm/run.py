#!/usr/bin/env python3
"""`make bench-vllm`: layercake's vLLM connector against vLLM's own NIXL and
Mooncake connectors and one engine alone, in real `vllm serve` CPU engines,
measured by vLLM's serving benchmark (vllm.benchmarks.serve):

    run.py --out-dir build [--inputs 256,1024,4096] [--output-len 64]
           [--prompts 8] [--rate 0.5] [--connectors alone,layercake,...] [--quick]

Per connector (in turn, --rounds times, so that a slow spell of the machine
falls on every connector alike): its engines (one alone; P and D otherwise)
and a router in front of the pair, each pairing the way the connector
expects (examples/vllm/proxy.py):
  layercake        P and D at once, layercake's fields (layer-wise)
  layercake-whole  the same with layerwise_interval 0 (one submission)
  nixl             NixlConnector, kv_buffer_device "cpu": P first, then D
                   with P's returned kv_transfer_params (--order p-first)
  nixl-unpinned    the same without its worker's core reservation
                   (bench/vllm/cpu_peers.py; the report keeps NIXL's better)
  mooncake         MooncakeConnector over tcp: P and D at once with the
                   Mooncake fields (--protocol mooncake)
then per case (input length x serial / rate) vLLM's benchmark against the
router, and P's and D's CPU seconds over the case (/proc, the server and its
children). The JSON (build/bench-vllm-<ts>.json), the table and the picture
(build/bench-vllm-<ts>.svg) come from report.py. A connector or case that
cannot run is a row with its error."""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import model as bench_model  # noqa: E402
import report  # noqa: E402

PROXY = os.path.join(ROOT, "examples", "vllm", "proxy.py")
CLK = os.sysconf("SC_CLK_TCK")
CLIENT = ("import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
          "from vllm.benchmarks.serve import add_cli_args, main; p = FlexibleArgumentParser(); "
          "add_cli_args(p); main(p.parse_args(sys.argv[1:]))")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_cpu_s(pid):
    """CPU seconds of pid and every live descendant (user + system, plus
    what their reaped children used)."""
    kids, stat = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        f = s[s.rindex(")") + 2:].split()
        stat[int(d)] = sum(int(x) for x in f[11:15])  # utime stime cutime cstime
        kids.setdefault(int(f[1]), []).append(int(d))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += stat.get(p, 0)
        todo += kids.get(p, [])
    return total / CLK


def last_error(text):
    """The line of a log that says why it stopped (the last with "Error" in
    it, else its last line), at most 400 characters."""
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    errs = [x for x in lines if re.search(r"\w(Error|Exception): |error: ", x)
            and "See root cause above" not in x]
    return ((errs or lines or ["(empty log)"])[-1])[-400:]


class Setup:
    """The processes of one connector: servers (name -> Popen), the address
    the benchmark targets, their logs in tmp."""

    def __init__(self, a, name, tmp):
        self.a, self.name, self.tmp = a, name, tmp
        self.procs, self.logs, self.addr = {}, [], None

    def log_tail(self, who, n=3000):
        try:
            with open(os.path.join(self.tmp, f"{self.name}-{who}.log"), errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def spawn(self, who, cmd, env=None):
        log = open(os.path.join(self.tmp, f"{self.name}-{who}.log"), "w")
        self.logs.append(log)
        self.procs[who] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                           env=env, start_new_session=True)

    def server(self, who, port, kvt=None, env=None):
        a = self.a
        cmd = [a.python, "-m", "vllm.entrypoints.openai.api_server", "--model", a.model,
               "--host", "127.0.0.1", "--port", str(port), "--enforce-eager", "--dtype", "float32",
               "--block-size", str(a.block_size), "--max-model-len", str(a.max_model_len),
               "--no-enable-prefix-caching", "--seed", "0"]
        if kvt:
            cmd += ["--kv-transfer-config", json.dumps(kvt)]
        e = dict(os.environ, VLLM_NO_USAGE_STATS="1", HF_HUB_OFFLINE="1",
                 VLLM_CPU_KVCACHE_SPACE=str(a.kv_gib), VLLM_CPU_OMP_THREADS_BIND=a.bind.get(who, "nobind"),
                 PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "python"), HERE,
                                             os.environ.get("PYTHONPATH", "")]))
        if not a.bind:
            # Engines sharing cores: OpenMP threads that spin after each
            # forward starve the other engine's forward (one request's TTFT
            # went 80 ms -> 1.1 s at random); passive waits, for every
            # engine and connector alike (docs/bench.md).
            e.update(OMP_WAIT_POLICY="PASSIVE", KMP_BLOCKTIME="0")
        e.update(env or {})
        self.spawn(who, cmd, e)

    def wait_up(self, port, deadline_s):
        t0 = time.monotonic()
        while True:
            for who, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{who} exited ({p.returncode}): {last_error(self.log_tail(who, 20000))}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() - t0 > deadline_s:
                raise RuntimeError(f"port {port} not up after {deadline_s} s")
            time.sleep(1)

    def proxy(self, pp, dp, bs, *args):
        af = os.path.join(self.tmp, f"{self.name}-proxy.addr")
        self.spawn("proxy", [sys.executable, PROXY, "--prefill", f"http://127.0.0.1:{pp}",
                             "--decode", f"http://127.0.0.1:{dp}", "--bootstrap", bs, "--port", "0",
                             "--addr-file", af, *args])
        t0 = time.monotonic()
        while not os.path.exists(af) or not open(af).read().strip():
            if self.procs["proxy"].poll() is not None or time.monotonic() - t0 > 60:
                raise RuntimeError(f"proxy did not listen: {self.log_tail('proxy')}")
            time.sleep(0.2)
        return open(af).read().strip()

    def start(self):
        name, a = self.name, self.a
        if name == "alone":
            port = free_port()
            self.server("alone", port)
            self.wait_up(port, a.start_s)
            self.addr = f"127.0.0.1:{port}"
            return
        pp, dp, bport = free_port(), free_port(), free_port()
        bs = f"127.0.0.1:{bport}"
        if name.startswith("layercake"):
            extra = {"bootstrap_timeout_s": 60}
            if name == "layercake-whole":
                extra["layerwise_interval"] = 0
            base = {"kv_connector": "LayercakeConnector", "kv_connector_module_path": "layercake.vllm"}
            self.server("P", pp, dict(base, kv_role="kv_producer",
                                      kv_connector_extra_config=dict(extra, bootstrap_port=bport)),
                        {"LAYERCAKE_LIB": a.lib})
            self.server("D", dp, dict(base, kv_role="kv_consumer",
                                      kv_connector_extra_config=dict(extra, bootstrap=bs)),
                        {"LAYERCAKE_LIB": a.lib})
            proxy_args = ()
        elif name in ("nixl", "nixl-unpinned"):
            base = {"kv_connector": "NixlConnector", "kv_connector_module_path": "cpu_peers",
                    "kv_role": "kv_both", "kv_buffer_device": "cpu"}
            for who, port in (("P", pp), ("D", dp)):
                self.server(who, port, base, {"VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1",
                                              "VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port()),
                                              "UCX_PROTO_EMULATION_ENABLE": "y",
                                              "LC_BENCH_NIXL_AFFINITY":
                                                  "skip" if name == "nixl-unpinned" else "keep",
                                              "VLLM_HOST_IP": "127.0.0.1"})
            proxy_args = ("--protocol", "mooncake", "--order", "p-first")
        elif name == "mooncake":
            base = {"kv_connector": "MooncakeConnector", "kv_connector_module_path": "cpu_peers",
                    "kv_connector_extra_config": {"mooncake_protocol": "tcp"}}
            env = {"VLLM_HOST_IP": "127.0.0.1", "VLLM_MOONCAKE_BOOTSTRAP_PORT": str(bport)}
            self.server("P", pp, dict(base, kv_role="kv_producer", engine_id="prefill"), env)
            self.server("D", dp, dict(base, kv_role="kv_consumer", engine_id="decode"),
                        dict(env, VLLM_MOONCAKE_BOOTSTRAP_PORT=str(free_port())))
            proxy_args = ("--protocol", "mooncake", "--engine-id", "prefill")
        else:
            raise RuntimeError(f"unknown connector {name}")
        for port in (pp, dp):
            self.wait_up(port, a.start_s)
        self.addr = self.proxy(pp, dp, bs, *proxy_args)

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
        for f in self.logs:
            f.close()

    def cpu(self):
        return {who: tree_cpu_s(p.pid) for who, p in self.procs.items() if who != "proxy"}


def bench_case(s, case, tmp):
    """One case against a started setup: vLLM's benchmark's figures and the
    engines' CPU seconds, or {"error"}."""
    a = s.a
    out = os.path.join(tmp, f"{s.name}-{case['id']}.json")
    cmd = [a.python, "-c", CLIENT, "--backend", "vllm", "--base-url", f"http://{s.addr}",
           "--endpoint", "/v1/completions", "--model", a.model, "--tokenizer", a.model,
           "--dataset-name", "random", "--random-input-len", str(case["input_len"]),
           "--random-output-len", str(a.output_len), "--random-range-ratio", "0",
           "--num-prompts", str(case["prompts"]), "--request-rate", str(case["rate"]),
           "--max-concurrency", str(case["concurrency"]), "--ignore-eos", "--temperature", "0",
           "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
           "--num-warmups", "1", "--seed", "0", "--disable-tqdm", "--save-result", "--save-detailed",
           "--result-dir", tmp, "--result-filename", os.path.basename(out)]
    cpu0 = s.cpu()
    log = os.path.join(tmp, f"{s.name}-{case['id']}.client.log")
    try:
        with open(log, "w") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=a.case_s,
                                env=dict(os.environ, HF_HUB_OFFLINE="1")).returncode
    except subprocess.TimeoutExpired:
        return {"error": f"the benchmark did not finish in {a.case_s} s"}
    cpu1 = s.cpu()
    if rc != 0 or not os.path.exists(out):
        return {"error": f"the benchmark failed (rc {rc}): " + open(log, errors="replace").read()[-600:]}
    with open(out) as f:
        r = json.load(f)
    errs = [e for e in r.get("errors", []) if e]
    if r.get("completed", 0) == 0:
        return {"error": f"no request of {case['prompts']} completed: "
                         + (errs[0][-400:] if errs else "no error text")}
    fig = {k: r.get(f"p{q}_{m}_ms", r.get(f"median_{m}_ms") if q == 50 else None)
           for m in ("ttft", "itl", "tpot", "e2el") for q in (50, 99) for k in [f"{m}_p{q}"]}
    fig.update(output_tok_s=r["output_throughput"], request_s=r["request_throughput"],
               duration_s=r["duration"], completed=r["completed"], failed=r.get("failed", 0))
    if r.get("failed"):  # the figures are the completed requests'; the row says so
        fig["failed_error"] = (errs[0] if errs else "no error text")[-300:]
    fig.update({f"cpu_{who}_s": round(cpu1[who] - cpu0[who], 2) for who in cpu1})
    return fig


def _stop_on_term(*_):
    raise KeyboardInterrupt


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", default="build")
    ap.add_argument("--inputs", default="256,1024,4096", help="input lengths, comma-separated")
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=8, help="requests per case")
    ap.add_argument("--rate", type=float, default=0.0,
                    help="requests/s of the busy cases (0: none; serial cases always run)")
    ap.add_argument("--busy-concurrency", type=int, default=16)
    ap.add_argument("--connectors", default=",".join(report.CONNECTORS))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="256 and 1024 tokens, 4 prompts, no busy case")
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--kv-gib", type=int, default=2, help="VLLM_CPU_KVCACHE_SPACE of each engine")
    ap.add_argument("--start-s", type=float, default=600, help="deadline for an engine to start")
    ap.add_argument("--case-s", type=float, default=1800, help="deadline for one case")
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "liblayercake.so"))
    ap.add_argument("--python", default=sys.executable, help="the venv's python for vLLM")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop_on_term)  # the engines are stopped on the way out
    if a.quick:
        a.inputs, a.prompts, a.rate = "256,1024", 4, 0.0
    inputs = [int(x) for x in a.inputs.split(",")]
    a.max_model_len = max(inputs) + a.output_len + 64
    ncpu = len(os.sched_getaffinity(0))
    if ncpu >= 4:  # each engine its own half of the cores; alone gets P's half
        h = ncpu // 2
        cores = sorted(os.sched_getaffinity(0))
        lo, hi = ",".join(map(str, cores[:h])), ",".join(map(str, cores[h:2 * h]))
        a.bind = {"P": lo, "D": hi, "alone": lo}
    else:
        a.bind = {}
    sharing = (f"P on cores {a.bind['P']}, D on {a.bind['D']}, alone on P's" if a.bind else
               f"{ncpu} cores: every engine unpinned (VLLM_CPU_OMP_THREADS_BIND=nobind), "
               "P, D, the router and the benchmark client share them, OpenMP waits passive "
               "(OMP_WAIT_POLICY=PASSIVE, KMP_BLOCKTIME=0), alike for every connector")
    cases = [{"id": f"in{n}-serial", "input_len": n, "rate": "inf", "concurrency": 1,
              "prompts": a.prompts, "label": f"{n} in, 1 at a time"} for n in inputs]
    if a.rate > 0:
        cases += [{"id": f"in{n}-rate{a.rate:g}", "input_len": n, "rate": a.rate,
                   "concurrency": a.busy_concurrency, "prompts": 2 * a.prompts,
                   "label": f"{n} in, {a.rate:g} req/s"} for n in inputs]
    conns = [c for c in a.connectors.split(",") if c]
    os.makedirs(a.out_dir, exist_ok=True)
    ts = time.strftime("%Y%m%d-%H%M%S")
    tmp = tempfile.mkdtemp(prefix="bench-vllm-")
    a.model, mcfg = bench_model.write(os.path.join(tmp, "model"), layers=a.layers, kv_heads=a.kv_heads,
                                      head_dim=a.head_dim, hidden=a.hidden,
                                      max_len=a.max_model_len)
    kvt = bench_model.kv_bytes_per_token(mcfg)
    print(f"bench-vllm: model {mcfg['num_hidden_layers']} layers, {kvt} B of KV a token "
          f"({kvt * max(inputs) / 2**20:.0f} MiB at {max(inputs)} tokens); {sharing}; logs in {tmp}",
          flush=True)
    runs = []  # {"connector", "round", "case", figures or "error"}
    for rnd in range(a.rounds):
        for name in conns:
            t0 = time.monotonic()
            for attempt in (1, 2):  # a free port taken by another process before the engine binds it
                s = Setup(a, name, tmp)
                try:
                    s.start()
                    err = None
                    break
                except Exception as e:  # noqa: BLE001 - its error is the row
                    err = f"did not start: {e}"
                    if attempt == 1:
                        print(f"bench-vllm: {name} {err[:300]}; once more on fresh ports", flush=True)
                        s.stop()
            print(f"bench-vllm: {name} " + (err[:300] if err else f"up in {time.monotonic() - t0:.0f} s"),
                  flush=True)
            try:
                for c in cases:
                    fig = {"error": err} if err else bench_case(s, c, tmp)
                    runs.append(dict(fig, connector=name, round=rnd, case=c["id"]))
                    print(f"  {c['id']}: " + (fig["error"][:300] if "error" in fig else
                          f"TTFT p50 {fig['ttft_p50']:.1f} ms, ITL p50 {fig['itl_p50']:.1f} ms"),
                          flush=True)
            finally:
                s.stop()
    rows = report.fold(runs, cases)
    doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": sharing,
           "load": os.getloadavg(), "model": dict(mcfg, kv_bytes_per_token=kvt),
           "output_len": a.output_len, "block_size": a.block_size, "cases": cases,
           "runs": runs, "rows": rows}
    path = os.path.join(a.out_dir, f"bench-vllm-{ts}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    shutil.copyfile(path, os.path.join(a.out_dir, "bench-vllm.json"))
    svg = os.path.join(a.out_dir, f"bench-vllm-{ts}.svg")
    with open(svg, "w") as f:
        f.write(report.svg(rows, cases))
    print(report.table(rows, cases))
    print(f"bench-vllm: {path}, {svg}")
    shutil.rmtree(tmp, ignore_errors=True) if not os.environ.get("BENCH_VLLM_KEEP") else None
    return 0


if __name__ == "__main__":
    sys.exit(main())
