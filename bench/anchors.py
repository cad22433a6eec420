#!/usr/bin/env python3
"""anchors.py — stridepack beside the ways an engine materializes the KDA
inputs today, in one process on one GPU.

For each layout (K3 TP1: T=16384, H=96; K3 TP8: T=16384, H=12; then H=96 at
T=1024, 64, 1) the four strided inputs are q, k, v (column slices of the
[T, 3P] short-convolution output) and beta (column 128 of a [T, 128+H]
projection). Arms:
  limit        one contiguous torch copy of the same total bytes (cudaMemcpyAsync)
  torch4       four .copy_ into preallocated dense tensors
  torch4_graph the same four copies captured in a CUDA graph
  sp_eager     stridepack.pack through the Python binding (one launch; none
               when every input is already dense, as at T=1)
  sp_graph     the same pack captured in a CUDA graph
  triton       a one-launch Triton kernel written for this comparison
Each arm is checked bit for bit (int16 views) against .contiguous() on
poisoned outputs first, then timed: CUDA events around each call, median of
--reps after --warmup calls. Bandwidth counts bytes read + written.
Host time per call (host_us of each arm): the wall time of one call with
the GPU idle (synchronized before each), i.e. where the GPU is not the
bottleneck. Measured after the GPU timing, in --host-rounds rounds over
every layout and arm in turn (a host's speed drifts over seconds, so arms
are interleaved): each round takes the median of --host-calls single calls
of an arm; host_us is the least of its rounds' medians. sp_eager_host_us repeats
the sp_eager arm's; sp_eager_host_us_in_a_row is the wall time of 200
pack calls issued back to back, divided by 200 (the GPU works meanwhile).

Run: PYTHONPATH=build/python python3 bench/anchors.py --json results.json
     (PYTHONPATH=python also works: the package then takes the extension
     module of the checkout's newest CMake build). The host cost of the
     binding per call is measured in detail by bench/bench_python.py.
Prints the tables, then the JSON (one object per layout) unless --json takes it.
"""

import argparse
import datetime
import json
import statistics
import sys
import time

import torch

import stridepack

try:
    import triton
    import triton.language as tl
except ImportError:  # the arm is reported missing, the rest still runs
    triton = None

LAYOUTS = [("K3 TP1", 16384, 96), ("K3 TP8", 16384, 12), ("T=1024", 1024, 96),
           ("T=64", 64, 96), ("T=1", 1, 96)]
DEV = torch.device("cuda")

if triton is not None:
    @triton.jit
    def _copy_rows(src, dst, tile, rows, cols, src_stride,
                   BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
        # One BLOCK_R x BLOCK_C tile of a [rows, cols] view with row stride
        # src_stride (elements) into its dense copy.
        col_tiles = tl.cdiv(cols, BLOCK_C)
        r = (tile // col_tiles).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]
        c = (tile % col_tiles) * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
        mask = (r < rows) & (c < cols)
        x = tl.load(src + r * src_stride + c, mask=mask)
        tl.store(dst + r * cols + c, x, mask=mask)

    @triton.jit
    def _copy4(s0, d0, c0, st0, s1, d1, c1, st1, s2, d2, c2, st2, s3, d3, c3, st3,
               rows, e1, e2, e3, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
        # Programs [0, e1) copy tensor 0, [e1, e2) tensor 1, and so on.
        pid = tl.program_id(0)
        if pid < e1:
            _copy_rows(s0, d0, pid, rows, c0, st0, BLOCK_R, BLOCK_C)
        elif pid < e2:
            _copy_rows(s1, d1, pid - e1, rows, c1, st1, BLOCK_R, BLOCK_C)
        elif pid < e3:
            _copy_rows(s2, d2, pid - e2, rows, c2, st2, BLOCK_R, BLOCK_C)
        else:
            _copy_rows(s3, d3, pid - e3, rows, c3, st3, BLOCK_R, BLOCK_C)


def triton_copy4(srcs, dsts, T):
    """srcs: four [T, C] row-strided int16 views; dsts: dense [T, C]."""
    BR, BC = 8, 256
    ends, acc, args = [], 0, []
    for s, d in zip(srcs, dsts):
        acc += -(-T // BR) * -(-s.shape[1] // BC)
        ends.append(acc)
        args += [s, d, s.shape[1], s.stride(0)]

    def run():
        _copy4[(ends[-1],)](*args, T, ends[0], ends[1], ends[2], BLOCK_R=BR, BLOCK_C=BC)
    return run


def time_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for a, b in zip(starts, ends):
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in zip(starts, ends))


def host_median_us(fn, calls):
    """Median host wall time of one call of fn, the GPU idle before each."""
    us = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        us.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(us)


def capture(fn):
    """(graph, what fn returned during capture); fn warmed up first on a
    side stream, as torch asks."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    return g, out


def bits_equal(a, b):
    return a.shape == b.shape and torch.equal(a.view(torch.int16), b.view(torch.int16))


def run_layout(name, T, H, warmup, reps):
    """(the layout's record without host times, {arm: callable} of the arms
    that ran): its buffers stay alive through the callables."""
    P = H * 128
    gen = torch.Generator(device=DEV).manual_seed(T * 1000 + H)

    def rand_bits(*shape):
        return torch.randint(-32768, 32768, shape, dtype=torch.int16, device=DEV, generator=gen)

    qkv, fab = rand_bits(T, 3 * P).view(torch.bfloat16), rand_bits(T, 128 + H).view(torch.bfloat16)
    xs = [qkv[:, i * P:(i + 1) * P].view(1, T, H, 128) for i in range(3)]
    xs.append(fab[:, 128:].view(1, T, H))
    refs = [x.contiguous() for x in xs]
    payload = sum(r.numel() * r.element_size() for r in refs)
    POISON = -23131  # 0xA5A5

    src_flat = rand_bits(payload // 2)
    dst_flat = torch.empty_like(src_flat)
    dense = [torch.empty_like(r) for r in refs]
    ws = torch.empty(max(stridepack.workspace_bytes(xs), 1), dtype=torch.uint8, device=DEV)

    def torch4():
        for d, x in zip(dense, xs):
            d.copy_(x)
        return dense

    def sp_pack():
        return stridepack.pack(xs, workspace=ws)

    def prepare():
        """arm -> (callable to time, poison-and-run-once returning outputs)."""
        arms = {"limit": (lambda: dst_flat.copy_(src_flat), None)}

        def poisoned(run, outs):
            """Poison the outputs (the workspace holds stridepack's; those
            that alias inputs must keep them), run once, return outputs."""
            def once():
                for o in outs or []:
                    o.view(torch.int16).fill_(POISON)
                ws.fill_(0xA5)
                res = run()
                return res if outs is None else outs
            return once
        arms["torch4"] = (torch4, poisoned(torch4, dense))
        g4, _ = capture(torch4)
        arms["torch4_graph"] = (g4.replay, poisoned(g4.replay, dense))
        arms["sp_eager"] = (sp_pack, poisoned(sp_pack, None))
        gsp, sp_outs = capture(sp_pack)
        arms["sp_graph"] = (gsp.replay, poisoned(lambda: (gsp.replay(), sp_outs)[1], None))
        if triton is not None:
            srcs = [x.reshape(T, -1).view(torch.int16) for x in xs]  # views, no copy
            tdst = [torch.empty(T, s.shape[1], dtype=torch.int16, device=DEV) for s in srcs]
            run = triton_copy4(srcs, tdst, T)
            views = [d.view(torch.bfloat16).view(r.shape) for d, r in zip(tdst, refs)]
            arms["triton"] = (run, poisoned(run, views))
        return arms

    passes = stridepack.copy_pass_count()
    sp_pack()
    launches = stridepack.copy_pass_count() - passes
    # Host time of pack calls issued back to back (the binding's Python plus
    # the library's launch, the GPU working meanwhile).
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        sp_pack()
    in_a_row_us = (time.perf_counter() - t0) / 200 * 1e6
    torch.cuda.synchronize()
    results, timed = {}, {}
    for arm, (fn, once) in prepare().items():
        try:
            if once is not None:
                outs = once()
                torch.cuda.synchronize()
                if not all(bits_equal(o, r) for o, r in zip(outs, refs)):
                    raise RuntimeError("output differs from .contiguous()")
            results[arm] = {"ms": time_ms(fn, warmup, reps)}
            timed[arm] = fn
        except Exception as e:  # one broken arm must not hide the others
            results[arm] = {"error": f"{type(e).__name__}: {e}"}
    limit = results["limit"]["ms"]
    for a in results.values():
        if "ms" in a:
            a["GBps"] = round(2 * payload / (a["ms"] * 1e-3) / 1e9, 1)
            a["share_of_limit"] = round(limit / a["ms"], 3)
            a["ms"] = round(a["ms"], 4)
    return {"layout": name, "T": T, "H": H,
            "inputs": "q,k,v column slices of [T,3P]; beta column 128 of [T,128+H]; bf16",
            "payload_bytes": payload, "sp_launches_per_pack": launches,
            "sp_eager_host_us_in_a_row": round(in_a_row_us, 2), "arms": results}, timed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--host-calls", type=int, default=100)
    ap.add_argument("--host-rounds", type=int, default=5)
    args = ap.parse_args()
    if not torch.cuda.is_available() or not stridepack.cuda_available():
        sys.exit("anchors.py needs a CUDA device and a libstridepack with CUDA")
    meta = {"device": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
            "torch": torch.__version__, "triton": triton.__version__ if triton else None,
            "stridepack": stridepack.version(),
            "timing": f"CUDA events per call, median of {args.reps} after {args.warmup} warm-up; "
                      f"host_us: least of {args.host_rounds} interleaved rounds' medians of "
                      f"{args.host_calls} single calls, GPU idle before each"}
    results, timed = [], []
    for name, T, H in LAYOUTS:
        r, fns = run_layout(name, T, H, args.warmup, args.reps)
        r.update(meta)
        results.append(r)
        timed.append(fns)
        torch.cuda.empty_cache()
    for _ in range(args.host_rounds):
        for r, fns in zip(results, timed):
            for arm, fn in fns.items():
                us = host_median_us(fn, args.host_calls)
                a = r["arms"][arm]
                a["host_us"] = round(min(a.get("host_us", us), us), 2)
    for r in results:
        r["sp_eager_host_us"] = r["arms"]["sp_eager"].get("host_us")
    arms = list(results[0]["arms"])
    print(f"{meta['device']}, {meta['date']}, {meta['timing']}")
    print("GPU ms per call (share of the limit)")
    print("| layout | MB | " + " | ".join(arms) + " |")
    print("|---|---:|" + "---:|" * len(arms))
    for r in results:
        cells = [f"{r['arms'][a]['ms']:.4f} ({r['arms'][a]['share_of_limit']:.2f})"
                 if "ms" in r["arms"].get(a, {}) else "error" for a in arms]
        print(f"| {r['layout']} | {r['payload_bytes'] / 1e6:.2f} | " + " | ".join(cells) + " |")
    print("host us per call (GPU idle before each call); sp_eager back to back last")
    print("| layout | " + " | ".join(arms) + " | sp_eager in a row |")
    print("|---|" + "---:|" * (len(arms) + 1))
    for r in results:
        cells = [f"{r['arms'][a]['host_us']:.1f}" if "host_us" in r["arms"].get(a, {}) else "error"
                 for a in arms]
        print(f"| {r['layout']} | " + " | ".join(cells) + f" | {r['sp_eager_host_us_in_a_row']:.1f} |")
    text = json.dumps(results, indent=1)
    if not args.json:
        print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
