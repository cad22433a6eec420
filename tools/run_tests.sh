#!/usr/bin/env bash
# Run every test with ctest, then list each skipped test with the reason it
# printed: ctest reports a skip (exit 77) as "Skipped" and, even with
# --output-on-failure, does not show why.
#   tools/run_tests.sh [BUILD_DIR] [JOBS]
# Exit status: ctest's.
set -uo pipefail
build=${1:-build}
jobs=${2:-$(nproc)}
mkdir -p "$build/Testing/Temporary"
summary=$build/Testing/Temporary/run_tests.txt
ctest --test-dir "$build" --output-on-failure -j "$jobs" 2>&1 | tee "$summary"
rc=${PIPESTATUS[0]}

skipped=$(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' "$summary")
if [ -n "$skipped" ]; then
  echo
  echo "Skipped tests, and why:"
  for t in $skipped; do
    # The last line the test printed, from ctest's full log.
    why=$(awk -v t="$t" '
      /^[0-9]+\/[0-9]+ Test: / { name = $0; sub(/^[0-9]+\/[0-9]+ Test: /, "", name); mine = name == t; out = 0; next }
      mine && /^Output:$/ { out = 1; getline; next }
      mine && out && /^<end of output>$/ { print last; exit }
      mine && out && NF { last = $0 }' "$build/Testing/Temporary/LastTest.log")
    printf '  %-28s %s\n' "$t" "${why:-(printed no reason)}"
  done
fi
exit "$rc"
