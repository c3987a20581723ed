#!/usr/bin/env python3
"""ctest bench.peers_report: the ratio and folding logic of `make
bench-peers` (report.py) on hand-made runs, without the peers' wheels."""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import report  # noqa: E402


def run(peer, **cases):
    return {"peer": peer, "transport": "tcp", "cases": cases}


def fig(v, unit, p99=None):
    d = {"value": v, "unit": unit}
    if p99 is not None:
        d["p99"] = p99
    return d


class Ratio(unittest.TestCase):
    def test_direction(self):
        self.assertAlmostEqual(report.ratio(4.0, 2.0, "GB/s"), 2.0)  # faster: ahead
        self.assertAlmostEqual(report.ratio(1.0, 2.0, "GB/s"), 0.5)
        self.assertAlmostEqual(report.ratio(10.0, 20.0, "us"), 2.0)  # quicker: ahead
        self.assertAlmostEqual(report.ratio(40.0, 20.0, "us"), 0.5)
        self.assertAlmostEqual(report.ratio(50.0, 100.0, "% core"), 2.0)

    def test_cpu_floor(self):
        self.assertEqual(report.ratio(0.0, 0.0, "% core"), 1.0)  # a tie, not 0/0
        self.assertEqual(report.ratio(100 * 0.01 / 10, 0.0, "% core"), 1.0)  # one tick: a tie
        self.assertAlmostEqual(report.ratio(0.2, 0.0, "% core"), 0.5)
        self.assertAlmostEqual(report.ratio(0.0, 90.0, "% core"), 900.0)
        self.assertIsNone(report.ratio(0.0, 5.0, "us"))
        self.assertIsNone(report.ratio(5.0, 0.0, "GB/s"))


class Fold(unittest.TestCase):
    def pairs(self):
        lc = [run("layercake", bw_4m=fig(v, "GB/s"), rtt_4k=fig(20.0, "us", 50.0),
                  idle_p=fig(0.0, "% core")) for v in (3.0, 5.0, 4.0)]
        nx = [run("nixl", bw_4m=fig(v, "GB/s"), rtt_4k=fig(10.0, "us", 100.0),
                  idle_p=fig(95.0, "% core")) for v in (2.0, 2.0, 1.0)]
        mc = [run("mooncake", bw_4m={"error": "boom"}, rtt_4k=fig(30.0, "us", 60.0),
                  idle_p=fig(0.0, "% core")) for _ in range(3)]
        return [{"layercake": a, "nixl": b, "mooncake": c} for a, b, c in zip(lc, nx, mc)]

    def row(self, rows, rid, peer):
        (r,) = [r for r in rows if r["id"] == rid and r["peer"] == peer]
        return r

    def test_every_row_kept(self):
        rows = report.fold(self.pairs(), "tcp")
        self.assertEqual(len(rows), len(report.ROWS) * len(report.PEERS))
        for r in rows:
            for k in ("case", "peer", "ours", "theirs", "unit", "ratio"):
                self.assertIn(k, r)

    def test_medians_ranges_ratios(self):
        r = self.row(report.fold(self.pairs(), "tcp"), "tcp_bw_4m_value", "nixl")
        self.assertEqual(r["ours"], 4.0)
        self.assertEqual(r["theirs"], 2.0)
        self.assertEqual(r["ours_range"], [3.0, 5.0])
        self.assertEqual(r["theirs_range"], [1.0, 2.0])
        self.assertAlmostEqual(r["ratio"], 2.0)  # of the medians
        self.assertEqual([round(x, 3) for x in r["ratio_pairs"]], [1.5, 2.5, 4.0])  # per pair
        self.assertEqual(r["ratio_range"], [1.5, 4.0])

    def test_latency_p50_and_p99_rows(self):
        rows = report.fold(self.pairs(), "tcp")
        self.assertAlmostEqual(self.row(rows, "tcp_rtt_4k_value", "nixl")["ratio"], 0.5)  # behind
        self.assertAlmostEqual(self.row(rows, "tcp_rtt_4k_p99", "nixl")["ratio"], 2.0)
        self.assertIn(self.row(rows, "tcp_rtt_4k_value", "nixl"), report.behind(rows))
        self.assertNotIn(self.row(rows, "tcp_rtt_4k_p99", "nixl"), report.behind(rows))
        self.assertNotIn(self.row(rows, "tcp_bw_4m_value", "mooncake"), report.behind(rows))  # no ratio
        self.assertIn("behind: tcp: 4 KiB write round trip p50 vs nixl: 0.50", report.summary(rows))

    def test_error_reported_not_dropped(self):
        rows = report.fold(self.pairs(), "tcp")
        r = self.row(rows, "tcp_bw_4m_value", "mooncake")
        self.assertEqual(r["error"], "mooncake: boom")
        self.assertIsNone(r["theirs"])
        self.assertIsNone(r["ratio"])
        self.assertEqual(r["ours"], 4.0)
        missing = self.row(rows, "tcp_layers_value", "nixl")  # a case no side ran
        self.assertIn("missing", missing["error"])
        self.assertIn("cannot run: boom", report.table(rows))

    def test_peer_that_never_ran_kept(self):
        # mooncake-1m absent from every pair: a row per case saying so
        rows = report.fold(self.pairs(), "tcp")
        self.assertIn("mooncake-1m", report.PEERS)
        r = self.row(rows, "tcp_bw_4m_value", "mooncake-1m")
        self.assertEqual(r["error"], "mooncake-1m: did not run")
        self.assertIsNone(r["ratio"])

    def test_partial_pairs(self):
        p = self.pairs()
        p[1]["nixl"]["cases"]["bw_4m"] = {"error": "lost"}
        r = self.row(report.fold(p, "tcp"), "tcp_bw_4m_value", "nixl")
        self.assertEqual(len(r["ratio_pairs"]), 2)
        self.assertIn("2 of 3 pairs", r["partial"])
        self.assertNotIn("error", r)


class Cli(unittest.TestCase):
    def test_help(self):
        for f in ("run.py", "side.py"):
            out = subprocess.run([sys.executable, os.path.join(HERE, f), "--help"],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("ratio" if f == "run.py" else "layers_ready", out.stdout)


if __name__ == "__main__":
    unittest.main()
