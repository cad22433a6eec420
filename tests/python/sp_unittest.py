"""Run one test module's unittest cases and turn the result into the exit
status ctest reads: 0 only when tests ran and all passed; 1 when one failed
or none ran (a run that compared nothing must not count as a pass)."""

import sys
import unittest


def main(module_name):
    module = sys.modules[module_name]
    suite = unittest.defaultTestLoader.loadTestsFromModule(module)
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    ran = result.testsRun - len(result.skipped)
    if ran == 0:
        print("FAIL: no test ran", file=sys.stderr)
        sys.exit(1)
    sys.exit(0 if result.wasSuccessful() else 1)
