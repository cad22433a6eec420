"""The KDA prefill and its input boundary (include/stridepack_kda.h), thin:
arrays in, sp_kda_args filled, one library call. The library build may lack
the KDA part; then these raise StridepackError(SP_ERR_UNSUPPORTED) on use.
"""

import ctypes

from . import _views as views
from ._frameworks import framework_of
from ._lib import SP_DEVICE_CPU, SP_DEVICE_CUDA, SP_MAX_DIMS, Device, Tensor, check, error, lib

GATES = {"lower_bound": 0, "softplus": 1}  # sp_kda_gate


class KdaArgs(ctypes.Structure):
    _fields_ = [(n, Tensor) for n in ("q", "k", "v", "g", "beta", "A_log", "dt_bias")] + [
        ("gate", ctypes.c_int32),
        ("lower_bound", ctypes.c_float),
        ("scale", ctypes.c_float),
        ("cu_seqlens", Tensor),
        ("state", Tensor),
        ("state_indices", Tensor),
        ("checkpoint_interval", ctypes.c_int64),
        ("checkpoint_cu_starts", Tensor),
        ("checkpoints", Tensor),
        ("o", Tensor),
    ]


_P = ctypes.POINTER
_PROTOTYPES = {
    "sp_kda_args_init": [_P(KdaArgs)],
    "sp_kda_prefill": [_P(KdaArgs), ctypes.c_void_p],
    "sp_kda_prefill_reference": [_P(KdaArgs)],
    "sp_kda_boundary_create": [_P(ctypes.c_void_p), Device, ctypes.c_int64, ctypes.c_int64],
    "sp_kda_boundary_run": [ctypes.c_void_p, _P(KdaArgs), ctypes.c_void_p],
    "sp_kda_boundary_last_copied": [ctypes.c_void_p, _P(ctypes.c_size_t)],
    "sp_kda_boundary_destroy": [ctypes.c_void_p],
}


def _fn(name):
    fn = getattr(lib, name, None)
    if fn is None:
        raise error("SP_ERR_UNSUPPORTED", f"{name}: this libstridepack build has no KDA part")
    fn.restype, fn.argtypes = ctypes.c_int, _PROTOTYPES[name]
    return fn


def available():
    """True when the loaded library has the KDA prefill and boundary."""
    return all(hasattr(lib, n) for n in _PROTOTYPES)


def _exact(x, name, keep):
    """x as an sp_tensor of its own dtype (the KDA checks dtypes, so no
    change of unit here); keep gets what must stay alive."""
    fw = framework_of(x)
    try:
        v = fw.raw(x)
    except views.Unsupported as e:
        raise error("SP_ERR_UNSUPPORTED", f"{name}: {e}") from None
    if v.exact is None:
        raise error("SP_ERR_DTYPE_MISMATCH", f"{name}: element type has no stridepack dtype")
    if any(s % v.itemsize for s in v.strides) or len(v.shape) > SP_MAX_DIMS:
        raise error("SP_ERR_UNSUPPORTED", f"{name}: strides not whole elements, or too many dims")
    t = Tensor()
    views.fill_tensor(t, v.ptr, v.exact, v.shape, [s // v.itemsize for s in v.strides], v.device)
    keep.append((v, fw))
    return t


def _args(tensors, gate, lower_bound, scale, checkpoint_interval, keep):
    a = KdaArgs()
    check(_fn("sp_kda_args_init")(ctypes.byref(a)))
    for name, x in tensors.items():
        if x is not None:
            setattr(a, name, _exact(x, name, keep))
    if gate not in GATES:
        raise error("SP_ERR_INVALID_ARGUMENT", f"gate: {gate!r} is not one of {sorted(GATES)}")
    a.gate, a.lower_bound, a.scale = GATES[gate], lower_bound, scale
    a.checkpoint_interval = checkpoint_interval
    return a


def _stream(keep):
    v, fw = keep[0]
    return fw.stream(v.device) if v.device[0] == SP_DEVICE_CUDA else None


def _call_args(q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, state_indices, o,
               checkpoint_cu_starts, checkpoints):
    return dict(q=q, k=k, v=v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias,
                cu_seqlens=cu_seqlens, state=state, state_indices=state_indices, o=o,
                checkpoint_cu_starts=checkpoint_cu_starts, checkpoints=checkpoints)


def kda_prefill(q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, state_indices, o, *,
                gate="lower_bound", lower_bound=-5.0, scale=0.0, checkpoint_interval=0,
                checkpoint_cu_starts=None, checkpoints=None, reference=False):
    """sp_kda_prefill on dense inputs (reference=True: the float64 CPU
    reference). Writes o, the state pool and the checkpoints in place;
    shapes and dtypes as in stridepack_kda.h. On CUDA: the current stream."""
    keep = []
    a = _args(_call_args(q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, state_indices, o,
                         checkpoint_cu_starts, checkpoints),
              gate, lower_bound, scale, checkpoint_interval, keep)
    if reference:
        check(_fn("sp_kda_prefill_reference")(ctypes.byref(a)))
    else:
        check(_fn("sp_kda_prefill")(ctypes.byref(a), _stream(keep)))


class KdaBoundary:
    """sp_kda_boundary: owns a workspace sized for max_tokens x max_heads on
    `device` ("cpu", "cuda", "cuda:N", a torch.device or an int ordinal) and
    runs the prefill on strided q, k, v, g, beta (packed in one launch).
    Same stream and same views for warm-up, capture and replay in graphs."""

    def __init__(self, device, max_tokens, max_heads):
        self._b = None
        d = Device(*_parse_device(device))
        b = ctypes.c_void_p()
        check(_fn("sp_kda_boundary_create")(ctypes.byref(b), d, max_tokens, max_heads))
        self._b = b

    def run(self, q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, state_indices, o, *,
            gate="lower_bound", lower_bound=-5.0, scale=0.0, checkpoint_interval=0,
            checkpoint_cu_starts=None, checkpoints=None):
        """sp_kda_boundary_run; arguments as kda_prefill, q..beta any views."""
        if self._b is None:
            raise error("SP_ERR_INVALID_ARGUMENT", "boundary: already closed")
        keep = []
        a = _args(_call_args(q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, state_indices,
                             o, checkpoint_cu_starts, checkpoints),
                  gate, lower_bound, scale, checkpoint_interval, keep)
        check(_fn("sp_kda_boundary_run")(self._b, ctypes.byref(a), _stream(keep)))

    @property
    def last_copied(self):
        """How many of q, k, v, g, beta the last run copied."""
        n = ctypes.c_size_t()
        check(_fn("sp_kda_boundary_last_copied")(self._b, ctypes.byref(n)))
        return n.value

    def close(self):
        """Free the workspace; no work using it may be pending."""
        b, self._b = self._b, None
        if b is not None:
            check(_fn("sp_kda_boundary_destroy")(b))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # Never raise from __del__ (it may run at interpreter shutdown).
        try:
            if getattr(self, "_b", None) is not None:
                lib.sp_kda_boundary_destroy(self._b)
        except Exception:
            pass


def _parse_device(device):
    if isinstance(device, int):
        return SP_DEVICE_CUDA, device
    s = str(device)  # torch.device prints as "cuda:0" / "cpu"
    if s == "cpu":
        return SP_DEVICE_CPU, 0
    if s == "cuda":
        return SP_DEVICE_CUDA, 0
    if s.startswith("cuda:") and s[5:].isdigit():
        return SP_DEVICE_CUDA, int(s[5:])
    raise ValueError(f"stridepack: device {device!r} is not cpu, cuda or cuda:N")
