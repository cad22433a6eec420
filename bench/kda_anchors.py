#!/usr/bin/env python3
"""kda_anchors.py — stridepack's KDA prefill kernels beside the third-party
anchors (FlashKDA, the Flash-Flash-KDA fork, fla chunk_kda), in one process
on one GPU, on the same inputs.

Run: SP_ANCHOR_DIR=.anchors PYTHONPATH=<build>/python python3 bench/kda_anchors.py --json OUT.json
(--json replaces its file: append OUT.json to bench/results/h200_kda_anchors.json, the file of record)
The gate forms: --gates lower_bound,softplus,log_decay --shapes gates (every
arm and shape for each form; fla's chunk_kda with the matching options; the
FlashKDA arms take the lower-bound gate only; records carry "gate").

No third-party code lives in this file: it only calls their APIs. Their
sources come from folders under $SP_ANCHOR_DIR (default .anchors):
  flashkda/csrc/{flash_kda.cpp,fwd.h,smxx/*}   github MoonshotAI/FlashKDA
  ffkda/csrc/{flash_kda.cpp,fwd.h,smxx/*}      github Itssshikhar/FlashKDA @ c2626fb
  cutlass/{include,examples/common,tools/util/include}   NVIDIA/cutlass @ 5c149f52 (v4.3.2)
  fla/fla/...                                  github fla-org/flash-linear-attention
FlashKDA and the fork are compiled with torch.utils.cpp_extension.load (sm_90a)
into $SP_ANCHOR_BUILD/<arm> (default /tmp/anchor_build), both at once in two
child processes; fla is imported from $SP_ANCHOR_DIR/fla with its backend
dispatch off (FLA_DISABLE_BACKEND_DISPATCH=1: its own Triton kernels, never a
FlashKDA or TileLang backend). An anchor that fails to build, import or run is
reported and skipped; the rest still runs. stridepack failing to import stops the
run (exit 2): there would be nothing to compare.

The K3 contract (DESIGN.md, "KDA contract"): gate lower_bound *
sigmoid(exp(A_log) * (g_raw + dt_bias)), lower_bound -5; beta = sigmoid(logits);
q, k l2-normalized inside (eps 1e-6), scale 128^-0.5; fp32 state, V-first
[N, H, V, K]; varlen through cu_seqlens (int64). Every arm takes exactly this:
  stridepack  kda_prefill(q, k, v, g, beta, A_log, dt_bias[H*128], cu_seqlens,
              state pool [N, H, V, K] fp32 (in place, state_indices = arange),
              state_indices, o, gate="lower_bound", kernel=..., workspace=...)
  flashkda    fwd(q, k, v, g, beta, scale, out, workspace, A_log, dt_bias[H,128],
  / ffkda     lower_bound, initial_state=[N,H,V,K] fp32, final_state=[N,H,V,K]
              fp32, cu_seqlens=int64 [N+1]); workspace get_workspace_size(T, H, N)
              bytes. The fork also takes uniform_seq_len (equal lengths): timed as
              kernel "uniform_seq_len" beside its default varlen call.
  fla         chunk_kda(..., use_gate_in_kernel=True, A_log, dt_bias[H*128],
              lower_bound=-5, safe_gate=True, use_beta_sigmoid_in_kernel=True,
              use_qk_l2norm_in_kernel=True, state_v_first=True, initial_state fp32,
              output_final_state=True, cu_seqlens, cu_seqlens_cpu) under
              torch.inference_mode(); it allocates o and the final state itself.
Timing: for each shape, every arm is warmed (--warmup calls; the first two are
also compared bit for bit: "rerun_identical", and checked finite), then
--reps rounds each call every arm once in turn (interleaved); each call is
timed by CUDA events around the call alone, after its output has been poisoned
(NaN) and its state pool reset outside the events; ms is the median.
Accuracy: small cases (lengths of several residues mod 32 and 16, gates near 0
and at the bound, beta logits +-10): o_rel and state_rel are relative L2 errors
against an fp32 token-by-token recurrence on fp64-preprocessed gates, betas
and norms (computed here, in torch).
Output: --json FILE gets one JSON object per line: a "meta" line, then per arm
x shape {"arm", "kernel", "T", "H", "N", "ms", ...} and per arm x accuracy
case {"arm", "kernel", "o_rel", "state_rel", "case", ...}; every record carries
device, date and commit. The tables are printed last.
--self-test checks the reference and the bookkeeping on the CPU (no GPU).
"""

import argparse
import datetime
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
import types

import torch

SHAPES = [(16384, 96, 1), (16384, 96, 8), (16384, 64, 1), (8192, 96, 1), (2048, 96, 1),
          (2048, 96, 16), (16384, 24, 1), (16384, 12, 1), (65536, 12, 1)]
SP_KERNELS = ("recurrent", "chunked", "chunked_two_pass", "auto")
# The gate forms (sp_kda_gate): K3's lower bound, Kimi-Linear's softplus, and
# the log-decay computed before the call (fla's use_gate_in_kernel=False: the
# softplus gate's values, fp32 as vLLM's gate kernel writes them, or rounded
# to bf16: log_decay_bf16, copied in with k and q). --gates picks
# them; FlashKDA and its fork take the lower-bound gate only.
GATES = ("lower_bound", "softplus", "log_decay", "log_decay_bf16")
# --shapes gates: the shapes of the gate comparison (T, H, lengths).


def unequal_lengths(T, N, seed):
    """N unequal lengths (each >= 1) summing to T, from N - 1 cut points
    drawn without replacement from 1 .. T - 1 by random.Random(seed)."""
    cuts = sorted(random.Random(seed).sample(range(1, T), N - 1))
    bounds = [0] + cuts + [T]
    return tuple(bounds[i + 1] - bounds[i] for i in range(N))


# Unequal varlen batches at K3's one-GPU head count (seeded, in the default
# table after SHAPES; --shapes varlen alone).
VARLEN_SHAPES = [(16384, 96, unequal_lengths(16384, 8, 8)),
                 (16384, 96, unequal_lengths(16384, 32, 32))]
GATE_SHAPES = [(16384, 96, (16384,)), (16384, 32, (16384,)), (16384, 16, (16384,)),
               (8192, 32, (4096, 2048, 1536, 512))]
LOWER_BOUND = -5.0
SCALE = 128 ** -0.5
D = 128
ANCHOR_SRC = {"flashkda": "flashkda", "ffkda": "ffkda"}  # arm -> folder under SP_ANCHOR_DIR
CUDA_FLAGS = ['-O3', '--use_fast_math', '--expt-relaxed-constexpr', '--expt-extended-lambda',
              '-U__CUDA_NO_HALF_OPERATORS__', '-U__CUDA_NO_HALF_CONVERSIONS__',
              '-U__CUDA_NO_HALF2_OPERATORS__', '-U__CUDA_NO_BFLOAT16_CONVERSIONS__',
              '-gencode', 'arch=compute_90a,code=sm_90a', '--threads', '16']
# Accuracy cases: (name, lengths, H). Lengths mod 32: 27, 30, 7 / 11, 21; mod 16: 11, 14, 7 / 11, 5.
ACC_CASES = [("T4096_H4_N3", (1371, 2046, 679), 4), ("T8192_H2_N2", (5003, 3189), 2)]

ANCHOR_DIR = os.path.abspath(os.environ.get("SP_ANCHOR_DIR", ".anchors"))
BUILD_DIR = os.path.abspath(os.environ.get("SP_ANCHOR_BUILD", "/tmp/anchor_build"))


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- anchors: build / import

def _load_extension(arm):
    """torch.utils.cpp_extension.load of FlashKDA or the fork; returns the module."""
    from torch.utils import cpp_extension
    src = os.path.join(ANCHOR_DIR, ANCHOR_SRC[arm], "csrc")
    cut = os.path.join(ANCHOR_DIR, "cutlass")
    for f in ("flash_kda.cpp", os.path.join("smxx", "fwd_launch.cu")):
        if not os.path.isfile(os.path.join(src, f)):
            raise FileNotFoundError(os.path.join(src, f))
    if not os.path.isdir(os.path.join(cut, "include", "cute")):
        raise FileNotFoundError(os.path.join(cut, "include", "cute"))
    bdir = os.path.join(BUILD_DIR, arm)
    os.makedirs(bdir, exist_ok=True)
    # A flag containing "arch" makes cpp_extension add no arch flags of its own.
    return cpp_extension.load(
        name=f"{arm}_anchor",
        sources=[os.path.join(src, "flash_kda.cpp"), os.path.join(src, "smxx", "fwd_launch.cu")],
        extra_include_paths=[os.path.join(cut, "include"), os.path.join(cut, "examples", "common"),
                             os.path.join(cut, "tools", "util", "include"), src],
        extra_cflags=["-O3"],
        extra_cuda_cflags=list(CUDA_FLAGS),
        build_directory=bdir,
        verbose=False)


def build_anchors(arms):
    """Compile the CUDA anchors in parallel child processes (each ~60 s), then
    load them here (no rebuild: ninja finds them up to date). Returns
    ({arm: module}, {arm: reason skipped})."""
    mods, skipped, procs = {}, {}, {}
    os.makedirs(BUILD_DIR, exist_ok=True)
    for arm in arms:
        logf = os.path.join(BUILD_DIR, f"{arm}.log")
        with open(logf, "w") as fh:
            procs[arm] = (subprocess.Popen([sys.executable, os.path.abspath(__file__), "--_build", arm],
                                           stdout=fh, stderr=subprocess.STDOUT), logf, time.time())
    for arm, (p, logf, t0) in procs.items():
        rc = p.wait()
        dt = time.time() - t0
        if rc != 0:
            with open(logf, errors="replace") as fh:
                tail = fh.read()[-3000:]
            skipped[arm] = f"build failed (rc {rc}, {dt:.0f} s; log {logf}): ...{tail}"
            log(f"[{arm}] BUILD FAILED after {dt:.0f} s, skipped; log {logf}\n{tail}")
            continue
        try:
            mods[arm] = _load_extension(arm)
            log(f"[{arm}] built and loaded ({dt:.0f} s)")
        except Exception as e:  # noqa: BLE001 - any failure skips the arm
            skipped[arm] = f"import failed: {type(e).__name__}: {str(e)[-2000:]}"
            log(f"[{arm}] IMPORT FAILED, skipped: {skipped[arm]}")
    return mods, skipped


def import_fla():
    """fla's chunk_kda from $SP_ANCHOR_DIR/fla (import_fla_op)."""
    return import_fla_op("fla.ops.kda.chunk", "chunk_kda")


def import_fla_op(module, name):
    """`name` of fla's `module` from $SP_ANCHOR_DIR/fla, without running the
    package __init__ files of fla, fla.ops and fla.modules (they import every
    layer, model and op, with transformers and einops)."""
    os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
    root = os.path.join(ANCHOR_DIR, "fla")
    if not os.path.isfile(os.path.join(root, "fla", "ops", "kda", "chunk.py")):
        raise FileNotFoundError(os.path.join(root, "fla", "ops", "kda", "chunk.py"))
    if root not in sys.path:
        sys.path.insert(0, root)
    # fla.utils reads the package's __version__ (from .. import __version__):
    # the stub carries the one fla/__init__.py states, read as text.
    import re
    with open(os.path.join(root, "fla", "__init__.py")) as fh:
        found = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", fh.read(), re.M)
    for pkg in ("fla", "fla.ops", "fla.modules"):  # not `name`: the op's name, returned below
        if pkg not in sys.modules:
            m = types.ModuleType(pkg)
            m.__path__ = [os.path.join(root, *pkg.split("."))]
            if pkg == "fla":
                m.__version__ = found.group(1) if found else "0"
            sys.modules[pkg] = m
            if "." in pkg:
                parent, child = pkg.rsplit(".", 1)
                setattr(sys.modules[parent], child, m)
    import importlib
    return getattr(importlib.import_module(module), name)


def fla_without_autotuning():
    """For tests, before fla is imported: every Triton autotuner built from
    then on keeps only the first of its configs, so each of fla's kernel
    specializations compiles once instead of once per config and is not
    benchmarked against the others (a test grid over fla's options would
    otherwise spend many minutes compiling). fla's arithmetic is unchanged;
    only its tiling is fixed. Never for timing: the benchmark arms keep
    fla's own autotuning."""
    from triton.runtime import autotuner
    init = autotuner.Autotuner.__init__
    if getattr(init, "sp_first_config_only", False):
        return

    def first_config_only(self, fn, arg_names, configs, *args, **kwargs):
        init(self, fn, arg_names, list(configs)[:1], *args, **kwargs)
    first_config_only.sp_first_config_only = True
    autotuner.Autotuner.__init__ = first_config_only


def import_stridepack():
    import stridepack
    if not stridepack.kda_available():
        raise RuntimeError("this stridepack build has no KDA part")
    return stridepack


# ---------------------------------------------------------------- the calls (one helper each)

def sp_prefill(sp, x, o, state, kernel, workspace):
    """stridepack's prefill on x's inputs; o and the state pool in place.
    Keep every stridepack call here (argument names live in python/stridepack/_kda.py)."""
    sp.kda_prefill(x["q"], x["k"], x["v"], x["g"], x["beta"], x["A_log"], x["dt_bias"],
                   x["cu"], state, x["idx"], o, gate=x["form"], lower_bound=LOWER_BOUND,
                   scale=SCALE, kernel=kernel, workspace=workspace)


def sp_workspace_bytes(sp, x, o, state):
    return int(sp.kda_workspace_bytes(x["q"], x["k"], x["v"], x["g"], x["beta"], x["A_log"],
                                      x["dt_bias"], x["cu"], state, x["idx"], o,
                                      gate=x["form"], lower_bound=LOWER_BOUND, scale=SCALE))


def flashkda_fwd(mod, x, o, ws, final_state, uniform_seq_len=0):
    """FlashKDA / the fork: fwd(q, k, v, g, beta, scale, out, workspace, A_log,
    dt_bias[H,128], lower_bound, initial_state=, final_state=, cu_seqlens=)."""
    H = x["H"]
    kw = dict(initial_state=x["state0"], final_state=final_state, cu_seqlens=x["cu"])
    if uniform_seq_len:
        kw["uniform_seq_len"] = int(uniform_seq_len)
    mod.fwd(x["q"], x["k"], x["v"], x["g"], x["beta"], float(SCALE), o, ws, x["A_log"],
            x["dt_bias"].view(H, D), float(LOWER_BOUND), **kw)


def fla_call(chunk_kda, x, safe_gate=True):
    """fla's chunk_kda with the options of x's gate form: the K3 gate in the
    kernel with its lower bound; softplus in the kernel (lower_bound None);
    the log-decay as g (use_gate_in_kernel=False)."""
    gate = x["form"]
    opts = dict(use_gate_in_kernel=gate != "log_decay")
    if gate == "lower_bound":
        opts.update(safe_gate=safe_gate, lower_bound=LOWER_BOUND)
    with torch.inference_mode():
        return chunk_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], scale=SCALE,
                         initial_state=x["state0"], output_final_state=True,
                         use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                         state_v_first=True, cu_seqlens=x["cu"], cu_seqlens_cpu=x["cu_cpu"],
                         A_log=x["A_log"], dt_bias=x["dt_bias"], **opts)


# ---------------------------------------------------------------- inputs and reference

def make_inputs(lengths, H, device, seed, edge=False, gate="lower_bound"):
    """Inputs for sequences of `lengths` (B = 1, varlen) and a gate form:
    the K3 contract for "lower_bound"; for "softplus" the same raw gate input
    with A_log in [-0.5, 0.5] (edge: up to 3); for "log_decay" g is that
    softplus gate's value itself, fp32 (log_decay_bf16: rounded to bf16;
    edge: some channels at -60, forgotten within a token). edge=True: gate inputs a mix of U(-4, 1.5), -30 and +30,
    beta logits a mix of U(-3, 3) and +-10."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    T, N = int(sum(lengths)), len(lengths)

    def U(shape, lo, hi):
        return torch.rand(shape, generator=gen, device=device) * (hi - lo) + lo

    q = torch.randn(1, T, H, D, generator=gen, device=device).bfloat16()
    k = torch.randn(1, T, H, D, generator=gen, device=device).bfloat16()
    v = torch.randn(1, T, H, D, generator=gen, device=device).bfloat16()
    g = U((1, T, H, D), -4.0, 1.5)
    beta = U((1, T, H), -3.0, 3.0)
    if edge:
        sel = torch.rand(1, T, H, D, generator=gen, device=device)
        g = torch.where(sel < 0.2, torch.full_like(g, -30.0), g)
        g = torch.where(sel > 0.8, torch.full_like(g, 30.0), g)
        selb = torch.rand(1, T, H, generator=gen, device=device)
        beta = torch.where(selb < 0.15, torch.full_like(beta, -10.0), beta)
        beta = torch.where(selb > 0.85, torch.full_like(beta, 10.0), beta)
    cu_list = [0]
    for L in lengths:
        cu_list.append(cu_list[-1] + int(L))
    A_log = U((H,), -0.5, 3.0 if edge and gate != "lower_bound" else 0.5).float()
    dt_bias = U((H * D,), -0.5, 0.5).float()
    g = g.bfloat16()
    form = "log_decay" if gate.startswith("log_decay") else gate
    if form == "log_decay":
        graw = g.double() + dt_bias.double().view(1, 1, H, D)
        g = -torch.exp(A_log.double()).view(1, 1, H, 1) * torch.nn.functional.softplus(graw)
        if edge:
            sel = torch.rand(1, T, H, D, generator=gen, device=device)
            g = torch.where(sel < 0.02, torch.full_like(g, -60.0), g)
        g = g.bfloat16() if gate == "log_decay_bf16" else g.float()
    x = dict(q=q, k=k, v=v, g=g, beta=beta.bfloat16(), gate=gate, form=form,
             A_log=A_log, dt_bias=dt_bias,
             cu=torch.tensor(cu_list, dtype=torch.int64, device=device),
             cu_cpu=torch.tensor(cu_list, dtype=torch.int64),
             idx=torch.arange(N, dtype=torch.int32, device=device),
             state0=(0.05 * torch.randn(N, H, D, D, generator=gen, device=device)).float(),
             T=T, H=H, N=N, lengths=tuple(int(L) for L in lengths))
    return x


def gate_f64(x):
    """The per-channel log-decay [T, H, K] of x's gate form, in fp64."""
    T, H = x["T"], x["H"]
    f64 = torch.float64
    if x["form"] == "log_decay":
        return x["g"].reshape(T, H, D).to(f64)
    graw = x["g"].reshape(T, H, D).to(f64) + x["dt_bias"].to(f64).view(1, H, D)
    expA = torch.exp(x["A_log"].to(f64)).view(1, H, 1)
    if x["form"] == "softplus":
        return -expA * torch.nn.functional.softplus(graw)
    return LOWER_BOUND * torch.sigmoid(expA * graw)


def reference(x, dtype=torch.float32):
    """Token-by-token recurrence in `dtype` on gates, betas and normalized
    q, k computed in fp64. Returns (o [T, H, V], final state [N, H, V, K]),
    both `dtype`. Vectorized over heads; loops over tokens."""
    T, H = x["T"], x["H"]
    f64 = torch.float64
    decay = torch.exp(gate_f64(x)).to(dtype)                       # [T, H, K]
    b = torch.sigmoid(x["beta"].reshape(T, H).to(f64)).to(dtype)  # [T, H]
    q = x["q"].reshape(T, H, D).to(f64)
    k = x["k"].reshape(T, H, D).to(f64)
    qh = (SCALE * q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)).to(dtype)
    kh = (k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)).to(dtype)
    v = x["v"].reshape(T, H, D).to(dtype)
    o = torch.zeros(T, H, D, dtype=dtype, device=q.device)
    fin = torch.empty(x["N"], H, D, D, dtype=dtype, device=q.device)
    cu = x["cu_cpu"].tolist()
    for n in range(x["N"]):
        S = x["state0"][n].to(dtype).transpose(1, 2).contiguous()   # [H, K, V]: S[d][j]
        for t in range(cu[n], cu[n + 1]):
            S.mul_(decay[t].unsqueeze(-1))
            kt = kh[t].unsqueeze(1)                                 # [H, 1, K]
            u = v[t] - torch.bmm(kt, S).squeeze(1)                  # [H, V]
            S.add_(b[t].view(H, 1, 1) * kh[t].unsqueeze(-1) * u.unsqueeze(1))
            o[t] = torch.bmm(qh[t].unsqueeze(1), S).squeeze(1)
        fin[n] = S.transpose(1, 2)
    return o, fin


def rel_l2(a, ref):
    a, ref = a.double().reshape(-1), ref.double().reshape(-1)
    den = torch.linalg.norm(ref).item()
    return torch.linalg.norm(a - ref).item() / (den if den > 0 else 1.0)


# ---------------------------------------------------------------- arms

class Arm:
    """One benchmark arm on one input set: prep() (outside the events:
    poison, reset), call() (inside), outputs(result) -> (o, final state V-first)."""

    def __init__(self, arm, kernel, call, prep, outputs, note=None):
        self.arm, self.kernel, self.call, self.prep, self.outputs, self.note = \
            arm, kernel, call, prep, outputs, note

    @property
    def label(self):
        return self.arm if self.kernel is None else f"{self.arm}:{self.kernel}"


def make_arms(x, sp, mods, chunk_kda, want, with_recurrent, fla_safe_gate, skipped):
    """The arms for input set x. `want`: arm names to include. Failures to
    set an arm up (workspace query, allocation) are recorded in skipped."""
    dev = x["q"].device
    T, H, N = x["T"], x["H"], x["N"]
    arms = []
    nan = float("nan")
    if sp is not None and "stridepack" in want:
        o_sp = torch.empty(1, T, H, D, dtype=torch.bfloat16, device=dev)
        pool = x["state0"].clone()
        try:
            wsb = sp_workspace_bytes(sp, x, o_sp, pool)
        except Exception as e:  # noqa: BLE001
            wsb = 0
            skipped[("stridepack", "workspace")] = f"kda_workspace_bytes: {e}"
        ws = torch.empty(max(wsb, 16), dtype=torch.uint8, device=dev) if wsb > 0 else None

        def sp_prep():
            o_sp.fill_(nan)
            pool.copy_(x["state0"])

        for kern in SP_KERNELS:
            if kern == "recurrent" and not with_recurrent:
                continue
            if kern == "chunked_two_pass" and ws is None:
                skipped[("stridepack", kern)] = "kda_workspace_bytes is 0 here (two-pass cannot serve)"
                continue
            kws = ws if kern in ("chunked_two_pass", "auto") else None
            arms.append(Arm("stridepack", kern,
                            (lambda k=kern, w=kws: sp_prefill(sp, x, o_sp, pool, k, w)),
                            sp_prep, lambda _r: (o_sp, pool),
                            note=f"workspace {wsb} B" if kws is not None else None))
    for name in ("flashkda", "ffkda"):
        if name not in mods or name not in want or x["gate"] != "lower_bound":
            continue
        mod = mods[name]
        o_a = torch.empty(1, T, H, D, dtype=torch.bfloat16, device=dev)
        fs = torch.empty_like(x["state0"])
        wsb = int(mod.get_workspace_size(T, H, N))
        ws_a = torch.empty(wsb, dtype=torch.uint8, device=dev)

        def a_prep(o_a=o_a, fs=fs):
            o_a.fill_(nan)
            fs.fill_(nan)

        note = (f"workspace {wsb} B; fp32 state in/out, held in bf16 inside the kernel; "
                "beta transposed by a torch copy inside fwd")
        arms.append(Arm(name, None, (lambda m=mod, o_a=o_a, ws_a=ws_a, fs=fs:
                                     flashkda_fwd(m, x, o_a, ws_a, fs)),
                        a_prep, (lambda _r, o_a=o_a, fs=fs: (o_a, fs)), note=note))
        lens = x["lengths"]
        if name == "ffkda" and len(set(lens)) == 1:
            arms.append(Arm(name, "uniform_seq_len",
                            (lambda m=mod, o_a=o_a, ws_a=ws_a, fs=fs, L=lens[0]:
                             flashkda_fwd(m, x, o_a, ws_a, fs, uniform_seq_len=L)),
                            a_prep, (lambda _r, o_a=o_a, fs=fs: (o_a, fs)),
                            note=note + "; uniform_seq_len (equal lengths, non-varlen kernels)"))
    if chunk_kda is not None and "fla" in want:
        arms.append(Arm("fla", None, lambda: fla_call(chunk_kda, x, fla_safe_gate),
                        lambda: None, lambda r: (r[0], r[1]),
                        note=(f"chunk_kda Triton (dispatch off), chunk 64, safe_gate={fla_safe_gate}; "
                              "allocates o and the final state per call (not poisoned); "
                              "exact K3 contract")))
    return arms


def check_arm(a):
    """Two calls: finite outputs, and the second bit-identical to the first."""
    a.prep()
    r = a.call()
    o, s = a.outputs(r)
    torch.cuda.synchronize()
    o1, s1 = o.clone(), s.clone()
    a.prep()
    r = a.call()
    o, s = a.outputs(r)
    torch.cuda.synchronize()
    finite = bool(torch.isfinite(o1.float()).all().item() and torch.isfinite(s1.float()).all().item())
    same = bool(torch.equal(o1.view(torch.int16), o.view(torch.int16))
                and torch.equal(s1.contiguous().view(torch.int32), s.contiguous().view(torch.int32)))
    return finite, same


# ---------------------------------------------------------------- run

def git_commit():
    """SP_COMMIT when given (a copy of the tree elsewhere may carry another
    checkout's history), else the checkout's HEAD."""
    if os.environ.get("SP_COMMIT"):
        return os.environ["SP_COMMIT"]
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except Exception:  # noqa: BLE001
        pass
    return "unknown"


def parse_shapes(s):
    """[(T, H, lengths)]: the default table (SHAPES, then VARLEN_SHAPES),
    "gates" (GATE_SHAPES), "varlen" (VARLEN_SHAPES), or TxHxN[,...] (N equal
    sequences)."""
    if not s:
        return [(T, H, (T // N,) * N) for (T, H, N) in SHAPES] + list(VARLEN_SHAPES)
    if s == "gates":
        return list(GATE_SHAPES)
    if s == "varlen":
        return list(VARLEN_SHAPES)
    out = []
    for part in s.split(","):
        t = [int(p) for p in part.lower().split("x")]
        if len(t) != 3 or t[0] % t[2]:
            raise SystemExit(f"--shapes: {part!r} is not TxHxN with N dividing T")
        out.append((t[0], t[1], (t[0] // t[2],) * t[2]))
    return out


def gpu_ahead(ms=2.0):
    """Queue about `ms` of GPU idling (torch.cuda._sleep) so that a round of
    timed arms starts with the GPU behind the host, as every later arm of the
    round does, rather than idle after the synchronize. In the run of efa6939
    the first arm of each round at 16384/96/1 (the forced one-pass kernel)
    took 1.963 ms where AUTO, the same kernel later in the round, took 1.863;
    at 16384/96/8, where the recurrent arm comes first, the two agreed."""
    sleep = getattr(torch.cuda, "_sleep", None)  # a private call: absent, no lead
    if sleep is not None:
        sleep(int(ms * 1.0e6 * 2.0))  # cycles, at up to 2 GHz


def time_interleaved(arms, reps, before=None, rotate=False):
    """reps rounds of every arm (name -> call) in turn, each round led by
    gpu_ahead; CUDA event times {name: [ms, ...]}. before(), if given, runs
    ahead of each arm, outside its events (an L2 flush: bench/kda_decode.py).
    rotate: round r starts at arm r mod len(arms), so that every arm takes
    every place in a round equally often."""
    times = {k: [] for k in arms}
    names = list(arms)
    for r in range(reps):
        evs = []
        gpu_ahead()
        s = r % len(names) if rotate else 0
        for k in names[s:] + names[:s]:
            if before is not None:
                before()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            arms[k]()
            e1.record()
            evs.append((k, e0, e1))
        torch.cuda.synchronize()
        for k, e0, e1 in evs:
            times[k].append(e0.elapsed_time(e1))
    return times


def time_shape(arms, warmup, reps):
    """Warm up (the first two calls checked), then reps interleaved rounds.
    Returns {label: dict(ms=..., ...)} or {label: dict(error=...)}."""
    res, live = {}, []
    for a in arms:
        try:
            finite, same = check_arm(a)
            for _ in range(max(warmup - 2, 0)):
                a.prep()
                a.call()
            torch.cuda.synchronize()
            res[a.label] = dict(finite=finite, rerun_identical=same)
            live.append(a)
        except Exception as e:  # noqa: BLE001
            res[a.label] = dict(error=f"{type(e).__name__}: {str(e)[-1500:]}")
            log(f"  {a.label}: FAILED: {res[a.label]['error']}")
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
    times = {a.label: [] for a in live}
    for _ in range(reps):
        ev = []
        gpu_ahead()
        for a in live:
            if "error" in res[a.label]:
                continue
            try:
                a.prep()
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                r = a.call()
                e1.record()
                del r
                ev.append((a.label, e0, e1))
            except Exception as e:  # noqa: BLE001
                res[a.label] = dict(error=f"{type(e).__name__}: {str(e)[-1500:]}")
        torch.cuda.synchronize()
        for label, e0, e1 in ev:
            times[label].append(e0.elapsed_time(e1))
    for label, ts in times.items():
        if ts and "error" not in res[label]:
            res[label].update(ms=statistics.median(ts), ms_min=min(ts), reps=len(ts))
    return res


def print_tables(records, shapes):
    timing = [r for r in records if "ms" in r or ("T" in r and "error" in r)]
    labels = []
    def label(r):
        lab = r["arm"] if r.get("kernel") is None else f"{r['arm']}:{r['kernel']}"
        g = r.get("gate", "lower_bound")
        return lab if g == "lower_bound" else f"{g[:4]}/{lab}"
    for r in timing:
        if label(r) not in labels:
            labels.append(label(r))
    def n_of(N, lengths):  # "8v": unequal lengths
        return f"{N}v" if len(set(lengths or [])) > 1 else str(N)
    cell = {}
    for r in timing:
        cell[(r["T"], r["H"], n_of(r["N"], r.get("lengths")), label(r))] = (
            f"{r['ms']:.3f}" if "ms" in r else "ERR")
    short = {"stridepack:recurrent": "sp:rec", "stridepack:chunked": "sp:chunked",
             "stridepack:chunked_two_pass": "sp:2pass", "stridepack:auto": "sp:auto",
             "ffkda:uniform_seq_len": "ffkda:unif"}
    heads = [short.get(lab, lab) for lab in labels]
    w = max([10] + [len(h) for h in heads])
    lines = ["KDA prefill, CUDA-event medians in ms (same inputs, one process):",
             f"{'T':>6} {'H':>3} {'N':>3} | " + " ".join(f"{h:>{w}}" for h in heads)]
    for (T, H, lens) in shapes:
        n = n_of(len(lens), lens) if isinstance(lens, (tuple, list)) else str(lens)
        row = [cell.get((T, H, n, lab), "-") for lab in labels]
        lines.append(f"{T:>6} {H:>3} {n:>3} | " + " ".join(f"{c:>{w}}" for c in row))
    acc = [r for r in records if "o_rel" in r or ("case" in r and "error" in r)]
    if acc:
        lines.append("")
        lines.append("Accuracy vs the fp32 recurrence on fp64-preprocessed inputs (relative L2):")
        lines.append(f"{'case':<14} {'arm':<28} {'o_rel':>9} {'state_rel':>9} rerun_identical")
        for r in acc:
            lab = r["arm"] if r.get("kernel") is None else f"{r['arm']}:{r['kernel']}"
            if "o_rel" in r:
                lines.append(f"{r['case']:<14} {lab:<28} {r['o_rel']:>9.2e} {r['state_rel']:>9.2e} "
                             f"{r.get('rerun_identical')}")
            else:
                lines.append(f"{r['case']:<14} {lab:<28}   ERROR: {r['error'][:80]}")
    print("\n".join(lines), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write one JSON object per line here")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--shapes", help="TxHxN[,TxHxN...], \"gates\" (the gate comparison's "
                    "shapes, one with unequal lengths) or \"varlen\" (unequal lengths at 96 "
                    "heads); default: SHAPES, then the varlen shapes")
    ap.add_argument("--gates", default="lower_bound",
                    help="comma list of gate forms to run: lower_bound, softplus, log_decay "
                         "(every arm and shape for each, records carry \"gate\")")
    ap.add_argument("--only-sp", action="store_true", help="stridepack arms only (no anchors)")
    ap.add_argument("--arms", default="stridepack,flashkda,ffkda,fla",
                    help="comma list of arms to run (default all)")
    ap.add_argument("--recurrent-max-tokens", type=int, default=2048,
                    help="time the recurrent kernel only where T/N <= this (it is slow)")
    ap.add_argument("--fla-safe-gate", type=int, default=1, choices=(0, 1))
    ap.add_argument("--no-accuracy", action="store_true")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--self-test", action="store_true", help="CPU checks of the reference; no GPU")
    ap.add_argument("--_build", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args._build:  # child process: compile one CUDA anchor
        _load_extension(args._build)
        return 0
    if args.self_test:
        return self_test()

    if not torch.cuda.is_available():
        log("no CUDA device: nothing to time (--self-test runs the CPU checks)")
        return 2
    dev = torch.device("cuda")
    want = [a.strip() for a in args.arms.split(",") if a.strip()]
    gates = [g.strip() for g in args.gates.split(",") if g.strip()]
    if any(g not in GATES for g in gates):
        log(f"--gates: {args.gates!r}; the forms are {', '.join(GATES)}")
        return 2
    if args.only_sp:
        want = ["stridepack"]
    shapes = parse_shapes(args.shapes)
    meta = dict(device=torch.cuda.get_device_name(0),
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                commit=git_commit())
    records, skipped = [], {}
    log(f"device {meta['device']}, commit {meta['commit']}, anchors {ANCHOR_DIR}, build {BUILD_DIR}")

    sp = mods = chunk_kda = None
    mods = {}
    if "stridepack" in want:
        try:
            sp = import_stridepack()
        except Exception as e:  # noqa: BLE001
            # Without stridepack's own arm the run compares nothing: stop
            # before the anchors' build rather than time them alone.
            log(f"[stridepack] IMPORT FAILED: {type(e).__name__}: {e}")
            log("  (PYTHONPATH must name <build>/python after building the targets "
                "stridepack_python and stridepack_native)")
            return 2
    cuda_anchors = [a for a in ("flashkda", "ffkda") if a in want]
    if cuda_anchors:
        mods, sk = build_anchors(cuda_anchors)
        skipped.update({(a, None): r for a, r in sk.items()})
    if "fla" in want:
        try:
            chunk_kda = import_fla()
            log("[fla] imported")
        except Exception as e:  # noqa: BLE001
            skipped[("fla", None)] = f"import failed: {type(e).__name__}: {str(e)[-2000:]}"
            log(f"[fla] IMPORT FAILED, skipped: {skipped[('fla', None)]}")

    out = None
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        out = open(args.json, "w")

    def emit(rec):
        rec = {**rec, **meta}
        records.append(rec)
        if out is not None:
            out.write(json.dumps(rec) + "\n")
            out.flush()

    emit(dict(meta=True, torch=torch.__version__, cuda=torch.version.cuda,
              anchor_dir=os.path.basename(os.path.normpath(ANCHOR_DIR)),  # no machine path
              reps=args.reps, warmup=args.warmup, lower_bound=LOWER_BOUND, scale=SCALE,
              state="fp32 V-first [N,H,V,K]", fla_safe_gate=bool(args.fla_safe_gate)))

    # Accuracy first (small, and a broken arm shows itself before the long part).
    for gate in gates if not args.no_accuracy else []:
        for case, lens, H in ACC_CASES:
            x = make_inputs(lens, H, dev, seed=1234 + H, edge=True, gate=gate)
            t0 = time.time()
            ref_o, ref_s = reference(x)
            torch.cuda.synchronize()
            log(f"accuracy {case} ({gate}): reference {time.time() - t0:.1f} s")
            for a in make_arms(x, sp, mods, chunk_kda, want, True, bool(args.fla_safe_gate), skipped):
                rec = dict(arm=a.arm, kernel=a.kernel, case=case, gate=gate, T=x["T"], H=H,
                           N=x["N"], lengths=list(lens), note=a.note)
                try:
                    finite, same = check_arm(a)
                    a.prep()
                    o, s = a.outputs(a.call())
                    torch.cuda.synchronize()
                    rec.update(o_rel=rel_l2(o.reshape(x["T"], H, D), ref_o),
                               state_rel=rel_l2(s, ref_s), finite=finite, rerun_identical=same)
                    log(f"  {a.label:<28} o_rel {rec['o_rel']:.2e} state_rel {rec['state_rel']:.2e}"
                        f" rerun_identical {same}")
                except Exception as e:  # noqa: BLE001
                    rec["error"] = f"{type(e).__name__}: {str(e)[-1500:]}"
                    log(f"  {a.label}: FAILED: {rec['error']}")
                emit(rec)
            del x, ref_o, ref_s
            torch.cuda.empty_cache()

    for gate in gates if not args.no_timing else []:
        for (T, H, lens) in shapes:
            N = len(lens)
            x = make_inputs(list(lens), H, dev, seed=T + H + N, gate=gate)
            arms = make_arms(x, sp, mods, chunk_kda, want, max(lens) <= args.recurrent_max_tokens,
                             bool(args.fla_safe_gate), skipped)
            t0 = time.time()
            res = time_shape(arms, args.warmup, args.reps)
            log(f"{gate} T={T} H={H} N={N} ({time.time() - t0:.1f} s): " + ", ".join(
                f"{a.label} {res[a.label]['ms']:.3f}" if "ms" in res[a.label] else f"{a.label} ERR"
                for a in arms))
            for a in arms:
                emit(dict(arm=a.arm, kernel=a.kernel, gate=gate, T=T, H=H, N=N,
                          lengths=list(lens), note=a.note, **res[a.label]))
            del x, arms
            torch.cuda.empty_cache()

    for (arm, kern), why in skipped.items():
        emit(dict(arm=arm, kernel=kern, skipped=why))
    if out is not None:
        out.close()
    print_tables(records, shapes if not args.no_timing else [])
    if skipped:
        print("\nSkipped: " + "; ".join(f"{a}{':' + k if k else ''}: {w[:200]}"
                                        for (a, k), w in skipped.items()), flush=True)
    return 0


# ---------------------------------------------------------------- CPU self-test

def _naive(x):
    """Scalar-loop fp64 recurrence straight from the contract (tiny sizes)."""
    T, H, N = x["T"], x["H"], x["N"]
    f = torch.float64
    cu = x["cu_cpu"].tolist()
    o = torch.zeros(T, H, D, dtype=f)
    fin = torch.zeros(N, H, D, D, dtype=f)
    for n in range(N):
        for h in range(H):
            S = x["state0"][n, h].to(f).t().clone()   # pool [j][d] holds S[d][j]
            for t in range(cu[n], cu[n + 1]):
                gr = x["g"][0, t, h].to(f) + x["dt_bias"][h * D:(h + 1) * D].to(f)
                ea = math.exp(float(x["A_log"][h]))
                if x["form"] == "log_decay":
                    gt = x["g"][0, t, h].to(f)
                elif x["form"] == "softplus":
                    gt = -ea * torch.log1p(torch.exp(gr))
                else:
                    gt = LOWER_BOUND * torch.sigmoid(ea * gr)
                bt = torch.sigmoid(x["beta"][0, t, h].to(f))
                qv, kv = x["q"][0, t, h].to(f), x["k"][0, t, h].to(f)
                qh = SCALE * qv / torch.sqrt((qv * qv).sum() + 1e-6)
                kh = kv / torch.sqrt((kv * kv).sum() + 1e-6)
                S = torch.exp(gt).unsqueeze(1) * S
                u = x["v"][0, t, h].to(f) - S.t() @ kh
                S = S + bt * torch.outer(kh, u)
                o[t, h] = S.t() @ qh
            fin[n, h] = S.t()
    return o, fin


def self_test():
    x = make_inputs((37, 5, 22), 2, torch.device("cpu"), seed=7, edge=True)
    o32, s32 = reference(x)
    o64, s64 = reference(x, torch.float64)
    on, sn = _naive(x)
    e = dict(o64_vs_naive=rel_l2(o64, on), s64_vs_naive=rel_l2(s64, sn),
             o32_vs_naive=rel_l2(o32, on), s32_vs_naive=rel_l2(s32, sn))
    print(e)
    assert e["o64_vs_naive"] < 1e-12 and e["s64_vs_naive"] < 1e-12, e
    assert e["o32_vs_naive"] < 1e-5 and e["s32_vs_naive"] < 1e-5, e
    assert x["cu_cpu"].tolist() == [0, 37, 42, 64] and x["T"] == 64
    # gates really reach both ends
    graw = x["g"].float() + x["dt_bias"].view(1, 1, 2, D)
    gate = LOWER_BOUND * torch.sigmoid(torch.exp(x["A_log"]).view(1, 1, 2, 1) * graw)
    assert gate.max().item() > -1e-3 and gate.min().item() < LOWER_BOUND + 1e-3
    # bookkeeping: the tables from fake records
    recs = [dict(arm="stridepack", kernel="auto", T=2048, H=96, N=1, ms=0.6),
            dict(arm="ffkda", kernel=None, T=2048, H=96, N=1, ms=0.28),
            dict(arm="fla", kernel=None, T=2048, H=96, N=1, error="x"),
            dict(arm="flashkda", kernel=None, case="T4096_H4_N3", o_rel=5e-3, state_rel=4e-3,
                 rerun_identical=True)]
    print_tables(recs, [(2048, 96, 1)])
    assert parse_shapes("16384x96x8,2048x96x16") == [(16384, 96, (2048,) * 8),
                                                     (2048, 96, (128,) * 16)]
    assert parse_shapes("gates")[-1] == (8192, 32, (4096, 2048, 1536, 512))
    for (T, H, lens), N in zip(parse_shapes("varlen"), (8, 32)):
        assert T == 16384 and H == 96 and len(lens) == N and sum(lens) == T
        assert min(lens) >= 1 and len(set(lens)) > 1
    assert parse_shapes(None)[-2:] == VARLEN_SHAPES
    assert unequal_lengths(16384, 8, 8) == VARLEN_SHAPES[0][2]  # seeded: the same every run
    # The other gate forms: the reference against the scalar loop.
    for gate in ("softplus", "log_decay", "log_decay_bf16"):
        y = make_inputs((19, 0, 12), 2, torch.device("cpu"), seed=9, edge=True, gate=gate)
        o64, s64 = reference(y, torch.float64)
        on, sn = _naive(y)
        assert rel_l2(o64, on) < 1e-12 and rel_l2(s64, sn) < 1e-12, gate
        if gate.startswith("log_decay"):
            want = torch.float32 if gate == "log_decay" else torch.bfloat16
            assert y["g"].dtype == want and y["g"].max().item() <= 0
            assert (y["g"] == -60).any()
    # fla_without_autotuning on a stand-in for Triton's autotuner module.
    names = ("triton", "triton.runtime", "triton.runtime.autotuner")
    saved = {m: sys.modules.get(m) for m in names}
    tuner = types.ModuleType(names[2])

    class Autotuner:
        def __init__(self, fn, arg_names, configs, key, *args, **kwargs):
            self.configs = configs

    class Cached(Autotuner):  # as fla's subclass calls it
        def __init__(self, fn, arg_names, configs, key, reset, restore, **kwargs):
            super().__init__(fn, arg_names, configs, key, reset, restore, **kwargs)
    tuner.Autotuner = Autotuner
    runtime = types.ModuleType(names[1])
    runtime.autotuner = tuner
    top = types.ModuleType(names[0])
    top.runtime = runtime
    sys.modules.update(zip(names, (top, runtime, tuner)))
    try:
        fla_without_autotuning()
        fla_without_autotuning()  # a second call changes nothing
        assert Autotuner(None, [], ["a", "b", "c"], []).configs == ["a"]
        assert Cached(None, [], ("a", "b"), [], None, None, pre_hook=None).configs == ["a"]
    finally:
        for m, mod in saved.items():
            if mod is None:
                sys.modules.pop(m, None)
            else:
                sys.modules[m] = mod
    print("self-test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
