"""fla's KDA calls, served by stridepack: change one import.

    from stridepack.fla import chunk_kda, fused_recurrent_kda_fwd
    # instead of: from fla.ops.kda import chunk_kda, fused_recurrent_kda_fwd

``chunk_kda`` (prefill), ``fused_recurrent_kda`` and ``fused_recurrent_kda_fwd``
(decode on a state pool by ``ssm_state_indices``) take fla's parameter names,
defaults, shapes and return values for the forward (inference) path and run
``stridepack.kda_prefill``. What
stridepack does not compute is refused by name with a ``ValueError`` (the
type fla raises for its own invalid options) before anything runs; never a
silently different result. torch tensors only (CPU or CUDA).

Served:
  - a precomputed log-decay g (``use_gate_in_kernel=False``, bf16 or fp32, every
    value <= 0), an activated beta (``use_beta_sigmoid_in_kernel=False``) and
    ``allow_neg_eigval=True``; beta bf16 or fp32 (on CUDA the chunked kernels'
    every-gate builds serve them, as the K3 builds serve K3's forms);
  - the gate computed in the kernel (``use_gate_in_kernel=True``) with
    ``A_log`` and ``dt_bias``: Kimi-Linear's ``-exp(A_log) * softplus(g +
    dt_bias)`` (``lower_bound=None``; in the recurrent calls ``A_log=None``
    is fla's ``A = 1``, ``-e * softplus(g + dt_bias)``), or with ``lower_bound``
    in [-5, 0) (``safe_gate`` or not: it only picks fla's kernel) the K3 gate
    ``lower_bound * sigmoid(exp(A_log) * (g + dt_bias))`` (``A_log=None``:
    ``exp(A_log) = 1``); ``dt_bias=None`` is zero;
  - beta as logits (``use_beta_sigmoid_in_kernel=True``);
  - q and k l2-normalized in the kernel (``use_qk_l2norm_in_kernel=True``);
  - ``scale`` (default ``K ** -0.5``), ``initial_state`` (fp32 ``[N, H, K, V]``,
    or ``[N, H, V, K]`` with ``state_v_first=True``), ``output_final_state``,
    ``cu_seqlens`` (int64 or int32; then ``B`` must be 1), or ``B`` equal
    sequences without it;
  - decode on a pool by ``ssm_state_indices`` (int32 or int64 ``[N]``, -1 a
    padded sequence) and speculative verify: a 2-D ``ssm_state_indices
    [N, k + 1]`` with ``num_accepted_tokens`` (``fused_recurrent_kda_fwd``);
  - ``cu_seqlens_cpu``, ``use_graph``, ``max_num_seqs``, ``disable_recompute``,
    ``chunk_size`` (32 or 64, as fla checks): accepted and unused
    (stridepack's kernels take no host-side chunk list and are graph-safe;
    they compute no backward); ``transpose_state_layout``, fla's former name
    of ``state_v_first``, taken as fla takes it (a DeprecationWarning).

Where stridepack differs from fla on purpose: a negative entry of
``ssm_state_indices`` marks a padded sequence, skipped, nothing read or written
for it (fla's kernel reads and writes at the negative slot); with a 1-D
``ssm_state_indices`` a sequence of several tokens writes its final state to
its slot (fla's kernel writes the state after token t to entry ``n + t``,
another sequence's slot); ``chunk_kda`` refuses an ``initial_state`` whose
count is not the number of sequences, with or without ``cu_seqlens`` (fla
checks it only with ``cu_seqlens``).

Refused (ValueError naming the option and the value):
``use_qk_l2norm_in_kernel=False``, ``lower_bound`` outside [-5, 0),
``return_intermediate_states=True``, ``num_accepted_tokens`` without a 2-D
``ssm_state_indices``, a 2-D one without ``inplace_final_state``,
``cp_context``, head dimensions other than K = V = 128, grouped value heads
(``HV != H``), a beta per channel (``[B, T, H, V]``), ``scale=0``, dtypes
other than bf16 for q, k, v (g and beta: bf16, or fp32 where they are a
precomputed log-decay and an activated beta; not an fp32 raw gate), a state
other than fp32 (``chunk_kda``) or fp32 and bf16 (the recurrent calls), inputs
that require grad (stridepack computes no gradient), and any other keyword
(in ``fused_recurrent_kda``, which has no pool, the pool's options of
``fused_recurrent_kda_fwd`` too: fla's call would drop them). Shapes that do
not agree (k with q, g and beta with v) raise an error that is both a
ValueError and an AssertionError (fla's checks are assertions).
"""

from __future__ import annotations

import warnings
from typing import Any, Optional, Tuple

from . import _api, _native
from ._errors import StridepackError
from ._kda import BETAS, GATES, KERNELS

__all__ = ["chunk_kda", "fused_recurrent_kda", "fused_recurrent_kda_fwd"]

HEAD_DIM = 128
_IGNORED = ("cu_seqlens_cpu", "use_graph", "max_num_seqs", "disable_recompute", "chunk_size")

# What every call would otherwise look up again (the drop-in's host time is
# the point of its fast paths): the library's codes for the gates, the beta
# forms and the automatic kernel choice, and fla's default scale.
_LOG_DECAY, _SOFTPLUS, _LOWER_BOUND = GATES["log_decay"], GATES["softplus"], GATES["lower_bound"]
_ACTIVATED, _LOGITS, _LOGITS_X2 = BETAS["activated"], BETAS["logits"], BETAS["logits_x2"]
_KERNEL_AUTO = KERNELS["auto"]
_DEFAULT_SCALE = HEAD_DIM ** -0.5


def _refuse(call: str, option: str, value: Any, why: str) -> ValueError:
    return ValueError(f"stridepack.fla.{call}: {option}={value!r} is not served: {why}")


class ShapeError(ValueError, AssertionError):
    """Shapes that do not agree: a ValueError, and the AssertionError fla's
    own checks raise for them."""


def _state_v_first(state_v_first, kwargs):
    """fla's handling of transpose_state_layout, the former name of
    state_v_first (taken out of kwargs)."""
    if "transpose_state_layout" not in kwargs:
        return state_v_first
    if state_v_first:
        raise ValueError("Cannot pass both `state_v_first` and the deprecated "
                         "`transpose_state_layout`.")
    warnings.warn("`transpose_state_layout` is deprecated and renamed to `state_v_first`.",
                  DeprecationWarning, stacklevel=3)
    return bool(kwargs.pop("transpose_state_layout"))


def _index_array(x, dev):
    """An index array as the library takes it: int32 or int64 as it is (else
    int64), on `dev`, dense; x itself when it is already so."""
    import torch
    if x.device != dev or x.dtype not in (torch.int32, torch.int64):
        x = x.to(device=dev, dtype=x.dtype if x.dtype in (torch.int32, torch.int64)
                 else torch.int64)
    return x if x.is_contiguous() else x.contiguous()


def _refuse_unknown(call, kwargs):
    """Refuse a keyword fla's call would not take (the ones _IGNORED aside)."""
    unknown = sorted(name for name in kwargs if name not in _IGNORED)
    if unknown:
        raise _refuse(call, unknown[0], kwargs[unknown[0]], "stridepack does not know this option")


def _forms(use_gate_in_kernel, lower_bound, use_beta_sigmoid_in_kernel, allow_neg_eigval):
    """The library's gate, lower bound and beta form (codes, as kda_prefill
    passes them) for fla's flags; the bound is read only with the gate
    computed in the kernel."""
    if not use_gate_in_kernel:
        gate, bound = _LOG_DECAY, -5.0
    elif lower_bound is None:
        gate, bound = _SOFTPLUS, -5.0
    else:
        gate, bound = _LOWER_BOUND, float(lower_bound)
    beta_form = (_ACTIVATED if not use_beta_sigmoid_in_kernel else
                 _LOGITS_X2 if allow_neg_eigval else _LOGITS)
    return gate, bound, beta_form


def _scale(scale):
    """The scale as the library takes it (fla's default K ** -0.5 for None;
    0, which the library would read as its default, is refused before)."""
    return _DEFAULT_SCALE if scale is None else float(scale)


def _pool(state, state_v_first):
    """A pool in fla's layout as the library takes it: itself (V-first,
    [slots, H, V, K]) or its transpose (fla's default K-first [slots, H, K,
    V]), a view the library reads and writes where the states lie."""
    return state if state_v_first else state.transpose(-1, -2)


def _codes(forms, scale):
    """The library call's codes: the gate, bound and beta codes (_forms) and
    the scale as the library takes it (_scale)."""
    return (*forms, _scale(scale))


def _library(arrays, codes):
    """The library's prefill, eager, on kda_prefill's 15 arrays (q, k, v, g,
    beta, A_log, dt_bias, cu_seqlens, pool, indices, o, the checkpoints' two
    and has_initial_state unset, num_accepted_tokens) with codes (_codes)."""
    _native.kda_prefill(arrays, codes[0], codes[1], codes[3], 0, _KERNEL_AUTO, None, codes[2])


def _prefill(x, beta, A_log, dt_bias, cu, pool, idx, o, forms, scale, acc=None):
    """kda_prefill's eager call, the gate and beta codes already looked up
    (forms, from _forms): q, k, v, g = x on the pool (_pool) by idx (slots
    [N], or a verify table with acc, num_accepted_tokens) into o. Where the
    library does not read an input's rows where they lie it refuses the
    call, nothing written; those inputs are then made dense and the call
    made again. Any other refusal is raised (StridepackError)."""
    codes = _codes(forms, scale)
    try:
        _library((*x, beta, A_log, dt_bias, cu, pool, idx, o, None, None, None, acc), codes)
    except StridepackError as e:
        if "not read in place" not in e.message:
            raise
        x = tuple(t if t.is_contiguous() else t.contiguous() for t in x)
        _library((*x, beta, A_log, dt_bias, cu, pool, idx, o, None, None, None, acc), codes)


# Slot n for sequence n, int32 [N], by device and N: see _slots.
_SLOTS = {}


def _slots(n, dev):
    """torch.arange(n, dtype=int32) on dev, the slot indices of a pool of
    the call's own. One tensor per device and n, kept: the library only
    reads state_indices, and a call saves the launch that would fill a new
    one. A CUDA one is waited for once, when made, so that a call on any
    stream may read it; one made while the stream is being captured into a
    CUDA graph is not kept (its contents would be written only when the
    graph replays)."""
    t = _SLOTS.get((dev, n))
    if t is None:
        import torch
        t = torch.arange(n, dtype=torch.int32, device=dev)
        if dev.type == "cuda":
            if torch.cuda.is_current_stream_capturing():
                return t
            torch.cuda.current_stream(dev).synchronize()
        _SLOTS[(dev, n)] = t
    return t


class _Call:
    """One drop-in call's inputs, checked and laid out for kda_prefill: q, k,
    v, g, beta as one varlen batch ([1, B T, H, 128] without cu_seqlens),
    cu_seqlens int64, the gate and its parameters."""

    def __init__(self, call, a, kwargs, recurrent):
        """a: the call's arguments by fla's names (q .. beta, A_log, dt_bias,
        cu_seqlens, initial_state, the use_* flags, allow_neg_eigval,
        lower_bound and, for chunk_kda, safe_gate). recurrent: fla's recurrent
        calls, which take a missing A_log as A = 1 where chunk_kda refuses it."""
        import torch
        self.call = call
        q, k, v, g, beta = a["q"], a["k"], a["v"], a["g"], a["beta"]
        A_log, dt_bias, cu_seqlens = a["A_log"], a["dt_bias"], a["cu_seqlens"]
        lower_bound, safe_gate = a["lower_bound"], a.get("safe_gate", False)
        use_gate_in_kernel = a["use_gate_in_kernel"]
        use_beta_sigmoid_in_kernel = a["use_beta_sigmoid_in_kernel"]
        use_qk_l2norm_in_kernel = a["use_qk_l2norm_in_kernel"]
        allow_neg_eigval = a["allow_neg_eigval"]
        _refuse_unknown(call, kwargs)
        if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
            raise ValueError("`allow_neg_eigval=True` requires `use_beta_sigmoid_in_kernel=True`.")
        self.forms = _forms(use_gate_in_kernel, lower_bound, use_beta_sigmoid_in_kernel,
                            allow_neg_eigval)
        if not use_qk_l2norm_in_kernel:
            raise self.refuse("use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel,
                              "stridepack always l2-normalizes q and k in the kernel")
        if not use_gate_in_kernel:  # fla reads the bound only with the gate in the kernel
            lower_bound = safe_gate = None
        if safe_gate and lower_bound is None:
            raise ValueError("`lower_bound` must be specified when `safe_gate=True` and "
                             "`use_gate_in_kernel=True`.")
        # safe_gate only picks fla's kernel: the bound is the gate's either way.
        if lower_bound is not None and not -5 <= lower_bound < 0:
            raise self.refuse("lower_bound", lower_bound, "the lower bound must be in [-5, 0) "
                              "(the gate lower_bound * sigmoid(exp(A_log) * (g + dt_bias)))")
        if use_gate_in_kernel and A_log is None and lower_bound is None and not recurrent:
            raise ValueError("`A_log` must be provided when `use_gate_in_kernel=True` and "
                             "`lower_bound` is not set.")
        for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("A_log", A_log),
                        ("dt_bias", dt_bias), ("initial_state", a["initial_state"])):
            if x is not None and x.requires_grad:
                raise self.refuse(name, "a tensor that requires grad",
                                  "stridepack computes the forward only (inference)")
        for name, x in (("q", q), ("k", k), ("v", v), ("g", g)):
            if x.dim() != 4 or x.shape[-1] != HEAD_DIM:
                raise self.refuse(name, list(x.shape), f"[B, T, H, {HEAD_DIM}] only (head "
                                  f"dimensions K = V = {HEAD_DIM})")
        B, T, H, _ = q.shape
        if k.shape != q.shape:
            raise ShapeError(f"q and k must have the same shape, got q={q.shape} vs k={k.shape}")
        if v.shape[2] != H:
            raise self.refuse("v", list(v.shape), "grouped value heads (HV != H) are not served")
        if v.shape[:2] != q.shape[:2]:
            raise ShapeError(f"v must have shape [B, T, HV, V]={[B, T, H, HEAD_DIM]}, got "
                             f"{list(v.shape)}")
        if g.shape != q.shape:
            raise ShapeError(f"g must have shape [B, T, HV, K]={[B, T, H, HEAD_DIM]}, got "
                             f"{list(g.shape)}")
        if beta.dim() == 4:
            raise self.refuse("beta", list(beta.shape), "beta is one scalar a (token, head): "
                              "[B, T, H]; a beta per channel is not served")
        if tuple(beta.shape) != (B, T, H):
            raise ShapeError(f"beta must have shape [B, T, HV]={[B, T, H]}, got "
                             f"{list(beta.shape)}")
        for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
            if x.dtype != torch.bfloat16 and not (((name == "g" and self.forms[0] == _LOG_DECAY)
                                                   or name == "beta")
                                                  and x.dtype == torch.float32):
                raise self.refuse(name, str(x.dtype), "q, k, v, g and beta are bf16 (a "
                                  "precomputed log-decay g, and beta, bf16 or fp32)")
        dev = q.device
        if cu_seqlens is not None:
            if B != 1:
                raise ValueError(f"The batch size is expected to be 1 rather than {B} when "
                                 f"using `cu_seqlens`.Please flatten variable-length inputs "
                                 f"before processing.")
            # int64 (fla) or int32 (vLLM's query_start_loc): either is read as it is.
            self.cu = _index_array(cu_seqlens, dev)
            self.N = self.cu.shape[0] - 1
        else:  # B sequences of T tokens, as one varlen batch
            self.N = B
            self.cu = (torch.arange(0, (B + 1) * T, T, dtype=torch.int64, device=dev) if T
                       else torch.zeros(B + 1, dtype=torch.int64, device=dev))
            if B != 1:
                q, k, v, g = (x.reshape(1, B * T, H, HEAD_DIM) for x in (q, k, v, g))
                beta = beta.reshape(1, B * T, H)
        # q, k, v, g go as they are: the prefill reads them where they lie when
        # their rows allow it (the K3 column slices do); run() makes the others
        # dense when the prefill says so.
        self.q, self.k, self.v, self.g = q, k, v, g
        self.beta, self.B, self.T, self.H, self.dev = beta, B, T, H, dev
        if A_log is None:  # fla's A = 1: exp(A_log) = 1 in the bound's gate, e in softplus's
            A_log = (torch.zeros if lower_bound is not None else torch.ones)(
                H, dtype=torch.float32, device=dev)
        if dt_bias is None:
            dt_bias = torch.zeros(H * HEAD_DIM, dtype=torch.float32, device=dev)
        if A_log.dtype != torch.float32:
            A_log = A_log.float()
        if dt_bias.dtype != torch.float32:
            dt_bias = dt_bias.float()
        self.A_log = A_log
        self.dt_bias = dt_bias if dt_bias.dim() == 1 else dt_bias.reshape(-1)

    def refuse(self, option, value, why):
        return _refuse(self.call, option, value, why)

    def run(self, pool, state_indices, o, scale, num_accepted_tokens=None):
        """kda_prefill on the pool [slots, H, 128, 128] (_pool) by
        state_indices (int32 or int64 [N], or a verify table [N, W] with
        num_accepted_tokens) into o [1, B T, H, 128]."""
        if scale is not None and scale == 0:  # the library's 0 means its default
            raise self.refuse("scale", scale, "a scale of 0 (o would be 0) is not served")
        _prefill((self.q, self.k, self.v, self.g), self.beta, self.A_log, self.dt_bias, self.cu,
                 pool, state_indices, o, self.forms, scale, num_accepted_tokens)


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

    q, k, v: bf16 ``[B, T, H, 128]``. g ``[B, T, H, 128]``: with
    ``use_gate_in_kernel=False`` (fla's default) the log-decay itself, bf16 or
    fp32, every value <= 0; with ``use_gate_in_kernel=True`` the raw gate
    input (bf16), the gate computed from it with ``A_log`` (``[H]``) and
    ``dt_bias`` (``[H * 128]``), passed as keywords, and ``lower_bound`` (see
    the module's docstring). beta ``[B, T, H]``, bf16 or fp32: activated with
    ``use_beta_sigmoid_in_kernel=False`` (fla's default), logits with True (2
    sigmoid with ``allow_neg_eigval``). ``use_qk_l2norm_in_kernel=True`` is
    required (stridepack normalizes q and k in the kernel). ``scale``:
    default ``128 ** -0.5``. ``cu_seqlens``: int64 or int32 ``[N + 1]``, B
    must then be 1; without it, B sequences of T tokens. Any strides
    stridepack's prefill accepts (the K3 column slices are read in place;
    others are copied dense first). Returns ``(o, final_state)``: o bf16
    ``[B, T, H, 128]``, new;
    final_state fp32 ``[N, H, 128, 128]`` in the layout of ``initial_state``
    (``[N, H, K, V]``, or ``[N, H, V, K]`` with ``state_v_first``), new, or
    None without ``output_final_state``. ``initial_state`` is not written.
    Under torch.compile this is the custom op stridepack::fla_chunk_kda."""
    A_log, dt_bias = kwargs.pop("A_log", None), kwargs.pop("dt_bias", None)
    if (not kwargs and cu_seqlens is not None and not return_intermediate_states
            and cp_context is None and not _api.compiling()):
        r = _chunk_as_is(q, k, v, g, beta, A_log, dt_bias, initial_state, scale,
                         output_final_state, state_v_first, cu_seqlens, use_qk_l2norm_in_kernel,
                         use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval,
                         safe_gate, lower_bound)
        if r is not None:
            return r
    import torch
    state_v_first = _state_v_first(state_v_first, kwargs)
    if kwargs.get("chunk_size", 64) not in (32, 64):
        raise ValueError(f"`chunk_size` must be either 32 or 64 for KDA, got "
                         f"{kwargs['chunk_size']}.")
    refuse = lambda *a: _refuse("chunk_kda", *a)  # noqa: E731
    if return_intermediate_states:
        raise refuse("return_intermediate_states", True,
                     "stridepack keeps no per-chunk states (checkpoints: stridepack.kda_prefill)")
    if cp_context is not None:
        raise refuse("cp_context", cp_context, "no context parallelism")
    if _api.compiling():  # the custom op, which runs this function eagerly
        _refuse_unknown("chunk_kda", kwargs)
        o, final = _api._torch_ops.fla_chunk_kda_op(
            q, k, v, g, beta, A_log, dt_bias, initial_state, scale, output_final_state,
            use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
            allow_neg_eigval, safe_gate, lower_bound, state_v_first, cu_seqlens)
        return o, (final if output_final_state else None)
    c = _Call("chunk_kda", dict(locals()), kwargs, recurrent=False)
    N, H = c.N, c.H
    if initial_state is not None:
        if initial_state.dtype != torch.float32:
            raise refuse("initial_state", str(initial_state.dtype),
                         "initial_state must be in float32")
        if initial_state.shape[0] != N:
            raise ValueError(f"The number of initial states is expected to be equal to the number "
                             f"of input sequences, i.e., {N} rather than "
                             f"{initial_state.shape[0]}.")
        # A copy in the caller's layout (the call writes the final states
        # where it read the initial ones), read where it lies.
        pool = initial_state.clone(memory_format=torch.contiguous_format)
    else:
        pool = torch.zeros(N, H, HEAD_DIM, HEAD_DIM, dtype=torch.float32, device=c.dev)
    o = torch.empty(1, c.q.shape[1], H, HEAD_DIM, dtype=torch.bfloat16, device=c.dev)
    c.run(_pool(pool, state_v_first), _slots(N, c.dev), o, scale)
    if c.B != 1:
        o = o.view(c.B, c.T, H, HEAD_DIM)
    return o, (pool if output_final_state else None)


# The fast paths' codes by the values of fla's options (_as_is_codes), at
# most _AS_IS_KEPT of them: an engine calls with the same few.
_AS_IS = {}
_AS_IS_KEPT = 64
_PLAIN = (bool, int, float, type(None))


def _as_is_codes(use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
                 allow_neg_eigval, lower_bound, scale, safe_gate):
    """The fast paths' (_chunk_as_is, _decode_as_is) codes for fla's options:
    (gate, bound, beta form, scale) as _library takes them, or None where
    those options may not go to the library as they come: what it would take
    but the drop-in refuses or treats its own way (q . k normalization off, a
    scale of 0, neg-eigval betas without the sigmoid, a lower bound outside
    [-5, 0), chunk_kda's safe_gate with the softplus gate). Looked up by the
    options' values, for host time."""
    key = (use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
           allow_neg_eigval, lower_bound, scale, safe_gate)
    try:
        return _AS_IS[key]
    except (KeyError, TypeError):
        pass
    codes = None
    if (use_qk_l2norm_in_kernel and not (scale is not None and scale == 0)
            and not (allow_neg_eigval and not use_beta_sigmoid_in_kernel)
            and not (use_gate_in_kernel and lower_bound is not None
                     and not -5 <= lower_bound < 0)):
        forms = _forms(use_gate_in_kernel, lower_bound, use_beta_sigmoid_in_kernel,
                       allow_neg_eigval)
        if not (safe_gate and forms[0] == _SOFTPLUS):
            codes = _codes(forms, scale)
    if len(_AS_IS) < _AS_IS_KEPT and all(type(x) in _PLAIN for x in key):
        _AS_IS[key] = codes  # kept for plain values only (a tensor's may change)
    return codes


def _as_is_inputs(q, k, v, g, beta, A_log, dt_bias):
    """Whether the fast paths may hand these inputs to the library as they
    come: A_log and dt_bias given (the drop-in fills in fla's defaults), no
    input that requires grad (refused by the full path)."""
    return not (A_log is None or dt_bias is None or q.requires_grad or k.requires_grad
                or v.requires_grad or g.requires_grad or beta.requires_grad
                or A_log.requires_grad or dt_bias.requires_grad)


def _chunk_as_is(q, k, v, g, beta, A_log, dt_bias, initial_state, scale, output_final_state,
                 state_v_first, cu_seqlens, use_qk_l2norm_in_kernel, use_gate_in_kernel,
                 use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate, lower_bound):
    """chunk_kda as engines call it (cu_seqlens, A_log and dt_bias given, no
    option outside those named here), eager: the initial states copied to a
    pool of the call's own (their layout) and the library's prefill on the rest as
    it comes, the library's checks standing for the drop-in's where they are
    the same (q, k, v, g bf16 [1, T, H, 128], g fp32 only as a log-decay,
    beta [1, T, H], A_log and dt_bias fp32 [H] and [H * 128], cu_seqlens a
    dense int32 or int64 [N + 1], every tensor on q's device, q, k, v, g
    read where they lie). Checked here what the library would take and the
    drop-in refuses or treats its own way. (o, final_state) as chunk_kda
    returns them, or None where the full path must run: an option or input
    this path does not take, or a call the library refused, nothing written
    (the full path names the option fla's way or converts what it
    converts)."""
    import torch
    codes = _as_is_codes(use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
                         allow_neg_eigval, lower_bound, scale, safe_gate)
    shape = q.shape
    if (codes is None or not _as_is_inputs(q, k, v, g, beta, A_log, dt_bias) or len(shape) != 4
            or cu_seqlens.dim() != 1):
        return None
    N, dev = cu_seqlens.shape[0] - 1, q.device
    if N < 0:
        return None
    if initial_state is None:
        pool = torch.zeros(N, shape[2], HEAD_DIM, HEAD_DIM, dtype=torch.float32, device=dev)
    elif (initial_state.requires_grad or initial_state.dtype != torch.float32
          or initial_state.dim() != 4 or initial_state.shape[0] != N):
        return None
    else:  # a copy (the call writes the final states where it read the initial ones)
        pool = initial_state.clone(memory_format=torch.contiguous_format)
    o = torch.empty(1, shape[1], shape[2], HEAD_DIM, dtype=torch.bfloat16, device=dev)
    try:
        _library((q, k, v, g, beta, A_log, dt_bias, cu_seqlens, _pool(pool, state_v_first),
                  _slots(N, dev), o, None, None, None, None), codes)
    except StridepackError:
        return None
    return o, (pool if output_final_state else None)


def fused_recurrent_kda_fwd(q, k, v, g, beta, A_log=None, dt_bias=None, initial_state=None,
                            scale: Optional[float] = None,
                            output_final_state: bool = False,
                            inplace_final_state: bool = True, state_v_first: bool = False,
                            cu_seqlens=None, ssm_state_indices=None,
                            num_accepted_tokens=None,
                            use_qk_l2norm_in_kernel: bool = False,
                            use_gate_in_kernel: bool = False,
                            use_beta_sigmoid_in_kernel: bool = False,
                            allow_neg_eigval: bool = False,
                            lower_bound: Optional[float] = None,
                            out=None, **kwargs) -> Tuple[Any, Any]:
    """fla's ``fused_recurrent_kda_fwd`` (the decode call engines make) on
    stridepack's prefill, which runs its decode kernel for short sequences
    on CUDA.

    q, k, v, g, beta, A_log, dt_bias, the gates and the options as in
    ``chunk_kda`` (the lower bound without ``safe_gate``, as fla's recurrent
    kernel takes it); q, k, v with any strides ``chunk_kda`` accepts, the
    column slices of a convolution's output read in place (fla's own call
    indexes q, k, v as dense ``[B, T, H, K]`` and needs contiguous copies of
    such slices). initial_state: the state pool, fp32 or bf16
    ``[slots, H, K, V]`` (``[slots, H, V, K]`` with ``state_v_first``), read at
    and, with ``inplace_final_state`` (the default), written back to slot
    ``ssm_state_indices[n]`` (int32 or int64 ``[N]``; a negative entry marks a
    padded sequence, skipped: its o rows are zero, no slot touched), or slot n
    without indices, in place in either layout (the library reads a K-first
    pool where it lies; no copy, no synchronization). Without
    ``inplace_final_state``,
    ``output_final_state`` returns new final states ``[N, H, K, V]`` and the
    pool is not written. Returns ``(o, final_state)``: o bf16 ``[B, T, H,
    128]`` (``out`` when given: written where it lies when dense, its rows of
    padded sequences left as they were; new and zero there otherwise),
    final_state the pool (in place), the new states (fp32, as fla's, from
    either pool), or None.

    Speculative verify (fla's and vLLM's convention): ``ssm_state_indices``
    a table ``[N, k + 1]`` (int32 or int64) and ``num_accepted_tokens``
    (``[N]``, optional): sequence n (at most k + 1 tokens) starts from slot
    ``[n, num_accepted_tokens[n] - 1]`` (column 0 without it) and the state
    after its token t goes to slot ``[n, t]``; a negative entry leaves that
    state unwritten, a negative ``[n, 0]`` marks a padded sequence. Needs
    ``inplace_final_state=True``. The states are those of feeding the tokens
    one call at a time (bit for bit with an fp32 pool). Under torch.compile
    this is the custom op stridepack::fla_fused_recurrent_kda_fwd."""
    if _api.compiling():  # the custom op: nothing else for dynamo to trace
        return _recurrent("fused_recurrent_kda_fwd", q, k, v, g, beta, A_log, dt_bias,
                          initial_state, scale, output_final_state, inplace_final_state,
                          state_v_first, cu_seqlens, ssm_state_indices, num_accepted_tokens,
                          use_qk_l2norm_in_kernel, use_gate_in_kernel,
                          use_beta_sigmoid_in_kernel, allow_neg_eigval, lower_bound, out, kwargs)
    if (inplace_final_state and initial_state is not None and cu_seqlens is not None
            and ssm_state_indices is not None and not kwargs):
        o = _decode_as_is(q, k, v, g, beta, A_log, dt_bias, _pool(initial_state, state_v_first),
                          scale, cu_seqlens,
                          ssm_state_indices, num_accepted_tokens, use_qk_l2norm_in_kernel,
                          use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval,
                          lower_bound, out)
        if o is not None:
            return o, initial_state
    return _recurrent("fused_recurrent_kda_fwd", q, k, v, g, beta, A_log, dt_bias, initial_state,
                      scale, output_final_state, inplace_final_state, state_v_first, cu_seqlens,
                      ssm_state_indices, num_accepted_tokens, use_qk_l2norm_in_kernel,
                      use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval,
                      lower_bound, out, kwargs)


def _decode_as_is(q, k, v, g, beta, A_log, dt_bias, pool, scale, cu_seqlens, ssm_state_indices,
                  num_accepted_tokens, use_qk_l2norm_in_kernel, use_gate_in_kernel,
                  use_beta_sigmoid_in_kernel, allow_neg_eigval, lower_bound, out):
    """An engine's decode call as it comes (a pool written in place, _pool,
    cu_seqlens and slot indices, A_log and dt_bias given), eager: the
    library's prefill on the arguments as they are, its checks standing for
    the drop-in's where they are the same (those of _chunk_as_is; the pool
    fp32 or bf16 [slots, H, 128, 128]; ssm_state_indices int32 or int64 [N],
    or a verify table [N, W] with num_accepted_tokens, dense). Checked here
    what the library would take and the drop-in refuses. o, or None where
    the full path must run: an option or input this path does not take, or
    a call the library refused (nothing written then; the full path names
    the option fla's way, or converts what it converts)."""
    import torch
    codes = _as_is_codes(use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
                         allow_neg_eigval, lower_bound, scale, False)
    if codes is None or not _as_is_inputs(q, k, v, g, beta, A_log, dt_bias) or pool.requires_grad:
        return None
    if out is None:
        o = torch.zeros(v.shape, dtype=torch.bfloat16, device=v.device)
    elif out.shape == v.shape and out.dtype == torch.bfloat16 and out.is_contiguous():
        o = out
    else:
        return None
    try:
        _library((q, k, v, g, beta, A_log, dt_bias, cu_seqlens, pool, ssm_state_indices, o, None,
                  None, None, num_accepted_tokens), codes)
    except StridepackError:
        return None
    return o


def _recurrent(call, q, k, v, g, beta, A_log, dt_bias, initial_state, scale, output_final_state,
               inplace_final_state, state_v_first, cu_seqlens, ssm_state_indices,
               num_accepted_tokens, use_qk_l2norm_in_kernel, use_gate_in_kernel,
               use_beta_sigmoid_in_kernel, allow_neg_eigval, lower_bound, out, kwargs):
    """fused_recurrent_kda_fwd's work, its errors naming `call`."""
    import torch

    if _api.compiling():  # the custom op, which runs fused_recurrent_kda_fwd eagerly
        _refuse_unknown(call, kwargs)
        # The op writes the caller's tensors and returns nothing: o (zero
        # where padded, as fla's), and new final states when not in place.
        o = out if out is not None else torch.zeros(v.shape, dtype=torch.bfloat16,
                                                    device=v.device)
        final = None
        if output_final_state and not inplace_final_state:
            n = q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
            final = torch.empty(n, q.shape[2], HEAD_DIM, HEAD_DIM, dtype=torch.float32,
                                device=v.device)
        _api._torch_ops.fla_fused_recurrent_kda_fwd_op(
            q, k, v, g, beta, A_log, dt_bias, initial_state, scale, inplace_final_state,
            state_v_first, cu_seqlens, ssm_state_indices, num_accepted_tokens,
            use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
            allow_neg_eigval, lower_bound, o, final)
        return o, (initial_state if inplace_final_state else final)
    refuse = lambda *a: _refuse(call, *a)  # noqa: E731
    table = ssm_state_indices is not None and ssm_state_indices.dim() == 2
    if ssm_state_indices is not None and ssm_state_indices.dim() not in (1, 2):
        raise refuse("ssm_state_indices", list(ssm_state_indices.shape),
                     "one slot a sequence [N], or a verify table [N, k + 1]")
    if num_accepted_tokens is not None and not table:
        raise refuse("num_accepted_tokens", "a tensor", "it picks the initial state in a 2-D "
                     "ssm_state_indices [N, k + 1] (speculative verify)")
    if inplace_final_state and initial_state is None:
        raise refuse("inplace_final_state", True, "there is no initial_state to write into")
    if table and not inplace_final_state:
        raise refuse("inplace_final_state", False, "with a 2-D ssm_state_indices the state "
                     "after every token goes to the pool (inplace_final_state=True)")
    c = _Call(call, dict(locals()), kwargs, recurrent=True)
    N, H, dev = c.N, c.H, c.dev
    if initial_state is not None and initial_state.dtype not in (torch.float32, torch.bfloat16):
        raise refuse("initial_state", str(initial_state.dtype), "the pool is fp32 or bf16")
    if initial_state is not None and ssm_state_indices is None and initial_state.shape[0] < N:
        raise ValueError(f"The number of initial states is expected to be equal to the number "
                         f"of input sequences, i.e., {N} rather than {initial_state.shape[0]}.")
    if ssm_state_indices is not None:
        if ssm_state_indices.shape[0] != N:
            raise refuse("ssm_state_indices", list(ssm_state_indices.shape),
                         f"one row for each of the {N} sequences")
        idx = _index_array(ssm_state_indices, dev)  # int32 or int64 as they are
    else:
        idx = _slots(N, dev)
    acc = None
    if num_accepted_tokens is not None:
        acc = _index_array(num_accepted_tokens, dev)
    if out is not None and (out.shape != v.shape or out.dtype != torch.bfloat16):
        raise refuse("out", f"{list(out.shape)} {out.dtype}", f"out must be bf16 {list(v.shape)}")
    # o in v's shape, the prefill writing a [1, B T, H, 128] view of it: out
    # itself when given and dense (the rows of padded sequences keep what it
    # held), else new, zero.
    if out is not None and out.is_contiguous():
        o_full = out
    else:
        o_full = torch.zeros(v.shape, dtype=torch.bfloat16, device=dev)
    o = o_full if c.B == 1 else o_full.view(1, c.B * c.T, H, HEAD_DIM)
    if initial_state is None:
        # Sequence n in a pool of the batch's own, at slot n; padded ones keep -1.
        local = torch.where(idx >= 0, torch.arange(N, dtype=idx.dtype, device=dev), idx)
        pool = torch.zeros(N, H, HEAD_DIM, HEAD_DIM, dtype=torch.float32, device=dev)
        c.run(_pool(pool, state_v_first), local, o, scale)
        final = pool if output_final_state else None
    elif inplace_final_state:  # the pool read and written where it lies, either layout
        c.run(_pool(initial_state, state_v_first), idx, o, scale, acc)
        final = initial_state
    else:
        # New final states (fp32 whatever the pool, as fla's): the slots
        # the call names copied as slots 0 .. of a pool of their own
        # (negative entries keep their -1), the caller's pool not written.
        local = torch.where(idx >= 0, torch.arange(N, dtype=idx.dtype, device=dev), idx)
        pool = initial_state.index_select(0, idx.clamp(min=0).long()).to(
            dtype=torch.float32, copy=True, memory_format=torch.contiguous_format)
        c.run(_pool(pool, state_v_first), local, o, scale, acc)
        final = pool if output_final_state else None
    if out is not None and o_full is not out:
        out.copy_(o_full)
        o_full = out
    return o_full, final


def fused_recurrent_kda(q, k, v, g, beta, A_log=None, dt_bias=None, scale: Optional[float] = None,
                        initial_state=None, output_final_state: bool = False,
                        use_qk_l2norm_in_kernel: bool = False, use_gate_in_kernel: bool = False,
                        use_beta_sigmoid_in_kernel: bool = False, allow_neg_eigval: bool = False,
                        lower_bound: Optional[float] = None, state_v_first: bool = False,
                        cu_seqlens=None, **kwargs) -> Tuple[Any, Any]:
    """fla's ``fused_recurrent_kda``: ``fused_recurrent_kda_fwd`` without a
    pool (``initial_state [N, H, K, V]``, fp32 or bf16, one state a sequence,
    not written; the final states returned new, fp32, with
    ``output_final_state``). The pool's options of ``fused_recurrent_kda_fwd``
    (``ssm_state_indices``, ``num_accepted_tokens``, ``inplace_final_state``,
    ``out``), which fla's call drops, are refused by name."""
    state_v_first = _state_v_first(state_v_first, kwargs)
    for name in ("ssm_state_indices", "num_accepted_tokens", "inplace_final_state", "out"):
        if name in kwargs:
            raise _refuse("fused_recurrent_kda", name, kwargs[name], "fla's fused_recurrent_kda "
                          "drops it (no pool); fused_recurrent_kda_fwd takes it")
    if (cu_seqlens is not None and initial_state is not None
            and initial_state.shape[0] != cu_seqlens.shape[0] - 1):
        raise ValueError(f"The number of initial states is expected to be equal to the number "
                         f"of input sequences, i.e., {cu_seqlens.shape[0] - 1} rather than "
                         f"{initial_state.shape[0]}.")
    return _recurrent("fused_recurrent_kda", q, k, v, g, beta, A_log, dt_bias, initial_state,
                      scale, output_final_state, False, state_v_first, cu_seqlens, None, None,
                      use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
                      allow_neg_eigval, lower_bound, None, kwargs)
