"""vLLM's short-convolution calls, served by stridepack: change one import.

    from stridepack.vllm import causal_conv1d_fn, causal_conv1d_update
    # instead of: from vllm.model_executor.layers.mamba.ops.causal_conv1d import ...

Both take vLLM's parameter names, defaults, layouts and return values and run
``stridepack.causal_conv1d`` / ``causal_conv1d_update`` (one launch on the
current stream, nothing allocated but the output vLLM's functions allocate
too). torch tensors only (CPU or CUDA).

Served: x as vLLM lays it out (``causal_conv1d_fn``: ``[dim, T]``, the
transpose of a token-major ``[T, dim]`` buffer; ``causal_conv1d_update``:
``[batch, dim]`` or ``[batch, dim, 1]``), bf16; ``weight [dim, width]``
(width 2 to 4, bf16 or fp32), ``bias``; ``conv_states`` bf16 ``[slots, dim,
width - 1]`` of any strides; ``query_start_loc`` and ``cache_indices`` /
``conv_state_indices`` int32 or int64; ``has_initial_state``; ``activation``
None, ``"silu"``, ``"swish"`` or a bool; ``pad_slot_id`` (entries equal to it
are padded rows: skipped, nothing written, their output rows not written).
``validate_data`` and ``metadata`` are accepted and unused (stridepack checks
every argument itself, and needs no host-side chunk list).

Refused (ValueError naming the option and the value): prefix caching
(``block_idx_first_scheduled_token``, ``block_idx_last_scheduled_token``,
``initial_state_idx``, ``num_computed_tokens``, ``block_size_to_align``),
speculative decoding and multi-token updates (``num_accepted_tokens``,
``query_start_loc`` or a ``seqlen`` above 1 in ``causal_conv1d_update``,
``retrieve_parent_token``), a ``conv_states`` longer than ``width - 1``,
dtypes other than bf16 for x and the states, inputs that require grad, and
any other keyword.
"""

from __future__ import annotations

from typing import Any, Optional

from ._conv import causal_conv1d, causal_conv1d_update as _update

__all__ = ["causal_conv1d_fn", "causal_conv1d_update"]

PAD_SLOT_ID = -1
_UNUSED = ("validate_data", "metadata")


def _refuse(call: str, option: str, value: Any, why: str) -> ValueError:
    return ValueError(f"stridepack.vllm.{call}: {option}={value!r} is not served: {why}")


def _silu(call, activation):
    if activation in (True, "silu", "swish"):
        return True
    if activation in (None, False):
        return False
    raise _refuse(call, "activation", activation, 'it is None, "silu", "swish" or a bool')


def _common(call, x, weight, bias, states, kwargs):
    import torch
    for name in _UNUSED:
        kwargs.pop(name, None)
    for name, value in sorted(kwargs.items()):
        if value is not None:
            raise _refuse(call, name, "a value" if isinstance(value, torch.Tensor) else value,
                          "prefix caching, speculative decoding and other options of vLLM's "
                          "kernels are not served")
    for name, t in (("x", x), ("weight", weight), ("bias", bias), ("conv_states", states)):
        if t is not None and t.requires_grad:
            raise _refuse(call, name, "a tensor that requires grad",
                          "stridepack computes the forward only (inference)")
    for name, t in (("x", x), ("conv_states", states)):
        if t.dtype != torch.bfloat16:
            raise _refuse(call, name, str(t.dtype), "x and the conv states are bf16")
    width = weight.shape[-1]
    if states.dim() != 3 or states.shape[2] != width - 1:
        raise _refuse(call, "conv_states", list(states.shape),
                      f"the states are [slots, dim, width - 1] = [slots, dim, {width - 1}]")


def _slots(indices, n, pad_slot_id, device):
    """int32 or int64 slot indices with padded entries as -1 (stridepack's
    mark); slot i for row i without indices."""
    import torch
    if indices is None:
        return torch.arange(n, dtype=torch.int32, device=device)
    if indices.dtype not in (torch.int32, torch.int64):
        indices = indices.to(torch.int64)
    if pad_slot_id is not None and pad_slot_id != -1:
        indices = torch.where(indices == pad_slot_id, torch.full_like(indices, -1), indices)
    return indices


def causal_conv1d_fn(x, weight, bias, conv_states, query_start_loc, cache_indices=None,
                     has_initial_state=None, activation: Optional[str] = "silu",
                     pad_slot_id: int = PAD_SLOT_ID, block_idx_first_scheduled_token=None,
                     block_idx_last_scheduled_token=None, initial_state_idx=None,
                     num_computed_tokens=None, block_size_to_align=0, **kwargs):
    """vLLM's varlen prefill of the causal convolution on stridepack.

    x: bf16 ``[dim, T]`` (any strides; vLLM passes the transpose of the
    in-projection's ``[T, dim]`` columns). weight ``[dim, width]``, bias
    ``[dim]`` or None. conv_states: bf16 ``[slots, dim, width - 1]``,
    sequence n's initial window at ``conv_states[cache_indices[n]]`` where
    ``has_initial_state[n]`` (zeros otherwise, or for every sequence without
    it), its last ``width - 1`` inputs left there. query_start_loc int32 or
    int64 ``[N + 1]``. Returns a new bf16 ``[dim, T]`` (token-major in
    memory, as vLLM's): the convolution, SiLU applied with ``activation``."""
    import torch
    call = "causal_conv1d_fn"
    if block_size_to_align:
        kwargs["block_size_to_align"] = block_size_to_align
    kwargs.update(block_idx_first_scheduled_token=block_idx_first_scheduled_token,
                  block_idx_last_scheduled_token=block_idx_last_scheduled_token,
                  initial_state_idx=initial_state_idx, num_computed_tokens=num_computed_tokens)
    _common(call, x, weight, bias, conv_states, kwargs)
    silu = _silu(call, activation)
    if x.dim() != 2:
        raise _refuse(call, "x", list(x.shape), "x is [dim, T] (varlen, sequences side by side)")
    n = query_start_loc.shape[0] - 1
    idx = _slots(cache_indices, n, pad_slot_id, x.device)
    out = torch.empty(x.shape[1], x.shape[0], dtype=torch.bfloat16, device=x.device)
    causal_conv1d(x.t(), weight, query_start_loc, conv_states, idx, bias=bias,
                  has_initial_state=has_initial_state, silu=silu, out=out)
    return out.t()


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None,
                         conv_state_indices=None, num_accepted_tokens=None, query_start_loc=None,
                         max_query_len: int = -1, pad_slot_id: int = PAD_SLOT_ID,
                         block_idx_last_scheduled_token=None, initial_state_idx=None,
                         retrieve_parent_token=None, **kwargs):
    """vLLM's one-token decode step of the causal convolution on stridepack.

    x: bf16 ``[batch, dim]`` or ``[batch, dim, 1]``, any strides. conv_state:
    bf16 ``[slots, dim, width - 1]``; row n reads and moves on the window at
    ``conv_state[conv_state_indices[n]]`` (slot n without indices; entries
    equal to ``pad_slot_id`` are skipped). Returns a new bf16 tensor of x's
    shape."""
    import torch
    call = "causal_conv1d_update"
    kwargs.update(num_accepted_tokens=num_accepted_tokens, query_start_loc=query_start_loc,
                  block_idx_last_scheduled_token=block_idx_last_scheduled_token,
                  initial_state_idx=initial_state_idx, retrieve_parent_token=retrieve_parent_token)
    _common(call, x, weight, bias, conv_state, kwargs)
    silu = _silu(call, activation)
    if x.dim() == 3 and x.shape[2] != 1:
        raise _refuse(call, "x", list(x.shape), "one token a row ([batch, dim] or "
                      "[batch, dim, 1]): multi-token updates are not served")
    if x.dim() not in (2, 3):
        raise _refuse(call, "x", list(x.shape), "x is [batch, dim] or [batch, dim, 1]")
    x2 = x[..., 0] if x.dim() == 3 else x
    idx = _slots(conv_state_indices, x2.shape[0], pad_slot_id, x.device)
    out = torch.empty(x2.shape, dtype=torch.bfloat16, device=x.device)
    _update(x2, weight, conv_state, idx, bias=bias, silu=silu, out=out)
    return out[..., None] if x.dim() == 3 else out
