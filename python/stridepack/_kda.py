"""The KDA prefill and its input boundary (include/stridepack_kda.h), thin:
arrays in, one extension call that fills sp_kda_args and calls the library.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from . import _native
from ._api import Array
from ._errors import error

GATES = {"lower_bound": 0, "softplus": 1}  # sp_kda_gate
KERNELS = {"auto": 0, "recurrent": 1, "chunked": 2, "chunked_two_pass": 3}  # sp_kda_kernel
_PREFILL, _REFERENCE, _BOUNDARY, _WORKSPACE_BYTES = 0, 1, 2, 3


def available() -> bool:
    """True: the extension links the whole library, KDA part included."""
    return True


def _workspace(ws):
    """(address, bytes) of a workspace array (torch tensor or NumPy array)."""
    if ws is None:
        return None
    if hasattr(ws, "data_ptr"):
        return (ws.data_ptr(), ws.numel() * ws.element_size())
    return (ws.__array_interface__["data"][0], ws.nbytes)


def _run(mode, boundary, q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, state_indices, o,
         gate, lower_bound, scale, checkpoint_interval, checkpoint_cu_starts, checkpoints,
         kernel="auto", workspace=None):
    if gate not in GATES:
        raise error("SP_ERR_INVALID_ARGUMENT", 1,
                              f"gate: {gate!r} is not one of {sorted(GATES)}")
    if kernel not in KERNELS:
        raise error("SP_ERR_INVALID_ARGUMENT", 1,
                              f"kernel: {kernel!r} is not one of {sorted(KERNELS)}")
    tensors = (q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, state_indices, o,
               checkpoint_cu_starts, checkpoints)
    return _native.kda(mode, boundary, tensors, GATES[gate], lower_bound, scale,
                       checkpoint_interval, None, KERNELS[kernel], _workspace(workspace))


def kda_prefill(q: Array, k: Array, v: Array, g: Array, beta: Array, A_log: Array,
                dt_bias: Array, cu_seqlens: Array, state: Array, state_indices: Optional[Array],
                o: Array, *, gate: str = "lower_bound", lower_bound: float = -5.0,
                scale: float = 0.0, checkpoint_interval: int = 0,
                checkpoint_cu_starts: Optional[Array] = None, checkpoints: Optional[Array] = None,
                reference: bool = False, kernel: str = "auto",
                workspace: Optional[Array] = None) -> None:
    """sp_kda_prefill on dense inputs (reference=True: the float64 CPU
    reference). Writes o, the state pool and the checkpoints in place;
    shapes and dtypes as in stridepack_kda.h. On CUDA: the current stream.
    kernel: "auto", "recurrent", "chunked" or "chunked_two_pass"
    (sp_kda_kernel); workspace: a device array of at least
    kda_workspace_bytes(...) bytes, which lets "auto" pick the two-pass
    kernel where it is faster and "chunked_two_pass" run."""
    _run(_REFERENCE if reference else _PREFILL, None, q, k, v, g, beta, A_log, dt_bias,
         cu_seqlens, state, state_indices, o, gate, lower_bound, scale, checkpoint_interval,
         checkpoint_cu_starts, checkpoints, kernel, workspace)


def kda_workspace_bytes(q: Array, k: Array, v: Array, g: Array, beta: Array, A_log: Array,
                        dt_bias: Array, cu_seqlens: Array, state: Array,
                        state_indices: Optional[Array], o: Array, *, gate: str = "lower_bound",
                        lower_bound: float = -5.0, scale: float = 0.0,
                        checkpoint_interval: int = 0, checkpoint_cu_starts: Optional[Array] = None,
                        checkpoints: Optional[Array] = None) -> int:
    """sp_kda_prefill_workspace_bytes: the workspace the two-pass kernel
    needs for these arguments (0 when no kernel that needs one serves them)."""
    return _run(_WORKSPACE_BYTES, None, q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state,
                state_indices, o, gate, lower_bound, scale, checkpoint_interval,
                checkpoint_cu_starts, checkpoints)


class KdaBoundary:
    """sp_kda_boundary: owns a workspace sized for max_tokens x max_heads on
    `device` ("cpu", "cuda", "cuda:N", a torch.device or an int ordinal) and
    runs the prefill on strided q, k, v, g, beta (packed in one launch).
    Same stream and same views for warm-up, capture and replay in graphs."""

    def __init__(self, device: Union[str, int, Any], max_tokens: int, max_heads: int) -> None:
        self._b = None
        self._b = _native.boundary_create(_parse_device(device), max_tokens, max_heads)

    def run(self, q: Array, k: Array, v: Array, g: Array, beta: Array, A_log: Array,
            dt_bias: Array, cu_seqlens: Array, state: Array, state_indices: Optional[Array],
            o: Array, *, gate: str = "lower_bound", lower_bound: float = -5.0,
            scale: float = 0.0, checkpoint_interval: int = 0,
            checkpoint_cu_starts: Optional[Array] = None, checkpoints: Optional[Array] = None,
            kernel: str = "auto", workspace: Optional[Array] = None) -> None:
        """sp_kda_boundary_run; arguments as kda_prefill, q..beta any views
        (without a workspace, the boundary's own serves the two-pass kernel)."""
        if self._b is None:
            raise error("SP_ERR_INVALID_ARGUMENT", 1, "boundary: already closed")
        _run(_BOUNDARY, self._b, q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state,
             state_indices, o, gate, lower_bound, scale, checkpoint_interval,
             checkpoint_cu_starts, checkpoints, kernel, workspace)

    @property
    def last_copied(self) -> int:
        """How many of q, k, v, g, beta the last run copied."""
        if self._b is None:
            raise error("SP_ERR_INVALID_ARGUMENT", 1, "boundary: already closed")
        return _native.boundary_last_copied(self._b)

    def close(self) -> None:
        """Free the workspace; no work using it may be pending."""
        b, self._b = self._b, None
        if b is not None:
            _native.boundary_close(b)

    def __enter__(self) -> "KdaBoundary":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # No __del__: the capsule frees the boundary when it is dropped.


def _parse_device(device):
    if isinstance(device, int):
        return 1, device
    s = str(device)  # torch.device prints as "cuda:0" / "cpu"
    if s == "cpu":
        return 0, 0
    if s == "cuda":
        return 1, 0
    if s.startswith("cuda:") and s[5:].isdigit():
        return 1, int(s[5:])
    raise ValueError(f"stridepack: device {device!r} is not cpu, cuda or cuda:N")
