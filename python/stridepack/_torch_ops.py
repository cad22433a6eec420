"""stridepack as torch custom ops, for code that torch.compile traces:

    stridepack::copy_batch(Tensor[] srcs, Tensor(a!)[] dsts) -> ()
        copies srcs[i] into dsts[i] (mutates dsts): pack_into and copy_batch
    stridepack::pack(Tensor[] xs) -> Tensor[]
        new dense copies of xs (functional): pack of the non-dense inputs

Each has a fake (meta) implementation, so a function that packs compiles
with fullgraph=True. Only the traced call goes through them: stridepack.pack
and friends check torch.compiler.is_compiling() and otherwise call the
extension directly, without the dispatcher. Under compile, pack allocates its
outputs (the compiler owns memory; a workspace argument is not used), an
input that is already dense is returned as itself, and while autograd
records, .contiguous() is used as in eager mode.

Needs torch.library.custom_op (torch >= 2.4); register() says whether the
ops are there.
"""

import sys
from typing import List

from . import _api

_torch = None  # the torch module once the ops are registered
_copy_op = _pack_op = None


def _copy_eager(srcs, dsts):
    try:
        _api._native.pack_into(srcs, dsts)
    except _api.Fallback as f:
        _api._copy_general(list(zip(srcs, dsts)), f.args)


def register() -> bool:
    """Register the ops once torch is imported; True when they are there."""
    global _torch, _copy_op, _pack_op
    if _torch is not None:
        return True
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch.library, "custom_op"):
        return False
    Tensor = torch.Tensor

    @torch.library.custom_op("stridepack::copy_batch", mutates_args=("dsts",))
    def copy_batch(srcs: List[Tensor], dsts: List[Tensor]) -> None:
        _copy_eager(srcs, dsts)

    @copy_batch.register_fake
    def _(srcs, dsts):
        return None

    @torch.library.custom_op("stridepack::pack", mutates_args=())
    def pack(xs: List[Tensor]) -> List[Tensor]:
        outs = [torch.empty(x.shape, dtype=x.dtype, device=x.device) for x in xs]
        _copy_eager(xs, outs)
        return outs

    @pack.register_fake
    def _(xs):
        return [x.new_empty(x.shape) for x in xs]

    _torch = torch
    _copy_op = torch.ops.stridepack.copy_batch.default
    _pack_op = torch.ops.stridepack.pack.default
    _api._torch_ops = sys.modules[__name__]
    _api.compiling = torch.compiler.is_compiling
    return True


def copy_batch(srcs, dsts):
    """The traced form of pack_into and copy_batch."""
    _copy_op(list(srcs), list(dsts))


def pack(tensors):
    """The traced form of stridepack.pack."""
    xs = list(tensors)
    if _torch.is_grad_enabled() and any([x.requires_grad for x in xs]):
        return [x.contiguous() for x in xs]
    todo = [i for i, x in enumerate(xs) if not x.is_contiguous()]
    outs = list(xs)
    if todo:
        for i, o in zip(todo, _pack_op([xs[i] for i in todo])):
            outs[i] = o
    return outs
