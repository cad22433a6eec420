"""The PEP 517 build backend of the stridepack wheel, standard library only:
`pip install ./python` needs nothing from a package index (pip's build
isolation installs nothing, since nothing is required), so it works offline.

build_wheel configures python/CMakeLists.txt with CMake (which builds the
library from the checkout around this directory, then the extension module
for the interpreter running the build), and zips the package it assembles
into a platform-tagged wheel (cpXY-cpXY-<platform>). The version is read
from include/stridepack.h and must equal stridepack/_version.py and
pyproject.toml's.

What it builds: by default what this machine can run (SP_CUDA_ARCHS=auto,
cmake/cuda_arch.cmake): machine code for the GPUs nvidia-smi shows, or no
CUDA backend at all when it shows none. Settings (environment):
STRIDEPACK_CUDA_ARCHS=all builds every architecture from sm_80 on (for a
wheel to run elsewhere), =none the CPU only, =90 (any CMAKE_CUDA_ARCHITECTURES
list) those; STRIDEPACK_CMAKE_ARGS adds arguments to the configure step;
STRIDEPACK_BUILD_DIR keeps the CMake build there (default: a temporary
directory, removed afterwards). The CUDA backend needs nvcc (also found at
/usr/local/cuda/bin/nvcc).

Progress: pip shows a build backend's output only with -v, so each build
step ("[12/40] Building C object ...") and the configure summary also go to
the stderr of the process that started this one (pip's own, where the user
sees "Building wheel ..."), when that is a different file from ours.
STRIDEPACK_PROGRESS=0 turns that off; everything always goes to our stderr.
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


class _Progress:
    """Where the progress lines go besides our stderr: the parent's stderr
    (Linux, /proc), when it is not the same file as ours."""

    def __init__(self):
        self.out = None
        if os.environ.get("STRIDEPACK_PROGRESS", "1") == "0":
            return
        path = f"/proc/{os.getppid()}/fd/2"
        try:
            theirs, ours = os.stat(path), os.fstat(sys.stderr.fileno())
            if (theirs.st_dev, theirs.st_ino) != (ours.st_dev, ours.st_ino):
                self.out = open(path, "a", buffering=1)  # append: never truncate a log
        except (OSError, ValueError):
            self.out = None

    def line(self, text):
        print(text, file=sys.stderr, flush=True)
        if self.out:
            try:
                self.out.write(f"  stridepack: {text}\n")
            except OSError:
                self.out = None

    def close(self):
        if self.out:
            self.out.close()


# Lines of CMake's output worth showing while pip waits: the build steps
# (Ninja's "[12/40] ...", Make's "[ 30%] ..."), and the configure summary.
_STEP = re.compile(r"^\[ *\d+(/\d+|%)\]|^-- stridepack |^CMake (Error|Warning)")


def _run(args, env, progress):
    """Runs args, every output line to our stderr, the steps to progress;
    raises CalledProcessError (after the whole output) on failure."""
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace")
    for raw in proc.stdout:
        text = raw.rstrip("\n")
        if _STEP.search(text):
            progress.line(text)
        else:
            print(text, file=sys.stderr)
    if proc.wait() != 0:
        raise subprocess.CalledProcessError(proc.returncode, args)


def _cmake_args(build_dir, environ):
    """The configure command for this interpreter and the settings in environ."""
    archs = environ.get("STRIDEPACK_CUDA_ARCHS", "").strip() or "auto"
    args = ["cmake", "-S", HERE, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={sys.executable}", f"-DSP_CUDA_ARCHS={archs}"]
    if shutil.which("ninja"):
        args += ["-G", "Ninja"]
    if (archs != "none" and not shutil.which("nvcc")
            and os.path.exists("/usr/local/cuda/bin/nvcc")):
        args.append("-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc")
    return args + shlex.split(environ.get("STRIDEPACK_CMAKE_ARGS", ""))


def _cmake_build(build_dir):
    env = _tool_env()
    progress = _Progress()
    try:
        args = _cmake_args(build_dir, os.environ)
        progress.line("configuring (" + " ".join(a for a in args if a.startswith("-DSP_")) +
                      "; STRIDEPACK_CUDA_ARCHS=all builds every CUDA architecture)")
        _run(args, env, progress)
        progress.line("building the library and the extension module")
        _run(["cmake", "--build", build_dir, "--target", "stridepack_python",
              "-j", str(os.cpu_count() or 1)], env, progress)
    finally:
        progress.close()
    return os.path.join(build_dir, NAME)


def _metadata(version):
    with open(os.path.join(HERE, "README.md")) as f:
        readme = f.read()
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\nSummary: {SUMMARY}\n"
            "Requires-Python: >=3.8\nDescription-Content-Type: text/markdown\n\n" + readme)


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _dist_info_files(version, tag):
    dist_info = f"{NAME}-{version}.dist-info"
    wheel = (f"Wheel-Version: 1.0\nGenerator: stridepack backend\nRoot-Is-Purelib: false\n"
             f"Tag: {tag}\n")
    return dist_info, [(f"{dist_info}/METADATA", _metadata(version).encode()),
                       (f"{dist_info}/WHEEL", wheel.encode()),
                       (f"{dist_info}/top_level.txt", f"{NAME}\n".encode())]


def _write_wheel(wheel_directory, package_dir, version):
    tag = _tag()
    name = f"{NAME}-{version}-{tag}.whl"
    files = []
    for entry in sorted(os.listdir(package_dir)):
        if (entry.endswith(".py") or entry == "py.typed"
                or (entry.startswith("_native.") and entry.endswith(".so"))):
            with open(os.path.join(package_dir, entry), "rb") as f:
                files.append((f"{NAME}/{entry}", f.read()))
    if not any(p.startswith(f"{NAME}/_native.") for p, _ in files):
        raise RuntimeError(f"the build left no extension module in {package_dir}")
    dist_info, meta = _dist_info_files(version, tag)
    files += meta
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


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    # Without this hook pip would build the whole wheel to learn its
    # metadata ("Preparing metadata ... still running").
    dist_info, files = _dist_info_files(_version(), _tag())
    for path, data in files:
        os.makedirs(os.path.join(metadata_directory, os.path.dirname(path)), exist_ok=True)
        with open(os.path.join(metadata_directory, path), "wb") as f:
            f.write(data)
    return dist_info


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
