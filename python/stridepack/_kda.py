"""The KDA prefill and its input boundary (include/stridepack_kda.h), thin:
arrays in, one extension call that fills sp_kda_args and calls the library.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Tuple, Union

from . import _api, _native
from ._api import Array
from ._errors import error

# sp_kda_gate and sp_kda_kernel: the values from the header the extension
# was compiled with, the kernel names from sp_kda_kernel_name().
GATES = {"lower_bound": _native.KDA_GATE_LOWER_BOUND, "softplus": _native.KDA_GATE_SOFTPLUS,
         "log_decay": _native.KDA_GATE_LOG_DECAY}
# sp_kda_beta: how b_t comes from the beta input.
BETAS = {"logits": _native.KDA_BETA_LOGITS, "logits_x2": _native.KDA_BETA_LOGITS_X2,
         "activated": _native.KDA_BETA_ACTIVATED}
KERNELS = {_native.kda_kernel_name(k): k
           for k in (_native.KDA_KERNEL_AUTO, _native.KDA_KERNEL_RECURRENT,
                     _native.KDA_KERNEL_CHUNKED, _native.KDA_KERNEL_CHUNKED_TWO_PASS,
                     _native.KDA_KERNEL_DECODE)}


def available() -> bool:
    """True when the linked library's KDA prefill runs: the extension runs
    a one-token CPU prefill once and says whether it succeeded."""
    return _native.kda_available()


def _beta_code(beta_form):
    if beta_form not in BETAS:
        raise error("SP_ERR_INVALID_ARGUMENT", 1,
                    f"beta_form: {beta_form!r} is not one of {sorted(BETAS)}")
    return BETAS[beta_form]


def _codes(gate, kernel):
    if gate not in GATES:
        raise error("SP_ERR_INVALID_ARGUMENT", 1, f"gate: {gate!r} is not one of {sorted(GATES)}")
    if kernel not in KERNELS:
        raise error("SP_ERR_INVALID_ARGUMENT", 1,
                    f"kernel: {kernel!r} is not one of {sorted(KERNELS)}")
    return GATES[gate], KERNELS[kernel]


def kda_prefill(q: Array, k: Array, v: Array, g: Array, beta: Array, A_log: Array,
                dt_bias: Array, cu_seqlens: Array, state: Array, state_indices: Array,
                o: Array, *, gate: str = "lower_bound", lower_bound: float = -5.0,
                scale: float = 0.0, checkpoint_interval: int = 0,
                checkpoint_cu_starts: Optional[Array] = None, checkpoints: Optional[Array] = None,
                reference: bool = False, kernel: str = "auto",
                workspace: Optional[Array] = None, beta_form: str = "logits",
                has_initial_state: Optional[Array] = None,
                num_accepted_tokens: Optional[Array] = None) -> None:
    """The KDA prefill (sp_kda_prefill; reference=True: the float64 CPU
    reference). Returns None; writes o, the state pool and the checkpoints in
    place, nothing else. T tokens, H heads, N sequences.

    q, k, v: bf16 [1, T, H, 128]; g: bf16 [1, T, H, 128], the raw gate input;
    beta: bf16 [1, T, H], logits (sigmoid in the kernel). q, k, v, g are read
    where they lie when dense, or when each (token, head) row of 128 channels
    is contiguous and 16-byte aligned (the column slices of a fused
    [T, 3 H*128] producer buffer are); other layouts are refused
    (KdaBoundary.run packs them); beta may have any strides.
    A_log: fp32 [H]; dt_bias: fp32 [H * 128]. gate "lower_bound" (K3:
    lower_bound * sigmoid(exp(A_log) * (g + dt_bias)), lower_bound in [-5, 0)),
    "softplus" (Kimi-Linear: -exp(A_log) * softplus(g + dt_bias)) or
    "log_decay" (g is the log-decay itself, bf16 or fp32, every value <= 0,
    -inf forgetting the channel; A_log and dt_bias not read). beta_form:
    "logits" (sigmoid(beta), the default), "logits_x2" (2 sigmoid(beta):
    negative eigenvalues) or "activated" (beta as given); beta bf16 or fp32.
    On CUDA the chunked kernels serve every form ("auto" picks them for
    every form as for K3's: their every-gate builds for the others).
    scale: multiplies the normalized q (0: 128 ** -0.5).
    cu_seqlens: int64 or int32 [N + 1] (fla's cu_seqlens, vLLM's
    query_start_loc). state: fp32 or bf16 [slots, H, 128, 128], V-first
    (element [s, h, j, d] holds S[d][j]), slot pitch may be padded; a
    K-first pool ([slots, H, K, V], fla's default) as its transpose,
    pool.transpose(-1, -2): read and written where it lies;
    state_indices: int32 or int64 [N]: sequence n starts from slot
    state_indices[n] and leaves its final state there (slots distinct); a
    negative entry marks a padded sequence, skipped: nothing read or
    written for it, its o rows not written. o: bf16 [1, T, H, 128], dense,
    written for the tokens of every sequence.
    has_initial_state: bool [N] (optional): False starts sequence n from a
    zero state, its slot not read, only written.
    Speculative verify: state_indices a table [N, W] (int32 or int64) and
    num_accepted_tokens int32 or int64 [N] (optional): sequence n (at most W
    tokens) starts from slot [n, num_accepted_tokens[n] - 1] (column 0
    without it) and the state after its token t goes to slot [n, t] (a
    negative entry: not written; a negative [n, 0]: padded, skipped). The
    states equal those of feeding the tokens one call at a time (bit for
    bit with an fp32 pool). The CPU prefill and the recurrent and decode
    kernels serve it (not the chunked ones); no checkpoints.
    checkpoint_interval n > 0 with checkpoint_cu_starts int64 or int32
    [N + 1] and checkpoints [C, H, 128, 128] (the state's dtype): the state
    after every n tokens of each sequence.
    kernel: "auto", "recurrent", "chunked", "chunked_two_pass" or "decode"
    (sp_kda_kernel; "decode": few tokens a sequence, CUDA, no checkpoints,
    chosen by "auto" there); workspace: a dense device array of at least
    kda_workspace_bytes(...) bytes, which lets "auto" pick the two-pass
    kernel where it is faster and "chunked_two_pass" run.
    On CUDA: the current stream, nothing allocated, graph-capturable. Every
    argument is checked before anything is written; errors are
    StridepackError naming the argument. Under torch.compile this is the
    custom op stridepack::kda_prefill."""
    gate_code, kernel_code = _codes(gate, kernel)
    beta_code = _beta_code(beta_form)
    if _api.compiling():
        _api._torch_ops.kda_prefill(
            (q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, state_indices, o,
             checkpoint_cu_starts, checkpoints, has_initial_state, num_accepted_tokens,
             workspace),
            gate_code, lower_bound, scale, checkpoint_interval, kernel_code, reference, beta_code)
        return
    arrays = (q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, state_indices, o,
              checkpoint_cu_starts, checkpoints, has_initial_state, num_accepted_tokens)
    if reference:
        _native.kda_reference(arrays, gate_code, lower_bound, scale, checkpoint_interval,
                              beta_code)
    else:
        _native.kda_prefill(arrays, gate_code, lower_bound, scale, checkpoint_interval,
                            kernel_code, workspace, beta_code)


def kda_workspace_bytes(q: Array, k: Array, v: Array, g: Array, beta: Array, A_log: Array,
                        dt_bias: Array, cu_seqlens: Array, state: Array,
                        state_indices: Array, o: Array, *, gate: str = "lower_bound",
                        lower_bound: float = -5.0, scale: float = 0.0,
                        checkpoint_interval: int = 0, checkpoint_cu_starts: Optional[Array] = None,
                        checkpoints: Optional[Array] = None,
                        has_initial_state: Optional[Array] = None,
                        num_accepted_tokens: Optional[Array] = None,
                        beta_form: str = "logits") -> int:
    """sp_kda_prefill_workspace_bytes: the workspace the two-pass kernel
    needs for these arguments (0 when no kernel that needs one serves them);
    the arguments as kda_prefill takes them."""
    gate_code, _ = _codes(gate, "auto")
    return _native.kda_workspace_bytes(
        (q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, state_indices, o,
         checkpoint_cu_starts, checkpoints, has_initial_state, num_accepted_tokens),
        gate_code, lower_bound, scale, checkpoint_interval, _beta_code(beta_form))


class KdaBoundary:
    """sp_kda_boundary: owns a workspace sized for max_tokens x max_heads on
    `device` ("cpu", "cuda", "cuda:N", a torch.device or an int ordinal) and
    runs the prefill on strided q, k, v, g, beta (packed in one launch).
    Same stream and same views for warm-up, capture and replay in graphs."""

    def __init__(self, device: Union[str, int, Any], max_tokens: int, max_heads: int) -> None:
        self._b = None
        self._b = _native.boundary_create(_parse_device(device), max_tokens, max_heads)
        self.max_tokens, self.max_heads = int(max_tokens), int(max_heads)

    def run(self, q: Array, k: Array, v: Array, g: Array, beta: Array, A_log: Array,
            dt_bias: Array, cu_seqlens: Array, state: Array, state_indices: Array,
            o: Array, *, gate: str = "lower_bound", lower_bound: float = -5.0,
            scale: float = 0.0, checkpoint_interval: int = 0,
            checkpoint_cu_starts: Optional[Array] = None, checkpoints: Optional[Array] = None,
            kernel: str = "auto", workspace: Optional[Array] = None,
            beta_form: str = "logits", has_initial_state: Optional[Array] = None,
            num_accepted_tokens: Optional[Array] = None) -> None:
        """The KDA prefill behind the input boundary (sp_kda_boundary_run).
        Returns None; writes o, the state pool and the checkpoints in place.

        Arguments, shapes and dtypes as kda_prefill (help(stridepack.kda_prefill)),
        except that q, k, v, g and beta may be any strided views: those the
        prefill cannot read where they lie are packed first, in one launch
        into the boundary's own workspace (none when every one can be read in
        place; last_copied says how many were). T may not exceed max_tokens,
        nor H max_heads (SP_ERR_CAPACITY). Without a workspace argument, the
        boundary's own serves the two-pass kernel where it has one (max_heads
        <= 32 on CUDA). Eager, captured and replayed calls use the same
        workspace addresses, so a CUDA graph replays with new input contents.
        Under torch.compile this is the custom op stridepack::kda_boundary_run."""
        gate_code, kernel_code = _codes(gate, kernel)
        beta_code = _beta_code(beta_form)
        if _api.compiling():
            T = q.shape[1] if q.dim() == 4 else 0
            if T > self.max_tokens or (q.dim() == 4 and q.shape[2] > self.max_heads):
                raise _refused("SP_ERR_CAPACITY", f"q: shape {list(q.shape)} exceeds the "
                               f"boundary's {self.max_tokens} tokens x {self.max_heads} heads")
            _api._torch_ops.kda_boundary_run(
                self.max_heads, (q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state,
                               state_indices, o, checkpoint_cu_starts, checkpoints,
                               has_initial_state, num_accepted_tokens, workspace),
                gate_code, lower_bound, scale, checkpoint_interval, kernel_code, beta_code)
            return
        if self._b is None:
            raise error("SP_ERR_INVALID_ARGUMENT", 1, "boundary: already closed")
        _native.kda_boundary_run(
            self._b, (q, k, v, g, beta, A_log, dt_bias, cu_seqlens, state, state_indices, o,
                      checkpoint_cu_starts, checkpoints, has_initial_state,
                      num_accepted_tokens),
            gate_code, lower_bound, scale, checkpoint_interval, kernel_code, workspace, beta_code)

    @property
    def last_copied(self) -> int:
        """How many of q, k, v, g, beta the last run copied."""
        if self._b is None:
            raise error("SP_ERR_INVALID_ARGUMENT", 1, "boundary: already closed")
        return _native.boundary_last_copied(self._b)

    def close(self) -> None:
        """Free the workspace; no work using it may be pending."""
        b, self._b = self._b, None
        if b is not None:
            _native.boundary_close(b)

    def __enter__(self) -> "KdaBoundary":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # No __del__: the capsule frees the boundary when it is dropped.


def _run_prefill_arrays(arrays, gate_code, lower_bound, scale, interval, kernel_code, reference,
                        beta_code):
    """The eager body of stridepack::kda_prefill."""
    *ts, workspace = arrays
    if reference:
        _native.kda_reference(tuple(ts), gate_code, lower_bound, scale, interval, beta_code)
    else:
        _native.kda_prefill(tuple(ts), gate_code, lower_bound, scale, interval, kernel_code,
                            workspace, beta_code)


KDA_INPUT_NAMES = ("q", "k", "v", "g", "beta")
_codes_by_name = {}


def _refused(status, message):
    """The StridepackError for a status named `status`, its value read
    from the library (sp_status_string), not written here."""
    if not _codes_by_name:
        for c in range(64):
            _codes_by_name[_native.status_string(c).split(":", 1)[0]] = c
    return error(status, _codes_by_name[status], message)


class KdaInputs:
    """The input boundary in front of any KDA kernel (sp_kda_inputs):
    sized once for max_tokens x max_heads on `device` (as KdaBoundary), it
    owns its workspace, so the packed copies are at the same addresses on
    every call: the eager path and a CUDA graph are one path.

        inputs = stridepack.KdaInputs("cuda", max_tokens=16384, max_heads=96)
        q, k, v, g, beta = inputs.pack(q, k, v, g, beta)   # then any KDA kernel

    pack() checks q, k, v, g ([1, T, H, 128]) and beta ([1, T, H]): bf16,
    on the device, T <= max_tokens, H <= max_heads, views the library can
    index, before anything is written (StridepackError otherwise). An input
    that is already dense comes back as itself; the others are copied with
    one kernel launch on the current stream (none when none need it). With
    torch, the workspace is a torch tensor and the copies are torch tensors
    viewing it (the same objects again on the next call with the same
    views). While autograd records, each input comes back as .contiguous(),
    with one FallbackWarning. Under torch.compile the copies are made by
    the custom op stridepack::pack (new tensors the compiler owns)."""

    def __init__(self, device: Union[str, int, Any], max_tokens: int, max_heads: int) -> None:
        self._p = None
        self.device = _parse_device(device)
        self.max_tokens, self.max_heads = int(max_tokens), int(max_heads)
        nbytes = _native.kda_inputs_workspace_bytes(self.max_tokens, self.max_heads)
        self._ws = _workspace_array(self.device, nbytes)
        self._p = _native.kda_inputs_create(self.device, self.max_tokens, self.max_heads,
                                            self._ws if nbytes else None)

    @property
    def workspace_bytes(self) -> int:
        """The bytes of the workspace this object owns."""
        return _native.kda_inputs_workspace_bytes(self.max_tokens, self.max_heads)

    def pack(self, q: Array, k: Array, v: Array, g: Array, beta: Array) -> Tuple[Array, ...]:
        """(q, k, v, g, beta), each dense: the input itself or its copy."""
        xs = [q, k, v, g, beta]
        if _api.compiling():
            self._check_traced(xs)
            return tuple(_api._torch_ops.pack(xs))
        if self._p is None:
            raise _refused("SP_ERR_INVALID_ARGUMENT", "KdaInputs: already closed")
        try:
            return tuple(_native.kda_inputs_pack(self._p, xs, self._ws, self.device))
        except _api.Fallback:  # autograd records: the framework's copies
            _api._warn_once("autograd", "autograd is recording (an input requires grad): "
                            "KdaInputs.pack uses per-tensor .contiguous() so that gradients flow")
            return tuple(x.contiguous() for x in xs)

    def _check_traced(self, xs):
        """The contract on what a trace sees (shapes, dtypes, devices are
        static there), so that a compiled call refuses what eager refuses."""
        torch = sys.modules["torch"]
        dev = torch.device("cpu") if self.device[0] == 0 else torch.device("cuda", self.device[1])
        for name, x in zip(KDA_INPUT_NAMES, xs):
            if x.device != dev:
                raise _refused("SP_ERR_DEVICE_MISMATCH", f"{name}: on {x.device}, the inputs "
                            f"boundary serves {dev}")
            if x.dtype != torch.bfloat16:
                raise _refused("SP_ERR_DTYPE_MISMATCH", f"{name}: dtype {x.dtype}, the KDA "
                            "inputs are bf16")
        # The shape rule of sp_kda_check_inputs_, in its words.
        q = xs[0]
        if q.dim() != 4 or q.shape[0] != 1:
            raise _refused("SP_ERR_SHAPE_MISMATCH", f"q: shape {list(q.shape)}, expected "
                        "[1, T, H, 128] (batch 1, varlen)")
        if q.shape[3] != 128:
            raise _refused("SP_ERR_UNSUPPORTED", f"q: head dim {q.shape[3]} is not supported "
                        "(only 128)")
        T, H = q.shape[1], q.shape[2]
        for name, x in zip(KDA_INPUT_NAMES[1:4], xs[1:4]):
            if tuple(x.shape) != tuple(q.shape):
                raise _refused("SP_ERR_SHAPE_MISMATCH", f"{name}: shape {list(x.shape)} "
                            f"differs from q {list(q.shape)}")
        if tuple(xs[4].shape) != (1, T, H):
            raise _refused("SP_ERR_SHAPE_MISMATCH", f"beta: shape {list(xs[4].shape)}, "
                        f"expected [1, {T}, {H}] (q's T, H)")
        if T > self.max_tokens or H > self.max_heads:
            raise _refused("SP_ERR_CAPACITY", f"q: T = {T}, H = {H} exceed the inputs "
                        f"boundary's {self.max_tokens} x {self.max_heads}")

    def close(self) -> None:
        """Free the library object; the workspace goes with this object."""
        p, self._p = self._p, None
        if p is not None:
            _native.kda_inputs_close(p)

    def __enter__(self) -> "KdaInputs":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _workspace_array(device, nbytes):
    """The workspace of a KdaInputs: a torch tensor when torch is imported
    (its packed copies are then torch tensors), else a NumPy array (CPU)."""
    torch = sys.modules.get("torch")
    n = max(nbytes, 1)
    if torch is not None:
        dev = torch.device("cpu") if device[0] == 0 else torch.device("cuda", device[1])
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise _refused("SP_ERR_NO_DEVICE", "device: torch sees no CUDA device")
        return torch.empty(n, dtype=torch.uint8, device=dev)
    if device[0] != 0:
        raise _refused("SP_ERR_NO_DEVICE", "device: a CUDA KdaInputs needs torch imported "
                    "first (its workspace is a torch tensor)")
    import numpy
    return numpy.empty(n, dtype=numpy.uint8)


def _parse_device(device):
    if isinstance(device, int) and not isinstance(device, bool):
        return 1, device  # a negative ordinal is refused by the extension, named
    s = str(device)  # torch.device prints as "cuda:0" / "cpu"
    if s == "cpu":
        return 0, 0
    if s == "cuda":
        return 1, 0
    if s.startswith("cuda:") and s[5:].isdigit():
        return 1, int(s[5:])
    raise ValueError(f"stridepack: device {device!r} is not cpu, cuda or cuda:N")
