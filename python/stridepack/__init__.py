"""stridepack: materialize strided NumPy / PyTorch / CuPy views into dense
buffers in one pass (one kernel launch on CUDA), through a C extension that
links libstridepack.

    import stridepack
    q, k, v = qkv[..., :P], qkv[..., P:2*P], qkv[..., 2*P:]        # strided views
    ws = torch.empty(stridepack.workspace_bytes([q, k, v]), dtype=torch.uint8, device="cuda")
    q, k, v = stridepack.pack([q, k, v], workspace=ws)             # dense, one launch
    stridepack.pack_into([q, k, v], [qd, kd, vd])                  # into your own buffers

With torch imported first, the calls are also torch custom ops under
torch.compile (see _torch_ops.py).
"""

import sys as _sys

from ._version import __version__


def _load_native():
    """The extension module: installed beside this file (a wheel, or the
    package CMake assembles in <build>/python), else, when this file is the
    checkout's python/stridepack, the one of the checkout's newest CMake
    build (build*/python/stridepack), so that PYTHONPATH=python works too."""
    import glob
    import importlib
    import os
    try:
        return importlib.import_module(__name__ + "._native")
    except ImportError as e:
        first = e
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    built = glob.glob(os.path.join(root, "build*", "python", "stridepack", "_native.*"))
    for path in sorted(built, key=os.path.getmtime, reverse=True):
        if os.path.dirname(path) not in __path__:
            __path__.append(os.path.dirname(path))
        try:
            return importlib.import_module(__name__ + "._native")
        except ImportError:
            __path__.pop()
    raise ImportError("stridepack: the extension module stridepack._native is not built for "
                      f"this interpreter ({first}); install the package (pip install ./python) "
                      "or build the checkout with CMake and put <build>/python on PYTHONPATH")


_native = _load_native()


def _check_version(package, library, header):
    """ImportError unless the library linked and the header the extension
    was built with both have the package's version."""
    if not (package == library == header):
        raise ImportError(
            f"stridepack {package}: the extension links libstridepack {library} (built against "
            f"header {header}); rebuild and reinstall the package from one checkout "
            "(pip install ./python)")


_check_version(__version__, _native.version(), _native.HEADER_VERSION)

from . import _frameworks  # noqa: E402

_native.configure(_frameworks.FRAMEWORKS)

from ._api import copy_batch, pack, pack_into, workspace_bytes  # noqa: E402
from ._conv import causal_conv1d, causal_conv1d_update  # noqa: E402
from ._errors import FallbackWarning, StridepackError  # noqa: E402
from ._kda import KdaBoundary, KdaInputs, kda_prefill, kda_workspace_bytes  # noqa: E402
from ._kda import available as kda_available  # noqa: E402
from ._torch_ops import register as register_torch_ops  # noqa: E402

__all__ = ["pack", "pack_into", "copy_batch", "workspace_bytes", "StridepackError",
           "FallbackWarning", "STATUS", "KdaBoundary", "KdaInputs", "kda_prefill", "kda_workspace_bytes", "kda_available",
           "causal_conv1d", "causal_conv1d_update",
           "version", "cuda_available", "copy_pass_count", "register_torch_ops",
           "__version__"]


def _status_table():
    """Status names by value, read from the library so they cannot drift:
    the strings read "SP_ERR_OVERLAP: memory regions overlap"."""
    names = {}
    for code in range(64):
        name = _native.status_string(code).split(":", 1)[0]
        if name.startswith("SP_") and name != "SP_ERR_UNKNOWN":
            names[name] = code
    return names


STATUS = _status_table()


def version() -> str:
    """Version string of the library linked ("0.1.0")."""
    return _native.version()


def cuda_available() -> bool:
    """True when the library has its CUDA backend and a device is usable."""
    return _native.cuda_available()


def copy_pass_count() -> int:
    """Copy passes (kernel launches on CUDA) issued by this process so far."""
    return _native.copy_pass_count()


# Engines import torch first; then the custom ops are there before anything
# is compiled. Otherwise call register_torch_ops() after importing torch.
if "torch" in _sys.modules:
    register_torch_ops()
