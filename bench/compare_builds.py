#!/usr/bin/env python3
"""Old build against new build, side by side on the same machine in the same
hour: each benchmark runs A B A B ... and every figure is reported as the
median of each side and the median of the per-round ratios new/old (the
machine's drift cancels within a round).

    bench/compare_builds.py OLD_BUILD NEW_BUILD [--rounds N] [--only NAME,...]

A BUILD may be "folder:knob=value,..." to run that side with those knobs
(LAYERCAKE_KNOB=value), e.g. the same build with cq_spin_us=0 against 50.

Each BUILD is a build folder holding `layercake` (and `baseline` when the
shared tools were found). Prints one JSON object per benchmark figure, then a
table. Higher is better for rates (gbps, rooms_per_s), lower for latencies
and times."""
import argparse
import json
import os
import statistics
import subprocess
import sys

BENCHES = [
    ("tcp_4m", ["bench", "transport", "--transport", "tcp", "--block-kib", "4096", "--json"],
     ["gbps", "p50_batch_us"]),
    ("tcp_64k", ["bench", "transport", "--transport", "tcp", "--block-kib", "64", "--batch", "64",
                 "--json"], ["gbps", "p50_batch_us"]),
    ("tcp_4k", ["bench", "transport", "--transport", "tcp", "--block-kib", "4", "--batch", "64",
                "--total-mib", "512", "--json"], ["gbps", "p50_batch_us"]),
    ("shm_64k", ["bench", "transport", "--transport", "shm", "--block-kib", "64", "--batch", "64",
                 "--total-mib", "4096", "--json"], ["gbps", "p50_batch_us"]),
    ("shm_4k", ["bench", "transport", "--transport", "shm", "--block-kib", "4", "--batch", "64",
                "--total-mib", "1024", "--json"], ["gbps", "p50_batch_us"]),
    ("shm_4m", ["bench", "transport", "--transport", "shm", "--block-kib", "4096",
                "--total-mib", "8192", "--json"],
     ["gbps", "p50_batch_us"]),
    ("tcp_rtt", ["bench", "transport", "--transport", "tcp", "--block-kib", "4", "--batch", "1",
                 "--inflight", "1", "--total-mib", "32", "--json"], ["p50_batch_us", "p99_batch_us"]),
    ("shm_rtt", ["bench", "transport", "--transport", "shm", "--block-kib", "4", "--batch", "1",
                 "--inflight", "1", "--total-mib", "32", "--json"], ["p50_batch_us", "p99_batch_us"]),
    ("ucx_4m", ["bench", "transport", "--transport", "ucx", "--block-kib", "4096", "--json"],
     ["gbps", "p50_batch_us"]),
    ("tcp_sim", ["bench", "transport", "--transport", "tcp", "--block-kib", "4096", "--mem", "sim",
                 "--json"], ["dev_gbps", "host_gbps"]),
    ("wake", ["bench", "wake", "--json"], ["p50_us", "p99_us"]),
    ("control", ["bench", "control", "--json"], ["rooms_per_s", "latency_p50_us"]),
    ("control_256", ["bench", "control", "--inflight", "256", "--rooms", "5000", "--json"],
     ["rooms_per_s", "latency_p50_us"]),
    ("control_1", ["bench", "control", "--inflight", "1", "--rooms", "2000", "--json"],
     ["rooms_per_s", "latency_p50_us"]),
    ("demo", ["demo", "--json"], ["ttft_ratio", "layerwise_ttft_p50_ms", "stream_gbps"]),
]


def figures(name, out):
    d = json.loads(out)
    if name != "demo":
        return d
    lw = d["modes"][0]
    return {"ttft_ratio": d["acceptance"]["ttft_ratio_layerwise1_vs_whole"],
            "layerwise_ttft_p50_ms": lw["ttft_p50_ms"], "stream_gbps": lw["stream_gbps"],
            "mismatches": d["mismatches"]}


def run(build, args):
    # BUILD may carry knobs for its side: "path:NAME=VALUE,NAME=VALUE" sets
    # LAYERCAKE_NAME=VALUE in that side's environment (one build, two knobs).
    build, _, knobs = build.partition(":")
    env = dict(os.environ)
    for kv in filter(None, knobs.split(",")):
        k, _, v = kv.partition("=")
        env["LAYERCAKE_" + k.upper()] = v
    p = subprocess.run([os.path.join(build, "layercake")] + args, capture_output=True,
                       text=True, timeout=600, env=env)
    if p.returncode:
        raise RuntimeError(f"{build}: {' '.join(args)} exited {p.returncode}: {p.stderr[-500:]}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    rows = []
    for name, args, keys in BENCHES:
        if only and name not in only:
            continue
        old, new = {k: [] for k in keys}, {k: [] for k in keys}
        for _ in range(a.rounds):
            fo = figures(name, run(a.old, args))
            fn = figures(name, run(a.new, args))
            for k in keys:
                old[k].append(fo[k])
                new[k].append(fn[k])
        for k in keys:
            ratios = [n / o for n, o in zip(new[k], old[k]) if o]
            row = {"bench": name, "figure": k, "rounds": a.rounds,
                   "old_median": statistics.median(old[k]),
                   "new_median": statistics.median(new[k]),
                   "ratio_new_over_old": round(statistics.median(ratios), 3) if ratios else None,
                   "ratio_min": round(min(ratios), 3) if ratios else None,
                   "ratio_max": round(max(ratios), 3) if ratios else None}
            print(json.dumps(row), flush=True)
            rows.append(row)
    print(f"\n{'bench':10} {'figure':24} {'old':>10} {'new':>10} {'new/old':>8}  (min-max)")
    for r in rows:
        print(f"{r['bench']:10} {r['figure']:24} {r['old_median']:>10.4g} {r['new_median']:>10.4g} "
              f"{r['ratio_new_over_old']:>8}  ({r['ratio_min']}-{r['ratio_max']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
