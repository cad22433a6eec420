/*
 * test_boundary.c — the KDA input boundary, one body over the memory
 * backends (ts_mem.h): built as test_boundary (host memory, the CPU
 * prefill) and test_boundary_gpu (CUDA device memory; exits 77 without a
 * usable device).
 *
 * On every backend: K3-layout strided inputs (both beta widths, both state
 * dtypes, checkpoints) give outputs, states and checkpoints bit-identical
 * to sp_kda_prefill on dense copies made element by element, and so does
 * sp_kda_prefill on the views it reads in place; copy passes are counted
 * with sp_copy_pass_count() (none for the K3 layouts, one when q, k, v are
 * shifted off 16-byte alignment); short and tail shapes, T = 1, T = 0; bad
 * inputs each with their error, nothing written and no copy pass. On the
 * host only: creation's own errors and the in-place rule on hand-made
 * views. On the device only, at the real K3 layout [1, 16384, 96, 128]
 * (SP_TEST_SMALL=1: T = 300, H = 4, for compute-sanitizer) with each
 * kernel forced and AUTO: the same identities against dense copies made by
 * cudaMemcpy2D, launches counted by the node count of captured graphs,
 * graph capture then replay with changed inputs bit-equal to eager, and the
 * capture rules enforced.
 */
#include "check.h"
#include "k3_problem.h"

#include <string.h>

#ifdef TS_MEM_IS_CUDA
#include "kda_dev.h"
#endif

enum { CAP_T = 256, CAP_H = 4 };

static const ts_mem *M; /* the backend of this build */

static int on_device(void) { return M->device.type == SP_DEVICE_CUDA; }

/* The other kind of device than the backend's. */
static sp_device other_device(void) { return on_device() ? sp_cpu() : sp_cuda(0); }

/* Which inputs the boundary sees strided (the others: the dense copies);
 * SHIFTED: all, with q, k, v 4 elements past their K3 columns. */
/* STRIDED_SHIFTED: q, k, v moved 4 elements off their rows' alignment (the
 * boundary packs them); STRIDED_SHIFTED_G: g's heads 132 elements apart too
 * (a dense g moved is still read in place). */
enum { STRIDED_ALL = 0, STRIDED_BETA = 1, STRIDED_NONE = 2, STRIDED_SHIFTED = 3,
       STRIDED_SHIFTED_G = 4 };

/* The header's rule, written independently: q, k, v, g are read in place
 * when dense or made of 16-byte aligned rows of 128 contiguous channels. */
static int read_in_place(const sp_tensor *x) {
    if (sp_tensor_is_dense(x)) return 1;
    return x->strides[3] == 1 && (x->shape[1] <= 1 || x->strides[1] % 8 == 0) &&
           (x->shape[2] <= 1 || x->strides[2] % 8 == 0) && (uintptr_t)x->data % 16 == 0;
}

/* The prefill on the backend with args a, given a workspace of the size it
 * asks for (so that AUTO chooses as in a boundary that owns one). */
static sp_status prefill_with_workspace(sp_kda_args *a) {
    size_t bytes = 0;
    CHECK_OK(sp_kda_prefill_workspace_bytes(a, &bytes));
    void *ws = bytes ? M->alloc(bytes) : NULL;
    a->workspace = ws;
    a->workspace_bytes = bytes;
    const sp_status s = sp_kda_prefill(a, NULL);
    a->workspace = NULL;
    a->workspace_bytes = 0;
    if (ws) M->release(ws);
    return s;
}

/* The backend's outputs, as host copies (kp_free_copy). */
static void outputs(const kda_problem *p, void *const buf[KB_COUNT], void *out[KB_COUNT]) {
    kp_copy(p, out);
    kp_download(M, p, buf, out);
}

/* gate and beta_form: the call's forms (SP_KDA_GATE_LOG_DECAY: the K3 g
 * buffer made <= 0; SP_KDA_BETA_ACTIVATED: the beta buffer made >= 0). */
static void k3_gate_case(sp_kda_boundary *bd, int64_t T, int64_t H, int beta_kind, sp_dtype sdt,
                         int64_t interval, int which, int32_t gate, int32_t beta_form,
                         uint64_t seed) {
    ts_rng r;
    ts_rng_seed(&r, seed);
    /* Sequences: T split into up to three uneven parts. */
    int64_t lens[3] = {T, 0, 0};
    int N = 1;
    if (T >= 80) {
        lens[0] = 1;
        lens[1] = 65;
        lens[2] = T - 66;
        N = 3;
    }
    kda_problem p;
    kp_make_ex(&p, N, lens, 0, H, sdt, gate == SP_KDA_GATE_LOG_DECAY ? 0 : gate, interval, seed,
               0);
    p.gate = gate;
    p.beta_form = beta_form;
    k3_bufs h3, k3;
    k3_make(&h3, T, H, beta_kind, &r);
    if (gate == SP_KDA_GATE_LOG_DECAY) /* a log-decay: every value <= 0 */
        for (size_t i = 0; i < h3.k.g_bytes / 2; i++) ((uint16_t *)h3.g)[i] |= 0x8000;
    if (beta_form == SP_KDA_BETA_ACTIVATED) /* an activated beta: >= 0 */
        for (size_t i = 0; i < h3.k.proj_bytes / 2; i++) ((uint16_t *)h3.proj)[i] &= 0x7fff;
    k3_dense_copies(&h3, &p);
    k3_upload(M, &h3, &k3);
    const int shifted = which == STRIDED_SHIFTED ? 3 : which == STRIDED_SHIFTED_G ? 4 : 0;
    if (shifted) { /* within the buffers' slack (g's: 4 (H - 1) elements) */
        for (int i = 0; i < 3; i++) {
            h3.views[i].data = (uint16_t *)h3.views[i].data + 4;
            k3.views[i].data = (uint16_t *)k3.views[i].data + 4;
        }
        if (shifted == 4) h3.views[3].strides[2] = k3.views[3].strides[2] = 132;
        k3_dense_copies(&h3, &p);
    }

    void *want_b[KB_COUNT], *got_b[KB_COUNT], *direct_b[KB_COUNT];
    kp_upload(M, &p, p.host, 0, want_b);
    kp_upload(M, &p, p.host, 0, got_b);
    kp_upload(M, &p, p.host, 0, direct_b);
    sp_kda_args a;
    kp_args(&p, want_b, M->device, &a);
    CHECK_OK(prefill_with_workspace(&a));
    void *want[KB_COUNT];
    outputs(&p, want_b, want);

    kp_args(&p, got_b, M->device, &a);
    if (which == STRIDED_ALL || shifted) {
        a.q = k3.views[0];
        a.k = k3.views[1];
        a.v = k3.views[2];
        a.g = k3.views[3];
    }
    if (which != STRIDED_NONE) a.beta = k3.views[4];
    /* What must be copied: the views not read in place. The K3 layouts
     * have none; the shifted q, k, v with T > 1 are three (at T = 1 every
     * view is dense: size-1 dims take any stride). beta never is. */
    const sp_tensor *used[4] = {&a.q, &a.k, &a.v, &a.g};
    size_t want_copied = 0;
    for (int i = 0; i < 4; i++) {
        want_copied += !read_in_place(used[i]);
        CHECKF(sp_kda_reads_in_place(used[i]) == read_in_place(used[i]),
               "T %lld which %d input %d: sp_kda_reads_in_place disagrees with the rule",
               (long long)T, which, i);
    }
    if (T > 1) CHECK(want_copied == (size_t)shifted);

    /* The prefill itself takes the views read in place, and refuses the
     * others with nothing written. */
    sp_kda_args da = a;
    kp_args(&p, direct_b, M->device, &da);
    da.q = a.q, da.k = a.k, da.v = a.v, da.g = a.g, da.beta = a.beta;
    if (want_copied == 0) {
        CHECK_OK(prefill_with_workspace(&da));
        void *direct[KB_COUNT];
        outputs(&p, direct_b, direct);
        CHECKF(kp_outputs_equal(&p, direct, want), "T %lld %s which %d: the prefill on the views "
               "differs from dense", (long long)T, ts_k3_beta_name(beta_kind), which);
        kp_free_copy(direct);
    } else {
        CHECK_STATUS(sp_kda_prefill(&da, NULL), SP_ERR_INVALID_ARGUMENT);
        CHECK(kp_untouched(M, &p, direct_b));
    }
    const uint64_t before = sp_copy_pass_count();
    CHECK_OK(sp_kda_boundary_run(bd, &a, NULL));
    const uint64_t passes = sp_copy_pass_count() - before;
    size_t copied = 99;
    CHECK_OK(sp_kda_boundary_last_copied(bd, &copied));
    CHECKF(passes == (want_copied ? 1u : 0u) && copied == want_copied,
           "T %lld %s which %d: %llu passes, %zu copied, want %zu", (long long)T,
           ts_k3_beta_name(beta_kind), which, (unsigned long long)passes, copied, want_copied);
    void *got[KB_COUNT];
    outputs(&p, got_b, got);
    CHECKF(kp_outputs_equal(&p, got, want), "T %lld %s %s which %d: differs from the dense prefill",
           (long long)T, ts_k3_beta_name(beta_kind), sp_dtype_name(sdt), which);
    if (T > 0) CHECK(!kp_outputs_equal(&p, got, p.host)); /* something was computed */
    kp_free_copy(want);
    kp_free_copy(got);
    kp_release(M, want_b);
    kp_release(M, got_b);
    kp_release(M, direct_b);
    k3_release(M, &k3);
    k3_free(&h3);
    kp_free(&p);
}

/* A log-decay g in f32 (as an engine's own gate kernel leaves it): read in
 * place, the boundary runs the prefill on it as sp_kda_prefill does; a view
 * it would have to pack is refused (its workspace holds bf16), nothing
 * written. */
static void f32_log_decay_case(sp_kda_boundary *bd) {
    static const int64_t lens[] = {40, 9};
    kda_problem p;
    kp_make(&p, 2, lens, 0, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, 0, 4100);
    kp_log_decay(&p, SP_F32, 4101);
    void *want_b[KB_COUNT], *got_b[KB_COUNT], *bad_b[KB_COUNT];
    kp_upload(M, &p, p.host, 0, want_b);
    kp_upload(M, &p, p.host, 0, got_b);
    kp_upload(M, &p, p.host, 0, bad_b);
    sp_kda_args a;
    kp_args(&p, want_b, M->device, &a);
    CHECK_OK(prefill_with_workspace(&a));
    kp_args(&p, got_b, M->device, &a);
    CHECK_OK(sp_kda_boundary_run(bd, &a, NULL));
    void *want[KB_COUNT], *got[KB_COUNT];
    outputs(&p, want_b, want);
    outputs(&p, got_b, got);
    CHECKF(kp_outputs_equal(&p, got, want), "f32 log-decay: the boundary differs from the prefill");
    CHECK(!kp_outputs_equal(&p, got, p.host));
    kp_args(&p, bad_b, M->device, &a);
    /* heads 132 elements apart (not a multiple of 8): not read in place
     * (the view reaches 4 (H - 1) elements into the buffer's slack);
     * refused before any element is read */
    a.g.strides[2] = 132;
    reset_last_error();
    CHECK_STATUS(sp_kda_boundary_run(bd, &a, NULL), SP_ERR_UNSUPPORTED);
    check_message("f32 log-decay, strided", "not read in place");
    CHECKF(kp_untouched(M, &p, bad_b), "f32 log-decay: a refused view wrote");
    kp_free_copy(want);
    kp_free_copy(got);
    kp_release(M, want_b);
    kp_release(M, got_b);
    kp_release(M, bad_b);
    kp_free(&p);
}

/* The lower-bound gate (the chunked kernels' on the device). */
static void k3_case(sp_kda_boundary *bd, int64_t T, int64_t H, int beta_kind, sp_dtype sdt,
                    int64_t interval, int which, uint64_t seed) {
    k3_gate_case(bd, T, H, beta_kind, sdt, interval, which, SP_KDA_GATE_LOWER_BOUND,
                 SP_KDA_BETA_LOGITS, seed);
}

static void bad_input_cases(sp_kda_boundary *bd) {
    static const int64_t lens[] = {100, 50};
    ts_rng r;
    ts_rng_seed(&r, 71);
    kda_problem p;
    kp_make_ex(&p, 2, lens, 0, 3, SP_F32, SP_KDA_GATE_LOWER_BOUND, 32, 71, 0);
    k3_bufs h3, k3;
    k3_make(&h3, 150, 3, TS_K3_BETA_FA, &r);
    k3_dense_copies(&h3, &p);
    k3_upload(M, &h3, &k3);
    sp_kda_boundary *small_t = NULL, *small_h = NULL;
    CHECK_OK(sp_kda_boundary_create(&small_t, M->device, 149, CAP_H));
    CHECK_OK(sp_kda_boundary_create(&small_h, M->device, CAP_T, 2));
    for (int c = 0; c < 12; c++) {
        void *b[KB_COUNT];
        kp_upload(M, &p, p.host, 0, b);
        sp_kda_args a;
        kp_args(&p, b, M->device, &a);
        a.q = k3.views[0];
        a.k = k3.views[1];
        a.v = k3.views[2];
        a.g = k3.views[3];
        a.beta = k3.views[4];
        sp_kda_boundary *use = bd;
        sp_status want = SP_ERR_INVALID_ARGUMENT;
        const char *what = "";
        switch (c) {
        case 0: what = "wrong dtype"; a.v.dtype = SP_F16; want = SP_ERR_DTYPE_MISMATCH; break;
        case 1: what = "mismatched shapes"; a.k.shape[1] -= 1; want = SP_ERR_SHAPE_MISMATCH; break;
        case 2:
            what = "misaligned beta";
            a.beta.data = (char *)a.beta.data + 1;
            want = SP_ERR_MISALIGNED;
            break;
        case 3: what = "T over capacity"; use = small_t; want = SP_ERR_CAPACITY; break;
        case 4: what = "H over capacity"; use = small_h; want = SP_ERR_CAPACITY; break;
        case 5: what = "bad state pitch"; a.state.strides[0] = 5; break;
        case 6: what = "head dim"; a.q.shape[3] = 64; want = SP_ERR_UNSUPPORTED; break;
        case 7: what = "o overlaps qkv"; a.o.data = k3.qkv; want = SP_ERR_OVERLAP; break;
        case 8: what = "checkpoint interval 0"; a.checkpoint_interval = 0; break;
        case 9: what = "NULL boundary"; use = NULL; break;
        case 10: {
            what = "tensors of the other device";
            sp_tensor *all[] = {&a.q, &a.k, &a.v, &a.g, &a.beta, &a.A_log, &a.dt_bias,
                                &a.cu_seqlens, &a.state_indices, &a.checkpoint_cu_starts,
                                &a.checkpoints, &a.o, &a.state};
            for (size_t i = 0; i < sizeof all / sizeof *all; i++) all[i]->device = other_device();
            want = SP_ERR_DEVICE_MISMATCH;
            break;
        }
        case 11:
            what = "cu_seqlens of the other device";
            a.cu_seqlens.device = other_device();
            want = SP_ERR_DEVICE_MISMATCH;
            break;
        }
        const uint64_t before = sp_copy_pass_count();
        sp_status s = sp_kda_boundary_run(use, &a, NULL);
        CHECKF(s == want, "%s: got %s, want %s (%s)", what, sp_status_string(s),
               sp_status_string(want), sp_last_error());
        CHECKF(sp_copy_pass_count() == before, "%s: a copy pass ran", what);
        CHECKF(kp_untouched(M, &p, b), "%s: an output was written", what);
        kp_release(M, b);
    }
    /* Unmutated, the same call succeeds (each failure was its mutation's). */
    void *b[KB_COUNT];
    kp_upload(M, &p, p.host, 0, b);
    sp_kda_args a;
    kp_args(&p, b, M->device, &a);
    a.beta = k3.views[4];
    CHECK_OK(sp_kda_boundary_run(bd, &a, NULL));
    CHECK(!kp_untouched(M, &p, b));
    kp_release(M, b);
    CHECK_OK(sp_kda_boundary_destroy(small_t));
    CHECK_OK(sp_kda_boundary_destroy(small_h));
    k3_release(M, &k3);
    k3_free(&h3);
    kp_free(&p);
}

static void create_cases(void) {
    sp_kda_boundary *b = (sp_kda_boundary *)&b; /* must be reset to NULL on error */
    CHECK_STATUS(sp_kda_boundary_create(NULL, sp_cpu(), 1, 1), SP_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(sp_kda_boundary_create(&b, sp_cpu(), -1, 1), SP_ERR_INVALID_ARGUMENT);
    CHECK(b == NULL);
    sp_device bogus = {7, 0};
    CHECK_STATUS(sp_kda_boundary_create(&b, bogus, 1, 1), SP_ERR_INVALID_ARGUMENT);
    if (!sp_cuda_available())
        CHECK_STATUS(sp_kda_boundary_create(&b, sp_cuda(0), 1, 1), SP_ERR_NO_DEVICE);
    CHECK_OK(sp_kda_boundary_destroy(NULL));
    CHECK(sp_kda_reads_in_place(NULL) == 0);
    /* Rows of 128 with the inner stride 2, or a token stride of 4 elements
     * (8 bytes): not read in place; a token stride of 8 elements is. */
    static uint16_t buf[8 * 256 + 8] __attribute__((aligned(16)));
    const int64_t shape[4] = {1, 3, 2, 128};
    int64_t strides[4] = {3 * 2 * 256, 2 * 256, 256, 2};
    sp_tensor x;
    CHECK_OK(sp_tensor_view(&x, buf, 0, SP_BF16, 4, shape, strides, sp_cpu()));
    CHECK(sp_kda_reads_in_place(&x) == 0);
    strides[3] = 1, strides[2] = 128, strides[1] = 2 * 128 + 4;
    CHECK_OK(sp_tensor_view(&x, buf, 0, SP_BF16, 4, shape, strides, sp_cpu()));
    CHECK(sp_kda_reads_in_place(&x) == 0);
    strides[1] = 2 * 128 + 8;
    CHECK_OK(sp_tensor_view(&x, buf, 0, SP_BF16, 4, shape, strides, sp_cpu()));
    CHECK(sp_kda_reads_in_place(&x) == 1);
    CHECK_OK(sp_tensor_view(&x, buf, 8, SP_BF16, 4, shape, strides, sp_cpu()));
    CHECK(sp_kda_reads_in_place(&x) == 1); /* 16 bytes in */
    CHECK_OK(sp_tensor_view(&x, buf, 4, SP_BF16, 4, shape, strides, sp_cpu()));
    CHECK(sp_kda_reads_in_place(&x) == 0); /* 8 bytes in */
    size_t n;
    CHECK_STATUS(sp_kda_boundary_last_copied(NULL, &n), SP_ERR_INVALID_ARGUMENT);
    /* Capacity 0: no workspace; only T = 0 fits. */
    CHECK_OK(sp_kda_boundary_create(&b, sp_cpu(), 0, 0));
    CHECK_OK(sp_kda_boundary_destroy(b));
}

/* ---- the device only: the real K3 layout and the graph path --------------------- */

#ifdef TS_MEM_IS_CUDA

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

/* The prefill on S with the workspace ws (the call's own, not kept in a). */
static void prefill_on_s(sp_kda_args *a, void *ws, size_t bytes) {
    a->workspace = ws;
    a->workspace_bytes = bytes;
    CHECK_OK(sp_kda_prefill(a, S));
    a->workspace = NULL;
    a->workspace_bytes = 0;
}

/* The real K3 layout end to end, including the graph path, with the gate
 * form `gate` (its g inputs the producer's). */
static void k3_graph_case(sp_kda_boundary *bd, int32_t kernel, int64_t T, int64_t H, int kind,
                          sp_dtype sdt, int64_t interval, int graph, uint64_t seed, int32_t gate) {
    ts_rng r;
    ts_rng_seed(&r, seed);
    int64_t lens[8];
    const int64_t parts[7] = {1, 63, 1000, 2048, 4000, 4096, 3000};
    const int64_t small[7] = {1, 63, 64, 65, 50, 30, 20};
    int64_t sum = 0;
    for (int i = 0; i < 7; i++) sum += lens[i] = T >= 16384 ? parts[i] : small[i];
    lens[7] = T - sum;
    kda_problem p;
    kp_make_ex(&p, 8, lens, 0, H, sdt, gate, interval, seed, 0);
    p.kernel = kernel;
    dk3 x;
    dk3_make(&x, T, H, kind, &r);
    void *dev[KB_COUNT];
    dev_alloc(&p, dev);
    dense_copies(&x, dev, 0);
    char name[64];
    snprintf(name, sizeof name, "%s, gate %d, kernel %d", ts_k3_beta_name(kind), (int)gate,
             (int)kernel);

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
    prefill_on_s(&dense, ws, ws_bytes);
    outs want;
    download(&p, dev, &want);
    CHECK(!equal(&p, &want, p.host));

    /* The K3 views are read in place: by the prefill itself, and by the
     * boundary without a pack. */
    sp_kda_args a = dense;
    with_views(&a, x.views, 0);
    reset_outputs(&p, dev);
    prefill_on_s(&a, ws, ws_bytes);
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
        prefill_on_s(&dense, ws, ws_bytes);
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

#endif /* TS_MEM_IS_CUDA */

int main(void) {
    M = ts_mem_or_skip(TS_MEM_BACKEND);
    sp_kda_boundary *bd = NULL;
    CHECK_OK(sp_kda_boundary_create(&bd, M->device, CAP_T, CAP_H));
    const int64_t T = ts_test_small() ? 90 : 200;
    for (int kind = 0; kind < 2; kind++) {
        k3_case(bd, T, 3, kind, SP_F32, 32, STRIDED_ALL, 10 + (uint64_t)kind);
        k3_case(bd, T, 4, kind, SP_BF16, 64, STRIDED_ALL, 20 + (uint64_t)kind);
    }
    k3_case(bd, T, 3, TS_K3_BETA_INPROJ, SP_F32, 0, STRIDED_BETA, 30);
    k3_case(bd, T, 3, TS_K3_BETA_FA, SP_F32, 16, STRIDED_NONE, 31);
    k3_case(bd, 77, 2, TS_K3_BETA_FA, SP_BF16, 16, STRIDED_ALL, 32); /* short, tail */
    k3_case(bd, T, 3, TS_K3_BETA_FA, SP_BF16, 32, STRIDED_SHIFTED, 36);
    k3_case(bd, 1, 3, TS_K3_BETA_FA, SP_F32, 0, STRIDED_SHIFTED, 37);
    k3_case(bd, CAP_T, CAP_H, TS_K3_BETA_FA, SP_F32, 0, STRIDED_ALL, 33); /* full */
    k3_case(bd, 1, 3, TS_K3_BETA_INPROJ, SP_F32, 1, STRIDED_ALL, 34);
    k3_case(bd, 0, 3, TS_K3_BETA_FA, SP_F32, 0, STRIDED_ALL, 35);
    /* The other gate and beta forms (the recurrent kernel's on the device),
     * read in place and packed: the softplus gate; a bf16 log-decay g, packed
     * with q, k, v, and beta activated; 2 sigmoid. */
    k3_gate_case(bd, 77, 2, TS_K3_BETA_INPROJ, SP_BF16, 16, STRIDED_ALL, SP_KDA_GATE_SOFTPLUS,
                 SP_KDA_BETA_LOGITS, 38);
    k3_gate_case(bd, T, 3, TS_K3_BETA_INPROJ, SP_F32, 32, STRIDED_SHIFTED_G,
                 SP_KDA_GATE_LOG_DECAY, SP_KDA_BETA_ACTIVATED, 39);
    k3_gate_case(bd, 77, 2, TS_K3_BETA_FA, SP_BF16, 0, STRIDED_SHIFTED, SP_KDA_GATE_SOFTPLUS,
                 SP_KDA_BETA_LOGITS_X2, 40);
    f32_log_decay_case(bd);
    bad_input_cases(bd);
    CHECK_OK(sp_kda_boundary_destroy(bd));
    if (!on_device()) create_cases();
#ifdef TS_MEM_IS_CUDA
    if (on_device()) {
        CUDA_OK(cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking));
        const int small = ts_test_small();
        const int64_t TK = small ? 300 : 16384, H = small ? 4 : 96;
        CHECK_OK(sp_kda_boundary_create(&bd, sp_cuda(0), TK, H));
        /* Each kernel, forced, through the boundary (packed bit-equal to
         * dense, and the graph path), then the plan's own choice. */
        const int32_t R = SP_KDA_KERNEL_RECURRENT, CH = SP_KDA_KERNEL_CHUNKED;
        const int32_t LB = SP_KDA_GATE_LOWER_BOUND, SP = SP_KDA_GATE_SOFTPLUS;
        k3_graph_case(bd, CH, TK, H, TS_K3_BETA_FA, SP_F32, small ? 32 : 1024, 1, 1, LB);
        k3_graph_case(bd, R, TK, H, TS_K3_BETA_FA, SP_F32, small ? 32 : 1024, 1, 1, LB);
        k3_graph_case(bd, SP_KDA_KERNEL_AUTO, TK, H, TS_K3_BETA_INPROJ, SP_BF16,
                      small ? 64 : 2048, small ? 0 : 1, 2, LB);
        /* The softplus gate on the chunked kernels' every-gate build. */
        k3_graph_case(bd, CH, TK, H, TS_K3_BETA_INPROJ, SP_F32, small ? 32 : 1024, 1, 3, SP);
        CHECK_OK(sp_kda_boundary_destroy(bd));
        /* At 8-way tensor parallelism (12 heads) the boundary owns the
         * two-pass kernel's workspace too. */
        const int64_t h8 = small ? 2 : 12;
        CHECK_OK(sp_kda_boundary_create(&bd, sp_cuda(0), TK, h8));
        k3_graph_case(bd, SP_KDA_KERNEL_CHUNKED_TWO_PASS, TK, h8, TS_K3_BETA_FA, SP_F32,
                      small ? 32 : 1024, 1, 6, LB);
        k3_graph_case(bd, SP_KDA_KERNEL_CHUNKED_TWO_PASS, TK, h8, TS_K3_BETA_FA, SP_BF16,
                      small ? 32 : 1024, 1, 7, SP);
        CHECK_OK(sp_kda_boundary_destroy(bd));
        CUDA_OK(cudaStreamDestroy(S));
    }
#endif
    return sp_test_finish(ts_mem_test_name(M, "test_boundary"));
}
