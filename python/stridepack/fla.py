"""fla's KDA prefill call, served by stridepack: change one import.

    from stridepack.fla import chunk_kda      # instead of: from fla.ops.kda import chunk_kda

``chunk_kda`` takes fla's parameter names, defaults, shapes and return values
for the forward (inference) path and runs ``stridepack.kda_prefill``. What
stridepack does not compute is refused by name with a ``ValueError`` (the
type fla raises for its own invalid options) before anything runs; never a
silently different result. torch tensors only (CPU or CUDA).

Served:
  - the gate computed in the kernel (``use_gate_in_kernel=True``) with
    ``A_log`` and ``dt_bias``: Kimi-Linear's ``-exp(A_log) * softplus(g +
    dt_bias)`` (``lower_bound=None``), or with ``safe_gate=True`` and
    ``lower_bound`` in [-5, 0) the K3 gate ``lower_bound * sigmoid(exp(A_log) *
    (g + dt_bias))`` (``A_log=None``: ``exp(A_log) = 1``); ``dt_bias=None`` is
    zero;
  - beta as logits (``use_beta_sigmoid_in_kernel=True``);
  - q and k l2-normalized in the kernel (``use_qk_l2norm_in_kernel=True``);
  - ``scale`` (default ``K ** -0.5``), ``initial_state`` (fp32 ``[N, H, K, V]``,
    or ``[N, H, V, K]`` with ``state_v_first=True``), ``output_final_state``,
    ``cu_seqlens`` (int64 or int32; then ``B`` must be 1), or ``B`` equal
    sequences without it;
  - ``cu_seqlens_cpu``, ``use_graph``, ``max_num_seqs``, ``disable_recompute``,
    ``chunk_size``: accepted and unused (stridepack's kernels take no
    host-side chunk list and are graph-safe; they compute no backward).

Refused (ValueError naming the option and the value): ``use_gate_in_kernel=False``
(a precomputed log-decay g), ``use_beta_sigmoid_in_kernel=False`` (an activated
beta), ``allow_neg_eigval=True``, ``use_qk_l2norm_in_kernel=False``,
``lower_bound`` without ``safe_gate`` or outside [-5, 0), ``return_intermediate_states=True``,
``cp_context``, head dimensions other than K = V = 128, grouped value heads
(``HV != H``), dtypes other than bf16 for q, k, v, g, beta and fp32 for the
state, inputs that require grad (stridepack computes no gradient), and any
other keyword.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from . import _native
from ._kda import kda_prefill

__all__ = ["chunk_kda"]

HEAD_DIM = 128
_IGNORED = ("cu_seqlens_cpu", "use_graph", "max_num_seqs", "disable_recompute", "chunk_size")


def _refuse(option: str, value: Any, why: str) -> ValueError:
    return ValueError(f"stridepack.fla.chunk_kda: {option}={value!r} is not served: {why}")


def chunk_kda(q, k, v, g, beta, scale: Optional[float] = None, initial_state=None,
              output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
              use_gate_in_kernel: bool = False, use_beta_sigmoid_in_kernel: bool = False,
              allow_neg_eigval: bool = False, safe_gate: bool = False,
              lower_bound: Optional[float] = None, disable_recompute: bool = False,
              return_intermediate_states: bool = False, state_v_first: bool = False,
              cu_seqlens=None, cu_seqlens_cpu=None, cp_context=None, use_graph: bool = False,
              max_num_seqs: Optional[int] = None, **kwargs) -> Tuple[Any, Any]:
    """fla's ``chunk_kda`` forward on stridepack's kernels (see the module's
    docstring for what is served and what is refused).

    q, k: bf16 ``[B, T, H, 128]``; v: bf16 ``[B, T, H, 128]``; g: bf16
    ``[B, T, H, 128]``, the raw gate input; beta: bf16 ``[B, T, H]`` logits;
    ``A_log`` fp32 ``[H]`` and ``dt_bias`` fp32 ``[H * 128]`` as keywords. Any
    strides stridepack's prefill accepts (the K3 column slices are read in
    place). Returns ``(o, final_state)``: o bf16 ``[B, T, H, 128]``, new;
    final_state fp32 ``[N, H, 128, 128]`` in the layout of ``initial_state``
    (``[N, H, K, V]``, or ``[N, H, V, K]`` with ``state_v_first``), new, or
    None without ``output_final_state``. ``initial_state`` is not written."""
    import torch

    A_log, dt_bias = kwargs.pop("A_log", None), kwargs.pop("dt_bias", None)
    if "transpose_state_layout" in kwargs:  # fla's former name of state_v_first
        state_v_first = bool(kwargs.pop("transpose_state_layout")) or state_v_first
    for name in _IGNORED:
        kwargs.pop(name, None)
    if kwargs:
        name = sorted(kwargs)[0]
        raise _refuse(name, kwargs[name], "stridepack does not know this option")
    if not use_gate_in_kernel:
        raise _refuse("use_gate_in_kernel", use_gate_in_kernel,
                      "a precomputed log-decay g is not served yet; pass the raw gate input "
                      "with A_log and dt_bias and use_gate_in_kernel=True")
    if not use_beta_sigmoid_in_kernel:
        raise _refuse("use_beta_sigmoid_in_kernel", use_beta_sigmoid_in_kernel,
                      "beta must be logits (the sigmoid is applied in the kernel)")
    if allow_neg_eigval:
        raise _refuse("allow_neg_eigval", allow_neg_eigval, "beta is sigmoid(beta) in [0, 1)")
    if not use_qk_l2norm_in_kernel:
        raise _refuse("use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel,
                      "stridepack always l2-normalizes q and k in the kernel")
    if return_intermediate_states:
        raise _refuse("return_intermediate_states", True,
                      "stridepack keeps no per-chunk states (checkpoints: stridepack.kda_prefill)")
    if cp_context is not None:
        raise _refuse("cp_context", cp_context, "no context parallelism")
    if lower_bound is not None and not safe_gate:
        raise _refuse("lower_bound", lower_bound, "a lower bound needs safe_gate=True (the gate "
                      "lower_bound * sigmoid(exp(A_log) * (g + dt_bias)))")
    if safe_gate and (lower_bound is None or not -5 <= lower_bound < 0):
        raise _refuse("lower_bound", lower_bound, "safe_gate=True needs a lower_bound in [-5, 0)")
    if A_log is None and lower_bound is None:
        raise ValueError("`A_log` must be provided when `use_gate_in_kernel=True` and "
                         "`lower_bound` is not set.")
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta),
                    ("initial_state", initial_state), ("A_log", A_log), ("dt_bias", dt_bias)):
        if x is not None and x.requires_grad:
            raise _refuse(name, "a tensor that requires grad",
                          "stridepack computes the forward only (inference)")
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g)):
        if x.dim() != 4 or x.shape[-1] != HEAD_DIM:
            raise _refuse(name, list(x.shape), f"[B, T, H, {HEAD_DIM}] only (head dimensions "
                          f"K = V = {HEAD_DIM})")
    B, T, H, _ = q.shape
    if v.shape[2] != H:
        raise _refuse("v", list(v.shape), "grouped value heads (HV != H) are not served")
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        if x.dtype != torch.bfloat16:
            raise _refuse(name, str(x.dtype), "q, k, v, g and beta are bf16")
    dev = q.device
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f"The batch size is expected to be 1 rather than {B} when using "
                             f"`cu_seqlens`.Please flatten variable-length inputs before "
                             f"processing.")
        cu = cu_seqlens.to(device=dev, dtype=torch.int64)
        N = cu.shape[0] - 1
    else:  # B sequences of T tokens, as one varlen batch
        N = B
        cu = torch.arange(0, (B + 1) * T, T, dtype=torch.int64, device=dev)
        q, k, v, g = (x.reshape(1, B * T, H, HEAD_DIM) for x in (q, k, v, g))
        beta = beta.reshape(1, B * T, H)
    # q, k, v, g are read where they lie when their rows allow it (the K3
    # column slices do); others are made dense first.
    q, k, v, g = (x if _native.kda_reads_in_place(x) else x.contiguous() for x in (q, k, v, g))
    if initial_state is not None:
        if initial_state.dtype != torch.float32:
            raise _refuse("initial_state", str(initial_state.dtype), "initial_state must be in "
                          "float32")
        if initial_state.shape[0] != N:
            raise ValueError(f"The number of initial states is expected to be equal to the number "
                             f"of input sequences, i.e., {N} rather than "
                             f"{initial_state.shape[0]}.")
        # stridepack's pool is V-first, [slot, H, V, K]: a copy either way,
        # since the call writes the final state where it read the initial one.
        pool = (initial_state if state_v_first else initial_state.transpose(-1, -2)).contiguous()
        if pool.data_ptr() == initial_state.data_ptr():
            pool = pool.clone()
    else:
        pool = torch.zeros(N, H, HEAD_DIM, HEAD_DIM, dtype=torch.float32, device=dev)
    if A_log is None:  # lower_bound * sigmoid(g + dt_bias): exp(A_log) = 1
        A_log = torch.zeros(H, dtype=torch.float32, device=dev)
    if dt_bias is None:
        dt_bias = torch.zeros(H * HEAD_DIM, dtype=torch.float32, device=dev)
    o = torch.empty(1, q.shape[1], H, HEAD_DIM, dtype=torch.bfloat16, device=dev)
    kda_prefill(q, k, v, g, beta, A_log.float(), dt_bias.float().reshape(-1), cu, pool,
                torch.arange(N, dtype=torch.int32, device=dev), o,
                gate="softplus" if lower_bound is None else "lower_bound",
                lower_bound=-5.0 if lower_bound is None else float(lower_bound),
                scale=float(HEAD_DIM ** -0.5 if scale is None else scale))
    o = o.reshape(B, T, H, HEAD_DIM)
    if not output_final_state:
        return o, None
    return o, (pool if state_v_first else pool.transpose(-1, -2).contiguous())
