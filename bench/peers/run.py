#!/usr/bin/env python3
"""layercake against NIXL and Mooncake TE, side by side (`make bench-peers`).

    run.py [--pairs 3] [--quick] [--idle-s 10] [--out-dir build]

Runs bench/peers/side.py for layercake and each peer, over tcp then shared
memory, in pairs: within a pair every library runs once, back to back (the
order flips every other pair so the machine's drift falls on both sides).
Writes build/bench-peers-<UTC timestamp>.json and a copy at
build/bench-peers.json: {"cases": [{"case", "peer", "ours", "theirs", "unit",
"ratio", ...}]} with ratio >= 1 where layercake is ahead (throughput
ours/theirs, latency and CPU theirs/ours), the per-pair values and ratios
and their ranges; a case a peer cannot run carries "error". Prints the
markdown table. The libraries' logs go to build/bench-peers-<ts>.log.

Run it with the venv of scripts/peers-venv.sh (the Makefile does); side.py
for layercake needs LAYERCAKE_LIB and PYTHONPATH=python.
Exit: 0 when the JSON was written, 1 otherwise.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LIBS = ("layercake", "nixl", "mooncake", "mooncake-1m")


def one(peer, transport, a, log):
    """side.py's answer for one library on one transport (errors included)."""
    env = dict(os.environ, GLOG_minloglevel="1", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, os.path.join(HERE, "side.py"), "--peer", peer, "--transport", transport,
           "--idle-s", str(a.idle_s)] + (["--quick"] if a.quick else [])
    t0 = time.monotonic()
    log.write(f"\n===== {peer} {transport}: {' '.join(cmd)}\n")
    log.flush()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env, timeout=a.timeout)
        out = p.stdout
        rc = p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timeout"
    log.write(out)
    answers = [ln[2:] for ln in out.splitlines() if ln.startswith("@@")]
    if answers:
        run = json.loads(answers[-1])
    else:
        err = f"side.py exited {rc} without an answer (log: {log.name})"
        run = {"peer": peer, "transport": transport,
               "cases": {c: {"error": err} for c in ("bw_4m", "bw_64k", "rtt_4k", "layers", "idle_p", "idle_d")}}
    run["seconds"] = round(time.monotonic() - t0, 1)
    print(f"bench-peers: {peer:9s} {transport}: {run['seconds']:5.1f} s " +
          " ".join(f"{k}={v['value']:.3g}" if "value" in v else f"{k}=ERR" for k, v in run["cases"].items()),
          file=sys.stderr, flush=True)
    return run


def versions():
    v = {"python": platform.python_version()}
    try:
        from importlib import metadata
        for d in ("nixl-cu12", "mooncake-transfer-engine-non-cuda", "pyzmq", "numpy"):
            try:
                v[d] = metadata.version(d)
            except metadata.PackageNotFoundError:
                v[d] = None
    except ImportError:
        pass
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a quarter of the bytes and samples (smoke)")
    ap.add_argument("--idle-s", type=float, default=10.0)
    ap.add_argument("--timeout", type=float, default=600.0, help="per side.py run, seconds")
    ap.add_argument("--out-dir", default="build")
    ap.add_argument("--transports", default="tcp,shm")
    ap.add_argument("--table", metavar="JSON",
                    help="no run: fold an earlier JSON's runs again (rewriting its cases if they differ), print the table")
    a = ap.parse_args()
    if a.table:  # the cases again from the runs the JSON keeps (report.py may have changed)
        with open(a.table) as f:
            doc = json.load(f)
        cases = [c for t, pairs in doc["runs"].items() for c in report.fold(pairs, t)]
        if cases != doc["cases"]:
            doc["cases"] = cases
            with open(a.table, "w") as f:
                json.dump(doc, f, indent=1)
        print(report.table(cases))
        print(report.summary(cases))
        return 0
    if a.pairs < 1:
        ap.error("--pairs must be at least 1")
    os.makedirs(a.out_dir, exist_ok=True)
    ts = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = os.path.join(a.out_dir, f"bench-peers-{ts}")
    cases, raw = [], {}
    with open(base + ".log", "w") as log:
        for transport in a.transports.split(","):
            pairs = []
            for i in range(a.pairs):
                order = LIBS if i % 2 == 0 else LIBS[::-1]
                pairs.append({lib: one(lib, transport, a, log) for lib in order})
            raw[transport] = pairs
            cases += report.fold(pairs, transport)
    doc = {"cases": cases, "pairs": a.pairs, "quick": a.quick, "idle_s": a.idle_s, "utc": ts,
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
           "versions": versions(), "runs": raw,
           "note": "ratio >= 1: layercake ahead (throughput ours/theirs; latency and CPU theirs/ours);"
                   " ours/theirs are medians over the pairs, *_range their min-max"}
    with open(base + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    shutil.copyfile(base + ".json", os.path.join(a.out_dir, "bench-peers.json"))
    print(report.table(cases))
    print(f"\n{base}.json ({a.pairs} pairs)\n" + report.summary(cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
