"""The figures of `make bench-peers`: per-pair runs of bench/peers/side.py
folded into cases with a ratio, the JSON document and the README table.
Standard library only (tested by test_report.py without the peers).

A run is side.py's answer: {"peer", "transport", "cases": {name: {"value",
"unit", ["p99"]} or {"error"}}}. `pairs` is a list, one item per pair, of
{peer: run}: within a pair layercake and each peer ran back to back.
"""
import statistics

# mooncake-1m: Mooncake TE with 1 MiB tcp slices, its best setting here
PEERS = ("nixl", "mooncake", "mooncake-1m")
# side.py's case -> (label, figure key); rtt_4k gives two rows
ROWS = [("bw_4m", "value", "4 MiB writes, 16 in flight"),
        ("bw_64k", "value", "64 KiB x 64 per batch, 4 batches in flight"),
        ("rtt_4k", "value", "4 KiB write round trip p50"),
        ("rtt_4k", "p99", "4 KiB write round trip p99"),
        ("layers", "value", "32 layers, last record -> D knows all landed, p50"),
        ("idle_p", "value", "idle CPU, P (initiator), 10 s"),
        ("idle_d", "value", "idle CPU, D (target), 10 s")]
# CPU figures up to this (0.1% of a core, 10 ms of run time over the 10 s
# window) are read as this: below it a process is idle, and 0 against 0 is
# a tie, not a division by zero.
CPU_FLOOR = 0.1
HIGHER_IS_BETTER = {"GB/s"}


def ratio(ours, theirs, unit):
    """>= 1 when layercake is ahead: throughput ours/theirs, latency and CPU
    theirs/ours. None when undefined (a zero latency or throughput)."""
    if unit == "% core":  # rounded first: 100 * 0.01 s / 10 s is 0.10000000000000002
        ours, theirs = max(round(ours, 6), CPU_FLOOR), max(round(theirs, 6), CPU_FLOOR)
    if unit in HIGHER_IS_BETTER:
        return ours / theirs if theirs > 0 else None
    return theirs / ours if ours > 0 else None


def _figure(run, case, key):
    """(value, unit, error) of one case of one run."""
    if run is None:
        return None, None, "did not run"
    c = run.get("cases", {}).get(case)
    if c is None:
        return None, None, f"case {case} missing from the run"
    if "error" in c:
        return None, c.get("unit"), c["error"]
    return float(c[key]), c["unit"], None


def _span(xs):
    return [min(xs), max(xs)] if xs else None


def fold(pairs, transport):
    """The case rows of one transport: for each row and peer, layercake's and
    the peer's value per pair, their medians, the per-pair ratios and the
    ratio of the medians; an "error" where a side never produced a figure."""
    out = []
    for case, key, label in ROWS:
        for peer in PEERS:
            ours, theirs, ratios, errs = [], [], [], {"ours": [], "theirs": []}
            unit = None
            for pair in pairs:
                o, ou, oe = _figure(pair.get("layercake"), case, key)
                t, tu, te = _figure(pair.get(peer), case, key)
                unit = unit or ou or tu
                if oe:
                    errs["ours"].append(oe)
                else:
                    ours.append(o)
                if te:
                    errs["theirs"].append(te)
                else:
                    theirs.append(t)
                if not oe and not te:
                    r = ratio(o, t, unit)
                    if r is not None:
                        ratios.append(r)
            row = {"case": f"{transport}: {label}", "id": f"{transport}_{case}_{key}", "peer": peer,
                   "unit": unit, "pairs": len(pairs), "ours_pairs": ours, "theirs_pairs": theirs,
                   "ours": statistics.median(ours) if ours else None,
                   "theirs": statistics.median(theirs) if theirs else None,
                   "ours_range": _span(ours), "theirs_range": _span(theirs),
                   "ratio_pairs": ratios, "ratio_range": _span(ratios), "ratio": None}
            if row["ours"] is not None and row["theirs"] is not None:
                row["ratio"] = ratio(row["ours"], row["theirs"], unit)
            if not theirs:
                row["error"] = f"{peer}: {errs['theirs'][0]}"
            elif not ours:
                row["error"] = f"layercake: {errs['ours'][0]}"
            elif errs["ours"] or errs["theirs"]:
                row["partial"] = f"{len(ratios)} of {len(pairs)} pairs: " + \
                    "; ".join(sorted(set(errs["ours"] + errs["theirs"])))[:400]
            out.append(row)
    return out


def _fmt(v, unit):
    if v is None:
        return "-"
    if unit == "GB/s":
        return f"{v:.2f}"
    if unit == "% core":
        return f"{v:.1f}"
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def _fmt_range(r, unit):
    return "-" if not r else f"{_fmt(r[0], unit)}-{_fmt(r[1], unit)}"


def table(cases):
    """The markdown table for the README (ranges over the pairs)."""
    lines = ["| case | peer | unit | layercake | peer's | ratio of medians; per-pair range |",
             "|---|---|---|---|---|---|"]
    for c in cases:
        u = c["unit"] or ""
        if "error" in c and c["theirs"] is None:
            lines.append(f"| {c['case']} | {c['peer']} | {u} | {_fmt_range(c['ours_range'], u)} | "
                         f"cannot run: {c['error'].split(': ', 1)[-1][:90]} | - |")
            continue
        r = "-" if c["ratio"] is None else f"{c['ratio']:.2f}; {_fmt_range(c['ratio_range'], 'x')}"
        lines.append(f"| {c['case']} | {c['peer']} | {u} | {_fmt_range(c['ours_range'], u)} | "
                     f"{_fmt_range(c['theirs_range'], u)} | {r} |")
    return "\n".join(lines)


def behind(cases):
    """The rows where layercake is behind (a ratio < 1)."""
    return [c for c in cases if c["ratio"] is not None and c["ratio"] < 1]


def summary(cases):
    low = behind(cases)
    none = [c for c in cases if c["ratio"] is None]
    s = f"{len(cases)} cases: {len(cases) - len(low) - len(none)} ahead or even, {len(low)} behind"
    s += "".join(f"\n  behind: {c['case']} vs {c['peer']}: {c['ratio']:.2f}" for c in low)
    return s + f"\n  {len(none)} without a ratio (a side could not run: its error is in the JSON)"
