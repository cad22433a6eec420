#!/usr/bin/env bash
# Run every test with ctest, then list what was skipped, with the reason:
#   - each test skipped as a whole (exit 77, ctest's "Skipped"; ctest does
#     not show why, even with --output-on-failure): the last line it printed;
#   - each case skipped inside a test that ran: unittest's "... skipped
#     'reason'" lines (a test program reporting "OK (skipped=3)" passes
#     while three of its cases did not run), and "SKIP: reason" lines of a
#     test that went on after them.
#   tools/run_tests.sh [BUILD_DIR] [JOBS]
# Exit status: ctest's.
set -uo pipefail
build=${1:-build}
jobs=${2:-$(nproc)}
mkdir -p "$build/Testing/Temporary"
summary=$build/Testing/Temporary/run_tests.txt
log=$build/Testing/Temporary/LastTest.log
ctest --test-dir "$build" --output-on-failure -j "$jobs" 2>&1 | tee "$summary"
rc=${PIPESTATUS[0]}
[ -f "$log" ] || exit "$rc"

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
      mine && out && NF { last = $0 }' "$log")
    printf '  %-28s %s\n' "$t" "${why:-(printed no reason)}"
  done
fi

# Cases skipped inside the tests that were not skipped as a whole: one
# "test<TAB>case<TAB>reason" line each; "test<TAB>+<TAB>N" where a test's
# own count (unittest's skipped=N) exceeds the cases it named.
cases=$(awk -v skipped=" $(echo $skipped) " '
  function flush() {
    if (name != "" && declared > named) printf "%s\t+\t%d\n", name, declared - named
  }
  /^[0-9]+\/[0-9]+ Test: / {
    flush()
    name = $0; sub(/^[0-9]+\/[0-9]+ Test: /, "", name)
    if (index(skipped, " " name " ")) name = ""
    out = 0; named = 0; declared = 0; next
  }
  name == "" { next }
  /^Output:$/ { out = 1; getline; next }
  /^<end of output>$/ { out = 0; next }
  !out { next }
  / \.\.\. skipped '\''/ {
    at = index($0, " ... skipped '\''")
    id = substr($0, 1, at - 1); why = substr($0, at + 14); sub(/'\''$/, "", why)
    # "test_x (module.Class.test_x)" (3.11), "test_x (module.Class)" (older)
    method = id; sub(/ .*/, "", method)
    if (match(id, /\(.*\)$/)) {
      id = substr(id, RSTART + 1, RLENGTH - 2); sub(/^__main__\./, "", id)
      if (substr(id, length(id) - length(method)) != "." method) id = id "." method
    }
    printf "%s\t%s\t%s\n", name, id, why; named++; next
  }
  /^SKIP: / { why = $0; sub(/^SKIP: /, "", why); printf "%s\t-\t%s\n", name, why; named++; next }
  /skipped=[0-9]+/ { n = $0; sub(/.*skipped=/, "", n); sub(/[^0-9].*/, "", n); declared += n }
  END { flush() }' "$log")
if [ -n "$cases" ]; then
  echo
  echo "Cases skipped inside tests that ran, and why:"
  printf '%s\n' "$cases" | while IFS=$'\t' read -r t c why; do
    if [ "$c" = + ]; then
      printf '  %-28s %s more skipped (printed no reason)\n' "$t" "$why"
    elif [ "$c" = - ]; then
      printf '  %-28s %s\n' "$t" "$why"
    else
      printf '  %-28s %s: %s\n' "$t" "$c" "$why"
    fi
  done
fi
exit "$rc"
