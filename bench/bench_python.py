#!/usr/bin/env python3
"""bench_python.py — host cost of one eager call of the Python binding,
beside the torch copies an engine would otherwise issue.

The K3 inputs: q, k, v column slices of a [T, 3P] bf16 buffer and beta at
column 128 of a [T, 128+H] one (defaults T=64, H=96: a short prefill, where
the host cost is what matters). Two host times per arm: host_us, the
wall time of one call with the device idle before it (synchronized before
each call: where the GPU is not the bottleneck), the least of the medians
of 5 interleaved rounds of --calls / 5 calls, and
in_a_row_us, the wall time of --calls calls issued back to back divided by
--calls (synchronized at both ends: where the GPU's own time per call is
the longer, this is the GPU's time). Arms:
  pack_ws       stridepack.pack(xs, workspace=ws)
  pack_into     stridepack.pack_into(xs, outs) into preallocated dense tensors
  pack_alloc    stridepack.pack(xs) (the workspace allocated per call)
  pack_dense    stridepack.pack on four dense tensors (nothing launched)
  inputs_pack   KdaInputs.pack(q, k, v, g, beta) (g dense: four copied)
  inputs_dense  KdaInputs.pack on five dense tensors (each comes back as itself)
  torch4        four .copy_ into preallocated dense tensors
  torch1        one .copy_ (q alone)
  kda_prefill   stridepack.kda_prefill on the K3 views (one sequence of T
                tokens, a pool of 2 slots)
  kda_prefill_new  kda_prefill with what chunk_kda's contract adds around
                it, done by hand: o new (torch.empty) and the initial state
                copied (fla's initial_state is not written)
  fla_chunk     stridepack.fla.chunk_kda on the same (V-first initial state,
                final state returned): the drop-in around kda_prefill
  kda_decode    stridepack.kda_prefill with T sequences of one token on a
                pool by index (int32 query_start_loc, a padded row)
  kda_decode_new  kda_decode with o new and zero (torch.zeros: fla's o is
                zero in the rows of padded sequences)
  fla_decode    stridepack.fla.fused_recurrent_kda_fwd on the same, in place
                (state_v_first): the drop-in around kda_decode
fla_chunk - kda_prefill_new and fla_decode - kda_decode_new are the drop-in's
own host cost (its checks and lookups); the *_new arms' excess over
kda_prefill and kda_decode is the torch work its contract requires.
Each stridepack arm is checked bit for bit against .contiguous() first, and
each drop-in arm against the call it wraps.

Run (GPU): PYTHONPATH=build/python python3 bench/bench_python.py --json out.json
           (--device cpu for a smoke run without a GPU)
--wrappers-only: after the checks, the library's KDA call is replaced by a
no-op, so that the KDA arms time only the Python and torch work around it
(the drop-in's own cost, on any machine; the pack arms are unchanged).
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import time

import torch

import stridepack


def k3_inputs(T, H, device):
    P = H * 128
    gen = torch.Generator(device=device).manual_seed(T * 1000 + H)

    def bits(*shape):
        return torch.randint(-32768, 32768, shape, dtype=torch.int16, device=device,
                             generator=gen).view(torch.bfloat16)
    qkv, fab = bits(T, 3 * P), bits(T, 128 + H)
    xs = [qkv[:, i * P:(i + 1) * P].view(1, T, H, 128) for i in range(3)]
    xs.append(fab[:, 128:].view(1, T, H))
    return xs


def in_a_row_us(fn, calls, warmup, sync):
    for _ in range(warmup):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t0) / calls * 1e6


def single_us(arms, calls, sync, rounds=5):
    """{arm: host time of one call}: in each of `rounds` rounds over the arms
    in turn, the median of calls // rounds single calls of an arm; the least
    of an arm's rounds (a host's speed drifts over seconds: arms are
    interleaved so that each meets the same drift)."""
    best = {}
    for _ in range(rounds):
        for name, fn in arms.items():
            us = []
            for _ in range(max(calls // rounds, 1)):
                sync()
                t0 = time.perf_counter()
                fn()
                us.append((time.perf_counter() - t0) * 1e6)
            best[name] = min(best.get(name, float("inf")), statistics.median(us))
    sync()
    return {name: round(us, 2) for name, us in best.items()}


def kda_arms(arms, xs, g, T, H, dev, sync):
    """The KDA calls and their fla drop-ins (see the docstring), checked: each
    drop-in's o (and the decode's pool) equal to the call it wraps on the
    same inputs."""
    import stridepack.fla as fla
    q, k, v, beta = xs
    gen = torch.Generator().manual_seed(7)
    A_log = (torch.rand(H, generator=gen) - 0.5).to(dev)
    dt_bias = (torch.rand(H * 128, generator=gen) - 0.5).to(dev)
    gr = (torch.rand(1, T, H, 128, generator=gen) * 4 - 3).bfloat16().to(dev)
    beta_l = (torch.rand(1, T, H, generator=gen) * 6 - 3).bfloat16().to(dev)
    qkv = [(torch.rand(1, T, H, 128, generator=gen) * 2 - 1).bfloat16().to(dev) for _ in range(3)]
    for dst, src in zip((q, k, v), qkv):  # finite values in the K3 views
        dst.copy_(src)
    beta.copy_(beta_l)
    pool = (0.05 * torch.randn(max(T, 2) + 1, H, 128, 128, generator=gen)).to(dev)
    o = torch.empty(1, T, H, 128, dtype=torch.bfloat16, device=dev)
    one = torch.tensor([0, T], dtype=torch.int64, device=dev)
    slot = torch.tensor([1], dtype=torch.int32, device=dev)
    cu = torch.arange(T + 1, dtype=torch.int32, device=dev)
    idx = torch.arange(T, dtype=torch.int32, device=dev)
    idx[T // 2] = -1
    flags = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                 use_beta_sigmoid_in_kernel=True, lower_bound=-5.0)
    h0 = pool[1:2].clone()
    arms["kda_prefill"] = lambda: stridepack.kda_prefill(q, k, v, gr, beta, A_log, dt_bias, one,
                                                         pool, slot, o)
    slot0 = torch.zeros(1, dtype=torch.int32, device=dev)

    def prefill_new():
        o_new = torch.empty(1, T, H, 128, dtype=torch.bfloat16, device=dev)
        s = h0.clone()
        stridepack.kda_prefill(q, k, v, gr, beta, A_log, dt_bias, one, s, slot0, o_new)
        return o_new, s
    arms["kda_prefill_new"] = prefill_new
    arms["fla_chunk"] = lambda: fla.chunk_kda(q, k, v, gr, beta, A_log=A_log, dt_bias=dt_bias,
                                              initial_state=h0, output_final_state=True,
                                              state_v_first=True, cu_seqlens=one, safe_gate=True,
                                              **flags)
    arms["kda_decode"] = lambda: stridepack.kda_prefill(q, k, v, gr, beta, A_log, dt_bias, cu,
                                                        pool, idx, o)

    def decode_new():
        o_new = torch.zeros(1, T, H, 128, dtype=torch.bfloat16, device=dev)
        stridepack.kda_prefill(q, k, v, gr, beta, A_log, dt_bias, cu, pool, idx, o_new)
        return o_new
    arms["kda_decode_new"] = decode_new
    arms["fla_decode"] = lambda: fla.fused_recurrent_kda_fwd(
        q, k, v, gr, beta, A_log=A_log, dt_bias=dt_bias, initial_state=pool,
        inplace_final_state=True, state_v_first=True, cu_seqlens=cu, ssm_state_indices=idx,
        **flags)
    # The drop-ins compute what the calls they wrap compute.
    p1, p2 = pool.clone(), pool.clone()
    stridepack.kda_prefill(q, k, v, gr, beta, A_log, dt_bias, one, p1, slot, o)
    o1 = o.clone()
    o2, _ = fla.chunk_kda(q, k, v, gr, beta, A_log=A_log, dt_bias=dt_bias,
                          initial_state=p2[1:2].clone(), output_final_state=True,
                          state_v_first=True, cu_seqlens=one, safe_gate=True, **flags)
    sync()
    if not torch.equal(o1.view(torch.int16), o2.view(torch.int16)):
        sys.exit("fla_chunk: o differs from kda_prefill's")
    p1, p2 = pool.clone(), pool.clone()
    o1 = torch.zeros_like(o)
    stridepack.kda_prefill(q, k, v, gr, beta, A_log, dt_bias, cu, p1, idx, o1)
    o2, _ = fla.fused_recurrent_kda_fwd(q, k, v, gr, beta, A_log=A_log, dt_bias=dt_bias,
                                        initial_state=p2, inplace_final_state=True,
                                        state_v_first=True, cu_seqlens=cu,
                                        ssm_state_indices=idx, **flags)
    sync()
    if not (torch.equal(o1.view(torch.int16), o2.view(torch.int16)) and torch.equal(p1, p2)):
        sys.exit("fla_decode: o or the pool differs from kda_decode's")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--heads", type=int, default=96)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--wrappers-only", action="store_true",
                    help="time the KDA arms with the library call a no-op (see above)")
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and (not torch.cuda.is_available() or not stridepack.cuda_available()):
        sys.exit("bench_python.py --device cuda needs a CUDA device and a stridepack with CUDA")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    T, H = args.tokens, args.heads
    xs = k3_inputs(T, H, dev)
    refs = [x.contiguous() for x in xs]
    ws = torch.empty(max(stridepack.workspace_bytes(xs), 1), dtype=torch.uint8, device=dev)
    outs = [torch.empty_like(r) for r in refs]
    dense = [torch.empty_like(r) for r in refs]
    q_out = torch.empty_like(refs[0])
    g = torch.zeros(1, T, H, 128, dtype=torch.bfloat16, device=dev)
    inputs = stridepack.KdaInputs(dev, T, H)
    kda_xs, kda_dense = xs[:3] + [g, xs[3]], dense[:3] + [g, dense[3]]
    arms = {
        "pack_ws": lambda: stridepack.pack(xs, workspace=ws),
        "pack_into": lambda: stridepack.pack_into(xs, outs),
        "pack_alloc": lambda: stridepack.pack(xs),
        "pack_dense": lambda: stridepack.pack(dense, workspace=ws),
        "inputs_pack": lambda: inputs.pack(*kda_xs),
        "inputs_dense": lambda: inputs.pack(*kda_dense),
        "torch4": lambda: [d.copy_(x) for d, x in zip(outs, xs)],
        "torch1": lambda: q_out.copy_(xs[0]),
    }
    for name in ("pack_ws", "pack_into", "pack_alloc", "inputs_pack"):
        got = arms[name]()
        sync()
        want = refs[:3] + [g, refs[3]] if name == "inputs_pack" else refs
        for x, r in zip(got, want):
            if not torch.equal(x.view(torch.int16), r.view(torch.int16)):
                sys.exit(f"{name}: output differs from .contiguous()")
    kda_arms(arms, xs, g, T, H, dev, sync)
    passes = stridepack.copy_pass_count()
    arms["pack_dense"]()
    if any(x is not d for x, d in zip(arms["inputs_dense"](), kda_dense)):
        sys.exit("inputs_dense: a dense input did not come back as itself")
    if stridepack.copy_pass_count() != passes:
        sys.exit("pack_dense or inputs_dense launched a copy")
    if args.wrappers_only:
        stridepack._native.kda_prefill = lambda *a: None
    single = single_us(arms, args.calls, sync)
    row = {name: round(in_a_row_us(fn, args.calls, args.warmup, sync), 2)
           for name, fn in arms.items()}
    meta = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "date": datetime.date.today().isoformat(), "torch": torch.__version__,
            "python": sys.version.split()[0], "stridepack": stridepack.version(),
            "commit": os.environ.get("SP_COMMIT", "unknown"),
            "command": "PYTHONPATH=<build>/python python3 bench/bench_python.py "
                       + " ".join(sys.argv[1:]),
            "T": T, "H": H, "calls": args.calls, "wrappers_only": args.wrappers_only,
            "direct_reads": stridepack._native.direct_reads(),
            "timing": "host_us: least median of 5 interleaved rounds of single calls, the device idle "
                      "before each; "
                      "in_a_row_us: calls back to back, synchronized at both ends"}
    print(f"{meta['device']}, T={T}, H={H}, {args.calls} calls; us per call"
          + (" (KDA arms: the library call a no-op)" if args.wrappers_only else ""))
    print(f"  {'arm':15s} {'host_us':>8s} {'in a row':>9s}")
    for name in arms:
        print(f"  {name:15s} {single[name]:8.2f} {row[name]:9.2f}")
    text = json.dumps({**meta, "host_us": single, "in_a_row_us": row}, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
