"""GPU tests of the Python binding with PyTorch: the K3 views (q, k, v column
slices of [T, 3P], beta slices of both fused widths) packed in one launch
and compared with .contiguous() through int16 views; CUDA graph capture and
replay with new inputs; the framework's current stream; the autograd
fallback; pack_into; torch.compile(fullgraph=True) through the custom ops,
bit-equal to eager, inside CUDA graphs; the KDA boundary on CUDA; the causal
convolution on CUDA against the CPU backend. Exits 77 without torch or CUDA."""

import sys
import unittest
import warnings

import sp_unittest

torch = sp_unittest.torch_with_cuda()

import stridepack as sp
from stridepack import _api, _native

if not sp.cuda_available():
    print("SKIP: this stridepack build has no CUDA backend, or no usable device")
    sys.exit(77)

DEV = torch.device("cuda", 0)
POISON = 0xA5


def rand_bf16(gen, *shape):
    """Random bit patterns, NaN payloads and infinities included."""
    bits = torch.randint(-32768, 32768, shape, dtype=torch.int16, device=DEV, generator=gen)
    return bits.view(torch.bfloat16)


def bits_equal(a, b):
    return (a.shape == b.shape and a.dtype == b.dtype
            and torch.equal(a.detach().view(torch.int16), b.detach().view(torch.int16)))


def k3_views(gen, T, H):
    """q, k, v, g (the first T rows of a longer buffer: dense), beta at
    column 128 of [T, 128+H] and beta at column 4P+128 of [T, 4P+128+H]."""
    P = H * 128
    qkv = rand_bf16(gen, T, 3 * P)
    fab = rand_bf16(gen, T, 128 + H)
    fused = rand_bf16(gen, T, 4 * P + 128 + H)
    gbuf = rand_bf16(gen, T + 7, H, 128)
    q, k, v = (qkv[:, i * P:(i + 1) * P].view(1, T, H, 128) for i in range(3))
    xs = [q, k, v, gbuf[:T].unsqueeze(0), fab[:, 128:].view(1, T, H),
          fused[:, 4 * P + 128:].view(1, T, H)]
    return xs, (qkv, fab, fused, gbuf)


def capture(fn):
    """A CUDA graph of fn, warmed up first on a side stream as torch asks."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


class K3(unittest.TestCase):
    def check(self, xs, outs, ws):
        lo, hi = ws.data_ptr(), ws.data_ptr() + ws.numel()
        for i, (x, o) in enumerate(zip(xs, outs)):
            self.assertTrue(o.is_contiguous(), i)
            self.assertEqual(o.device, x.device)
            if x.is_contiguous():
                self.assertIs(o, x)
            else:
                self.assertTrue(lo <= o.data_ptr() < hi, f"output {i} is not in the workspace")
            self.assertTrue(bits_equal(o, x.contiguous()), f"output {i} differs")

    def test_k3_tp1_one_launch_no_allocation(self):
        gen = torch.Generator(device=DEV).manual_seed(1)
        xs, _ = k3_views(gen, 16384, 96)
        need = sp.workspace_bytes(xs)
        ws = torch.full((need,), POISON, dtype=torch.uint8, device=DEV)
        torch.cuda.synchronize()
        allocs = torch.cuda.memory_stats()["allocation.all.allocated"]
        passes = sp.copy_pass_count()
        outs = sp.pack(xs, workspace=ws)
        self.assertEqual(torch.cuda.memory_stats()["allocation.all.allocated"], allocs,
                         "pack allocated with a workspace given")
        self.assertEqual(sp.copy_pass_count() - passes, 1)
        torch.cuda.synchronize()
        self.check(xs, outs, ws)
        self.assertIs(outs[3], xs[3])

    def test_k3_tp8_and_small_t(self):
        gen = torch.Generator(device=DEV).manual_seed(2)
        for T, H in ((16384, 12), (1024, 96), (64, 96), (1, 96), (0, 96)):
            with self.subTest(T=T, H=H):
                xs, _ = k3_views(gen, T, H)
                ws = torch.full((max(sp.workspace_bytes(xs), 1),), POISON, dtype=torch.uint8,
                                device=DEV)
                outs = sp.pack(xs, workspace=ws)
                torch.cuda.synchronize()
                self.check(xs, outs, ws)

    def test_repeated_calls_copy_current_contents(self):
        # Repeats reuse the arguments built for the first call: they must
        # still copy what the inputs hold now, and other views get their own.
        gen = torch.Generator(device=DEV).manual_seed(5)
        xs, bufs = k3_views(gen, 300, 8)
        ws = torch.full((sp.workspace_bytes(xs),), POISON, dtype=torch.uint8, device=DEV)
        first = sp.pack(xs, workspace=ws)
        torch.cuda.synchronize()
        self.check(xs, first, ws)
        for b in bufs:  # new contents at the same addresses
            b.view(torch.int16).random_(-32768, 32768, generator=gen)
        passes = sp.copy_pass_count()
        again = sp.pack(xs, workspace=ws)
        self.assertEqual(sp.copy_pass_count() - passes, 1)
        torch.cuda.synchronize()
        self.check(xs, again, ws)
        ys, _ = k3_views(gen, 300, 8)  # the same layout at other addresses
        other = sp.pack(ys, workspace=ws)
        torch.cuda.synchronize()
        self.check(ys, other, ws)
        if hasattr(torch, "_neg_view"):  # same address and strides, other values
            negs = [torch._neg_view(y) for y in ys]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outs = sp.pack(negs, workspace=ws)
            torch.cuda.synchronize()
            for n, o in zip(negs, outs):
                # resolve_neg materializes the negation (a dense input comes
                # back as the negated view itself; int16 views ignore the bit).
                self.assertTrue(bits_equal(o.resolve_neg(), n.resolve_neg()),
                                "a negated view came back un-negated")
            d = torch.empty(negs[0].shape, dtype=negs[0].dtype, device=DEV)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sp.copy_batch([(negs[0], d)])
            torch.cuda.synchronize()
            self.assertTrue(bits_equal(d, negs[0].resolve_neg()), "copy_batch dropped a negation")

    def test_graph_capture_and_replay(self):
        gen = torch.Generator(device=DEV).manual_seed(3)
        xs, bufs = k3_views(gen, 2048, 96)
        ws = torch.empty(sp.workspace_bytes(xs), dtype=torch.uint8, device=DEV)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture, as torch asks
            sp.pack(xs, workspace=ws)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        passes = sp.copy_pass_count()
        with torch.cuda.graph(graph):
            outs = sp.pack(xs, workspace=ws)
        self.assertEqual(sp.copy_pass_count() - passes, 1)
        for _ in range(3):  # new contents at the same addresses
            for b in bufs:
                b.copy_(rand_bf16(gen, *b.shape))
            ws.fill_(POISON)
            graph.replay()
            torch.cuda.synchronize()
            self.check(xs, outs, ws)
        self.assertEqual(sp.copy_pass_count() - passes, 1, "replay went through the library")

    def test_runs_on_current_stream(self):
        # A non-blocking stream writes the input after a long sleep; only a
        # pack ordered on that same stream sees the new contents.
        gen = torch.Generator(device=DEV).manual_seed(4)
        buf = rand_bf16(gen, 4096, 3 * 1024)
        new = rand_bf16(gen, 4096, 3 * 1024)
        x = buf[:, 1024:2048]
        ws = torch.full((sp.workspace_bytes([x]),), POISON, dtype=torch.uint8, device=DEV)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            torch.cuda._sleep(200_000_000)
            buf.copy_(new)
            out = sp.pack([x], workspace=ws)[0]
            dst = torch.full((1024, 4096), 7, dtype=torch.bfloat16, device=DEV).t()
            sp.copy_batch([(x, dst)])
        s.synchronize()
        self.assertTrue(bits_equal(out, new[:, 1024:2048].contiguous()))
        self.assertTrue(bits_equal(dst.contiguous(), new[:, 1024:2048].contiguous()))


class Fallback(unittest.TestCase):
    def setUp(self):
        _api._reset_warnings()

    def test_requires_grad_falls_back_once(self):
        P = 4 * 128
        base = torch.randn(64, 3 * P, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        q, k = base[:, :P].view(1, 64, 4, 128), base[:, P:2 * P].view(1, 64, 4, 128)
        passes = sp.copy_pass_count()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            o1 = sp.pack([q, k])
            o2 = sp.pack([q, k])
        self.assertEqual(sp.copy_pass_count(), passes, "the library ran under autograd")
        msgs = [str(m.message) for m in w if issubclass(m.category, sp.FallbackWarning)]
        self.assertEqual(len(msgs), 1, msgs)
        self.assertIn("autograd", msgs[0])
        for o, x in ((o1[0], q), (o1[1], k), (o2[0], q)):
            self.assertTrue(bits_equal(o, x.contiguous()))
            self.assertIsNotNone(o.grad_fn)
        (o1[0].float().sum() + 2 * o1[1].float().sum()).backward()
        grad = base.grad.float()
        self.assertTrue(torch.equal(grad[:, :P], torch.ones_like(grad[:, :P])))
        self.assertTrue(torch.equal(grad[:, P:2 * P], torch.full_like(grad[:, :P], 2)))
        self.assertTrue(torch.equal(grad[:, 2 * P:], torch.zeros_like(grad[:, :P])))
        with torch.no_grad():  # not recording: the library again
            o3 = sp.pack([q])[0]
        self.assertEqual(sp.copy_pass_count() - passes, 1)
        self.assertTrue(bits_equal(o3, q.contiguous()))


class TorchDLPack:
    """A torch tensor seen only through __dlpack__ (an unknown producer)."""

    def __init__(self, t):
        self.t = t

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__(stream=stream)


class DLPackPath(unittest.TestCase):
    def test_dlpack_reads_what_torch_reports(self):
        # The binding reads plain torch tensors directly; the DLPack export
        # of the same tensor must describe the same view.
        base = torch.zeros(64, 3 * 512, dtype=torch.bfloat16, device=DEV)
        for x in (base[:, 512:1024].view(1, 64, 4, 128), base.t()[3:9], base[5, ::3],
                  torch.zeros(3, 5, dtype=torch.int64).t()):
            a, b = _native.describe(x), _native.describe(x, True)
            self.assertEqual(a[:1] + a[3:], b[:1] + b[3:])
            self.assertEqual(a[1], b[1])
            self.assertEqual([s for s, n in zip(a[2], a[1]) if n > 1],
                             [s for s, n in zip(b[2], b[1]) if n > 1])

    def test_copy_batch_through_dlpack(self):
        gen = torch.Generator(device=DEV).manual_seed(7)
        src = rand_bf16(gen, 300, 3 * 640)[:, 640:1280]
        dst = torch.full((640, 300), 5, dtype=torch.bfloat16, device=DEV).t()
        torch.cuda.synchronize()  # an unknown producer runs on the legacy stream
        sp.copy_batch([(TorchDLPack(src), TorchDLPack(dst))])
        torch.cuda.synchronize()
        self.assertTrue(bits_equal(dst.contiguous(), src.contiguous()))


class DirectReads(unittest.TestCase):
    def test_on_and_equal_to_attribute_reads(self):
        # torch 2.6 and later export the C shim the binding reads tensors
        # through; the eager host cost measured in bench/ depends on it.
        major, minor = (int(p) for p in torch.__version__.split(".")[:2])
        if (major, minor) < (2, 6):
            self.skipTest(f"torch {torch.__version__}: the shim is not required before 2.6")
        self.assertTrue(_native.direct_reads(), "torch's C shim was not taken into use")
        self.assertFalse(hasattr(_native, "impl_slot"), "the object-memory read is back")
        gen = torch.Generator().manual_seed(12)
        xs = sp_unittest.torch_views(torch, gen, 300, device=DEV)
        xs += k3_views(torch.Generator(device=DEV).manual_seed(13), 33, 4)[0]
        sp_unittest.check_direct_reads(self, _native, xs)

    def test_pack_the_same_both_ways(self):
        gen = torch.Generator(device=DEV).manual_seed(14)
        xs, _ = k3_views(gen, 77, 4)
        ws = torch.empty(sp.workspace_bytes(xs), dtype=torch.uint8, device=DEV)
        try:
            for on in (True, False, True):
                _native.direct_reads(on)
                outs = sp.pack(xs, workspace=ws)
                torch.cuda.synchronize()
                for o, x in zip(outs, xs):
                    self.assertTrue(bits_equal(o, x.contiguous()))
        finally:
            _native.direct_reads(True)


class Errors(unittest.TestCase):
    def test_device_mismatch(self):
        a = torch.zeros(8, 16, device=DEV)
        with self.assertRaises(sp.StridepackError) as cm:
            sp.copy_batch([(a.t(), torch.empty(16, 8))])
        self.assertEqual(cm.exception.status, "SP_ERR_DEVICE_MISMATCH")
        self.assertTrue(cm.exception.message)
        with self.assertRaises(sp.StridepackError) as cm:
            sp.pack([a.t()], workspace=torch.empty(4096, dtype=torch.uint8))
        self.assertEqual(cm.exception.status, "SP_ERR_DEVICE_MISMATCH")


class PackInto(unittest.TestCase):
    def test_k3_into_own_buffers_and_graph(self):
        gen = torch.Generator(device=DEV).manual_seed(8)
        xs, bufs = k3_views(gen, 2048, 96)
        outs = [torch.full(x.shape, 7, dtype=x.dtype, device=DEV) for x in xs]
        passes = sp.copy_pass_count()
        self.assertIs(sp.pack_into(xs, outs), outs)
        self.assertEqual(sp.copy_pass_count() - passes, 1)
        torch.cuda.synchronize()
        for x, o in zip(xs, outs):
            self.assertTrue(bits_equal(o, x.contiguous()))
        graph = capture(lambda: sp.pack_into(xs, outs))
        for b in bufs:
            b.copy_(rand_bf16(gen, *b.shape))
        graph.replay()
        torch.cuda.synchronize()
        for x, o in zip(xs, outs):
            self.assertTrue(bits_equal(o, x.contiguous()))


HAVE_OPS = hasattr(torch.library, "custom_op")


@unittest.skipUnless(HAVE_OPS, f"torch {torch.__version__} has no torch.library.custom_op")
class Compiled(unittest.TestCase):
    """torch.compile (inductor) of functions that pack the K3 views."""

    def setUp(self):
        torch._dynamo.reset()
        self.assertTrue(sp.register_torch_ops())

    def test_fullgraph_matches_eager_bit_for_bit(self):
        gen = torch.Generator(device=DEV).manual_seed(9)
        xs, _ = k3_views(gen, 1024, 8)

        # Integer arithmetic on the packed bits: exact in any kernel (float
        # arithmetic on random bit patterns would compare NaN payloads).
        def fn(q, k, v, g, beta, beta2):
            q, k, v, g, beta, beta2 = sp.pack([q, k, v, g, beta, beta2])
            return q, k, v, g, beta, beta2, q.view(torch.int16) ^ k.view(torch.int16)

        compiled = torch.compile(fn, fullgraph=True)
        got, want = compiled(*xs), fn(*xs)
        torch.cuda.synchronize()
        for i, (a, b) in enumerate(zip(got, want)):
            self.assertTrue(a.is_contiguous(), i)
            same = bits_equal(a, b) if a.dtype == torch.bfloat16 else torch.equal(a, b)
            self.assertTrue(same, f"output {i} differs from eager")
        self.assertTrue(bits_equal(got[0], xs[0].contiguous()))
        self.assertEqual(got[3].data_ptr(), xs[3].data_ptr(), "a dense input was copied")

    def test_pack_into_compiled_then_captured(self):
        gen = torch.Generator(device=DEV).manual_seed(10)
        xs, bufs = k3_views(gen, 512, 8)
        outs = [torch.empty(x.shape, dtype=x.dtype, device=DEV) for x in xs]

        def fn(q, k, v, g, beta, beta2):
            sp.pack_into([q, k, v, g, beta, beta2], outs)
            return outs[0].view(torch.int16).sum()

        compiled = torch.compile(fn, fullgraph=True)
        compiled(*xs)
        torch.cuda.synchronize()
        for x, o in zip(xs, outs):
            self.assertTrue(bits_equal(o, x.contiguous()))
        totals = []
        graph = capture(lambda: totals.append(compiled(*xs)))
        total = totals[-1]  # the captured call's output, refreshed by each replay
        for b in bufs:
            b.copy_(rand_bf16(gen, *b.shape))
        for o in outs:
            o.view(torch.int16).fill_(POISON)
        graph.replay()
        torch.cuda.synchronize()
        for x, o in zip(xs, outs):
            self.assertTrue(bits_equal(o, x.contiguous()), "replay did not copy new contents")
        self.assertEqual(total.item(), outs[0].view(torch.int16).sum().item())

    def test_reduce_overhead_matches_eager(self):
        # torch.compile's own CUDA graphs (cudagraph trees) around the op.
        gen = torch.Generator(device=DEV).manual_seed(11)
        xs, bufs = k3_views(gen, 256, 8)

        def fn(q, k, v, beta):
            q, k, v, beta = sp.pack([q, k, v, beta])
            return q.view(torch.int16) ^ k.view(torch.int16) ^ v.view(torch.int16), \
                beta.view(torch.int16) + 1

        compiled = torch.compile(fn, mode="reduce-overhead", fullgraph=True)
        for _ in range(4):  # warm-up, record, then replays with new contents
            for b in bufs:
                b.copy_(rand_bf16(gen, *b.shape))
            ins = [xs[0], xs[1], xs[2], xs[4]]
            got = [t.clone() for t in compiled(*ins)]
            want = fn(*ins)
            torch.cuda.synchronize()
            for a, b in zip(got, want):
                self.assertTrue(torch.equal(a, b))

    def test_eager_call_does_not_dispatch(self):
        gen = torch.Generator(device=DEV).manual_seed(12)
        xs, _ = k3_views(gen, 64, 8)
        ws = torch.empty(sp.workspace_bytes(xs), dtype=torch.uint8, device=DEV)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            sp.pack(xs, workspace=ws)
            sp.pack_into(xs[:1], [torch.empty(xs[0].shape, dtype=xs[0].dtype, device=DEV)])
        names = [e.name for e in prof.events()]
        self.assertFalse([n for n in names if "stridepack" in n], names)


@unittest.skipUnless(sp.kda_available(), "this libstridepack build has no KDA part")
class KdaBoundary(unittest.TestCase):
    def test_boundary_eager_graph_and_dense(self):
        gen = torch.Generator(device=DEV).manual_seed(6)
        T, H = 300, 4
        P = H * 128
        qkv = (torch.rand(T, 3 * P, device=DEV, generator=gen) * 2 - 1).bfloat16()
        fab = (torch.rand(T, 128 + H, device=DEV, generator=gen) * 6 - 3).bfloat16()
        g = (torch.rand(1, T, H, 128, device=DEV, generator=gen) * 4 - 2).bfloat16()
        views = dict(q=qkv[:, :P].view(1, T, H, 128), k=qkv[:, P:2 * P].view(1, T, H, 128),
                     v=qkv[:, 2 * P:].view(1, T, H, 128), g=g, beta=fab[:, 128:].view(1, T, H))
        params = dict(A_log=torch.rand(H, device=DEV, generator=gen) - 0.5,
                      dt_bias=torch.rand(H * 128, device=DEV, generator=gen) - 0.5,
                      cu_seqlens=torch.tensor([0, 100, 300], dtype=torch.int64, device=DEV),
                      state_indices=torch.tensor([1, 0], dtype=torch.int32, device=DEV))
        state0 = 0.1 * torch.randn(2, H, 128, 128, device=DEV, generator=gen)

        def run(fn, ins, state, o):
            fn(**ins, **params, state=state, o=o)

        dense = {n: x.contiguous() for n, x in views.items()}
        o_dense = torch.empty(1, T, H, 128, dtype=torch.bfloat16, device=DEV)
        # A workspace as the boundary owns one (4 heads): AUTO then picks
        # the same kernel on both paths.
        need = sp.kda_workspace_bytes(**dense, **params, state=state0, o=o_dense)
        self.assertGreater(need, 0)
        ws = torch.empty(need, dtype=torch.uint8, device=DEV)
        s_dense = state0.clone()
        sp.kda_prefill(**dense, **params, state=s_dense, o=o_dense, workspace=ws)
        b = sp.KdaBoundary(DEV, T, H)
        o, s = torch.empty_like(o_dense), state0.clone()
        run(b.run, views, s, o)  # eager; also the warm-up for capture
        torch.cuda.synchronize()
        self.assertEqual(b.last_copied, 0)  # the K3 views are read in place
        self.assertTrue(bits_equal(o, o_dense))
        self.assertTrue(torch.equal(s.view(torch.int32), s_dense.view(torch.int32)))
        o4, s4 = torch.empty_like(o), state0.clone()  # and so does the prefill
        sp.kda_prefill(**views, **params, state=s4, o=o4, workspace=ws)
        torch.cuda.synchronize()
        self.assertTrue(bits_equal(o4, o_dense))
        self.assertTrue(torch.equal(s4.view(torch.int32), s_dense.view(torch.int32)))
        # Each kernel forced: the boundary equals the dense prefill bit for bit.
        for kernel in ("recurrent", "chunked", "chunked_two_pass"):
            o2, s2, o3, s3 = torch.empty_like(o), state0.clone(), torch.empty_like(o), state0.clone()
            sp.kda_prefill(**dense, **params, state=s2, o=o2, kernel=kernel, workspace=ws)
            b.run(**views, **params, state=s3, o=o3, kernel=kernel)
            torch.cuda.synchronize()
            self.assertTrue(bits_equal(o2, o3), kernel)
            self.assertTrue(torch.equal(s2.view(torch.int32), s3.view(torch.int32)), kernel)
        with self.assertRaises(sp.StridepackError):
            sp.kda_prefill(**dense, **params, state=s2, o=o2, kernel="fastest")
        with self.assertRaises(sp.StridepackError):  # two-pass without a workspace
            sp.kda_prefill(**dense, **params, state=s2, o=o2, kernel="chunked_two_pass")
        # Capture on the stream of the warm-up: torch.cuda.graph captures on
        # a side stream, so warm up and capture there.
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            s.copy_(state0)
            run(b.run, views, s, o)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            run(b.run, views, s, o)
        qkv.copy_((torch.rand(T, 3 * P, device=DEV, generator=gen) * 2 - 1).bfloat16())
        s.copy_(state0)
        o.fill_(0)
        graph.replay()
        dense = {n: x.contiguous() for n, x in views.items()}
        o_dense, s_dense = torch.empty_like(o), state0.clone()
        sp.kda_prefill(**dense, **params, state=s_dense, o=o_dense, workspace=ws)
        torch.cuda.synchronize()
        self.assertTrue(bits_equal(o, o_dense))
        self.assertTrue(torch.equal(s.view(torch.int32), s_dense.view(torch.int32)))
        b.close()


@unittest.skipUnless(sp.kda_available(), "this libstridepack build has no KDA part")
class KdaWorkspace(unittest.TestCase):
    """The KDA workspace on CUDA is read as an array and checked before the
    call: dense, writable, on the tensors' device; its extent is the view's
    own, so a short view of a larger buffer is too small, and the bytes
    past it are never written."""

    def setUp(self):
        gen = torch.Generator(device=DEV).manual_seed(30)
        T, H = 256, 4
        self.args = dict(
            q=(torch.rand(1, T, H, 128, device=DEV, generator=gen) * 2 - 1).bfloat16(),
            k=(torch.rand(1, T, H, 128, device=DEV, generator=gen) * 2 - 1).bfloat16(),
            v=(torch.rand(1, T, H, 128, device=DEV, generator=gen) * 2 - 1).bfloat16(),
            g=(torch.rand(1, T, H, 128, device=DEV, generator=gen) * 4 - 2).bfloat16(),
            beta=(torch.rand(1, T, H, device=DEV, generator=gen) * 6 - 3).bfloat16(),
            A_log=torch.rand(H, device=DEV, generator=gen) - 0.5,
            dt_bias=torch.rand(H * 128, device=DEV, generator=gen) - 0.5,
            cu_seqlens=torch.tensor([0, T], dtype=torch.int64, device=DEV),
            state_indices=torch.tensor([0], dtype=torch.int32, device=DEV))
        self.state = 0.1 * torch.randn(1, H, 128, 128, device=DEV, generator=gen)
        self.o = torch.full((1, T, H, 128), 7.0, dtype=torch.bfloat16, device=DEV)
        self.need = sp.kda_workspace_bytes(**self.args, state=self.state, o=self.o)
        self.assertGreater(self.need, 0)

    def refused(self, fn, ws, status, message, kernel="auto"):
        s = self.state.clone()
        with self.assertRaises(sp.StridepackError) as cm:
            fn(**self.args, state=s, o=self.o, workspace=ws, kernel=kernel)
        torch.cuda.synchronize()
        self.assertEqual(cm.exception.status, status)
        if message:
            self.assertEqual(cm.exception.message, message)
        self.assertTrue(torch.equal(s, self.state), "state written")
        self.assertTrue((self.o == 7.0).all(), "o written")

    def test_refused_before_the_call(self):
        with sp.KdaBoundary(DEV, 256, 4) as b:
            for name, fn in (("kda_prefill", sp.kda_prefill), ("boundary", b.run)):
                with self.subTest(call=name, ws="cpu"):
                    self.refused(fn, torch.empty(self.need, dtype=torch.uint8),
                                 "SP_ERR_DEVICE_MISMATCH",
                                 "workspace: on cpu, but the call runs on cuda:0")
                with self.subTest(call=name, ws="expanded"):
                    self.refused(fn, torch.empty(1, dtype=torch.uint8, device=DEV).expand(1 << 30),
                                 "SP_ERR_INVALID_ARGUMENT",
                                 "workspace: not contiguous (shape (1073741824,), byte strides "
                                 "(0,)): the call writes every byte of it, so it must own them "
                                 "(an expanded or strided view does not)",
                                 kernel="chunked_two_pass")

    def test_short_view_is_too_small_and_nothing_past_a_view_is_written(self):
        full = torch.full((self.need + 4096,), POISON, dtype=torch.uint8, device=DEV)
        with sp.KdaBoundary(DEV, 256, 4) as b:
            for name, fn in (("kda_prefill", sp.kda_prefill), ("boundary", b.run)):
                with self.subTest(call=name):
                    full.fill_(POISON)  # the call before this one wrote its workspace
                    self.refused(fn, full[:self.need // 2], "SP_ERR_WORKSPACE_TOO_SMALL", None,
                                 kernel="chunked_two_pass")
                    self.assertTrue((full == POISON).all(), "workspace written")
                    s = self.state.clone()
                    fn(**self.args, state=s, o=self.o, workspace=full[:self.need],
                       kernel="chunked_two_pass")
                    torch.cuda.synchronize()
                    self.assertTrue((full[self.need:] == POISON).all(), "written past the view")
                    self.assertFalse((self.o == 7.0).all(), "o not written")
                    self.o.fill_(7.0)


def kda_layer_inputs(gen, T, H, lengths=None):
    """K3 views (q, k, v column slices of [T, 3P]; g the first T rows of a
    longer buffer; beta at column 128 of [T, 128 + H]) with valid values,
    the prefill's other arguments, and the buffers behind the views."""
    P = H * 128
    qkv = (torch.rand(T, 3 * P, device=DEV, generator=gen) * 2 - 1).bfloat16()
    fab = (torch.rand(T, 128 + H, device=DEV, generator=gen) * 6 - 3).bfloat16()
    gbuf = (torch.rand(T + 5, H, 128, device=DEV, generator=gen) * 4 - 2).bfloat16()
    views = dict(q=qkv[:, :P].view(1, T, H, 128), k=qkv[:, P:2 * P].view(1, T, H, 128),
                 v=qkv[:, 2 * P:].view(1, T, H, 128), g=gbuf[:T].unsqueeze(0),
                 beta=fab[:, 128:].view(1, T, H))
    lengths = lengths or [T]
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    N = len(lengths)
    params = dict(A_log=torch.rand(H, device=DEV, generator=gen) - 0.5,
                  dt_bias=torch.rand(H * 128, device=DEV, generator=gen) - 0.5,
                  cu_seqlens=torch.tensor(cu, dtype=torch.int64, device=DEV),
                  state_indices=torch.arange(N, dtype=torch.int32, device=DEV))
    state0 = 0.1 * torch.randn(N, H, 128, 128, device=DEV, generator=gen)
    return views, params, state0, (qkv, fab, gbuf)


class KdaInputsGpu(unittest.TestCase):
    def test_eager_one_launch_and_graph_replay(self):
        gen = torch.Generator(device=DEV).manual_seed(50)
        views, _, _, bufs = kda_layer_inputs(gen, 1000, 8)
        xs = [views[n] for n in ("q", "k", "v", "g", "beta")]
        inputs = sp.KdaInputs(DEV, 1024, 8)
        n = sp.copy_pass_count()
        out = inputs.pack(*xs)
        self.assertEqual(sp.copy_pass_count() - n, 1)
        torch.cuda.synchronize()
        for x, o in zip(xs, out):
            self.assertTrue(bits_equal(o, x.contiguous()))
        self.assertIs(out[3], xs[3])
        got = []
        graph = capture(lambda: got.append(inputs.pack(*xs)))
        self.assertTrue(all(a.data_ptr() == b.data_ptr() for a, b in zip(got[-1], out)))
        for b in bufs:
            b.copy_(rand_bf16(gen, *b.shape))
        for o in out[:3] + out[4:]:
            o.view(torch.int16).fill_(POISON)
        graph.replay()
        torch.cuda.synchronize()
        for x, o in zip(xs, out):
            self.assertTrue(bits_equal(o, x.contiguous()), "replay did not copy new contents")
        with self.assertRaises(sp.StridepackError) as cm:
            inputs.pack(*[x.cpu() for x in xs])
        self.assertEqual(cm.exception.status, "SP_ERR_DEVICE_MISMATCH")


@unittest.skipUnless(HAVE_OPS and sp.kda_available(),
                     "needs torch.library.custom_op and the KDA part")
class CompiledKda(unittest.TestCase):
    """torch.compile of a layer that runs KdaBoundary.run / kda_prefill /
    KdaInputs.pack: no graph break, bit-equal to eager, and recorded as a
    CUDA graph by mode="reduce-overhead"."""

    def setUp(self):
        torch._dynamo.reset()
        self.assertTrue(sp.register_torch_ops())
        self.gen = torch.Generator(device=DEV).manual_seed(51)

    def run_case(self, T, H, lengths, max_heads):
        views, params, state0, bufs = kda_layer_inputs(self.gen, T, H, lengths)
        b = sp.KdaBoundary(DEV, T, max_heads)

        def layer(q, k, v, g, beta, state, o):
            b.run(q, k, v, g, beta, **params, state=state, o=o)
            return o.view(torch.int16).sum()

        o_e, s_e = torch.empty(1, T, H, 128, dtype=torch.bfloat16, device=DEV), state0.clone()
        layer(**views, state=s_e, o=o_e)
        compiled = torch.compile(layer, fullgraph=True)
        o_c, s_c = torch.empty_like(o_e), state0.clone()
        total = compiled(**views, state=s_c, o=o_c)
        torch.cuda.synchronize()
        self.assertTrue(bits_equal(o_c, o_e), f"o differs T={T} H={H}")
        self.assertTrue(torch.equal(s_c.view(torch.int32), s_e.view(torch.int32)), "state")
        self.assertEqual(total.item(), o_e.view(torch.int16).sum().item())
        return views, params, state0, bufs, b

    def test_boundary_fullgraph_bit_equal(self):
        self.run_case(300, 4, [100, 200], 4)    # two-pass workspace (few heads)
        torch._dynamo.reset()
        self.run_case(256, 8, [1, 0, 255], 64)  # no own workspace; short and empty sequences

    def test_prefill_fullgraph_bit_equal(self):
        views, params, state0, _ = kda_layer_inputs(self.gen, 200, 4)
        dense = {n: x.contiguous() for n, x in views.items()}

        def fn(q, k, v, g, beta, state, o):
            sp.kda_prefill(q, k, v, g, beta, **params, state=state, o=o, kernel="chunked")

        o_e, s_e = torch.empty(1, 200, 4, 128, dtype=torch.bfloat16, device=DEV), state0.clone()
        fn(**dense, state=s_e, o=o_e)
        o_c, s_c = torch.empty_like(o_e), state0.clone()
        torch.compile(fn, fullgraph=True)(**dense, state=s_c, o=o_c)
        torch.cuda.synchronize()
        self.assertTrue(bits_equal(o_c, o_e))
        self.assertTrue(torch.equal(s_c.view(torch.int32), s_e.view(torch.int32)))

    def test_reduce_overhead_records_a_graph(self):
        from torch._dynamo.utils import counters
        T, H = 256, 4
        views, params, state0, bufs = kda_layer_inputs(self.gen, T, H, [56, 200])
        b = sp.KdaBoundary(DEV, T, H)
        inputs = sp.KdaInputs(DEV, T, H)

        def layer(qkv, fab, gbuf, state):
            P = H * 128
            q, k, v = (qkv[:, i * P:(i + 1) * P].view(1, T, H, 128) for i in range(3))
            g, beta = gbuf[:T].unsqueeze(0), fab[:, 128:].view(1, T, H)
            s = state.clone()
            o = torch.empty(1, T, H, 128, dtype=torch.bfloat16, device=qkv.device)
            b.run(q, k, v, g, beta, **params, state=s, o=o)
            dq, dk, _, _, _ = inputs.pack(q, k, v, g, beta)
            return o, s, dq.view(torch.int16) ^ dk.view(torch.int16)

        counters.clear()
        compiled = torch.compile(layer, mode="reduce-overhead", fullgraph=True)
        for _ in range(4):  # warm-up, record, replays with new contents
            bufs[0].copy_((torch.rand(bufs[0].shape, device=DEV, generator=self.gen) * 2 - 1).bfloat16())
            bufs[1].copy_((torch.rand(bufs[1].shape, device=DEV, generator=self.gen) * 6 - 3).bfloat16())
            bufs[2].copy_((torch.rand(bufs[2].shape, device=DEV, generator=self.gen) * 4 - 2).bfloat16())
            got = [t.clone() for t in compiled(*bufs, state0)]
            want = layer(*bufs, state0)
            torch.cuda.synchronize()
            self.assertTrue(bits_equal(got[0], want[0]), "o")
            self.assertTrue(torch.equal(got[1].view(torch.int32), want[1].view(torch.int32)))
            self.assertTrue(torch.equal(got[2], want[2]))
        self.assertEqual(counters["inductor"]["cudagraph_skips"], 0,
                         "torch.compile skipped the CUDA graph")

    def test_eager_kda_calls_do_not_dispatch(self):
        views, params, state0, _ = kda_layer_inputs(self.gen, 64, 4)
        b = sp.KdaBoundary(DEV, 64, 4)
        inputs = sp.KdaInputs(DEV, 64, 4)
        o, s = torch.empty(1, 64, 4, 128, dtype=torch.bfloat16, device=DEV), state0.clone()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            b.run(**views, **params, state=s, o=o)
            inputs.pack(*views.values())
        names = [e.name for e in prof.events()]
        self.assertFalse([n for n in names if "stridepack" in n], names)


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


class EngineCallsGpu(unittest.TestCase):
    """The engine conventions on CUDA through the binding: the decode step
    and verify on the recurrent and decode kernels against the CPU, int32
    query_start_loc and int64 slots, has_initial_state, the gate and beta
    forms (on the chunked kernels' every-gate builds too), the fla drop-in's
    decode under torch.compile and in a CUDA graph recorded by
    mode="reduce-overhead"."""

    def setUp(self):
        self.gen = torch.Generator(device=DEV).manual_seed(60)

    def decode_inputs(self, N, H, k=1):
        views, params, _, _ = kda_layer_inputs(self.gen, N * k, H)
        slots = N * k + 2
        pool = 0.1 * torch.randn(slots, H, 128, 128, device=DEV, generator=self.gen)
        cu = torch.arange(N + 1, dtype=torch.int32, device=DEV) * k
        perm = torch.randperm(slots, device=DEV, generator=self.gen)[:N * k]
        idx = perm.to(torch.int64) if k == 1 else perm.view(N, k).to(torch.int32)
        acc = None if k == 1 else torch.randint(1, k + 1, (N,), device=DEV, generator=self.gen,
                                                dtype=torch.int32)
        return views, dict(A_log=params["A_log"], dt_bias=params["dt_bias"], cu_seqlens=cu,
                           state_indices=idx, num_accepted_tokens=acc), pool

    def test_decode_and_verify_kernels_against_the_cpu(self):
        for k in (1, 4):
            views, params, pool0 = self.decode_inputs(33, 4, k)
            T = views["q"].shape[1]
            cpu = {n: x.cpu() for n, x in views.items()}
            cpar = {n: (x.cpu() if torch.is_tensor(x) else x) for n, x in params.items()}
            o_ref, p_ref = torch.zeros(1, T, 4, 128, dtype=torch.bfloat16), pool0.cpu()
            sp.kda_prefill(**cpu, **cpar, state=p_ref, o=o_ref, gate="softplus")
            for kernel in ("recurrent", "decode", "auto"):
                with self.subTest(k=k, kernel=kernel):
                    o = torch.zeros(1, T, 4, 128, dtype=torch.bfloat16, device=DEV)
                    pool = pool0.clone()
                    sp.kda_prefill(**views, **params, state=pool, o=o, gate="softplus",
                                   kernel=kernel)
                    torch.cuda.synchronize()
                    self.assertLess(rel(o, o_ref), 1e-3)
                    self.assertLess(rel(pool, p_ref), 1e-5)

    def test_forms_and_has_initial_state(self):
        views, params, pool0 = self.decode_inputs(16, 2)
        T = views["q"].shape[1]
        g = -torch.rand(1, T, 2, 128, device=DEV, generator=self.gen) * 3  # the log-decay, f32
        beta = torch.rand(1, T, 2, device=DEV, generator=self.gen)         # activated, f32
        has = torch.rand(16, device=DEV, generator=self.gen) > 0.5
        args = dict(views, g=g, beta=beta)
        cpu = {n: x.cpu() for n, x in args.items()}
        cpar = {n: (x.cpu() if torch.is_tensor(x) else x) for n, x in params.items()}
        o_ref, p_ref = torch.zeros(1, T, 2, 128, dtype=torch.bfloat16), pool0.cpu()
        sp.kda_prefill(**cpu, **cpar, state=p_ref, o=o_ref, gate="log_decay",
                       beta_form="activated", has_initial_state=has.cpu())
        for kernel in ("recurrent", "decode"):
            with self.subTest(kernel=kernel):
                o = torch.zeros(1, T, 2, 128, dtype=torch.bfloat16, device=DEV)
                pool = pool0.clone()
                sp.kda_prefill(**args, **params, state=pool, o=o, gate="log_decay",
                               beta_form="activated", has_initial_state=has, kernel=kernel)
                torch.cuda.synchronize()
                self.assertLess(rel(o, o_ref), 1e-3)
                self.assertLess(rel(pool, p_ref), 1e-5)

    def test_chunked_every_gate_against_the_cpu(self):
        """The chunked kernels' every-gate builds, forced, on K3 producer
        views and int32 query_start_loc: the softplus gate, and a log-decay
        g in f32 (some channels forgotten: -inf) with activated beta f32,
        against the CPU prefill."""
        T, H = 201, 2
        views, params, _, _ = kda_layer_inputs(self.gen, T, H, [100, 37, 64])
        params["cu_seqlens"] = params["cu_seqlens"].to(torch.int32)
        pool0 = 0.1 * torch.randn(3, H, 128, 128, device=DEV, generator=self.gen)
        g_ld = -torch.rand(1, T, H, 128, device=DEV, generator=self.gen) * 3
        g_ld[0, ::17, :, 5] = float("-inf")
        beta_act = torch.rand(1, T, H, device=DEV, generator=self.gen) * 1.9
        cases = (({}, dict(gate="softplus")),
                 (dict(g=g_ld, beta=beta_act), dict(gate="log_decay", beta_form="activated")))
        for inputs, opts in cases:
            args = dict(views, **inputs)
            cpu = {n: x.cpu() for n, x in args.items()}
            cpar = {n: x.cpu() for n, x in params.items()}
            o_ref, p_ref = torch.zeros(1, T, H, 128, dtype=torch.bfloat16), pool0.cpu()
            sp.kda_prefill(**cpu, **cpar, state=p_ref, o=o_ref, **opts)
            o = torch.zeros(1, T, H, 128, dtype=torch.bfloat16, device=DEV)
            need = sp.kda_workspace_bytes(**args, **params, state=pool0, o=o, **opts)
            self.assertGreater(need, 0)
            ws = torch.empty(need, dtype=torch.uint8, device=DEV)
            for kernel in ("chunked", "chunked_two_pass"):
                with self.subTest(gate=opts["gate"], kernel=kernel):
                    o.zero_()
                    pool = pool0.clone()
                    sp.kda_prefill(**args, **params, state=pool, o=o, kernel=kernel,
                                   workspace=ws, **opts)
                    torch.cuda.synchronize()
                    self.assertTrue(torch.isfinite(o.float()).all())
                    self.assertLess(rel(o, o_ref), 4e-3)
                    self.assertLess(rel(pool, p_ref), 3e-3)

    def test_fla_decode_compiled_and_in_a_graph(self):
        from torch._dynamo.utils import counters
        from stridepack.fla import fused_recurrent_kda_fwd
        torch._dynamo.reset()
        self.assertTrue(sp.register_torch_ops())
        views, params, pool0 = self.decode_inputs(8, 4)
        idx = params["state_indices"].clone()
        idx[3] = -1  # a padded row

        def step(q, k, v, g, beta, pool):
            # The graph's own copy of the pool: a CUDA graph that torch
            # records does not mutate its inputs.
            p = pool.clone()
            o, _ = fused_recurrent_kda_fwd(q, k, v, g, beta, A_log=params["A_log"],
                                           dt_bias=params["dt_bias"], initial_state=p,
                                           state_v_first=True, cu_seqlens=params["cu_seqlens"],
                                           ssm_state_indices=idx, use_qk_l2norm_in_kernel=True,
                                           use_gate_in_kernel=True,
                                           use_beta_sigmoid_in_kernel=True, lower_bound=-5.0)
            return o, p

        x = [views[n].contiguous() for n in ("q", "k", "v", "g", "beta")]
        o_e, p_e = step(*x, pool0)
        o_c, p_c = torch.compile(step, fullgraph=True)(*x, pool0)
        torch.cuda.synchronize()
        self.assertTrue(bits_equal(o_c, o_e))
        self.assertTrue(torch.equal(p_c, p_e))
        self.assertFalse(torch.equal(p_c, pool0))
        counters.clear()
        torch._dynamo.reset()
        graphed = torch.compile(step, mode="reduce-overhead", fullgraph=True)
        for _ in range(4):  # warm-up, record, replays with new contents
            for t in x:
                t.copy_((torch.rand(t.shape, device=DEV, generator=self.gen) * 2 - 1).to(t.dtype))
            got = [t.clone() for t in graphed(*x, pool0)]
            want = step(*x, pool0)
            torch.cuda.synchronize()
            self.assertTrue(bits_equal(got[0], want[0]))
            self.assertTrue(torch.equal(got[1], want[1]))
        self.assertEqual(counters["inductor"]["cudagraph_skips"], 0)

    def test_fla_decode_k_first_pool_in_a_cuda_graph(self):
        """fla's default K-first pool (read and written where it lies) and a
        verify table, captured by torch.cuda.graph (which fails
        on any synchronization) and replayed with new contents at the same
        addresses: the same bits as the eager call, and as the eager call on
        the V-first pool of the same states."""
        from stridepack.fla import fused_recurrent_kda_fwd
        for k in (1, 3):
            views, params, pool0 = self.decode_inputs(8, 4, k)
            idx = params["state_indices"].clone()
            idx[3] = -1  # a padded row (its whole row of the table)
            if k > 1:
                idx[0, 1] = -1  # a live row keeps no state after its token 1
            x = [views[n].contiguous() for n in ("q", "k", "v", "g", "beta")]
            pool = pool0.transpose(-1, -2).contiguous()  # [slots, H, K, V]
            out = torch.empty(x[2].shape, dtype=torch.bfloat16, device=DEV)

            def call(p, o, v_first=False):
                fused_recurrent_kda_fwd(*x, A_log=params["A_log"], dt_bias=params["dt_bias"],
                                        initial_state=p, state_v_first=v_first,
                                        cu_seqlens=params["cu_seqlens"],
                                        ssm_state_indices=idx,
                                        num_accepted_tokens=params["num_accepted_tokens"],
                                        use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                                        use_beta_sigmoid_in_kernel=True, lower_bound=-5.0, out=o)

            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                call(pool.clone(), out)  # warm-up off the capturing stream
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                call(pool, out)
            for r in range(3):
                with self.subTest(k=k, replay=r):
                    for t in x:
                        t.copy_((torch.rand(t.shape, device=DEV, generator=self.gen) * 2 - 1)
                                .to(t.dtype))
                    pool.copy_(0.1 * torch.randn(pool.shape, device=DEV, generator=self.gen))
                    pool_e, o_e = pool.clone(), torch.zeros_like(out)
                    call(pool_e, o_e)
                    pool_v, o_v = pool.transpose(-1, -2).contiguous(), torch.zeros_like(out)
                    call(pool_v, o_v, v_first=True)
                    graph.replay()
                    torch.cuda.synchronize()
                    live = [n for n in range(8) if n != 3]
                    rows = lambda t: t.view(8, k, 4, 128)[live]  # noqa: E731
                    self.assertTrue(bits_equal(rows(out), rows(o_e)))
                    self.assertTrue(torch.equal(pool, pool_e))
                    self.assertTrue(bits_equal(o_v, o_e))
                    self.assertTrue(torch.equal(pool_v.transpose(-1, -2), pool_e))


class ConvGpu(unittest.TestCase):
    """The causal convolution through the binding on CUDA tensors: the same
    bits as the CPU backend without SiLU (the header's promise), in both
    output layouts, with a padded row; under graph capture, new inputs
    replayed at the same addresses."""

    def problem(self, gen, T=300, C=3 * 256, W=4, slots=6):
        x_buf = torch.randn(T, C + 64, device=DEV, generator=gen).to(torch.bfloat16)
        return dict(x=x_buf[:, 32:32 + C],  # a column slice, as of a fused projection
                    weight=torch.randn(C, W, device=DEV, generator=gen) * 0.3,
                    bias=torch.randn(C, device=DEV, generator=gen) * 0.1,
                    cu=torch.tensor([0, 100, 130, T], dtype=torch.int64, device=DEV),
                    state=torch.randn(slots, C, W - 1, device=DEV, generator=gen).to(torch.bfloat16),
                    idx=torch.tensor([4, -1, 1], dtype=torch.int32, device=DEV),
                    init=torch.tensor([True, False, True], device=DEV))

    def run_conv(self, p, device, split=False, silu=False):
        T, C = p["x"].shape
        d = {k: v.to(device) for k, v in p.items()}
        out = torch.full((T, C), float("nan"), dtype=torch.bfloat16, device=device)
        state = d["state"].clone()
        kw = dict(q=out[:, :256], k=out[:, 256:512], v=out[:, 512:]) if split else dict(out=out)
        sp.causal_conv1d(d["x"], d["weight"], d["cu"], state, d["idx"], bias=d["bias"],
                         has_initial_state=d["init"], silu=silu, **kw)
        return out, state

    def test_same_bits_as_cpu_both_layouts(self):
        gen = torch.Generator(device=DEV).manual_seed(40)
        p = self.problem(gen)
        cpu_out, cpu_state = self.run_conv(p, "cpu")
        for split in (False, True):
            with self.subTest(split=split):
                out, state = self.run_conv(p, DEV, split=split)
                torch.cuda.synchronize()
                self.assertTrue(bits_equal(out.cpu(), cpu_out))
                self.assertTrue(bits_equal(state.cpu(), cpu_state))
        self.assertTrue(torch.isnan(cpu_out[100:130].float()).all(), "the padded rows written")

    def test_decode_graph_replay_with_new_inputs(self):
        gen = torch.Generator(device=DEV).manual_seed(41)
        p = self.problem(gen)
        N, C = 8, p["x"].shape[1]
        x = torch.randn(N, C, device=DEV, generator=gen).to(torch.bfloat16)
        idx = torch.tensor([0, -1, 2, 3, -1, 5, 1, 4], dtype=torch.int32, device=DEV)
        out = torch.empty(N, C, dtype=torch.bfloat16, device=DEV)
        state = p["state"].clone()
        step = lambda: sp.causal_conv1d_update(x, p["weight"], state, idx, bias=p["bias"], out=out)
        graph = capture(step)
        for r in range(2):
            x.copy_(torch.randn(N, C, device=DEV, generator=gen).to(torch.bfloat16))
            before = state.clone()
            graph.replay()
            torch.cuda.synchronize()
            want_out = torch.empty_like(out).cpu()
            want_state = before.cpu()
            sp.causal_conv1d_update(x.cpu(), p["weight"].cpu(), want_state, idx.cpu(),
                                    bias=p["bias"].cpu(), out=want_out)
            rows = (idx >= 0).cpu()
            self.assertTrue(bits_equal(state.cpu(), want_state), f"replay {r}: state")
            self.assertTrue(bits_equal(out.cpu()[rows], want_out[rows]), f"replay {r}: out")


@unittest.skipUnless(torch.cuda.device_count() >= 2, "needs two CUDA devices")
class SecondGpu(unittest.TestCase):
    def test_pack_on_cuda1_while_cuda0_is_current(self):
        """Tensors on cuda:1, cuda:0 current: the pack runs on cuda:1, after
        the work queued on cuda:1's current stream, and leaves cuda:0
        current."""
        torch.cuda.set_device(0)
        dev1 = torch.device("cuda", 1)
        gen = torch.Generator(device=dev1).manual_seed(8)
        T, H = 2048, 12
        P = H * 128
        qkv = torch.randint(-32768, 32768, (T, 3 * P), dtype=torch.int16, device=dev1,
                            generator=gen)
        new = torch.randint(-32768, 32768, (T, 3 * P), dtype=torch.int16, device=dev1,
                            generator=gen)
        xs = [qkv.view(torch.bfloat16)[:, i * P:(i + 1) * P].view(1, T, H, 128)
              for i in range(3)]
        ws = torch.empty(sp.workspace_bytes(xs), dtype=torch.uint8, device=dev1)
        side = torch.cuda.Stream(device=dev1)
        side.wait_stream(torch.cuda.default_stream(dev1))  # the inputs are written
        with torch.cuda.device(1):
            torch.cuda.set_stream(side)  # cuda:1's current stream
            torch.cuda._sleep(100_000_000)  # on `side`, then new inputs
            qkv.copy_(new)
        self.assertEqual(torch.cuda.current_device(), 0)
        outs = sp.pack(xs, workspace=ws)
        self.assertEqual(torch.cuda.current_device(), 0)
        side.synchronize()
        # On `side` the pack ran after the copy, so it saw the new inputs; on
        # any other stream it would have run long before them.
        for o, x in zip(outs, xs):
            self.assertEqual(o.device, dev1)
            self.assertTrue(bits_equal(o, x.contiguous()))
        with torch.cuda.device(1):
            torch.cuda.set_stream(torch.cuda.default_stream(dev1))


if __name__ == "__main__":
    sp_unittest.main(__name__)
