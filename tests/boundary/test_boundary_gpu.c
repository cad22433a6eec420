/*
 * test_boundary_gpu.c — the KDA input boundary on the GPU, at the real K3
 * layout [1, 16384, 96, 128] with beta from both projection widths:
 * outputs, final states and checkpoints bit-identical to sp_kda_prefill on
 * dense copies made separately (cudaMemcpy2D per tensor), read in place by
 * the prefill and by the boundary without a pack; q, k, v shifted off
 * 16-byte alignment packed in one launch; launches counted with
 * sp_copy_pass_count() and with the node count of captured graphs;
 * dense q, k, v with strided beta, all dense (no copy either); short
 * and tail shapes, T = 1, T = 0; graph capture then replay with changed
 * inputs, bit-equal to eager; the capture rules enforced; bad inputs with
 * their errors and nothing written. SP_TEST_SMALL=1 shrinks it to T = 300,
 * H = 4 for compute-sanitizer.
 */
#include "check.h"
#include "k3_problem.h"

#include <string.h>

#ifdef SP_HAVE_CUDA
#include "kda_dev.h"

static cudaStream_t S; /* the one stream of warm-up, capture and replay */

/* q, k, v this many elements past their K3 columns: 8-byte aligned rows,
 * which the prefill cannot read in place (the boundary packs them). */
#define SHIFT 4

/* K3 buffers on the device, filled from the host. */
typedef struct dk3 {
    ts_k3 k;
    void *qkv, *proj, *g;
    sp_tensor views[5];
} dk3;

static void dk3_fill(dk3 *x, ts_rng *r) {
    k3_bufs h; /* host staging with the same layout */
    h.k = x->k;
    h.qkv = k3_alloc(x->k.qkv_bytes);
    h.proj = k3_alloc(x->k.proj_bytes);
    h.g = k3_alloc(x->k.g_bytes);
    k3_fill(&h, r);
    CUDA_OK(cudaMemcpy(x->qkv, h.qkv, x->k.qkv_bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(x->proj, h.proj, x->k.proj_bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(x->g, h.g, x->k.g_bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaDeviceSynchronize()); /* before any kernel on the non-blocking S */
    k3_free(&h);
}

static void dk3_make(dk3 *x, int64_t T, int64_t H, int kind, ts_rng *r) {
    ts_k3_init(&x->k, T, H, kind);
    CUDA_OK(cudaMalloc(&x->qkv, x->k.qkv_bytes + 256));
    CUDA_OK(cudaMalloc(&x->proj, x->k.proj_bytes + 256));
    CUDA_OK(cudaMalloc(&x->g, x->k.g_bytes + 256));
    dk3_fill(x, r);
    ts_k3_views(&x->k, x->qkv, x->proj, x->g, sp_cuda(0), x->views);
}

/* x's views with q, k, v shifted by SHIFT elements. */
static void shifted_views(const dk3 *x, sp_tensor out[5]) {
    memcpy(out, x->views, 5 * sizeof *out);
    for (int i = 0; i < 3; i++) out[i].data = (uint16_t *)out[i].data + SHIFT;
}

static void dk3_free(dk3 *x) {
    CUDA_OK(cudaFree(x->qkv));
    CUDA_OK(cudaFree(x->proj));
    CUDA_OK(cudaFree(x->g));
}

/* Dense copies made without sp_pack: one cudaMemcpy2D per tensor; q, k, v
 * from `shift` elements past their columns. */
static void dense_copies(const dk3 *x, void *const dev[KB_COUNT], int shift) {
    const ts_k3 *k = &x->k;
    const size_t P2 = (size_t)k->P * 2, T = (size_t)k->T;
    if (T == 0) return;
    for (int i = 0; i < 3; i++)
        CUDA_OK(cudaMemcpy2D(dev[KB_Q + i], P2, (char *)x->qkv + i * P2 + 2 * shift, 3 * P2, P2,
                             T, cudaMemcpyDeviceToDevice));
    CUDA_OK(cudaMemcpy(dev[KB_G], x->g, T * P2, cudaMemcpyDeviceToDevice));
    CUDA_OK(cudaMemcpy2D(dev[KB_BETA], (size_t)k->H * 2, (char *)x->proj + k->beta_col * 2,
                         (size_t)k->width * 2, (size_t)k->H * 2, T, cudaMemcpyDeviceToDevice));
    CUDA_OK(cudaDeviceSynchronize());
}

/* Device buffers for a problem; q..beta allocated only (dense_copies fills). */
static void dev_alloc(const kda_problem *p, void *dev[KB_COUNT]) {
    kd_alloc(p, p->host, KB_BETA + 1, dev);
}

/* Outputs back to their initial (poisoned) bytes. The legacy-stream copies
 * do not order against the non-blocking S: synchronize on both sides. */
static void reset_outputs(const kda_problem *p, void *const dev[KB_COUNT]) {
    CUDA_OK(cudaDeviceSynchronize());
    for (int b = KB_O; b < KB_COUNT; b++)
        CUDA_OK(cudaMemcpy(dev[b], p->host[b], p->bytes[b], cudaMemcpyHostToDevice));
    CUDA_OK(cudaDeviceSynchronize());
}

typedef struct outs {
    void *b[KB_COUNT];
} outs;

static void download(const kda_problem *p, void *const dev[KB_COUNT], outs *o) {
    CUDA_OK(cudaDeviceSynchronize());
    for (int b = 0; b < KB_COUNT; b++) {
        o->b[b] = NULL;
        if (b < KB_O) continue;
        o->b[b] = malloc(p->bytes[b] ? p->bytes[b] : 1);
        if (!o->b[b]) abort();
        CUDA_OK(cudaMemcpy(o->b[b], dev[b], p->bytes[b], cudaMemcpyDeviceToHost));
    }
}

static int equal(const kda_problem *p, const outs *x, void *const y[KB_COUNT]) {
    return kp_outputs_equal(p, x->b, y);
}

static void with_views(sp_kda_args *a, const sp_tensor v[5], int beta_only) {
    if (!beta_only) {
        a->q = v[0];
        a->k = v[1];
        a->v = v[2];
        a->g = v[3];
    }
    a->beta = v[4];
}

static size_t graph_nodes(cudaGraph_t g) {
    size_t n = 0;
    CUDA_OK(cudaGraphGetNodes(g, NULL, &n));
    return n;
}

/* Boundary run with its launch count: copy passes must be `passes`. */
static void run_counted(sp_kda_boundary *bd, const sp_kda_args *a, uint64_t passes,
                        size_t copied, const char *what) {
    const uint64_t before = sp_copy_pass_count();
    sp_status s = sp_kda_boundary_run(bd, a, S);
    CHECKF(s == SP_OK, "%s: %s (%s)", what, sp_status_string(s), sp_last_error());
    const uint64_t got = sp_copy_pass_count() - before;
    size_t n = 99;
    CHECK_OK(sp_kda_boundary_last_copied(bd, &n));
    CHECKF(got == passes && n == copied, "%s: %llu pack launches, %zu copied; want %llu, %zu",
           what, (unsigned long long)got, n, (unsigned long long)passes, copied);
}

/* Capture one boundary run on `st`; returns its status, the graph's nodes. */
static sp_status capture(sp_kda_boundary *bd, const sp_kda_args *a, cudaStream_t st,
                         cudaGraph_t *graph, size_t *nodes) {
    CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    sp_status s = sp_kda_boundary_run(bd, a, st);
    CUDA_OK(cudaStreamEndCapture(st, graph));
    *nodes = graph_nodes(*graph);
    return s;
}

/* The K3 layout end to end, including the graph path. */
static void k3_case(sp_kda_boundary *bd, int32_t kernel, int64_t T, int64_t H, int kind,
                    sp_dtype sdt, int64_t interval, int graph, uint64_t seed) {
    ts_rng r;
    ts_rng_seed(&r, seed);
    int64_t lens[8];
    const int64_t parts[7] = {1, 63, 1000, 2048, 4000, 4096, 3000};
    const int64_t small[7] = {1, 63, 64, 65, 50, 30, 20};
    int64_t sum = 0;
    for (int i = 0; i < 7; i++) sum += lens[i] = T >= 16384 ? parts[i] : small[i];
    lens[7] = T - sum;
    kda_problem p;
    kp_make_ex(&p, 8, lens, 0, H, sdt, SP_KDA_GATE_LOWER_BOUND, interval, seed, 0);
    p.kernel = kernel;
    dk3 x;
    dk3_make(&x, T, H, kind, &r);
    void *dev[KB_COUNT];
    dev_alloc(&p, dev);
    dense_copies(&x, dev, 0);
    const char *name = ts_k3_beta_name(kind);

    /* The dense path: the expectation. It gets a workspace of its own, as
     * the boundary runs below use the boundary's (owned for small head
     * counts): the two-pass kernel needs one, and AUTO then chooses alike. */
    sp_kda_args dense;
    kp_args(&p, dev, sp_cuda(0), &dense);
    void *ws = NULL;
    size_t ws_bytes = 0;
    if (kernel == SP_KDA_KERNEL_CHUNKED_TWO_PASS ||
        (kernel == SP_KDA_KERNEL_AUTO && H <= 32)) {
        CHECK_OK(sp_kda_prefill_workspace_bytes(&dense, &ws_bytes));
        CUDA_OK(cudaMalloc(&ws, ws_bytes));
    }
    dense.workspace = ws;
    dense.workspace_bytes = ws_bytes;
    CHECK_OK(sp_kda_prefill(&dense, S));
    dense.workspace = NULL;
    dense.workspace_bytes = 0;
    outs want;
    download(&p, dev, &want);
    CHECK(!equal(&p, &want, p.host));

    /* The K3 views are read in place: by the prefill itself, and by the
     * boundary without a pack. */
    sp_kda_args a = dense;
    with_views(&a, x.views, 0);
    reset_outputs(&p, dev);
    a.workspace = ws;
    a.workspace_bytes = ws_bytes;
    CHECK_OK(sp_kda_prefill(&a, S));
    a.workspace = NULL;
    a.workspace_bytes = 0;
    outs got;
    download(&p, dev, &got);
    CHECKF(equal(&p, &got, want.b), "%s: the prefill on K3 views differs from dense", name);
    kp_free_copy(got.b);
    reset_outputs(&p, dev);
    run_counted(bd, &a, 0, 0, name);
    download(&p, dev, &got);
    CHECKF(equal(&p, &got, want.b), "%s: strided K3 differs from the dense prefill", name);
    kp_free_copy(got.b);

    /* Only beta strided, and all dense: no launch but the prefill. */
    sp_kda_args b1 = dense;
    with_views(&b1, x.views, 1);
    reset_outputs(&p, dev);
    run_counted(bd, &b1, 0, 0, "beta only");
    download(&p, dev, &got);
    CHECK(equal(&p, &got, want.b));
    kp_free_copy(got.b);
    reset_outputs(&p, dev);
    run_counted(bd, &dense, 0, 0, "all dense");
    download(&p, dev, &got);
    CHECK(equal(&p, &got, want.b));
    kp_free_copy(got.b);

    if (graph) {
        /* All dense, warmed up just above, and the K3 views: the graph is
         * the prefill alone. */
        cudaGraph_t gd;
        size_t nodes = 0;
        CHECK_OK(capture(bd, &dense, S, &gd, &nodes));
        const size_t prefill_nodes = kernel == SP_KDA_KERNEL_CHUNKED_TWO_PASS ? 2 : 1;
        CHECKF(nodes == prefill_nodes, "all-dense graph has %zu nodes, want %zu (prefill)", nodes,
               prefill_nodes);
        CUDA_OK(cudaGraphDestroy(gd));
        run_counted(bd, &a, 0, 0, "K3 warm-up");
        CHECK_OK(capture(bd, &a, S, &gd, &nodes));
        CHECKF(nodes == prefill_nodes, "K3-view graph has %zu nodes, want %zu (prefill)", nodes,
               prefill_nodes);
        CUDA_OK(cudaGraphDestroy(gd));

        /* q, k, v shifted off 16-byte alignment: packed (one launch, three
         * copies), bit-equal to the prefill on their dense copies. */
        kp_free_copy(want.b);
        dense_copies(&x, dev, SHIFT);
        reset_outputs(&p, dev);
        dense.workspace = ws;
        dense.workspace_bytes = ws_bytes;
        CHECK_OK(sp_kda_prefill(&dense, S));
        dense.workspace = NULL;
        dense.workspace_bytes = 0;
        download(&p, dev, &want);
        sp_tensor sv[5];
        shifted_views(&x, sv);
        with_views(&a, sv, 0);
        reset_outputs(&p, dev);
        run_counted(bd, &a, 1, 3, "shifted q, k, v");
        download(&p, dev, &got);
        CHECKF(equal(&p, &got, want.b), "%s: shifted views differ from their dense copies", name);
        kp_free_copy(got.b);
        CHECK_STATUS(sp_kda_prefill(&a, S), SP_ERR_INVALID_ARGUMENT);

        /* Warm up with the shifted views, capture, replay on new contents. */
        reset_outputs(&p, dev);
        run_counted(bd, &a, 1, 3, "warm-up");
        reset_outputs(&p, dev);
        cudaGraph_t g;
        CHECK_OK(capture(bd, &a, S, &g, &nodes));
        CHECKF(nodes == 1 + prefill_nodes, "graph has %zu nodes, want %zu (pack + prefill)", nodes,
               1 + prefill_nodes);
        cudaGraphExec_t ge;
        CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
        outs before_capture; /* capture ran nothing: outputs still as reset */
        download(&p, dev, &before_capture);
        CHECK(equal(&p, &before_capture, p.host));
        kp_free_copy(before_capture.b);

        dk3_fill(&x, &r); /* new contents, same addresses */
        reset_outputs(&p, dev);
        CUDA_OK(cudaGraphLaunch(ge, S));
        outs replay;
        download(&p, dev, &replay);
        reset_outputs(&p, dev);
        run_counted(bd, &a, 1, 3, "eager after replay");
        outs eager;
        download(&p, dev, &eager);
        CHECKF(equal(&p, &replay, eager.b), "%s: graph replay differs from eager", name);
        CHECKF(!equal(&p, &replay, want.b), "%s: replay did not see the new inputs", name);
        reset_outputs(&p, dev);
        CUDA_OK(cudaGraphLaunch(ge, S));
        outs again;
        download(&p, dev, &again);
        CHECK(equal(&p, &again, replay.b));
        kp_free_copy(replay.b);
        kp_free_copy(eager.b);
        kp_free_copy(again.b);
        CUDA_OK(cudaGraphExecDestroy(ge));
        CUDA_OK(cudaGraphDestroy(g));

        /* The rules: a capture must repeat the warm-up's T, views, stream. */
        reset_outputs(&p, dev);
        sp_kda_args t1 = a;
        sp_tensor *tt[6] = {&t1.q, &t1.k, &t1.v, &t1.g, &t1.o, &t1.beta};
        for (int i = 0; i < 6; i++) tt[i]->shape[1] -= 1;
        CHECK_STATUS(capture(bd, &t1, S, &g, &nodes), SP_ERR_INVALID_ARGUMENT);
        CHECK(nodes == 0);
        CUDA_OK(cudaGraphDestroy(g));
        sp_kda_args moved = a;
        moved.beta.data = (char *)moved.beta.data + 2;
        CHECK_STATUS(capture(bd, &moved, S, &g, &nodes), SP_ERR_INVALID_ARGUMENT);
        CHECK(nodes == 0);
        CUDA_OK(cudaGraphDestroy(g));
        cudaStream_t other;
        CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
        CHECK_STATUS(capture(bd, &a, other, &g, &nodes), SP_ERR_INVALID_ARGUMENT);
        CHECK(nodes == 0);
        CUDA_OK(cudaGraphDestroy(g));
        CUDA_OK(cudaStreamDestroy(other));
        sp_kda_boundary *cold;
        CHECK_OK(sp_kda_boundary_create(&cold, sp_cuda(0), T, H));
        CHECK_STATUS(capture(cold, &a, S, &g, &nodes), SP_ERR_INVALID_ARGUMENT);
        CHECK(nodes == 0);
        CUDA_OK(cudaGraphDestroy(g));
        CHECK_OK(sp_kda_boundary_destroy(cold));
        outs after;
        download(&p, dev, &after);
        CHECK(equal(&p, &after, p.host)); /* refused captures wrote nothing */
        kp_free_copy(after.b);
    }
    kp_free_copy(want.b);
    CUDA_OK(cudaFree(ws));
    kd_free(dev);
    dk3_free(&x);
    kp_free(&p);
}

/* Small shapes through the same boundary: short, tail, one token, none. */
static void small_case(sp_kda_boundary *bd, int64_t T, int64_t H, int kind, uint64_t seed) {
    ts_rng r;
    ts_rng_seed(&r, seed);
    kda_problem p;
    kp_make_ex(&p, 1, &T, 0, H, SP_BF16, SP_KDA_GATE_SOFTPLUS, 16, seed, 0);
    dk3 x;
    dk3_make(&x, T, H, kind, &r);
    void *dev[KB_COUNT];
    dev_alloc(&p, dev);
    dense_copies(&x, dev, 0);
    sp_kda_args dense;
    kp_args(&p, dev, sp_cuda(0), &dense);
    CHECK_OK(sp_kda_prefill(&dense, S));
    outs want, got;
    download(&p, dev, &want);
    sp_kda_args a = dense;
    with_views(&a, x.views, 0);
    reset_outputs(&p, dev);
    run_counted(bd, &a, 0, 0, "small"); /* K3 views: read in place */
    download(&p, dev, &got);
    CHECKF(equal(&p, &got, want.b), "T %lld: differs from the dense prefill", (long long)T);
    if (T > 0) CHECK(!equal(&p, &got, p.host));
    kp_free_copy(want.b);
    kp_free_copy(got.b);
    kd_free(dev);
    dk3_free(&x);
    kp_free(&p);
}

static void bad_input_cases(sp_kda_boundary *bd, int64_t H) {
    const int64_t T = 150, lens[2] = {100, 50};
    ts_rng r;
    ts_rng_seed(&r, 5);
    kda_problem p;
    kp_make_ex(&p, 2, lens, 0, H, SP_F32, SP_KDA_GATE_LOWER_BOUND, 32, 5, 0);
    dk3 x;
    dk3_make(&x, T, H, TS_K3_BETA_INPROJ, &r);
    void *dev[KB_COUNT];
    dev_alloc(&p, dev);
    sp_kda_boundary *small;
    CHECK_OK(sp_kda_boundary_create(&small, sp_cuda(0), T - 1, H));
    for (int c = 0; c < 6; c++) {
        sp_kda_args a;
        kp_args(&p, dev, sp_cuda(0), &a);
        with_views(&a, x.views, 0);
        sp_kda_boundary *use = bd;
        sp_status want = SP_ERR_INVALID_ARGUMENT;
        const char *what = "";
        switch (c) {
        case 0: what = "wrong dtype"; a.g.dtype = SP_F16; want = SP_ERR_DTYPE_MISMATCH; break;
        case 1: what = "mismatched shapes"; a.v.shape[2] -= 1; want = SP_ERR_SHAPE_MISMATCH; break;
        case 2:
            what = "misaligned beta";
            a.beta.data = (char *)a.beta.data + 1;
            want = SP_ERR_MISALIGNED;
            break;
        case 3: what = "T over capacity"; use = small; want = SP_ERR_CAPACITY; break;
        case 4: what = "bad state pitch"; a.state.strides[0] = H * 128 * 128 - 128; break;
        case 5: what = "host cu_seqlens"; a.cu_seqlens.device = sp_cpu(); want = SP_ERR_DEVICE_MISMATCH; break;
        }
        const uint64_t before = sp_copy_pass_count();
        sp_status s = sp_kda_boundary_run(use, &a, S);
        CHECKF(s == want, "%s: got %s, want %s (%s)", what, sp_status_string(s),
               sp_status_string(want), sp_last_error());
        CHECKF(sp_copy_pass_count() == before, "%s: a pack launch ran", what);
        outs o;
        download(&p, dev, &o);
        CHECKF(equal(&p, &o, p.host), "%s: an output was written", what);
        kp_free_copy(o.b);
    }
    CHECK_OK(sp_kda_boundary_destroy(small));
    kd_free(dev);
    dk3_free(&x);
    kp_free(&p);
}

int main(void) {
    if (!sp_cuda_available()) SP_SKIP("no usable CUDA device");
    CUDA_OK(cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking));
    const int small = ts_test_small();
    const int64_t T = small ? 300 : 16384, H = small ? 4 : 96;
    sp_kda_boundary *bd;
    CHECK_OK(sp_kda_boundary_create(&bd, sp_cuda(0), T, H));
    /* Each kernel, forced, through the boundary (packed bit-equal to dense,
     * and the graph path), then the dispatcher's own choice. */
    const int32_t R = SP_KDA_KERNEL_RECURRENT, CH = SP_KDA_KERNEL_CHUNKED;
    k3_case(bd, CH, T, H, TS_K3_BETA_FA, SP_F32, small ? 32 : 1024, 1, 1);
    k3_case(bd, R, T, H, TS_K3_BETA_FA, SP_F32, small ? 32 : 1024, 1, 1);
    k3_case(bd, SP_KDA_KERNEL_AUTO, T, H, TS_K3_BETA_INPROJ, SP_BF16, small ? 64 : 2048,
            small ? 0 : 1, 2);
    /* At 8-way tensor parallelism (12 heads) the boundary owns the two-pass
     * kernel's workspace too. */
    const int64_t h8 = small ? 2 : 12;
    sp_kda_boundary *b8;
    CHECK_OK(sp_kda_boundary_create(&b8, sp_cuda(0), T, h8));
    k3_case(b8, SP_KDA_KERNEL_CHUNKED_TWO_PASS, T, h8, TS_K3_BETA_FA, SP_F32, small ? 32 : 1024,
            1, 6);
    CHECK_OK(sp_kda_boundary_destroy(b8));
    const int64_t sh = small ? 2 : 8;
    small_case(bd, 77, sh, TS_K3_BETA_FA, 3);
    small_case(bd, 1, sh, TS_K3_BETA_INPROJ, 4);
    small_case(bd, 0, sh, TS_K3_BETA_FA, 5);
    bad_input_cases(bd, sh);
    CHECK_OK(sp_kda_boundary_destroy(bd));
    CUDA_OK(cudaStreamDestroy(S));
    return sp_test_finish("test_boundary_gpu");
}

#else

int main(void) { SP_SKIP("built without CUDA"); }

#endif
