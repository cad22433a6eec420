"""stridepack as torch custom ops, for code that torch.compile traces:

    stridepack::copy_batch(Tensor[] srcs, Tensor(a!)[] dsts) -> ()
        copies srcs[i] into dsts[i] (mutates dsts): pack_into and copy_batch
    stridepack::pack(Tensor[] xs) -> Tensor[]
        new dense copies of xs (functional): pack of the non-dense inputs

    stridepack::kda_prefill(q, k, v, g, beta, A_log, dt_bias, cu_seqlens,
        Tensor(a!) state, state_indices?, Tensor(b!) o, checkpoint_cu_starts?,
        Tensor(c!)? checkpoints, has_initial_state?, num_accepted_tokens?,
        Tensor(d!)? workspace, int gate, float lower_bound,
        float scale, int checkpoint_interval, int kernel, bool reference,
        int beta_form) -> ()
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

    stridepack::causal_conv1d(x, weight, bias?, cu_seqlens?, Tensor(a!) state,
        state_indices, has_initial_state?, Tensor(b!)? out, Tensor(c!)? q,
        Tensor(d!)? k, Tensor(e!)? v, bool silu, bool decode, bool reference)
        -> ()
        causal_conv1d and causal_conv1d_update (and so stridepack.vllm's)
    stridepack::fla_chunk_kda(<stridepack.fla.chunk_kda's tensors and
        options>) -> Tensor[] (o, the final state or an empty tensor)
    stridepack::fla_fused_recurrent_kda_fwd(<its tensors and options>,
        Tensor(a!)? initial_state, Tensor(b!)? out) -> Tensor[]
        the drop-ins of stridepack.fla: fla.py returns out and the pool
        written in place itself (an op's outputs alias none of its inputs)

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
                    checkpoint_interval: int, kernel: int, reference: bool,
                    beta_form: int) -> None:
        _kda._run_prefill_arrays(
            (q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, state_indices, o,
             checkpoint_cu_starts, checkpoints, has_initial_state, num_accepted_tokens,
             workspace),
            gate, lower_bound, scale, checkpoint_interval, kernel, reference, beta_form)

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
                         scale: float, checkpoint_interval: int, kernel: int,
                         beta_form: int) -> None:
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
                                 checkpoint_interval, kernel, False, beta_form)

    @kda_boundary_run.register_fake
    def _(*args, **kwargs):
        return None

    from . import _native

    @torch.library.custom_op("stridepack::causal_conv1d",
                             mutates_args=("state", "out", "q", "k", "v"))
    def causal_conv1d(x: Tensor, weight: Tensor, bias: Optional[Tensor],
                      cu_seqlens: Optional[Tensor], state: Tensor, state_indices: Tensor,
                      has_initial_state: Optional[Tensor], out: Optional[Tensor],
                      q: Optional[Tensor], k: Optional[Tensor], v: Optional[Tensor], silu: bool,
                      decode: bool, reference: bool) -> None:
        _native.conv((x, weight, bias, cu_seqlens, state, state_indices, has_initial_state, out,
                      q, k, v), silu, decode, reference)

    @causal_conv1d.register_fake
    def _(*args, **kwargs):
        return None

    from . import fla as _fla

    @torch.library.custom_op("stridepack::fla_chunk_kda", mutates_args=())
    def fla_chunk_kda(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor,
                      A_log: Optional[Tensor], dt_bias: Optional[Tensor],
                      initial_state: Optional[Tensor], scale: Optional[float],
                      output_final_state: bool, use_qk_l2norm_in_kernel: bool,
                      use_gate_in_kernel: bool, use_beta_sigmoid_in_kernel: bool,
                      allow_neg_eigval: bool, safe_gate: bool, lower_bound: Optional[float],
                      state_v_first: bool, cu_seqlens: Optional[Tensor]) -> List[Tensor]:
        o, s = _fla.chunk_kda(
            q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
            use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate,
            lower_bound, state_v_first=state_v_first, cu_seqlens=cu_seqlens, A_log=A_log,
            dt_bias=dt_bias)
        return [o, s if s is not None else o.new_empty(0, dtype=torch.float32)]

    @fla_chunk_kda.register_fake
    def _(q, k, v, g, beta, A_log, dt_bias, initial_state, scale, output_final_state, *rest):
        cu_seqlens = rest[-1]
        n = q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
        o = v.new_empty(v.shape, dtype=torch.bfloat16)
        s = (v.new_empty(n, q.shape[2], q.shape[3], v.shape[3], dtype=torch.float32)
             if output_final_state else v.new_empty(0, dtype=torch.float32))
        return [o, s]

    # A mutating op returns nothing (functionalization takes no outputs that
    # may alias an input): o and the new final states are the caller's
    # tensors (fla.py allocates them outside the op), written here.
    @torch.library.custom_op("stridepack::fla_fused_recurrent_kda_fwd",
                             mutates_args=("initial_state", "out", "final"))
    def fla_fused_recurrent_kda_fwd(
            q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, A_log: Optional[Tensor],
            dt_bias: Optional[Tensor], initial_state: Optional[Tensor], scale: Optional[float],
            inplace_final_state: bool, state_v_first: bool, cu_seqlens: Optional[Tensor],
            ssm_state_indices: Optional[Tensor], num_accepted_tokens: Optional[Tensor],
            use_qk_l2norm_in_kernel: bool, use_gate_in_kernel: bool,
            use_beta_sigmoid_in_kernel: bool, allow_neg_eigval: bool,
            lower_bound: Optional[float], out: Tensor, final: Optional[Tensor]) -> None:
        _, s = _fla.fused_recurrent_kda_fwd(
            q, k, v, g, beta, A_log, dt_bias, initial_state, scale, final is not None,
            inplace_final_state, state_v_first, cu_seqlens, ssm_state_indices,
            num_accepted_tokens, use_qk_l2norm_in_kernel, use_gate_in_kernel,
            use_beta_sigmoid_in_kernel, allow_neg_eigval, lower_bound, out)
        if final is not None:
            final.copy_(s)

    @fla_fused_recurrent_kda_fwd.register_fake
    def _(*args):
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


def kda_prefill(arrays, gate, lower_bound, scale, interval, kernel, reference, beta_form=0):
    """The traced form of stridepack.kda_prefill (arrays: its 15 arrays and
    the workspace)."""
    _prefill_op(*arrays, int(gate), float(lower_bound), float(scale), int(interval), int(kernel),
                bool(reference), int(beta_form))


def fla_chunk_kda_op(*args):
    """The traced form of stridepack.fla.chunk_kda: [o, final state or empty]."""
    return _torch.ops.stridepack.fla_chunk_kda.default(*args)


def fla_fused_recurrent_kda_fwd_op(*args):
    """The traced form of stridepack.fla.fused_recurrent_kda_fwd: writes out,
    the pool (in place) or final (new states), returns None."""
    return _torch.ops.stridepack.fla_fused_recurrent_kda_fwd.default(*args)


def causal_conv1d(arrays, silu, decode, reference):
    """The traced form of stridepack.causal_conv1d and causal_conv1d_update
    (arrays: their 11 arrays, None where absent)."""
    _torch.ops.stridepack.causal_conv1d.default(*arrays, bool(silu), bool(decode),
                                                bool(reference))


def kda_boundary_run(max_heads, arrays, gate, lower_bound, scale, interval, kernel,
                     beta_form=0):
    """The traced form of KdaBoundary.run."""
    _boundary_op(int(max_heads), *arrays, int(gate), float(lower_bound), float(scale),
                 int(interval), int(kernel), int(beta_form))
