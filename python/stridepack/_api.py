"""pack, copy_batch and workspace_bytes: the framework-facing calls."""

import ctypes
import os
import sys
import warnings

from . import _views as views
from ._frameworks import framework_of
from ._lib import (SP_DEVICE_CUDA, SP_ERR_UNSUPPORTED, CopyPair, Tensor, check, error, lib)


class FallbackWarning(RuntimeWarning):
    """stridepack used the framework's own per-tensor copy instead."""


_warned = set()
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _in_package(frame):
    return os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _PACKAGE_DIR


def _caller_stacklevel():
    """The stacklevel, for a warning issued by _warn_once, of the first
    frame outside this package: the warning points at the user's call."""
    frame, level = sys._getframe(2), 2
    while frame is not None and _in_package(frame):
        frame, level = frame.f_back, level + 1
    return level


def _warn_once(kind, msg):
    # Once per kind and process: a fallback inside a training loop would
    # otherwise print on every step.
    if kind not in _warned:
        _warned.add(kind)
        warnings.warn("stridepack: " + msg, FallbackWarning, stacklevel=_caller_stacklevel())


def _reset_warnings():
    """Let every kind of fallback warn again (for tests)."""
    _warned.clear()


def _device_name(d):
    return f"cuda:{d[1]}" if d[0] == SP_DEVICE_CUDA else "cpu"


def _as_list(items, what):
    if hasattr(items, "__dlpack__") or hasattr(items, "__array_interface__"):
        raise TypeError(f"stridepack: {what} must be a list, not one array")
    return list(items)


def _one_framework(xs):
    fws = {framework_of(x) for x in xs}
    if len(fws) > 1:
        names = sorted(fw.name for fw in fws)
        raise TypeError(f"stridepack: pack takes one framework per call, got {names}")
    return fws.pop()


def _read_inputs(fw, xs, fallback):
    """[(index, RawView)] of the inputs the binding can read; the others
    get fallback(index, reason)."""
    raws = []
    for i, x in enumerate(xs):
        try:
            raws.append((i, fw.raw(x)))
        except views.Unsupported as e:
            fallback(i, f"tensors[{i}]: {e}")
    return raws


def _to_array(raws, fallback):
    """(arr, [(index, RawView)]): those the library can take, as sp_tensors
    filled in place in arr[:len(list)]; the others get fallback."""
    arr = (Tensor * len(raws))()
    mapped = []
    for i, v in raws:
        try:
            views.to_tensor(v, t=arr[len(mapped)])
            mapped.append((i, v))
        except views.Unsupported as e:
            fallback(i, f"tensors[{i}]: {e}")
    return arr, mapped


def _ignore(i, reason):
    pass


def workspace_bytes(tensors):
    """Bytes of workspace that pack(tensors) needs: 0 when every input is
    already dense. Inputs the library cannot take count nothing."""
    xs = _as_list(tensors, "tensors")
    if not xs:
        return 0
    fw = _one_framework(xs)
    arr, mapped = _to_array(_read_inputs(fw, xs, _ignore), _ignore)
    need = ctypes.c_size_t()
    check(lib.sp_pack_workspace_bytes(arr, len(mapped), ctypes.byref(need)))
    return need.value


def pack(tensors, workspace=None):
    """Dense versions of `tensors`, a list of arrays of one framework.

    Each output is the input itself when that is already dense, otherwise a
    view of `workspace` holding a copy; all copies are one library call (one
    kernel launch on CUDA, on the framework's current stream; at most 64
    tensors per call, more fall back to the framework's copy). Give a
    workspace of at least workspace_bytes(tensors) bytes (a contiguous
    array of the same framework and device) to allocate nothing, as CUDA
    graph capture wants; without one, one is allocated. Falls back to the
    framework's per-tensor copy, warning once, while autograd is recording
    or for input the library reports unsupported.
    Raises StridepackError (.status, .message) when the library fails.
    """
    xs = _as_list(tensors, "tensors")
    if not xs:
        return []
    fw = _one_framework(xs + ([workspace] if workspace is not None else []))
    if fw.autograd_recording(xs):
        _warn_once("autograd", "autograd is recording (an input requires grad): pack uses "
                   "per-tensor .contiguous() so that gradients flow")
        return [fw.contiguous(x) for x in xs]
    key = _plan_key(fw, xs, workspace)
    plan = _plans.get(key) if key is not None else None
    if plan is not None:
        return _replay(fw, plan, xs, workspace)
    outs = [None] * len(xs)

    def fallback(i, reason):
        _warn_once("unsupported", reason + "; using the framework's own copy")
        outs[i] = fw.contiguous(xs[i])

    raws = _read_inputs(fw, xs, fallback)
    # Density as sp_tensor_is_dense defines it (size-1 dims any stride, an
    # empty tensor dense), decided here: the all-dense call costs no more
    # than reading the inputs.
    copy = [v for _, v in raws if not v.is_c_contiguous()]
    if not copy:  # nothing to move: no library call, no launch
        for i, _ in raws:
            outs[i] = xs[i]
        return outs
    device = copy[0].device
    arr, mapped = _to_array(raws, fallback)
    n = len(mapped)
    if workspace is None:
        need = ctypes.c_size_t()
        check(lib.sp_pack_workspace_bytes(arr, n, ctypes.byref(need)))
        workspace = fw.empty_bytes(need.value, device)
    try:
        wv = fw.raw(workspace)
    except views.Unsupported as e:
        raise error("SP_ERR_INVALID_ARGUMENT", f"workspace: {e}") from None
    if not wv.is_c_contiguous() or wv.readonly:
        raise error("SP_ERR_INVALID_ARGUMENT", "workspace: must be contiguous and writable")
    if wv.device != device:
        raise error("SP_ERR_DEVICE_MISMATCH", f"workspace: on {_device_name(wv.device)}, "
                    f"inputs to copy on {_device_name(device)}")
    out_arr = (Tensor * n)()
    status = lib.sp_pack(arr, n, wv.ptr or None, wv.numel * wv.itemsize, out_arr, None,
                         fw.stream(device))
    if status == SP_ERR_UNSUPPORTED:
        reason = lib.sp_last_error().decode(errors="replace")
        for i, _ in mapped:
            fallback(i, f"the library reports unsupported input ({reason})")
        return outs
    check(status)
    slots = {}  # input index -> (byte offset in the workspace, bytes)
    for j, (i, v) in enumerate(mapped):
        data = out_arr[j].data
        if data == arr[j].data:  # the library's alias of a dense input
            outs[i] = xs[i]
        else:
            slots[i] = (data - wv.ptr, v.numel * v.itemsize)
    _views_into(fw, workspace, slots, xs, outs)
    if key is not None and len(mapped) == len(xs):  # no fallback: the call can be replayed
        if len(_plans) >= _PLAN_CACHE:
            _plans.pop(next(iter(_plans)))
        _plans[key] = (arr, n, wv.ptr, wv.numel * wv.itemsize, out_arr, device, slots)
    return outs


def _views_into(fw, workspace, slots, xs, outs):
    """outs[i] = a new view of the workspace at slots[i], shaped like xs[i]."""
    if slots:
        ws_u8 = fw.byte_view(workspace)
        for i, (offset, nbytes) in slots.items():
            outs[i] = fw.out_view(ws_u8, offset, nbytes, xs[i])


# Eager calls repeat with the same views and workspace (the same layer
# buffers, step after step). The library arguments built for such a call
# (plain numbers: addresses, shapes, strides, slot offsets) are kept, keyed
# on everything they were built from, so that a repeat skips rebuilding
# them; the library still validates every call. No array is kept: the
# outputs are new views of the workspace the caller passes each time, so a
# dropped workspace is freed and no output object is shared between calls.
_PLAN_CACHE = 16
_plans = {}


def _plan_key(fw, xs, workspace):
    keyf = getattr(fw, "plan_key", None)
    if keyf is None or workspace is None:
        return None
    try:
        return (fw.name, tuple(keyf(x) for x in xs), keyf(workspace))
    except views.Unsupported:
        return None


def _replay(fw, plan, xs, workspace):
    arr, n, ws_ptr, ws_bytes, out_arr, device, slots = plan
    check(lib.sp_pack(arr, n, ws_ptr, ws_bytes, out_arr, None, fw.stream(device)))
    outs = list(xs)
    _views_into(fw, workspace, slots, xs, outs)
    return outs


def copy_batch(pairs):
    """Copy each (src, dst) pair, bits not values, all in one library call
    (one kernel launch per 64 pairs on CUDA, on the current stream of the
    framework of the first CUDA array). Arrays may come from any DLPack producer; src and
    dst of a pair have the same shape and dtype, dst is writable and no
    destination overlaps another or any source. Falls back to the
    framework's per-pair copy (dst's framework), warning once, while
    autograd is recording or for input the library reports unsupported.
    Raises StridepackError (.status, .message) when the library fails.
    """
    ps = [tuple(p) for p in _as_list(pairs, "pairs")]
    for i, p in enumerate(ps):
        if len(p) != 2:
            raise TypeError(f"stridepack: pairs[{i}] must be (src, dst)")
    fws = [(framework_of(s), framework_of(d)) for s, d in ps]
    if any(fs.autograd_recording([s, d]) or fd.autograd_recording([s, d])
           for (s, d), (fs, fd) in zip(ps, fws)):
        _warn_once("autograd", "autograd is recording (a tensor requires grad): copy_batch "
                   "uses per-pair .copy_() so that gradients flow")
        for (s, d), (_, fd) in zip(ps, fws):
            fd.copy(d, s)
        return
    mapped, rest, keep = [], [], []
    for i, ((s, d), (fs, fd)) in enumerate(zip(ps, fws)):
        try:
            vs, vd = fs.raw(s), fd.raw(d)
            if vd.readonly:
                raise error("SP_ERR_INVALID_ARGUMENT", f"pairs[{i}].dst: read-only")
            same = vs.itemsize == vd.itemsize and vs.exact == vd.exact
            unit = min(views.best_unit(vs), views.best_unit(vd)) if same else None
            mapped.append(CopyPair(*views.pair_tensors(vs, vd, unit)))
            keep.append((vs, vd, fs if fs.name != "dlpack" else fd))
        except views.Unsupported as e:
            _warn_once("unsupported", f"pairs[{i}]: {e}; using the framework's own copy")
            rest.append(i)
    stream = None
    for vs, _, fw in keep:
        if vs.device[0] == SP_DEVICE_CUDA:
            stream = fw.stream(vs.device)
            break
    arr = (CopyPair * len(mapped))(*mapped)
    status = lib.sp_copy_batch(arr, len(mapped), stream)
    if status == SP_ERR_UNSUPPORTED:
        reason = lib.sp_last_error().decode(errors="replace")
        _warn_once("unsupported", f"the library reports unsupported input ({reason}); "
                   "using the framework's own copy")
        rest = range(len(ps))
    else:
        check(status)
    for i in rest:  # after the library call: a library error writes nothing
        fws[i][1].copy(ps[i][1], ps[i][0])
