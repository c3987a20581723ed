"""Hostile kv_transfer_params through vLLM's own Scheduler and the worker
connector (tests/vllm/sched_peer.py: P and D as two processes over tcp):
wrong types, huge and negative numbers, long strings, duplicate rooms,
another request's room, disallowed addresses, unknown keys. No exception
escapes a hook (both processes run to the end), every hostile request ends
(refused ones with vLLM's error finish), every block is freed, and the
honest requests beside them arrive byte-exact."""
import random

from test_level1 import assert_clean, prompt, run

GOOD = 6


def hostile_values(rng):
    return rng.choice([None, True, -1, 0, 2 ** 64 - 1, -2 ** 63, 1.5, float("nan"), "7", "x" * 5000,
                       "\x00\xff", [], [1, 2], {"a": 1}, "127.0.0.1:1", "10.9.8.7:8998",
                       "http://169.254.169.254:80", "[::1]:0", "0" * 32])


def hostile_params(rng, i, good_rooms):
    keys = ["layercake_room", "layercake_pair", "layercake_bootstrap", "do_remote_decode",
            "do_remote_prefill", "transfer_id", "remote_bootstrap_addr", "remote_engine_id",
            "junk_key"]
    kind = i % 6
    if kind == 0:  # a random dict of hostile values
        return {k: hostile_values(rng) for k in rng.sample(keys, rng.randint(1, len(keys)))}
    if kind == 1:  # nested junk (a body that is not an object at all is refused by
        # vLLM's own request model before the connector sees it)
        return {"layercake_room": {"nested": [1, 2]}, "layercake_pair": ["ab"] * 16,
                "layercake_bootstrap": {"host": "127.0.0.1"}}
    if kind == 2:  # an honest request's room and pair: a duplicate on both sides
        room = rng.choice(good_rooms)
        return {"layercake_room": room, "layercake_pair": f"{room:032x}",
                "layercake_bootstrap": None}
    if kind == 3:  # another's room with a forged pair
        room = rng.choice(good_rooms)
        return {"layercake_room": room, "layercake_pair": "ab" * 16}
    if kind == 4:  # huge and negative numbers, long strings
        return {"layercake_room": rng.choice([2 ** 63, -5, 2 ** 64 - 1]),
                "layercake_pair": "f" * rng.choice([2, 31, 129, 100000])}
    return {"do_remote_prefill": True, "do_remote_decode": True,  # both flags, bad address
            "transfer_id": "t" * 40, "remote_bootstrap_addr": "http://10.1.1.1:8998"}


def test_hostile_requests_fail_alone(tmp_path):
    rng = random.Random(2026)
    good = [{"id": f"g{i}", "room": 9000 + i, "prompt": prompt(20 + 23 * i, i), "max_tokens": 2}
            for i in range(GOOD)]
    rooms = [r["room"] for r in good]
    bad = []
    for i in range(18):
        p = hostile_params(rng, i, rooms)
        d = hostile_params(rng, i, rooms)
        if isinstance(d, dict) and d.get("layercake_bootstrap", 1) is None:
            d.pop("layercake_bootstrap")  # D's config names P's bootstrap: a real duplicate
        bad.append({"id": f"h{i}", "room": 1, "prompt": prompt(10 + 7 * i, 50 + i),
                    "max_tokens": 2, "p_params": p, "d_params": d})
    # Honest requests first, so that a duplicate finds its room taken.
    plan = {"requests": good + bad, "deadline_s": 120,
            "extra": {"bootstrap_timeout_s": 5.0, "transfer_timeout_s": 20.0}}
    p, d = run(tmp_path, plan, timeout=200)
    assert_clean(p, d)
    for r in good:
        assert d["checked"].get(r["id"]) == len(r["prompt"]), (r["id"], d["checked"])
        assert d["bad_bytes"][r["id"]] == 0, r["id"]
        assert d["finish"][r["id"]] == "length", d["finish"]
    for r in bad:
        assert r["id"] in p["finish"] and r["id"] in d["finish"], r["id"]
    refused = sum(v for k, v in d["sched_counters"].items()
                  if k.startswith("requests_refused_"))
    assert refused >= 12, d["sched_counters"]
    assert any(v == "error" for k, v in d["finish"].items() if k.startswith("h"))
