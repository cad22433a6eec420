"""The PyTorch side of the binding on the CPU, so that it is tested without a
GPU: the fast read of torch tensors, the repeated-call argument cache (a
repeat copies what the inputs hold now, returns new output objects, and keeps
no dropped workspace alive), views with the lazy negation bit, bf16 through
a transposed view. Exits 77 when torch is not importable."""

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
        gen = torch.Generator().manual_seed(2)
        xs, _ = k3_like(gen)
        ws = torch.empty(sp.workspace_bytes(xs), dtype=torch.uint8)
        o1 = sp.pack(xs, workspace=ws)[0]
        o1.unsqueeze_(0)  # the caller's own view, changed in place
        o2 = sp.pack(xs, workspace=ws)[0]
        self.assertIsNot(o1, o2)
        self.assertEqual(tuple(o2.shape), tuple(xs[0].shape))
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


if __name__ == "__main__":
    sp_unittest.main(__name__)
