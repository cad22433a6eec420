"""The benchmark drivers' own CPU checks (--self-test): bench/kda_anchors.py
(its float64 reference against a scalar loop for every gate form, its
tables and shape lists) and bench/kda_decode.py (its inputs and accuracy
path on the CPU backend); and tools/perf_tables.py's tables of the decide
phase, the decode grid and the example layer from records written here.
Exits 77 without torch."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import sp_unittest

try:
    import torch  # noqa: F401
except ImportError:
    print("SKIP: torch is not importable")
    sys.exit(77)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BENCH = os.path.join(ROOT, "bench")


class Drivers(unittest.TestCase):
    def run_self_test(self, script):
        r = subprocess.run([sys.executable, os.path.join(BENCH, script), "--self-test"],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:])
        self.assertIn("self-test passed", r.stdout)

    def test_kda_anchors(self):
        self.run_self_test("kda_anchors.py")

    def test_kda_decode(self):
        self.run_self_test("kda_decode.py")

    def test_decide_tables(self):
        """Medians of each arm's runs and their ratio, by shape and build."""
        shape = dict(T=16384, H=96, N=1)
        files = {
            "decide_every_gate.json":
                [dict(kernel="chunked", every_gate=e, ms=m, **shape)
                 for e, m in ((0, 1.0), (1, 1.25), (1, 1.25), (0, 3.0), (0, 0.5))]
                + [dict(kernel="recurrent", ms=9.0, **shape)],
            "decide_decode_rows.json":
                [dict(kernel="decode", decode_rows=r, ms=0.01 * r, T=64, H=12, N=64, state=s)
                 for r in (16, 32) for s in ("f32", "bf16")]
                + [dict(kernel="recurrent", ms=0.5, T=64, H=12, N=64, state=s)
                   for s in ("f32", "bf16")],
        }
        dec = dict(N=64, H=12, k=1, pool="f32", limit_ms=0.02)
        files["h200_kda_decode.json"] = (
            [dict(arm=a, ms=m, **dec) for a, m in (("stridepack", 0.025), ("fla", 0.04),
                                                    ("dropin", 0.026))]
            + [dict(arm="accuracy", N=64, H=12, k=1, pool="f32", o_rel=1e-6)])
        layer = [dict(layer=n, api=a, T=16384, H=96, ms=m)
                 for n, a, m in (("kda_layer", "dropin", 10.0), ("kda_layer", "fla", 12.5),
                                 ("kda_layer_attend", "dropin", 2.0),
                                 ("kda_layer_attend", "fla", 6.0),
                                 ("kda_layer_attend", "stridepack", 1.9))]
        with tempfile.TemporaryDirectory() as d:
            for name, rows in files.items():
                with open(os.path.join(d, name), "w") as f:
                    f.writelines(json.dumps(r) + "\n" for r in rows)
            with open(os.path.join(d, "h200_layer.json"), "w") as f:  # one document
                json.dump({"device": "x", "results": [dict(consumer="fla", ms=1.0)] + layer}, f,
                          indent=1)
            r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "perf_tables.py"), d],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| 16384/96/1 chunked | 1.0000 (3) | 1.2500 (2) | 1.250 |", r.stdout)
        self.assertIn("| 64/12/64 f32 | 0.1600 | 0.3200 | 0.5000 |", r.stdout)
        self.assertIn("| 64/12/64 bf16 | 0.1600 | 0.3200 | 0.5000 |", r.stdout)
        self.assertIn("| 64 | 12 | 1 | f32 | 0.0200 | 0.0250 (0.80) | 0.0400 (0.50) | "
                      "0.0260 (0.77) | – | **0.62** |", r.stdout)
        self.assertIn("| kda_layer | 16384 | 96 | – | 10.000 | 12.500 | **1.25** |", r.stdout)
        self.assertIn("| kda_layer_attend | 16384 | 96 | 1.900 | 2.000 | 6.000 | **3.00** |",
                      r.stdout)


if __name__ == "__main__":
    sp_unittest.main(__name__)
