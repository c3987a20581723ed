"""The figures of `make bench-vllm`: the benchmark's runs folded into one row
per case and connector (medians over the rounds), layercake's ratios to the
best peer and to one engine alone, the markdown table and the SVG picture.
Standard library only (tested by test_report.py on hand-made runs).

A run is {"connector", "round", "case", figures...} or {..., "error"}, the
figures being METRICS' keys (run.py's bench_case). One engine alone has
"cpu_alone_s" in place of P's and D's."""
import statistics

CONNECTORS = ("alone", "layercake", "layercake-whole", "nixl", "nixl-unpinned", "mooncake")
OURS = ("layercake", "layercake-whole")
# nixl-unpinned: NIXL without its core reservation (bench/vllm/cpu_peers.py);
# the best peer is taken per figure over all of these, so NIXL's better counts
PEERS = ("nixl", "nixl-unpinned", "mooncake")
# key, label, unit; tok/s is the one where higher is better
METRICS = [("ttft_p50", "TTFT p50", "ms"), ("ttft_p99", "TTFT p99", "ms"),
           ("itl_p50", "ITL p50", "ms"), ("itl_p99", "ITL p99", "ms"),
           ("output_tok_s", "output", "tok/s"), ("cpu_P_s", "CPU P", "s"),
           ("cpu_D_s", "CPU D", "s"), ("cpu_total_s", "CPU P+D", "s")]
UNIT = {k: u for k, _, u in METRICS}
# CPU seconds up to this are read as this: 0 against 0 is a tie, not 0/0.
CPU_FLOOR = 0.05


def ratio(ours, theirs, unit):
    """>= 1 when layercake is ahead: tok/s ours/theirs, latency and CPU
    theirs/ours. None when undefined (a side missing, a zero)."""
    if ours is None or theirs is None:
        return None
    if unit == "s":
        ours, theirs = max(ours, CPU_FLOOR), max(theirs, CPU_FLOOR)
    if unit == "tok/s":
        return ours / theirs if theirs > 0 else None
    return theirs / ours if ours > 0 else None


def _figures(run):
    """The METRICS of one successful run, CPU named alike for every setup."""
    f = {k: run.get(k) for k, _, _ in METRICS}
    if run.get("cpu_alone_s") is not None:
        f["cpu_P_s"] = run["cpu_alone_s"]
    parts = [f[k] for k in ("cpu_P_s", "cpu_D_s") if f[k] is not None]
    f["cpu_total_s"] = sum(parts) if parts else None
    return f


def fold(runs, cases, connectors=CONNECTORS):
    """One row per case and connector (every one kept: a connector that never
    ran a case is a row with its first error): the medians over the rounds,
    and for layercake's rows "vs_peer" (ratio to the best peer's figure, and
    which peer that was) and "vs_alone" per metric."""
    rows = []
    for c in cases:
        by = {}
        for name in connectors:
            mine = [r for r in runs if r["connector"] == name and r["case"] == c["id"]]
            ok = [_figures(r) for r in mine if "error" not in r]
            row = {"case": c["id"], "label": c.get("label", c["id"]), "connector": name,
                   "rounds": len(mine), "ok_rounds": len(ok)}
            for k, _, _ in METRICS:
                xs = [f[k] for f in ok if f[k] is not None]
                row[k] = statistics.median(xs) if xs else None
            failed = sum(r.get("failed", 0) for r in mine if "error" not in r)
            if failed:  # figures of the completed requests only
                done = sum(r.get("completed", 0) for r in mine if "error" not in r)
                why = next(r.get("failed_error", "") for r in mine if r.get("failed"))
                row["failed"] = f"{failed} of {failed + done} requests failed: {why}"[:300]
            errs = [r["error"] for r in mine if "error" in r]
            if not ok:
                row["error"] = errs[0] if errs else "did not run"
            elif errs:
                row["partial"] = f"{len(ok)} of {len(mine)} rounds: {errs[0]}"[:400]
            by[name] = row
            rows.append(row)
        for name in OURS:
            if name not in by:
                continue
            row = by[name]
            row["vs_peer"], row["best_peer"], row["vs_alone"] = {}, {}, {}
            for k, _, u in METRICS:
                best, who = None, None
                for p in PEERS:
                    v = by.get(p, {}).get(k)
                    if v is None:
                        continue
                    if best is None or (v > best if u == "tok/s" else v < best):
                        best, who = v, p
                row["vs_peer"][k] = ratio(row[k], best, u)
                row["best_peer"][k] = who
                row["vs_alone"][k] = ratio(row[k], by.get("alone", {}).get(k), u)
    return rows


def _fmt(v):
    if v is None:
        return "-"
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def _fmt_ratio(v):
    return "-" if v is None else f"{v:.2f}x"


def table(rows, cases):
    """The markdown table: one line per case and connector, and under each of
    layercake's its ratios (>= 1: layercake ahead) to the best peer and to
    one engine alone."""
    head = "| case | connector | " + " | ".join(f"{lab} ({u})" for _, lab, u in METRICS) + " |"
    lines = [head, "|" + "---|" * (len(METRICS) + 2)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['label']} | {r['connector']} | cannot run: "
                         f"{r['error'][:160].replace('|', '/').replace(chr(10), ' ')} |"
                         + " |" * (len(METRICS) - 1))
            continue
        note = f" ({r['failed'].split(':')[0]})" if "failed" in r else ""
        lines.append(f"| {r['label']} | {r['connector']}{note} | "
                     + " | ".join(_fmt(r[k]) for k, _, _ in METRICS) + " |")
        for key, what in (("vs_peer", "vs best peer"), ("vs_alone", "vs alone")):
            if key in r:
                lines.append(f"| | {r['connector']} {what} | "
                             + " | ".join(_fmt_ratio(r[key][k]) for k, _, _ in METRICS) + " |")
    return "\n".join(lines)


def behind(rows):
    """(case, connector, metric, against, ratio) where layercake is behind."""
    out = []
    for r in rows:
        for key in ("vs_peer", "vs_alone"):
            for k, v in r.get(key, {}).items():
                if v is not None and v < 1:
                    out.append((r["case"], r["connector"], k, key, v))
    return out


COLORS = {"alone": "#888888", "layercake": "#1f77b4", "layercake-whole": "#6baed6",
          "nixl": "#d62728", "nixl-unpinned": "#ff9896", "mooncake": "#2ca02c"}


def svg(rows, cases, connectors=CONNECTORS):
    """Two panels (TTFT, ITL): per case a group of bars, one per connector,
    the bar its p50 and a tick its p99; a connector that could not run a case
    has an x. Hand-written SVG (no plotting library in the pinned venvs)."""
    W, PH, top, left = 900, 260, 30, 60
    by = {(r["case"], r["connector"]): r for r in rows}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{2 * PH + 80}" '
           'font-family="sans-serif" font-size="11">']
    for i, (m, title) in enumerate((("ttft", "TTFT (ms)"), ("itl", "ITL (ms)"))):
        y0 = top + i * (PH + 20)
        vals = [by[(c["id"], n)].get(f"{m}_p99") or by[(c["id"], n)].get(f"{m}_p50") or 0
                for c in cases for n in connectors if (c["id"], n) in by]
        vmax = max(vals + [1e-9]) * 1.1
        h = PH - 40
        out.append(f'<text x="{left}" y="{y0 + 12}" font-weight="bold">{title}: bar p50, tick p99</text>')
        out.append(f'<line x1="{left}" y1="{y0 + 20 + h}" x2="{W - 10}" y2="{y0 + 20 + h}" stroke="black"/>')
        for t in range(5):
            v = vmax * t / 4
            y = y0 + 20 + h - h * t / 4
            out.append(f'<text x="{left - 5}" y="{y + 4:.0f}" text-anchor="end">{_fmt(v)}</text>')
        gw = (W - left - 20) / max(1, len(cases))
        bw = gw * 0.8 / len(connectors)
        for ci, c in enumerate(cases):
            gx = left + ci * gw + gw * 0.1
            out.append(f'<text x="{gx + gw * 0.4:.0f}" y="{y0 + h + 34}" text-anchor="middle">'
                       f'{c.get("label", c["id"])}</text>')
            for ni, n in enumerate(connectors):
                r = by.get((c["id"], n))
                x = gx + ni * bw
                if r is None or r.get(f"{m}_p50") is None:
                    out.append(f'<text x="{x + bw / 2:.0f}" y="{y0 + 16 + h}" text-anchor="middle" '
                               f'fill="{COLORS.get(n, "black")}">x</text>')
                    continue
                p50 = r[f"{m}_p50"]
                bh = h * p50 / vmax
                out.append(f'<rect x="{x:.1f}" y="{y0 + 20 + h - bh:.1f}" width="{bw * 0.9:.1f}" '
                           f'height="{bh:.1f}" fill="{COLORS.get(n, "black")}"/>')
                if r.get(f"{m}_p99") is not None:
                    y = y0 + 20 + h - h * r[f"{m}_p99"] / vmax
                    out.append(f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x + bw * 0.9:.1f}" y2="{y:.1f}" '
                               f'stroke="black" stroke-width="2"/>')
    ly = top + 2 * (PH + 20) + 10
    for ni, n in enumerate(connectors):
        out.append(f'<rect x="{left + ni * 130}" y="{ly}" width="12" height="12" fill="{COLORS.get(n)}"/>'
                   f'<text x="{left + ni * 130 + 16}" y="{ly + 10}">{n}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
