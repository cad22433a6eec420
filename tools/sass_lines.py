#!/usr/bin/env python3
"""sass_lines.py — where a kernel's machine instructions come from, without a disassembler.

A cubin built with -lineinfo carries a DWARF line table (.debug_line) from each
kernel's SASS offsets to CUDA source lines. This reads it (pyelftools, Debian's
python3-pyelftools) and, for every kernel whose name holds FILTER, prints its
instruction count and where its local-memory instructions sit in the source:
stores (STL) and loads (LDL), the spills and any array kept in local memory,
recognised by their opcode field, the low 12 bits of each 16-byte instruction
(sm_70 and later encodings; --self-test checks them against ptxas' own spill
report). For the build machines, which have nvcc and ptxas but no cuobjdump
or nvdisasm.

  nvcc -cubin -arch=sm_90a -lineinfo -O3 -Iinclude -Isrc -DSP_HAVE_CUDA=1 \\
      -x cu src/kda/cuda/decode.cu -o /tmp/decode.cubin
  tools/sass_lines.py /tmp/decode.cubin [FILTER] [--files] [--lines N]

--files: instructions per source file; --lines N: the N source lines with the
most instructions. --diff FILTER_B FILE: instructions per line of FILE, the
kernel matching FILTER against the one matching FILTER_B (static counts: what
a build adds, not what runs). --self-test: builds a kernel that spills and one
that does not (needs nvcc) and checks the instructions found, and their lines,
against ptxas' report; exit 77 without nvcc or pyelftools.

--spans FILE:LO-HI[,SKIP_LO-SKIP_HI] (needs nvdisasm, or SP_NVDISASM): how
much code a loop of the source spans, for each kernel matching FILTER. An
instruction belongs to the lines LO .. HI of FILE when the outermost of its
inlined frames in FILE is there (a loop's body with every function it
inlines); the report gives their count and the bytes from the first to the
last, and, with SKIP, the part of those lines that a branch jumps over (say a
rarely taken path): its count and span, how many of the others lie inside
it, and the bytes of the rest (its span less the block's), the code a warp
fetches each time round. The
instruction cache holds code by address: a hot loop whose code spreads over
more bytes than it holds stalls on fetches ("no instruction" in ncu).
  tools/sass_lines.py /tmp/chunked.cubin ILi0ELi1ELi1E \
      --spans chunked_kernel.cuh:318-365,348-356
"""

import bisect
import collections
import io
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

OPCODES = {0x387: "STL", 0x983: "LDL"}  # the low 12 bits of an sm_70+ instruction


def line_tables(path):
    """{kernel name: (sorted SASS offsets, [(offset, file, line)]), .text bytes by name}"""
    from elftools.dwarf.dwarfinfo import DebugSectionDescriptor, DWARFInfo, DwarfConfig
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        secs = {s.name: s for s in elf.iter_sections()}
        if ".debug_line" not in secs:
            sys.exit(f"{path}: no .debug_line (build it with -lineinfo)")
        data = secs[".debug_line"].data()
        symtab = secs[".symtab"]
        # each line-number sequence starts at a relocated address: its kernel
        relocs = {r["r_offset"]: symtab.get_symbol(r["r_info_sym"]).name
                  for r in secs[".rela.debug_line"].iter_relocations()}
        texts = {n[len(".text."):]: s.data() for n, s in secs.items() if n.startswith(".text.")}
    desc = DebugSectionDescriptor(io.BytesIO(data), ".debug_line", None, len(data), 0)
    cfg = DwarfConfig(little_endian=True, default_address_size=8, machine_arch="x64")
    dwarf = DWARFInfo(cfg, *([None] * 8), desc, *([None] * 9))
    rows = collections.defaultdict(list)
    off = 0
    while off < len(data):
        prog = dwarf._parse_line_program_at_offset(off, dwarf.structs)
        files = [os.path.basename(e.name.decode()) for e in prog.header["file_entry"]]
        names = [relocs[k] for k in sorted(relocs) if off <= k < prog.program_end_offset]
        seq, n = [], 0
        for e in prog.get_entries():
            st = e.state
            if st is None:
                continue
            seq.append((st.address, files[st.file - 1] if 0 < st.file <= len(files) else "?",
                        st.line))
            if st.end_sequence:
                rows[names[n] if n < len(names) else f"?{n}"].extend(seq)
                seq, n = [], n + 1
        off = prog.program_end_offset
    return {k: sorted(v) for k, v in rows.items()}, texts


def per_line(rows, text):
    """Per source (file, line): instruction count, and spill instructions by kind."""
    addrs = [a for a, _, _ in rows]
    count, spills = collections.Counter(), collections.defaultdict(collections.Counter)
    for i in range(len(text) // 16):
        j = bisect.bisect_right(addrs, 16 * i) - 1
        where = rows[j][1:] if j >= 0 else ("?", 0)
        count[where] += 1
        op = OPCODES.get(struct.unpack_from("<Q", text, 16 * i)[0] & 0xFFF)
        if op:
            spills[op][where] += 1
    return count, spills


def report(path, want, show_files, top):
    tables, texts = line_tables(path)
    totals = {}
    for name in sorted(tables):
        if want not in name or name not in texts:
            continue
        count, spills = per_line(tables[name], texts[name])
        kinds = {k: sum(v.values()) for k, v in spills.items()}
        totals[name] = spills
        print(f"{name}: {sum(count.values())} instructions; "
              + (", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "no spill instructions"))
        for kind in sorted(spills):
            for (f, ln), c in sorted(spills[kind].items()):
                print(f"   {kind} x{c} at {f}:{ln}")
        if show_files:
            by_file = collections.Counter()
            for (f, _), c in count.items():
                by_file[f] += c
            print("   " + ", ".join(f"{f} {c}" for f, c in by_file.most_common()))
        for (f, ln), c in count.most_common(top):
            print(f"   {c:6d} {f}:{ln}")
    return totals


def diff(path, want_a, want_b, file):
    tables, texts = line_tables(path)

    def one(want):
        names = [n for n in tables if want in n and n in texts]
        if len(names) != 1:
            sys.exit(f"{want!r} matches {len(names)} kernels: {names}")
        return per_line(tables[names[0]], texts[names[0]])[0]

    a, b = one(want_a), one(want_b)
    print(f"line  {want_a}  {want_b}  difference")
    for key in sorted({k for k in list(a) + list(b) if k[0] == file}, key=lambda k: k[1]):
        if a.get(key, 0) != b.get(key, 0):
            print(f"{key[1]:5d} {a.get(key, 0):6d} {b.get(key, 0):6d} {b.get(key, 0) - a.get(key, 0):+6d}")


def frames(listing):
    """{kernel: [(offset, [(file, line), ...] innermost first, instruction)]} from
    `nvdisasm -c -gi`: the "//## File" lines of a location's inlined frames,
    innermost first, precede the instructions that have it."""
    kernels, chain, out, fresh = {}, [], None, True
    for line in listing.splitlines():
        m = re.match(r"//-+ \.text\.(\S+) -+", line.strip())
        if m:
            chain, out, fresh = [], [], True
            kernels[m.group(1)] = out
            continue
        m = re.search(r'//## File "([^"]+)", line (\d+)', line)
        if m:
            chain = [] if fresh else chain
            chain.append((os.path.basename(m.group(1)), int(m.group(2))))
            fresh = False
            continue
        m = re.search(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m and out is not None:
            out.append((int(m.group(1), 16), chain, m.group(2)))
            fresh = True
    return kernels


def disassemble(path):
    tool = os.environ.get("SP_NVDISASM") or shutil.which("nvdisasm")
    if not tool:
        sys.exit("--spans needs nvdisasm (PATH or SP_NVDISASM): DEVELOPERS.md says where to get it")
    r = subprocess.run([tool, "-c", "-gi", path], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(r.stderr)
    return r.stdout


def spans(kernels, want, spec):
    """Per kernel matching `want`: the code of lines LO .. HI of FILE (spec
    "FILE:LO-HI[,SKIP_LO-SKIP_HI]"), as the docstring says. Returns
    {kernel: (count, span, skipped count, skipped span, others inside, rest span)}."""
    m = re.fullmatch(r"([^:]+):(\d+)-(\d+)(?:,(\d+)-(\d+))?", spec)
    if not m:
        sys.exit(f"--spans {spec!r}: FILE:LO-HI[,SKIP_LO-SKIP_HI]")
    file, lo, hi = m.group(1), int(m.group(2)), int(m.group(3))
    skip = (int(m.group(4)), int(m.group(5))) if m.group(4) else None

    def span(addrs):
        return max(addrs) - min(addrs) + 16 if addrs else 0

    result = {}
    for name, code in sorted(kernels.items()):
        if want not in name:
            continue
        mine = []
        for addr, chain, _ in code:
            ours = [ln for f, ln in chain if f == file]
            if ours and lo <= ours[-1] <= hi:
                mine.append((addr, ours[-1]))
        if not mine:
            continue
        addrs = [a for a, _ in mine]
        line = f"{name}: {file}:{lo}-{hi} {len(mine)} instructions over {span(addrs) / 1024:.1f} KB"
        r = (len(mine), span(addrs), 0, 0, 0, span(addrs))
        if skip:
            sk = [a for a, ln in mine if skip[0] <= ln <= skip[1]]
            a0, a1 = (min(sk), max(sk)) if sk else (0, -1)
            inside = [a for a, ln in mine if a0 <= a <= a1 and not skip[0] <= ln <= skip[1]]
            rest = [a for a in addrs if not a0 <= a <= a1]
            # the rest's bytes: its span less the skipped block's, where that lies within
            held = span(rest) - (span(sk) if rest and min(rest) < a0 and a1 < max(rest) else 0)
            r = (len(mine), span(addrs), len(sk), span(sk), len(inside), held)
            line += (f"; lines {skip[0]}-{skip[1]}: {len(sk)} over {span(sk) / 1024:.1f} KB"
                     f" ({len(inside)} others inside); the rest: {len(rest)} over"
                     f" {held / 1024:.1f} KB")
        print(line)
        result[name] = r
    return result


SELF_TEST_LISTING = """
//--------------------- .text.k_one --------------------------
k_one:
	//## File "/x/a.cuh", line 5 inlined at "/x/k.cu", line 20
	//## File "/x/k.cu", line 20
        /*0000*/                   MOV R1, R2 ;
	//## File "/x/k.cu", line 21
        /*0010*/                   IADD3 R1, R1, 1, RZ ;
	//## File "/x/k.cu", line 23
        /*0020*/                   BRA `(.L_x_1) ;
        /*0030*/                   FADD R3, R3, R3 ;
	//## File "/x/k.cu", line 22
        /*0040*/                   FMUL R3, R3, R3 ;
	//## File "/x/k.cu", line 30
        /*0050*/                   EXIT ;
//--------------------- .text.k_two --------------------------
k_two:
	//## File "/x/k.cu", line 40
        /*0000*/                   EXIT ;
"""


def self_test_spans():
    """--spans on a listing written by hand: frames, the outermost frame in
    FILE, the skipped block (line 23: two instructions, one of line 22 after
    it) and the kernel filter."""
    out = io.StringIO()
    stdout, sys.stdout = sys.stdout, out
    try:
        got = spans(frames(SELF_TEST_LISTING), "k_", "k.cu:20-29,23-23")
    finally:
        sys.stdout = stdout
    want = {"k_one": (5, 80, 2, 32, 0, 48)}
    ok = got == want
    print(f"--spans on a hand-written listing: {got} {'ok' if ok else 'WRONG, expected ' + str(want)}")
    return ok


SELF_TEST_KERNEL = r"""
__global__ void spills(float *out, const float *in, int n) {
    float a[64];
#pragma unroll
    for (int i = 0; i < 64; i++) a[i] = in[i * n + threadIdx.x];
    for (int j = 0; j < n; j++) {
#pragma unroll
        for (int i = 0; i < 64; i++) a[i] = a[i] * a[(i + j) & 63] + 1.0f;
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 64; i++) s += a[i];
    out[threadIdx.x] = s;
}
__global__ void no_spills(float *out, const float *in) { out[threadIdx.x] = 2.0f * in[threadIdx.x]; }
"""


def self_test():
    if not self_test_spans():
        return 1
    nvcc = os.environ.get("SP_NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    try:
        import elftools  # noqa: F401
    except ImportError:
        print("sass_lines self-test: pyelftools is not installed (python3-pyelftools): skipped")
        return 77
    if not os.path.exists(nvcc):
        print("sass_lines self-test: no nvcc: skipped")
        return 77
    with tempfile.TemporaryDirectory() as d:
        src, cub = os.path.join(d, "spills.cu"), os.path.join(d, "spills.cubin")
        with open(src, "w") as f:
            f.write(SELF_TEST_KERNEL)
        r = subprocess.run([nvcc, "-cubin", "-arch=sm_90a", "-O3", "-lineinfo", "-maxrregcount", "32",
                            "-Xptxas", "-v", src, "-o", cub], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr)
            return 1
        # ptxas: "N bytes spill stores, M bytes spill loads" per kernel, in compile order
        said, name = {}, None
        for line in r.stderr.splitlines():
            m = re.search(r"Compiling entry function '(\w+)'", line)
            if m:
                name = m.group(1)
            m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
            if m and name:
                said[name] = (int(m.group(1)), int(m.group(2)))
        out = io.StringIO()
        stdout, sys.stdout = sys.stdout, out
        try:
            totals = report(cub, "", False, 0)
        finally:
            sys.stdout = stdout
        failed = 0
        for name, (st, ld) in said.items():
            where = totals.get(name, {})
            got = {k: sum(v.values()) for k, v in where.items()}
            # local stores and loads where ptxas reports spills (and its local array), none
            # where it reports none; each placed on a line of the kernel's body
            ok = (got.get("STL", 0) > 0) == (st > 0) and (got.get("LDL", 0) > 0) == (ld > 0)
            lines = {ln for v in where.values() for (f, ln) in v if f == "spills.cu"}
            ok = ok and sum(got.values()) == sum(v[k] for v in where.values() for k in v
                                                 if k[0] == "spills.cu")
            body = range(2, SELF_TEST_KERNEL.count("\n", 0, SELF_TEST_KERNEL.index("no_spills")) + 1)
            if (st > 0) != bool(lines) or not lines <= set(body):
                ok = False
            print(f"{name}: ptxas {st} bytes stored, {ld} loaded; found STL {got.get('STL', 0)}, "
                  f"LDL {got.get('LDL', 0)}: {'ok' if ok else 'WRONG'}")
            failed += not ok
        spilling = [n for n in said if "no_spills" not in n and said[n][0] > 0]
        if len(said) != 2 or len(spilling) != 1:
            print("the self-test kernel did not spill as meant")
            failed += 1
        print(f"{len(said) - failed} passed, {failed} failed")
        return 1 if failed else 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    args = [a for a in argv[1:] if not a.startswith("--")]
    if not args:
        print(__doc__)
        return 2
    if "--spans" in argv:
        i = argv.index("--spans")
        if i + 1 >= len(argv) or len(args) != 3 or args[2] != argv[i + 1]:
            sys.exit("usage: sass_lines.py CUBIN FILTER --spans FILE:LO-HI[,SKIP_LO-SKIP_HI]")
        if not spans(frames(disassemble(args[0])), args[1], argv[i + 1]):
            sys.exit(f"no kernel matching {args[1]!r} has code of {argv[i + 1]}")
        return 0
    if "--diff" in argv:
        if len(args) != 4:
            sys.exit("usage: sass_lines.py CUBIN FILTER --diff FILTER_B FILE")
        diff(args[0], args[1], args[2], args[3])
        return 0
    top = 0
    if "--lines" in argv:
        i = argv.index("--lines")
        top = int(argv[i + 1])
        args = [a for a in args if a != argv[i + 1]]
    report(args[0], args[1] if len(args) > 1 else "", "--files" in argv, top)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
