#!/usr/bin/env python3
"""The installed manylinux wheel against the build tree, side by side
(`make bench-wheel`; issue 46): bench/peers/side.py's layercake cases (P/D
throughput bw_4m and bw_64k, the 4 KiB round trip rtt_4k, a request's layers)
over tcp and shm, once with the build tree's library and package
(LAYERCAKE_LIB=build/liblayercake.so PYTHONPATH=python, BUILD_PY) and once
with the wheel installed in a venv (WHEEL_PY, nothing in the environment
pointing elsewhere), in pairs whose order flips every other pair.

    wheel_compare.py --build-py /usr/bin/python3 --build-lib build/liblayercake.so
                     --wheel-py VENV/bin/python [--pairs 5] [--quick]

Prints one machine-readable line per case: the medians of both and
ratio = wheel/build for throughput, build/wheel for times (>= 1: the wheel
is as fast or faster), and the per-pair ratios. Asserts nothing.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CASES = ("bw_4m", "bw_64k", "rtt_4k", "layers")


def side(py, env, transport, quick):
    cmd = [py, os.path.join(HERE, "peers", "side.py"), "--peer", "layercake", "--transport", transport,
           "--idle-s", "0.5"] + (["--quick"] if quick else [])
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                       timeout=600, cwd="/tmp")
    answers = [ln[2:] for ln in p.stdout.splitlines() if ln.startswith("@@")]
    if not answers:
        raise SystemExit(f"wheel_compare: {' '.join(cmd)} exited {p.returncode} without an answer")
    return json.loads(answers[-1])["cases"]


def which(py, env):
    code = "import layercake._ffi as f; print(f.LIBRARY_PATH, f.SPEEDUPS_FROM)"
    return subprocess.run([py, "-c", code], env=env, cwd="/tmp", capture_output=True, text=True,
                          timeout=60).stdout.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-py", default="/usr/bin/python3")
    ap.add_argument("--build-lib", default=os.path.join(ROOT, "build", "liblayercake.so"))
    ap.add_argument("--wheel-py", required=True)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--transports", default="tcp,shm")
    a = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LAYERCAKE_", "PYTHON"))}
    envs = {"build": dict(base, LAYERCAKE_LIB=os.path.abspath(a.build_lib),
                          PYTHONPATH=os.path.join(ROOT, "python")),
            "wheel": dict(base)}
    pys = {k: os.path.abspath(p) if os.sep in p else p for k, p in (("build", a.build_py), ("wheel", a.wheel_py))}
    for k in ("build", "wheel"):
        print(f"# {k}: {pys[k]}: {which(pys[k], envs[k])}", flush=True)
    for t in a.transports.split(","):
        runs = {"build": [], "wheel": []}
        for i in range(a.pairs):
            for k in (("build", "wheel") if i % 2 == 0 else ("wheel", "build")):
                runs[k].append(side(pys[k], envs[k], t, a.quick))
        for c in CASES:
            vals = {k: [r[c]["value"] for r in runs[k] if "value" in r.get(c, {})] for k in runs}
            if not vals["build"] or not vals["wheel"]:
                print(json.dumps({"transport": t, "case": c, "error": "no values"}))
                continue
            unit = runs["build"][0][c]["unit"]
            faster_is_more = unit.endswith("/s")
            pair = [(w / b if faster_is_more else b / w) for b, w in zip(vals["build"], vals["wheel"])]
            med = {k: statistics.median(v) for k, v in vals.items()}
            ratio = med["wheel"] / med["build"] if faster_is_more else med["build"] / med["wheel"]
            print(json.dumps({"transport": t, "case": c, "unit": unit, "build": round(med["build"], 3),
                              "wheel": round(med["wheel"], 3), "ratio": round(ratio, 3),
                              "pair_ratios": [round(x, 3) for x in pair]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
