#!/usr/bin/env python3
"""ctest bench.vllm_report: the folding and ratio logic of `make bench-vllm`
(report.py) on hand-made runs, without vLLM or the peers' wheels."""
import os
import subprocess
import sys
import unittest
import xml.dom.minidom

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import report  # noqa: E402

CASES = [{"id": "in256-serial", "label": "256 in"}, {"id": "in1024-serial", "label": "1024 in"}]


def run(conn, case, rnd=0, ttft=100.0, itl=10.0, tok=50.0, cpu_p=2.0, cpu_d=3.0, **kw):
    r = {"connector": conn, "case": case, "round": rnd, "ttft_p50": ttft, "ttft_p99": 2 * ttft,
         "itl_p50": itl, "itl_p99": 3 * itl, "output_tok_s": tok}
    if conn == "alone":
        r["cpu_alone_s"] = cpu_p
    else:
        r.update(cpu_P_s=cpu_p, cpu_D_s=cpu_d)
    r.update(kw)
    return r


def runs():
    c = "in256-serial"
    return [run("alone", c, ttft=50.0, itl=5.0, tok=100.0, cpu_p=4.0),
            run("layercake", c, 0, ttft=80.0), run("layercake", c, 1, ttft=120.0),
            run("layercake", c, 2, ttft=100.0, itl=12.0),
            run("nixl", c, ttft=200.0, itl=8.0, tok=40.0, cpu_p=50.0, cpu_d=0.0),
            run("mooncake", c, ttft=150.0, itl=20.0, tok=60.0, cpu_p=1.0, cpu_d=0.01),
            {"connector": "layercake-whole", "case": c, "round": 0, "error": "boom"},
            {"connector": "nixl", "case": "in1024-serial", "round": 0, "error": "no UCX"},
            run("mooncake", "in1024-serial", ttft=300.0),
            run("layercake", "in1024-serial", ttft=150.0)]


def row(rows, case, conn):
    (r,) = [r for r in rows if r["case"] == case and r["connector"] == conn]
    return r


class Ratio(unittest.TestCase):
    def test_direction(self):
        self.assertAlmostEqual(report.ratio(50.0, 100.0, "ms"), 2.0)  # quicker: ahead
        self.assertAlmostEqual(report.ratio(200.0, 100.0, "ms"), 0.5)
        self.assertAlmostEqual(report.ratio(60.0, 30.0, "tok/s"), 2.0)  # more: ahead
        self.assertAlmostEqual(report.ratio(1.0, 4.0, "s"), 4.0)

    def test_undefined_and_floor(self):
        self.assertIsNone(report.ratio(None, 1.0, "ms"))
        self.assertIsNone(report.ratio(1.0, None, "ms"))
        self.assertIsNone(report.ratio(0.0, 1.0, "ms"))
        self.assertIsNone(report.ratio(1.0, 0.0, "tok/s"))
        self.assertEqual(report.ratio(0.0, 0.0, "s"), 1.0)  # idle against idle: a tie
        self.assertAlmostEqual(report.ratio(0.0, 0.5, "s"), 10.0)


class Fold(unittest.TestCase):
    def test_every_row_kept_with_its_error(self):
        rows = report.fold(runs(), CASES)
        self.assertEqual(len(rows), len(CASES) * len(report.CONNECTORS))
        self.assertEqual(row(rows, "in256-serial", "layercake-whole")["error"], "boom")
        self.assertEqual(row(rows, "in1024-serial", "alone")["error"], "did not run")
        self.assertEqual(row(rows, "in1024-serial", "nixl")["error"], "no UCX")

    def test_medians_over_rounds(self):
        r = row(report.fold(runs(), CASES), "in256-serial", "layercake")
        self.assertEqual(r["ttft_p50"], 100.0)
        self.assertEqual(r["ttft_p99"], 200.0)
        self.assertEqual(r["itl_p50"], 10.0)
        self.assertEqual((r["rounds"], r["ok_rounds"]), (3, 3))

    def test_best_peer_per_metric(self):
        r = row(report.fold(runs(), CASES), "in256-serial", "layercake")
        self.assertEqual(r["best_peer"]["ttft_p50"], "mooncake")  # 150 < nixl's 200
        self.assertAlmostEqual(r["vs_peer"]["ttft_p50"], 1.5)
        self.assertEqual(r["best_peer"]["itl_p50"], "nixl")  # 8 < mooncake's 20
        self.assertAlmostEqual(r["vs_peer"]["itl_p50"], 0.8)  # behind
        self.assertEqual(r["best_peer"]["output_tok_s"], "mooncake")  # 60 > 40: higher is better
        self.assertAlmostEqual(r["vs_peer"]["output_tok_s"], 50.0 / 60.0)
        self.assertEqual(r["best_peer"]["cpu_D_s"], "nixl")  # 0.0: floored to 0.05
        self.assertAlmostEqual(r["vs_peer"]["cpu_D_s"], 0.05 / 3.0)
        self.assertAlmostEqual(r["vs_peer"]["cpu_total_s"], 1.01 / 5.0)  # mooncake 1 + 0.01

    def test_vs_alone(self):
        r = row(report.fold(runs(), CASES), "in256-serial", "layercake")
        self.assertAlmostEqual(r["vs_alone"]["ttft_p50"], 0.5)
        self.assertAlmostEqual(r["vs_alone"]["output_tok_s"], 0.5)
        self.assertAlmostEqual(r["vs_alone"]["cpu_P_s"], 2.0)  # alone's engine against P
        self.assertIsNone(r["vs_alone"]["cpu_D_s"])  # alone has no D
        self.assertAlmostEqual(r["vs_alone"]["cpu_total_s"], 0.8)

    def test_a_peer_that_cannot_run_leaves_the_other(self):
        r = row(report.fold(runs(), CASES), "in1024-serial", "layercake")
        self.assertEqual(r["best_peer"]["ttft_p50"], "mooncake")
        self.assertAlmostEqual(r["vs_peer"]["ttft_p50"], 2.0)
        self.assertIsNone(r["vs_alone"]["ttft_p50"])  # alone did not run that case

    def test_no_peer_no_ratio(self):
        rs = [run("layercake", "in256-serial"), {"connector": "nixl", "case": "in256-serial",
                                                  "round": 0, "error": "x"}]
        r = row(report.fold(rs, CASES[:1]), "in256-serial", "layercake")
        self.assertIsNone(r["vs_peer"]["ttft_p50"])
        self.assertIsNone(r["best_peer"]["ttft_p50"])

    def test_partial_rounds(self):
        rs = [run("nixl", "in256-serial", 0), {"connector": "nixl", "case": "in256-serial",
                                                "round": 1, "error": "timeout"}]
        r = row(report.fold(rs, CASES[:1]), "in256-serial", "nixl")
        self.assertNotIn("error", r)
        self.assertIn("1 of 2 rounds: timeout", r["partial"])

    def test_failed_requests_noted(self):
        rs = [run("alone", "in256-serial", completed=3, failed=1, failed_error="Bad Request")]
        rows = report.fold(rs, CASES[:1])
        r = row(rows, "in256-serial", "alone")
        self.assertEqual(r["failed"], "1 of 4 requests failed: Bad Request")
        self.assertEqual(r["ttft_p50"], 100.0)  # the completed requests' figures
        self.assertIn("| 256 in | alone (1 of 4 requests failed) | 100 |", report.table(rows, CASES[:1]))

    def test_behind(self):
        b = report.behind(report.fold(runs(), CASES))
        self.assertIn(("in256-serial", "layercake", "itl_p50", "vs_peer", 0.8), b)
        self.assertFalse([x for x in b if x[2] == "ttft_p50" and x[3] == "vs_peer"])


class Output(unittest.TestCase):
    def test_table(self):
        t = report.table(report.fold(runs(), CASES), CASES)
        self.assertIn("| 256 in | layercake | 100 | 200 | 10 | 30 | 50 |", t)
        self.assertIn("| | layercake vs best peer | 1.50x |", t)
        self.assertIn("| | layercake vs alone | 0.50x |", t)
        self.assertIn("| 256 in | layercake-whole | cannot run: boom |", t)
        cols = {line.count("|") for line in t.splitlines()}
        self.assertEqual(len(cols), 1, t)  # every line as wide as the header

    def test_svg_parses(self):
        s = report.svg(report.fold(runs(), CASES), CASES)
        doc = xml.dom.minidom.parseString(s)
        self.assertEqual(doc.documentElement.tagName, "svg")
        self.assertGreater(len(doc.getElementsByTagName("rect")), 10)


class Cli(unittest.TestCase):
    def test_help_without_vllm(self):
        out = subprocess.run([sys.executable, os.path.join(HERE, "run.py"), "--help"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("--quick", out.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=1)
