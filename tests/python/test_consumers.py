"""The inputs boundary in front of other KDA kernels, on their real outputs:
for FlashKDA, its fork (Flash-Flash-KDA) and fla's chunk_kda, o and the
final state computed from the strided K3 views through KdaInputs.pack are
bit-identical to the same kernel on dense copies (.contiguous()). Cases: K3
TP1 (H = 96) and TP8 (H = 12) at T = 16384; a varlen batch with short,
tail and empty sequences; fp32 and bf16 state; q, k, v, g dense with only
beta strided (exactly one input copied); eager, and captured in a CUDA
graph replayed after new input contents are written at the same addresses.

The consumers are not part of stridepack: they are built (FlashKDA, the
fork) or imported (fla) from their sources under $SP_ANCHOR_DIR by
bench/kda_anchors.py, into $SP_ANCHOR_BUILD. SP_CONSUMER picks one (each
in its own process: a kernel fault ends the process's CUDA context).
Exits 77 without torch, CUDA, the KDA part, or the consumer's sources.

Run: SP_ANCHOR_DIR=... SP_CONSUMER=flashkda PYTHONPATH=<build>/python \\
     python3 tests/python/test_consumers.py
"""

import os
import sys
import unittest

import sp_unittest

torch = sp_unittest.torch_with_cuda()

import stridepack as sp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import kda_anchors as ka  # noqa: E402

CONSUMER = os.environ.get("SP_CONSUMER", "flashkda")
DEV = torch.device("cuda", 0)
D = 128


def load_consumer():
    """(call, reason): call(x, q, k, v, g, beta, state0) -> (o, final state)."""
    try:
        if CONSUMER in ("flashkda", "ffkda"):
            mods, skipped = ka.build_anchors([CONSUMER])
            if CONSUMER not in mods:
                return None, skipped.get(CONSUMER, "not built")[:400]
            mod = mods[CONSUMER]

            def call(x, q, k, v, g, beta, state0):
                T, H, N = x["T"], x["H"], x["N"]
                o = torch.empty(1, T, H, D, dtype=torch.bfloat16, device=DEV)
                fs = torch.empty_like(state0)
                ws = x.setdefault("_ws", torch.empty(int(mod.get_workspace_size(T, H, N)),
                                                     dtype=torch.uint8, device=DEV))
                mod.fwd(q, k, v, g, beta, float(ka.SCALE), o, ws, x["A_log"],
                        x["dt_bias"].view(H, D), float(ka.LOWER_BOUND), initial_state=state0,
                        final_state=fs, cu_seqlens=x["cu"])
                return o, fs
            return call, None
        if CONSUMER == "fla":
            ka.fla_without_autotuning()  # compile time (see kda_anchors); fla's arithmetic
            chunk_kda = ka.import_fla()

            def call(x, q, k, v, g, beta, state0):
                with torch.inference_mode():
                    o, fs = chunk_kda(q, k, v, g, beta, scale=ka.SCALE, initial_state=state0,
                                      output_final_state=True, use_qk_l2norm_in_kernel=True,
                                      use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                                      safe_gate=True, lower_bound=ka.LOWER_BOUND,
                                      state_v_first=True, cu_seqlens=x["cu"],
                                      cu_seqlens_cpu=x["cu_cpu"], A_log=x["A_log"],
                                      dt_bias=x["dt_bias"])
                return o, fs
            return call, None
        return None, f"unknown consumer {CONSUMER!r}"
    except Exception as e:  # noqa: BLE001 - an absent consumer skips
        return None, f"{type(e).__name__}: {str(e)[-400:]}"


CALL, WHY = load_consumer()
if CALL is None:
    print(f"SKIP: consumer {CONSUMER}: {WHY}")
    sys.exit(77)


def k3_views(x, only_beta=False):
    """The K3 producers' layout of x's inputs: q, k, v column slices of one
    [T, 3P] buffer, g the first T rows of a longer buffer, beta a column
    slice of [T, 128 + H]; only_beta: q, k, v, g dense, beta strided."""
    T, H = x["T"], x["H"]
    P = H * D
    qkv = torch.empty(T, 3 * P, dtype=torch.bfloat16, device=DEV)
    fab = torch.empty(T, 128 + H, dtype=torch.bfloat16, device=DEV)
    gbuf = torch.empty(T + 3, H, D, dtype=torch.bfloat16, device=DEV)
    views = [qkv[:, i * P:(i + 1) * P].view(1, T, H, D) for i in range(3)]
    views += [gbuf[:T].unsqueeze(0), fab[:, 128:].view(1, T, H)]
    if only_beta:
        views[:4] = [torch.empty(1, T, H, D, dtype=torch.bfloat16, device=DEV) for _ in range(4)]
    fill(x, views)
    return views


def fill(x, views):
    for view, name in zip(views, ("q", "k", "v", "g", "beta")):
        view.copy_(x[name])


def same_bits(a, b):
    a, b = a.contiguous(), b.contiguous()
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    w = torch.int16 if a.element_size() == 2 else torch.int32
    return torch.equal(a.view(w), b.view(w))


class Consumer(unittest.TestCase):
    def compare(self, lengths, H, state_dtype=torch.float32, only_beta=False, seed=0):
        x = ka.make_inputs(lengths, H, DEV, seed=seed)
        state0 = x["state0"].to(state_dtype)
        views = k3_views(x, only_beta)
        inputs = sp.KdaInputs(DEV, x["T"], H)
        n = sp.copy_pass_count()
        packed = inputs.pack(*views)
        self.assertEqual(sp.copy_pass_count() - n, 1)
        copied = sum(p.data_ptr() != v.data_ptr() for p, v in zip(packed, views))
        self.assertEqual(copied, 1 if only_beta else 4)
        try:
            o1, s1 = CALL(x, *packed, state0)
        except Exception as e:  # noqa: BLE001
            if state_dtype != torch.float32:
                self.skipTest(f"{CONSUMER} does not take a {state_dtype} state: {str(e)[:200]}")
            raise
        o2, s2 = CALL(x, *[v.contiguous() for v in views], state0)
        torch.cuda.synchronize()
        self.assertTrue(bool(torch.isfinite(o1.float()).all()), "o not finite")
        self.assertTrue(same_bits(o1, o2), "o differs from the consumer on dense copies")
        self.assertTrue(same_bits(s1, s2), "final state differs")
        return x, views, inputs, state0

    def test_k3_tp1(self):
        self.compare([16384], 96, seed=1)

    def test_k3_tp8(self):
        self.compare([16384], 12, seed=2)

    def test_bf16_state(self):
        self.compare([16384], 12, state_dtype=torch.bfloat16, seed=3)

    def test_only_beta_strided(self):
        self.compare([16384], 12, only_beta=True, seed=4)

    def test_graph_replay_with_new_contents(self):
        x, views, inputs, state0 = self.compare([4096, 4096], 12, seed=5)
        out = {}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out["r"] = CALL(x, *inputs.pack(*views), state0)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                out["r"] = CALL(x, *inputs.pack(*views), state0)
        except Exception as e:  # noqa: BLE001
            self.skipTest(f"{CONSUMER} is not capturable: {type(e).__name__}: {str(e)[:200]}")
        y = ka.make_inputs([4096, 4096], 12, DEV, seed=6)
        fill(y, views)  # new contents at the captured addresses
        graph.replay()
        o_dense, s_dense = CALL(x, *[v.contiguous() for v in views], state0)
        torch.cuda.synchronize()
        self.assertTrue(same_bits(out["r"][0], o_dense), "replayed o differs")
        self.assertTrue(same_bits(out["r"][1], s_dense), "replayed state differs")

    def test_varlen_short_tail_empty(self):  # last: an empty sequence is the riskiest case
        self.compare([1, 15, 0, 33, 4047, 64], 12, seed=7)


if __name__ == "__main__":
    sp_unittest.main(__name__)
