#!/bin/sh
# Check the build's dependencies; on Debian/Ubuntu as root, install what is
# missing from the distribution's packages; otherwise name it and fail.
#   cmake >= 3.25, ninja, a C11 and a C++ compiler — the build (C++: the
#                                         header's C++ compile test)
#   pkg-config                            — the install test's pkg-config consumer
#   bash                                  — make test's ctest wrapper (tools/run_tests.sh)
#   libomp / libgomp (with the compiler)  — the CPU backend's threads
#   python3 with numpy (python3-numpy)    — the Python binding's tests
#   clang (optional)                      — the libFuzzer target
#   nvcc (optional)                       — the CUDA backend
set -u
missing=""
need() { command -v "$1" >/dev/null 2>&1 || missing="$missing $2"; }
need cmake cmake
need ninja ninja-build
need cc gcc
need c++ g++
need pkg-config pkg-config
need bash bash
have_numpy=0
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import numpy' >/dev/null 2>&1; then have_numpy=1; fi
done
[ "$have_numpy" = 1 ] || missing="$missing python3-numpy"

if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "deps: installing:$missing"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null || {
      echo "deps: apt-get install$missing failed" >&2; exit 1; }
  else
    echo "deps: missing:$missing — install these packages (Debian names) and retry" >&2
    exit 1
  fi
fi

ver=$(cmake --version | sed -n 's/^cmake version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
set -- $ver
if [ "${1:-0}" -lt 3 ] || { [ "${1:-0}" -eq 3 ] && [ "${2:-0}" -lt 25 ]; }; then
  echo "deps: cmake >= 3.25 needed, found $(cmake --version | head -n 1)" >&2
  exit 1
fi
command -v clang >/dev/null 2>&1 || echo "deps: note: no clang, the libFuzzer target is not built"
command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] ||
  echo "deps: note: no nvcc, the CUDA backend is not built"
exit 0
