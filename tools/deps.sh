#!/bin/sh
# Check the build's dependencies; on Debian/Ubuntu as root, install what is
# missing from the distribution's packages; otherwise name it and fail.
#   cmake >= 3.25, ninja, a C11 and a C++ compiler — the build (C++: the
#                                         header's C++ compile test)
#   pkg-config                            — the install test's pkg-config consumer
#   bash                                  — make test's ctest wrapper (tools/run_tests.sh)
#   libomp / libgomp (with the compiler)  — the CPU backend's threads
#   python3 with numpy (python3-numpy)    — the Python binding's tests
#   python3-dev                           — Python.h, to build the binding's extension module
#   python3-pip                           — the binding's wheel test (pip wheel / pip install)
#   python3-torch (optional, installed as root) — Debian's CPU build of PyTorch:
#                                           the binding's torch tests run without a GPU
#   python3-pyelftools (optional, as root)  — tools/sass_lines.py (its self-test)
#   nvdisasm (optional; not in Debian main) — tools/sass_lines.py --spans (DEVELOPERS.md)
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
# The first interpreter with NumPy is the one the Python tests use; it also
# needs its headers and pip.
py_test=""
for py in python3 /usr/bin/python3; do
  if [ -z "$py_test" ] && command -v "$py" >/dev/null 2>&1 && "$py" -c 'import numpy' >/dev/null 2>&1; then
    py_test=$py
  fi
done
optional=""
if [ -z "$py_test" ]; then
  missing="$missing python3-numpy python3-dev python3-pip"
  optional=" python3-torch python3-pyelftools"
else
  "$py_test" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' ||
    missing="$missing python3-dev"
  "$py_test" -m pip --version >/dev/null 2>&1 || missing="$missing python3-pip"
  "$py_test" -c 'import torch' >/dev/null 2>&1 || optional=" python3-torch"
  "$py_test" -c 'import elftools' >/dev/null 2>&1 || optional="$optional python3-pyelftools"
fi

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

# Optional: a failure to install it only leaves those tests Not Run.
if [ -n "$optional" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "deps: installing (optional):$optional"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $optional >/dev/null &&
    optional=""
fi

ver=$(cmake --version | sed -n 's/^cmake version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
set -- $ver
if [ "${1:-0}" -lt 3 ] || { [ "${1:-0}" -eq 3 ] && [ "${2:-0}" -lt 25 ]; }; then
  echo "deps: cmake >= 3.25 needed, found $(cmake --version | head -n 1)" >&2
  exit 1
fi
[ -z "$optional" ] || echo "deps: note: no$optional: the tests that need them are Not Run"
command -v clang >/dev/null 2>&1 || echo "deps: note: no clang, the libFuzzer target is not built"
command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] ||
  echo "deps: note: no nvcc, the CUDA backend is not built"
exit 0
