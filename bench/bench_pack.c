/*
 * bench_pack.c — sp_pack of the K3 inputs on one GPU, against the limit and
 * the usual alternatives, side by side in one run (CUDA events, median of
 * the repetitions after warm-up, the arms interleaved within each one):
 *
 *   limit       one contiguous cudaMemcpyAsync, device to device, of the
 *               bytes that sp_pack moves
 *   pack        sp_pack of q, k, v, g, beta: one launch
 *   per_tensor  one sp_copy_batch launch per tensor that needs copying
 *   memcpy2d    one cudaMemcpy2DAsync (copy engine) per such tensor
 *
 * Bandwidth counts bytes read plus bytes written. The pack output is
 * checked bit for bit against the memcpy2d output for every layout. Host
 * cost: the wall time of 10,000 back-to-back sp_pack calls (T <= 64); the
 * same 10,000 in bursts of 64 with the device synchronized between bursts,
 * outside the timing (the calls alone, never waiting on a full launch
 * queue); and the median time one call takes to return with the device idle.
 * Where the bytes a repetition reads are under 4x the L2, several input
 * sets are rotated so that the figures are not the cache's.
 *
 * Run: bench_pack [--json FILE] [--reps N] [--warmup N] [--only LAYOUT]
 * Prints a table, then one JSON object per layout and line.
 * bench_pack --all-gpus: k3_tp1 on every GPU, alone and all at once.
 */
#define _POSIX_C_SOURCE 200809L /* pthread barriers */
#define SP_EXPERIMENTAL         /* sp_copy_pass_count: launches per call */
#include "harness.h"
#include "test_support.h"
#include "stridepack.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_SP(expr)                                                                \
    do {                                                                              \
        sp_status st_ = (expr);                                                       \
        if (st_ != SP_OK) {                                                           \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #expr,         \
                    sp_status_string(st_), sp_last_error());                          \
            exit(2);                                                                  \
        }                                                                             \
    } while (0)

enum { MAX_SETS = 8, NIN = 5 };

typedef struct layout {
    const char *name;
    int64_t T, H;
    int beta_kind;
} layout;

static const layout kLayouts[] = {
    {"k3_tp1", 16384, 96, TS_K3_BETA_FA},
    {"k3_tp8", 16384, 12, TS_K3_BETA_FA},
    {"t1024_h96", 1024, 96, TS_K3_BETA_FA},
    {"t64_h96", 64, 96, TS_K3_BETA_FA},
    {"t1_h96", 1, 96, TS_K3_BETA_FA},
    {"k3_tp1_inproj", 16384, 96, TS_K3_BETA_INPROJ},
    {"k3_tp8_inproj", 16384, 12, TS_K3_BETA_INPROJ},
};

/* One input set: the producer buffers, the workspace, and the other arms'
 * destinations. */
typedef struct set {
    void *qkv, *proj, *g, *ws;
    void *limit_src, *limit_dst, *m2d_dst;
    sp_tensor in[NIN], out[NIN];
    sp_copy_pair pairs[NIN]; /* in -> out, the copied inputs only */
} set;

typedef struct ctx {
    ts_k3 k;
    set sets[MAX_SETS];
    int nsets;
    size_t wsb, copy_bytes; /* copy_bytes: dense bytes of the copied inputs */
    int ncopy;              /* inputs that need copying */
    int copied_idx[NIN];    /* which */
    size_t m2d_off[NIN];    /* each copied input's offset in m2d_dst */
} ctx;

/* What an arm's function gets: the layout and its own rotation over the
 * input sets (each arm cycles through all of them). */
typedef struct arm {
    ctx *c;
    int next;
} arm;

static set *take(arm *a) {
    set *s = &a->c->sets[a->next];
    a->next = (a->next + 1) % a->c->nsets;
    return s;
}

static void arm_limit(void *p, cudaStream_t st) {
    ctx *c = ((arm *)p)->c;
    set *s = take((arm *)p);
    BENCH_CU(cudaMemcpyAsync(s->limit_dst, s->limit_src, c->copy_bytes, cudaMemcpyDeviceToDevice,
                             st));
}

static void arm_pack(void *p, cudaStream_t st) {
    ctx *c = ((arm *)p)->c;
    set *s = take((arm *)p);
    sp_tensor out[NIN];
    CHECK_SP(sp_pack(s->in, NIN, s->ws, c->wsb, out, NULL, (struct CUstream_st *)st));
}

static void arm_per_tensor(void *p, cudaStream_t st) {
    ctx *c = ((arm *)p)->c;
    set *s = take((arm *)p);
    for (int i = 0; i < c->ncopy; i++)
        CHECK_SP(sp_copy_batch(&s->pairs[i], 1, (struct CUstream_st *)st));
}

/* Each copied K3 input is T rows of a contiguous run: q, k, v rows of the
 * [T, 3P] buffer, beta rows of the [T, W] projection. */
static void arm_memcpy2d(void *p, cudaStream_t st) {
    ctx *c = ((arm *)p)->c;
    set *s = take((arm *)p);
    for (int i = 0; i < c->ncopy; i++) {
        const sp_tensor *t = &s->in[c->copied_idx[i]];
        int nd = t->ndim;
        size_t width = (size_t)t->shape[nd - 1] * 2, rows = (size_t)t->shape[1];
        size_t spitch = (size_t)t->strides[1] * 2;
        if (nd == 4) width *= (size_t)t->shape[2]; /* [1, T, H, 128]: a row is H*128 */
        BENCH_CU(cudaMemcpy2DAsync((char *)s->m2d_dst + c->m2d_off[i], width, t->data, spitch,
                                   width, rows, cudaMemcpyDeviceToDevice, st));
    }
}

static void ctx_make(ctx *c, const layout *l, size_t l2_bytes, int dev) {
    memset(c, 0, sizeof *c);
    ts_k3_init(&c->k, l->T, l->H, l->beta_kind);
    sp_tensor probe[NIN];
    ts_k3_views(&c->k, (void *)(uintptr_t)4096, (void *)(uintptr_t)4096, (void *)(uintptr_t)4096,
                sp_cuda(0), probe);
    for (int i = 0; i < NIN; i++)
        if (!sp_tensor_is_dense(&probe[i])) {
            int64_t n = 1;
            for (int d = 0; d < probe[i].ndim; d++) n *= probe[i].shape[d];
            c->m2d_off[c->ncopy] = c->copy_bytes;
            c->copy_bytes += (size_t)n * 2;
            c->copied_idx[c->ncopy++] = i;
        }
    size_t reads = c->copy_bytes;
    c->nsets = reads == 0 ? 1 : (int)((4 * l2_bytes + reads - 1) / reads);
    if (c->nsets < 1) c->nsets = 1;
    if (c->nsets > MAX_SETS) c->nsets = MAX_SETS;
    for (int si = 0; si < c->nsets; si++) {
        set *s = &c->sets[si];
        size_t lim = c->copy_bytes ? c->copy_bytes : 1;
        BENCH_CU(cudaMalloc(&s->qkv, c->k.qkv_bytes ? c->k.qkv_bytes : 1));
        BENCH_CU(cudaMalloc(&s->proj, c->k.proj_bytes ? c->k.proj_bytes : 1));
        BENCH_CU(cudaMalloc(&s->g, c->k.g_bytes ? c->k.g_bytes : 1));
        BENCH_CU(cudaMalloc(&s->limit_src, lim));
        BENCH_CU(cudaMalloc(&s->limit_dst, lim));
        BENCH_CU(cudaMalloc(&s->m2d_dst, lim));
        uint64_t seed = 0x600d5eedull * (uint64_t)(si + 1);
        bench_fill_random(s->qkv, c->k.qkv_bytes, seed + 1);
        bench_fill_random(s->proj, c->k.proj_bytes, seed + 2);
        bench_fill_random(s->g, c->k.g_bytes, seed + 3);
        bench_fill_random(s->limit_src, c->copy_bytes, seed + 4);
        ts_k3_views(&c->k, s->qkv, s->proj, s->g, sp_cuda(dev), s->in);
        CHECK_SP(sp_pack_workspace_bytes(s->in, NIN, &c->wsb));
        BENCH_CU(cudaMalloc(&s->ws, c->wsb ? c->wsb : 1));
        BENCH_CU(cudaMemset(s->ws, 0xa5, c->wsb)); /* poison, not zeros */
        CHECK_SP(sp_pack(s->in, NIN, s->ws, c->wsb, s->out, NULL, NULL));
        for (int i = 0; i < c->ncopy; i++) {
            s->pairs[i].src = s->in[c->copied_idx[i]];
            s->pairs[i].dst = s->out[c->copied_idx[i]];
        }
    }
    BENCH_CU(cudaDeviceSynchronize());
}

static void ctx_free(ctx *c) {
    for (int si = 0; si < c->nsets; si++) {
        set *s = &c->sets[si];
        void *ptrs[] = {s->qkv, s->proj, s->g, s->ws, s->limit_src, s->limit_dst, s->m2d_dst};
        for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) BENCH_CU(cudaFree(ptrs[i]));
    }
}

/* The pack output of set 0 against the copy engine's, bit for bit. */
static int verify(ctx *c, cudaStream_t st) {
    if (c->ncopy == 0) return 1;
    set *s = &c->sets[0];
    /* Poison both outputs on the same stream as the copies (a non-blocking
     * stream does not wait for the legacy default stream). */
    BENCH_CU(cudaMemsetAsync(s->ws, 0x5a, c->wsb, st));
    BENCH_CU(cudaMemsetAsync(s->m2d_dst, 0xc3, c->copy_bytes, st));
    arm a0 = {c, 0};
    arm_memcpy2d(&a0, st);
    sp_tensor out[NIN];
    CHECK_SP(sp_pack(s->in, NIN, s->ws, c->wsb, out, NULL, (struct CUstream_st *)st));
    BENCH_CU(cudaStreamSynchronize(st));
    int ok = 1;
    for (int i = 0; i < c->ncopy && ok; i++) {
        int64_t n = 1;
        const sp_tensor *o = &out[c->copied_idx[i]];
        for (int d = 0; d < o->ndim; d++) n *= o->shape[d];
        size_t bytes = (size_t)n * 2;
        unsigned char *a = (unsigned char *)malloc(bytes), *b = (unsigned char *)malloc(bytes);
        if (!a || !b) exit(2);
        BENCH_CU(cudaMemcpy(a, o->data, bytes, cudaMemcpyDeviceToHost));
        BENCH_CU(cudaMemcpy(b, (char *)s->m2d_dst + c->m2d_off[i], bytes,
                            cudaMemcpyDeviceToHost));
        ok = memcmp(a, b, bytes) == 0;
        free(a);
        free(b);
    }
    return ok;
}

/* ---- every GPU at once (--all-gpus) ---------------------------------------
 * k3_tp1 packed on each GPU alone, one GPU after the other, then on all GPUs
 * at the same time (one host thread per GPU, started together): each GPU's
 * pack bandwidth busy against alone. */
typedef struct gpu_job {
    int dev, reps, warmup;
    ctx *c;
    cudaStream_t st;
    pthread_barrier_t *start;
    double alone_gbps, busy_gbps;
} gpu_job;

static double pack_gbps(gpu_job *j) {
    arm a = {j->c, 0};
    bench_fn fn = arm_pack;
    void *ctx_ = &a;
    bench_stats s;
    bench_time_interleaved(&fn, &ctx_, 1, j->st, j->warmup, j->reps, &s);
    return bench_gbps(2.0 * (double)j->c->copy_bytes, s.median_ms);
}

static void *gpu_busy(void *p) {
    gpu_job *j = p;
    BENCH_CU(cudaSetDevice(j->dev));
    pthread_barrier_wait(j->start);
    j->busy_gbps = pack_gbps(j);
    return NULL;
}

static int all_gpus(int reps, int warmup, FILE *jf) {
    int n = 0;
    BENCH_CU(cudaGetDeviceCount(&n));
    const layout *l = &kLayouts[0]; /* k3_tp1 */
    gpu_job *jobs = calloc((size_t)n, sizeof *jobs);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    pthread_barrier_t start;
    if (!jobs || !th || pthread_barrier_init(&start, NULL, (unsigned)n)) exit(2);
    for (int d = 0; d < n; d++) {
        char name[256];
        int sms;
        size_t l2;
        BENCH_CU(cudaSetDevice(d));
        bench_device(name, sizeof name, &sms, &l2);
        jobs[d] = (gpu_job){d, reps, warmup, calloc(1, sizeof(ctx)), NULL, &start, NAN, NAN};
        if (!jobs[d].c) exit(2);
        ctx_make(jobs[d].c, l, l2, d);
        BENCH_CU(cudaStreamCreateWithFlags(&jobs[d].st, cudaStreamNonBlocking));
        jobs[d].alone_gbps = pack_gbps(&jobs[d]);
    }
    for (int d = 0; d < n; d++) pthread_create(&th[d], NULL, gpu_busy, &jobs[d]);
    for (int d = 0; d < n; d++) pthread_join(th[d], NULL);
    printf("k3_tp1 on %d GPU(s): pack GB/s alone (one GPU at a time) and busy (all at once)\n", n);
    printf("%4s %10s %10s %8s\n", "gpu", "alone", "busy", "busy/alone");
    for (int d = 0; d < n; d++) {
        gpu_job *j = &jobs[d];
        printf("%4d %10.1f %10.1f %8.3f\n", d, j->alone_gbps, j->busy_gbps, j->busy_gbps / j->alone_gbps);
        bench_json rec;
        bench_json_begin(&rec);
        bench_json_str(&rec, "layout", l->name);
        bench_json_str(&rec, "mode", "all_gpus");
        bench_json_int(&rec, "gpu", d);
        bench_json_int(&rec, "gpus", n);
        bench_json_num(&rec, "alone_gbps", j->alone_gbps);
        bench_json_num(&rec, "busy_gbps", j->busy_gbps);
        bench_json_num(&rec, "busy_over_alone", j->busy_gbps / j->alone_gbps);
        bench_json_emit(&rec, jf);
        BENCH_CU(cudaSetDevice(d));
        ctx_free(j->c);
        free(j->c);
        BENCH_CU(cudaStreamDestroy(j->st));
    }
    pthread_barrier_destroy(&start);
    free(jobs);
    free(th);
    return 0;
}

int main(int argc, char **argv) {
    const char *only = NULL;
    int reps = 100, warmup = 10, every_gpu = 0;
    FILE *jf = NULL;
    if (bench_take_json_arg(&argc, argv, &jf)) return 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--all-gpus"))
            every_gpu = 1;
        else {
            fprintf(stderr, "usage: %s [--json FILE] [--reps N>=50] [--warmup N] [--only LAYOUT] [--all-gpus]\n",
                    argv[0]);
            return 2;
        }
    }
    if (reps < 50) fprintf(stderr, "note: --reps %d is under the 50 the method asks for\n", reps);
    if (!sp_cuda_available()) {
        fprintf(stderr, "bench_pack: no usable CUDA device\n");
        return 77;
    }
    BENCH_CU(cudaSetDevice(0));
    char dev[256];
    int sms = 0;
    size_t l2 = 0;
    bench_device(dev, sizeof dev, &sms, &l2);
    if (every_gpu) {
        int rc = all_gpus(reps, warmup, jf);
        if (jf) fclose(jf);
        return rc;
    }
    cudaStream_t st;
    BENCH_CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    enum { NL = sizeof kLayouts / sizeof kLayouts[0] };
    bench_json rec[NL];
    int nrec = 0, all_ok = 1;
    printf("device: %s, %d SMs, L2 %.0f MB, stridepack %s; median of %d after %d warm-up\n", dev,
           sms, (double)l2 / 1e6, sp_version(), reps, warmup);
    printf("%-14s %6s %4s %10s %4s | %8s %8s %8s %8s | %6s | %7s %7s %7s %s\n", "layout", "T",
           "H", "MB moved", "sets", "limit", "pack", "per-t", "m2d", "ratio", "host us", "burst",
           "1-call", "bits");
    for (int li = 0; li < NL; li++) {
        const layout *l = &kLayouts[li];
        if (only && strcmp(only, l->name)) continue;
        static ctx c;
        ctx_make(&c, l, l2, 0);
        const double moved = 2.0 * (double)c.copy_bytes;
        bench_stats s[4] = {{NAN, NAN, NAN, 0}, {NAN, NAN, NAN, 0}, {NAN, NAN, NAN, 0},
                            {NAN, NAN, NAN, 0}};
        int ok = verify(&c, st);
        all_ok &= ok;
        arm arms[4] = {{&c, 0}, {&c, 0}, {&c, 0}, {&c, 0}};
        if (c.ncopy > 0) {
            bench_fn fns[4] = {arm_limit, arm_pack, arm_per_tensor, arm_memcpy2d};
            void *ctxs[4] = {&arms[0], &arms[1], &arms[2], &arms[3]};
            bench_time_interleaved(fns, ctxs, 4, st, warmup, reps, s);
        }
        /* Host cost: 10,000 back-to-back calls where each is short (T <= 64:
         * the launch, not the copy, bounds the rate); the single-call median
         * always. */
        double host_us = NAN, burst_us = NAN;
        int host_calls = 0;
        if (l->T <= 64) {
            host_calls = 10000;
            host_us = bench_host_us(arm_pack, &arms[1], st, 100, host_calls);
            burst_us = bench_host_burst_us(arm_pack, &arms[1], st, host_calls, 64);
        }
        double single_us = bench_host_single_us(arm_pack, &arms[1], st, 200);
        uint64_t p0 = sp_copy_pass_count();
        arm_pack(&arms[1], st);
        uint64_t launches = sp_copy_pass_count() - p0;
        BENCH_CU(cudaStreamSynchronize(st));

        double lim = bench_gbps(moved, s[0].median_ms), pk = bench_gbps(moved, s[1].median_ms),
               pt = bench_gbps(moved, s[2].median_ms), m2 = bench_gbps(moved, s[3].median_ms);
        printf("%-14s %6lld %4lld %10.1f %4d | %8.1f %8.1f %8.1f %8.1f | %6.3f | %7.2f %7.2f %7.2f "
               "%s\n",
               l->name, (long long)l->T, (long long)l->H, moved / 1e6, c.nsets, lim, pk, pt, m2,
               pk / lim, host_us, burst_us, single_us, ok ? "ok" : "DIFFER");
        bench_json *j = &rec[nrec++];
        bench_json_begin(j);
        bench_json_str(j, "layout", l->name);
        bench_json_int(j, "T", (long long)l->T);
        bench_json_int(j, "H", (long long)l->H);
        bench_json_str(j, "beta", ts_k3_beta_name(l->beta_kind));
        bench_json_int(j, "bytes_moved", (long long)moved);
        bench_json_int(j, "tensors_copied", c.ncopy);
        bench_json_int(j, "pack_launches", (long long)launches);
        bench_json_num(j, "limit_ms", s[0].median_ms);
        bench_json_num(j, "pack_ms", s[1].median_ms);
        bench_json_num(j, "per_tensor_ms", s[2].median_ms);
        bench_json_num(j, "memcpy2d_ms", s[3].median_ms);
        bench_json_num(j, "limit_gbps", lim);
        bench_json_num(j, "pack_gbps", pk);
        bench_json_num(j, "pack_ratio", pk / lim);
        bench_json_num(j, "per_tensor_gbps", pt);
        bench_json_num(j, "per_tensor_ratio", pt / lim);
        bench_json_num(j, "memcpy2d_gbps", m2);
        bench_json_num(j, "memcpy2d_ratio", m2 / lim);
        bench_json_num(j, "pack_min_ms", s[1].min_ms);
        bench_json_num(j, "pack_max_ms", s[1].max_ms);
        bench_json_num(j, "host_us_per_call", isfinite(host_us) ? host_us : single_us);
        bench_json_int(j, "host_calls", host_calls);
        bench_json_num(j, "host_us_single_call", single_us);
        bench_json_num(j, "host_us_bursts_of_64", burst_us);
        bench_json_int(j, "input_sets", c.nsets);
        bench_json_int(j, "reps", reps);
        bench_json_int(j, "warmup", warmup);
        bench_json_str(j, "bits_equal_memcpy2d", ok ? "yes" : "no");
        bench_json_str(j, "device", dev);
        bench_json_str(j, "version", sp_version());
        ctx_free(&c);
    }
    printf("\n");
    for (int i = 0; i < nrec; i++) bench_json_emit(&rec[i], jf);
    if (jf) fclose(jf);
    BENCH_CU(cudaStreamDestroy(st));
    return all_ok ? 0 : 1;
}
