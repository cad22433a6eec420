"""An engine-style KDA attention layer on stridepack, with random weights.

What a serving engine's KDA layer does for one batch, in the order it does it:

  1. one fused in-projection of the hidden states to q, k, v ([T, 3 H 128]);
  2. the causal short convolution over it (stridepack.causal_conv1d: varlen,
     conv states in a pool by slot, SiLU), written token-major so that q, k
     and v are column slices of one buffer, which the KDA prefill reads in
     place (no copy);
  3. the KDA gate input g and beta from their own projections;
  4. the KDA prefill over the varlen batch, the recurrent states in a pool by
     slot (stridepack.kda_prefill; has_initial_state marks requests that
     start fresh, int32 query_start_loc as vLLM passes it);
  5. the output gate (RMS norm of o times sigmoid of a low-rank projection)
     and the out-projection;

then several decode steps of one token a sequence from the same pools
(stridepack.causal_conv1d_update and kda_prefill with one token each), the
batch padded to a fixed size with slot -1, as under CUDA graphs.

`KdaLayer(..., api="fla")` makes the same calls through fla's signatures
(stridepack.fla.chunk_kda and fused_recurrent_kda_fwd, gathering and
scattering the prefill's states as an engine calling fla does), so one layer
runs either way and the two can be compared; `fla_calls=(chunk_kda,
fused_recurrent_kda_fwd)` gives it fla's own functions instead, for the
comparison with fla (bench/bench_layer.py, tests/python/test_fla_dropin.py);
the decode step then copies q, k, v dense for fla's recurrent kernel, which
reads strided views wrongly.

    python3 docs/examples/kda_layer.py                    # small, on the CPU
    python3 docs/examples/kda_layer.py --device cuda --size kimi-linear
    python3 docs/examples/kda_layer.py --device cuda --size k3 --tokens 16384

Sizes: "small" (2 heads, hidden 256), "kimi-linear" (32 KDA heads, hidden
2304, the Kimi-Linear 48B-A3B layer; softplus gate), "k3" (96 heads at one
GPU, hidden 7168; lower-bound gate).
"""

from __future__ import annotations

import argparse

import torch

import stridepack as sp

D = 128  # head dimension
SIZES = {"small": dict(hidden=256, heads=2, gate="softplus"),
         "kimi-linear": dict(hidden=2304, heads=32, gate="softplus"),
         "k3": dict(hidden=7168, heads=96, gate="lower_bound")}


def mm(a, b):
    """a @ b for bf16 matrices, the products summed in fp32 and rounded to
    bf16 once, as a GPU's bf16 GEMM sums them. On the CPU through fp32:
    a CPU build of torch may sum bf16 products in bf16 (Debian's torch 1.13
    on an AVX2 machine: 2.6 % relative error on a 512-deep product)."""
    if a.is_cuda:
        return a @ b
    return (a.float() @ b.float()).bfloat16()


class KdaLayer:
    """One KDA attention layer: random bf16 weights, fp32 gate parameters,
    a conv-state pool and a recurrent-state pool of `slots` slots."""

    def __init__(self, hidden, heads, gate="softplus", slots=8, conv_width=4, rank=64,
                 device="cpu", seed=0, api="stridepack", fla_calls=None):
        g = torch.Generator().manual_seed(seed)
        # fla's own fused_recurrent_kda_fwd indexes q, k, v as dense
        # [B, T, H, K] (it has no input guard, unlike its chunk_kda): given
        # the column slices it reads other tokens' rows, so the layer copies
        # them for it, as an engine calling it must; the drop-in reads the views.
        self.dense_decode_inputs = fla_calls is not None
        if fla_calls is None:
            from stridepack.fla import chunk_kda, fused_recurrent_kda_fwd
            fla_calls = (chunk_kda, fused_recurrent_kda_fwd)
        self.fla_calls = fla_calls
        P = heads * D
        self.H, self.P, self.gate, self.api, self.dev = heads, P, gate, api, torch.device(device)

        def w(*shape, scale):
            return (torch.randn(*shape, generator=g) * scale).bfloat16().to(self.dev)

        self.w_qkv = w(hidden, 3 * P, scale=hidden ** -0.5)          # fused in-projection
        self.conv_w = w(3 * P, conv_width, scale=0.5)                 # depthwise taps
        self.w_fa, self.w_fb = w(hidden, rank, scale=hidden ** -0.5), w(rank, P, scale=rank ** -0.5)
        self.w_beta = w(hidden, heads, scale=hidden ** -0.5)
        self.w_ga, self.w_gb = w(hidden, rank, scale=hidden ** -0.5), w(rank, P, scale=rank ** -0.5)
        self.norm_w = (1 + 0.1 * torch.randn(D, generator=g)).to(self.dev)
        self.w_out = w(P, hidden, scale=P ** -0.5)
        self.A_log = (torch.rand(heads, generator=g) * 2 - 1).to(self.dev)
        self.dt_bias = (torch.rand(P, generator=g) - 0.5).to(self.dev)
        self.conv_pool = torch.zeros(slots, 3 * P, conv_width - 1, dtype=torch.bfloat16,
                                     device=self.dev)
        self.kda_pool = torch.zeros(slots, heads, D, D, dtype=torch.float32, device=self.dev)

    # ---- the parts ------------------------------------------------------------

    def _gates(self, x):
        """g and beta from x."""
        T, H = x.shape[0], self.H
        g = mm(mm(x, self.w_fa), self.w_fb).view(1, T, H, D)
        beta = mm(x, self.w_beta).view(1, T, H)
        return g, beta

    def _qkv(self, qkv):
        """q, k, v as column slices of the conv output (no copy)."""
        T = qkv.shape[0]
        return tuple(qkv[:, i * self.P:(i + 1) * self.P].view(1, T, self.H, D) for i in range(3))

    def _output(self, x, o):
        """RMS norm of o per head times sigmoid of the output gate, then out."""
        T = x.shape[0]
        of = o.view(T, self.H, D).float()
        of = of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm_w
        gate = torch.sigmoid(mm(mm(x, self.w_ga), self.w_gb).float()).view(T, self.H, D)
        return mm((of * gate).bfloat16().view(T, self.P), self.w_out)

    def _gate_kwargs(self):
        return dict(gate=self.gate, lower_bound=-5.0)

    # ---- prefill ----------------------------------------------------------------

    def prefill(self, x, query_start_loc, slots, has_initial_state):
        """x bf16 [T, hidden], a varlen batch by query_start_loc (int32
        [N + 1]); sequence n uses pool slot slots[n] (int32 [N]) and starts
        from it where has_initial_state[n]. Returns y bf16 [T, hidden]."""
        proj = mm(x, self.w_qkv)
        g, beta = self._gates(x)
        o = self.attend(proj, g, beta, query_start_loc, slots, has_initial_state)
        return self._output(x, o)

    def attend(self, proj, g, beta, query_start_loc, slots, has_initial_state):
        """The prefill between the layer's projections: the causal
        convolution of the in-projection's output proj (bf16 [T, 3 P]), then
        the KDA prefill on q, k, v (column slices of the convolution's
        output), g and beta. Returns o bf16 [1, T, H, 128]."""
        T = proj.shape[0]
        qkv = torch.empty(T, 3 * self.P, dtype=torch.bfloat16, device=self.dev)
        sp.causal_conv1d(proj, self.conv_w, query_start_loc, self.conv_pool, slots,
                         has_initial_state=has_initial_state, silu=True, out=qkv)
        q, k, v = self._qkv(qkv)
        if self.api == "fla":
            return self._prefill_fla(q, k, v, g, beta, query_start_loc, slots, has_initial_state)
        o = torch.empty(1, T, self.H, D, dtype=torch.bfloat16, device=self.dev)
        sp.kda_prefill(q, k, v, g, beta, self.A_log, self.dt_bias, query_start_loc,
                       self.kda_pool, slots, o, has_initial_state=has_initial_state,
                       **self._gate_kwargs())
        return o

    def _prefill_fla(self, q, k, v, g, beta, cu, slots, has_initial_state):
        """The prefill as an engine calling fla's chunk_kda does it: gather
        the slots' states (zero where a request starts fresh), run, scatter
        the final states back."""
        chunk_kda = self.fla_calls[0]
        idx = slots.long()
        h0 = self.kda_pool.index_select(0, idx)
        h0[~has_initial_state] = 0
        h0 = h0.transpose(-1, -2).contiguous()  # fla's [N, H, K, V]
        lb = dict(safe_gate=True, lower_bound=-5.0) if self.gate == "lower_bound" else {}
        o, ht = chunk_kda(q, k, v, g, beta, A_log=self.A_log, dt_bias=self.dt_bias,
                          initial_state=h0, output_final_state=True, cu_seqlens=cu.long(),
                          use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                          use_beta_sigmoid_in_kernel=True, **lb)
        self.kda_pool.index_copy_(0, idx, ht.transpose(-1, -2))
        return o

    # ---- decode -------------------------------------------------------------------

    def decode(self, x, slots):
        """One token per row: x bf16 [N, hidden], row n in pool slot slots[n]
        (int32 [N], -1 for a padded row: nothing read or written, its y row
        meaningless). Returns y bf16 [N, hidden]."""
        N = x.shape[0]
        proj = mm(x, self.w_qkv)
        qkv = torch.empty(N, 3 * self.P, dtype=torch.bfloat16, device=self.dev)
        sp.causal_conv1d_update(proj, self.conv_w, self.conv_pool, slots, silu=True, out=qkv)
        q, k, v = self._qkv(qkv)
        g, beta = self._gates(x)
        cu = torch.arange(N + 1, dtype=torch.int32, device=self.dev)
        if self.api == "fla":
            fused_recurrent_kda_fwd = self.fla_calls[1]
            if self.dense_decode_inputs:
                q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            lb = dict(lower_bound=-5.0) if self.gate == "lower_bound" else {}
            o, _ = fused_recurrent_kda_fwd(q, k, v, g, beta, A_log=self.A_log,
                                           dt_bias=self.dt_bias, initial_state=self.kda_pool,
                                           inplace_final_state=True, state_v_first=True,
                                           cu_seqlens=cu, ssm_state_indices=slots,
                                           use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                                           use_beta_sigmoid_in_kernel=True, **lb)
        else:
            o = torch.zeros(1, N, self.H, D, dtype=torch.bfloat16, device=self.dev)
            sp.kda_prefill(q, k, v, g, beta, self.A_log, self.dt_bias, cu, self.kda_pool, slots,
                           o, **self._gate_kwargs())
        return self._output(x, o)


def run(size="small", device="cpu", tokens=None, steps=3, api="stridepack", seed=0,
        fla_calls=None, pad=True):
    """A prefill of three requests (one fresh, two continuing from their
    slots) and `steps` decode steps of a batch of four rows: the three and a
    padded row (slot -1), or with pad=False a fourth request in slot 3 (fla's
    own decode kernel reads a -1 slot out of bounds). Returns the layer, the
    prefill's y and the list of decode y's."""
    cfg = SIZES[size]
    layer = KdaLayer(cfg["hidden"], cfg["heads"], gate=cfg["gate"], device=device, seed=seed,
                     api=api, fla_calls=fla_calls)
    dev = layer.dev
    g = torch.Generator().manual_seed(seed + 1)
    T = tokens or 48
    lens = [T // 4, T // 2, T - T // 4 - T // 2]
    cu = torch.tensor([0, lens[0], lens[0] + lens[1], T], dtype=torch.int32, device=dev)
    slots = torch.tensor([5, 2, 6], dtype=torch.int32, device=dev)
    has_init = torch.tensor([False, True, True], device=dev)
    # Slots 2 and 6 hold earlier context; slot 5's request starts fresh.
    layer.kda_pool[2:7] = 0.05 * torch.randn(5, layer.H, D, D, generator=g).to(dev)
    layer.conv_pool[2:7] = (0.5 * torch.randn(5, 3 * layer.P, layer.conv_pool.shape[-1],
                                              generator=g)).bfloat16().to(dev)
    x = torch.randn(T, cfg["hidden"], generator=g).bfloat16().to(dev)
    y = layer.prefill(x, cu, slots, has_init)
    ys = []
    batch = torch.tensor([6, 5, -1 if pad else 3, 2], dtype=torch.int32, device=dev)
    for _ in range(steps):
        xt = torch.randn(4, cfg["hidden"], generator=g).bfloat16().to(dev)
        ys.append(layer.decode(xt, batch))
    return layer, y, ys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tokens", type=int, default=None)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--api", choices=("stridepack", "fla"), default="stridepack")
    a = ap.parse_args()
    layer, y, ys = run(a.size, a.device, a.tokens, a.steps, a.api)
    print(f"{a.size} layer ({layer.H} heads, {a.api} calls) on {layer.dev}: prefill y "
          f"{list(y.shape)} |y| {y.float().norm():.3f}; {len(ys)} decode steps, last |y| "
          f"{ys[-1].float().norm():.3f}")


if __name__ == "__main__":
    main()
