#!/usr/bin/env python3
"""perf_tables.py — the Markdown tables of docs/PERFORMANCE.md from the JSON
lines the GPU benchmarks write (bench/results/), so that the tables are the
runs' figures and nothing else.

Run: python3 tools/perf_tables.py [RESULTS_DIR]   (default bench/results)
Prints the tables of bench_kda, bench_conv and bench_boundary.
"""

import json
import os
import sys


def lines(path):
    with open(path) as f:
        return [json.loads(s) for s in f if s.strip()]


def ms(x):
    return f"{x:.3f}"


def kda(rows):
    names = {"chunked": "chunked", "chunked_two_pass": "two-pass", "recurrent": "recurrent"}
    shapes = {}
    for r in rows:
        shapes.setdefault((r["T"], r["H"], r["N"], r["state"]), {})[r["kernel"]] = r
    out = ["| T | H | N | state | recurrent | chunked | two-pass | **AUTO** (chose) | fla | "
           "AUTO / fla | fla GPU kernels | AUTO / fla kernels |",
           "|---:|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    for (T, H, N, st), k in shapes.items():
        a = k["auto"]
        fla, fk = a.get("fla_ms") or 0, a.get("fla_kernel_ms") or 0
        out.append(
            f"| {T} | {H} | {N} | {st} | {ms(k['recurrent']['ms'])} | {ms(k['chunked']['ms'])} "
            f"| {ms(k['chunked_two_pass']['ms'])} | **{ms(a['ms'])}** ({names[a['auto_chose']]}) "
            f"| {fla or '–'} | {'**%.2f**' % (a['ms'] / fla) if fla else '–'} "
            f"| {fk or '–'} | {'**%.2f**' % (a['ms'] / fk) if fk else '–'} |")
    return "\n".join(out)


def conv(rows):
    out = ["| form | T or sequences | H | limit ms | split ms | token-major ms | "
           "**split / limit** | prep ratio |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        dec = r["bench"] == "conv_decode"
        prep = "–" if dec else f"{r['prep_ratio']:.2f}"
        ratio = f"{r['split_ratio']:.2f}" if dec else f"**{r['split_ratio']:.2f}**"
        out.append(f"| {'decode' if dec else 'prefill'} | {r['N'] if dec else r['T']} | {r['H']} "
                   f"| {r['limit_ms']:.4f} | {r['split_ms']:.4f} | {r['tokenmajor_ms']:.4f} "
                   f"| {ratio} | {prep} |")
    return "\n".join(out)


def boundary(rows):
    kern = {"chunked": "chunked", "chunked_two_pass": "two-pass", "recurrent": "recurrent"}
    out = ["| layout | beta from | limit ms | pack ms | separate ms | separate / pack | "
           "prefill kernel | prefill ms | boundary ms | pack share |",
           "|---|---|---:|---:|---:|---:|---|---:|---:|---:|"]
    prod = ["| layout | conv token-major + boundary (4 copied) + prefill, ms | conv split + "
            "boundary (beta copied) + prefill, ms | split / token-major | outputs, states "
            "bit-identical |", "|---|---:|---:|---:|---|"]
    for r in rows:
        beta = r["beta"].replace("beta", "")
        out.append(f"| {r['layout']} | {beta} | {r['limit_ms']:.3f} | {r['pack_ms']:.3f} "
                   f"| {r['separate_ms']:.3f} | {r['separate_over_pack']:.2f} "
                   f"| {kern[r['prefill_kernel']]} | {r['prefill_ms']:.3f} "
                   f"| {r['boundary_ms']:.3f} | {100 * r['pack_share']:.1f} % |")
        if "layer_conv_split_ms" in r:
            prod.append(f"| {r['layout']} | {r['layer_conv_tokenmajor_ms']:.3f} "
                        f"| {r['layer_conv_split_ms']:.3f} "
                        f"| {r['layer_split_over_tokenmajor']:.3f} "
                        f"| {'yes' if r['layer_outputs_bit_identical'] else 'NO'} |")
    return "\n".join(out) + "\n\n" + "\n".join(prod)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    for title, name, fn in (("bench_kda", "h200_kda.json", kda),
                            ("bench_conv", "h200_conv.json", conv),
                            ("bench_boundary", "h200_boundary.json", boundary)):
        path = os.path.join(d, name)
        if os.path.exists(path):
            print(f"## {title} ({name})\n\n{fn(lines(path))}\n")


if __name__ == "__main__":
    main()
