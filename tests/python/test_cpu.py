"""CPU tests of the Python binding with NumPy: random strided views (negative,
zero and unaligned strides, every NumPy dtype) packed and copied, compared
bit for bit with np.ascontiguousarray; the DLPack path (bf16 included)
through a minimal producer; error cases; workspace reuse; fallbacks.
Run by ctest (label python) with STRIDEPACK_LIBRARY and PYTHONPATH set."""

import ctypes
import gc
import mmap
import os
import re
import tempfile
import unittest
import warnings

import numpy as np
from numpy.lib.stride_tricks import as_strided

import sp_unittest
import stridepack as sp
from stridepack import _api, _native

POISON = 0xA5
DTYPES = [np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64,
          np.int64, np.float16, np.float32, np.float64, np.complex64, np.complex128,
          np.longdouble, np.clongdouble, "M8[ns]", "m8[s]", "S3", "U2", "V5",
          np.dtype([("a", "u1"), ("b", "<f4")])]  # packed: itemsize 5, fields unaligned
try:
    import ml_dtypes  # bf16 as a NumPy dtype, when installed
    DTYPES.append(ml_dtypes.bfloat16)
except ImportError:
    pass


def as_bytes(a):
    """The bytes of a in C order, as uint8 (the bit-for-bit comparison)."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def random_fill(rng, nbytes, dtype):
    data = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
    if np.dtype(dtype) == np.bool_:
        data &= 1  # NumPy bools are 0 or 1
    return data


def make_view(rng, shape, dtype, broadcast=False, misalign=False, poison=False):
    """A random strided view of `shape` over a fresh buffer: dims permuted,
    padded, stepped by 1..3 in either direction, a random start; optionally
    a zero-stride dim (sources only) and an unaligned base. Returns
    (view, base, select) with select(base-shaped array [+ trailing dims])
    giving the same view of another array."""
    dtype = np.dtype(dtype)
    ndim = len(shape)
    inner = list(shape)
    if broadcast and ndim and max(shape) > 1:
        inner[int(np.argmax(shape))] = 1
    perm = rng.permutation(ndim)
    slices, base_shape = [], []
    for d in perm:
        n, step = inner[d], int(rng.choice([1, 1, 2, 3, -1, -2]))
        extra = int(rng.integers(0, 3))
        length = (abs(step) * (n - 1) + 1 + extra) if n > 0 else extra
        o = int(rng.integers(0, extra + 1))
        start = o if step > 0 else length - 1 - o
        stop = start + step * n
        slices.append(slice(start, None if stop < 0 else stop, step) if n else slice(0, 0))
        base_shape.append(length)
    nbytes = int(np.prod(base_shape, dtype=np.int64)) * dtype.itemsize
    shift = int(rng.integers(1, 8)) if misalign else 0
    buf = (np.full(nbytes + 8, POISON, np.uint8) if poison
           else random_fill(rng, nbytes + 8, dtype))
    base = buf[shift:shift + nbytes].view(dtype).reshape(base_shape)
    axes = tuple(int(a) for a in np.argsort(perm))

    def select(a):
        return a[tuple(slices) + (Ellipsis,)].transpose(axes + tuple(range(ndim, a.ndim)))

    v = select(base)
    if broadcast:
        v = np.broadcast_to(v, shape)
    return v, base, select


def random_shape(rng, max_ndim=5, max_size=6):
    ndim = int(rng.integers(0, max_ndim + 1))
    return tuple(int(rng.choice([0, 1, 1, 2, 3, 4, 5, max_size])) if rng.random() < 0.15
                 else int(rng.integers(1, max_size + 1)) for _ in range(ndim))


class Pack(unittest.TestCase):
    def check_pack(self, xs, extra=64):
        need = sp.workspace_bytes(xs)
        ws = np.full(need + extra, POISON, np.uint8)
        before = [as_bytes(x).copy() for x in xs]
        passes = sp.copy_pass_count()
        outs = sp.pack(xs, workspace=ws)
        n_copy = sum(not x.flags.c_contiguous for x in xs)
        self.assertEqual(sp.copy_pass_count() - passes, 1 if n_copy else 0)
        self.assertEqual(len(outs), len(xs))
        for i, (x, o, b) in enumerate(zip(xs, outs, before)):
            self.assertEqual((o.dtype, o.shape), (x.dtype, x.shape), i)
            self.assertTrue(o.flags.c_contiguous, i)
            self.assertEqual(o is x, bool(x.flags.c_contiguous), i)
            if o is not x:
                self.assertTrue(np.shares_memory(o, ws), i)
            self.assertTrue(np.array_equal(as_bytes(o), as_bytes(np.ascontiguousarray(x))), i)
            self.assertTrue(np.array_equal(as_bytes(x), b), f"input {i} changed")
        self.assertTrue((ws[need:] == POISON).all(), "written past workspace_bytes")
        return outs

    def test_random_views_every_dtype(self):
        rng = np.random.default_rng(1)
        for trial in range(400):
            xs = []
            for _ in range(int(rng.integers(1, 6))):
                dtype = DTYPES[int(rng.integers(len(DTYPES)))]
                xs.append(make_view(rng, random_shape(rng), dtype,
                                    broadcast=rng.random() < 0.15,
                                    misalign=rng.random() < 0.2)[0])
            with self.subTest(trial=trial, shapes=[(x.dtype.str, x.shape, x.strides) for x in xs]):
                self.check_pack(xs)

    def test_every_dtype_reversed(self):
        rng = np.random.default_rng(2)
        for dtype in DTYPES:
            with self.subTest(dtype=dtype):
                base = random_fill(rng, 7 * 9 * np.dtype(dtype).itemsize, dtype)
                a = base.view(dtype).reshape(7, 9)
                self.check_pack([a[::-1, ::-2], a.T, a[:, ::-1]])

    def test_large_transpose(self):
        # Big enough for the CPU backend's parallel pass.
        rng = np.random.default_rng(3)
        a = rng.standard_normal((1500, 2100)).astype(np.float32)
        self.check_pack([a.T, a[::-1, 7:1507]])

    def test_k3_layout(self):
        # q, k, v column slices of [T, 3P]; beta a column slice of [T, W].
        T, H = 33, 6
        P = H * 128
        rng = np.random.default_rng(4)
        qkv = rng.integers(0, 1 << 16, size=(T, 3 * P), dtype=np.uint16)
        fb = rng.integers(0, 1 << 16, size=(T, 128 + H), dtype=np.uint16)
        q, k, v = (qkv[:, i * P:(i + 1) * P].reshape(1, T, H, 128) for i in range(3))
        beta = fb[:, 128:].reshape(1, T, H)
        g = rng.integers(0, 1 << 16, size=(2 * T, H, 128), dtype=np.uint16)[None, :T]
        outs = self.check_pack([q, k, v, g, beta])
        self.assertIs(outs[3], g)

    def test_workspace_reuse_same_slots(self):
        rng = np.random.default_rng(5)
        buf = rng.integers(0, 1 << 32, size=(40, 50), dtype=np.uint32)
        x, y = buf[:, ::2], buf[::-1]
        ws = np.full(sp.workspace_bytes([x, y]), POISON, np.uint8)
        o1 = sp.pack([x, y], workspace=ws)
        addr1 = [o.__array_interface__["data"][0] for o in o1]
        buf[...] = rng.integers(0, 1 << 32, size=buf.shape, dtype=np.uint32)
        o2 = sp.pack([x, y], workspace=ws)
        self.assertEqual([o.__array_interface__["data"][0] for o in o2], addr1)
        for o, r in zip(o2, (x, y)):
            self.assertTrue(np.array_equal(o, np.ascontiguousarray(r)))
        # A workspace of another dtype and shape is used by its bytes.
        ws64 = np.empty((sp.workspace_bytes([x, y]) + 7) // 8, np.float64)
        o3 = sp.pack([x, y], workspace=ws64)
        self.assertTrue(np.shares_memory(o3[0], ws64))
        self.assertTrue(np.array_equal(o3[1], y))

    def test_allocates_without_workspace(self):
        a = np.arange(30.0).reshape(5, 6)
        o = sp.pack(x for x in (a[:, ::2], a))  # any iterable
        self.assertTrue(np.array_equal(o[0], a[:, ::2]))
        self.assertIs(o[1], a)
        self.assertEqual(sp.pack([]), [])

    def test_many_dims_merge(self):
        # 12 dims, mergeable down to few: handed to the library merged.
        rng = np.random.default_rng(6)
        a = rng.integers(0, 255, size=(2,) * 11 + (6,), dtype=np.uint8)
        self.check_pack([a[..., ::2], a[..., ::-1]])


class Fallback(unittest.TestCase):
    def setUp(self):
        _api._reset_warnings()

    def test_unmergeable_dims_fall_back_once(self):
        a = np.arange(2 ** 10, dtype=np.int16).reshape((2,) * 10)
        x = a[(slice(None, None, -1), slice(None)) * 5]  # no two dims merge
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            o1 = sp.pack([x, a[:, 1]])
            o2 = sp.pack([x])
        msgs = [str(m.message) for m in w if issubclass(m.category, sp.FallbackWarning)]
        self.assertEqual(len(msgs), 1, msgs)
        self.assertIn("dims", msgs[0])
        for o, r in ((o1[0], x), (o1[1], a[:, 1]), (o2[0], x)):
            self.assertTrue(np.array_equal(as_bytes(o), as_bytes(r)))

    def test_object_arrays_fall_back(self):
        a = np.array([[1, "x"], [None, 2.5]], dtype=object)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            o = sp.pack(x for x in [a.T])[0]  # a generator, read again by the fallback
        self.assertEqual(o.tolist(), a.T.tolist())
        self.assertEqual(sum(issubclass(m.category, sp.FallbackWarning) for m in w), 1)


class CopyBatch(unittest.TestCase):
    def test_random_pairs_guarded(self):
        rng = np.random.default_rng(7)
        for trial in range(300):
            pairs, checks = [], []
            for _ in range(int(rng.integers(1, 6))):
                dtype = DTYPES[int(rng.integers(len(DTYPES)))]
                shape = random_shape(rng)
                src = make_view(rng, shape, dtype, broadcast=rng.random() < 0.2,
                                misalign=rng.random() < 0.2)[0]
                dst, base, select = make_view(rng, shape, dtype, misalign=rng.random() < 0.2,
                                              poison=True)
                isz = np.dtype(dtype).itemsize
                expect = as_bytes(base).reshape(base.shape + (isz,)).copy()
                select(expect)[...] = as_bytes(src).reshape(tuple(shape) + (isz,))
                pairs.append((src, dst))
                checks.append((base, expect))
            passes = sp.copy_pass_count()
            sp.copy_batch(pairs)
            nonempty = any(src.size for src, _ in pairs)
            self.assertEqual(sp.copy_pass_count() - passes, 1 if nonempty else 0)
            for i, (base, expect) in enumerate(checks):
                with self.subTest(trial=trial, pair=i, dtype=base.dtype.str):
                    self.assertTrue(np.array_equal(as_bytes(base), expect.reshape(-1)))

    def test_errors_write_nothing(self):
        rng = np.random.default_rng(8)
        src = rng.standard_normal((6, 8)).astype(np.float32)
        good = np.full((8, 6), -1.0, np.float32)
        cases = [
            ("SP_ERR_SHAPE_MISMATCH", ValueError,
             [(src.T, good), (src, np.empty((6, 9), np.float32))]),
            ("SP_ERR_DTYPE_MISMATCH", TypeError,
             [(src.T, good), (src, np.empty((6, 8), np.int32))]),
            ("SP_ERR_OVERLAP", ValueError, [(src.T, good), (src[:, :4], src[:, 4:][::-1])]),
            ("SP_ERR_OVERLAP", ValueError, [(src.T, good), (src[:3], good.T[:3])]),
            ("SP_ERR_OVERLAP", ValueError,
             [(src.T, good), (src[:3], as_strided(good[0], (3, 8), (0, 0)))]),
        ]
        for status, python_error, pairs in cases:
            with self.subTest(status=status):
                snapshot = src.copy()
                good[...] = -1.0
                with self.assertRaises(python_error) as cm:  # also the Python error
                    sp.copy_batch(pairs)
                e = cm.exception
                self.assertIsInstance(e, sp.StridepackError)
                self.assertEqual(e.status, status)
                self.assertEqual(e.code, sp.STATUS[status])
                self.assertTrue(e.message, "no sp_last_error text")
                self.assertIn(status, str(e))
                self.assertTrue((good == -1.0).all(), "a failing call wrote")
                self.assertTrue(np.array_equal(src, snapshot))

    def test_every_status_is_a_python_error(self):
        # Each status the library reports raises a StridepackError that is
        # also ValueError, TypeError or RuntimeError, as its kind.
        from stridepack import _errors
        kinds = {"SP_ERR_DTYPE_MISMATCH": TypeError, "SP_ERR_NO_DEVICE": RuntimeError,
                 "SP_ERR_CUDA": RuntimeError, "SP_ERR_OUT_OF_MEMORY": RuntimeError}
        for status, code in sp.STATUS.items():
            if status == "SP_OK":
                continue
            e = _errors.error(status, code, "why")
            self.assertIsInstance(e, sp.StridepackError)
            self.assertIsInstance(e, kinds.get(status, ValueError), status)
            self.assertEqual(sum(isinstance(e, k) for k in (ValueError, TypeError, RuntimeError)),
                             1, status)

    def test_binding_errors(self):
        a = np.arange(12.0).reshape(3, 4)
        ro = np.zeros((4, 3))
        ro.flags.writeable = False
        with self.assertRaises(sp.StridepackError) as cm:
            sp.copy_batch([(a.T, ro)])
        self.assertEqual(cm.exception.status, "SP_ERR_INVALID_ARGUMENT")
        with self.assertRaises(TypeError):
            sp.pack(a)  # one array, not a list
        with self.assertRaises(TypeError):
            sp.copy_batch([(a,)])
        with self.assertRaises(TypeError):
            sp.pack([[1, 2]])

    def test_pack_errors(self):
        a = np.arange(64.0).reshape(8, 8)
        ws = np.full(sp.workspace_bytes([a.T]) - 1, POISON, np.uint8)
        with self.assertRaises(sp.StridepackError) as cm:
            sp.pack([a.T], workspace=ws)
        self.assertEqual(cm.exception.status, "SP_ERR_WORKSPACE_TOO_SMALL")
        self.assertTrue((ws == POISON).all())
        # The workspace may not overlap an input.
        buf = np.zeros(4096, np.uint8)
        x = buf[:1024].view(np.float64).reshape(16, 8)[:, ::2]
        with self.assertRaises(sp.StridepackError) as cm:
            sp.pack([x], workspace=buf)
        self.assertEqual(cm.exception.status, "SP_ERR_OVERLAP")
        self.assertTrue((buf == 0).all())


# ---- the DLPack path, through minimal producers --------------------------------

KDL_CPU, KDL_BFLOAT = 1, 4


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):  # dlpack.h's DLTensor
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):  # no deleter: the producer owns everything
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class _DLManagedTensorVersioned(ctypes.Structure):  # DLPack 1.0, with flags
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


DLPACK_FLAG_READ_ONLY = 1
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_CAPSULE_NAME = b"dltensor"  # the capsule keeps this pointer: module lifetime
_CAPSULE_NAME_VERSIONED = b"dltensor_versioned"


class Bf16View:
    """A DLPack producer (kDLBfloat, 16 bits) over uint16 NumPy memory; data
    is the buffer start and the view begins at byte_offset. versioned: it
    takes max_version and exports DLPack 1.0, flagged read-only when the
    array is."""

    def __init__(self, u16, dense_null_strides=False, versioned=False):
        self.arr = u16
        n = u16.ndim
        self._shape = (ctypes.c_int64 * max(n, 1))(*u16.shape)
        self._strides = (ctypes.c_int64 * max(n, 1))(*(s // 2 for s in u16.strides))
        root = u16 if u16.base is None else u16.base
        start = root.__array_interface__["data"][0]
        m = _DLManagedTensor()
        t = m.dl_tensor
        t.data = start
        t.byte_offset = u16.__array_interface__["data"][0] - start
        t.device.device_type, t.device.device_id = KDL_CPU, 0
        t.ndim = n
        t.dtype.code, t.dtype.bits, t.dtype.lanes = KDL_BFLOAT, 16, 1
        t.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        if not dense_null_strides:
            t.strides = ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64))
        self._m = m
        if versioned:
            mv = _DLManagedTensorVersioned()
            mv.major, mv.minor, mv.dl_tensor = 1, 0, t
            mv.flags = 0 if u16.flags.writeable else DLPACK_FLAG_READ_ONLY
            self._mv = mv
            self.__dlpack__ = self._dlpack_versioned

    def __dlpack_device__(self):
        return (KDL_CPU, 0)

    def __dlpack__(self, stream=None):
        return _capsule_new(ctypes.addressof(self._m), _CAPSULE_NAME, None)

    def _dlpack_versioned(self, stream=None, max_version=None):
        if max_version is None or tuple(max_version) < (1, 0):
            return _capsule_new(ctypes.addressof(self._m), _CAPSULE_NAME, None)
        return _capsule_new(ctypes.addressof(self._mv), _CAPSULE_NAME_VERSIONED, None)


class NumpyDLPack:
    """NumPy's own __dlpack__, seen as an unknown producer."""

    def __init__(self, a):
        self.a = a

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()


class DLPack(unittest.TestCase):
    def test_bf16_producer(self):
        rng = np.random.default_rng(9)
        buf = rng.integers(0, 1 << 16, size=(30, 64), dtype=np.uint16)
        src = buf[3:27:2, ::-1][:, 5:50].T
        dst = np.full((src.shape[1], src.shape[0]), 0xA5A5, np.uint16).T
        dense = np.full(src.shape, 0xA5A5, np.uint16)
        sp.copy_batch([(Bf16View(src), Bf16View(dst)),
                       (Bf16View(src), Bf16View(dense, dense_null_strides=True))])
        self.assertTrue(np.array_equal(dst, src))
        self.assertTrue(np.array_equal(dense, src))
        # The element type really is bf16: a uint16 destination is rejected.
        with self.assertRaises(sp.StridepackError) as cm:
            sp.copy_batch([(Bf16View(src), np.empty(src.shape, np.uint16))])
        self.assertEqual(cm.exception.status, "SP_ERR_DTYPE_MISMATCH")

    def test_read_only_flag_of_dlpack_1(self):
        # A producer of DLPack 1.0 is asked for a versioned capsule, whose
        # read-only flag the binding honours: nothing is written into it.
        src = np.arange(48, dtype=np.uint16).reshape(6, 8)
        ro = np.full((8, 6), 0xA5A5, np.uint16)
        ro.flags.writeable = False
        with self.assertRaises(sp.StridepackError) as cm:
            sp.copy_batch([(Bf16View(src.T), Bf16View(ro, versioned=True))])
        self.assertEqual(cm.exception.message, "pairs[0].dst: read-only")
        self.assertTrue((ro == 0xA5A5).all())
        dst = np.full((8, 6), 0xA5A5, np.uint16)
        sp.copy_batch([(Bf16View(src.T, versioned=True), Bf16View(dst, versioned=True))])
        self.assertTrue(np.array_equal(dst, src.T))
        # The binding reads the versioned export, and only because it asked.
        v = Bf16View(dst, versioned=True)
        self.assertEqual(_native.describe(v, True)[1], (8, 6))

    def test_unknown_producer(self):
        a = np.arange(48, dtype=np.float32).reshape(6, 8)
        dst = np.full((8, 6), -1, np.float32)
        sp.copy_batch([(NumpyDLPack(a[::-1].T), NumpyDLPack(dst))])
        self.assertTrue(np.array_equal(dst, a[::-1].T))
        w = NumpyDLPack(a)
        self.assertIs(sp.pack([w])[0], w)  # dense: returned as itself
        with self.assertRaises(TypeError):  # no framework to make outputs in
            sp.pack([NumpyDLPack(a.T)])


def bf16_bits(f):
    """Round-toward-zero bf16 bits of float32 values (enough for test data)."""
    return (np.asarray(f, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def bf16_float(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


@unittest.skipUnless(sp.kda_available(), "this libstridepack build has no KDA part")
class Kda(unittest.TestCase):
    T, H, CU = 21, 2, [0, 8, 21]

    def inputs(self, rng):
        T, H = self.T, self.H
        P = H * 128
        qkv = bf16_bits(rng.uniform(-1, 1, (T, 3 * P)))
        fb = bf16_bits(rng.uniform(-3, 3, (T, 128 + H)))
        g = bf16_bits(rng.uniform(-2, 2, (1, T, H, 128)))
        views = dict(q=qkv[:, :P].reshape(1, T, H, 128), k=qkv[:, P:2 * P].reshape(1, T, H, 128),
                     v=qkv[:, 2 * P:].reshape(1, T, H, 128), g=g, beta=fb[:, 128:].reshape(1, T, H))
        params = dict(A_log=rng.uniform(-1, 0.5, H).astype(np.float32),
                      dt_bias=rng.uniform(-0.5, 0.5, H * 128).astype(np.float32),
                      cu_seqlens=np.array(self.CU, np.int64),
                      state_indices=np.array([2, 0], np.int32))
        state = (0.1 * rng.standard_normal((3, H, 128, 128))).astype(np.float32)
        return views, params, state

    def run_kda(self, fn, views, params, state, dense=False):
        o = np.full((1, self.T, self.H, 128), 0xA5A5, np.uint16)
        arrays = {n: Bf16View(np.ascontiguousarray(a) if dense else a) for n, a in views.items()}
        fn(**arrays, **params, state=state, o=Bf16View(o))
        return o

    def test_boundary_matches_prefill_on_dense_copies(self):
        rng = np.random.default_rng(10)
        views, params, state = self.inputs(rng)
        s_boundary, s_dense, s_ref = state.copy(), state.copy(), state.copy()
        with sp.KdaBoundary("cpu", self.T, self.H) as b:
            o_boundary = self.run_kda(b.run, views, params, s_boundary)
            # The K3 views are read in place (16-byte aligned rows): no copy.
            aligned = views["q"].ctypes.data % 16 == 0
            self.assertEqual(b.last_copied, 0 if aligned else 3)
        o_dense = self.run_kda(sp.kda_prefill, views, params, s_dense, dense=True)
        self.assertTrue(np.array_equal(o_boundary, o_dense))
        if aligned:  # and so does the prefill itself
            s_direct = state.copy()
            o_direct = self.run_kda(sp.kda_prefill, views, params, s_direct)
            self.assertTrue(np.array_equal(o_direct, o_dense))
            self.assertTrue(np.array_equal(s_direct.view(np.uint32), s_dense.view(np.uint32)))
        self.assertTrue(np.array_equal(s_boundary.view(np.uint32), s_dense.view(np.uint32)))
        self.assertFalse(np.array_equal(s_boundary, state), "state not written")
        o_ref = self.run_kda(lambda **a: sp.kda_prefill(**a, reference=True),
                             views, params, s_ref, dense=True)
        got, ref = bf16_float(o_boundary), bf16_float(o_ref)
        self.assertGreater(np.linalg.norm(ref), 0)
        self.assertLess(np.linalg.norm(got - ref) / np.linalg.norm(ref), 2e-2)

    def test_boundary_every_form(self):
        """KdaBoundary.run in every gate and beta form: a log-decay g (bf16,
        <= 0) on strided views the boundary packs, betas activated and 2
        sigmoid: the same bits as the prefill on dense copies, and near the
        float64 reference."""
        rng = np.random.default_rng(14)
        views, params, state = self.inputs(rng)
        # q, k, v 8 bytes off their rows' alignment, g's heads 132 channels
        # apart: none read in place, all four packed.
        T, H, P = self.T, self.H, self.H * 128
        qkv = np.zeros((T, 3 * P + 4), np.uint16)
        qkv[:, 4:] = np.concatenate([views[n].reshape(T, P) for n in ("q", "k", "v")], axis=1)
        gbuf = np.zeros(T * H * 128 + 4 * H, np.uint16)
        g = as_strided(gbuf, (1, T, H, 128), (0, H * 256, 264, 2))
        g[...] = views["g"] | 0x8000  # a log-decay: every value <= 0
        packed = dict(q=qkv[:, 4:4 + P].reshape(1, T, H, 128),
                      k=qkv[:, 4 + P:4 + 2 * P].reshape(1, T, H, 128),
                      v=qkv[:, 4 + 2 * P:].reshape(1, T, H, 128), g=g, beta=views["beta"])
        for gate, beta_form in (("log_decay", "activated"), ("softplus", "logits_x2"),
                                ("log_decay", "logits")):
            with self.subTest(gate=gate, beta_form=beta_form):
                x = dict(packed)
                if gate == "softplus":
                    x["g"] = views["g"]
                if beta_form == "activated":
                    x["beta"] = views["beta"] & 0x7fff  # >= 0
                kw = dict(params, gate=gate, beta_form=beta_form)
                s_b, s_d, s_r = state.copy(), state.copy(), state.copy()
                with sp.KdaBoundary("cpu", T, H) as b:
                    o_b = self.run_kda(lambda **a: b.run(**a, gate=gate, beta_form=beta_form),
                                       x, params, s_b)
                    self.assertEqual(b.last_copied, 3 if gate == "softplus" else 4)
                o_d = self.run_kda(lambda **a: sp.kda_prefill(**a, **kw), x, {}, s_d, dense=True)
                o_r = self.run_kda(lambda **a: sp.kda_prefill(**a, **kw, reference=True), x, {},
                                   s_r, dense=True)
                self.assertTrue(np.array_equal(o_b, o_d))
                self.assertTrue(np.array_equal(s_b.view(np.uint32), s_d.view(np.uint32)))
                self.assertFalse(np.array_equal(s_b, state), "state not written")
                got, ref = bf16_float(o_b), bf16_float(o_r)
                self.assertLess(np.linalg.norm(got - ref) / np.linalg.norm(ref), 5e-4)
                self.assertLess(np.linalg.norm(s_b - s_r) / np.linalg.norm(s_r), 1e-5)

    def test_workspace_bytes_takes_the_prefill_keywords(self):
        """kda_workspace_bytes takes kda_prefill's keywords, beta_form too: on
        the CPU no kernel needs a workspace (0) whatever the forms; a
        beta_form that is none is refused by name."""
        rng = np.random.default_rng(13)
        views, params, state = self.inputs(rng)
        arrays = {n: Bf16View(a) for n, a in views.items()}
        o = Bf16View(np.zeros((1, self.T, self.H, 128), np.uint16))
        for gate, beta_form in (("lower_bound", "logits"), ("softplus", "activated"),
                                ("softplus", "logits_x2")):
            with self.subTest(gate=gate, beta_form=beta_form):
                self.assertEqual(sp.kda_workspace_bytes(**arrays, **params, state=state, o=o,
                                                        gate=gate, beta_form=beta_form), 0)
        with self.assertRaisesRegex(ValueError, "beta_form: 'sigmoid' is not one of"):
            sp.kda_workspace_bytes(**arrays, **params, state=state, o=o, beta_form="sigmoid")

    def test_engine_conventions(self):
        """Index arrays of either width, has_initial_state and the verify
        table, through the binding: bit for bit what the plain calls give."""
        rng = np.random.default_rng(12)
        views, params, state = self.inputs(rng)
        s0 = state.copy()
        o0 = self.run_kda(sp.kda_prefill, views, params, s0)
        wide = dict(params, cu_seqlens=params["cu_seqlens"].astype(np.int32),
                    state_indices=params["state_indices"].astype(np.int64))
        s1 = state.copy()
        self.assertTrue(np.array_equal(self.run_kda(sp.kda_prefill, views, wide, s1), o0))
        self.assertTrue(np.array_equal(s1.view(np.uint32), s0.view(np.uint32)))
        # has_initial_state: sequence 0 (slot 2) starts from zeros, its NaN never read.
        s_nan, s_zero = state.copy(), state.copy()
        s_nan[2], s_zero[2] = np.nan, 0
        fresh = np.array([False, True])
        o_nan = self.run_kda(lambda **a: sp.kda_prefill(**a, has_initial_state=fresh), views,
                             params, s_nan)
        o_zero = self.run_kda(sp.kda_prefill, views, params, s_zero)
        self.assertTrue(np.array_equal(o_nan, o_zero))
        self.assertTrue(np.array_equal(s_nan.view(np.uint32), s_zero.view(np.uint32)))
        # A verify table [2, 13]: the states after each token, into its column.
        W = 13
        table = rng.permutation(2 * W + 2)[:2 * W].reshape(2, W).astype(np.int32)
        acc = np.array([3, 1], np.int32)
        pool = (0.1 * rng.standard_normal((2 * W + 2, self.H, 128, 128))).astype(np.float32)
        got = pool.copy()
        o_v = self.run_kda(lambda **a: sp.kda_prefill(**a, num_accepted_tokens=acc), views,
                           dict(params, state_indices=table), got)
        want, o_want = pool.copy(), np.full_like(o_v, 0xA5A5)
        for n in range(2):
            one = pool[table[n, acc[n] - 1]][None].copy()
            for t in range(self.CU[n], self.CU[n + 1]):
                step = {k: v[:, t:t + 1] for k, v in views.items()}
                o = np.full((1, 1, self.H, 128), 0xA5A5, np.uint16)
                sp.kda_prefill(**{k: Bf16View(np.ascontiguousarray(v)) for k, v in step.items()},
                               A_log=params["A_log"], dt_bias=params["dt_bias"],
                               cu_seqlens=np.array([0, 1], np.int64), state=one,
                               state_indices=np.array([0], np.int32), o=Bf16View(o))
                o_want[:, t] = o[:, 0]
                want[table[n, t - self.CU[n]]] = one[0]
        self.assertTrue(np.array_equal(o_v, o_want))
        self.assertTrue(np.array_equal(got.view(np.uint32), want.view(np.uint32)))
        self.assertFalse(np.array_equal(got, pool))
        with self.assertRaises(sp.StridepackError) as cm:
            self.run_kda(lambda **a: sp.kda_prefill(**a, num_accepted_tokens=acc), views, params,
                         state.copy())
        self.assertIn("num_accepted_tokens: given with a 1-D state_indices", cm.exception.message)

    def test_reads_in_place_is_the_librarys_rule(self):
        T, H = self.T, self.H
        P = H * 128
        qkv = np.zeros((T, 3 * P + 8), np.uint16)

        def rule(x):  # the header's rule, written here independently
            rows = x.strides[-1] == 2 and all(s % 16 == 0 for s in x.strides[1:3])
            return x.flags.c_contiguous or (rows and x.ctypes.data % 16 == 0)

        for name, x in [("q", qkv[:, :P]), ("k", qkv[:, P:2 * P]), ("shifted", qkv[:, 4:P + 4]),
                        ("dense", np.zeros((T, P), np.uint16)), ("every other channel",
                        qkv[:, :2 * P:2])]:
            x = x.reshape(1, T, H, 128)
            with self.subTest(view=name):
                self.assertEqual(sp._native.kda_reads_in_place(Bf16View(x)), rule(x))
        self.assertFalse(rule(qkv[:, 4:P + 4].reshape(1, T, H, 128)) and
                         rule(qkv[:, :P].reshape(1, T, H, 128)))  # the cases differ

    def test_boundary_errors(self):
        rng = np.random.default_rng(11)
        views, params, state = self.inputs(rng)
        b = sp.KdaBoundary("cpu", self.T - 1, self.H)
        with self.assertRaises(sp.StridepackError) as cm:
            self.run_kda(b.run, views, params, state.copy())
        self.assertEqual(cm.exception.status, "SP_ERR_CAPACITY")
        b.close()
        with self.assertRaises(sp.StridepackError):
            self.run_kda(b.run, views, params, state.copy())
        bad = dict(views, v=views["v"][:, :-1])
        with self.assertRaises(sp.StridepackError) as cm:
            self.run_kda(sp.kda_prefill, bad, params, state.copy(), dense=True)
        self.assertEqual(cm.exception.status, "SP_ERR_SHAPE_MISMATCH")
        self.assertIn("v", cm.exception.message)
        with self.assertRaises(ValueError):
            sp.KdaBoundary("tpu", 1, 1)

    def prefill_calls(self, boundary):
        """The three calls that write o, the state and the checkpoints, each
        taking keyword arrays: dense inputs for the prefill and the
        reference, the strided views for the boundary."""
        return [("kda_prefill", sp.kda_prefill, True),
                ("reference", lambda **a: sp.kda_prefill(**a, reference=True), True),
                ("boundary", boundary.run, False)]

    def arrays(self, views, dense):
        return {n: Bf16View(np.ascontiguousarray(a) if dense else a) for n, a in views.items()}

    def assert_refused(self, call, status, message, o, state_bytes, state):
        o[...] = 0xA5A5
        with self.assertRaises(sp.StridepackError) as cm:
            call()
        self.assertEqual(cm.exception.status, status)
        self.assertEqual(cm.exception.message, message)
        self.assertTrue((o == 0xA5A5).all(), "o written by a refused call")
        self.assertEqual(state.tobytes(), state_bytes, "state written by a refused call")

    def test_read_only_arrays_are_refused_and_left_unwritten(self):
        # The prefill writes o, the state pool and the checkpoints: a
        # read-only one (over bytes, over a read-only mapping: the call once
        # wrote the first and crashed on the second) is refused first.
        rng = np.random.default_rng(13)
        views, params, state = self.inputs(rng)
        o = np.full((1, self.T, self.H, 128), 0xA5A5, np.uint16)
        original = state.tobytes()
        payload = bytes(original)
        from_bytes = np.frombuffer(payload, np.float32).reshape(state.shape)
        self.assertFalse(from_bytes.flags.writeable)
        b = sp.KdaBoundary("cpu", self.T, self.H)
        with tempfile.TemporaryFile() as f:
            f.write(original)
            f.flush()
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                mapped = np.frombuffer(mm, np.float32).reshape(state.shape)
                try:
                    for name, fn, dense in self.prefill_calls(b):
                        for kind, st in (("bytes", from_bytes), ("mmap", mapped)):
                            with self.subTest(call=name, state=kind):
                                self.assert_refused(
                                    lambda: fn(**self.arrays(views, dense), **params, state=st,
                                               o=Bf16View(o)),
                                    "SP_ERR_INVALID_ARGUMENT",
                                    "state: read-only, and the prefill writes it", o, original,
                                    st)
                finally:
                    st = mapped = None  # no view of the mapping left when it closes
                    gc.collect()
        self.assertEqual(payload, original)
        # Read-only checkpoints (interval 8: one per sequence) and o.
        ck = np.zeros((2, self.H, 128, 128), np.float32)
        ck.flags.writeable = False
        starts = np.array([0, 1, 2], np.int64)
        ro_o = np.zeros_like(o)
        ro_o.flags.writeable = False
        for name, fn, dense in self.prefill_calls(b):
            with self.subTest(call=name, array="checkpoints"):
                st = state.copy()
                self.assert_refused(
                    lambda: fn(**self.arrays(views, dense), **params, state=st, o=Bf16View(o),
                               checkpoint_interval=8, checkpoint_cu_starts=starts,
                               checkpoints=ck),
                    "SP_ERR_INVALID_ARGUMENT", "checkpoints: read-only, and the prefill writes it",
                    o, original, st)
                self.assertTrue((ck == 0).all())
            for kind, ro in (("numpy", ro_o), ("dlpack 1.0", Bf16View(ro_o, versioned=True))):
                with self.subTest(call=name, array="o", kind=kind):
                    st = state.copy()
                    self.assert_refused(
                        lambda: fn(**self.arrays(views, dense), **params, state=st, o=ro),
                        "SP_ERR_INVALID_ARGUMENT", "o: read-only, and the prefill writes it",
                        o, original, st)
                    self.assertTrue((ro_o == 0).all())
        b.close()

    def test_workspace_is_checked_as_an_array(self):
        # The workspace is handed over as the array itself: its bytes are
        # what a dense, writable array on the call's device holds, never
        # numel x itemsize of a view that does not own them.
        rng = np.random.default_rng(14)
        views, params, state = self.inputs(rng)
        original = state.tobytes()
        o = np.full((1, self.T, self.H, 128), 0xA5A5, np.uint16)
        expanded = as_strided(np.zeros(16, np.uint8), (1 << 30,), (0,))  # 1 GiB "of" 16 bytes
        self.assertTrue(expanded.flags.writeable)
        ro = np.zeros(4096, np.uint8)
        ro.flags.writeable = False
        rows = np.zeros((16, 256), np.uint8)[:, :64]  # 1 KiB of a 4 KiB buffer
        b = sp.KdaBoundary("cpu", self.T, self.H)
        cases = [(expanded, "SP_ERR_INVALID_ARGUMENT",
                  "workspace: not contiguous (shape (1073741824,), byte strides (0,)): the call "
                  "writes every byte of it, so it must own them (an expanded or strided view "
                  "does not)"),
                 (rows, "SP_ERR_INVALID_ARGUMENT",
                  "workspace: not contiguous (shape (16, 64), byte strides (256, 1)): the call "
                  "writes every byte of it, so it must own them (an expanded or strided view "
                  "does not)"),
                 (ro, "SP_ERR_INVALID_ARGUMENT", "workspace: read-only, and the call writes it"),
                 (np.zeros((2, 2), object), "SP_ERR_INVALID_ARGUMENT",
                  "workspace: object arrays hold references, not plain bits")]
        for name, fn, dense in self.prefill_calls(b)[::2]:  # the reference takes none
            for ws, status, message in cases:
                with self.subTest(call=name, message=message):
                    st = state.copy()
                    self.assert_refused(
                        lambda: fn(**self.arrays(views, dense), **params, state=st,
                                   o=Bf16View(o), workspace=ws),
                        status, message, o, original, st)
        self.assertTrue((expanded == 0).all() and (rows == 0).all())
        b.close()

    def test_workspace_extent_is_the_views_own(self):
        # A workspace that is a short view of a buffer holding o right after
        # it: the extent handed over ends where the view ends (no overlap
        # with o), and one byte more overlaps o.
        rng = np.random.default_rng(15)
        views, params, state = self.inputs(rng)
        o_bytes = self.T * self.H * 128 * 2
        buf = np.full(256 + o_bytes + 64, POISON, np.uint8)
        o = buf[256:256 + o_bytes].view(np.uint16).reshape(1, self.T, self.H, 128)
        dense = self.arrays(views, True)
        st = state.copy()
        sp.kda_prefill(**dense, **params, state=st, o=Bf16View(o), workspace=buf[:256])
        self.assertFalse((o.view(np.uint8) == POISON).all(), "o not written")
        self.assertTrue((buf[256 + o_bytes:] == POISON).all(), "written past o")
        o_first = o.copy()
        with self.assertRaises(sp.StridepackError) as cm:
            sp.kda_prefill(**dense, **params, state=state.copy(), o=Bf16View(o),
                           workspace=buf[:257])
        self.assertEqual(cm.exception.status, "SP_ERR_OVERLAP")
        self.assertEqual(cm.exception.message, "workspace: shares memory with o")
        self.assertTrue(np.array_equal(o, o_first))
        # The two-pass kernel serves CUDA calls only: forcing it here is
        # refused whatever the workspace, and nothing is written.
        with self.assertRaises(sp.StridepackError) as cm:
            sp.kda_prefill(**dense, **params, state=st, o=Bf16View(o), kernel="chunked_two_pass",
                           workspace=buf[:16])
        self.assertEqual(cm.exception.status, "SP_ERR_UNSUPPORTED")
        self.assertTrue(np.array_equal(o, o_first))

    def test_call_messages(self):
        rng = np.random.default_rng(16)
        views, params, state = self.inputs(rng)
        o = np.full((1, self.T, self.H, 128), 0xA5A5, np.uint16)
        with self.assertRaises(sp.StridepackError) as cm:
            sp.kda_prefill(**self.arrays(views, True), **dict(params, state_indices=None),
                           state=state.copy(), o=Bf16View(o))
        self.assertEqual(cm.exception.message, "state_indices: None, but every KDA call needs "
                         "it (int32 or int64 [N]: the state slot of each sequence (or a "
                         "verify table [N, W]))")
        self.assertTrue((o == 0xA5A5).all())
        for device in (-1, "cuda:-1"):
            with self.subTest(device=device):
                if device == -1:
                    with self.assertRaises(sp.StridepackError) as cm:
                        sp.KdaBoundary(device, 8, 1)
                    self.assertEqual(cm.exception.message,
                                     "device: CUDA ordinal -1 is negative (devices are "
                                     "numbered from 0)")
                else:
                    with self.assertRaisesRegex(ValueError, "is not cpu, cuda or cuda:N"):
                        sp.KdaBoundary(device, 8, 1)

    def test_entry_points_and_enums_from_the_library(self):
        from stridepack import _kda
        for name in ("kda_prefill", "kda_reference", "kda_boundary_run", "kda_workspace_bytes"):
            self.assertTrue(callable(getattr(_native, name)), name)
        self.assertFalse(hasattr(_native, "kda"), "the mode-integer entry point is back")
        self.assertEqual(_kda.KERNELS, {"auto": 0, "recurrent": 1, "chunked": 2,
                                        "chunked_two_pass": 3, "decode": 4})
        self.assertEqual(_kda.GATES, {"lower_bound": 0, "softplus": 1, "log_decay": 2})
        self.assertEqual(_kda.BETAS, {"logits": 0, "logits_x2": 1, "activated": 2})
        self.assertEqual(_native.kda_kernel_name(5), "unknown")
        self.assertIs(sp.kda_available(), True)


def conv_reference(x, w, bias, cu, state, idx, init, silu, decode=False):
    """The convolution of stridepack_conv.h in float64, written here
    independently: (out[T, C] as float64 with NaN for rows not written, the
    new state as float64 [slots, C, W-1], m[T, C] the terms' magnitudes)."""
    x, st = bf16_float(x).astype(np.float64), bf16_float(state).astype(np.float64)
    w = np.asarray(w, np.float64)
    b = np.zeros(w.shape[0]) if bias is None else np.asarray(bias, np.float64)
    W = w.shape[1]
    out, m, new = np.full(x.shape, np.nan), np.zeros(x.shape), st.copy()
    seqs = [(n, n, n + 1) for n in range(len(idx))] if decode else \
        [(n, cu[n], cu[n + 1]) for n in range(len(idx))]
    for n, s, e in seqs:
        if idx[n] < 0:
            continue
        prev = st[idx[n]].T if decode or (init is not None and init[n]) else np.zeros((W - 1, x.shape[1]))
        z = np.concatenate([prev, x[s:e]])
        for t in range(e - s):
            terms = w.T * z[t:t + W]
            y = b + terms.sum(0)
            out[s + t] = y / (1 + np.exp(-y)) if silu else y
            m[s + t] = np.abs(b) + np.abs(terms).sum(0)
        new[idx[n]] = z[-(W - 1):].T
    return out, new, m


class Conv(unittest.TestCase):
    """The causal convolution (stridepack_conv.h) through the binding: against a
    float64 computation written here, both output layouts, padded rows,
    has_initial_state, decode, and what is refused."""
    T, C, W, CU = 23, 48, 4, [0, 9, 14, 23]  # sequence 1 (rows 9 .. 13) padded

    def problem(self, rng, silu=True, bias=True):
        T, C, W = self.T, self.C, self.W
        return dict(x=bf16_bits(rng.uniform(-1, 1, (T, C))),
                    weight=rng.uniform(-0.5, 0.5, (C, W)).astype(np.float32),
                    bias=rng.uniform(-0.2, 0.2, C).astype(np.float32) if bias else None,
                    cu_seqlens=np.array(self.CU, np.int64),
                    state=bf16_bits(rng.uniform(-1, 1, (5, C, W - 1))),
                    state_indices=np.array([3, -1, 0], np.int32),
                    has_initial_state=np.array([True, True, False]), silu=silu)

    def assert_close(self, got_u16, want, m):
        got = bf16_float(got_u16).astype(np.float64)
        written = ~np.isnan(want)
        # The header's bound: one bf16 ulp of the result plus 2^-20 of the terms.
        ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(want), 2.0 ** -126))) - 7)
        bad = written & ~(np.abs(got - want) <= ulp + 2.0 ** -20 * m)
        self.assertFalse(bad.any(), f"{bad.sum()} outputs beyond the bound")
        self.assertTrue((got_u16[~written] == 0xA5A5).all(), "a row outside the sequences written")

    def run_conv(self, p, layout="out", x=None):
        T, C = self.T, self.C
        out = np.full((T, C), 0xA5A5, np.uint16)
        state = p["state"].copy()
        kw = {}
        if layout == "out":
            kw["out"] = Bf16View(out)
        else:  # split: q, k, v column slices of one [T, C] buffer, key_dim 16
            kw.update(q=Bf16View(out[:, :16]), k=Bf16View(out[:, 16:32]), v=Bf16View(out[:, 32:]))
        sp.causal_conv1d(Bf16View(p["x"] if x is None else x), p["weight"], p["cu_seqlens"],
                         Bf16View(state), p["state_indices"], bias=p["bias"],
                         has_initial_state=p["has_initial_state"], silu=p["silu"], **kw)
        return out, state

    def test_prefill_against_float64(self):
        for silu, bias in [(True, True), (False, False)]:
            with self.subTest(silu=silu, bias=bias):
                p = self.problem(np.random.default_rng(20), silu, bias)
                out, state = self.run_conv(p)
                want, new, m = conv_reference(p["x"], p["weight"], p["bias"], self.CU, p["state"],
                                              p["state_indices"], p["has_initial_state"], silu)
                self.assert_close(out, want, m)
                # The state holds the last W-1 inputs, bits of x or of the old state.
                self.assertTrue(np.array_equal(bf16_float(state), new.astype(np.float32)))
                self.assertFalse(np.array_equal(state, p["state"]), "no slot written")
                # The padded sequence's rows stay unwritten (assert_close);
                # slots 1, 2 and 4 are nobody's.
                self.assertTrue((out[9:14] == 0xA5A5).all())
                for slot in (1, 2, 4):
                    self.assertTrue(np.array_equal(state[slot], p["state"][slot]))

    def test_split_layout_and_channel_major_x_hold_the_same_bits(self):
        p = self.problem(np.random.default_rng(21))
        out, state = self.run_conv(p)
        split, s_split = self.run_conv(p, layout="split")
        self.assertTrue(np.array_equal(out, split) and np.array_equal(state, s_split))
        # x as a channel-major [C, T] buffer seen through .T (vLLM's layout).
        cm, s_cm = self.run_conv(p, x=np.ascontiguousarray(p["x"].T).T)
        self.assertTrue(np.array_equal(out, cm) and np.array_equal(state, s_cm))

    def test_reference_matches_float64(self):
        p = self.problem(np.random.default_rng(22))
        out = np.full((self.T, self.C), 0xA5A5, np.uint16)
        state = p["state"].copy()
        sp.causal_conv1d(Bf16View(p["x"]), p["weight"], p["cu_seqlens"], Bf16View(state),
                         p["state_indices"], bias=p["bias"],
                         has_initial_state=p["has_initial_state"], out=Bf16View(out),
                         reference=True)
        want, new, m = conv_reference(p["x"], p["weight"], p["bias"], self.CU, p["state"],
                                      p["state_indices"], p["has_initial_state"], True)
        self.assert_close(out, want, m)

    def test_decode_step_and_padded_rows(self):
        rng = np.random.default_rng(23)
        p = self.problem(rng)
        N = 4
        x = bf16_bits(rng.uniform(-1, 1, (N, self.C)))
        idx = np.array([4, -1, 1, -1], np.int32)
        out = np.full((N, self.C), 0xA5A5, np.uint16)
        state = p["state"].copy()
        sp.causal_conv1d_update(Bf16View(x), p["weight"], Bf16View(state), idx, bias=p["bias"],
                                out=Bf16View(out))
        want, new, m = conv_reference(x, p["weight"], p["bias"], None, p["state"], idx, None,
                                      True, decode=True)
        self.assert_close(out, want, m)
        self.assertTrue((out[[1, 3]] == 0xA5A5).all(), "a padded row written")
        self.assertTrue(np.array_equal(bf16_float(state), new.astype(np.float32)))
        for slot in (0, 2, 3):
            self.assertTrue(np.array_equal(state[slot], p["state"][slot]))

    def test_refused_calls_name_the_argument_and_write_nothing(self):
        p = self.problem(np.random.default_rng(24))
        out = np.full((self.T, self.C), 0xA5A5, np.uint16)
        state = p["state"].copy()
        base = dict(bias=p["bias"], has_initial_state=p["has_initial_state"])

        def call(**change):
            a = dict(x=Bf16View(p["x"]), weight=p["weight"], cu_seqlens=p["cu_seqlens"],
                     state=Bf16View(state), state_indices=p["state_indices"], out=Bf16View(out))
            a.update(base)
            a.update(change)
            sp.causal_conv1d(a.pop("x"), a.pop("weight"), a.pop("cu_seqlens"), a.pop("state"),
                             a.pop("state_indices"), **a)

        ro = out.copy()
        ro.flags.writeable = False
        cases = [(dict(state_indices=None), "SP_ERR_INVALID_ARGUMENT",
                  "state_indices: None, but every convolution call needs it (int32 or int64 "
                  "[N]: each sequence's slot, -1 for a padded one)"),
                 (dict(out=Bf16View(ro, versioned=True)), "SP_ERR_INVALID_ARGUMENT",
                  "out: read-only, and the convolution writes it"),
                 (dict(out=None), "SP_ERR_INVALID_ARGUMENT", None),
                 (dict(weight=p["weight"][:, :1].copy()), "SP_ERR_UNSUPPORTED", "weight"),
                 (dict(cu_seqlens=p["cu_seqlens"][:-1].copy()), "SP_ERR_SHAPE_MISMATCH", None),
                 (dict(state_indices=p["state_indices"].astype(np.int16)),
                  "SP_ERR_DTYPE_MISMATCH", "state_indices")]
        for change, status, message in cases:
            with self.subTest(change=sorted(change)):
                out[...], state[...] = 0xA5A5, p["state"]
                with self.assertRaises(sp.StridepackError) as cm:
                    call(**change)
                self.assertEqual(cm.exception.status, status)
                if message and " " in message:
                    self.assertEqual(cm.exception.message, message)
                elif message:
                    self.assertTrue(cm.exception.message.startswith(message + ":"),
                                    cm.exception.message)
                self.assertTrue((out == 0xA5A5).all(), "out written by a refused call")
                self.assertTrue(np.array_equal(state, p["state"]), "state written")


class PackInto(unittest.TestCase):
    def test_random_views_into_dense_and_strided_outputs(self):
        rng = np.random.default_rng(12)
        for trial in range(150):
            xs, outs, checks = [], [], []
            for _ in range(int(rng.integers(1, 6))):
                dtype = DTYPES[int(rng.integers(len(DTYPES)))]
                shape = random_shape(rng)
                xs.append(make_view(rng, shape, dtype, broadcast=rng.random() < 0.2,
                                    misalign=rng.random() < 0.2)[0])
                if rng.random() < 0.5:
                    o = np.full(shape, 0, dtype) if np.dtype(dtype).kind != "V" else \
                        np.zeros(shape, dtype)
                    o.reshape(-1).view(np.uint8)[...] = POISON
                    outs.append(o)
                    checks.append((o, None))
                else:
                    o, base, select = make_view(rng, shape, dtype, poison=True)
                    outs.append(o)
                    checks.append((base, select))
            passes = sp.copy_pass_count()
            self.assertIs(sp.pack_into(xs, outs), outs)
            self.assertEqual(sp.copy_pass_count() - passes, 1 if any(x.size for x in xs) else 0)
            for i, (x, o) in enumerate(zip(xs, outs)):
                with self.subTest(trial=trial, i=i, dtype=x.dtype.str):
                    self.assertTrue(np.array_equal(as_bytes(o), as_bytes(x)))

    def test_errors_write_nothing(self):
        a = np.arange(48.0).reshape(6, 8)
        good = np.full((8, 6), -1.0)
        with self.assertRaises(ValueError):
            sp.pack_into([a.T, a], [good])
        cases = [("SP_ERR_SHAPE_MISMATCH", np.empty((6, 9))), ("SP_ERR_DTYPE_MISMATCH",
                 np.empty((6, 8), np.int64)), ("SP_ERR_OVERLAP", a[::-1])]
        for status, bad in cases:
            with self.subTest(status=status):
                snapshot, good[...] = a.copy(), -1.0
                with self.assertRaises(sp.StridepackError) as cm:
                    sp.pack_into([a.T, a], [good, bad])
                self.assertEqual(cm.exception.status, status)
                self.assertTrue(cm.exception.message)
                self.assertTrue((good == -1.0).all(), "a failing call wrote")
                self.assertTrue(np.array_equal(a, snapshot))
        ro = np.zeros((8, 6))
        ro.flags.writeable = False
        with self.assertRaises(sp.StridepackError) as cm:
            sp.pack_into([a.T], [ro])
        self.assertEqual(cm.exception.status, "SP_ERR_INVALID_ARGUMENT")
        self.assertEqual(cm.exception.message, "outputs[0]: read-only")

    def test_object_arrays_fall_back(self):
        _api._reset_warnings()
        a = np.array([[1, "x"], [None, 2.5]], dtype=object)
        out = np.empty((2, 2), dtype=object)
        dense = np.zeros((3, 2))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            sp.pack_into([a.T, np.arange(6.0).reshape(2, 3).T], [out, dense])
        self.assertEqual(out.tolist(), a.T.tolist())
        self.assertTrue(np.array_equal(dense, np.arange(6.0).reshape(2, 3).T))
        msgs = [str(m.message) for m in w if issubclass(m.category, sp.FallbackWarning)]
        self.assertEqual(len(msgs), 1, msgs)
        self.assertIn("object arrays", msgs[0])


class Messages(unittest.TestCase):
    """What a caller reads when a call is wrong: the argument and the rule."""

    def test_binding_messages(self):
        a = np.arange(64.0).reshape(8, 8)
        with self.assertRaisesRegex(TypeError, "tensors must be a list, not one array"):
            sp.pack(a)
        with self.assertRaisesRegex(TypeError, "int is not an array"):
            sp.pack([a.T, 3])
        with self.assertRaisesRegex(TypeError, r"pairs\[1\] must be \(src, dst\)"):
            sp.copy_batch([(a, a.copy()), (a,)])
        ws = np.zeros(2 * sp.workspace_bytes([a.T]), np.uint8)[::2]
        with self.assertRaises(sp.StridepackError) as cm:
            sp.pack([a.T], workspace=ws)
        self.assertEqual(str(cm.exception),
                         f"SP_ERR_INVALID_ARGUMENT: workspace: not contiguous (shape ({ws.size},), byte "
                         "strides (2,)): the call writes every byte of it, so it must own them "
                         "(an expanded or strided view does not)")

    def test_calls_name_their_own_arguments(self):
        a = np.arange(64.0 * 64).reshape(64, 64)
        out = np.full((64, 33), -1.0)
        with self.assertRaises(sp.StridepackError) as cm:
            sp.pack_into([a[:, :32]], [out])
        self.assertEqual(cm.exception.status, "SP_ERR_SHAPE_MISMATCH")
        self.assertEqual(cm.exception.message,
                         "outputs[0]: shape (64, 33) differs from inputs[0] (64, 32)")
        with self.assertRaises(sp.StridepackError) as cm:
            sp.pack_into([a[:, :32], a[:2, :3]], [np.empty((64, 32)), np.empty((2, 3), np.int64)])
        self.assertEqual(cm.exception.status, "SP_ERR_DTYPE_MISMATCH")
        self.assertEqual(cm.exception.message, "outputs[1]: dtype i64 differs from inputs[1] f64")
        # The library's own messages (here its overlap check), renamed.
        buf = np.zeros((8, 8))
        with self.assertRaises(sp.StridepackError) as cm:
            sp.pack_into([a[:8, :8], a[8:16, :8]], [buf, buf.T])
        self.assertEqual(cm.exception.status, "SP_ERR_OVERLAP")
        self.assertEqual(cm.exception.message, "outputs[0]: shares memory with outputs[1]")
        self.assertNotIn("pairs", cm.exception.message)
        self.assertTrue((out == -1.0).all() and (buf == 0).all())
        for call in (lambda x: sp.pack(x), lambda x: sp.workspace_bytes(x),
                     lambda x: sp.pack_into(x, []), lambda x: sp.pack_into([], x),
                     lambda x: sp.copy_batch(x)):
            with self.assertRaisesRegex(TypeError, r"^stridepack: \w+ must be a list of arrays, "
                                                   r"not int$"):
                call(5)

    def test_namespace(self):
        self.assertNotIn("sys", dir(sp))
        self.assertTrue(set(sp.__all__) <= set(dir(sp)))

    def test_library_messages_name_the_argument(self):
        a = np.arange(64.0).reshape(8, 8)
        with self.assertRaises(sp.StridepackError) as cm:
            sp.copy_batch([(a.T, np.empty((8, 8))), (a, np.empty((8, 7)))])
        e = cm.exception
        self.assertEqual((e.status, e.code), ("SP_ERR_SHAPE_MISMATCH", 2))
        self.assertEqual(e.message, "pairs[1].dst: shape (8, 7) differs from pairs[1].src (8, 8)")
        self.assertEqual(str(e), f"SP_ERR_SHAPE_MISMATCH: {e.message}")

    def test_fallback_reason_names_the_input(self):
        _api._reset_warnings()
        a = np.arange(2 ** 10, dtype=np.int16).reshape((2,) * 10)
        x = a[(slice(None, None, -1), slice(None)) * 5]
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            sp.pack([a[:, 1], x])
        msgs = [str(m.message) for m in w if issubclass(m.category, sp.FallbackWarning)]
        self.assertEqual(len(msgs), 1, msgs)
        self.assertRegex(msgs[0], r"^stridepack: tensors\[1\]: 10 dims remain after merging "
                                  r"\(at most 8\); using the framework's own copy$")
        self.assertEqual(w[0].filename, __file__, "the warning does not point at the caller")


HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include",
                      "stridepack.h")


class Library(unittest.TestCase):
    def test_status_names_and_version(self):
        self.assertEqual(sp.STATUS["SP_OK"], 0)
        self.assertEqual(sp.STATUS["SP_ERR_UNSUPPORTED"], 7)
        self.assertRegex(sp.version(), r"^\d+\.\d+\.\d+$")
        self.assertIsInstance(sp.cuda_available(), bool)

    def test_extension_module(self):
        # The calls go to the compiled module (no ctypes layer), which links
        # the library itself: there is no libstridepack.so to find.
        self.assertRegex(os.path.basename(_native.__file__), r"^_native\..*\.so$")
        self.assertFalse(hasattr(sp, "library_path"))
        a = np.arange(12.0).reshape(3, 4)
        out = _native.pack([a.T], None)[0]
        self.assertTrue(np.array_equal(out, a.T))

    def test_versions_agree(self):
        with open(HEADER) as f:
            text = f.read()
        header = ".".join(re.search(rf"#define SP_VERSION_{p} (\d+)", text).group(1)
                          for p in ("MAJOR", "MINOR", "PATCH"))
        self.assertEqual(sp.__version__, header)
        self.assertEqual(sp.version(), header)
        self.assertEqual(_native.HEADER_VERSION, header)

    def test_version_mismatch_refuses_to_import(self):
        sp._check_version("0.1.0", "0.1.0", "0.1.0")
        with self.assertRaisesRegex(ImportError, "links libstridepack 0.2.0"):
            sp._check_version("0.1.0", "0.2.0", "0.1.0")
        with self.assertRaisesRegex(ImportError, "header 0.0.9"):
            sp._check_version("0.1.0", "0.1.0", "0.0.9")


if __name__ == "__main__":
    sp_unittest.main(__name__)
