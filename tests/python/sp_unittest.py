"""Run one test module's unittest cases and turn the result into the exit
status ctest reads: 0 only when tests ran and all passed; 1 when one failed
or none ran (a run that compared nothing must not count as a pass)."""

import sys
import unittest


def main(module_name):
    module = sys.modules[module_name]
    suite = unittest.defaultTestLoader.loadTestsFromModule(module)
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    ran = result.testsRun - len(result.skipped)
    if ran == 0:
        print("FAIL: no test ran", file=sys.stderr)
        sys.exit(1)
    sys.exit(0 if result.wasSuccessful() else 1)


def torch_with_cuda():
    """torch, when it imports and sees a CUDA device; else exit 77 (ctest's
    "not run") with the reason."""
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not importable")
        sys.exit(77)
    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        sys.exit(77)
    return torch


def torch_views(torch, gen, count, device="cpu"):
    """`count` views of random tensors as producers leave them: every dtype
    the library moves, slices with steps, permutations, broadcast (stride 0)
    and size 0 or 1 dims, storage offsets."""
    dtypes = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.bfloat16, torch.float32, torch.float64]

    def r(n):  # 0 .. n-1 from the test's own generator
        return int(torch.randint(0, n, (), generator=gen))

    views = []
    for _ in range(count):
        ndim = 1 + r(4)
        shape = [1 + r(6) for _ in range(ndim)]
        x = torch.zeros(shape, dtype=dtypes[r(len(dtypes))], device=device)
        for d in range(ndim):
            if r(2):
                start = r(shape[d])
                length = 0 if r(12) == 0 else 1 + r(shape[d] - start)
                x = x.narrow(d, start, length).__getitem__(
                    (slice(None),) * d + (slice(None, None, 1 + r(3)),))
        if ndim > 1 and r(2):
            x = x.transpose(r(ndim), r(ndim))
        if r(4) == 0:
            x = x.unsqueeze(r(x.dim() + 1))
            x = x.expand(*[3 if s == 1 and r(2) else s for s in x.shape])
        views.append(x)
    return views


def check_direct_reads(test, native, xs):
    """Each torch tensor of xs reads the same through torch's C shim (the
    TensorImpl address from Tensor._cdata) as through its attributes
    (native: stridepack._native, the shim in use)."""
    try:
        for x in xs:
            what = f"{x.dtype} {tuple(x.shape)} {x.stride()}"
            native.direct_reads(True)
            direct = native.describe(x)
            native.direct_reads(False)
            test.assertEqual(direct, native.describe(x), what)
    finally:
        native.direct_reads(True)
