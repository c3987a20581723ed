#!/usr/bin/env python3
"""Print the fault-matrix results (results/*.json written by lc_faults) as
the markdown table of docs/reliability.md.

    tests/faults/table.py [build/tests/faults/results]
"""
import glob
import json
import os
import sys

d = sys.argv[1] if len(sys.argv) > 1 else "build/tests/faults/results"
order = ["d_killed", "p_killed", "d_stopped", "link_down", "loss10", "delay50",
         "step_never", "metadata_never", "bootstrap_unreachable", "room_reused",
         "d_cancels"]
rows = {}
for path in glob.glob(os.path.join(d, "*.json")):
    with open(path) as f:
        j = json.load(f)
    rows[j["case"]] = j
print("| case | side | outcome (rooms) | deadline | measured (worst) | result |")
print("|---|---|---|---|---|---|")
for name in order + sorted(set(rows) - set(order)):
    j = rows.get(name)
    if not j:
        print(f"| {name} | | | | | not run (skipped) |")
        continue
    for k, v in enumerate(j["victims"]):
        title = j["title"] if k == 0 else ""
        print(f"| {title} | {v['side']} | {v['outcome']} ({v['rooms']}) | "
              f"{v['deadline_ms']} ms ({v['deadline']}) | {v['worst_ms']} ms | "
              f"{j['result']} |")
