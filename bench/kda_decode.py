"""The KDA decode step and speculative verify against their limit and fla.

One generated token of a KDA layer reads and writes every live sequence's
state: N sequences, H heads, a [128, 128] state each (64 KiB in fp32, 32 KiB
in bf16), in a pool by slot. The limit of such a step is one device-to-device
copy of the bytes it must move, measured in the same run (a copy of B bytes
reads B and writes B): with k tokens a sequence, one read and k writes of
each (sequence, head) state (k = 1: the decode step, state_indices [N];
k > 1: verify, a table [N, k] with num_accepted_tokens).

Arms, on the same inputs (q, k, v the column slices of a [N k, 3 H 128]
convolution output, g [N k, H 128], beta [N k, H], the K3 gate):
  stridepack  stridepack.kda_prefill on the V-first pool by index (the
              kernel "auto" picks); stridepack:recurrent and
              stridepack:decode the same with the kernel forced
  fla         fla's fused_recurrent_kda_fwd (from $SP_ANCHOR_DIR/fla, as in
              bench/kda_anchors.py), state_v_first=True, in place
  dropin      stridepack.fla.fused_recurrent_kda_fwd, the same call (V-first:
              read and written in place)
  dropin:k_first  the same on a K-first pool of the same states (fla's default
              layout: read and written where it lies since 2933126; before, the
              slots used were gathered, transposed and scattered back)
  limit       one torch copy of the step's bytes / 2, device to device

Run (GPU):
  SP_ANCHOR_DIR=.anchors PYTHONPATH=<build>/python python3 bench/kda_decode.py \\
      --json bench/results/h200_kda_decode.json
Records, one JSON object a line: {"arm", "N", "H", "k", "pool", "ms",
"limit_ms", "device", "date", "commit"}, and one "accuracy" record a shape
(o and written states of stridepack against the float64 reference on the
first sequences; reruns bit-identical). --self-test checks the driver's
verify inputs and accuracy path on the CPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kda_anchors  # noqa: E402  (fla's loader, the commit)

D = 128
GRID_N, GRID_H, GRID_K, POOLS = (64, 256, 512), (12, 32, 96), (1, 4), ("f32", "bf16")


def make_inputs(N, H, k, pool, device, seed):
    """The step's inputs; the pool has N k + 1 slots, the table [N, k] (k > 1)
    a random permutation of them, num_accepted_tokens random in [1, k]."""
    # Made on the device (the largest pool is 12.9 GB): its own generator.
    g = torch.Generator(device=device).manual_seed(seed)
    T, P = N * k, H * D

    def rand(*shape, lo=0.0, hi=1.0):
        return torch.rand(*shape, generator=g, device=device) * (hi - lo) + lo

    conv = rand(T, 3 * P, lo=-1, hi=1).bfloat16()
    x = dict(q=conv[:, :P].view(1, T, H, D), k=conv[:, P:2 * P].view(1, T, H, D),
             v=conv[:, 2 * P:].view(1, T, H, D), g=rand(1, T, H, D, lo=-3, hi=1).bfloat16(),
             beta=rand(1, T, H, lo=-3, hi=3).bfloat16(), A_log=rand(H, lo=-0.5, hi=0.5),
             dt_bias=rand(P, lo=-0.5, hi=0.5))
    slots = N * k + 1
    dt = torch.float32 if pool == "f32" else torch.bfloat16
    x["pool"] = torch.empty(slots, H, D, D, dtype=dt, device=device)
    for s in range(slots):  # a slot at a time: no f32 copy of a bf16 pool
        x["pool"][s] = 0.05 * torch.randn(H, D, D, generator=g, device=device)
    x["cu"] = torch.arange(N + 1, dtype=torch.int64, device=device) * k
    perm = torch.randperm(slots, generator=g, device=device)[:N * k].to(torch.int32)
    x["idx"] = perm if k == 1 else perm.view(N, k)
    x["acc"] = None if k == 1 else torch.randint(1, k + 1, (N,), generator=g, device=device,
                                                 dtype=torch.int32)
    x["o"] = torch.empty(1, T, H, D, dtype=torch.bfloat16, device=device)
    x["shape"] = (N, H, k)
    return x


def sp_step(sp, x, reference=False, kernel="auto"):
    sp.kda_prefill(x["q"], x["k"], x["v"], x["g"], x["beta"], x["A_log"], x["dt_bias"], x["cu"],
                   x["pool"], x["idx"], x["o"], gate="lower_bound", lower_bound=-5.0,
                   num_accepted_tokens=x["acc"], reference=reference, kernel=kernel)


def fla_step(fwd, x):
    fwd(x["q"], x["k"], x["v"], x["g"], x["beta"], A_log=x["A_log"], dt_bias=x["dt_bias"],
        initial_state=x["pool"], inplace_final_state=True, state_v_first=True,
        cu_seqlens=x["cu"], ssm_state_indices=x["idx"], num_accepted_tokens=x["acc"],
        use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
        lower_bound=-5.0, out=x["o"])


def dropin_step(x, pool):
    import stridepack.fla as fla
    fla.fused_recurrent_kda_fwd(
        x["q"], x["k"], x["v"], x["g"], x["beta"], A_log=x["A_log"], dt_bias=x["dt_bias"],
        initial_state=pool, inplace_final_state=True, state_v_first=pool is x["pool"],
        cu_seqlens=x["cu"], ssm_state_indices=x["idx"], num_accepted_tokens=x["acc"],
        use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
        lower_bound=-5.0, out=x["o"])


def step_bytes(x):
    """Bytes the step must move: one read and k writes of each state."""
    N, H, k = x["shape"]
    return N * H * D * D * x["pool"].element_size() * (1 + k)


def accuracy(sp, x, n_check=4, kernel="auto"):
    """stridepack (the kernel given) against the float64 reference on the
    first n_check sequences, on a pool of their own slots (the slots they
    name, renumbered): relative L2 of o and of the states the call writes;
    and whether a rerun gives the same bits."""
    N, H, k = x["shape"]
    n = min(n_check, N)
    sub = {key: (v[:, :n * k] if key in ("q", "k", "v", "g", "beta", "o") else v)
           for key, v in x.items()}
    idx = x["idx"][:n]
    used = torch.unique(idx.reshape(-1).long())  # the pool's slots; none negative here
    sub["cu"], sub["pool"] = x["cu"][:n + 1], x["pool"][used].contiguous()
    sub["idx"] = torch.searchsorted(used, idx.long()).to(idx.dtype)
    sub["acc"] = None if x["acc"] is None else x["acc"][:n]
    sub["o"] = torch.empty_like(x["o"][:, :n * k])
    sub["shape"] = (n, H, k)
    cpu = {key: (v.cpu().contiguous() if torch.is_tensor(v) else v) for key, v in sub.items()}
    ref = dict(cpu, pool=cpu["pool"].clone(), o=cpu["o"].clone())
    got = {key: (v.clone() if torch.is_tensor(v) else v) for key, v in sub.items()}
    sp_step(sp, got, kernel=kernel)
    again = dict(got, pool=sub["pool"].clone(), o=torch.empty_like(got["o"]))
    sp_step(sp, again, kernel=kernel)
    sp_step(sp, ref, reference=True)

    def rel(a, b):
        a, b = a.double().cpu(), b.double().cpu()
        return float((a - b).norm() / b.norm())

    return dict(o_rel=rel(got["o"], ref["o"]), state_rel=rel(got["pool"], ref["pool"]),
                rerun_identical=bool(torch.equal(got["o"].view(torch.int16),
                                                 again["o"].view(torch.int16))
                                     and torch.equal(got["pool"], again["pool"])))


def time_arms(arms, warmup, reps, flush):
    """Median CUDA-event ms of each arm, the arms interleaved, the L2 flushed
    (flush.zero_(): a buffer of several L2 sizes) ahead of each arm: an
    engine's step finds its pool cold, and at the small shapes (a pool of
    about the L2's size) an arm after one that touched the same pool would
    otherwise read part of it from L2 (docs/PERFORMANCE.md, "KDA decode and verify").
    The order rotates a round at a time: with it fixed, the arm timed right
    after the limit's copy took 0.6-1.5 us more than the same kernel timed
    later (journal, 2026-12-06, "The token fetched ahead")."""
    for f in arms.values():
        for _ in range(warmup):
            f()
    torch.cuda.synchronize()
    ts = kda_anchors.time_interleaved(arms, reps, before=flush.zero_, rotate=True)
    return {a: statistics.median(t) for a, t in ts.items()}


def self_test():
    """The driver's inputs and accuracy path on the CPU (no timing, no fla)."""
    import stridepack as sp
    for k in (1, 4):
        for pool in POOLS:
            x = make_inputs(3, 2, k, pool, "cpu", 5)
            a = accuracy(sp, x, n_check=3)
            assert a["o_rel"] < 1e-4 and a["state_rel"] < (1e-5 if pool == "f32" else 5e-3), a
            assert a["rerun_identical"], a
            assert step_bytes(x) == 3 * 2 * D * D * (4 if pool == "f32" else 2) * (1 + k)
            print(f"self-test k={k} {pool}: {a}")
    print("self-test passed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="append the records to this file (one JSON object a line)")
    ap.add_argument("--N", default=",".join(map(str, GRID_N)))
    ap.add_argument("--H", default=",".join(map(str, GRID_H)))
    ap.add_argument("--k", default=",".join(map(str, GRID_K)))
    ap.add_argument("--pools", default=",".join(POOLS))
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    import stridepack as sp
    fwd = None
    if not a.no_fla:
        try:
            fwd = kda_anchors.import_fla_op("fla.ops.kda.fused_recurrent",
                                            "fused_recurrent_kda_fwd")
        except Exception as e:  # noqa: BLE001
            # fla is the anchor the targets compare with: a run without it
            # says so with --no-fla, never by leaving its records out.
            raise SystemExit(f"fla could not be loaded ({type(e).__name__}: {e}); set "
                             f"SP_ANCHOR_DIR (bench/kda_anchors.py says the layout) or pass "
                             f"--no-fla")
    dev = torch.device("cuda", 0)
    meta = dict(device=torch.cuda.get_device_name(dev),
                date=datetime.date.today().isoformat(), commit=kda_anchors.git_commit())
    records = []
    flush = torch.empty(4 * torch.cuda.get_device_properties(dev).L2_cache_size,
                        dtype=torch.uint8, device=dev)
    for k in map(int, a.k.split(",")):
        for pool in a.pools.split(","):
            for H in map(int, a.H.split(",")):
                for N in map(int, a.N.split(",")):
                    x = make_inputs(N, H, k, pool, dev, seed=N * 1000 + H * 10 + k)
                    nbytes = step_bytes(x) // 2
                    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
                    dst = torch.empty_like(src)
                    # "stridepack": the kernel AUTO picks; the others forced, to compare.
                    arms = {"limit": lambda: dst.copy_(src), "stridepack": lambda: sp_step(sp, x),
                            "stridepack:recurrent": lambda: sp_step(sp, x, kernel="recurrent"),
                            "stridepack:decode": lambda: sp_step(sp, x, kernel="decode")}
                    if fwd is not None:
                        arms["fla"] = lambda: fla_step(fwd, x)
                    k_first = x["pool"].transpose(-1, -2).contiguous()
                    arms["dropin"] = lambda: dropin_step(x, x["pool"])
                    arms["dropin:k_first"] = lambda: dropin_step(x, k_first)
                    ms = time_arms(arms, a.warmup, a.reps, flush)
                    for arm in arms:
                        if arm == "limit":
                            continue
                        r = dict(arm=arm, N=N, H=H, k=k, pool=pool, ms=round(ms[arm], 5),
                                 limit_ms=round(ms["limit"], 5), **meta)
                        records.append(r)
                    for kern in ("auto", "decode"):
                        acc = dict(arm="accuracy", kernel=kern, N=N, H=H, k=k, pool=pool,
                                   **accuracy(sp, x, kernel=kern), **meta)
                        records.append(acc)
                    if a.json:  # each shape's records as they come (a run cut short keeps them)
                        with open(a.json, "a") as fh:
                            fh.writelines(json.dumps(r) + "\n" for r in records)
                        records = []
                    share = {arm: ms["limit"] / ms[arm] for arm in arms if arm != "limit"}
                    print(f"N {N:4d} H {H:3d} k {k} {pool:4s}: limit {ms['limit']:.4f} ms  " +
                          "  ".join(f"{arm} {ms[arm]:.4f} ms ({share[arm]:.2f})" for arm in share)
                          + f"  decode: o {acc['o_rel']:.1e} state {acc['state_rel']:.1e}",
                          flush=True)
                    del x, src, dst, k_first
                    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
