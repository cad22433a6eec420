"""pack, pack_into, copy_batch and workspace_bytes: the framework-facing calls.

Each is one call into the extension. When that call cannot do the work
itself (autograd is recording, an input the library cannot take) it raises
_native.Fallback having written nothing, and the general path here splits
the work between the library and the framework's own copy, warning once.
Under torch.compile the calls become the custom ops of _torch_ops.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any, Iterable, List, Optional, Sequence, Tuple

from . import _native
from ._errors import FallbackWarning
from ._frameworks import autograd_recording, framework_of

Array = Any
"""A NumPy array, a PyTorch tensor, a CuPy array or any object with __dlpack__."""

Fallback = _native.Fallback
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


def _no_compiler():
    return False


# Replaced by torch.compiler.is_compiling once the torch custom ops are
# registered (_torch_ops.register): under torch.compile the calls below
# become those ops; in eager mode the check is one cheap call.
compiling = _no_compiler
_torch_ops = None  # the _torch_ops module once registered


def _listed(items, what):
    """items as a list (a generator is consumed once here, so that the
    general path can read it again); one array is refused."""
    if hasattr(items, "__dlpack__") or hasattr(items, "__array_interface__"):
        raise TypeError(f"stridepack: {what} must be a list, not one array")
    try:
        it = iter(items)
    except TypeError:
        raise TypeError(f"stridepack: {what} must be a list of arrays, "
                        f"not {type(items).__name__}") from None
    return list(it)


def workspace_bytes(tensors: Sequence[Array]) -> int:
    """Bytes of workspace that pack(tensors) needs: 0 when every input is
    already dense. Inputs the library cannot take count nothing."""
    return _native.workspace_bytes(tensors)


def pack(tensors: Sequence[Array], workspace: Optional[Array] = None) -> List[Array]:
    """Dense versions of `tensors`, a list of arrays of one framework.

    Each output is the input itself when that is already dense, otherwise a
    dense array over `workspace` holding a copy; all copies are one library
    call (one kernel launch on CUDA, on the framework's current stream; at
    most 64 tensors per call, more fall back to the framework's copy). Give
    a workspace of at least workspace_bytes(tensors) bytes (a contiguous
    array of the same framework and device) to allocate nothing, as CUDA
    graph capture wants; without one, one is allocated. Falls back to the
    framework's per-tensor copy, warning once, while autograd is recording
    or for input the library reports unsupported.
    Raises StridepackError (.status, .message) when the library fails.
    """
    if compiling():
        return _torch_ops.pack(tensors)
    if tensors.__class__ is not list:
        tensors = _listed(tensors, "tensors")
    try:
        return _native.pack(tensors, workspace)
    except Fallback as f:
        return _pack_general(tensors, workspace, f.args)


def _pack_general(xs, workspace, why):
    kind, index, reason = why
    fw = framework_of(xs[0])
    if kind == "autograd" or autograd_recording(xs):
        _warn_once("autograd", "autograd is recording (an input requires grad): pack uses "
                   "per-tensor .contiguous() so that gradients flow")
        return [fw.contiguous(x) for x in xs]
    outs = [None] * len(xs)
    keep = []
    for i, x in enumerate(xs):
        reason_i = _native.readable(x) if len(xs) <= _native.MAX_PAIRS_PER_LAUNCH else reason
        if reason_i is None:
            keep.append(i)
        else:
            _warn_once("unsupported", f"tensors[{i}]: {reason_i}; using the framework's own copy")
            outs[i] = fw.contiguous(x)
    if keep:
        try:
            for i, o in zip(keep, _native.pack([xs[i] for i in keep], workspace)):
                outs[i] = o
        except Fallback as f:  # the library reports unsupported input
            _warn_once("unsupported", f.args[2] + "; using the framework's own copy")
            for i in keep:
                outs[i] = fw.contiguous(xs[i])
    return outs


def pack_into(inputs: Sequence[Array], outputs: Sequence[Array]) -> Sequence[Array]:
    """Copy inputs[i] into outputs[i] (arrays the caller owns: same shape
    and dtype, writable, any strides, overlapping nothing else), all in one
    library call; returns outputs. The form for callers that keep their
    own dense buffers: nothing is allocated and no array is created.
    Fallbacks and errors as copy_batch."""
    if compiling():
        _torch_ops.copy_batch(inputs, outputs)
        return outputs
    if inputs.__class__ is not list:
        inputs = _listed(inputs, "inputs")
    try:
        _native.pack_into(inputs, outputs)
    except Fallback as f:
        _copy_general(list(zip(inputs, outputs)), f.args)
    return outputs


def copy_batch(pairs: Iterable[Tuple[Array, Array]]) -> None:
    """Copy each (src, dst) pair, bits not values, all in one library call
    (one kernel launch per 64 pairs on CUDA, on the current stream of the
    framework of the first CUDA array). Arrays may come from any DLPack
    producer; src and dst of a pair have the same shape and dtype, dst is
    writable and no destination overlaps another or any source. Falls back
    to the framework's per-pair copy (dst's framework), warning once, while
    autograd is recording or for input the library reports unsupported.
    Raises StridepackError (.status, .message) when the library fails.
    """
    if compiling():
        ps = [tuple(p) for p in pairs]
        _torch_ops.copy_batch([s for s, _ in ps], [d for _, d in ps])
        return
    if pairs.__class__ is not list:
        pairs = _listed(pairs, "pairs")
    try:
        _native.copy_batch(pairs)
    except Fallback as f:
        _copy_general([tuple(p) for p in pairs], f.args)


def _copy_general(ps, why):
    kind, index, reason = why
    if kind == "autograd" or autograd_recording([x for p in ps for x in p]):
        _warn_once("autograd", "autograd is recording (a tensor requires grad): copy_batch "
                   "uses per-pair .copy_() so that gradients flow")
        rest, keep = range(len(ps)), []
    else:
        rest, keep = [], []
        for i, (s, d) in enumerate(ps):
            why_s, why_d = _native.readable(s), _native.readable(d)
            if why_s is None and why_d is None:
                keep.append(i)
            else:
                side = "src" if why_s is not None else "dst"
                _warn_once("unsupported", f"pairs[{i}].{side}: {why_s or why_d}; "
                           "using the framework's own copy")
                rest.append(i)
        try:
            _native.copy_batch([ps[i] for i in keep])
        except Fallback as f:
            _warn_once("unsupported", f.args[2] + "; using the framework's own copy")
            rest = range(len(ps))
    for i in rest:  # after the library call: a library error writes nothing
        s, d = ps[i]
        framework_of(d).copy(d, s)
