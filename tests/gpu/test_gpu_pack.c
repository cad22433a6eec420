/*
 * test_gpu_pack.c — sp_pack on CUDA tensors in the layouts it exists for:
 * the K3 inputs q, k, v (column slices of one [T, 3P] buffer), g (dense,
 * the first T rows of a possibly longer buffer) and beta (a column slice of
 * a [T, 128+H] or [T, 4P+128+H] projection), at [1, 16384, 96, 128], the
 * TP8 shard (H = 12), and short and tail token counts (1, 3, 77, 1000, 0).
 *
 * Each case checks the outputs against the host reference bit for bit, the
 * whole device arena (inputs, workspace slots, the gaps between them) byte
 * for byte, and how many launches ran: one when anything needs copying,
 * none otherwise. Launches are counted twice: by sp_copy_pass_count() and
 * by capturing the call into a CUDA graph and counting its kernel nodes.
 * The captured graph is then replayed after the inputs change in place, and
 * the outputs must follow the new contents.
 */
#include "check.h"
#include "cuda_ok.h"
#include "test_support.h"
#include "ts_mem.h"

#include <stdint.h>

static ts_arena A;

/* The views of one case, on the arena. */
typedef struct k3case {
    ts_k3 k;
    unsigned char *qkv, *proj, *g, *ws;
    size_t wsb;
    sp_tensor in[5], out[5];
    size_t expect_copied;
} k3case;

static void k3_make(k3case *c, int64_t T, int64_t H, int beta_kind, int64_t g_extra) {
    ts_k3_init(&c->k, T, H, beta_kind);
    c->k.g_rows = T + g_extra; /* g: the first T rows of a longer buffer */
    c->k.g_bytes = (size_t)c->k.g_rows * (size_t)c->k.P * 2;
    ts_arena_reset(&A);
    c->qkv = ts_arena_take(&A, c->k.qkv_bytes, 0);
    c->proj = ts_arena_take(&A, c->k.proj_bytes, 0);
    c->g = ts_arena_take(&A, c->k.g_bytes, 0);
    ts_k3_views(&c->k, c->qkv, c->proj, c->g, sp_cuda(0), c->in);
    CHECK_OK(sp_pack_workspace_bytes(c->in, 5, &c->wsb));
    c->ws = ts_arena_take(&A, c->wsb, 2); /* not 256-aligned: the library rounds up */
    c->expect_copied = 0;
    for (int i = 0; i < 5; i++) c->expect_copied += !sp_tensor_is_dense(&c->in[i]);
}

/* After a successful sp_pack: outputs are the dense inputs themselves or
 * dense, 256-aligned slots inside the workspace; the host image gets the
 * reference copy of each copied input. */
static void k3_expect(k3case *c, const char *what) {
    for (int i = 0; i < 5; i++) {
        const sp_tensor *in = &c->in[i], *out = &c->out[i];
        CHECKF(out->ndim == in->ndim && out->dtype == in->dtype &&
                   memcmp(out->shape, in->shape, sizeof(int64_t) * (size_t)in->ndim) == 0 &&
                   sp_tensor_is_dense(out),
               "%s: outputs[%d] is not a dense tensor of the input's shape", what, i);
        if (sp_tensor_is_dense(in)) {
            CHECKF(out->data == in->data, "%s: dense inputs[%d] was not returned as itself",
                   what, i);
            continue;
        }
        uintptr_t o = (uintptr_t)out->data, lo = (uintptr_t)c->ws;
        CHECKF(o % SP_PACK_ALIGN == 0 && o >= lo && o < lo + c->wsb,
               "%s: outputs[%d] at %p is not an aligned slot of the workspace", what, i,
               out->data);
        sp_tensor hi = ts_arena_on_image(&A, *in), ho = ts_arena_on_image(&A, *out);
        ts_ref_copy(&hi, &ho);
    }
}

/* One eager case: every byte of the arena and the launch count. */
static void k3_eager(int64_t T, int64_t H, int beta_kind, int64_t g_extra, ts_rng *r) {
    char what[96];
    snprintf(what, sizeof what, "K3 T=%lld H=%lld %s", (long long)T, (long long)H,
             ts_k3_beta_name(beta_kind));
    k3case c;
    k3_make(&c, T, H, beta_kind, g_extra);
    ts_arena_poison(&A, r);
    size_t copied = 99;
    uint64_t before = sp_copy_pass_count();
    sp_status st = sp_pack(c.in, 5, c.ws, c.wsb, c.out, &copied, NULL);
    uint64_t launches = sp_copy_pass_count() - before;
    CHECKF(st == SP_OK, "%s: %s (%s)", what, sp_status_string(st), sp_last_error());
    if (st != SP_OK) return;
    CHECKF(copied == c.expect_copied, "%s: %zu copied, expected %zu", what, copied,
           c.expect_copied);
    CHECKF(launches == (c.expect_copied > 0), "%s: %llu launches", what,
           (unsigned long long)launches);
    k3_expect(&c, what);
    long diff = ts_arena_first_diff(&A);
    CHECKF(diff < 0, "%s: arena byte %ld differs (qkv %p, proj %p, g %p, ws %p)", what, diff,
           (void *)c.qkv, (void *)c.proj, (void *)c.g, (void *)c.ws);
    printf("%s: %zu copied, %llu launch(es), %.1f MB checked\n", what, copied,
           (unsigned long long)launches, (double)A.used / 1e6);
}

/* Capture sp_pack of `in` into a graph; check the launch count both ways,
 * then replay `rounds` times, changing the input buffers in place between
 * replays. `bufs` are the device input buffers to refresh. */
static void capture_and_replay(const char *what, sp_tensor *in, int n, void *ws, size_t wsb,
                               size_t expect_copied, unsigned char **bufs, const size_t *sizes,
                               int nbufs, int rounds, ts_rng *r) {
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    sp_tensor out[8];
    size_t copied = 99;
    uint64_t before = sp_copy_pass_count();
    cudaGraph_t graph;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    sp_status st = sp_pack(in, (size_t)n, ws, wsb, out, &copied, (struct CUstream_st *)s);
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    uint64_t launches = sp_copy_pass_count() - before;
    CHECKF(st == SP_OK, "%s: capture: %s (%s)", what, sp_status_string(st), sp_last_error());
    CHECKF(copied == expect_copied && launches == (expect_copied > 0),
           "%s: capture: %zu copied, %llu launches", what, copied, (unsigned long long)launches);
    size_t nodes = 99;
    CUDA_OK(cudaGraphGetNodes(graph, NULL, &nodes));
    CHECKF(nodes == (expect_copied > 0 ? 1u : 0u), "%s: captured graph has %zu nodes", what,
           nodes);
    if (nodes == 1) {
        cudaGraphNode_t node;
        enum cudaGraphNodeType type;
        CUDA_OK(cudaGraphGetNodes(graph, &node, &nodes));
        CUDA_OK(cudaGraphNodeGetType(node, &type));
        CHECKF(type == cudaGraphNodeTypeKernel, "%s: the node is not a kernel (type %d)", what,
               (int)type);
    }
    if (st != SP_OK || nodes == 0) { /* nothing to replay: the outputs are the inputs */
        for (int i = 0; st == SP_OK && i < n; i++) CHECK(out[i].data == in[i].data);
        CUDA_OK(cudaGraphDestroy(graph));
        CUDA_OK(cudaStreamDestroy(s));
        return;
    }
    cudaGraphExec_t exec;
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    before = sp_copy_pass_count();
    for (int round = 0; round < rounds; round++) {
        if (round > 0) /* new contents, same addresses */
            for (int b = 0; b < nbufs; b++) {
                ts_fill_random(ts_arena_image(&A, bufs[b]), sizes[b], r);
                ts_arena_upload(&A, bufs[b], sizes[b]);
            }
        for (int i = 0; i < n; i++) {
            if (out[i].data == in[i].data) continue;
            sp_tensor hi = ts_arena_on_image(&A, in[i]), ho = ts_arena_on_image(&A, out[i]);
            ts_ref_copy(&hi, &ho);
        }
        CUDA_OK(cudaGraphLaunch(exec, s));
        CUDA_OK(cudaStreamSynchronize(s));
        long diff = ts_arena_first_diff(&A);
        CHECKF(diff < 0, "%s: replay %d: arena byte %ld differs", what, round, diff);
    }
    CHECK(sp_copy_pass_count() == before); /* replays do not go through the library */
    printf("%s: graph of %zu node(s), %d replays checked\n", what, nodes, rounds);
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaStreamDestroy(s));
}

static void k3_graph(int64_t T, int64_t H, int beta_kind, ts_rng *r) {
    char what[96];
    snprintf(what, sizeof what, "graph K3 T=%lld H=%lld %s", (long long)T, (long long)H,
             ts_k3_beta_name(beta_kind));
    k3case c;
    k3_make(&c, T, H, beta_kind, 0);
    ts_arena_poison(&A, r);
    unsigned char *bufs[3] = {c.qkv, c.proj, c.g};
    size_t sizes[3] = {c.k.qkv_bytes, c.k.proj_bytes, c.k.g_bytes};
    capture_and_replay(what, c.in, 5, c.ws, c.wsb, c.expect_copied, bufs, sizes, 3, 3, r);
}

/* q, k, v, g dense in buffers of their own; beta strided (one copy) or
 * dense too (no copy at all). */
static void dense_qkv(int64_t T, int64_t H, int beta_dense, ts_rng *r) {
    const int64_t P = H * 128, W = 128 + H;
    const size_t bytes4 = (size_t)(T * P) * 2;
    ts_arena_reset(&A);
    unsigned char *bufs[5];
    size_t sizes[5];
    sp_tensor in[5];
    int64_t shape4[4] = {1, T, H, 128}, shape3[3] = {1, T, H}, st3[3] = {T * W, W, 1};
    for (int i = 0; i < 4; i++) {
        bufs[i] = ts_arena_take(&A, bytes4, 0);
        sizes[i] = bytes4;
        CHECK_OK(sp_tensor_dense(&in[i], bufs[i], SP_BF16, 4, shape4, sp_cuda(0)));
    }
    if (beta_dense) {
        sizes[4] = (size_t)(T * H) * 2;
        bufs[4] = ts_arena_take(&A, sizes[4], 0);
        CHECK_OK(sp_tensor_dense(&in[4], bufs[4], SP_BF16, 3, shape3, sp_cuda(0)));
    } else {
        sizes[4] = (size_t)(T * W) * 2;
        bufs[4] = ts_arena_take(&A, sizes[4], 0);
        CHECK_OK(sp_tensor_view(&in[4], bufs[4], 128, SP_BF16, 3, shape3, st3, sp_cuda(0)));
    }
    size_t wsb = 0;
    CHECK_OK(sp_pack_workspace_bytes(in, 5, &wsb));
    CHECK(beta_dense ? wsb == 0 : wsb > 0);
    unsigned char *ws = wsb ? ts_arena_take(&A, wsb, 0) : NULL;
    ts_arena_poison(&A, r);
    char what[96];
    snprintf(what, sizeof what, "dense q,k,v,g, %s beta, T=%lld", beta_dense ? "dense" : "strided",
             (long long)T);
    /* Eagerly first: one launch (or none), right bytes. */
    sp_tensor out[5];
    size_t copied = 99;
    uint64_t before = sp_copy_pass_count();
    CHECK_OK(sp_pack(in, 5, ws, wsb, out, &copied, NULL));
    CHECKF(copied == (beta_dense ? 0u : 1u) &&
               sp_copy_pass_count() - before == (beta_dense ? 0u : 1u),
           "%s: %zu copied, %llu launches", what, copied,
           (unsigned long long)(sp_copy_pass_count() - before));
    for (int i = 0; i < 4; i++) CHECK(out[i].data == in[i].data);
    if (!beta_dense) {
        sp_tensor hi = ts_arena_on_image(&A, in[4]), ho = ts_arena_on_image(&A, out[4]);
        ts_ref_copy(&hi, &ho);
    }
    CHECKF(ts_arena_first_diff(&A) < 0, "%s: arena differs", what);
    capture_and_replay(what, in, 5, ws, wsb, beta_dense ? 0 : 1, bufs, sizes, 5, 2, r);
}

int main(void) {
    const ts_mem *m = ts_mem_or_skip("cuda");
    ts_rng r;
    ts_rng_seed(&r, 0x5ac4ull);
    const int quick = ts_test_small();
    const int64_t T_big = quick ? 2048 : 16384;

    /* The largest case (TP1 with the input-projection beta) sizes the arena. */
    ts_k3 big;
    ts_k3_init(&big, T_big, 96, TS_K3_BETA_INPROJ);
    ts_arena_init(&A, m, big.qkv_bytes + big.proj_bytes + (big.g_bytes + 64 * big.P * 2) +
                       big.dense_bytes + 64 * 1024);

    for (int kind = 0; kind < 2; kind++) {
        k3_eager(T_big, 96, kind, 0, &r); /* k3_tp1 */
        k3_eager(T_big, 12, kind, 5, &r); /* k3_tp8 */
    }
    static const int64_t tails[] = {1, 3, 77, 1000, 0};
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
        k3_eager(tails[i], 96, (int)(i % 2), 3, &r);
        k3_eager(tails[i], 12, (int)((i + 1) % 2), 0, &r);
    }
    k3_graph(quick ? 1000 : T_big, 12, TS_K3_BETA_FA, &r);
    k3_graph(77, 96, TS_K3_BETA_INPROJ, &r);
    k3_graph(1, 96, TS_K3_BETA_FA, &r); /* T = 1: every input is dense: no node */
    dense_qkv(quick ? 100 : 1000, 96, 0, &r);
    dense_qkv(quick ? 100 : 1000, 96, 1, &r);
    ts_arena_free(&A);
    return sp_test_finish("test_gpu_pack");
}
