#!/usr/bin/env python3
"""Run a short `layercake demo --json` (or `bench control --json`) and check
what it printed: one JSON object, every mode present, every room Success,
zero mismatched pages, a timeline SVG that is valid XML and shows every
mode. Timing is reported by the demo, never asserted here.

usage: check_demo.py LAYERCAKE CASE WORKDIR
"""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

CASES = {
    "tcp": ["--quick", "--transport", "tcp"],
    "shm": ["--quick", "--transport", "shm"],
    "loop": ["--quick", "--transport", "loop"],
    "ucx": ["--quick", "--transport", "ucx"],  # ctest sets UCX_TLS=tcp
    "mla_draft": ["--quick", "--model", "deepseek-v3", "--draft-layers", "1",
                  "--concurrency", "2", "--requests", "4"],
}
MODES = ["layer-wise-1", "layer-wise-8", "whole-request"]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(cmd, timeout=170):
    print("+ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    sys.stderr.write(p.stderr[-4000:])
    try:
        doc = json.loads(p.stdout)
    except ValueError as e:
        fail("stdout is not one JSON object (%s): %r" % (e, p.stdout[:500]))
    return p.returncode, doc


def check_demo(exe, case, work):
    svg = os.path.join(work, "timeline.svg")
    rc, doc = run([exe, "demo", "--json", "--svg", svg] + CASES[case])
    names = [m["name"] for m in doc["modes"]]
    if names != MODES:
        fail("modes %r, want %r" % (names, MODES))
    for m in doc["modes"]:
        for key in ("ttft_p50_ms", "exposed_tail_p50_ms", "group_transfer_p50_ms",
                    "overlap_pct", "cpu_s", "stream_gbps"):
            if key not in m:
                fail("%s: no %s" % (m["name"], key))
        if m["mismatches"] != 0:
            fail("%s: %d mismatched pages" % (m["name"], m["mismatches"]))
        if m["failed_rooms"] != 0:
            fail("%s: %d failed rooms" % (m["name"], m["failed_rooms"]))
        if m["bytes_verified"] <= 0:
            fail("%s: nothing verified" % m["name"])
        for r in m["per_request"]:
            if r["status"] != "Success":
                fail("%s: a request ended %s" % (m["name"], r["status"]))
    if doc["mismatches"] != 0 or doc["failed_rooms"] != 0:
        fail("totals: %d mismatches, %d failed" % (doc["mismatches"], doc["failed_rooms"]))
    if rc != 0:
        fail("exit status %d" % rc)
    if doc.get("svg") != svg:
        fail("no timeline written (svg=%r)" % doc.get("svg"))
    root = ET.parse(svg).getroot()
    if not root.tag.endswith("svg"):
        fail("timeline root is <%s>" % root.tag)
    text = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
    for name in MODES:
        if name not in text:
            fail("timeline does not show %s" % name)
    print("ok: %s, %d modes, %d bytes verified, 0 mismatches" %
          (case, len(names), sum(m["bytes_verified"] for m in doc["modes"])))


def check_bench_control(exe, work):
    rc, doc = run([exe, "bench", "control", "--json", "--rooms", "300"])
    if rc != 0 or doc.get("bench") != "control" or doc.get("failed") != 0:
        fail("bench control: rc %d, %r" % (rc, doc))
    if doc.get("p_statuses", 0) < 300:
        fail("P sent %r statuses for 300 rooms" % doc.get("p_statuses"))
    print("ok: bench control, %.0f rooms/s" % doc["rooms_per_s"])


def check_bench_transport(exe, tp):
    """The command issue 7 quotes, small: every byte acknowledged, in order."""
    rc, doc = run([exe, "bench", "transport", "--transport", tp, "--block-kib", "4096",
                   "--region-mib", "64", "--total-mib", "256", "--json"])
    if rc != 0 or doc.get("transport") != tp:
        fail("bench transport %s: rc %d, %r" % (tp, rc, doc))
    if doc.get("batches") != 64 or not doc.get("gbps", 0) > 0:
        fail("bench transport %s: %r" % (tp, doc))
    print("ok: bench transport %s, %.2f GB/s" % (tp, doc["gbps"]))
    # The ucx_perftest shape (issue 24): a region of one block, rewritten
    # with 16 in flight, each lap its own room. It hung, granting a room
    # per byte of the region.
    rc, doc = run([exe, "bench", "transport", "--transport", tp, "--block-kib", "4096",
                   "--region-mib", "4", "--total-mib", "128", "--inflight", "16",
                   "--no-baseline", "--json"], timeout=120)
    if rc != 0 or doc.get("batches") != 32 or not doc.get("gbps", 0) > 0:
        fail("bench transport %s, region of one block: rc %d, %r" % (tp, rc, doc))
    print("ok: bench transport %s, region of one block, %.2f GB/s" % (tp, doc["gbps"]))


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    exe, case, work = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    if case == "shm" and not os.path.isdir("/dev/shm"):
        print("skip: no /dev/shm")
        return 77
    if case == "bench_control":
        check_bench_control(exe, work)
    elif case.startswith("bench_transport_"):
        check_bench_transport(exe, case[len("bench_transport_"):])
    else:
        check_demo(exe, case, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
