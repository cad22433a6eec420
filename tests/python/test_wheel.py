"""The wheel, built and installed the way a user does it, offline: `pip wheel`
of python/ with no package index (pip's default build isolation included),
then `pip install` of that wheel into a fresh virtual environment (made with
--system-site-packages, for NumPy and the system's pip, and --without-pip:
no index needed; when the tests themselves run in a virtual environment,
that environment's packages are made visible too), then stridepack imported
by that environment's interpreter from outside the checkout, with no path to
this build (no PYTHONPATH into the checkout, no library path). The library
is built CPU-only here (STRIDEPACK_CUDA_ARCHS=none) to keep the test quick;
the CUDA build is the same recipe with nvcc found. The wheel must hold the
package's files and nothing else, and pip, run without -v, must have shown
the build's steps. Run by ctest with SP_SOURCE_DIR and SP_WHEEL_SCRATCH
set."""

import base64
import glob
import hashlib
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import unittest
import zipfile

import sp_unittest

SOURCE = os.environ.get("SP_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SCRATCH = os.environ.get("SP_WHEEL_SCRATCH", os.path.join(os.getcwd(), "wheel-scratch"))

CHECK = r"""
import sys, numpy as np, stridepack as sp
from stridepack import _native
assert sp.__file__.startswith(sys.argv[1]), sp.__file__
assert _native.__file__.startswith(sys.argv[1]), _native.__file__
a = np.arange(48, dtype=np.float32).reshape(6, 8)
ws = np.zeros(sp.workspace_bytes([a.T, a[:, ::2]]), np.uint8)
o = sp.pack([a.T, a[:, ::2], a], workspace=ws)
assert np.array_equal(o[0], a.T) and np.array_equal(o[1], a[:, ::2]) and o[2] is a
print(sp.__version__, sp.version(), _native.HEADER_VERSION)
"""


def run(*args, env=None, cwd=None):
    return subprocess.run(list(args), env=env, cwd=cwd, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def pip(*args, env=None, python=sys.executable):
    return run(python, "-m", "pip", *args, env=env)


def header_version():
    with open(os.path.join(SOURCE, "include", "stridepack.h")) as f:
        text = f.read()
    return ".".join(re.search(rf"#define SP_VERSION_{p} (\d+)", text).group(1)
                    for p in ("MAJOR", "MINOR", "PATCH"))


class Wheel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if pip("--version").returncode != 0:
            raise RuntimeError(f"{sys.executable} has no pip (Debian: apt-get install "
                               "python3-pip): the wheel cannot be tested")
        shutil.rmtree(SCRATCH, ignore_errors=True)
        os.makedirs(SCRATCH)
        env = dict(os.environ, STRIDEPACK_CUDA_ARCHS="none",
                   STRIDEPACK_BUILD_DIR=os.path.join(SCRATCH, "build"),
                   PIP_NO_INDEX="1", PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
        for key in ("PYTHONPATH", "STRIDEPACK_CMAKE_ARGS", "STRIDEPACK_PROGRESS"):
            env.pop(key, None)
        cls.dist = os.path.join(SCRATCH, "dist")
        r = pip("wheel", "--no-deps", "-w", cls.dist, os.path.join(SOURCE, "python"), env=env)
        cls.build_log = r.stdout
        if r.returncode != 0:
            raise RuntimeError("pip wheel failed:\n" + r.stdout)
        cls.target = os.path.join(SCRATCH, "venv")
        r = run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", cls.target)
        if r.returncode != 0:
            raise RuntimeError("python -m venv failed:\n" + r.stdout)
        cls.python = os.path.join(cls.target, "bin", "python")
        if sys.prefix != sys.base_prefix:
            # This interpreter runs in a virtual environment itself, so the
            # new one's "system" packages are the base interpreter's, without
            # NumPy: name this environment's site directories after its own.
            r = run(cls.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
            with open(os.path.join(r.stdout.strip(), "outer_site.pth"), "w") as f:
                f.writelines(d + "\n" for d in site.getsitepackages() if os.path.isdir(d))
        r = pip("install", "--no-deps", *glob.glob(os.path.join(cls.dist, "*.whl")), env=env,
                python=cls.python)
        if r.returncode != 0:
            raise RuntimeError("pip install into the virtual environment failed:\n" + r.stdout)

    def wheel(self):
        wheels = glob.glob(os.path.join(self.dist, "*.whl"))
        self.assertEqual(len(wheels), 1, wheels)
        return wheels[0]

    def test_platform_tagged_with_extension(self):
        name = os.path.basename(self.wheel())
        v = sys.version_info
        tag = f"cp{v[0]}{v[1]}"
        self.assertRegex(name, rf"^stridepack-{re.escape(header_version())}-{tag}-{tag}\w*-"
                               r"(linux|manylinux|macosx)_\w+\.whl$")
        with zipfile.ZipFile(self.wheel()) as z:
            names = z.namelist()
            self.assertTrue(any(re.match(r"stridepack/_native\..*\.so$", n) for n in names), names)
            self.assertFalse(any(n.endswith(".c") or n.endswith(".h") for n in names), names)
            self.assertIn("stridepack/py.typed", names)  # PEP 561: the package's hints count
            wheel_meta = z.read(next(n for n in names if n.endswith("dist-info/WHEEL"))).decode()
            self.assertIn("Root-Is-Purelib: false", wheel_meta)
            record = z.read(next(n for n in names if n.endswith("dist-info/RECORD"))).decode()
            for line in record.splitlines():
                path, digest, size = line.rsplit(",", 2)
                if not digest:
                    continue
                data = z.read(path)
                expect = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                self.assertEqual(digest, "sha256=" + expect.decode(), path)
                self.assertEqual(int(size), len(data), path)

    def test_holds_the_package_and_nothing_else(self):
        package = os.path.join(SOURCE, "python", "stridepack")
        expect = {f"stridepack/{f}" for f in os.listdir(package) if f.endswith(".py")}
        expect |= {"stridepack/py.typed",
                   "stridepack/_native" + sysconfig.get_config_var("EXT_SUFFIX")}
        dist_info = f"stridepack-{header_version()}.dist-info"
        expect |= {f"{dist_info}/{f}" for f in ("METADATA", "WHEEL", "top_level.txt", "RECORD")}
        with zipfile.ZipFile(self.wheel()) as z:
            names = z.namelist()
            self.assertEqual(len(names), len(set(names)), names)
            self.assertEqual(set(names), expect)
            record = z.read(f"{dist_info}/RECORD").decode().splitlines()
            self.assertEqual(sorted(line.rsplit(",", 2)[0] for line in record), sorted(names))
            meta = z.read(f"{dist_info}/METADATA").decode()
            self.assertIn("\nName: stridepack\n", meta)
            self.assertIn(f"\nVersion: {header_version()}\n", meta)
            for f in ("__init__.py", "_version.py"):
                with open(os.path.join(package, f), "rb") as src:
                    self.assertEqual(z.read(f"stridepack/{f}"), src.read(), f)
            # The library is linked in: nothing asks the loader for it.
            native = z.read("stridepack/_native" + sysconfig.get_config_var("EXT_SUFFIX"))
            self.assertTrue(native.startswith(b"\x7fELF"))
            self.assertNotIn(b"libstridepack.so", native)

    def test_pip_showed_the_build_steps(self):
        # pip ran without -v, which hides a backend's output: the steps
        # reached its output through the backend's progress lines.
        steps = re.findall(r"^ *stridepack: \[(\d+)/(\d+)\] ", self.build_log, re.M)
        self.assertGreater(len(steps), 5, self.build_log)
        # Up to the last one, nearly: Ninja numbers a step's line by the
        # steps finished when it prints it, which with j jobs can be up to j
        # short of the total (a 16-core machine's last line was 33/34).
        # (Ninja may first re-check CMake's globs as a step list of its own.)
        total = int(steps[-1][1])
        done = [int(a) for a, b in steps if int(b) == total]
        self.assertGreater(len(done), 5, self.build_log)
        self.assertEqual(done, sorted(done), self.build_log)
        self.assertGreaterEqual(done[-1], total - (os.cpu_count() or 1), self.build_log)
        self.assertLessEqual(done[-1], total, self.build_log)
        self.assertRegex(self.build_log, r"stridepack: -- stridepack [\d.]+: CUDA backend OFF "
                                         r"\(SP_CUDA_ARCHS=none")

    def test_default_builds_for_this_machine(self):
        # Without a setting the backend asks CMake for what this machine can
        # run (cmake/cuda_arch.cmake's auto); STRIDEPACK_CUDA_ARCHS overrides it.
        sys.path.insert(0, os.path.join(SOURCE, "python", "_build"))
        try:
            import backend
        finally:
            sys.path.pop(0)
        self.assertIn("-DSP_CUDA_ARCHS=auto", backend._cmake_args("b", {}))
        self.assertIn("-DSP_CUDA_ARCHS=all", backend._cmake_args("b", {"STRIDEPACK_CUDA_ARCHS": "all"}))
        args = backend._cmake_args("b", {"STRIDEPACK_CUDA_ARCHS": "none"})
        self.assertIn("-DSP_CUDA_ARCHS=none", args)
        self.assertFalse([a for a in args if a.startswith("-DCMAKE_CUDA_COMPILER")], args)

    def test_imports_and_packs_from_the_install(self):
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "STRIDEPACK_LIBRARY")}
        r = run(self.python, "-c", CHECK, os.path.abspath(self.target), env=env, cwd=SCRATCH)
        self.assertEqual(r.returncode, 0, r.stdout)
        v = header_version()
        self.assertEqual(r.stdout.split(), [v, v, v])

    def test_no_build_output_in_the_source_tree(self):
        # An in-tree build must leave python/ as it was (the CMake build
        # lives in STRIDEPACK_BUILD_DIR or a temporary directory).
        left = [p for p in ("build", "stridepack.egg-info", "dist")
                if os.path.exists(os.path.join(SOURCE, "python", p))]
        self.assertEqual(left, [])


if __name__ == "__main__":
    sp_unittest.main(__name__)
