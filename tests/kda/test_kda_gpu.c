/*
 * test_kda_gpu.c — both CUDA KDA kernels (each forced) against the float64
 * reference on varlen batches (both state dtypes, both gates for the
 * recurrent kernel, checkpoint intervals, every sequence length modulo the
 * chunk, long sequences, gates at their extremes), bit-identical reruns,
 * no-op cases, the kernels' guard against bad index arrays (which the host
 * cannot read), the dispatcher's rules, and bad arguments with nothing
 * written. SP_TEST_SMALL=1 shrinks it for compute-sanitizer.
 */
#include "check.h"
#include "kda_problem.h"

#include <string.h>

#ifdef SP_HAVE_CUDA
#include "kda_dev.h"

static void dev_upload(const kda_problem *p, void *const host[KB_COUNT], void *dev[KB_COUNT]) {
    kd_alloc(p, host, 0, dev);
}

/* Run the prefill on the device from the initial buffers; results to out.
 * The two-pass kernel gets a workspace of the size the library asks for. */
static sp_status run_device(const kda_problem *p, void *const init[KB_COUNT],
                            void *out[KB_COUNT]) {
    void *dev[KB_COUNT], *ws = NULL;
    dev_upload(p, init, dev);
    sp_kda_args a;
    kp_args(p, dev, sp_cuda(0), &a);
    if (p->kernel == SP_KDA_KERNEL_CHUNKED_TWO_PASS) {
        size_t bytes = 0;
        CHECK_OK(sp_kda_prefill_workspace_bytes(&a, &bytes));
        CHECK(bytes > 0);
        CUDA_OK(cudaMalloc(&ws, bytes));
        CUDA_OK(cudaMemset(ws, 0xff, bytes)); /* NaN garbage: every read record is written first */
        a.workspace = ws;
        a.workspace_bytes = bytes;
    }
    sp_status s = sp_kda_prefill(&a, NULL);
    kd_download(p, dev, out);
    kd_free(dev);
    CUDA_OK(cudaFree(ws));
    return s;
}

static const char *kernel_name(int32_t k) { return sp_kda_kernel_name((sp_kda_kernel)k); }
static int is_chunked(int32_t k) {
    return k == SP_KDA_KERNEL_CHUNKED || k == SP_KDA_KERNEL_CHUNKED_TWO_PASS;
}

/* Accuracy bounds against the float64 reference. The recurrent kernel is
 * fp32 throughout; the chunked kernel's tf32 products must stay below
 * 4e-3 (o) and 3e-3 (final state), or the bf16 pool's own rounding. */
static double o_tol(int32_t kernel) { return is_chunked(kernel) ? 4e-3 : 5e-3; }
static double state_tol(const kda_problem *p) {
    const double t = kp_state_tol(p);
    return is_chunked(p->kernel) && t < 3e-3 ? 3e-3 : t;
}

/* Run p (already made, p->kernel set) on the device twice and once on the
 * reference; compare. */
static void check_problem(kda_problem *p, const char *what) {
    void *ref[KB_COUNT], *g1[KB_COUNT], *g2[KB_COUNT];
    kp_copy(p, ref);
    kp_copy(p, g1);
    kp_copy(p, g2);
    sp_kda_args a;
    kp_args(p, ref, sp_cpu(), &a);
    CHECK_OK(sp_kda_prefill_reference(&a));
    CHECK_OK(run_device(p, p->host, g1));
    CHECK_OK(run_device(p, p->host, g2));
    int64_t so, ss, sc;
    const double eo = kp_err_o(p, g1[KB_O], ref[KB_O], &so);
    const double es = kp_err_state(p, g1[KB_STATE], ref[KB_STATE], &ss);
    const double ec = kp_err_ckpt(p, g1[KB_CKPT], ref[KB_CKPT], &sc);
    printf("%-16s %-36s: o %.2e state %.2e ckpt %.2e\n", kernel_name(p->kernel), what, eo, es, ec);
    CHECKF(eo < o_tol(p->kernel) && so == 0, "%s: o err %.3g, %lld stray", what, eo, (long long)so);
    CHECKF(es < state_tol(p) && ss == 0, "%s: state err %.3g, %lld stray", what, es, (long long)ss);
    CHECKF(ec < state_tol(p) && sc == 0, "%s: ckpt err %.3g, %lld stray", what, ec, (long long)sc);
    CHECKF(kp_outputs_equal(p, g1, g2), "%s: two runs differ", what);
    kp_free_copy(ref);
    kp_free_copy(g1);
    kp_free_copy(g2);
}

static void batch_case(int32_t kernel, sp_dtype sdt, int32_t gate, int64_t interval,
                       const int64_t *lens, int N, int64_t H) {
    kda_problem p;
    kp_make(&p, N, lens, 3, H, sdt, gate, interval,
            2000 + (uint64_t)sdt * 100 + (uint64_t)gate * 10 + (uint64_t)interval);
    p.kernel = kernel;
    char what[96];
    snprintf(what, sizeof what, "%s gate %d interval %lld N %d", sp_dtype_name(sdt), gate,
             (long long)interval, N);
    check_problem(&p, what);
    kp_free(&p);
}

/* The chunked kernel at its edges: every length modulo the chunk (two
 * batches of 16 sequences, 32k + m tokens for m = 0..31), a long sequence,
 * gates pinned at the lower bound or at ~0 and beta logits of +-10. */
static void chunked_edge_cases(int32_t kernel, int small) {
    int64_t lens[16];
    for (int half = 0; half < 2; half++) {
        for (int i = 0; i < 16; i++) {
            const int m = 16 * half + i;
            lens[i] = m + 32 * (m % 3);
        }
        kda_problem p;
        /* 48 pairs (16 when small), then 32: on 132 multiprocessors the two-pass kernel's
         * state pass then takes blocks of 16 and 32 V rows. */
        kp_make(&p, 16, lens, 5, half ? 2 : small ? 1 : 3, half ? SP_BF16 : SP_F32,
                SP_KDA_GATE_LOWER_BOUND,
                half ? 64 : 32, 3100 + (uint64_t)half);
        p.kernel = kernel;
        check_problem(&p, half ? "lengths 16..31 mod 32" : "lengths 0..15 mod 32");
        kp_free(&p);
    }
    const int64_t extreme_lens[3] = {small ? 70 : 700, 33, small ? 90 : 1000};
    for (int k = 0; k < 2; k++) {
        kda_problem p;
        kp_make(&p, 3, extreme_lens, 0, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, 32, 3200);
        kp_extreme_gates(&p, 3201);
        p.kernel = k ? kernel : SP_KDA_KERNEL_RECURRENT;
        check_problem(&p, "gates at -5 and ~0, beta +-10");
        kp_free(&p);
    }
    if (small) return;
    const int64_t long_len = 8200; /* not a multiple of the chunk */
    kda_problem p;
    kp_make(&p, 1, &long_len, 0, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, 1024, 3300);
    p.kernel = kernel;
    check_problem(&p, "one sequence of 8200 tokens");
    kp_free(&p);
}

/* Which kernel AUTO picks, and forced kernels that cannot serve a call:
 * SP_ERR_UNSUPPORTED (or INVALID_ARGUMENT for no kernel at all), nothing
 * written. */
static void dispatch_cases(void) {
    static const int64_t lens[] = {100, 40};
    kda_problem p;
    kp_make(&p, 2, lens, 0, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, 32, 51);
    void *dev[KB_COUNT], *out[KB_COUNT];
    kp_copy(&p, out);
    dev_upload(&p, p.host, dev);
    sp_kda_args a;
    sp_kda_kernel k = SP_KDA_KERNEL_AUTO;
    kp_args(&p, dev, sp_cuda(0), &a);
    CHECK_OK(sp_kda_prefill_kernel(&a, &k));
    CHECKF(k == SP_KDA_KERNEL_CHUNKED, "AUTO on 70 tokens a sequence chose %d", (int)k);
    a.kernel = SP_KDA_KERNEL_RECURRENT;
    CHECK_OK(sp_kda_prefill_kernel(&a, &k));
    CHECK(k == SP_KDA_KERNEL_RECURRENT);
    a.kernel = SP_KDA_KERNEL_AUTO;
    a.gate = SP_KDA_GATE_SOFTPLUS;
    CHECK_OK(sp_kda_prefill_kernel(&a, &k));
    CHECK(k == SP_KDA_KERNEL_RECURRENT);
    size_t need = 1;
    CHECK_OK(sp_kda_prefill_workspace_bytes(&a, &need));
    CHECKF(need == 0, "softplus gate: workspace %zu, want 0 (no kernel needs one)", need);

    /* With a large enough workspace, AUTO takes the two-pass kernel for
     * these 4 (sequence, head) pairs; one byte less and it does not. */
    kp_args(&p, dev, sp_cuda(0), &a);
    CHECK_OK(sp_kda_prefill_workspace_bytes(&a, &need));
    const size_t want_need = (size_t)(p.T / 32 + p.N) * (size_t)p.H * 37504;
    CHECKF(need == want_need, "workspace %zu, want %zu", need, want_need);
    void *ws;
    CUDA_OK(cudaMalloc(&ws, need + 256));
    a.workspace = ws;
    a.workspace_bytes = need;
    CHECK_OK(sp_kda_prefill_kernel(&a, &k));
    CHECKF(k == SP_KDA_KERNEL_CHUNKED_TWO_PASS, "AUTO with a workspace chose %d", (int)k);
    a.workspace_bytes = need - 1;
    CHECK_OK(sp_kda_prefill_kernel(&a, &k));
    CHECK(k == SP_KDA_KERNEL_CHUNKED);
    a.kernel = SP_KDA_KERNEL_CHUNKED_TWO_PASS;
    CHECK_STATUS(sp_kda_prefill(&a, NULL), SP_ERR_WORKSPACE_TOO_SMALL);
    a.workspace_bytes = need;
    a.workspace = (char *)ws + 8;
    CHECK_STATUS(sp_kda_prefill(&a, NULL), SP_ERR_MISALIGNED);
    a.workspace = NULL;
    CHECK_STATUS(sp_kda_prefill(&a, NULL), SP_ERR_INVALID_ARGUMENT);
    a.workspace = a.o.data; /* the output's memory */
    CHECK_STATUS(sp_kda_prefill(&a, NULL), SP_ERR_OVERLAP);
    a.workspace = ws;
    a.workspace_bytes = 0;
    CHECK_STATUS(sp_kda_prefill(&a, NULL), SP_ERR_INVALID_ARGUMENT); /* a pointer, no size */
    CUDA_OK(cudaFree(ws));
    kd_download(&p, dev, out);
    CHECK(kp_outputs_equal(&p, out, p.host)); /* every refusal above wrote nothing */
    for (int c = 0; c < 7; c++) {
        kp_args(&p, dev, sp_cuda(0), &a);
        a.kernel = c == 5 || c == 6 ? SP_KDA_KERNEL_CHUNKED_TWO_PASS : SP_KDA_KERNEL_CHUNKED;
        sp_status want = SP_ERR_UNSUPPORTED;
        const char *needle = NULL;
        switch (c) {
        case 0: a.gate = SP_KDA_GATE_SOFTPLUS; needle = "lower-bound gate"; break;
        case 1:
            a.checkpoint_interval = 16;
            needle = "multiple of 32";
            break;
        case 2: /* a dense q 2 bytes off 16-byte alignment: k's buffer, shifted */
            a.q.data = (char *)a.k.data + 2;
            a.q.shape[1] -= 1;
            a.k.shape[1] -= 1, a.v.shape[1] -= 1, a.g.shape[1] -= 1, a.o.shape[1] -= 1;
            a.beta.shape[1] -= 1;
            needle = "16-byte aligned";
            break;
        case 3: a.kernel = 7; want = SP_ERR_INVALID_ARGUMENT; needle = "kernel"; break;
        case 4: a.kernel = -1; want = SP_ERR_INVALID_ARGUMENT; needle = "kernel"; break;
        case 5: want = SP_ERR_WORKSPACE_TOO_SMALL; needle = "sp_kda_prefill_workspace_bytes"; break;
        case 6: /* o 2 bytes off 16-byte alignment (its outputs are 16-byte stores) */
            a.o.data = (char *)a.o.data + 2;
            a.q.shape[1] -= 1, a.k.shape[1] -= 1, a.v.shape[1] -= 1, a.g.shape[1] -= 1;
            a.o.shape[1] -= 1, a.beta.shape[1] -= 1;
            needle = "16-byte aligned";
            break;
        }
        sp_status s = sp_kda_prefill(&a, NULL);
        CHECKF(s == want, "dispatch case %d: got %s, want %s (%s)", c, sp_status_string(s),
               sp_status_string(want), sp_last_error());
        CHECKF(strstr(sp_last_error(), needle) != NULL, "dispatch case %d: message '%s'", c,
               sp_last_error());
        CHECK_STATUS(sp_kda_prefill_kernel(&a, &k), want);
        kd_download(&p, dev, out);
        CHECKF(kp_outputs_equal(&p, out, p.host), "dispatch case %d: an output was written", c);
    }
    kd_free(dev);
    kp_free_copy(out);
    kp_free(&p);
}

static void noop_cases(void) {
    const int64_t zero = 0;
    kda_problem p;
    void *b[KB_COUNT];
    kp_make(&p, 1, &zero, 0, 2, SP_BF16, SP_KDA_GATE_LOWER_BOUND, 8, 5); /* T = 0 */
    kp_copy(&p, b);
    CHECK_OK(run_device(&p, p.host, b));
    CHECK(kp_outputs_equal(&p, b, p.host));
    kp_free_copy(b);
    kp_free(&p);
    kp_make(&p, 0, NULL, 40, 2, SP_F32, SP_KDA_GATE_SOFTPLUS, 0, 6); /* N = 0 */
    kp_copy(&p, b);
    CHECK_OK(run_device(&p, p.host, b));
    CHECK(kp_outputs_equal(&p, b, p.host));
    kp_free_copy(b);
    kp_free(&p);
}

/* Index arrays live on the device: the kernel skips a sequence whose slot
 * or token range is out of bounds, writing nothing for it, and runs the
 * others exactly as usual. */
static void device_guard_cases(int32_t kernel) {
    static const int64_t lens[] = {20, 33, 17};
    kda_problem p;
    kp_make(&p, 3, lens, 0, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, 32, 31);
    p.kernel = kernel;
    void *good[KB_COUNT], *bad[KB_COUNT], *init[KB_COUNT];
    kp_copy(&p, good);
    kp_copy(&p, bad);
    kp_copy(&p, init);
    CHECK_OK(run_device(&p, p.host, good));
    const size_t row = (size_t)p.H * SP_KDA_HEAD_DIM * 2;
    const int32_t *idx = p.host[KB_IDX];
    const size_t slot_bytes = (size_t)p.pitch * 4;

    ((int32_t *)init[KB_IDX])[1] = (int32_t)p.slots; /* sequence 1: slot out of range */
    CHECK_OK(run_device(&p, init, bad));
    const char *go = good[KB_O], *bo = bad[KB_O], *po = p.host[KB_O];
    CHECK(memcmp(bo + 20 * row, po + 20 * row, 33 * row) == 0);           /* skipped */
    CHECK(memcmp(bo, go, 20 * row) == 0);                                  /* others */
    CHECK(memcmp(bo + 53 * row, go + 53 * row, 17 * row) == 0);
    CHECK(memcmp((char *)bad[KB_STATE] + idx[0] * slot_bytes,
                 (char *)good[KB_STATE] + idx[0] * slot_bytes, slot_bytes) == 0);

    memcpy(init[KB_IDX], p.host[KB_IDX], p.bytes[KB_IDX]);
    ((int64_t *)init[KB_CU])[3] = p.T + 5; /* sequence 2 reaches past T */
    CHECK_OK(run_device(&p, init, bad));
    CHECK(memcmp(bo + 53 * row, po + 53 * row, 17 * row) == 0);
    CHECK(memcmp(bo, go, 53 * row) == 0);
    CHECK(memcmp((char *)bad[KB_STATE] + idx[2] * slot_bytes,
                 (char *)p.host[KB_STATE] + idx[2] * slot_bytes, slot_bytes) == 0);
    kp_free_copy(good);
    kp_free_copy(bad);
    kp_free_copy(init);
    kp_free(&p);
}

static void bad_argument_cases(void) {
    static const int64_t lens[] = {5, 17};
    kda_problem p;
    kp_make(&p, 2, lens, 0, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, 4, 41);
    void *dev[KB_COUNT], *out[KB_COUNT];
    kp_copy(&p, out);
    dev_upload(&p, p.host, dev);
    for (int c = 0; c < 7; c++) {
        sp_kda_args a;
        kp_args(&p, dev, sp_cuda(0), &a);
        sp_status want = SP_ERR_INVALID_ARGUMENT;
        switch (c) {
        case 0: a.q.dtype = SP_F16; want = SP_ERR_DTYPE_MISMATCH; break;
        case 1: a.beta.data = (char *)a.beta.data + 1; want = SP_ERR_MISALIGNED; break;
        case 2: a.state.strides[0] = 100; break;
        case 3: a.g.strides[2] = 2 * SP_KDA_HEAD_DIM + 4; break; /* rows off 16 bytes */
        case 4: a.cu_seqlens.device = sp_cpu(); want = SP_ERR_DEVICE_MISMATCH; break;
        case 5: a.o.data = a.k.data; want = SP_ERR_OVERLAP; break;
        case 6: a.lower_bound = 1.0f; break;
        }
        sp_status s = sp_kda_prefill(&a, NULL);
        CHECKF(s == want, "case %d: got %s, want %s (%s)", c, sp_status_string(s),
               sp_status_string(want), sp_last_error());
        kd_download(&p, dev, out);
        CHECKF(kp_outputs_equal(&p, out, p.host), "case %d: an output was written", c);
    }
    sp_kda_args a;
    kp_args(&p, dev, sp_cuda(0), &a);
    CHECK_STATUS(sp_kda_prefill_reference(&a), SP_ERR_UNSUPPORTED);
    kd_free(dev);
    kp_free_copy(out);
    kp_free(&p);
}

/* A sequence without tokens leaves its slot's bits as they were: slots of a
 * bf16 pool holding signalling NaNs (0x7f81, which any float round trip
 * turns into 0x7fc1) come back unchanged, beside a sequence that runs. */
static void empty_slot_case(int32_t kernel) {
    static const int64_t lens[] = {0, 40, 0};
    kda_problem p;
    kp_make(&p, 3, lens, 2, 2, SP_BF16, SP_KDA_GATE_LOWER_BOUND, 0, 4242);
    p.kernel = kernel;
    const int32_t *idx = (const int32_t *)p.host[KB_IDX];
    uint16_t *pool = (uint16_t *)p.host[KB_STATE];
    const int64_t n_slot = p.H * 128 * 128;
    for (int n = 0; n < 3; n += 2)
        for (int64_t e = 0; e < n_slot; e++) pool[idx[n] * p.pitch + e] = 0x7f81;
    void *out[KB_COUNT];
    kp_copy(&p, out);
    CHECK_OK(run_device(&p, p.host, out));
    const uint16_t *got = (const uint16_t *)out[KB_STATE];
    for (int n = 0; n < 3; n += 2)
        CHECKF(memcmp(got + idx[n] * p.pitch, pool + idx[n] * p.pitch, (size_t)n_slot * 2) == 0,
               "%s: the empty sequence %d's slot was rewritten", kernel_name(kernel), n);
    CHECKF(memcmp(got + idx[1] * p.pitch, pool + idx[1] * p.pitch, (size_t)n_slot * 2) != 0,
           "%s: the running sequence's slot was not written", kernel_name(kernel));
    kp_free_copy(out);
    kp_free(&p);
}

/* Where AUTO stops choosing the two-pass kernel, given the workspace it
 * asks for: 48 (sequence, head) pairs take it, 49 the one-pass kernel. */
static void dispatch_pairs_cases(void) {
    static const int64_t lens[] = {64};
    for (int64_t H = 48; H <= 49; H++) {
        kda_problem p;
        kp_make(&p, 1, lens, 0, H, SP_F32, SP_KDA_GATE_LOWER_BOUND, 0, 52);
        void *dev[KB_COUNT];
        dev_upload(&p, p.host, dev);
        sp_kda_args a;
        kp_args(&p, dev, sp_cuda(0), &a);
        size_t need = 0;
        CHECK_OK(sp_kda_prefill_workspace_bytes(&a, &need));
        void *ws = NULL;
        CUDA_OK(cudaMalloc(&ws, need + 256));
        a.workspace = ws;
        a.workspace_bytes = need;
        sp_kda_kernel k = SP_KDA_KERNEL_AUTO;
        CHECK_OK(sp_kda_prefill_kernel(&a, &k));
        const sp_kda_kernel want = H <= 48 ? SP_KDA_KERNEL_CHUNKED_TWO_PASS : SP_KDA_KERNEL_CHUNKED;
        CHECKF(k == want, "AUTO at %lld pairs chose %s", (long long)H, kernel_name(k));
        CUDA_OK(cudaFree(ws));
        kd_free(dev);
        kp_free(&p);
    }
}

int main(void) {
    if (!sp_cuda_available()) SP_SKIP("no usable CUDA device");
    static const int64_t lens[] = {1, 63, 64, 65, 300}, small[] = {1, 17, 40};
    static const int64_t extra[] = {0, 130, 2}; /* an empty sequence inside */
    static const sp_dtype dts[] = {SP_F32, SP_BF16};
    static const int32_t gates[] = {SP_KDA_GATE_LOWER_BOUND, SP_KDA_GATE_SOFTPLUS};
    static const int64_t intervals[] = {0, 1, 32, 64};
    const int32_t R = SP_KDA_KERNEL_RECURRENT, CH = SP_KDA_KERNEL_CHUNKED,
                  TP = SP_KDA_KERNEL_CHUNKED_TWO_PASS;
    if (ts_test_small()) {
        batch_case(R, SP_F32, SP_KDA_GATE_LOWER_BOUND, 16, small, 3, 2);
        batch_case(R, SP_BF16, SP_KDA_GATE_SOFTPLUS, 1, small, 3, 1);
        for (int32_t k = CH; k <= TP; k++) {
            batch_case(k, SP_F32, SP_KDA_GATE_LOWER_BOUND, 32, small, 3, 2);
            batch_case(k, SP_BF16, SP_KDA_GATE_LOWER_BOUND, 0, small, 3, 1);
        }
    } else {
        for (int di = 0; di < 2; di++)
            for (int gi = 0; gi < 2; gi++)
                for (int ii = 0; ii < 4; ii++) {
                    batch_case(R, dts[di], gates[gi], intervals[ii], lens, 5, 3);
                    if (gates[gi] == SP_KDA_GATE_LOWER_BOUND && intervals[ii] % 32 == 0)
                        for (int32_t k = CH; k <= TP; k++)
                            batch_case(k, dts[di], gates[gi], intervals[ii], lens, 5, 3);
                }
        batch_case(R, SP_F32, SP_KDA_GATE_SOFTPLUS, 64, extra, 3, 4);
        batch_case(CH, SP_F32, SP_KDA_GATE_LOWER_BOUND, 64, extra, 3, 4);
        batch_case(TP, SP_F32, SP_KDA_GATE_LOWER_BOUND, 64, extra, 3, 4);
    }
    chunked_edge_cases(CH, ts_test_small());
    chunked_edge_cases(TP, ts_test_small());
    for (int32_t k = R; k <= TP; k++) empty_slot_case(k);
    noop_cases();
    device_guard_cases(R);
    device_guard_cases(CH);
    device_guard_cases(TP);
    dispatch_cases();
    dispatch_pairs_cases();
    bad_argument_cases();
    return sp_test_finish("test_kda_gpu");
}

#else

int main(void) { SP_SKIP("built without CUDA"); }

#endif
