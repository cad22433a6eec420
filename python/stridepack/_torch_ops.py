"""stridepack as torch custom ops, for code that torch.compile traces:

    stridepack::copy_batch(Tensor[] srcs, Tensor(a!)[] dsts) -> ()
        copies srcs[i] into dsts[i] (mutates dsts): pack_into and copy_batch
    stridepack::pack(Tensor[] xs) -> Tensor[]
        new dense copies of xs (functional): pack of the non-dense inputs

    stridepack::kda_prefill(q, k, v, g, beta, A_log, dt_bias, cu_seqlens,
        Tensor(a!) state, state_indices?, Tensor(b!) o, checkpoint_cu_starts?,
        Tensor(c!)? checkpoints, has_initial_state?, num_accepted_tokens?,
        Tensor(d!)? workspace, int gate, float lower_bound,
        float scale, int checkpoint_interval, int kernel, bool reference) -> ()
        kda_prefill (mutates state, o, checkpoints and the workspace)
    stridepack::kda_boundary_run(int max_heads, <kda_prefill's arguments but
        reference>) -> ()
        KdaBoundary.run: q, k, v, g, beta any views, packed in one launch,
        then the prefill. Under compile it does not use the boundary's own
        workspaces: the pack allocates its copies (as stridepack::pack), and
        where the boundary owns a two-pass workspace (CUDA, max_heads <= 32:
        sp_kda_boundary_create) one of the size the call needs is allocated,
        so that "auto" picks the kernel the eager call picks. A CUDA graph
        that torch.compile records (mode="reduce-overhead") replays these
        at addresses of its own pool, which the boundary's fixed-address
        rules (warm-up and capture on the same views) would refuse.

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
from typing import List, Optional

from . import _api

_torch = None  # the torch module once the ops are registered
_copy_op = _pack_op = _prefill_op = _boundary_op = None


def _copy_eager(srcs, dsts):
    try:
        _api._native.pack_into(srcs, dsts)
    except _api.Fallback as f:
        _api._copy_general(list(zip(srcs, dsts)), f.args)


def register() -> bool:
    """Register the ops once torch is imported; True when they are there."""
    global _torch, _copy_op, _pack_op, _prefill_op, _boundary_op
    if _torch is not None:
        return True
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch.library, "custom_op"):
        return False
    Tensor = torch.Tensor
    from . import _kda

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

    written = ("state", "o", "checkpoints", "workspace")

    @torch.library.custom_op("stridepack::kda_prefill", mutates_args=written)
    def kda_prefill(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, A_log: Tensor,
                    dt_bias: Tensor, cu_seqlens: Tensor, state: Tensor,
                    state_indices: Optional[Tensor], o: Tensor,
                    checkpoint_cu_starts: Optional[Tensor], checkpoints: Optional[Tensor],
                    has_initial_state: Optional[Tensor], num_accepted_tokens: Optional[Tensor],
                    workspace: Optional[Tensor], gate: int, lower_bound: float, scale: float,
                    checkpoint_interval: int, kernel: int, reference: bool) -> None:
        _kda._run_prefill_arrays(
            (q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, state_indices, o,
             checkpoint_cu_starts, checkpoints, has_initial_state, num_accepted_tokens,
             workspace),
            gate, lower_bound, scale, checkpoint_interval, kernel, reference)

    @kda_prefill.register_fake
    def _(*args, **kwargs):
        return None

    @torch.library.custom_op("stridepack::kda_boundary_run", mutates_args=written)
    def kda_boundary_run(max_heads: int, q: Tensor, k: Tensor, v: Tensor, g: Tensor,
                         beta: Tensor, A_log: Tensor, dt_bias: Tensor, cu_seqlens: Tensor,
                         state: Tensor, state_indices: Optional[Tensor], o: Tensor,
                         checkpoint_cu_starts: Optional[Tensor], checkpoints: Optional[Tensor],
                         has_initial_state: Optional[Tensor],
                         num_accepted_tokens: Optional[Tensor],
                         workspace: Optional[Tensor], gate: int, lower_bound: float,
                         scale: float, checkpoint_interval: int, kernel: int) -> None:
        xs = [q, k, v, g, beta]
        # As the boundary: copy only what the prefill cannot read in place
        # (beta it always reads).
        todo = [i for i in range(4) if not _kda._native.kda_reads_in_place(xs[i])]
        dense = list(xs)
        if todo:
            outs = [torch.empty(xs[i].shape, dtype=xs[i].dtype, device=xs[i].device)
                    for i in todo]
            _copy_eager([xs[i] for i in todo], outs)
            for i, d in zip(todo, outs):
                dense[i] = d
        arrays = (*dense, A_log, dt_bias, cu_seqlens, state, state_indices, o,
                  checkpoint_cu_starts, checkpoints, has_initial_state, num_accepted_tokens)
        if workspace is None and q.is_cuda and 0 < max_heads <= 32:
            need = _kda._native.kda_workspace_bytes(arrays, gate, lower_bound, scale,
                                                    checkpoint_interval)
            if need > 0:
                workspace = torch.empty(need, dtype=torch.uint8, device=q.device)
        _kda._run_prefill_arrays((*arrays, workspace), gate, lower_bound, scale,
                                 checkpoint_interval, kernel, False)

    @kda_boundary_run.register_fake
    def _(*args, **kwargs):
        return None

    _torch = torch
    _prefill_op = torch.ops.stridepack.kda_prefill.default
    _boundary_op = torch.ops.stridepack.kda_boundary_run.default
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


def kda_prefill(arrays, gate, lower_bound, scale, interval, kernel, reference):
    """The traced form of stridepack.kda_prefill (arrays: its 15 arrays and
    the workspace)."""
    _prefill_op(*arrays, int(gate), float(lower_bound), float(scale), int(interval), int(kernel),
                bool(reference))


def kda_boundary_run(max_heads, arrays, gate, lower_bound, scale, interval, kernel):
    """The traced form of KdaBoundary.run."""
    _boundary_op(int(max_heads), *arrays, int(gate), float(lower_bound), float(scale),
                 int(interval), int(kernel))
