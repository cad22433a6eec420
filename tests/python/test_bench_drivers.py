"""The benchmark drivers' own CPU checks (--self-test): bench/kda_anchors.py
(its float64 reference against a scalar loop for every gate form, its
tables and shape lists) and bench/kda_decode.py (its inputs and accuracy
path on the CPU backend). Exits 77 without torch."""

import os
import subprocess
import sys
import unittest

import sp_unittest

try:
    import torch  # noqa: F401
except ImportError:
    print("SKIP: torch is not importable")
    sys.exit(77)

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")


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


if __name__ == "__main__":
    sp_unittest.main(__name__)
