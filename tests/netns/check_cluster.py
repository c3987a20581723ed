"""Check the "cluster {json}" lines of scripts/netns-cluster.sh run with
--cut d1:S --kill d1 (tests/netns/cluster_test.sh): exit 0 if they show
what the run must show, else say what is missing."""
import json
import sys

lines = [json.loads(l[len("cluster "):]) for l in open(sys.argv[1]) if l.startswith("cluster {")]
bad = []


def need(cond, what):
    if not cond:
        bad.append(what)


def one(**kw):
    got = [l for l in lines if all(l.get(k) == v for k, v in kw.items())]
    need(len(got) == 1, "one line with %s, got %d" % (kw, len(got)))
    return got[0] if got else {}


net = one(event="network")
knobs = net.get("knobs", {})
limit = (knobs.get("LAYERCAKE_BOOTSTRAP_TIMEOUT_MS", 0) + knobs.get("LAYERCAKE_WAITING_TIMEOUT_MS", 0)) / 1e3 + 1
for phase in ("healthy", "cut", "after_cut", "kill", "after_kill"):
    o = one(outcome=phase)
    need(o.get("ok") is True, "outcome %s not ok: %s" % (phase, o))
    links = [l for l in lines if l.get("phase") == phase and "link" in l]
    need({l["link"] for l in links} >= {"b", "p0", "p1", "d0", "d1"}, "%s: a link line per node" % phase)
    for side in [l for l in lines if l.get("phase") == phase and l.get("side") == "D"]:
        need(side["mismatched_bytes"] == 0, "%s: %s mismatched bytes" % (phase, side["node"]))
final = one(result="ok")
need(final.get("mismatched_bytes") == 0 and final.get("bytes_verified", 0) > 0, "totals: %s" % final)

healthy = [l for l in lines if l.get("phase") in ("healthy", "after_cut", "after_kill") and "side" in l]
need(healthy and all(l["failed"] == 0 and l["succeeded"] == l["rooms"] > 0 for l in healthy),
     "healthy phases: every room Success")
for l in lines:
    if l.get("phase") == "healthy" and "link" in l and l["link"] != "b":
        need(l["gbps"] > 0 and l["bytes_to_node"] + l["bytes_from_node"] > 0, "healthy: traffic on %s" % l["link"])

cut_d1 = one(phase="cut", side="D", node="d1")
cut_p1 = one(phase="cut", side="P", towards="d1")
for l in (cut_d1, cut_p1):
    need(l.get("failed") == l.get("rooms", -1) > 0 and l.get("succeeded") == 0, "cut: every d1 room failed: %s" % l)
    need(all(r for r in l.get("fail_reasons", {})), "cut: every failure has a reason")
    need(l.get("max_room_s", 1e9) <= limit, "cut: d1 rooms failed within %.1f s: %s" % (limit, l))
d0 = one(phase="cut", side="D", node="d0")
need(d0.get("succeeded") == d0.get("rooms", -1) > 0, "cut: d0 went on: %s" % d0)

kill_p1 = one(phase="kill", side="P", towards="d1")
need(kill_p1.get("failed") == kill_p1.get("rooms", -1) > 0, "kill: P's rooms for d1 failed: %s" % kill_p1)
need(all(r for r in kill_p1.get("fail_reasons", {})), "kill: every failure has a reason")
need(kill_p1.get("max_room_s", 1e9) <= limit, "kill: within %.1f s" % limit)
d0 = one(phase="kill", side="D", node="d0")
need(d0.get("succeeded") == d0.get("rooms", -1) > 0, "kill: d0 went on: %s" % d0)

for b in bad:
    print("FAILED: " + b)
print("check_cluster: %d lines, %s" % (len(lines), "ok" if not bad else "%d problems" % len(bad)))
sys.exit(1 if bad else 0)
