#!/usr/bin/env python3
"""perf_tables.py — the Markdown tables of docs/PERFORMANCE.md from the JSON
lines the GPU benchmarks write (bench/results/), so that the tables are the
runs' figures and nothing else.

Run: python3 tools/perf_tables.py [RESULTS_DIR]   (default bench/results)
Prints the tables of bench_kda, bench_conv, bench_boundary, bench_kda --gate,
bench/kda_decode.py (each arm's time and share of the limit) and
bench/bench_layer.py's example layer (whole, and between its projections),
and those of gpu_check.sh's decide phase where its files are there (each pair of arms as
medians of the runs, and their ratio: what decides the constants of
docs/TUNING.md that say "Not measured yet").
"""

import json
import os
import statistics
import sys
from collections import defaultdict


def lines(path):
    """The records of a results file: JSON lines, or one JSON document with
    its records under "results" (bench_layer.py)."""
    with open(path) as f:
        text = f.read()
    try:
        doc = json.loads(text)
    except ValueError:  # several lines
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("results"), list):
        return doc["results"]
    return [json.loads(s) for s in text.splitlines() if s.strip()]


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


def pairs(rows, keep, shape, arm, a, b, what):
    """A table of medians: for each shape, arm a against arm b and b / a."""
    ms = defaultdict(list)
    for r in rows:
        if keep(r):
            ms[(shape(r), arm(r))].append(r["ms"])
    out = [f"| shape | {a} ms | {b} ms | {what} |", "|---|---:|---:|---:|"]
    for sh in sorted({k[0] for k in ms}, key=str):
        x, y = ms.get((sh, a)), ms.get((sh, b))
        if x and y:
            mx, my = statistics.median(x), statistics.median(y)
            out.append(f"| {sh} | {mx:.4f} ({len(x)}) | {my:.4f} ({len(y)}) | {my / mx:.3f} |")
    return "\n".join(out)


def tth(r):
    return f"{r['T']}/{r['H']}/{r['N']}"


def every_gate(rows):  # CHUNKED_EVERY_GATE: the build's own cost on K3's inputs
    return pairs(rows, lambda r: r["kernel"] in ("chunked", "chunked_two_pass"),
                 lambda r: f"{tth(r)} {r['kernel']}",
                 lambda r: "every-gate" if r.get("every_gate") else "K3", "K3", "every-gate",
                 "every-gate / K3")


def gate_parts(rows):  # CHUNKED_EVERY_GATE: the every-gate one-pass build's time by part
    parts = [("whole", lambda p: "V side" not in p and "K side" not in p and "factored" not in p),
             ("V side alone", lambda p: "V side" in p), ("K side alone", lambda p: "K side" in p),
             ("every chunk factored", lambda p: "factored" in p)]
    ms, err = defaultdict(list), {}
    for r in rows:
        if r["kernel"] != "chunked":
            continue
        for name, test in parts:
            if test(r.get("probe", "")):
                gate = r["gate"] + (" (every-gate build)" if r["gate"] == "lower_bound"
                                    and r.get("every_gate") else "")
                key = (tth(r), gate, name)
                ms[key].append(r["ms"])
                err[key] = r.get("o_rel_err_vs_recurrent")
    out = ["| T/H/N | gate | " + " | ".join(f"{n} ms" for n, _ in parts) + " |",
           "|---|---|" + "---:|" * len(parts)]
    for sh, g in sorted({k[:2] for k in ms}, key=str):
        cells = [f"{statistics.median(ms[(sh, g, n)]):.4f}" if ms.get((sh, g, n)) else "–"
                 for n, _ in parts]
        out.append(f"| {sh} | {g} | " + " | ".join(cells) + " |")
    errs = [f"{k[0]} {k[1]} {k[2]}: {v:.1e}" for k, v in sorted(err.items(), key=str)
            if v is not None and k[2] == "every chunk factored"]
    return "\n".join(out) + ("\n\no vs recurrent: " + "; ".join(errs) if errs else "")


def longest_first(rows):  # ONE_PASS_LONGEST_FIRST
    return pairs(rows, lambda r: r["kernel"] == "chunked",
                 lambda r: f"{tth(r)} {'unequal' if r.get('unequal') else 'equal'}",
                 lambda r: "longest first" if r.get("longest_first") else "batch order",
                 "batch order", "longest first", "longest first / batch order")


def decode_rows(rows):  # DECODE_ROWS_PER_WARP, beside the recurrent kernel, a row a pool
    ms = defaultdict(list)
    for r in rows:
        sh = f"{tth(r)} {r.get('state', 'f32')}"
        if r["kernel"] == "decode":
            ms[(sh, f"rows {r.get('decode_rows', 0)}")].append(r["ms"])
        elif r["kernel"] == "recurrent":
            ms[(sh, "recurrent")].append(r["ms"])
    arms = sorted({k[1] for k in ms if k[1] != "recurrent"},
                  key=lambda a: int(a.split()[1])) + ["recurrent"]
    out = ["| T/H/N | " + " | ".join(f"{a} ms" for a in arms) + " |",
           "|---|" + "---:|" * len(arms)]
    for sh in sorted({k[0] for k in ms}, key=str):
        cells = [f"{statistics.median(ms[(sh, a)]):.4f}" if ms.get((sh, a)) else "–"
                 for a in arms]
        out.append(f"| {sh} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def decode_stream(rows):  # DECODE_STREAM: a block a pair against the stream form's P
    ms = defaultdict(list)
    for r in rows:
        if r["kernel"] == "decode":
            ms[(f"{tth(r)} {r.get('state', 'f32')}", r.get("decode_pairs", 0))].append(r["ms"])
    arms = sorted({k[1] for k in ms})
    name = lambda P: "a block a pair" if P == 0 else f"P {P}"  # noqa: E731
    out = ["| T/H/N state | " + " | ".join(f"{name(P)} ms" for P in arms)
           + " | best stream / block |", "|---|" + "---:|" * (len(arms) + 1)]
    for sh in sorted({k[0] for k in ms}, key=str):
        med = {P: statistics.median(ms[(sh, P)]) for P in arms if ms.get((sh, P))}
        best = min((t for P, t in med.items() if P), default=None)
        ratio = f"{best / med[0]:.3f}" if best and 0 in med else "–"
        out.append(f"| {sh} | " + " | ".join(f"{med[P]:.4f}" if P in med else "–" for P in arms)
                   + f" | {ratio} |")
    return "\n".join(out)


def gate_kernels(rows):  # bench_kda --gate: every kernel on one form's inputs
    out = ["| gate | T/H/N | state | kernel | ms | o vs recurrent | state vs recurrent |",
           "|---|---|---|---|---:|---:|---:|"]
    for r in rows:
        if r["kernel"] == "auto":
            continue
        err = lambda k: f"{r[k]:.1e}" if r.get(k) is not None else "–"  # noqa: E731
        out.append(f"| {r['gate']} | {tth(r)} | {r['state']} | {r['kernel']} | {r['ms']:.4f} "
                   f"| {err('o_rel_err_vs_recurrent')} | {err('state_rel_err_vs_recurrent')} |")
    return "\n".join(out)


def kda_decode(rows):  # bench/kda_decode.py: each arm's time and share of the limit
    arms = ("stridepack", "fla", "dropin", "dropin:k_first")
    shapes = defaultdict(dict)
    for r in rows:
        if r.get("ms") and r.get("arm") in arms:
            shapes[(r["N"], r["H"], r["k"], r["pool"])][r["arm"]] = r
    out = ["| N | H | k | pool | limit ms | " + " | ".join(f"{a} ms (share)" for a in arms)
           + " | **stridepack / fla** |",
           "|---:|---:|---:|---|---:|" + "---:|" * len(arms) + "---:|"]
    for (N, H, k, pool), a in sorted(shapes.items()):
        limit = next(iter(a.values()))["limit_ms"]
        cells = [f"{a[x]['ms']:.4f} ({limit / a[x]['ms']:.2f})" if x in a else "–" for x in arms]
        ratio = (f"**{a['stridepack']['ms'] / a['fla']['ms']:.2f}**"
                 if "stridepack" in a and "fla" in a else "–")
        out.append(f"| {N} | {H} | {k} | {pool} | {limit:.4f} | " + " | ".join(cells)
                   + f" | {ratio} |")
    return "\n".join(out)


def layer(rows):  # bench_layer.py: the example layer's prefill, whole and between projections
    apis = ("stridepack", "dropin", "fla")
    parts = defaultdict(dict)
    for r in rows:
        if r.get("layer") and r.get("ms"):
            parts[(r["layer"], r["T"], r["H"])][r["api"]] = r["ms"]
    out = ["| part | T | H | " + " | ".join(f"{a} ms" for a in apis) + " | **fla / dropin** |",
           "|---|---:|---:|" + "---:|" * len(apis) + "---:|"]
    for (name, T, H), a in sorted(parts.items()):
        ratio = f"**{a['fla'] / a['dropin']:.2f}**" if "fla" in a and "dropin" in a else "–"
        out.append(f"| {name} | {T} | {H} | "
                   + " | ".join(f"{a[x]:.3f}" if x in a else "–" for x in apis)
                   + f" | {ratio} |")
    return "\n".join(out)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    for title, name, fn in (("bench_kda", "h200_kda.json", kda),
                            ("bench_conv", "h200_conv.json", conv),
                            ("bench_boundary", "h200_boundary.json", boundary),
                            ("bench_kda --gate", "h200_kda_gates_kernels.json", gate_kernels),
                            ("bench/kda_decode.py", "h200_kda_decode.json", kda_decode),
                            ("bench_layer.py: the example layer", "h200_layer.json", layer),
                            ("CHUNKED_EVERY_GATE: the build's cost on K3 inputs",
                             "decide_every_gate.json", every_gate),
                            ("CHUNKED_EVERY_GATE: the every-gate build by part",
                             "decide_gate_parts.json", gate_parts),
                            ("ONE_PASS_LONGEST_FIRST", "decide_longest_first.json",
                             longest_first),
                            ("DECODE_ROWS_PER_WARP", "decide_decode_rows.json", decode_rows),
                            ("DECODE_STREAM", "decide_decode_stream.json", decode_stream)):
        path = os.path.join(d, name)
        if os.path.exists(path):
            print(f"## {title} ({name})\n\n{fn(lines(path))}\n")


if __name__ == "__main__":
    main()
