"""The PyTorch side of the binding on the CPU, so that it is tested without a
GPU: the extension's direct read of torch tensors (checked against their
DLPack export), repeated calls into one workspace (a repeat copies what the
inputs hold now, reuses untouched outputs, notices a caller's change to an
output's metadata, and keeps no dropped workspace alive), pack_into, the
autograd and lazy negation / conjugation fallbacks, tensor subclasses, and
the drop-ins (stridepack.fla, stridepack.vllm) on CPU tensors. The custom ops
are test_torch_ops.py's. Exits 77 when torch is not importable."""

import gc
import sys
import unittest
import warnings
import weakref

try:
    import numpy
    import torch
except ImportError:
    print("SKIP: torch (with NumPy) is not importable")
    sys.exit(77)

import sp_unittest
import stridepack as sp
from stridepack import _api, _native


def bits_equal(a, b):
    return (a.shape == b.shape and a.dtype == b.dtype
            and torch.equal(a.detach().contiguous().view(torch.int16),
                            b.detach().contiguous().view(torch.int16)))


def k3_like(gen, T=40, H=3):
    """q, k, v column slices of a [T, 3P] bf16 buffer and beta at column 128
    of [T, 128+H], as the K3 layer leaves them (random bit patterns)."""
    P = H * 128
    qkv = torch.randint(-32768, 32768, (T, 3 * P), dtype=torch.int16, generator=gen)
    fab = torch.randint(-32768, 32768, (T, 128 + H), dtype=torch.int16, generator=gen)
    qkv, fab = qkv.view(torch.bfloat16), fab.view(torch.bfloat16)
    xs = [qkv[:, i * P:(i + 1) * P].view(1, T, H, 128) for i in range(3)]
    xs.append(fab[:, 128:].view(1, T, H))
    return xs, (qkv, fab)


class Cache(unittest.TestCase):
    def test_repeat_copies_current_contents(self):
        gen = torch.Generator().manual_seed(1)
        xs, bufs = k3_like(gen)
        ws = torch.empty(sp.workspace_bytes(xs), dtype=torch.uint8)
        first = sp.pack(xs, workspace=ws)
        for x, o in zip(xs, first):
            self.assertTrue(bits_equal(o, x))
        for b in bufs:  # new contents at the same addresses
            b.view(torch.int16).random_(-32768, 32768, generator=gen)
        passes = sp.copy_pass_count()
        again = sp.pack(xs, workspace=ws)
        self.assertEqual(sp.copy_pass_count() - passes, 1, "the repeat did not call the library")
        for x, o in zip(xs, again):
            self.assertTrue(bits_equal(o, x), "a repeat returned the previous contents")

    def test_repeat_returns_new_objects(self):
        # Each change a caller can make in place to an output's metadata
        # (some leave torch's version counter alone) makes the next call
        # build a new output.
        gen = torch.Generator().manual_seed(2)
        xs, _ = k3_like(gen)
        ws = torch.empty(sp.workspace_bytes(xs), dtype=torch.uint8)
        changes = {
            "unsqueeze_": lambda o: o.unsqueeze_(0),
            "as_strided_ (same shape)": lambda o: o.as_strided_(o.shape, o.stride()[:-1] + (2,)),
            "resize_ (same size)": lambda o: o.resize_(o.shape[1], o.shape[0], *o.shape[2:]),
            "data = (same shape)": lambda o: setattr(o, "data", torch.empty_like(o)),
            "data = (same memory, other strides)": lambda o: setattr(
                o, "data", o.as_strided(o.shape, (7,) + o.stride()[1:])),
        }
        for name, change in changes.items():
            with self.subTest(change=name):
                o1 = sp.pack(xs, workspace=ws)[0]
                self.assertIs(sp.pack(xs, workspace=ws)[0], o1)
                change(o1)
                o2 = sp.pack(xs, workspace=ws)[0]
                self.assertIsNot(o1, o2)
                self.assertEqual(tuple(o2.shape), tuple(xs[0].shape))
                self.assertTrue(o2.is_contiguous())
                self.assertTrue(bits_equal(o2, xs[0]))

    def test_dropped_workspace_is_freed(self):
        gen = torch.Generator().manual_seed(3)
        xs, _ = k3_like(gen)
        # The workspace's memory is a NumPy array's, so its lifetime can be
        # watched: the torch storage holds the array until it is freed.
        owner = numpy.empty(sp.workspace_bytes(xs), dtype=numpy.uint8)
        ws = torch.from_numpy(owner)
        outs = sp.pack(xs, workspace=ws)
        sp.pack(xs, workspace=ws)  # a cached repeat
        gone = weakref.ref(owner)
        del owner, ws, outs
        gc.collect()
        self.assertIsNone(gone(), "the binding keeps a dropped workspace alive")


class Outputs(unittest.TestCase):
    def test_all_contiguous_inputs_are_the_outputs(self):
        # T = 1: every K3 view is dense (a size-1 dim may have any stride),
        # as is a contiguous tensor that requires grad or is a lazy
        # negation: each comes back as itself, with no pass and no warning.
        gen = torch.Generator().manual_seed(12)
        xs, _ = k3_like(gen, T=1)
        xs.append(torch.randn(3, 5, requires_grad=True))
        xs.append(torch.randn(4, dtype=torch.complex64).conj())
        passes = sp.copy_pass_count()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            outs = sp.pack(xs, workspace=torch.empty(0, dtype=torch.uint8))
        self.assertEqual(sp.copy_pass_count(), passes)
        self.assertEqual(len(outs), len(xs))
        for o, x in zip(outs, xs):
            self.assertIs(o, x)
        # One strided input among them: the general path, one pass.
        strided = torch.randn(6, 8)[:, ::2]
        outs = sp.pack([xs[0], strided])
        self.assertIs(outs[0], xs[0])
        self.assertTrue(torch.equal(outs[1], strided.contiguous()))

    def test_untouched_outputs_are_reused(self):
        # The eager fast path: a repeat into the same workspace hands back
        # the output tensors of the previous call, holding the new contents.
        gen = torch.Generator().manual_seed(6)
        xs, bufs = k3_like(gen)
        ws = torch.empty(sp.workspace_bytes(xs), dtype=torch.uint8)
        o1 = sp.pack(xs, workspace=ws)
        bufs[0].view(torch.int16).random_(-32768, 32768, generator=gen)
        o2 = sp.pack(xs, workspace=ws)
        for a, b, x in zip(o1, o2, xs):
            self.assertIs(a, b)
            self.assertTrue(bits_equal(b, x))
        other = torch.empty_like(ws)  # another workspace: other outputs
        o3 = sp.pack(xs, workspace=other)
        self.assertTrue(all(a is not b for a, b in zip(o1, o3)))
        self.assertTrue(all(bits_equal(a, b) for a, b in zip(o1, o3)))

    def test_workspace_views_and_dtypes(self):
        gen = torch.Generator().manual_seed(7)
        xs, _ = k3_like(gen)
        need = sp.workspace_bytes(xs)
        big = torch.full((need + 1000,), 0xA5, dtype=torch.uint8)
        f32 = torch.empty((need + 3) // 4 + 8, dtype=torch.float32)
        for ws in (big[1000:], big[3:3 + need], f32[5:], f32):
            big[:1000] = 0xA5
            outs = sp.pack(xs, workspace=ws)
            lo = ws.data_ptr()
            hi = lo + ws.numel() * ws.element_size()
            for x, o in zip(xs, outs):
                self.assertTrue(lo <= o.data_ptr() < hi)
                self.assertTrue(o.is_contiguous())
                self.assertTrue(bits_equal(o, x))
            if ws.data_ptr() == big.data_ptr() + 1000:
                self.assertTrue((big[:1000] == 0xA5).all(), "written before the workspace")

    def test_pack_into(self):
        gen = torch.Generator().manual_seed(8)
        xs, _ = k3_like(gen)
        outs = [torch.empty(x.shape, dtype=x.dtype) for x in xs]
        passes = sp.copy_pass_count()
        self.assertIs(sp.pack_into(xs, outs), outs)
        self.assertEqual(sp.copy_pass_count() - passes, 1)
        for x, o in zip(xs, outs):
            self.assertTrue(bits_equal(o, x))
        with self.assertRaises(sp.StridepackError) as cm:
            sp.pack_into(xs[:2], [outs[0], outs[0]])
        self.assertEqual(cm.exception.status, "SP_ERR_OVERLAP")

    def test_one_framework_per_call(self):
        x = torch.zeros(4, 6)[:, ::2]
        with self.assertRaisesRegex(TypeError, "one framework per call, got torch and numpy"):
            sp.pack([x, numpy.zeros((4, 3))[::-1]])
        with self.assertRaisesRegex(TypeError, "one framework per call"):
            sp.pack([x], workspace=numpy.zeros(4096, numpy.uint8))
        # copy_batch takes pairs across frameworks on the CPU
        d = numpy.zeros((4, 3), numpy.float32)
        sp.copy_batch([(x + 1, d)])
        self.assertTrue((d == 1).all())


class Autograd(unittest.TestCase):
    def test_requires_grad_falls_back_once(self):
        _api._reset_warnings()
        base = torch.randn(8, 3 * 128, requires_grad=True)
        q, k = base[:, :128], base[:, 128:256]
        passes = sp.copy_pass_count()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            o = sp.pack([q, k])
            sp.pack([q])
        self.assertEqual(sp.copy_pass_count(), passes, "the library ran under autograd")
        msgs = [str(m.message) for m in w if issubclass(m.category, sp.FallbackWarning)]
        self.assertEqual(len(msgs), 1, msgs)
        self.assertIn("autograd", msgs[0])
        (o[0].sum() + 2 * o[1].sum()).backward()
        self.assertTrue(torch.equal(base.grad[:, :128], torch.ones(8, 128)))
        self.assertTrue(torch.equal(base.grad[:, 128:256], torch.full((8, 128), 2.0)))
        with torch.no_grad():
            o = sp.pack([q])[0]
        self.assertEqual(sp.copy_pass_count() - passes, 1)
        self.assertTrue(torch.equal(o, q))


class Reading(unittest.TestCase):
    def test_direct_reads_match_attribute_reads(self):
        # Where the torch in the process exports its C shim (torch 2), plain
        # tensors are read through it; every view must read the same as
        # through its attributes.
        if not _native.direct_reads():
            self.skipTest(f"torch {torch.__version__}: no usable C shim, attribute reads only")
        gen = torch.Generator().manual_seed(11)
        sp_unittest.check_direct_reads(self, _native, sp_unittest.torch_views(torch, gen, 400))

    def test_direct_read_matches_dlpack(self):
        # Plain tensors are read through their own attributes; the DLPack
        # export of the same tensor must describe the same view.
        base = torch.zeros(64, 3 * 512, dtype=torch.bfloat16)
        for x in (base[:, 512:1024].view(1, 64, 4, 128), base.t()[3:9], base[5, ::3],
                  torch.zeros(3, 5, dtype=torch.int64).t(), torch.zeros(4, 6)[::2, 1:]):
            a, b = _native.describe(x), _native.describe(x, True)
            self.assertEqual(a[:1] + a[3:], b[:1] + b[3:])
            self.assertEqual(a[1], b[1])
            self.assertEqual([s for s, n in zip(a[2], a[1]) if n > 1],
                             [s for s, n in zip(b[2], b[1]) if n > 1])

    def test_subclasses_read_as_plain_tensors(self):
        # A plain torch.Tensor is read through the getters and methods the
        # extension resolved once; any other type through the attribute
        # lookup. Both reads must agree, and a pack of either is the same.
        class Sub(torch.Tensor):
            pass
        gen = torch.Generator().manual_seed(9)
        xs, _ = k3_like(gen, T=16, H=2)
        for wrap in (lambda x: x.as_subclass(Sub),
                     lambda x: torch.nn.Parameter(x, requires_grad=False)):
            ys = [wrap(x) for x in xs]
            for x, y in zip(xs, ys):
                self.assertIsNot(type(y), torch.Tensor)
                self.assertEqual(_native.describe(y), _native.describe(x))
            ws = torch.empty(sp.workspace_bytes(ys), dtype=torch.uint8)
            for x, o in zip(xs, sp.pack(ys, workspace=ws)):
                self.assertTrue(bits_equal(o, x))

    def test_complex_moves_as_words(self):
        c = torch.randn(6, 10, dtype=torch.complex64)[:, ::3]
        self.assertEqual(_native.describe(c)[3:5], (8, -1))
        o = sp.pack([c])[0]
        self.assertTrue(torch.equal(o, c))
        _api._reset_warnings()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            o = sp.pack([c.conj()])[0]
        self.assertTrue(torch.equal(o.resolve_conj(), c.conj().resolve_conj()))
        self.assertIn("conjugation", str(w[0].message))


class Views(unittest.TestCase):
    def test_negated_views_keep_their_sign(self):
        gen = torch.Generator().manual_seed(4)
        xs, _ = k3_like(gen)
        negs = [torch._neg_view(x) for x in xs]
        ws = torch.empty(sp.workspace_bytes(xs), dtype=torch.uint8)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs = sp.pack(negs, workspace=ws)
            d = torch.empty(negs[0].shape, dtype=negs[0].dtype)
            sp.copy_batch([(negs[0], d)])
        for n, o in zip(negs, outs):
            self.assertTrue(bits_equal(o.resolve_neg(), n.resolve_neg()),
                            "a negated view came back un-negated")
        self.assertTrue(bits_equal(d, negs[0].resolve_neg()), "copy_batch dropped a negation")

    def test_bf16_transposed(self):
        gen = torch.Generator().manual_seed(5)
        bits = torch.randint(-32768, 32768, (50, 70), dtype=torch.int16, generator=gen)
        x = bits.view(torch.bfloat16)[::2, 3:60].t()
        o = sp.pack([x])[0]
        self.assertTrue(o.is_contiguous() and o.device.type == "cpu")
        self.assertTrue(bits_equal(o, x))


def kda_inputs(gen, T=24, H=2, device="cpu"):
    """Dense K3-shaped KDA arguments (two sequences) as keyword arrays, and
    the state pool."""
    def bf16(*shape, scale=1.0):
        return ((torch.rand(*shape, generator=gen) * 2 - 1) * scale).bfloat16().to(device)
    args = dict(q=bf16(1, T, H, 128), k=bf16(1, T, H, 128), v=bf16(1, T, H, 128),
                g=bf16(1, T, H, 128, scale=2.0), beta=bf16(1, T, H, scale=3.0),
                A_log=(torch.rand(H, generator=gen) - 0.5).to(device),
                dt_bias=(torch.rand(H * 128, generator=gen) - 0.5).to(device),
                cu_seqlens=torch.tensor([0, 10, T], dtype=torch.int64, device=device),
                state_indices=torch.tensor([1, 0], dtype=torch.int32, device=device))
    state = (0.1 * torch.randn(2, H, 128, 128, generator=gen)).to(device)
    return args, state


@unittest.skipUnless(sp.kda_available(), "this libstridepack build has no KDA part")
class KdaWorkspace(unittest.TestCase):
    def test_views_that_do_not_own_their_bytes_are_refused(self):
        # torch.empty(1).expand(1 << 30) was once taken for a 1 GiB
        # workspace (numel x element size); now the workspace is read as an
        # array and must be dense, so its bytes are its own.
        gen = torch.Generator().manual_seed(20)
        args, state = kda_inputs(gen)
        o = torch.full((1, 24, 2, 128), 7.0, dtype=torch.bfloat16)
        expanded = torch.empty(1, dtype=torch.uint8).expand(1 << 30)
        strided = torch.zeros(64, 64, dtype=torch.int32)[:, ::2]
        cases = [(expanded, "workspace: not contiguous (shape (1073741824,), byte strides (0,)): "
                  "the call writes every byte of it, so it must own them (an expanded or "
                  "strided view does not)"),
                 (strided, "workspace: not contiguous (shape (64, 32), byte strides (256, 8)): "
                  "the call writes every byte of it, so it must own them (an expanded or "
                  "strided view does not)")]
        with sp.KdaBoundary("cpu", 24, 2) as b:
            for name, fn in (("kda_prefill", sp.kda_prefill), ("boundary", b.run)):
                for ws, message in cases:
                    with self.subTest(call=name, ws=tuple(ws.shape)):
                        s = state.clone()
                        with self.assertRaises(sp.StridepackError) as cm:
                            fn(**args, state=s, o=o, workspace=ws)
                        self.assertEqual(cm.exception.status, "SP_ERR_INVALID_ARGUMENT")
                        self.assertEqual(cm.exception.message, message)
                        self.assertTrue(torch.equal(s, state), "state written")
                        self.assertTrue((o == 7.0).all(), "o written")
            # A dense workspace of any dtype is taken: on the CPU no kernel
            # needs one, the call runs as without.
            s1, s2, o1 = state.clone(), state.clone(), torch.empty_like(o)
            sp.kda_prefill(**args, state=s1, o=o1)
            sp.kda_prefill(**args, state=s2, o=o, workspace=torch.zeros(64, dtype=torch.int32))
            self.assertTrue(bits_equal(o1, o))
            self.assertTrue(torch.equal(s1, s2))

    def test_pack_workspace_is_checked_the_same_way(self):
        x = torch.arange(64.0).view(8, 8).t()
        with self.assertRaises(sp.StridepackError) as cm:
            sp.pack([x], workspace=torch.empty(1, dtype=torch.uint8).expand(1 << 20))
        self.assertEqual(cm.exception.status, "SP_ERR_INVALID_ARGUMENT")
        self.assertTrue(cm.exception.message.startswith("workspace: not contiguous"))


@unittest.skipUnless(sp.kda_available(), "this libstridepack build has no KDA part")
class FlaDropIn(unittest.TestCase):
    """stridepack.fla.chunk_kda against stridepack.kda_prefill on the same
    inputs: fla's shapes, layouts and return values, every gate it serves, and
    each option it refuses named, nothing written."""

    def inputs(self, gen, T=24, H=2):
        args, state = kda_inputs(gen, T, H)
        return args, state.transpose(-1, -2).contiguous()  # fla's [N, H, K, V]

    def direct(self, args, pool_v_first, gate, lower_bound=-5.0):
        """kda_prefill with the pool as stridepack takes it ([N, H, V, K],
        slot n for sequence n)."""
        T, H = args["q"].shape[1], args["q"].shape[2]
        o = torch.empty(1, T, H, 128, dtype=torch.bfloat16)
        pool = pool_v_first.clone(memory_format=torch.contiguous_format)
        N = args["cu_seqlens"].shape[0] - 1
        sp.kda_prefill(**dict(args, state_indices=torch.arange(N, dtype=torch.int32)),
                       state=pool, o=o, gate=gate, lower_bound=lower_bound)
        return o, pool

    def fla_args(self, args):
        return dict(q=args["q"], k=args["k"], v=args["v"], g=args["g"], beta=args["beta"],
                    A_log=args["A_log"], dt_bias=args["dt_bias"], use_qk_l2norm_in_kernel=True,
                    use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True)

    def test_views_the_prefill_does_not_read_in_place(self):
        # q and k with channels strided (innermost stride H): the prefill
        # refuses them, the drop-in makes them dense and calls again.
        from stridepack.fla import chunk_kda
        gen = torch.Generator().manual_seed(33)
        args, h0 = self.inputs(gen)
        T, H = args["q"].shape[1], args["q"].shape[2]
        a = self.fla_args(args)
        strided = {}
        for n in ("q", "k"):
            buf = torch.empty(1, T, 128, H, dtype=torch.bfloat16)
            view = buf.permute(0, 1, 3, 2)
            view.copy_(a[n])
            self.assertFalse(sp._native.kda_reads_in_place(view))
            strided[n] = view
        o1, s1 = chunk_kda(**a, initial_state=h0, output_final_state=True,
                           cu_seqlens=args["cu_seqlens"])
        o2, s2 = chunk_kda(**dict(a, **strided), initial_state=h0, output_final_state=True,
                           cu_seqlens=args["cu_seqlens"])
        self.assertTrue(bits_equal(o1, o2) and torch.equal(s1, s2))

    def test_every_served_gate_and_both_state_layouts(self):
        from stridepack.fla import chunk_kda
        gen = torch.Generator().manual_seed(60)
        args, h0 = self.inputs(gen)
        # safe_gate only picks fla's kernel: the bound is the gate's with it or without.
        for gate, extra in (("softplus", {}),
                            ("lower_bound", dict(safe_gate=True, lower_bound=-5.0)),
                            ("lower_bound", dict(lower_bound=-5.0))):
            o_want, s_want = self.direct(args, h0.transpose(-1, -2), gate)
            for v_first in (False, True):
                with self.subTest(gate=gate, state_v_first=v_first):
                    init = h0.transpose(-1, -2).contiguous() if v_first else h0.clone()
                    before = init.clone()
                    o, ht = chunk_kda(**self.fla_args(args), **extra, initial_state=init,
                                      output_final_state=True, state_v_first=v_first,
                                      cu_seqlens=args["cu_seqlens"])
                    self.assertEqual((o.shape, o.dtype), (args["q"].shape, torch.bfloat16))
                    self.assertTrue(bits_equal(o, o_want))
                    want = s_want if v_first else s_want.transpose(-1, -2)
                    self.assertEqual(ht.shape, init.shape)
                    self.assertTrue(torch.equal(ht, want))
                    self.assertTrue(torch.equal(init, before), "initial_state written")
        # No initial state: zeros; no final state asked: None; cu_seqlens int32.
        o, ht = chunk_kda(**self.fla_args(args), cu_seqlens=args["cu_seqlens"].int())
        o_want, _ = self.direct(args, torch.zeros(2, 2, 128, 128), "softplus")
        self.assertIsNone(ht)
        self.assertTrue(bits_equal(o, o_want))

    def test_engine_call_fast_path_equals_full_path(self):
        """chunk_kda as engines call it (cu_seqlens, A_log, dt_bias, nothing
        else) takes the fast path; chunk_size (ignored by stridepack) sends
        the same call down the full path: the same bits, shapes and
        errors, every served form, both layouts, with and without states."""
        from stridepack import fla
        gen = torch.Generator().manual_seed(61)
        args, h0 = self.inputs(gen)
        taken = []
        fast = fla._chunk_as_is

        def counting(*a, **kw):
            r = fast(*a, **kw)
            taken.append(r is not None)
            return r
        fla._chunk_as_is = counting
        try:
            forms = ({}, dict(lower_bound=-4.0),
                     dict(use_gate_in_kernel=False, g=-torch.rand(args["g"].shape, generator=gen)),
                     dict(use_beta_sigmoid_in_kernel=False,
                          beta=torch.rand(args["beta"].shape, generator=gen).bfloat16()),
                     dict(allow_neg_eigval=True))
            for extra in forms:
                for v_first in (False, True):
                    for init in (None, h0):
                        for final in (False, True):
                            with self.subTest(extra=sorted(extra), v_first=v_first,
                                              init=init is not None, final=final):
                                st = None
                                if init is not None:
                                    st = init.transpose(-1, -2).contiguous() if v_first else init
                                kw = dict(self.fla_args(args), initial_state=st,
                                          output_final_state=final, state_v_first=v_first,
                                          cu_seqlens=args["cu_seqlens"])
                                kw.update(extra)
                                del taken[:]
                                o1, s1 = fla.chunk_kda(**kw)
                                self.assertEqual(taken, [True])
                                o2, s2 = fla.chunk_kda(**kw, chunk_size=64)
                                self.assertEqual(taken, [True])  # not called again
                                self.assertTrue(bits_equal(o1, o2))
                                self.assertEqual(o1.shape, o2.shape)
                                if final:
                                    self.assertTrue(torch.equal(s1, s2))
                                    self.assertEqual(s1.stride(), s2.stride())
                                else:
                                    self.assertIsNone(s1)
            for change in (dict(lower_bound=-6.0), dict(scale=0.0),
                           dict(q=args["q"].float())):
                with self.subTest(refused=sorted(change)):
                    kw = dict(self.fla_args(args), cu_seqlens=args["cu_seqlens"], **change)
                    with self.assertRaises(ValueError) as fast_err:
                        fla.chunk_kda(**kw)
                    with self.assertRaises(ValueError) as full_err:
                        fla.chunk_kda(**kw, chunk_size=64)
                    self.assertEqual(str(fast_err.exception), str(full_err.exception))
        finally:
            fla._chunk_as_is = fast

    def test_fast_path_reads_a_tensor_scale_at_each_call(self):
        """The fast path keeps its codes by the options' values, for plain
        values only: a 0-d tensor scale changed in place between two calls
        gives the second call the new scale (the full path's result), and a
        float scale the same bits as that tensor's."""
        from stridepack import fla
        gen = torch.Generator().manual_seed(62)
        args, _ = self.inputs(gen)
        kw = dict(self.fla_args(args), cu_seqlens=args["cu_seqlens"])
        scale = torch.tensor(0.05)
        o1, _ = fla.chunk_kda(**kw, scale=scale)
        scale.fill_(0.25)
        o2, _ = fla.chunk_kda(**kw, scale=scale)
        want, _ = fla.chunk_kda(**kw, scale=0.25, chunk_size=64)  # the full path
        self.assertFalse(bits_equal(o1, o2))
        self.assertTrue(bits_equal(o2, want))
        self.assertTrue(bits_equal(fla.chunk_kda(**kw, scale=0.25)[0], want))

    def test_precomputed_decay_and_beta_forms_on_cpu(self):
        from stridepack.fla import chunk_kda
        gen = torch.Generator().manual_seed(63)
        args, h0 = self.inputs(gen)
        log_decay = -8 * torch.rand(1, 24, 2, 128, generator=gen)
        log_decay[0, 3, 1, :7] = float("-inf")
        for gdt in (torch.float32, torch.bfloat16):
            for sig, neg, form in ((True, False, "logits"), (True, True, "logits_x2"),
                                   (False, False, "activated")):
                with self.subTest(g=str(gdt), beta=form):
                    g = log_decay.to(gdt)
                    beta = args["beta"] if sig else torch.rand(1, 24, 2, generator=gen).bfloat16()
                    o, ht = chunk_kda(**dict(self.fla_args(args), g=g, beta=beta,
                                             use_gate_in_kernel=False,
                                             use_beta_sigmoid_in_kernel=sig,
                                             allow_neg_eigval=neg),
                                      initial_state=h0, output_final_state=True,
                                      cu_seqlens=args["cu_seqlens"])
                    pool = h0.transpose(-1, -2).contiguous()
                    o_want = torch.empty_like(o)
                    sp.kda_prefill(**dict(args, g=g, beta=beta,
                                          state_indices=torch.arange(2, dtype=torch.int32)),
                                   state=pool, o=o_want, gate="log_decay", beta_form=form)
                    self.assertTrue(bits_equal(o, o_want))
                    self.assertTrue(torch.equal(ht, pool.transpose(-1, -2)))

    def test_log_decay_gate_by_its_formula(self):
        """The binding's gate and beta names reach the library: a log-decay of
        -inf forgets the state (o = 0, state 0); a log-decay of 0 with an
        activated beta of 0 keeps it (o = S^T q^ computed here)."""
        gen = torch.Generator().manual_seed(64)
        args, state = kda_inputs(gen)
        T, H = 24, 2
        zero_beta = torch.zeros(1, T, H, dtype=torch.bfloat16)
        for fill in (float("-inf"), 0.0):
            with self.subTest(log_decay=fill):
                g = torch.full((1, T, H, 128), fill)
                s = state.clone()
                o = torch.empty(1, T, H, 128, dtype=torch.bfloat16)
                sp.kda_prefill(**dict(args, g=g, beta=zero_beta), state=s, o=o,
                               gate="log_decay", beta_form="activated")
                idx, cu = args["state_indices"].tolist(), args["cu_seqlens"].tolist()
                if fill == 0.0:
                    self.assertTrue(torch.equal(s, state))
                    q = args["q"].float()[0]
                    qn = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * 128 ** -0.5
                    for n in range(2):
                        for t in range(cu[n], cu[n + 1]):
                            want = torch.einsum("hjd,hd->hj", state[idx[n]], qn[t])
                            got = o[0, t].float()
                            self.assertLess((got - want).norm() / want.norm(), 1e-2)
                else:
                    self.assertTrue((s[idx] == 0).all() and (o.float() == 0).all())

    def test_equal_length_batch_without_cu_seqlens(self):
        from stridepack.fla import chunk_kda
        gen = torch.Generator().manual_seed(61)
        args, h0 = self.inputs(gen, T=20)
        b = {n: args[n].reshape(2, 10, *args[n].shape[2:]) for n in ("q", "k", "v", "g", "beta")}
        o, ht = chunk_kda(**dict(self.fla_args(args), **b), initial_state=h0,
                          output_final_state=True)
        o_want, s_want = self.direct(dict(args, cu_seqlens=torch.tensor([0, 10, 20])),
                                     h0.transpose(-1, -2), "softplus")
        self.assertEqual(o.shape, (2, 10, 2, 128))
        self.assertTrue(bits_equal(o.reshape(1, 20, 2, 128), o_want))
        self.assertTrue(torch.equal(ht, s_want.transpose(-1, -2)))

    def test_refused_options_are_named(self):
        from stridepack.fla import chunk_kda
        gen = torch.Generator().manual_seed(62)
        args, h0 = self.inputs(gen)
        base = dict(self.fla_args(args), initial_state=h0, cu_seqlens=args["cu_seqlens"])
        cases = [(dict(use_qk_l2norm_in_kernel=False), "use_qk_l2norm_in_kernel=False"),
                 (dict(lower_bound=-6.0), "lower_bound=-6.0"),
                 (dict(safe_gate=True, lower_bound=-6.0), "lower_bound=-6.0"),
                 (dict(beta=args["beta"][..., None].expand(1, 24, 2, 128)), "beta=[1, 24, 2, 128]"),
                 (dict(return_intermediate_states=True), "return_intermediate_states=True"),
                 (dict(v=args["v"][..., :64]), "v=[1, 24, 2, 64]"),
                 (dict(q=args["q"].float()), "q='torch.float32'"),
                 (dict(initial_state=h0.double()), "initial_state='torch.float64'"),
                 (dict(q=args["q"].clone().requires_grad_(False).float().requires_grad_()),
                  "q='a tensor that requires grad'"),
                 (dict(head_first=True), "head_first=True"),
                 (dict(scale=0.0), "scale=0.0")]
        for change, named in cases:
            with self.subTest(named=named):
                before = h0.clone()
                with self.assertRaises(ValueError) as cm:
                    chunk_kda(**dict(base, **change))
                self.assertIn(named, str(cm.exception))
                self.assertTrue(torch.equal(h0, before))

    def test_fla_checks_and_their_error_types(self):
        """The checks fla makes, with fla's error types: shapes that do not
        agree (an AssertionError in fla; here also a ValueError), chunk_size,
        safe_gate without a bound, both names of the state layout."""
        from stridepack.fla import chunk_kda
        gen = torch.Generator().manual_seed(63)
        args, h0 = self.inputs(gen)
        base = dict(self.fla_args(args), initial_state=h0, cu_seqlens=args["cu_seqlens"])
        for change, named in ((dict(k=args["k"][:, :20]), "q and k must have the same shape"),
                              (dict(g=args["g"][:, :20]), "g must have shape"),
                              (dict(beta=args["beta"][:, :20]), "beta must have shape"),
                              (dict(v=args["v"][:, :20]), "v must have shape")):
            with self.subTest(named=named):
                for error in (AssertionError, ValueError):
                    with self.assertRaises(error) as cm:
                        chunk_kda(**dict(base, **change))
                    self.assertIn(named, str(cm.exception))
        for change, named in ((dict(chunk_size=16), "`chunk_size` must be either 32 or 64"),
                              (dict(safe_gate=True), "`lower_bound` must be specified"),
                              (dict(state_v_first=True, transpose_state_layout=True),
                               "Cannot pass both")):
            with self.subTest(named=named):
                with self.assertRaises(ValueError) as cm:
                    chunk_kda(**dict(base, **change))
                self.assertIn(named, str(cm.exception))
        o_want, s_want = chunk_kda(**base, output_final_state=True, state_v_first=True,
                                   chunk_size=32)
        with self.assertWarns(DeprecationWarning):
            o, ht = chunk_kda(**base, output_final_state=True, transpose_state_layout=True)
        self.assertTrue(bits_equal(o, o_want))
        self.assertTrue(torch.equal(ht, s_want))


@unittest.skipUnless(sp.kda_available(), "this libstridepack build has no KDA part")
class FlaDecodeDropIn(unittest.TestCase):
    """stridepack.fla.fused_recurrent_kda_fwd, the decode call: one token a
    sequence on a pool by ssm_state_indices (int64, a padded -1), in place in
    both layouts, against kda_prefill on the same inputs."""

    def setUp(self):
        gen = torch.Generator().manual_seed(70)
        self.N, self.H, self.slots = 4, 2, 7
        args, _ = kda_inputs(gen, T=self.N, H=self.H)
        self.args = dict(args, cu_seqlens=torch.arange(self.N + 1, dtype=torch.int64))
        self.pool = 0.1 * torch.randn(self.slots, self.H, 128, 128, generator=gen)  # V-first
        self.idx = torch.tensor([5, -1, 0, 3], dtype=torch.int64)

    def fla_kw(self):
        a = self.args
        return dict(q=a["q"], k=a["k"], v=a["v"], g=a["g"], beta=a["beta"], A_log=a["A_log"],
                    dt_bias=a["dt_bias"], cu_seqlens=a["cu_seqlens"],
                    use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                    use_beta_sigmoid_in_kernel=True)

    def direct(self):
        pool = self.pool.clone()
        o = torch.zeros(1, self.N, self.H, 128, dtype=torch.bfloat16)
        sp.kda_prefill(**dict(self.args, state_indices=self.idx.int()), state=pool, o=o,
                       gate="softplus")
        return o, pool

    def test_in_place_both_layouts_padded_row(self):
        from stridepack.fla import fused_recurrent_kda_fwd
        o_want, pool_want = self.direct()
        for v_first in (True, False):
            with self.subTest(state_v_first=v_first):
                pool = self.pool.clone() if v_first else self.pool.transpose(-1, -2).contiguous()
                o, ht = fused_recurrent_kda_fwd(**self.fla_kw(), initial_state=pool,
                                                ssm_state_indices=self.idx,
                                                state_v_first=v_first)
                self.assertIs(ht, pool)
                self.assertTrue(bits_equal(o, o_want))
                self.assertTrue((o[:, 1] == 0).all(), "the padded row")
                got = pool if v_first else pool.transpose(-1, -2)
                self.assertTrue(torch.equal(got, pool_want))
                for slot in (1, 2, 4, 6):  # nobody's
                    self.assertTrue(torch.equal(got[slot], self.pool[slot]))

    def test_the_call_as_it_comes_equals_the_full_path(self):
        """The engine's decode call as it comes (a pool of either layout in
        place, cu_seqlens and indices given) runs kda_prefill on its
        arguments as they are: the same bits as the drop-in's full path,
        with out or without, a bf16 pool, a verify table; and what the
        library refuses there is refused fla's way by the full path,
        nothing written."""
        from stridepack import fla
        kw = dict(self.fla_kw(), ssm_state_indices=self.idx, state_v_first=True)
        args = dict(kw, A_log=kw["A_log"], dt_bias=kw["dt_bias"], initial_state=None,
                    scale=None, output_final_state=False, inplace_final_state=True,
                    num_accepted_tokens=None, allow_neg_eigval=False, lower_bound=None,
                    out=None, kwargs={})
        flag_sets = ({}, dict(lower_bound=-4.0), dict(allow_neg_eigval=True),
                     dict(use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False),
                     dict(state_v_first=False))
        for flags in flag_sets:
            for pool_dtype in (torch.float32, torch.bfloat16):
                for with_out in (False, True):
                    with self.subTest(flags=flags, pool=pool_dtype, out=with_out):
                        p1, p2 = (self.pool.to(pool_dtype, copy=True) for _ in range(2))
                        if not flags.get("state_v_first", True):  # the same states K-first
                            p1, p2 = (p.transpose(-1, -2).contiguous() for p in (p1, p2))
                        o1 = torch.full((1, self.N, self.H, 128), 3.0, dtype=torch.bfloat16)
                        o2 = o1.clone()
                        got, _ = fla.fused_recurrent_kda_fwd(**dict(kw, **flags), initial_state=p1,
                                                             out=o1 if with_out else None)
                        want, _ = fla._recurrent("x", **dict(args, **flags, initial_state=p2,
                                                             out=o2 if with_out else None))
                        self.assertTrue(bits_equal(got, want) and torch.equal(p1, p2))
                        self.assertFalse(torch.equal(p1, self.pool.to(pool_dtype)))
        for change, named in ((dict(lower_bound=-6.0), "lower_bound=-6.0"),
                              (dict(q=self.args["q"].float()), "q='torch.float32'"),
                              (dict(beta=self.args["beta"][..., None].expand(1, 4, 2, 128)),
                               "beta=[1, 4, 2, 128]"),
                              (dict(scale=0.0), "scale=0.0"),
                              (dict(g=self.args["g"].float()), "g='torch.float32'")):
            with self.subTest(named=named):
                pool = self.pool.clone()
                with self.assertRaises(ValueError) as cm:
                    fla.fused_recurrent_kda_fwd(**dict(kw, **change), initial_state=pool)
                self.assertIn(named, str(cm.exception))
                self.assertTrue(torch.equal(pool, self.pool))

    def test_padded_entry_after_the_slot_it_clamps_to(self):
        """K-first pool in place: a padded entry (-1) after the sequence
        that writes slot 0: slot 0 holds that sequence's new state."""
        from stridepack.fla import fused_recurrent_kda_fwd
        self.idx = torch.tensor([0, 3, -1, 5], dtype=torch.int64)
        o_want, pool_want = self.direct()
        pool = self.pool.transpose(-1, -2).contiguous()
        o, _ = fused_recurrent_kda_fwd(**self.fla_kw(), initial_state=pool,
                                       ssm_state_indices=self.idx)
        self.assertTrue(bits_equal(o, o_want))
        self.assertTrue(torch.equal(pool.transpose(-1, -2), pool_want))
        self.assertFalse(torch.equal(pool_want[0], self.pool[0]))

    def test_out_written_where_it_lies(self):
        from stridepack.fla import fused_recurrent_kda_fwd
        o_want, pool_want = self.direct()
        pool = self.pool.clone()
        out = torch.full((1, self.N, self.H, 128), 7.0, dtype=torch.bfloat16)
        o, ht = fused_recurrent_kda_fwd(**self.fla_kw(), initial_state=pool,
                                        ssm_state_indices=self.idx, state_v_first=True, out=out)
        self.assertIs(o, out)
        live = [0, 2, 3]
        self.assertTrue(bits_equal(out[:, live], o_want[:, live]))
        self.assertTrue((out[:, 1] == 7).all(), "the padded row of out kept its contents")
        self.assertTrue(torch.equal(pool, pool_want))

    def test_padded_row_without_a_pool(self):
        from stridepack.fla import fused_recurrent_kda_fwd
        o, ht = fused_recurrent_kda_fwd(**self.fla_kw(), ssm_state_indices=self.idx,
                                        inplace_final_state=False, output_final_state=True)
        self.assertTrue((o[:, 1] == 0).all(), "the padded row computed")
        self.assertTrue(o[:, 0].abs().sum() > 0)
        self.assertEqual(ht.shape, (self.N, self.H, 128, 128))

    def test_without_a_pool_equals_chunk_kda(self):
        from stridepack.fla import chunk_kda, fused_recurrent_kda
        h0 = (0.1 * torch.randn(self.N, self.H, 128, 128, generator=torch.Generator().manual_seed(71)))
        before = h0.clone()
        o1, s1 = fused_recurrent_kda(**self.fla_kw(), initial_state=h0, output_final_state=True)
        o2, s2 = chunk_kda(**self.fla_kw(), initial_state=h0, output_final_state=True)
        self.assertTrue(bits_equal(o1, o2) and torch.equal(s1, s2))
        self.assertTrue(torch.equal(h0, before), "initial_state written")
        o3, s3 = fused_recurrent_kda(**self.fla_kw())
        self.assertIsNone(s3)

    def test_new_states_are_fp32_from_a_bf16_pool(self):
        """Not in place, the final states are new and fp32 (fla's), from a
        bf16 pool too: the same as the fp32 pool holding the bf16 values."""
        from stridepack.fla import fused_recurrent_kda_fwd
        h0 = self.pool[:self.N].transpose(-1, -2).bfloat16()  # fla's [N, H, K, V]
        before = h0.clone()
        kw = dict(self.fla_kw(), inplace_final_state=False, output_final_state=True)
        o, ht = fused_recurrent_kda_fwd(**kw, initial_state=h0)
        o_want, ht_want = fused_recurrent_kda_fwd(**kw, initial_state=h0.float())
        self.assertEqual(ht.dtype, torch.float32)
        self.assertTrue(bits_equal(o, o_want) and torch.equal(ht, ht_want))
        self.assertTrue(torch.equal(h0, before), "initial_state written")

    def test_recurrent_softplus_without_A_log_is_fla_A_of_one(self):
        """fla's recurrent kernel takes a missing A_log as A = 1 (-e *
        softplus): the same as A_log = 1 given."""
        from stridepack.fla import fused_recurrent_kda
        h0 = self.pool[:self.N].transpose(-1, -2).contiguous()  # the decay acts on it
        kw = dict(self.fla_kw(), output_final_state=True, initial_state=h0)
        o, ht = fused_recurrent_kda(**dict(kw, A_log=None))
        o_want, ht_want = fused_recurrent_kda(**dict(kw, A_log=torch.ones(self.H)))
        self.assertTrue(bits_equal(o, o_want) and torch.equal(ht, ht_want))
        o_other, _ = fused_recurrent_kda(**dict(kw, A_log=torch.zeros(self.H)))
        self.assertFalse(bits_equal(o, o_other))

    def test_fused_recurrent_kda_refuses_the_pools_options(self):
        """fla's fused_recurrent_kda drops the pool's options of
        fused_recurrent_kda_fwd; here each is refused by name, and an
        initial state a sequence is checked against cu_seqlens."""
        from stridepack.fla import fused_recurrent_kda
        h0 = torch.zeros(self.N, self.H, 128, 128)
        for name, value in (("ssm_state_indices", self.idx), ("inplace_final_state", True),
                            ("num_accepted_tokens", torch.ones(self.N, dtype=torch.int32)),
                            ("out", torch.empty(1, self.N, self.H, 128, dtype=torch.bfloat16))):
            with self.subTest(name=name):
                with self.assertRaises(ValueError) as cm:
                    fused_recurrent_kda(**self.fla_kw(), initial_state=h0, **{name: value})
                self.assertIn(f"fused_recurrent_kda: {name}=", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            fused_recurrent_kda(**self.fla_kw(), initial_state=h0[:3])
        self.assertIn("i.e., 4 rather than 3", str(cm.exception))

    def test_verify_table_equals_one_token_a_call(self):
        """A 2-D ssm_state_indices with num_accepted_tokens, in both layouts
        and both index widths: every state the table names is the drop-in's
        own one-token decode of that prefix, bit for bit; a padded row and a
        -1 column leave the pool alone."""
        from stridepack.fla import fused_recurrent_kda_fwd
        gen = torch.Generator().manual_seed(72)
        N, L, W, H, slots = 3, 3, 4, self.H, 14
        args, _ = kda_inputs(gen, T=N * L, H=H)
        cu = torch.arange(N + 1, dtype=torch.int32) * L
        kw = dict(self.fla_kw(), **{k: args[k] for k in ("q", "k", "v", "g", "beta", "A_log",
                                                         "dt_bias")}, cu_seqlens=cu)
        table = torch.randperm(slots, generator=gen)[:N * W].reshape(N, W)
        table[1] = -1         # padded
        table[2, 1] = -1      # the state after token 1 of sequence 2 is not kept
        acc = torch.tensor([2, 1, 4], dtype=torch.int32)
        pool0 = 0.1 * torch.randn(slots, H, 128, 128, generator=gen)  # K-first, fla's default
        want, o_want = pool0.clone(), torch.zeros(1, N * L, H, 128, dtype=torch.bfloat16)
        for n in (0, 2):
            one = pool0[table[n, acc[n] - 1]][None].clone()
            for t in range(L):
                x = {k: kw[k][:, n * L + t:n * L + t + 1] for k in ("q", "k", "v", "g", "beta")}
                o1, _ = fused_recurrent_kda_fwd(**dict(kw, **x, cu_seqlens=None),
                                                initial_state=one)
                o_want[:, n * L + t] = o1[:, 0]
                if table[n, t] >= 0:
                    want[table[n, t]] = one[0]
        for v_first in (False, True):
            for dt in (torch.int32, torch.int64):
                with self.subTest(state_v_first=v_first, dtype=dt):
                    pool = pool0.clone() if not v_first else pool0.transpose(-1, -2).contiguous()
                    o, ht = fused_recurrent_kda_fwd(**kw, initial_state=pool,
                                                    ssm_state_indices=table.to(dt),
                                                    num_accepted_tokens=acc.to(dt),
                                                    state_v_first=v_first)
                    self.assertIs(ht, pool)
                    got = pool if not v_first else pool.transpose(-1, -2)
                    self.assertTrue(bits_equal(o, o_want))
                    self.assertTrue((o[:, L:2 * L] == 0).all(), "the padded row")
                    self.assertTrue(torch.equal(got, want))
        self.assertFalse(torch.equal(want, pool0))

    def test_verify_misuse_is_named(self):
        from stridepack.fla import fused_recurrent_kda_fwd
        table = torch.arange(self.N * 2, dtype=torch.int32).reshape(self.N, 2)
        for change, named in ((dict(num_accepted_tokens=torch.ones(self.N, dtype=torch.int32)),
                               "num_accepted_tokens"),
                              (dict(ssm_state_indices=table, inplace_final_state=False,
                                    output_final_state=True), "inplace_final_state=False")):
            with self.subTest(named=named):
                pool = self.pool.clone()
                with self.assertRaises(ValueError) as cm:
                    fused_recurrent_kda_fwd(**dict(self.fla_kw(), initial_state=pool,
                                                   state_v_first=True, **change))
                self.assertIn(named, str(cm.exception))
                self.assertTrue(torch.equal(pool, self.pool))


class VllmConvDropIn(unittest.TestCase):
    """stridepack.vllm.causal_conv1d_fn / causal_conv1d_update in vLLM's
    layouts ([dim, T] x, states by cache index, pad_slot_id, has_initial_state)
    against the convolution written here with torch's conv1d, and bit for
    bit against stridepack's own calls."""

    def setUp(self):
        gen = torch.Generator().manual_seed(80)
        self.dim, self.W, self.slots = 48, 4, 6
        self.lens = [5, 0, 9, 3]
        self.T = sum(self.lens)
        self.weight = (torch.randn(self.dim, self.W, generator=gen) * 0.5).bfloat16()
        self.bias = (torch.randn(self.dim, generator=gen) * 0.1).bfloat16()
        self.states = torch.randn(self.slots, self.dim, self.W - 1, generator=gen).bfloat16()
        # vLLM's x: [dim, T], the transpose of the projection's token-major columns.
        self.x = torch.randn(self.T, self.dim + 8, generator=gen).bfloat16()[:, 4:4 + self.dim].t()
        self.qsl = torch.tensor([0, 5, 5, 14, 17], dtype=torch.int32)
        self.cache = torch.tensor([3, 0, -1, 5], dtype=torch.int32)  # sequence 2 padded
        self.init = torch.tensor([True, False, False, True])

    def conv_ref(self, x_seq, window, silu=True):
        """x_seq [dim, L] float64 after a window [dim, W - 1]: out [dim, L]
        and the new window."""
        z = torch.cat([window, x_seq], dim=1)
        if x_seq.shape[1] == 0:  # an empty sequence: its window as it starts
            return x_seq, z[:, -(self.W - 1):]
        out = torch.nn.functional.conv1d(z[None], self.weight.double()[:, None], self.bias.double(),
                                         groups=self.dim)[0]
        return (out * torch.sigmoid(out) if silu else out), z[:, -(self.W - 1):]

    def test_prefill_in_vllms_layout(self):
        from stridepack.vllm import causal_conv1d_fn
        states = self.states.clone()
        out = causal_conv1d_fn(self.x, self.weight, self.bias, states, self.qsl,
                               cache_indices=self.cache.long(), has_initial_state=self.init,
                               activation="silu")
        self.assertEqual(out.shape, self.x.shape)
        self.assertEqual(out.stride(0), 1)  # token-major in memory, as vLLM's
        want_states = self.states.clone()
        for n, L in enumerate(self.lens):
            s0, slot = int(self.qsl[n]), int(self.cache[n])
            if slot < 0:
                continue
            window = (self.states[slot].double() if self.init[n]
                      else torch.zeros(self.dim, self.W - 1, dtype=torch.float64))
            ref, new = self.conv_ref(self.x[:, s0:s0 + L].double(), window)
            if L:
                err = (out[:, s0:s0 + L].double() - ref).abs().max().item()
                self.assertLess(err, 2e-2 * max(1.0, ref.abs().max().item()))
            want_states[slot] = new.bfloat16()
        self.assertTrue(torch.equal(states, want_states))
        # Bit for bit stridepack's own call on the token-major view.
        states2, out2 = self.states.clone(), torch.empty(self.T, self.dim, dtype=torch.bfloat16)
        sp.causal_conv1d(self.x.t(), self.weight, self.qsl, states2, self.cache, bias=self.bias,
                         has_initial_state=self.init, silu=True, out=out2)
        live = torch.cat([torch.arange(int(self.qsl[n]), int(self.qsl[n + 1]))
                          for n in range(4) if self.cache[n] >= 0])
        self.assertTrue(torch.equal(out.t()[live].view(torch.int16), out2[live].view(torch.int16)))
        self.assertTrue(torch.equal(states, states2))

    def test_update_and_pad_slot_id(self):
        from stridepack.vllm import causal_conv1d_update
        gen = torch.Generator().manual_seed(81)
        x = torch.randn(4, self.dim, generator=gen).bfloat16()
        idx = torch.tensor([4, 9, 1, 2], dtype=torch.int64)  # 9: this call's pad_slot_id
        for shape3 in (False, True):
            with self.subTest(seqlen_dim=shape3):
                states = self.states.clone()
                xin = x[..., None] if shape3 else x
                out = causal_conv1d_update(xin, states, self.weight, self.bias, activation=True,
                                           conv_state_indices=idx, pad_slot_id=9)
                self.assertEqual(out.shape, xin.shape)
                out = out[..., 0] if shape3 else out
                want = self.states.clone()
                for n in (0, 2, 3):
                    s = int(idx[n])
                    ref, new = self.conv_ref(x[n].double()[:, None], self.states[s].double())
                    self.assertLess((out[n].double() - ref[:, 0]).abs().max().item(), 3e-2)
                    want[s] = new.bfloat16()
                self.assertTrue(torch.equal(states, want))  # slot 9 names no slot: untouched

    def test_refused_by_name(self):
        from stridepack.vllm import causal_conv1d_fn, causal_conv1d_update
        x1 = torch.zeros(2, self.dim, dtype=torch.bfloat16)
        cases = [
            (lambda st: causal_conv1d_update(x1, st, self.weight, num_accepted_tokens=torch.ones(
                2, dtype=torch.int32)), "num_accepted_tokens"),
            (lambda st: causal_conv1d_update(x1[..., None].expand(2, self.dim, 3), st,
                                             self.weight), "x=[2, 48, 3]"),
            (lambda st: causal_conv1d_fn(self.x, self.weight, None, st, self.qsl,
                                         initial_state_idx=torch.zeros(4, dtype=torch.int32)),
             "initial_state_idx"),
            (lambda st: causal_conv1d_fn(self.x, self.weight, None, st[..., :2], self.qsl),
             "conv_states"),
            (lambda st: causal_conv1d_fn(self.x, self.weight, None, st, self.qsl,
                                         activation="gelu"), "activation='gelu'"),
        ]
        for call, named in cases:
            with self.subTest(named=named):
                st = self.states.clone()
                with self.assertRaises(ValueError) as cm:
                    call(st)
                self.assertIn(named, str(cm.exception))
                self.assertTrue(torch.equal(st, self.states))


class NoObjectMemoryReads(unittest.TestCase):
    def test_hooks_are_gone(self):
        # The TensorImpl address comes from Tensor._cdata, never from the
        # tensor object's memory at a probed offset.
        for name in ("impl_slot", "impl_address"):
            self.assertFalse(hasattr(_native, name), name)
        self.assertIsInstance(_native.direct_reads(), bool)


class KdaInputsCpu(unittest.TestCase):
    """stridepack.KdaInputs on the CPU with torch: the K3 views come back
    dense and bit-equal to .contiguous(), dense ones as themselves, in one
    copy pass (none when none is strided), the same output objects again;
    bad inputs refused before anything is written; autograd falls back to
    .contiguous() with one warning."""

    def setUp(self):
        self.gen = torch.Generator().manual_seed(40)
        T, H = 50, 3
        P = H * 128

        def bits(*shape):
            return torch.randint(-32768, 32768, shape, dtype=torch.int16,
                                 generator=self.gen).view(torch.bfloat16)
        self.qkv, self.fab, gbuf = bits(T, 3 * P), bits(T, 128 + H), bits(T + 3, H, 128)
        self.xs = [self.qkv[:, i * P:(i + 1) * P].view(1, T, H, 128) for i in range(3)]
        self.xs += [gbuf[:T].unsqueeze(0), self.fab[:, 128:].view(1, T, H)]
        self.inputs = sp.KdaInputs("cpu", 64, 4)

    def test_k3_one_pass_then_dense_none(self):
        n = sp.copy_pass_count()
        out = self.inputs.pack(*self.xs)
        self.assertEqual(sp.copy_pass_count() - n, 1)
        for x, o in zip(self.xs, out):
            self.assertTrue(o.is_contiguous())
            self.assertTrue(bits_equal(o, x.contiguous()))
        self.assertIs(out[3], self.xs[3])
        again = self.inputs.pack(*self.xs)
        self.assertTrue(all(a is b for a, b in zip(out, again)))
        dense = [x.contiguous() for x in self.xs]
        n = sp.copy_pass_count()
        self.assertTrue(all(a is b for a, b in zip(self.inputs.pack(*dense), dense)))
        self.assertEqual(sp.copy_pass_count(), n)
        # Only beta strided: one input copied, the rest themselves.
        mixed = dense[:4] + [self.xs[4]]
        got = self.inputs.pack(*mixed)
        self.assertTrue(all(a is b for a, b in zip(got[:4], dense[:4])))
        self.assertTrue(bits_equal(got[4], self.xs[4].contiguous()))

    def test_refused_before_anything_is_written(self):
        ws = self.inputs._ws
        ws.fill_(0x5A)
        q, k, v, g, beta = self.xs
        cases = [((q, k, v.float(), g, beta), "SP_ERR_DTYPE_MISMATCH", "v: dtype f32"),
                 ((q, k, v, g, beta[:, :, :2]), "SP_ERR_SHAPE_MISMATCH", "beta: shape [1, 50, 2]"),
                 ((q, k[:, :49], v, g, beta), "SP_ERR_SHAPE_MISMATCH", "k: shape [1, 49, 3, 128]"),
                 (tuple(torch.zeros(x.shape[:1] + (70,) + x.shape[2:], dtype=torch.bfloat16)
                        for x in (q, k, v, g, beta)), "SP_ERR_CAPACITY", "q: T = 70 exceeds")]
        for args, status, text in cases:
            n = sp.copy_pass_count()
            with self.assertRaises(sp.StridepackError) as cm:
                self.inputs.pack(*args)
            self.assertEqual(cm.exception.status, status)
            self.assertIn(text, cm.exception.message)
            self.assertEqual(sp.copy_pass_count(), n)
            self.assertTrue(bool((ws == 0x5A).all()), "workspace written")

    def test_autograd_falls_back_once(self):
        _api._reset_warnings()
        q = self.xs[0].detach().clone().requires_grad_()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for _ in range(3):
                out = self.inputs.pack(q, *self.xs[1:])
        self.assertEqual(len([x for x in w if issubclass(x.category, sp.FallbackWarning)]), 1)
        self.assertTrue(out[0].requires_grad)
        self.assertTrue(bits_equal(out[1], self.xs[1].contiguous()))

    def test_closed(self):
        self.inputs.close()
        with self.assertRaises(sp.StridepackError):
            self.inputs.pack(*self.xs)


if __name__ == "__main__":
    sp_unittest.main(__name__)
