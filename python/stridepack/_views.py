"""From a framework's array to an sp_tensor.

A RawView is what any producer tells us: address of element [0,...,0], shape,
strides in *bytes*, element size, the exact sp_dtype when there is one, the
device, and the objects to keep alive. to_tensor() then picks the unit the
library moves: the element itself when its address and strides allow, else
the widest of 8/4/2/1 bytes that divides them (a complex64, an unaligned
NumPy view, a 16-byte element), as an unsigned type with one more dim. The
copy is a copy of bits either way, so nothing is lost by the change of type.
"""

from . import _dlpack as dl
from ._lib import (SP_BF16, SP_BOOL, SP_DEVICE_CPU, SP_DEVICE_CUDA, SP_F16, SP_F32, SP_F64,
                   SP_I8, SP_I16, SP_I32, SP_I64, SP_MAX_DIMS, SP_U8, SP_U16, SP_U32, SP_U64,
                   UNSIGNED_OF_SIZE, Tensor)


class Unsupported(Exception):
    """The binding cannot hand this object to the library; the caller falls
    back to the framework's own copy."""


class RawView:
    __slots__ = ("ptr", "shape", "strides", "itemsize", "exact", "device", "readonly", "keep")

    def __init__(self, ptr, shape, strides, itemsize, exact, device, readonly, keep):
        self.ptr, self.shape, self.strides = ptr, tuple(shape), tuple(strides)
        self.itemsize, self.exact, self.device = itemsize, exact, device
        self.readonly, self.keep = readonly, keep

    @property
    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def is_c_contiguous(self):
        if 0 in self.shape:
            return True
        expect = self.itemsize
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            if n != 1 and s != expect:
                return False
            expect *= n
        return True


def dense_strides(shape, itemsize):
    strides, acc = [], itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return strides[::-1]


def best_unit(v):
    """Widest power of two <= 8 dividing the element size, the address and
    every stride that is ever applied."""
    u = 8
    while u > 1:
        if (v.itemsize % u == 0 and (v.ptr % u == 0 or v.numel == 0)
                and all(s % u == 0 for s, n in zip(v.strides, v.shape) if n > 1)):
            break
        u //= 2
    return u


def coalesce(shape, stride_lists):
    """Merge dims jointly for every stride list (row-major order preserved,
    so the dense destination of the result is the dense destination of the
    original). Only used when a view has more than SP_MAX_DIMS dims."""
    if 0 in shape:
        return [0], [[1] for _ in stride_lists]
    dims = [(n, [s[i] for s in stride_lists]) for i, n in enumerate(shape) if n != 1]
    out = []
    for n, st in dims:
        if out and all(ps == n * s for ps, s in zip(out[-1][1], st)):
            out[-1] = (out[-1][0] * n, st)
        else:
            out.append((n, st))
    return [n for n, _ in out], [[st[k] for _, st in out] for k in range(len(stride_lists))]


def unit_layout(v, unit):
    """(dtype, shape, element strides) of v moved in `unit`-byte words."""
    shape = list(v.shape)
    strides = [s // unit for s in v.strides]
    if unit < v.itemsize:
        shape.append(v.itemsize // unit)
        strides.append(1)
    dtype = v.exact if unit == v.itemsize and v.exact is not None else UNSIGNED_OF_SIZE[unit]
    return dtype, shape, strides


def fill_tensor(t, ptr, dtype, shape, strides, device):
    n = len(shape)
    if n > SP_MAX_DIMS:
        raise Unsupported(f"{n} dims remain after merging (at most {SP_MAX_DIMS})")
    t.data = ptr or None
    t.dtype, t.ndim = dtype, n
    t.shape[:n] = shape
    t.strides[:n] = strides
    t.device.type, t.device.ordinal = device


def pair_tensors(src, dst, unit):
    """sp_tensors for a copy of src into dst, both moved in `unit`-byte words
    (None: each its own best unit, for pairs the library will reject)."""
    ds, ss, sts = unit_layout(src, unit or best_unit(src))
    dd, sd, std = unit_layout(dst, unit or best_unit(dst))
    if max(len(ss), len(sd)) > SP_MAX_DIMS and ss == sd:
        ss, (sts, std) = coalesce(ss, [sts, std])
        sd = ss
    ts, td = Tensor(), Tensor()
    fill_tensor(ts, src.ptr, ds, ss, sts, src.device)
    fill_tensor(td, dst.ptr, dd, sd, std, dst.device)
    return ts, td


def to_tensor(v, unit=None, t=None):
    """Fill t (a new Tensor when None) with v moved in `unit`-byte words
    (its best unit when None); returns t."""
    t = Tensor() if t is None else t
    dtype, shape, strides = unit_layout(v, unit or best_unit(v))
    if len(shape) > SP_MAX_DIMS:
        shape, (strides,) = coalesce(shape, [strides])
    fill_tensor(t, v.ptr, dtype, shape, strides, v.device)
    return t


# ---- producers ---------------------------------------------------------------

_NUMPY_EXACT = {
    ("b", 1): SP_BOOL, ("u", 1): SP_U8, ("i", 1): SP_I8, ("u", 2): SP_U16, ("i", 2): SP_I16,
    ("u", 4): SP_U32, ("i", 4): SP_I32, ("u", 8): SP_U64, ("i", 8): SP_I64,
    ("f", 2): SP_F16, ("f", 4): SP_F32, ("f", 8): SP_F64,
}


def from_numpy(a):
    """Through __array_interface__: works for read-only arrays and byte
    strides that are not a multiple of the element size, which NumPy's own
    __dlpack__ refuses."""
    dt = a.dtype
    if dt.hasobject:
        raise Unsupported("object arrays hold references, not plain bits")
    if dt.itemsize == 0:
        raise Unsupported(f"dtype {dt} has no bytes")
    ai = a.__array_interface__
    ptr, readonly = ai["data"]
    strides = ai["strides"] or dense_strides(a.shape, dt.itemsize)
    exact = SP_BF16 if dt.name == "bfloat16" else _NUMPY_EXACT.get((dt.kind, dt.itemsize))
    return RawView(ptr, a.shape, strides, dt.itemsize, exact, (SP_DEVICE_CPU, 0), readonly, a)


_DL_EXACT = {
    (dl.KDL_BOOL, 8): SP_BOOL, (dl.KDL_UINT, 8): SP_U8, (dl.KDL_INT, 8): SP_I8,
    (dl.KDL_UINT, 16): SP_U16, (dl.KDL_INT, 16): SP_I16, (dl.KDL_UINT, 32): SP_U32,
    (dl.KDL_INT, 32): SP_I32, (dl.KDL_UINT, 64): SP_U64, (dl.KDL_INT, 64): SP_I64,
    (dl.KDL_FLOAT, 16): SP_F16, (dl.KDL_BFLOAT, 16): SP_BF16, (dl.KDL_FLOAT, 32): SP_F32,
    (dl.KDL_FLOAT, 64): SP_F64,
}
_DL_DEVICES = {dl.KDL_CPU: SP_DEVICE_CPU, dl.KDL_CUDA_HOST: SP_DEVICE_CPU,
               dl.KDL_CUDA: SP_DEVICE_CUDA, dl.KDL_CUDA_MANAGED: SP_DEVICE_CUDA}


def dlpack_device(x):
    """(sp device type, ordinal) from __dlpack_device__, without exporting."""
    if not hasattr(x, "__dlpack_device__"):
        return None
    kind, ordinal = x.__dlpack_device__()
    if int(kind) not in _DL_DEVICES:
        raise Unsupported(f"DLPack device type {int(kind)} is neither CPU nor CUDA")
    kind = _DL_DEVICES[int(kind)]
    return kind, (int(ordinal) if kind == SP_DEVICE_CUDA else 0)


def from_dlpack(x, stream):
    """Export x with x.__dlpack__(stream=...) and read the capsule."""
    try:
        capsule = x.__dlpack__() if stream is None else x.__dlpack__(stream=stream)
    except (BufferError, RuntimeError, TypeError, ValueError) as e:
        raise Unsupported(f"__dlpack__ refused: {e}") from None
    t, readonly = dl.read_capsule(capsule)
    dt = t.dtype
    if dt.lanes != 1 or dt.bits == 0 or dt.bits % 8:
        raise Unsupported(f"DLPack dtype code {dt.code}, {dt.bits} bits x {dt.lanes} lanes")
    if t.device.device_type not in _DL_DEVICES:
        raise Unsupported(f"DLPack device type {t.device.device_type} is neither CPU nor CUDA")
    kind = _DL_DEVICES[t.device.device_type]
    device = (kind, t.device.device_id if kind == SP_DEVICE_CUDA else 0)
    itemsize = dt.bits // 8
    shape = t.shape[:t.ndim]  # one slice: far cheaper than indexing each
    if t.strides:
        strides = [s * itemsize for s in t.strides[:t.ndim]]
    else:
        strides = dense_strides(shape, itemsize)
    ptr = (t.data or 0) + t.byte_offset
    return RawView(ptr, shape, strides, itemsize, _DL_EXACT.get((dt.code, dt.bits)), device,
                   readonly, (x, capsule))
