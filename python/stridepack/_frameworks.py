"""What differs between NumPy, PyTorch, CuPy and any other DLPack producer,
for the parts the extension leaves to Python: making an output array over a
workspace slot, allocating a workspace, CuPy's current stream, and the
framework's own copy that the binding falls back to. Frameworks are looked
up in sys.modules, never imported here: the binding costs nothing for
frameworks you don't use.

The extension holds FRAMEWORKS (in the order of its FW_* ids) and calls
out(), empty_bytes() and current_stream() on them; it reads arrays itself.
"""

import sys


class NumpyLike:
    """NumPy, and CuPy (the same array API on CUDA, read through DLPack by
    the extension)."""

    def __init__(self, name):
        self.name = name

    def out(self, ws, offset, like):
        """(dense view of ws's bytes [offset, ...) shaped like `like`, cacheable)."""
        mod = sys.modules[self.name]
        u8 = ws.reshape(-1).view(mod.uint8)
        return u8[offset:offset + like.nbytes].view(like.dtype).reshape(like.shape), False

    def empty_bytes(self, n, device):
        mod = sys.modules[self.name]
        if device[0] != 1:
            return mod.empty(n, dtype=mod.uint8)
        with mod.cuda.Device(device[1]):
            return mod.empty(n, dtype=mod.uint8)

    def current_stream(self, ordinal):
        cp = sys.modules[self.name]
        with cp.cuda.Device(ordinal):
            return cp.cuda.get_current_stream().ptr

    def contiguous(self, x):
        return x if x.flags.c_contiguous else sys.modules[self.name].ascontiguousarray(x)

    def copy(self, dst, src):
        sys.modules[self.name].copyto(dst, src, casting="no")


class Torch:
    name = "torch"

    @staticmethod
    def out(ws, offset, like):
        """A dense tensor over ws's bytes from `offset`, shaped like `like`.
        Detached, so that it holds the storage but no reference to the
        workspace tensor itself: the extension may keep it for the next call
        and still drop it when ws dies. Allocates nothing (CUDA graphs)."""
        torch = sys.modules["torch"]
        n = like.numel() * like.element_size()
        u8 = ws.reshape(-1).view(torch.uint8)[offset:offset + n]
        return u8.view(like.dtype).view(like.shape).detach(), True

    @staticmethod
    def probes():
        """CPU tensors on which the extension checks, once, that its direct
        reads of torch's C shim agree with the attribute reads: several
        dtypes, storage offsets, negative-free but permuted and sliced
        strides, sizes of 0 and 1. The device is named: under a default
        device context (`with torch.device("meta")`) the check would otherwise
        fail and leave the direct reads off for the process."""
        torch = sys.modules["torch"]
        cpu = torch.device("cpu")
        base = torch.zeros(4, 6, 10, dtype=torch.bfloat16, device=cpu)
        return [base, base[1:, 2:, ::3], base.transpose(0, 2)[:, 1:],
                torch.zeros(3, 5, dtype=torch.float32, device=cpu)[:, 1:4].t(),
                torch.zeros(7, dtype=torch.int64, device=cpu)[2:],
                torch.zeros(0, 3, dtype=torch.uint8, device=cpu),
                torch.zeros(1, 9, 1, dtype=torch.float16, device=cpu)[:, 1::2]]

    @staticmethod
    def empty_bytes(n, device):
        torch = sys.modules["torch"]
        dev = torch.device("cuda", device[1]) if device[0] == 1 else "cpu"
        return torch.empty(n, dtype=torch.uint8, device=dev)

    @staticmethod
    def current_stream(ordinal):
        return sys.modules["torch"].cuda.current_stream(ordinal).cuda_stream

    @staticmethod
    def contiguous(x):
        return x.contiguous()

    @staticmethod
    def copy(dst, src):
        dst.copy_(src)


class Generic:
    """Any other __dlpack__ producer: the library can read and write it
    (copy_batch; pack of inputs that are already dense), but the binding
    cannot make new arrays of a framework it does not know."""

    name = "dlpack"

    @staticmethod
    def _cannot(*args):
        raise TypeError("stridepack: cannot create arrays of an unknown DLPack producer; "
                        "pass NumPy arrays, PyTorch or CuPy tensors, or a workspace")

    out = empty_bytes = contiguous = copy = _cannot


FRAMEWORKS = [NumpyLike("numpy"), Torch(), NumpyLike("cupy"), Generic()]  # the extension's FW_* order


def framework_of(x):
    """The framework object of x (for the fallback paths)."""
    mods = sys.modules
    for name, fw in (("torch", FRAMEWORKS[1]), ("numpy", FRAMEWORKS[0]), ("cupy", FRAMEWORKS[2])):
        mod = mods.get(name)
        if mod is not None and isinstance(x, mod.Tensor if name == "torch" else mod.ndarray):
            return fw
    if hasattr(x, "__dlpack__"):
        return FRAMEWORKS[3]
    raise TypeError(f"stridepack: {type(x).__name__} is not an array (no __dlpack__)")


def autograd_recording(xs):
    torch = sys.modules.get("torch")
    return (torch is not None and torch.is_grad_enabled()
            and any(isinstance(x, torch.Tensor) and x.requires_grad for x in xs))
