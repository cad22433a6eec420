"""What differs between NumPy, PyTorch, CuPy and any other DLPack producer:
how to read a view, which CUDA stream is current, how to allocate the
workspace and cut dense outputs out of it, and the framework's own copy that
the binding falls back to. Frameworks are looked up in sys.modules, never
imported here: the binding costs nothing for frameworks you don't use.
"""

import sys

from . import _views as views
from ._lib import (SP_BF16, SP_BOOL, SP_DEVICE_CPU, SP_DEVICE_CUDA, SP_F16, SP_F32, SP_F64, SP_I8,
                   SP_I16, SP_I32, SP_I64, SP_U8, SP_U16, SP_U32, SP_U64)


class NumpyLike:
    """NumPy, and CuPy (the same array API on CUDA)."""

    def __init__(self, name, mod):
        self.name, self.mod = name, mod

    def raw(self, x):
        if self.name == "numpy":
            return views.from_numpy(x)
        return views.from_dlpack(x, self._dlpack_stream(x.device.id))

    def _dlpack_stream(self, ordinal):
        ptr = self.stream((SP_DEVICE_CUDA, ordinal))
        return ptr if ptr else 1  # DLPack names the legacy default stream 1

    def stream(self, device):
        if device[0] != SP_DEVICE_CUDA:
            return None
        with self.mod.cuda.Device(device[1]):
            return self.mod.cuda.get_current_stream().ptr

    def autograd_recording(self, xs):
        return False

    def empty_bytes(self, n, device):
        if device[0] != SP_DEVICE_CUDA:
            return self.mod.empty(n, dtype=self.mod.uint8)
        with self.mod.cuda.Device(device[1]):
            return self.mod.empty(n, dtype=self.mod.uint8)

    def byte_view(self, ws):
        if not ws.flags.c_contiguous:
            raise TypeError("workspace: must be C-contiguous")
        return ws.reshape(-1).view(self.mod.uint8)

    def out_view(self, ws_u8, offset, nbytes, like):
        return ws_u8[offset:offset + nbytes].view(like.dtype).reshape(like.shape)

    def contiguous(self, x):
        return x if x.flags.c_contiguous else self.mod.ascontiguousarray(x)

    def copy(self, dst, src):
        self.mod.copyto(dst, src, casting="no")


_TORCH_DTYPES = {
    "bool": (SP_BOOL, 1), "uint8": (SP_U8, 1), "int8": (SP_I8, 1), "int16": (SP_I16, 2),
    "uint16": (SP_U16, 2), "int32": (SP_I32, 4), "uint32": (SP_U32, 4), "int64": (SP_I64, 8),
    "uint64": (SP_U64, 8), "float16": (SP_F16, 2), "bfloat16": (SP_BF16, 2),
    "float32": (SP_F32, 4), "float64": (SP_F64, 8),
}


class Torch:
    name = "torch"

    def __init__(self, mod):
        self.mod = mod
        # torch dtype -> (sp_dtype, bytes); uint16/32/64 exist in torch >= 2.3.
        self.native = {getattr(mod, name): info for name, info in _TORCH_DTYPES.items()
                       if hasattr(mod, name)}

    def raw(self, x):
        # A lazy negation or conjugation is a flag on the view, not in its
        # memory; DLPack exports the memory as it is. Copying bits would drop
        # the flag, so such views take the framework's own copy.
        if x.is_neg() or x.is_conj():
            raise views.Unsupported("the view has torch's lazy negation or conjugation bit set")
        # Fast path for plain strided tensors of the common dtypes: the same
        # fields a DLPack export carries, read from the tensor directly.
        # Exporting costs a capsule and, in torch 2, an as_strided view per
        # tensor, several microseconds each on every eager call.
        info = self.native.get(x.dtype)
        if info is not None and x.layout is self.mod.strided:
            exact, size = info
            if x.is_cuda:
                device = (SP_DEVICE_CUDA, x.get_device())
            elif x.device.type == "cpu":
                device = (SP_DEVICE_CPU, 0)
            else:
                device = None
            if device is not None:
                return views.RawView(x.data_ptr(), x.shape, [s * size for s in x.stride()],
                                     size, exact, device, False, x)
        return self.raw_dlpack(x)

    def plan_key(self, x):
        """Everything pack's arguments for x are built from, hashable; only
        for tensors raw() reads directly (others are not cached)."""
        if x.dtype not in self.native or x.layout is not self.mod.strided or x.is_neg():
            raise views.Unsupported("not cached")
        return (x.data_ptr(), x.dtype, x.shape, x.stride(), x.get_device())

    def raw_dlpack(self, x):
        """Through x.__dlpack__: every dtype and device torch can export."""
        if x.requires_grad:
            x = x.detach()  # __dlpack__ refuses tensors that require grad
        if x.dtype == self.mod.bool:
            x = x.view(self.mod.uint8)  # older torch cannot export bool; same bits
        # -1: no synchronization by the producer. The library runs on
        # torch's current stream (see stream()), the stream that torch's
        # own work on x is ordered on, so there is nothing to wait for, and
        # no event is recorded (which matters inside graph capture).
        return views.from_dlpack(x, -1 if x.is_cuda else None)

    def stream(self, device):
        if device[0] != SP_DEVICE_CUDA:
            return None
        # The raw handle without building a torch.cuda.Stream object: this
        # is on the path of every eager call (torch's compiler uses it too).
        raw = getattr(self.mod._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return raw(device[1])
        return self.mod.cuda.current_stream(device[1]).cuda_stream

    def autograd_recording(self, xs):
        return self.mod.is_grad_enabled() and any(getattr(x, "requires_grad", False) for x in xs)

    def empty_bytes(self, n, device):
        dev = self.mod.device("cuda", device[1]) if device[0] == SP_DEVICE_CUDA else "cpu"
        return self.mod.empty(n, dtype=self.mod.uint8, device=dev)

    def byte_view(self, ws):
        if not ws.is_contiguous():
            raise TypeError("workspace: must be contiguous")
        return ws.reshape(-1).view(self.mod.uint8)

    def out_view(self, ws_u8, offset, nbytes, like):
        return ws_u8[offset:offset + nbytes].view(like.dtype).view(like.shape)

    def contiguous(self, x):
        return x.contiguous()

    def copy(self, dst, src):
        dst.copy_(src)


class Generic:
    """Any other __dlpack__ producer: the library can read and write it
    (copy_batch; pack of inputs that are already dense), but the binding
    cannot make new arrays of a framework it does not know."""

    name = "dlpack"

    def raw(self, x):
        dev = views.dlpack_device(x)
        # The library runs these on the legacy default stream (stream()
        # returns NULL), so that is the stream the producer must order on.
        return views.from_dlpack(x, 1 if dev and dev[0] == SP_DEVICE_CUDA else None)

    def stream(self, device):
        return None

    def autograd_recording(self, xs):
        return False

    def _cannot(self, *args):
        raise TypeError("stridepack: cannot create arrays of an unknown DLPack producer; "
                        "pass NumPy arrays, PyTorch or CuPy tensors, or a workspace")

    empty_bytes = byte_view = out_view = contiguous = copy = _cannot


_GENERIC = Generic()
_cache = {}
_by_type = {}  # type(x) -> framework: the isinstance checks once per type


def framework_of(x):
    fw = _by_type.get(type(x))
    if fw is None:
        fw = _by_type[type(x)] = _lookup(x)
    return fw


def _lookup(x):
    mods = sys.modules
    np = mods.get("numpy")
    if np is not None and isinstance(x, np.ndarray):
        return _cached("numpy", lambda: NumpyLike("numpy", np))
    torch = mods.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return _cached("torch", lambda: Torch(torch))
    cp = mods.get("cupy")
    if cp is not None and isinstance(x, cp.ndarray):
        return _cached("cupy", lambda: NumpyLike("cupy", cp))
    if hasattr(x, "__dlpack__"):
        return _GENERIC
    raise TypeError(f"stridepack: {type(x).__name__} is not an array (no __dlpack__)")


def _cached(name, make):
    fw = _cache.get(name)
    if fw is None:
        fw = _cache[name] = make()
    return fw
