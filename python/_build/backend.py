"""The PEP 517 build backend of the stridepack wheel, standard library only:
`pip install ./python` needs nothing from a package index (pip's build
isolation installs nothing, since nothing is required), so it works offline.

build_wheel configures python/CMakeLists.txt with CMake (which builds the
library from the checkout around this directory, then the extension module
for the interpreter running the build), and zips the package it assembles
into a platform-tagged wheel (cpXY-cpXY-<platform>). The version is read
from include/stridepack.h and must equal stridepack/_version.py and
pyproject.toml's.

Settings (environment): STRIDEPACK_BUILD_DIR keeps the CMake build there
(default: a temporary directory, removed afterwards); STRIDEPACK_CMAKE_ARGS
adds arguments to the configure step (e.g. -DSP_ENABLE_CUDA=OFF). The CUDA
backend is built when CMake finds nvcc (also /usr/local/cuda/bin/nvcc).
"""

import base64
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
ROOT = os.path.dirname(HERE)
NAME = "stridepack"
SUMMARY = "Materialize strided NumPy / PyTorch / CuPy views into dense buffers in one pass"


def _version():
    header = os.path.join(ROOT, "include", "stridepack.h")
    with open(header) as f:
        text = f.read()
    parts = [re.search(rf"#define SP_VERSION_{p} (\d+)", text).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    version = ".".join(parts)
    for path, pattern in (("stridepack/_version.py", r'__version__ = "([^"]+)"'),
                          ("pyproject.toml", r'(?m)^version = "([^"]+)"')):
        with open(os.path.join(HERE, path)) as f:
            found = re.search(pattern, f.read()).group(1)
        if found != version:
            raise RuntimeError(f"python/{path} says {found}, include/stridepack.h says "
                               f"{version}: make them equal")
    return version


def _tag():
    impl = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    abi = impl + getattr(sys, "abiflags", "")
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{impl}-{abi}-{plat}"


def _tool_env():
    """The environment for CMake: without the Python path of pip's isolated
    build, which would hide the packages of a CMake installed with pip."""
    env = dict(os.environ)
    for key in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME"):
        env.pop(key, None)
    return env


def _cmake_build(build_dir):
    args = ["cmake", "-S", HERE, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={sys.executable}"]
    if shutil.which("ninja"):
        args += ["-G", "Ninja"]
    if not shutil.which("nvcc") and os.path.exists("/usr/local/cuda/bin/nvcc"):
        args.append("-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc")
    args += shlex.split(os.environ.get("STRIDEPACK_CMAKE_ARGS", ""))
    env = _tool_env()
    subprocess.run(args, check=True, stdout=sys.stderr, env=env)
    subprocess.run(["cmake", "--build", build_dir, "--target", "stridepack_python",
                    "-j", str(os.cpu_count() or 1)], check=True, stdout=sys.stderr, env=env)
    return os.path.join(build_dir, NAME)


def _metadata(version):
    with open(os.path.join(HERE, "README.md")) as f:
        readme = f.read()
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\nSummary: {SUMMARY}\n"
            "Requires-Python: >=3.8\nDescription-Content-Type: text/markdown\n\n" + readme)


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory, package_dir, version):
    tag = _tag()
    name = f"{NAME}-{version}-{tag}.whl"
    dist_info = f"{NAME}-{version}.dist-info"
    files = []
    for entry in sorted(os.listdir(package_dir)):
        if (entry.endswith(".py") or entry == "py.typed"
                or (entry.startswith("_native.") and entry.endswith(".so"))):
            with open(os.path.join(package_dir, entry), "rb") as f:
                files.append((f"{NAME}/{entry}", f.read()))
    if not any(p.startswith(f"{NAME}/_native.") for p, _ in files):
        raise RuntimeError(f"the build left no extension module in {package_dir}")
    wheel = (f"Wheel-Version: 1.0\nGenerator: stridepack backend\nRoot-Is-Purelib: false\n"
             f"Tag: {tag}\n")
    files += [(f"{dist_info}/METADATA", _metadata(version).encode()),
              (f"{dist_info}/WHEEL", wheel.encode()),
              (f"{dist_info}/top_level.txt", f"{NAME}\n".encode())]
    record = [_record_line(p, d) for p, d in files] + [f"{dist_info}/RECORD,,"]
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    path = os.path.join(wheel_directory, name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in files:
            info = zipfile.ZipInfo(p, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if p.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, d)
    return name


# ---- PEP 517 hooks ------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    keep = os.environ.get("STRIDEPACK_BUILD_DIR")
    build_dir = os.path.abspath(keep) if keep else tempfile.mkdtemp(prefix="stridepack-build-")
    try:
        return _write_wheel(wheel_directory, _cmake_build(build_dir), version)
    finally:
        if not keep:
            shutil.rmtree(build_dir, ignore_errors=True)


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_sdist(sdist_directory, config_settings=None):
    # The wheel is built from the whole checkout (library sources, headers,
    # CMake files), not from python/ alone: there is no source distribution
    # of this directory by itself.
    raise RuntimeError("stridepack: no sdist of python/; build the wheel from a checkout "
                       "(pip wheel ./python or pip install ./python)")
