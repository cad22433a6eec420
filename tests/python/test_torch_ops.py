"""The custom ops (torch.library.custom_op, torch >= 2.4) on the CPU: the
pack and copy ops' fake kernels (opcheck), torch.compile(fullgraph=True) of
the pack, the convolution, stridepack.vllm and stridepack.fla against eager
(backend aot_eager: no compiler needed). Exits 77 when torch is not
importable or has no custom_op (ctest then says "Not Run": these tests
never count as passed without running)."""

import sys
import unittest

try:
    import numpy  # noqa: F401  (torch's CPU tensors here need it)
    import torch
except ImportError:
    print("SKIP: torch (with NumPy) is not importable")
    sys.exit(77)
if not hasattr(torch.library, "custom_op"):
    print(f"SKIP: torch {torch.__version__} has no torch.library.custom_op")
    sys.exit(77)

import sp_unittest
import stridepack as sp
from test_torch_cpu import bits_equal, k3_like, kda_inputs

class CustomOps(unittest.TestCase):
    """The traced forms, on the CPU (backend aot_eager: no C++ compiler)."""

    def test_registered_with_fake_kernels(self):
        self.assertTrue(sp.register_torch_ops())
        gen = torch.Generator().manual_seed(9)
        xs, bufs = k3_like(gen)
        # opcheck compares outputs with assert_close, for which NaN differs
        # from NaN: finite values here (the bit tests use every pattern).
        for b in bufs:
            b.copy_(torch.randn(b.shape, generator=gen).to(b.dtype))
        torch.library.opcheck(torch.ops.stridepack.pack.default, ([xs[0], xs[3]],))
        outs = [torch.empty(x.shape, dtype=x.dtype) for x in xs]
        torch.library.opcheck(torch.ops.stridepack.copy_batch.default, (xs, outs))

    def test_compiled_fullgraph_matches_eager(self):
        gen = torch.Generator().manual_seed(10)
        xs, _ = k3_like(gen)
        dense = torch.randn(1, 40, 3, 128).bfloat16()

        def fn(q, k, v, beta, g):
            q, k, v, beta, g = sp.pack([q, k, v, beta, g])
            return q.view(torch.int16) ^ k.view(torch.int16) ^ v.view(torch.int16), beta, g

        compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
        got, want = compiled(*xs, dense), fn(*xs, dense)
        for a, b in zip(got, want):
            self.assertTrue(torch.equal(a.view(torch.int16), b.view(torch.int16)))
        self.assertTrue(bits_equal(got[1], xs[3]))

        def into(q, k, outs):
            sp.pack_into([q, k], outs)
            return outs[0] + 1

        outs = [torch.empty(x.shape, dtype=x.dtype) for x in xs[:2]]
        torch.compile(into, fullgraph=True, backend="aot_eager")(xs[0], xs[1], outs)
        self.assertTrue(bits_equal(outs[0], xs[0]) and bits_equal(outs[1], xs[1]))


class CustomOpsEngine(unittest.TestCase):
    """The convolution, stridepack.vllm and stridepack.fla under
    torch.compile(fullgraph=True) (backend aot_eager, CPU tensors): the same
    bits and states as eager, through their custom ops."""

    def setUp(self):
        self.assertTrue(sp.register_torch_ops())

    def test_convolution_ops(self):
        gen = torch.Generator().manual_seed(20)
        C, W, T = 64, 4, 13
        weight = torch.randn(C, W, generator=gen).bfloat16()
        x = torch.randn(T, C + 8, generator=gen).bfloat16()[:, 4:4 + C]
        cu = torch.tensor([0, 5, 13], dtype=torch.int32)
        idx = torch.tensor([2, 0], dtype=torch.int64)
        init = torch.tensor([True, False])
        st0 = torch.randn(3, C, W - 1, generator=gen).bfloat16()
        torch.library.opcheck(torch.ops.stridepack.causal_conv1d.default,
                              (x, weight, None, cu, st0.clone(), idx, init,
                               torch.empty(T, C, dtype=torch.bfloat16), None, None, None, True,
                               False, False))

        def prefill_then_step(x, state, x1):
            out = torch.empty(x.shape, dtype=torch.bfloat16)
            sp.causal_conv1d(x, weight, cu, state, idx, has_initial_state=init, out=out)
            y1 = torch.empty(x1.shape, dtype=torch.bfloat16)
            sp.causal_conv1d_update(x1, weight, state, idx, out=y1)
            return out, y1

        x1 = torch.randn(2, C, generator=gen).bfloat16()
        s_eager, s_comp = st0.clone(), st0.clone()
        want = prefill_then_step(x, s_eager, x1)
        got = torch.compile(prefill_then_step, fullgraph=True, backend="aot_eager")(x, s_comp,
                                                                                      x1)
        for a, b in zip(got, want):
            self.assertTrue(bits_equal(a, b))
        self.assertTrue(bits_equal(s_comp, s_eager))

        from stridepack.vllm import causal_conv1d_fn, causal_conv1d_update

        def vllm_calls(xt, states, x1):
            y = causal_conv1d_fn(xt, weight, None, states, cu, cache_indices=idx,
                                 has_initial_state=init, activation="silu")
            return y, causal_conv1d_update(x1, states, weight, activation=True,
                                           conv_state_indices=idx)

        s_eager, s_comp = st0.clone(), st0.clone()
        want = vllm_calls(x.t(), s_eager, x1)
        got = torch.compile(vllm_calls, fullgraph=True, backend="aot_eager")(x.t(), s_comp, x1)
        for a, b in zip(got, want):
            self.assertTrue(bits_equal(a, b))
        self.assertTrue(bits_equal(s_comp, s_eager))

    def test_prefill_op_with_the_engine_arguments(self):
        # stridepack::kda_prefill carries has_initial_state, a verify table,
        # num_accepted_tokens, index arrays of either width and beta_form.
        gen = torch.Generator().manual_seed(22)
        args, _ = kda_inputs(gen, T=8, H=2)
        W, slots = 4, 10
        table = torch.randperm(slots, generator=gen)[:2 * W].view(2, W).to(torch.int64)
        acc = torch.tensor([2, 1], dtype=torch.int32)
        has = torch.tensor([True, False])
        cu = torch.tensor([0, 3, 7], dtype=torch.int32)
        pool0 = 0.1 * torch.randn(slots, 2, 128, 128, generator=gen)
        x = {n: args[n] for n in ("q", "k", "v", "g", "beta", "A_log", "dt_bias")}

        def step(pool, o):
            sp.kda_prefill(**x, cu_seqlens=cu, state=pool, state_indices=table, o=o,
                           num_accepted_tokens=acc, has_initial_state=has,
                           beta_form="logits_x2", gate="softplus")
            return o.float().sum()

        p_e, p_c = pool0.clone(), pool0.clone()
        o_e, o_c = (torch.zeros(1, 8, 2, 128, dtype=torch.bfloat16) for _ in range(2))
        step(p_e, o_e)
        torch.compile(step, fullgraph=True, backend="aot_eager")(p_c, o_c)
        self.assertTrue(bits_equal(o_c, o_e))
        self.assertTrue(torch.equal(p_c, p_e))
        self.assertFalse(torch.equal(p_c, pool0))

    def test_fla_dropin_ops(self):
        from stridepack.fla import chunk_kda, fused_recurrent_kda_fwd
        gen = torch.Generator().manual_seed(21)
        args, _ = kda_inputs(gen, T=24, H=2)
        flags = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                     use_beta_sigmoid_in_kernel=True)
        h0 = 0.1 * torch.randn(2, 2, 128, 128, generator=gen)

        def prefill(q, k, v, g, beta):
            return chunk_kda(q, k, v, g, beta, A_log=args["A_log"], dt_bias=args["dt_bias"],
                             initial_state=h0, output_final_state=True,
                             cu_seqlens=args["cu_seqlens"], **flags)

        x = [args[n] for n in ("q", "k", "v", "g", "beta")]
        want = prefill(*x)
        got = torch.compile(prefill, fullgraph=True, backend="aot_eager")(*x)
        self.assertTrue(bits_equal(got[0], want[0]) and torch.equal(got[1], want[1]))

        pool0 = 0.1 * torch.randn(5, 2, 128, 128, generator=gen)
        dec = {n: args[n][:, :4] for n in ("q", "k", "v", "g", "beta")}
        cu = torch.arange(5, dtype=torch.int32)
        idx = torch.tensor([3, -1, 0, 4], dtype=torch.int32)

        def decode(pool, q, k, v, g, beta):
            o, ht = fused_recurrent_kda_fwd(q, k, v, g, beta, A_log=args["A_log"],
                                            dt_bias=args["dt_bias"], initial_state=pool,
                                            state_v_first=True, cu_seqlens=cu,
                                            ssm_state_indices=idx, **flags)
            return o, ht

        p_eager, p_comp = pool0.clone(), pool0.clone()
        o1, h1 = decode(p_eager, *dec.values())
        o2, h2 = torch.compile(decode, fullgraph=True, backend="aot_eager")(p_comp,
                                                                            *dec.values())
        self.assertTrue(bits_equal(o1, o2))
        self.assertTrue(torch.equal(p_eager, p_comp) and torch.equal(h2, p_comp))
        self.assertFalse(torch.equal(p_comp, pool0))


if __name__ == "__main__":
    sp_unittest.main(__name__)
