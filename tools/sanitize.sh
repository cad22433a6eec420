#!/usr/bin/env bash
# sanitize.sh — the whole CPU suite under AddressSanitizer and
# UndefinedBehaviorSanitizer: a CPU-only build in BUILD_DIR (default
# build-sanitize) where every compile and link, the install test's consumers
# included, goes through a compiler wrapper that adds the sanitizer flags;
# then every test but the python tier (an interpreter, not this build's
# code). Any report fails the test that made it.
#     tools/sanitize.sh [BUILD_DIR] [ctest args...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(mkdir -p "${1:-$root/build-sanitize}" && cd "${1:-$root/build-sanitize}" && pwd)"
[ $# -gt 0 ] && shift
cc="${CC:-gcc}" cxx="${CXX:-g++}"
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
for w in cc:"$cc" cxx:"$cxx"; do
    printf '#!/bin/sh\nexec %s %s "$@"\n' "${w#*:}" "$flags" > "$build/sanitize-${w%%:*}"
    chmod +x "$build/sanitize-${w%%:*}"
done
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSP_ENABLE_CUDA=OFF \
      -DCMAKE_C_COMPILER="$build/sanitize-cc" -DCMAKE_CXX_COMPILER="$build/sanitize-cxx"
cmake --build "$build"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
ctest --test-dir "$build" -LE python --output-on-failure "$@"
