/*
 * bench_boundary.c — what the input boundary costs in a KDA layer call, for
 * the K3 layouts at T = 16384: TP1 (H = 96) and TP8 (H = 12), beta from
 * both projection widths. Arms, timed interleaved with CUDA events (median
 * of 100 after warm-up):
 *   limit     one contiguous cudaMemcpyAsync of the same bytes (the bound)
 *   pack      one sp_pack of q, k, v, g, beta (one launch: g is dense)
 *   separate  one cudaMemcpy2DAsync per strided tensor (q, k, v, beta)
 * then, timed alone: the prefill on dense inputs (one sequence; the kernel
 * AUTO picks given the workspace it asks for, named in the JSON) and the
 * whole sp_kda_boundary_run on the K3 views, which the prefill reads in
 * place (no pack: boundary_copied 0, boundary_over_prefill the layer's
 * cost over the dense prefill). Before timing, the pack's outputs are
 * compared bit for bit with the separate copies'.
 * Then the producer in front (beta from [T, 128+H]): the causal convolution
 * (W = 4, SiLU) from a projection x [T, 3P] either token-major into the
 * [T, 3P] buffer whose column slices the prefill reads, or split into
 * dense q, k, v; each followed by
 * sp_kda_boundary_run. Before timing, the two layer calls' outputs and
 * states are compared bit for bit.
 * One JSON line per layout (also appended to FILE with --json FILE).
 *
 * Run: build/bench/bench_boundary [--json FILE]
 */
#include "harness.h"
#include "test_support.h"
#include "stridepack_conv.h"
#include "stridepack_kda.h"

#include <string.h>

enum { D = SP_KDA_HEAD_DIM };

typedef struct ctx {
    ts_k3 k;
    void *qkv, *proj, *g;
    sp_tensor views[5];
    void *ws; /* sp_pack workspace */
    size_t ws_bytes;
    sp_tensor packed[5];
    void *sep[5]; /* dense destinations of the separate copies (sep[3]: unused, g is dense) */
    void *limit_src, *limit_dst;
    size_t limit_bytes;
    sp_kda_args dense_args, strided_args;
    sp_kda_boundary *bd;
    /* The producer arms: the convolution into the qkv buffer (token-major)
     * or into sep[0..2] (split), each followed by the boundary. */
    sp_conv_args conv_tm, conv_split;
    sp_kda_args split_args; /* q, k, v dense (sep), g dense, beta strided */
    void *x, *conv_state, *weight;
} ctx;

static void check(sp_status s, const char *what) {
    if (s != SP_OK) {
        fprintf(stderr, "%s: %s (%s)\n", what, sp_status_string(s), sp_last_error());
        exit(2);
    }
}

static void arm_limit(void *p, cudaStream_t s) {
    ctx *c = p;
    BENCH_CU(cudaMemcpyAsync(c->limit_dst, c->limit_src, c->limit_bytes, cudaMemcpyDeviceToDevice, s));
}

static void arm_pack(void *p, cudaStream_t s) {
    ctx *c = p;
    check(sp_pack(c->views, 5, c->ws, c->ws_bytes, c->packed, NULL, s), "sp_pack");
}

static void arm_separate(void *p, cudaStream_t s) {
    ctx *c = p;
    const size_t P2 = (size_t)c->k.P * 2, T = (size_t)c->k.T;
    for (int i = 0; i < 3; i++)
        BENCH_CU(cudaMemcpy2DAsync(c->sep[i], P2, (char *)c->qkv + i * P2, 3 * P2, P2, T,
                                   cudaMemcpyDeviceToDevice, s));
    BENCH_CU(cudaMemcpy2DAsync(c->sep[4], (size_t)c->k.H * 2, (char *)c->proj + c->k.beta_col * 2,
                               (size_t)c->k.width * 2, (size_t)c->k.H * 2, T,
                               cudaMemcpyDeviceToDevice, s));
}

static void arm_prefill(void *p, cudaStream_t s) {
    check(sp_kda_prefill(&((ctx *)p)->dense_args, s), "sp_kda_prefill");
}

static void arm_boundary(void *p, cudaStream_t s) {
    ctx *c = p;
    check(sp_kda_boundary_run(c->bd, &c->strided_args, s), "sp_kda_boundary_run");
}

static void arm_layer_tokenmajor(void *p, cudaStream_t s) {
    ctx *c = p;
    check(sp_conv_prefill(&c->conv_tm, s), "sp_conv_prefill (token-major)");
    check(sp_kda_boundary_run(c->bd, &c->strided_args, s), "sp_kda_boundary_run");
}

static void arm_layer_split(void *p, cudaStream_t s) {
    ctx *c = p;
    check(sp_conv_prefill(&c->conv_split, s), "sp_conv_prefill (split)");
    check(sp_kda_boundary_run(c->bd, &c->split_args, s), "sp_kda_boundary_run");
}

/* The convolution's arguments over x [T, 3P], W = 4, SiLU, one sequence
 * (the KDA call's cu_seqlens and slot 0), token-major into qkv and split
 * into sep[0..2]. */
static void make_conv(ctx *c) {
    const int64_t T = c->k.T, P = c->k.P, C = 3 * P, W = 4, one = 1;
    const sp_device dev = sp_cuda(0);
    c->x = bench_malloc((size_t)(T * C) * 2);
    c->weight = bench_malloc((size_t)(C * W) * 4);
    c->conv_state = bench_malloc((size_t)(C * (W - 1)) * 2);
    bench_fill_bf16(c->x, (size_t)(T * C), -1, 1, 31);
    BENCH_CU(cudaMemset(c->conv_state, 0, (size_t)(C * (W - 1)) * 2));
    float *w = malloc((size_t)(C * W) * 4);
    if (!w) exit(2);
    for (int64_t i = 0; i < C * W; i++) w[i] = 0.25f - 0.05f * (float)(i % 11);
    BENCH_CU(cudaMemcpy(c->weight, w, (size_t)(C * W) * 4, cudaMemcpyHostToDevice));
    free(w);
    const int64_t xs[2] = {T, C}, wsh[2] = {C, W}, ssh[3] = {1, C, W - 1}, qs[2] = {T, P};
    sp_conv_args *a = &c->conv_tm;
    sp_conv_args_init(a);
    sp_tensor_dense(&a->x, c->x, SP_BF16, 2, xs, dev);
    sp_tensor_dense(&a->weight, c->weight, SP_F32, 2, wsh, dev);
    a->silu = 1;
    a->cu_seqlens = c->dense_args.cu_seqlens;
    sp_tensor_dense(&a->state, c->conv_state, SP_BF16, 3, ssh, dev);
    sp_tensor_dense(&a->state_indices, c->dense_args.state_indices.data, SP_I32, 1, &one, dev);
    c->conv_split = *a;
    sp_tensor_dense(&a->out, c->qkv, SP_BF16, 2, xs, dev);
    for (int i = 0; i < 3; i++) {
        sp_tensor *o = i == 0 ? &c->conv_split.q : i == 1 ? &c->conv_split.k : &c->conv_split.v;
        sp_tensor_dense(o, c->sep[i], SP_BF16, 2, qs, dev);
    }
    c->split_args = c->dense_args; /* q, k, v: sep (dense), g dense */
    c->split_args.beta = c->views[4];
}

/* Reset the two pools (conv and KDA state) to zeros, run one layer call. */
static void layer_once(ctx *c, bench_fn arm, cudaStream_t s) {
    const int64_t C = 3 * c->k.P;
    BENCH_CU(cudaMemsetAsync(c->conv_state, 0, (size_t)(C * 3) * 2, s));
    BENCH_CU(cudaMemsetAsync(c->dense_args.state.data, 0,
                             (size_t)(c->k.H * D * D) * 4, s));
    arm(c, s);
    BENCH_CU(cudaStreamSynchronize(s));
}

static int same_bytes(const void *a_dev, const void *b_host, size_t bytes) {
    char *a = malloc(bytes);
    if (!a) exit(2);
    BENCH_CU(cudaMemcpy(a, a_dev, bytes, cudaMemcpyDeviceToHost));
    int same = memcmp(a, b_host, bytes) == 0;
    free(a);
    return same;
}

/* The two producer layouts give the same layer output and final state. */
static int producers_match(ctx *c, cudaStream_t s) {
    const size_t ob = (size_t)(c->k.T * c->k.H * D) * 2, sb = (size_t)(c->k.H * D * D) * 4;
    char *o = malloc(ob), *st = malloc(sb);
    if (!o || !st) exit(2);
    layer_once(c, arm_layer_tokenmajor, s);
    BENCH_CU(cudaMemcpy(o, c->dense_args.o.data, ob, cudaMemcpyDeviceToHost));
    BENCH_CU(cudaMemcpy(st, c->dense_args.state.data, sb, cudaMemcpyDeviceToHost));
    bench_fill_random(c->dense_args.o.data, ob, 77); /* poison */
    layer_once(c, arm_layer_split, s);
    const int same = same_bytes(c->dense_args.o.data, o, ob) &&
                     same_bytes(c->dense_args.state.data, st, sb);
    free(o), free(st);
    return same;
}

/* The pack's dense q, k, v, beta equal the separate copies', bit for bit. */
static int pack_matches(ctx *c, cudaStream_t s) {
    arm_pack(c, s);
    arm_separate(c, s);
    BENCH_CU(cudaStreamSynchronize(s));
    const int which[4] = {0, 1, 2, 4};
    for (int i = 0; i < 4; i++) {
        size_t bytes = (size_t)c->k.T * (size_t)(which[i] == 4 ? c->k.H : c->k.P) * 2;
        char *a = malloc(bytes), *b = malloc(bytes);
        if (!a || !b) exit(2);
        BENCH_CU(cudaMemcpy(a, c->packed[which[i]].data, bytes, cudaMemcpyDeviceToHost));
        BENCH_CU(cudaMemcpy(b, c->sep[which[i]], bytes, cudaMemcpyDeviceToHost));
        int same = memcmp(a, b, bytes) == 0;
        free(a), free(b);
        if (!same) return 0;
    }
    return 1;
}

/* Args for one sequence of T tokens over dense inputs; state fp32, 1 slot. */
static void make_args(ctx *c, sp_kda_args *a) {
    const int64_t T = c->k.T, H = c->k.H, hd = H * D, one = 1, two = 2;
    const int64_t x4[4] = {1, T, H, D}, x3[3] = {1, T, H}, ss[4] = {1, H, D, D};
    const sp_device dev = sp_cuda(0);
    sp_kda_args_init(a);
    for (int i = 0; i < 5; i++)
        if (i != 3) {
            size_t n = (size_t)T * (size_t)(i == 4 ? H : H * D);
            c->sep[i] = bench_malloc(n * 2);
            bench_fill_random(c->sep[i], n * 2, 100 + (uint64_t)i); /* poison */
        }
    sp_tensor_dense(&a->q, c->sep[0], SP_BF16, 4, x4, dev);
    sp_tensor_dense(&a->k, c->sep[1], SP_BF16, 4, x4, dev);
    sp_tensor_dense(&a->v, c->sep[2], SP_BF16, 4, x4, dev);
    sp_tensor_dense(&a->g, c->g, SP_BF16, 4, x4, dev);
    sp_tensor_dense(&a->beta, c->sep[4], SP_BF16, 3, x3, dev);
    void *o = bench_malloc((size_t)T * (size_t)hd * 2), *st = bench_malloc((size_t)hd * D * 4);
    void *A = bench_malloc((size_t)H * 4), *B = bench_malloc((size_t)hd * 4);
    void *cu = bench_malloc(16), *idx = bench_malloc(4);
    BENCH_CU(cudaMemset(st, 0, (size_t)hd * D * 4));
    BENCH_CU(cudaMemset(A, 0, (size_t)H * 4));     /* exp(A_log) = 1 */
    BENCH_CU(cudaMemset(B, 0, (size_t)hd * 4));
    BENCH_CU(cudaMemset(idx, 0, 4));
    const int64_t cuh[2] = {0, T};
    BENCH_CU(cudaMemcpy(cu, cuh, 16, cudaMemcpyHostToDevice));
    sp_tensor_dense(&a->o, o, SP_BF16, 4, x4, dev);
    sp_tensor_dense(&a->state, st, SP_F32, 4, ss, dev);
    sp_tensor_dense(&a->A_log, A, SP_F32, 1, &H, dev);
    sp_tensor_dense(&a->dt_bias, B, SP_F32, 1, &hd, dev);
    sp_tensor_dense(&a->cu_seqlens, cu, SP_I64, 1, &two, dev);
    sp_tensor_dense(&a->state_indices, idx, SP_I32, 1, &one, dev);
    /* The workspace that lets the plan pick the two-pass kernel where
     * it is faster (the boundary owns one alike for small head counts). */
    check(sp_kda_prefill_workspace_bytes(a, &a->workspace_bytes), "sp_kda_prefill_workspace_bytes");
    a->workspace = a->workspace_bytes ? bench_malloc(a->workspace_bytes) : NULL;
}

static void free_args(sp_kda_args *a) {
    void *p[] = {a->o.data,          a->state.data,         a->A_log.data, a->dt_bias.data,
                 a->cu_seqlens.data, a->state_indices.data, a->workspace};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) BENCH_CU(cudaFree(p[i]));
}

static void run_layout(const char *layout, int64_t H, int kind, cudaStream_t s, FILE *out) {
    const int64_t T = 16384;
    ctx c;
    memset(&c, 0, sizeof c);
    ts_k3_init(&c.k, T, H, kind);
    c.qkv = bench_malloc(c.k.qkv_bytes);
    c.proj = bench_malloc(c.k.proj_bytes);
    c.g = bench_malloc(c.k.g_bytes);
    bench_fill_bf16(c.qkv, c.k.qkv_bytes / 2, -1, 1, 11);
    bench_fill_bf16(c.proj, c.k.proj_bytes / 2, -3, 3, 12);
    bench_fill_bf16(c.g, c.k.g_bytes / 2, -4, 1.5, 13);
    ts_k3_views(&c.k, c.qkv, c.proj, c.g, sp_cuda(0), c.views);
    check(sp_pack_workspace_bytes(c.views, 5, &c.ws_bytes), "sp_pack_workspace_bytes");
    c.ws = bench_malloc(c.ws_bytes);
    make_args(&c, &c.dense_args);
    c.strided_args = c.dense_args;
    c.strided_args.q = c.views[0];
    c.strided_args.k = c.views[1];
    c.strided_args.v = c.views[2];
    c.strided_args.g = c.views[3];
    c.strided_args.beta = c.views[4];
    check(sp_kda_boundary_create(&c.bd, sp_cuda(0), T, H), "sp_kda_boundary_create");

    /* Bytes the strided inputs move: each read once and written once. */
    const size_t moved = 2 * (size_t)T * (size_t)(3 * c.k.P + H) * 2;
    c.limit_bytes = moved / 2;
    c.limit_src = bench_malloc(c.limit_bytes);
    c.limit_dst = bench_malloc(c.limit_bytes);
    bench_fill_random(c.limit_src, c.limit_bytes, 21);
    BENCH_CU(cudaDeviceSynchronize());
    if (!pack_matches(&c, s)) {
        fprintf(stderr, "%s: pack output differs from the separate copies\n", layout);
        exit(1);
    }

    bench_fn fns[3] = {arm_limit, arm_pack, arm_separate};
    void *ctxs[3] = {&c, &c, &c};
    bench_stats st[3], pre, whole;
    bench_time_interleaved(fns, ctxs, 3, s, 10, 100, st);
    bench_time(arm_prefill, &c, s, 3, 50, &pre);
    bench_time(arm_boundary, &c, s, 3, 50, &whole);
    /* The producer in front; it overwrites qkv and sep[0..2], so it runs
     * after the arms above. */
    const int with_conv = kind == TS_K3_BETA_FA;
    bench_stats layer[2];
    int match = 0;
    if (with_conv) {
        make_conv(&c);
        match = producers_match(&c, s);
        if (!match) {
            fprintf(stderr, "%s: the two producer layouts give different layer outputs\n", layout);
            exit(1);
        }
        bench_fn lf[2] = {arm_layer_tokenmajor, arm_layer_split};
        void *lc[2] = {&c, &c};
        bench_time_interleaved(lf, lc, 2, s, 3, 30, layer);
    }

    bench_json j;
    bench_json_begin(&j);
    bench_json_str(&j, "bench", "kda_boundary");
    bench_json_str(&j, "layout", layout);
    bench_json_str(&j, "beta", ts_k3_beta_name(kind));
    bench_json_int(&j, "T", T);
    bench_json_int(&j, "H", H);
    bench_json_int(&j, "bytes_moved", (long long)moved);
    bench_json_num(&j, "limit_ms", st[0].median_ms);
    bench_json_num(&j, "pack_ms", st[1].median_ms);
    bench_json_num(&j, "separate_ms", st[2].median_ms);
    bench_json_num(&j, "separate_over_pack", st[2].median_ms / st[1].median_ms);
    bench_json_num(&j, "pack_gbps", bench_gbps((double)moved, st[1].median_ms));
    bench_json_num(&j, "limit_gbps", bench_gbps((double)moved, st[0].median_ms));
    sp_kda_kernel kernel = SP_KDA_KERNEL_AUTO;
    check(sp_kda_prefill_kernel(&c.dense_args, &kernel), "sp_kda_prefill_kernel");
    bench_json_str(&j, "prefill_kernel", sp_kda_kernel_name(kernel));
    bench_json_num(&j, "prefill_ms", pre.median_ms);
    bench_json_num(&j, "boundary_ms", whole.median_ms);
    bench_json_num(&j, "boundary_over_prefill", whole.median_ms / pre.median_ms);
    size_t copied = 0;
    check(sp_kda_boundary_last_copied(c.bd, &copied), "sp_kda_boundary_last_copied");
    bench_json_int(&j, "boundary_copied", (long long)copied);
    bench_json_num(&j, "pack_share", st[1].median_ms / whole.median_ms);
    bench_json_num(&j, "separate_share",
                   st[2].median_ms / (st[2].median_ms + pre.median_ms));
    if (with_conv) {
        bench_json_num(&j, "layer_conv_tokenmajor_ms", layer[0].median_ms);
        bench_json_num(&j, "layer_conv_split_ms", layer[1].median_ms);
        bench_json_num(&j, "layer_split_over_tokenmajor", layer[1].median_ms / layer[0].median_ms);
        bench_json_int(&j, "layer_outputs_bit_identical", match);
    }
    bench_json_emit(&j, out);

    check(sp_kda_boundary_destroy(c.bd), "sp_kda_boundary_destroy");
    free_args(&c.dense_args);
    void *bufs[] = {c.qkv,    c.proj,   c.g,      c.ws,         c.sep[0],      c.sep[1],
                    c.sep[2], c.sep[4], c.limit_src, c.limit_dst, c.x, c.weight, c.conv_state};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) BENCH_CU(cudaFree(bufs[i]));
}

int main(int argc, char **argv) {
    FILE *out = NULL;
    if (bench_json_arg(argc, argv, &out)) return 2;
    cudaStream_t s;
    BENCH_CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    run_layout("K3-TP1", 96, TS_K3_BETA_FA, s, out);
    run_layout("K3-TP8", 12, TS_K3_BETA_FA, s, out);
    run_layout("K3-TP1", 96, TS_K3_BETA_INPROJ, s, out);
    run_layout("K3-TP8", 12, TS_K3_BETA_INPROJ, s, out);
    BENCH_CU(cudaStreamDestroy(s));
    if (out) fclose(out);
    return 0;
}
