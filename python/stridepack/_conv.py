"""The causal short convolution that produces the KDA inputs
(include/stridepack_conv.h), thin: arrays in, one extension call that fills
sp_conv_args and calls the library.
"""

from __future__ import annotations

from typing import Optional

from . import _api, _native
from ._api import Array


def causal_conv1d(x: Array, weight: Array, cu_seqlens: Array, state: Array,
                  state_indices: Array, *, bias: Optional[Array] = None,
                  has_initial_state: Optional[Array] = None, silu: bool = True,
                  out: Optional[Array] = None, q: Optional[Array] = None,
                  k: Optional[Array] = None, v: Optional[Array] = None,
                  reference: bool = False) -> None:
    """The varlen prefill of the depthwise causal convolution (sp_conv_prefill;
    reference=True: its float64 CPU reference). Returns None; writes the output
    and the state pool in place.

    Per sequence n (tokens cu_seqlens[n] .. cu_seqlens[n+1]) and channel c:
    the W-1 previous inputs (the slot's state, or zeros), then the tokens, are
    convolved with weight[c, :] (oldest tap first) plus bias[c], SiLU applied
    when silu, rounded once to bf16; the slot then holds the last W-1 inputs.

    x: bf16 [T, C], any strides (a column slice of the projection, or a
    channel-major [C, T] buffer seen through .T). weight: f32 or bf16 [C, W],
    W 2..4; bias: [C] of the weight's dtype, or None. cu_seqlens: int64 or
    int32 [N + 1]. state: bf16 [slots, C, W - 1], written. state_indices:
    int32 or int64 [N]; -1 marks a padded sequence: skipped, nothing written
    for it.
    has_initial_state: bool [N] (False: start from zeros; None: no sequence
    has one). The output, one of two layouts: out bf16 [T, C] (token-major),
    or q, k, v bf16 [T, key_dim], [T, key_dim], [T, value_dim] with
    C = 2 key_dim + value_dim (split: dense q, k, v are what the KDA prefill
    reads without a copy). Rows outside every sequence are not written.

    Arrays: NumPy, PyTorch, CuPy or DLPack, all on one device; on CUDA the
    call is one launch on the current stream, allocates nothing and can be
    captured in a graph. Every argument is checked before anything is
    written; errors are StridepackError naming the argument."""
    _call((x, weight, bias, cu_seqlens, state, state_indices, has_initial_state, out, q, k, v),
          silu, False, reference)


def causal_conv1d_update(x: Array, weight: Array, state: Array, state_indices: Array, *,
                         bias: Optional[Array] = None, silu: bool = True,
                         out: Optional[Array] = None, q: Optional[Array] = None,
                         k: Optional[Array] = None, v: Optional[Array] = None,
                         reference: bool = False) -> None:
    """The one-token decode step on the same pool (sp_conv_decode;
    reference=True: its float64 CPU reference). Returns None; writes the output
    and the state pool in place.

    x: bf16 [N, C], one token per sequence, any strides. Each sequence starts
    from its slot state[state_indices[n]] (bf16 [slots, C, W - 1]), convolves,
    and leaves its last W-1 inputs there. state_indices: int32 or int64 [N],
    -1 for a padded row (skipped, nothing written). weight, bias, silu and the output
    layouts (out [N, C], or q, k, v with N rows) as in causal_conv1d."""
    _call((x, weight, bias, None, state, state_indices, None, out, q, k, v), silu, True,
          reference)


def _call(arrays, silu, decode, reference):
    """The extension's call, or under torch.compile the custom op
    stridepack::causal_conv1d (the same call, opaque to the tracer)."""
    if _api.compiling():
        _api._torch_ops.causal_conv1d(arrays, silu, decode, reference)
    else:
        _native.conv(arrays, bool(silu), bool(decode), bool(reference))
