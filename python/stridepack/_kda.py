"""The KDA prefill and its input boundary (include/stridepack_kda.h), thin:
arrays in, one extension call that fills sp_kda_args and calls the library.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from . import _native
from ._api import Array
from ._errors import error

# sp_kda_gate and sp_kda_kernel: the values from the header the extension
# was compiled with, the kernel names from sp_kda_kernel_name().
GATES = {"lower_bound": _native.KDA_GATE_LOWER_BOUND, "softplus": _native.KDA_GATE_SOFTPLUS}
KERNELS = {_native.kda_kernel_name(k): k
           for k in (_native.KDA_KERNEL_AUTO, _native.KDA_KERNEL_RECURRENT,
                     _native.KDA_KERNEL_CHUNKED, _native.KDA_KERNEL_CHUNKED_TWO_PASS)}


def available() -> bool:
    """True when the linked library's KDA prefill runs: the extension runs
    a one-token CPU prefill once and says whether it succeeded."""
    return _native.kda_available()


def _codes(gate, kernel):
    if gate not in GATES:
        raise error("SP_ERR_INVALID_ARGUMENT", 1, f"gate: {gate!r} is not one of {sorted(GATES)}")
    if kernel not in KERNELS:
        raise error("SP_ERR_INVALID_ARGUMENT", 1,
                    f"kernel: {kernel!r} is not one of {sorted(KERNELS)}")
    return GATES[gate], KERNELS[kernel]


def kda_prefill(q: Array, k: Array, v: Array, g: Array, beta: Array, A_log: Array,
                dt_bias: Array, cu_seqlens: Array, state: Array, state_indices: Array,
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
    gate_code, kernel_code = _codes(gate, kernel)
    arrays = (q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, state_indices, o,
              checkpoint_cu_starts, checkpoints)
    if reference:
        _native.kda_reference(arrays, gate_code, lower_bound, scale, checkpoint_interval)
    else:
        _native.kda_prefill(arrays, gate_code, lower_bound, scale, checkpoint_interval,
                            kernel_code, workspace)


def kda_workspace_bytes(q: Array, k: Array, v: Array, g: Array, beta: Array, A_log: Array,
                        dt_bias: Array, cu_seqlens: Array, state: Array,
                        state_indices: Array, o: Array, *, gate: str = "lower_bound",
                        lower_bound: float = -5.0, scale: float = 0.0,
                        checkpoint_interval: int = 0, checkpoint_cu_starts: Optional[Array] = None,
                        checkpoints: Optional[Array] = None) -> int:
    """sp_kda_prefill_workspace_bytes: the workspace the two-pass kernel
    needs for these arguments (0 when no kernel that needs one serves them)."""
    gate_code, _ = _codes(gate, "auto")
    return _native.kda_workspace_bytes(
        (q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, state_indices, o,
         checkpoint_cu_starts, checkpoints), gate_code, lower_bound, scale, checkpoint_interval)


class KdaBoundary:
    """sp_kda_boundary: owns a workspace sized for max_tokens x max_heads on
    `device` ("cpu", "cuda", "cuda:N", a torch.device or an int ordinal) and
    runs the prefill on strided q, k, v, g, beta (packed in one launch).
    Same stream and same views for warm-up, capture and replay in graphs."""

    def __init__(self, device: Union[str, int, Any], max_tokens: int, max_heads: int) -> None:
        self._b = None
        self._b = _native.boundary_create(_parse_device(device), max_tokens, max_heads)

    def run(self, q: Array, k: Array, v: Array, g: Array, beta: Array, A_log: Array,
            dt_bias: Array, cu_seqlens: Array, state: Array, state_indices: Array,
            o: Array, *, gate: str = "lower_bound", lower_bound: float = -5.0,
            scale: float = 0.0, checkpoint_interval: int = 0,
            checkpoint_cu_starts: Optional[Array] = None, checkpoints: Optional[Array] = None,
            kernel: str = "auto", workspace: Optional[Array] = None) -> None:
        """sp_kda_boundary_run; arguments as kda_prefill, q..beta any views
        (without a workspace, the boundary's own serves the two-pass kernel)."""
        if self._b is None:
            raise error("SP_ERR_INVALID_ARGUMENT", 1, "boundary: already closed")
        gate_code, kernel_code = _codes(gate, kernel)
        _native.kda_boundary_run(
            self._b, (q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, state_indices, o,
                      checkpoint_cu_starts, checkpoints),
            gate_code, lower_bound, scale, checkpoint_interval, kernel_code, workspace)

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
    if isinstance(device, int) and not isinstance(device, bool):
        return 1, device  # a negative ordinal is refused by the extension, named
    s = str(device)  # torch.device prints as "cuda:0" / "cpu"
    if s == "cpu":
        return 0, 0
    if s == "cuda":
        return 1, 0
    if s.startswith("cuda:") and s[5:].isdigit():
        return 1, int(s[5:])
    raise ValueError(f"stridepack: device {device!r} is not cpu, cuda or cuda:N")
