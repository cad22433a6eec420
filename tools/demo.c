/* demo.c — `stridepack demo`: pack the K3 layouts, verify, time (see
 * stridepack.c for the command line). */
#define _POSIX_C_SOURCE 200809L
#include "demo.h"

#include "test_support.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- host memory and a wall clock: the CPU side of demo_mem ---- */
static double cpu_t0;
static void *cpu_alloc(size_t n) { return aligned_alloc(SP_PACK_ALIGN, (n + SP_PACK_ALIGN) / SP_PACK_ALIGN * SP_PACK_ALIGN); }
static void cpu_release(void *p) { free(p); }
static int cpu_copy(void *d, const void *s, size_t n) {
    memcpy(d, s, n);
    return 0;
}
static void cpu_timer_start(void) { cpu_t0 = ts_now_seconds(); }
static double cpu_timer_stop_ms(void) { return 1e3 * (ts_now_seconds() - cpu_t0); }

static const demo_mem cpu_mem = {{SP_DEVICE_CPU, 0}, cpu_alloc, cpu_release, cpu_copy, cpu_copy,
                                 cpu_copy, cpu_timer_start, cpu_timer_stop_ms, "cpu"};

static size_t numel(const sp_tensor *t) {
    int64_t n = 0;
    sp_tensor_numel(t, &n);
    return (size_t)n;
}

static const char *const tensor_names[5] = {"q", "k", "v", "g", "beta"};

/* ---- why it failed: the lines printed under FAILED ---- */
enum { FAIL_LINES = 12 };
static char fail_lines[FAIL_LINES][256];
static int fail_count;

void demo_fail(const char *fmt, ...) {
    if (fail_count < FAIL_LINES) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(fail_lines[fail_count], sizeof fail_lines[0], fmt, ap);
        va_end(ap);
    }
    fail_count++;
}

static void print_failed(void) {
    printf("\nFAILED%s\n", fail_count ? ":" : "");
    for (int i = 0; i < fail_count && i < FAIL_LINES; i++) printf("  %s\n", fail_lines[i]);
    if (fail_count > FAIL_LINES) printf("  (and %d more)\n", fail_count - FAIL_LINES);
}

int demo_to_copy(const sp_tensor *views, const char *const *names, int n,
                 int (*keep)(const sp_tensor *), char *buf, size_t len) {
    int count = 0;
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (keep(&views[i])) continue;
        int w = snprintf(buf + at, len - at, "%s%s", count ? " " : "", names[i]);
        if (w > 0 && (size_t)w < len - at) at += (size_t)w;
        count++;
    }
    return count;
}

typedef struct arm_times {
    double pack_ms, separate_ms, memcpy_ms;
} arm_times;

/* Median time of `reps` runs of one arm, after one warm-up; a failed run
 * is recorded once, with `what` and the library's last error. */
typedef int (*arm_fn)(void *ctx);
static double time_arm(const demo_mem *m, int reps, arm_fn fn, void *ctx, const char *what,
                       int *failed) {
    double *t = malloc(sizeof(double) * (size_t)reps);
    int bad = !t || fn(ctx);
    for (int i = 0; i < reps && !bad; i++) {
        m->timer_start();
        bad = fn(ctx);
        t[i] = m->timer_stop_ms();
    }
    double med = bad ? 0 : ts_median(t, reps);
    if (bad) {
        demo_fail("%s failed: %s", what, t ? sp_last_error() : "out of memory");
        *failed = 1;
    }
    free(t);
    return med;
}

typedef struct pack_ctx {
    const demo_mem *m;
    sp_tensor in[5], out[5];
    void *ws, *lim_src, *lim_dst;
    size_t ws_bytes, copied_bytes;
    int beta_kind;
} pack_ctx;

static int arm_pack(void *p) {
    pack_ctx *c = p;
    return sp_pack(c->in, 5, c->ws, c->ws_bytes, c->out, NULL, NULL) != SP_OK;
}

static int arm_separate(void *p) { /* one copy per strided tensor: today's way */
    pack_ctx *c = p;
    for (int i = 0; i < 5; i++) {
        if (c->out[i].data == c->in[i].data) continue;
        sp_copy_pair pair = {c->in[i], c->out[i]};
        if (sp_copy_batch(&pair, 1, NULL) != SP_OK) return 1;
    }
    return 0;
}

static int arm_memcpy(void *p) {
    pack_ctx *c = p;
    return c->m->copy(c->lim_dst, c->lim_src, c->copied_bytes);
}

/* Check each packed output against its strided source, element by element
 * on the host. @return differing elements (or -1 on a failure to check). */
static int64_t verify(const pack_ctx *c, const sp_tensor host_in[5]) {
    int64_t bad = 0;
    for (int i = 0; i < 5; i++) {
        size_t bytes = numel(&c->out[i]) * 2;
        void *h = malloc(bytes ? bytes : 1);
        if (!h || c->m->download(h, c->out[i].data, bytes)) {
            demo_fail("pack, %s: %s could not be read back", ts_k3_beta_name(c->beta_kind),
                      tensor_names[i]);
            free(h);
            return -1;
        }
        sp_tensor dense = host_in[i];
        sp_tensor_dense(&dense, h, SP_BF16, host_in[i].ndim, host_in[i].shape, sp_cpu());
        int64_t first, diff = ts_ref_compare(&host_in[i], &dense, &first);
        if (diff)
            demo_fail("pack, %s: %s: %lld of %zu elements differ from the strided source, the "
                      "first at element %lld",
                      ts_k3_beta_name(c->beta_kind), tensor_names[i], (long long)diff, bytes / 2,
                      (long long)first);
        bad += diff;
        free(h);
    }
    return bad;
}

/* The pack table: one header line, one row per layout. The ratio cells
 * are text: "-" where nothing was copied. */
#define PACK_HEAD "%-18s %6s %8s %8s %8s %9s %13s %9s %8s %8s  %s\n"
#define PACK_ROW "%-18s %6zu %8llu %8.1f %8.3f %9s %13.3f %9s %8s %8s  %s\n"

/* STRIDEPACK_DEMO_FLIP=<q|k|v|g|beta>: flip one bit of that packed output
 * before the check, which must then fail and say where (the test of the
 * check itself). */
static int flip_requested(const pack_ctx *c) {
    const char *name = getenv("STRIDEPACK_DEMO_FLIP");
    if (!name) return 0;
    for (int i = 0; i < 5; i++) {
        if (strcmp(name, tensor_names[i]) || numel(&c->out[i]) == 0) continue;
        uint16_t e;
        if (c->m->download(&e, c->out[i].data, 2)) return -1;
        e ^= 1u << 3;
        return c->m->upload(c->out[i].data, &e, 2) ? -1 : 1;
    }
    return 0;
}

/* One K3 layout: pack, check, time. @return 0 when every element is
 * bit-exact and the pack copied exactly the strided inputs in one pass
 * (nothing, and no pass, when every input is dense); *copied_out: tensors
 * copied. */
static int run_layout(const demo_mem *m, const demo_options *o, int beta_kind, ts_rng *rng,
                      size_t *copied_out) {
    const char *layout = ts_k3_beta_name(beta_kind);
    ts_k3 k;
    ts_k3_init(&k, o->T, o->H, beta_kind);
    int rc = 1, failed = 0;
    pack_ctx c;
    memset(&c, 0, sizeof c);
    c.m = m;
    c.beta_kind = beta_kind;
    void *h_qkv = malloc(k.qkv_bytes + 1), *h_proj = malloc(k.proj_bytes + 1),
         *h_g = malloc(k.g_bytes + 1);
    void *d_qkv = m->alloc(k.qkv_bytes), *d_proj = m->alloc(k.proj_bytes),
         *d_g = m->alloc(k.g_bytes);
    if (!h_qkv || !h_proj || !h_g || !d_qkv || !d_proj || !d_g) {
        demo_fail("pack, %s: out of %s memory for T=%lld H=%lld (%.1f GB of inputs)", layout,
                  m->name, (long long)o->T, (long long)o->H,
                  (double)(k.qkv_bytes + k.proj_bytes + k.g_bytes) / 1e9);
        goto out;
    }
    ts_fill_random(h_qkv, k.qkv_bytes, rng);
    ts_fill_random(h_proj, k.proj_bytes, rng);
    ts_fill_random(h_g, k.g_bytes, rng);
    if (m->upload(d_qkv, h_qkv, k.qkv_bytes) || m->upload(d_proj, h_proj, k.proj_bytes) ||
        m->upload(d_g, h_g, k.g_bytes)) {
        demo_fail("pack, %s: uploading the inputs failed", layout);
        goto out;
    }
    sp_tensor host_in[5];
    ts_k3_views(&k, h_qkv, h_proj, h_g, sp_cpu(), host_in);
    ts_k3_views(&k, d_qkv, d_proj, d_g, m->dev, c.in);
    /* What the pack must copy: the inputs that are not dense. At T = 1
     * every slice is dense, and there is nothing to copy. */
    char strided[64];
    const int expect =
        demo_to_copy(c.in, tensor_names, 5, sp_tensor_is_dense, strided, sizeof strided);

    sp_status s = sp_pack_workspace_bytes(c.in, 5, &c.ws_bytes);
    c.ws = s == SP_OK ? m->alloc(c.ws_bytes) : NULL;
    /* Poison the workspace so that an unwritten element cannot pass. */
    void *poison = c.ws ? malloc(c.ws_bytes + 1) : NULL;
    if (!poison) {
        demo_fail("pack, %s: out of memory for the %zu-byte workspace", layout, c.ws_bytes);
        goto out;
    }
    ts_fill_random(poison, c.ws_bytes, rng);
    m->upload(c.ws, poison, c.ws_bytes);
    free(poison);

    size_t copied = 0;
    uint64_t passes = sp_copy_pass_count();
    s = sp_pack(c.in, 5, c.ws, c.ws_bytes, c.out, &copied, NULL);
    if (s != SP_OK) {
        demo_fail("pack, %s: sp_pack failed: %s: %s", layout, sp_status_string(s),
                  sp_last_error());
        goto out;
    }
    passes = sp_copy_pass_count() - passes;
    if (flip_requested(&c) < 0) {
        demo_fail("pack, %s: STRIDEPACK_DEMO_FLIP: the bit could not be flipped", layout);
        goto out;
    }
    int64_t bad = verify(&c, host_in);

    for (int i = 0; i < 5; i++)
        if (c.out[i].data != c.in[i].data) c.copied_bytes += numel(&c.in[i]) * 2;
    c.lim_src = m->alloc(c.copied_bytes);
    c.lim_dst = m->alloc(c.copied_bytes);
    if (!c.lim_src || !c.lim_dst) {
        demo_fail("pack, %s: out of memory for the plain-copy buffers", layout);
        goto out;
    }
    m->copy(c.lim_src, d_qkv, c.copied_bytes < k.qkv_bytes ? c.copied_bytes : k.qkv_bytes);

    char what[3][64];
    snprintf(what[0], sizeof what[0], "pack, %s: a timed sp_pack", layout);
    snprintf(what[1], sizeof what[1], "pack, %s: a timed per-tensor copy", layout);
    snprintf(what[2], sizeof what[2], "pack, %s: a timed plain copy", layout);
    arm_times t;
    t.pack_ms = time_arm(m, o->reps, arm_pack, &c, what[0], &failed);
    t.separate_ms = time_arm(m, o->reps, arm_separate, &c, what[1], &failed);
    t.memcpy_ms = time_arm(m, o->reps, arm_memcpy, &c, what[2], &failed);
    /* The timed runs rewrote the workspace: check it once more. */
    if (bad == 0) bad = verify(&c, host_in);

    const int nothing = copied == 0 && expect == 0;
    double moved = 2.0 * (double)c.copied_bytes; /* read + written */
    char gbs[16] = "-", memcpy_ms[16] = "-", of_limit[16] = "-", speedup[16] = "-";
    if (!nothing) {
        snprintf(gbs, sizeof gbs, "%.1f", moved / t.pack_ms / 1e6);
        snprintf(memcpy_ms, sizeof memcpy_ms, "%.3f", t.memcpy_ms);
        snprintf(of_limit, sizeof of_limit, "%.2f", t.memcpy_ms / t.pack_ms);
        snprintf(speedup, sizeof speedup, "%.2f", t.separate_ms / t.pack_ms);
    }
    static int head_printed; /* once, above the first row: not above an error */
    if (!head_printed++)
        printf(PACK_HEAD, "beta layout", "copied", "launches", "MB moved", "pack ms", "pack GB/s",
               "per-tensor ms", "memcpy ms", "of limit", "speedup", "check");
    printf(PACK_ROW, layout, copied, (unsigned long long)passes, moved / 1e6, t.pack_ms, gbs,
           t.separate_ms, memcpy_ms, of_limit, speedup,
           bad != 0   ? "MISMATCH"
           : failed   ? "a timed arm failed"
           : nothing  ? "nothing to copy"
                      : "bit-exact");
    rc = bad != 0 || failed;
    if (copied != (size_t)expect) {
        demo_fail("pack, %s: sp_pack copied %zu tensors, expected %d (%s)", layout, copied,
                  expect, expect ? strided : "every input is dense");
        rc = 1;
    }
    if (passes != (expect > 0 ? 1u : 0u)) {
        demo_fail("pack, %s: sp_pack took %llu copy passes, expected %d", layout,
                  (unsigned long long)passes, expect > 0);
        rc = 1;
    }
    *copied_out = copied;
out:
    free(h_qkv);
    free(h_proj);
    free(h_g);
    m->release(d_qkv);
    m->release(d_proj);
    m->release(d_g);
    m->release(c.ws);
    m->release(c.lim_src);
    m->release(c.lim_dst);
    return rc;
}

/* Tokens of the end-to-end run: --kda-tokens, else T on the GPU and at
 * most 256 on the CPU, where the float prefill takes about half a second
 * per 1000 tokens and 96 heads on two cores. */
static int64_t kda_tokens(const demo_options *o, const demo_mem *m) {
    if (o->kda_tokens >= 0) return o->kda_tokens;
    if (m->dev.type == SP_DEVICE_CUDA) return o->T;
    return o->T < 256 ? o->T : 256;
}

/* What the end-to-end table's two time columns show: the pack inside the
 * boundary when their difference stands out of the runs' spread; else
 * that it does not, rather than a claim the figures cannot carry. */
static void kda_caption(const demo_kda_times *t, const int *kinds, int n) {
    printf("\nboundary ms: the boundary on the strided views (it packs only what the prefill\n"
           "cannot read in place: nothing in the K3 layouts); prefill ms: the prefill alone\n"
           "on dense copies of the same inputs.\n");
    for (int i = 0; i < n; i++) {
        const demo_kda_times *x = &t[kinds[i]];
        const double d = x->boundary_ms - x->prefill_ms;
        printf("%s: ", ts_k3_beta_name(kinds[i]));
        if (x->copied == 0)
            printf("nothing to copy (the prefill reads the views where they lie);\n"
                   "  the two differ by %+.3f ms, the runs' spread is %.3f ms.\n", d, x->spread_ms);
        else if (d > x->spread_ms)
            printf("the boundary takes %.3f ms more, beyond the runs' spread\n"
                   "  (%.3f ms): that is the pack, which replaces one copy per tensor.\n",
                   d, x->spread_ms);
        else
            printf("the two differ by %+.3f ms, within the runs' spread (%.3f ms):\n"
                   "  the pack is too small a part of this prefill to show (the first table\n"
                   "  times it alone).\n",
                   d, x->spread_ms);
    }
}

int demo_run(const demo_options *o) {
    demo_mem m = cpu_mem;
    if (o->device != DEMO_DEVICE_CPU && demo_cuda_mem(&m) != 0) {
        if (o->device == DEMO_DEVICE_CUDA) {
            char why[512];
            demo_cuda_describe(why, sizeof why);
            fprintf(stderr, "stridepack: --device cuda, but CUDA is not usable: %s\n", why);
            return 1;
        }
        m = cpu_mem;
    }
    const int on_gpu = m.dev.type == SP_DEVICE_CUDA;
    printf("stridepack %s demo on %s: K3 layout, T=%lld H=%lld (P=%lld), bf16, median of %d "
           "runs\n",
           sp_version(), m.name, (long long)o->T, (long long)o->H, (long long)(128 * o->H),
           o->reps);
    printf("q, k, v: column slices of [T,3P]; g: dense; beta: column slice of its projection\n\n");
    ts_rng rng;
    ts_rng_seed(&rng, o->seed);
    int rc = 0, kinds[2], nk = 0;
    size_t copied_total = 0;
    for (int kind = 0; kind < 2; kind++)
        if (o->beta == DEMO_BETA_BOTH || o->beta == kind) kinds[nk++] = kind;
    for (int i = 0; i < nk && !rc; i++) {
        size_t copied = 0;
        rc = run_layout(&m, o, kinds[i], &rng, &copied);
        copied_total += copied;
    }
    if (rc) {
        print_failed();
        return rc;
    }
    printf("\ncopied: tensors the pack copied (g is dense already; at T=1 every view is dense,\n"
           "and there is nothing to copy); launches: copy passes of the one sp_pack call; MB\n"
           "moved: bytes read + written; per-tensor: one copy per strided tensor, the usual way;\n");
    if (on_gpu)
        printf("memcpy: one plain device-to-device copy of the same bytes, the limit;\n"
               "of limit: memcpy ms / pack ms (1.00 = as fast as a plain copy);\n");
    else
        printf("memcpy: one memcpy of the same bytes on one thread; the CPU pack runs on every\n"
               "core, so this is no limit here, and of limit (memcpy ms / pack ms) may pass 1;\n");
    printf("speedup: per-tensor ms / pack ms.\n");

    const int64_t kt = kda_tokens(o, &m);
    if (kt > 0) {
        const int kreps = on_gpu || o->reps < 5 ? o->reps : 5;
        demo_kda_times kt_times[2];
        memset(kt_times, 0, sizeof kt_times);
        printf("\nEnd to end, T=%lld%s:\n"
               "strided inputs -> KDA input boundary -> prefill, against the prefill on dense\n"
               "copies (4 sequences, fp32 state, checkpoints every 64 tokens), median of %d runs\n\n",
               (long long)kt,
               kt == o->T ? ""
               : o->kda_tokens >= 0 ? " (--kda-tokens)"
                                    : " (the CPU prefill is slow; --kda-tokens sets it)",
               kreps);
        printf(KDA_HEAD, "beta layout", "copied", "launches", "boundary ms", "prefill ms",
               "output", "states", "checkpoints");
        for (int i = 0; i < nk && !rc; i++)
            rc = demo_kda(&m, kt, o->H, kinds[i], kreps, o->seed + 100 + (uint64_t)kinds[i],
                          &kt_times[kinds[i]]);
        if (!rc) kda_caption(kt_times, kinds, nk);
        if (!rc) {
            printf("\nThe producer in front, T=%lld: the causal convolution (width 4, SiLU) makes\n"
                   "q, k, v from a [T,3P] projection, token-major or split into dense tensors, then\n"
                   "the boundary and the prefill; median of %d runs\n\n",
                   (long long)kt, kreps);
            printf(PRODUCER_HEAD, "conv output", "copied", "layer ms", "output", "states",
                   "checkpoints");
            rc = demo_producer(&m, kt, o->H, kreps, o->seed + 200);
            if (!rc)
                printf("\nlayer ms: convolution, boundary and prefill; copied: tensors the boundary\n"
                       "packed (none: the prefill reads the token-major slices and beta in place);\n"
                       "the comparison is with the token-major row.\n");
        }
    }
    if (rc) {
        print_failed();
        return rc;
    }
    if (copied_total == 0)
        printf("\nOK: every element bit-exact; nothing to copy (every view is dense), no launch\n");
    else
        printf("\nOK: every element bit-exact, one launch per pack\n");
    return 0;
}
