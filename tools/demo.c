/* demo.c — `stridepack demo`: pack the K3 layouts, verify, time (see
 * stridepack.c for the command line). */
#define _POSIX_C_SOURCE 200809L
#include "demo.h"

#include "test_support.h"

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

static const char *tensor_names[5] = {"q", "k", "v", "g", "beta"};

typedef struct arm_times {
    double pack_ms, separate_ms, memcpy_ms;
} arm_times;

/* Median time of `reps` runs of one arm, after one warm-up. */
typedef int (*arm_fn)(void *ctx);
static double time_arm(const demo_mem *m, int reps, arm_fn fn, void *ctx, int *failed) {
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (!t || fn(ctx)) {
        *failed = 1;
        free(t);
        return 0;
    }
    for (int i = 0; i < reps; i++) {
        m->timer_start();
        if (fn(ctx)) *failed = 1;
        t[i] = m->timer_stop_ms();
    }
    double med = ts_median(t, reps);
    free(t);
    return med;
}

typedef struct pack_ctx {
    const demo_mem *m;
    sp_tensor in[5], out[5];
    void *ws, *lim_src, *lim_dst;
    size_t ws_bytes, copied_bytes;
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
            free(h);
            return -1;
        }
        sp_tensor dense = host_in[i];
        sp_tensor_dense(&dense, h, SP_BF16, host_in[i].ndim, host_in[i].shape, sp_cpu());
        int64_t first, diff = ts_ref_compare(&host_in[i], &dense, &first);
        if (diff) fprintf(stderr, "%s: %lld elements differ, first at %lld\n", tensor_names[i],
                          (long long)diff, (long long)first);
        bad += diff;
        free(h);
    }
    return bad;
}

/* The pack table: one header line, one row per layout. */
#define PACK_HEAD "%-18s %6s %8s %8s %8s %9s %13s %9s %8s %8s  %s\n"
#define PACK_ROW "%-18s %6zu %8llu %8.1f %8.3f %9.1f %13.3f %9.3f %8.2f %8.2f  %s\n"

static int run_layout(const demo_mem *m, const demo_options *o, int beta_kind, ts_rng *rng) {
    ts_k3 k;
    ts_k3_init(&k, o->T, o->H, beta_kind);
    int rc = 1, failed = 0;
    pack_ctx c;
    memset(&c, 0, sizeof c);
    c.m = m;
    void *h_qkv = malloc(k.qkv_bytes + 1), *h_proj = malloc(k.proj_bytes + 1),
         *h_g = malloc(k.g_bytes + 1);
    void *d_qkv = m->alloc(k.qkv_bytes), *d_proj = m->alloc(k.proj_bytes),
         *d_g = m->alloc(k.g_bytes);
    if (!h_qkv || !h_proj || !h_g || !d_qkv || !d_proj || !d_g) {
        fprintf(stderr, "stridepack: out of %s memory for T=%lld H=%lld (%.1f GB of inputs)\n",
                m->name, (long long)o->T, (long long)o->H,
                (double)(k.qkv_bytes + k.proj_bytes + k.g_bytes) / 1e9);
        goto out;
    }
    ts_fill_random(h_qkv, k.qkv_bytes, rng);
    ts_fill_random(h_proj, k.proj_bytes, rng);
    ts_fill_random(h_g, k.g_bytes, rng);
    if (m->upload(d_qkv, h_qkv, k.qkv_bytes) || m->upload(d_proj, h_proj, k.proj_bytes) ||
        m->upload(d_g, h_g, k.g_bytes)) {
        fprintf(stderr, "stridepack: uploading the inputs failed\n");
        goto out;
    }
    sp_tensor host_in[5];
    ts_k3_views(&k, h_qkv, h_proj, h_g, sp_cpu(), host_in);
    ts_k3_views(&k, d_qkv, d_proj, d_g, m->dev, c.in);

    sp_status s = sp_pack_workspace_bytes(c.in, 5, &c.ws_bytes);
    c.ws = s == SP_OK ? m->alloc(c.ws_bytes) : NULL;
    /* Poison the workspace so that an unwritten element cannot pass. */
    void *poison = c.ws ? malloc(c.ws_bytes + 1) : NULL;
    if (!poison) {
        fprintf(stderr, "stridepack: out of memory for the %zu-byte workspace\n", c.ws_bytes);
        goto out;
    }
    ts_fill_random(poison, c.ws_bytes, rng);
    m->upload(c.ws, poison, c.ws_bytes);
    free(poison);

    size_t copied = 0;
    uint64_t passes = sp_copy_pass_count();
    s = sp_pack(c.in, 5, c.ws, c.ws_bytes, c.out, &copied, NULL);
    if (s != SP_OK) {
        fprintf(stderr, "stridepack: sp_pack failed: %s: %s\n", sp_status_string(s),
                sp_last_error());
        goto out;
    }
    passes = sp_copy_pass_count() - passes;
    int64_t bad = verify(&c, host_in);

    for (int i = 0; i < 5; i++)
        if (c.out[i].data != c.in[i].data) c.copied_bytes += numel(&c.in[i]) * 2;
    c.lim_src = m->alloc(c.copied_bytes);
    c.lim_dst = m->alloc(c.copied_bytes);
    if (!c.lim_src || !c.lim_dst) {
        fprintf(stderr, "stridepack: out of memory for the plain-copy buffers\n");
        goto out;
    }
    m->copy(c.lim_src, d_qkv, c.copied_bytes < k.qkv_bytes ? c.copied_bytes : k.qkv_bytes);

    arm_times t;
    t.pack_ms = time_arm(m, o->reps, arm_pack, &c, &failed);
    t.separate_ms = time_arm(m, o->reps, arm_separate, &c, &failed);
    t.memcpy_ms = time_arm(m, o->reps, arm_memcpy, &c, &failed);
    /* The timed runs rewrote the workspace: check it once more. */
    if (bad == 0) bad = verify(&c, host_in);

    double moved = 2.0 * (double)c.copied_bytes; /* read + written */
    static int head_printed; /* once, above the first row: not above an error */
    if (!head_printed++)
        printf(PACK_HEAD, "beta layout", "copied", "launches", "MB moved", "pack ms", "pack GB/s",
               "per-tensor ms", "memcpy ms", "of limit", "speedup", "check");
    printf(PACK_ROW, ts_k3_beta_name(beta_kind), copied, (unsigned long long)passes, moved / 1e6,
           t.pack_ms, moved / t.pack_ms / 1e6, t.separate_ms, t.memcpy_ms,
           t.memcpy_ms / t.pack_ms, t.separate_ms / t.pack_ms,
           bad != 0 ? "MISMATCH" : failed ? "a timed arm failed" : "bit-exact");
    /* q, k, v and beta are strided, g is dense: 4 copies in one pass. */
    rc = (bad == 0 && !failed && copied == 4 && passes == 1) ? 0 : 1;
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
    printf("stridepack %s demo on %s: K3 layout, T=%lld H=%lld (P=%lld), bf16, median of %d "
           "runs\n",
           sp_version(), m.name, (long long)o->T, (long long)o->H, (long long)(128 * o->H),
           o->reps);
    printf("q, k, v: column slices of [T,3P]; g: dense; beta: column slice of its projection\n\n");
    ts_rng rng;
    ts_rng_seed(&rng, o->seed);
    int rc = 0;
    for (int kind = 0; kind < 2 && !rc; kind++)
        if (o->beta == DEMO_BETA_BOTH || o->beta == kind) rc = run_layout(&m, o, kind, &rng);
    if (rc) {
        printf("\nFAILED\n");
        return rc;
    }
    printf("\ncopied: tensors the pack copied (g is dense already); launches: copy passes of the\n"
           "one sp_pack call; MB moved: bytes read + written; per-tensor: one copy per strided\n"
           "tensor, the usual way; memcpy: one plain copy of the same bytes, the limit;\n"
           "of limit: memcpy ms / pack ms (1.00 = as fast as a plain copy);\n"
           "speedup: per-tensor ms / pack ms.\n");

    const int64_t kt = kda_tokens(o, &m);
    if (kt > 0) {
        const int kreps = m.dev.type == SP_DEVICE_CUDA || o->reps < 5 ? o->reps : 5;
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
        for (int kind = 0; kind < 2 && !rc; kind++)
            if (o->beta == DEMO_BETA_BOTH || o->beta == kind)
                rc = demo_kda(&m, kt, o->H, kind, kreps, o->seed + 100 + (uint64_t)kind);
        if (!rc)
            printf("\nboundary ms: one pack of the strided inputs, then the prefill; prefill ms: the\n"
                   "prefill alone on inputs that are dense already (no copy at all). The difference\n"
                   "is the pack, which replaces one copy per tensor.\n");
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
                       "packed. The split layout leaves only beta to copy; the comparison is with the\n"
                       "token-major row.\n");
        }
    }
    printf("\n%s\n", rc ? "FAILED" : "OK: every element bit-exact, one launch per pack");
    return rc;
}
