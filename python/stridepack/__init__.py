"""stridepack: materialize strided NumPy / PyTorch / CuPy views into dense
buffers in one pass (one kernel launch on CUDA), over libstridepack.so.

    import stridepack
    q, k, v = qkv[..., :P], qkv[..., P:2*P], qkv[..., 2*P:]        # strided views
    ws = torch.empty(stridepack.workspace_bytes([q, k, v]), dtype=torch.uint8, device="cuda")
    q, k, v = stridepack.pack([q, k, v], workspace=ws)             # dense, one launch

The library is found through $STRIDEPACK_LIBRARY, then next to this package,
then the checkout's build*/src/, then the system loader (see _lib.py).
"""

from . import _lib
from ._api import FallbackWarning, copy_batch, pack, workspace_bytes
from ._kda import KdaBoundary, kda_prefill
from ._kda import available as kda_available
from ._lib import STATUS, StridepackError

__all__ = ["pack", "copy_batch", "workspace_bytes", "StridepackError", "FallbackWarning",
           "STATUS", "KdaBoundary", "kda_prefill", "kda_available", "library_path",
           "version", "cuda_available", "copy_pass_count"]

library_path = _lib.path


def version():
    """Version string of the library actually loaded ("0.1.0")."""
    return _lib.lib.sp_version().decode()


def cuda_available():
    """True when the library has its CUDA backend and a device is usable."""
    return bool(_lib.lib.sp_cuda_available())


def copy_pass_count():
    """Copy passes (kernel launches on CUDA) issued by this process so far."""
    return int(_lib.lib.sp_copy_pass_count())
