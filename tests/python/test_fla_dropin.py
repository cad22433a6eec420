"""stridepack.fla against fla itself, on the same inputs (GPU): for a grid of
fla's options, the drop-in's outputs and states against fla's own, shapes,
dtypes and layouts identical, and the same error types for the same invalid
inputs; and the example layer (docs/examples/kda_layer.py) through the
drop-in against the same layer through fla.

Both compute the same function; each is within its own distance of the
float64 recurrence (fla's chunk_kda about 4e-3 in o and 2.8e-3 in the final
state, stridepack's chunked kernels 3e-3 and 2.4e-3; the recurrent kernels
fp32), so the drop-in and fla are compared with the sum of the two bounds.

fla is imported from $SP_ANCHOR_DIR/fla as in bench/kda_anchors.py, its
Triton autotuners cut to their first config (kda_anchors.fla_without_autotuning:
fla's arithmetic, one tiling, each kernel compiled once); exits 77 without
torch, CUDA, stridepack's CUDA backend, or fla's sources.

Run: SP_ANCHOR_DIR=... PYTHONPATH=<build>/python python3 tests/python/test_fla_dropin.py
"""

import importlib.util
import os
import sys
import unittest

import sp_unittest

torch = sp_unittest.torch_with_cuda()

import stridepack as sp
import stridepack.fla as dropin

if not sp.cuda_available():
    print("SKIP: this stridepack build has no CUDA backend, or no usable device")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import kda_anchors as ka  # noqa: E402

try:
    ka.fla_without_autotuning()  # compile time: fla's kernels with their first config
    fla_chunk = ka.import_fla_op("fla.ops.kda.chunk", "chunk_kda")
    fla_recurrent_fwd = ka.import_fla_op("fla.ops.kda.fused_recurrent", "fused_recurrent_kda_fwd")
    fla_recurrent = ka.import_fla_op("fla.ops.kda.fused_recurrent", "fused_recurrent_kda")
except Exception as e:  # noqa: BLE001
    print(f"SKIP: fla is not importable from {ka.ANCHOR_DIR}: {type(e).__name__}: {e}")
    sys.exit(77)

DEV = torch.device("cuda", 0)
D = 128
O_TOL, S_TOL = 4e-3 + 3e-3, 2.8e-3 + 2.4e-3  # chunked: fla's bound + stridepack's
R_TOL = 1e-4                                  # two fp32 recurrences


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def inputs(T, H, gen, gate, beta_form, B=1):
    def bf16(*shape, lo=-1.0, hi=1.0):
        return (torch.rand(*shape, generator=gen) * (hi - lo) + lo).bfloat16().to(DEV)
    x = dict(q=bf16(B, T, H, D), k=bf16(B, T, H, D), v=bf16(B, T, H, D))
    if gate == "log_decay":  # fla's use_gate_in_kernel=False: the log-decay itself
        x["g"] = (-torch.rand(B, T, H, D, generator=gen) * 2).to(DEV)
    else:
        x["g"] = bf16(B, T, H, D, lo=-4, hi=1.5)
    if beta_form == "activated":
        x["beta"] = torch.rand(B, T, H, generator=gen).bfloat16().to(DEV)
    else:
        x["beta"] = bf16(B, T, H, lo=-3, hi=3)
    x["A_log"] = (torch.rand(H, generator=gen) - 0.5).to(DEV)
    x["dt_bias"] = (torch.rand(H * D, generator=gen) - 0.5).to(DEV)
    return x


def options(gate, beta_form):
    o = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=gate != "log_decay",
             use_beta_sigmoid_in_kernel=beta_form != "activated",
             allow_neg_eigval=beta_form == "logits_x2")
    if gate == "lower_bound":
        o.update(safe_gate=True, lower_bound=-5.0)
    return o


class ChunkKda(unittest.TestCase):
    def test_grid(self):
        gen = torch.Generator().manual_seed(90)
        cu = torch.tensor([0, 300, 300, 1000, 1037], dtype=torch.int64, device=DEV)  # one empty
        T, H, N = 1037, 4, 4
        for gate in ("lower_bound", "softplus", "log_decay"):
            for beta_form in ("logits", "activated", "logits_x2"):
                x = inputs(T, H, gen, gate, beta_form)
                for v_first in (False, True):
                    for h0 in (None, "given"):
                        with self.subTest(gate=gate, beta=beta_form, v_first=v_first, h0=h0):
                            init = None if h0 is None else \
                                0.1 * torch.randn(N, H, D, D, generator=gen).to(DEV)
                            kw = dict(x, **options(gate, beta_form), initial_state=init,
                                      output_final_state=True, state_v_first=v_first,
                                      cu_seqlens=cu)
                            kw_fla = dict(kw)
                            if gate != "lower_bound":
                                kw_fla.pop("safe_gate", None)
                            o1, s1 = dropin.chunk_kda(**kw)
                            o2, s2 = fla_chunk(**kw_fla)
                            self.assertEqual((o1.shape, o1.dtype), (o2.shape, o2.dtype))
                            self.assertEqual((s1.shape, s1.dtype), (s2.shape, s2.dtype))
                            self.assertLess(rel(o1, o2), O_TOL)
                            self.assertLess(rel(s1, s2), S_TOL)

    def test_equal_batch_and_no_final_state(self):
        gen = torch.Generator().manual_seed(91)
        x = inputs(256, 2, gen, "softplus", "logits", B=3)
        kw = dict(x, **options("softplus", "logits"))
        o1, s1 = dropin.chunk_kda(**kw)
        o2, s2 = fla_chunk(**kw)
        self.assertIsNone(s1)
        self.assertIsNone(s2)
        self.assertEqual(o1.shape, o2.shape)
        self.assertLess(rel(o1, o2), O_TOL)

    def test_same_error_types(self):
        gen = torch.Generator().manual_seed(92)
        x = inputs(64, 2, gen, "softplus", "logits", B=2)
        cu = torch.tensor([0, 64, 128], dtype=torch.int64, device=DEV)
        flat = {n: x[n].reshape(1, -1, *x[n].shape[2:]) for n in ("q", "k", "v", "g", "beta")}
        bad = [dict(cu_seqlens=cu),  # B != 1 with cu_seqlens
               # N mismatch (fla checks it with cu_seqlens only; stridepack refuses it always)
               dict(flat, cu_seqlens=cu, initial_state=torch.zeros(3, 2, D, D, device=DEV)),
               dict(k=x["k"][:, :32]), dict(g=x["g"][:, :32]),  # shapes (fla: assertions)
               dict(beta=x["beta"][:, :32]), dict(chunk_size=16),
               dict(safe_gate=True), dict(state_v_first=True, transpose_state_layout=True)]
        for change in bad:
            with self.subTest(change=sorted(change)):
                kw = dict(x, **options("softplus", "logits"), **change)
                types = []
                for f in (dropin.chunk_kda, fla_chunk):
                    try:
                        f(**kw)
                        types.append(None)
                    except Exception as e:  # noqa: BLE001
                        types.append(type(e))
                self.assertIsNotNone(types[1], "fla accepted it")
                self.assertTrue(types[0] is not None and issubclass(types[0], types[1]),
                                f"drop-in {types[0]}, fla {types[1]}")


class FusedRecurrent(unittest.TestCase):
    def test_decode_on_a_pool_both_layouts(self):
        gen = torch.Generator().manual_seed(93)
        N, H, slots = 16, 4, 24
        for gate in ("lower_bound", "softplus", "log_decay"):
            for beta_form in ("logits", "activated"):
                x = inputs(N, H, gen, gate, beta_form)
                cu = torch.arange(N + 1, dtype=torch.int64, device=DEV)
                idx = torch.randperm(slots, generator=gen)[:N].to(torch.int32).to(DEV)
                pool0 = 0.1 * torch.randn(slots, H, D, D, generator=gen).to(DEV)
                for v_first in (False, True):
                    with self.subTest(gate=gate, beta=beta_form, v_first=v_first):
                        opts = options(gate, beta_form)
                        opts.pop("safe_gate", None)
                        p1, p2 = pool0.clone(), pool0.clone()
                        kw = dict(x, **opts, cu_seqlens=cu, ssm_state_indices=idx,
                                  state_v_first=v_first, inplace_final_state=True)
                        o1, _ = dropin.fused_recurrent_kda_fwd(**kw, initial_state=p1)
                        o2, _ = fla_recurrent_fwd(**kw, initial_state=p2)
                        self.assertEqual((o1.shape, o1.dtype), (o2.shape, o2.dtype))
                        self.assertLess(rel(o1, o2), R_TOL)
                        self.assertLess(rel(p1, p2), R_TOL)

    def test_verify_table(self):
        gen = torch.Generator().manual_seed(94)
        N, H, W, slots = 8, 4, 4, 40
        x = inputs(N * W, H, gen, "softplus", "logits")
        cu = torch.arange(N + 1, dtype=torch.int64, device=DEV) * W
        table = torch.randperm(slots, generator=gen)[:N * W].view(N, W).to(torch.int32).to(DEV)
        acc = torch.randint(1, W + 1, (N,), generator=gen, dtype=torch.int32).to(DEV)
        pool0 = 0.1 * torch.randn(slots, H, D, D, generator=gen).to(DEV)
        opts = options("softplus", "logits")
        for v_first in (False, True):
            with self.subTest(v_first=v_first):
                p1, p2 = pool0.clone(), pool0.clone()
                kw = dict(x, **opts, cu_seqlens=cu, ssm_state_indices=table,
                          num_accepted_tokens=acc, state_v_first=v_first,
                          inplace_final_state=True)
                o1, _ = dropin.fused_recurrent_kda_fwd(**kw, initial_state=p1)
                o2, _ = fla_recurrent_fwd(**kw, initial_state=p2)
                self.assertLess(rel(o1, o2), R_TOL)
                self.assertLess(rel(p1, p2), R_TOL)

    def test_without_a_pool(self):
        """fused_recurrent_kda on B sequences: stridepack's prefill picks its
        kernel by the tokens a sequence (docs: AUTO), so 4 tokens run a
        recurrence (fla's bound with it: R_TOL) and 40 the chunked kernel
        (its documented bound: O_TOL, S_TOL)."""
        gen = torch.Generator().manual_seed(95)
        for T, o_tol, s_tol in ((4, R_TOL, R_TOL), (40, O_TOL, S_TOL)):
            with self.subTest(T=T):
                x = inputs(T, 2, gen, "softplus", "logits", B=2)
                h0 = 0.1 * torch.randn(2, 2, D, D, generator=gen).to(DEV)
                kw = dict(x, **options("softplus", "logits"), initial_state=h0,
                          output_final_state=True)
                o1, s1 = dropin.fused_recurrent_kda(**kw)
                o2, s2 = fla_recurrent(**kw)
                self.assertEqual((s1.shape, s1.dtype), (s2.shape, s2.dtype))
                self.assertLess(rel(o1, o2), o_tol)
                self.assertLess(rel(s1, s2), s_tol)


class Layer(unittest.TestCase):
    def test_example_layer_through_the_dropin_and_fla(self):
        spec = importlib.util.spec_from_file_location(
            "kda_layer", os.path.join(HERE, "..", "..", "docs", "examples", "kda_layer.py"))
        kl = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(kl)
        for size in ("small", "kimi-linear"):
            with self.subTest(size=size):
                _, y1, ys1 = kl.run(size, "cuda", tokens=256, api="fla", pad=False)
                _, y2, ys2 = kl.run(size, "cuda", tokens=256, api="fla", pad=False,
                                    fla_calls=(fla_chunk, fla_recurrent_fwd))
                self.assertLess(rel(y1, y2), 2e-2)
                for a, b in zip(ys1, ys2):
                    self.assertLess(rel(a, b), 2e-2)


if __name__ == "__main__":
    sp_unittest.main(__name__)
