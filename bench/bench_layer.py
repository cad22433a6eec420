#!/usr/bin/env python3
"""bench_layer.py — the KDA layer's input boundary in front of each prefill:
at K3 TP1 (T = 16384, H = 96) and TP8
(H = 12), in one process on one GPU, each consumer timed after each input
preparation:
  torch_copies     the engine's way today: .contiguous() of each strided
                   input (q, k, v, beta: four copies; g is dense already)
  stridepack_pack  KdaInputs.pack (one launch for the four)
  none_dense       the consumer on inputs that are dense already (the floor)
Consumers: flashkda, ffkda (the fork), fla (chunk_kda) — built or imported
from $SP_ANCHOR_DIR by kda_anchors.py, skipped when absent — and
stridepack (its own prefill, kernel "auto": torch_copies then kda_prefill;
stridepack_pack is KdaBoundary.run, pack and prefill in one call; none_dense
kda_prefill with a workspace as the boundary has one).
ms: median of --reps CUDA-event times of preparation + consumer, arms
interleaved round by round, after --warmup calls each.

Then the whole engine-style layer of docs/examples/kda_layer.py (fused
in-projection, causal convolution, KDA prefill, output gate and projection)
at the same T and H (one sequence, the lower-bound gate, hidden 7168), its
prefill timed three ways, records {"layer": "kda_layer", "api", "T", "H",
"ms"}:
  stridepack  stridepack's own calls (q, k, v read where the convolution
              leaves them)
  dropin      fla's signatures served by stridepack.fla
  fla         fla's own chunk_kda (it makes its inputs contiguous itself)
and its part between the projections alone (KdaLayer.attend: the causal
convolution and the KDA prefill, on the same in-projection output, g and
beta), records {"layer": "kda_layer_attend", ...}: the projections' matrix
products (about 11.6 TFLOP at K3 TP1, the same in every arm) dominate the
whole prefill. (--no-layer leaves this out.)

Run: SP_ANCHOR_DIR=.anchors PYTHONPATH=<build>/python \\
     python3 bench/bench_layer.py --json bench/results/h200_layer.json
"""

import argparse
import datetime
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kda_anchors as ka  # noqa: E402

D = 128
PREPS = ("torch_copies", "stridepack_pack", "none_dense")


def k3_views(x):
    T, H = x["T"], x["H"]
    P = H * D
    qkv = torch.empty(T, 3 * P, dtype=torch.bfloat16, device="cuda")
    fab = torch.empty(T, 128 + H, dtype=torch.bfloat16, device="cuda")
    views = [qkv[:, i * P:(i + 1) * P].view(1, T, H, D) for i in range(3)]
    views += [x["g"], fab[:, 128:].view(1, T, H)]
    for v, n in zip(views, ("q", "k", "v", "g", "beta")):
        v.copy_(x[n])
    return views


def consumers(x, sp, mods, chunk_kda):
    """{name: call(q, k, v, g, beta)} on x's other arguments."""
    T, H, N = x["T"], x["H"], x["N"]
    out = {}
    for name, mod in mods.items():
        o = torch.empty(1, T, H, D, dtype=torch.bfloat16, device="cuda")
        fs = torch.empty_like(x["state0"])
        ws = torch.empty(int(mod.get_workspace_size(T, H, N)), dtype=torch.uint8, device="cuda")

        def call(q, k, v, g, beta, mod=mod, o=o, fs=fs, ws=ws):
            mod.fwd(q, k, v, g, beta, float(ka.SCALE), o, ws, x["A_log"],
                    x["dt_bias"].view(H, D), float(ka.LOWER_BOUND), initial_state=x["state0"],
                    final_state=fs, cu_seqlens=x["cu"])
        out[name] = call
    if chunk_kda is not None:
        def call(q, k, v, g, beta):
            with torch.inference_mode():
                chunk_kda(q, k, v, g, beta, scale=ka.SCALE, initial_state=x["state0"],
                          output_final_state=True, use_qk_l2norm_in_kernel=True,
                          use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                          safe_gate=True, lower_bound=ka.LOWER_BOUND, state_v_first=True,
                          cu_seqlens=x["cu"], cu_seqlens_cpu=x["cu_cpu"], A_log=x["A_log"],
                          dt_bias=x["dt_bias"])
        out["fla"] = call
    return out


def layer_records(args, chunk_kda):
    """The example layer's prefill through stridepack's calls, the drop-in
    and fla's own (when importable), interleaved."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "examples",
                        "kda_layer.py")
    spec = importlib.util.spec_from_file_location("kda_layer", path)
    kl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kl)
    fla_calls = None
    if chunk_kda is not None:
        try:
            fla_calls = (chunk_kda, ka.import_fla_op("fla.ops.kda.fused_recurrent",
                                                     "fused_recurrent_kda_fwd"))
        except Exception as e:  # noqa: BLE001
            print(f"fla's fused_recurrent_kda_fwd: {type(e).__name__}: {e}", file=sys.stderr)
    out = []
    for H in [int(h) for h in args.heads.split(",")]:
        T = args.tokens
        g = torch.Generator().manual_seed(T + H)
        hidden = kl.SIZES["k3"]["hidden"]
        apis = {"stridepack": dict(api="stridepack"), "dropin": dict(api="fla")}
        if fla_calls is not None:
            apis["fla"] = dict(api="fla", fla_calls=fla_calls)
        layers = {a: kl.KdaLayer(hidden, H, gate="lower_bound", slots=2, device="cuda", seed=H,
                                 **kw) for a, kw in apis.items()}
        x = torch.randn(T, hidden, generator=g).bfloat16().cuda()
        cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
        slot = torch.tensor([1], dtype=torch.int32, device="cuda")
        has = torch.tensor([True], device="cuda")
        # The whole prefill, and the part between the projections (KdaLayer.attend:
        # the convolution and the KDA prefill, which the APIs differ in), each
        # API's layer on the same projections.
        with torch.inference_mode():
            proj, (g_in, beta_in) = x @ layers["stridepack"].w_qkv, layers["stridepack"]._gates(x)
        parts = {"kda_layer": {a: (lambda l=l: l.prefill(x, cu, slot, has))
                               for a, l in layers.items()},
                 "kda_layer_attend": {a: (lambda l=l: l.attend(proj, g_in, beta_in, cu, slot, has))
                                      for a, l in layers.items()}}
        for name, arms in parts.items():
            for fn in arms.values():
                for _ in range(args.warmup):
                    with torch.inference_mode():
                        fn()
            torch.cuda.synchronize()
            with torch.inference_mode():
                times = ka.time_interleaved(arms, args.reps)
            for a, ts in times.items():
                rec = dict(layer=name, api=a, T=T, H=H, ms=round(statistics.median(ts), 4),
                           ms_min=round(min(ts), 4), reps=len(ts))
                out.append(rec)
                print(f"T={T} H={H:3d} {name:16s} {a:10s} {rec['ms']:8.3f} ms", flush=True)
        del layers, parts, x, proj, g_in, beta_in
        torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--heads", default="96,12")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--consumers", default="flashkda,ffkda,fla,stridepack")
    ap.add_argument("--no-layer", action="store_true")
    args = ap.parse_args()
    import stridepack as sp
    want = args.consumers.split(",")
    mods, skipped = ka.build_anchors([c for c in ("flashkda", "ffkda") if c in want])
    chunk_kda = None
    if "fla" in want:
        try:
            chunk_kda = ka.import_fla()
        except Exception as e:  # noqa: BLE001
            skipped["fla"] = f"{type(e).__name__}: {e}"
    meta = dict(device=torch.cuda.get_device_name(0),
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                commit=ka.git_commit(), torch=torch.__version__,
                command="SP_ANCHOR_DIR=.anchors PYTHONPATH=<build>/python python3 "
                        "bench/bench_layer.py " + " ".join(sys.argv[1:]),
                timing=f"median of {args.reps} CUDA-event times of preparation + consumer, "
                       "arms interleaved", skipped={k: v[:300] for k, v in skipped.items()})
    records = []
    for H in [int(h) for h in args.heads.split(",")]:
        T = args.tokens
        x = ka.make_inputs([T], H, torch.device("cuda"), seed=T + H)
        views = k3_views(x)
        dense = [v.contiguous() for v in views]
        inputs = sp.KdaInputs("cuda", T, H)
        arms = {}
        for name, call in consumers(x, sp, mods, chunk_kda).items():
            arms[(name, "torch_copies")] = (
                lambda c=call: c(*[v.contiguous() for v in views]))
            arms[(name, "stridepack_pack")] = lambda c=call: c(*inputs.pack(*views))
            arms[(name, "none_dense")] = lambda c=call: c(*dense)
        if "stridepack" in want:
            b = sp.KdaBoundary("cuda", T, H)
            o = torch.empty(1, T, H, D, dtype=torch.bfloat16, device="cuda")
            pool = x["state0"].clone()
            kw = dict(A_log=x["A_log"], dt_bias=x["dt_bias"], cu_seqlens=x["cu"], state=pool,
                      state_indices=x["idx"], o=o, lower_bound=ka.LOWER_BOUND, scale=ka.SCALE)
            need = sp.kda_workspace_bytes(*dense, **kw) if H <= 32 else 0
            ws = torch.empty(need, dtype=torch.uint8, device="cuda") if need else None
            arms[("stridepack", "torch_copies")] = lambda: sp.kda_prefill(
                *[v.contiguous() for v in views], **kw, workspace=ws)
            arms[("stridepack", "stridepack_pack")] = lambda: b.run(*views, **kw)
            arms[("stridepack", "none_dense")] = lambda: sp.kda_prefill(*dense, **kw,
                                                                         workspace=ws)
        for fn in arms.values():
            for _ in range(args.warmup):
                fn()
        torch.cuda.synchronize()
        times = ka.time_interleaved(arms, args.reps)
        for (c, prep), ts in times.items():
            rec = dict(consumer=c, prep=prep, T=T, H=H, ms=round(statistics.median(ts), 4),
                       ms_min=round(min(ts), 4), reps=len(ts))
            records.append(rec)
            print(f"T={T} H={H:3d} {c:10s} {prep:16s} {rec['ms']:8.3f} ms", flush=True)
        del arms, x, views, dense, inputs
        torch.cuda.empty_cache()
    if not args.no_layer:
        records += layer_records(args, chunk_kda)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**meta, "results": records}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
