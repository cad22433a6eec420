/*
 * test_kda_gpu.c — the CUDA KDA prefill against the float64 reference on
 * varlen batches (both state dtypes, both gates, checkpoint intervals),
 * bit-identical reruns, no-op cases, the kernel's guard against bad index
 * arrays (which the host cannot read), and bad arguments with nothing
 * written. SP_TEST_SMALL=1 shrinks it for compute-sanitizer.
 */
#include "check.h"
#include "kda_problem.h"

#include <string.h>

#ifdef SP_HAVE_CUDA
#include "cuda_ok.h"

static void dev_upload(const kda_problem *p, void *const host[KB_COUNT], void *dev[KB_COUNT]) {
    for (int b = 0; b < KB_COUNT; b++) {
        CUDA_OK(cudaMalloc(&dev[b], p->bytes[b] ? p->bytes[b] : 256));
        CUDA_OK(cudaMemcpy(dev[b], host[b], p->bytes[b], cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaDeviceSynchronize()); /* pageable copies may still be in flight */
}

static void dev_download(const kda_problem *p, void *const dev[KB_COUNT], void *host[KB_COUNT]) {
    CUDA_OK(cudaDeviceSynchronize());
    for (int b = KB_O; b < KB_COUNT; b++)
        CUDA_OK(cudaMemcpy(host[b], dev[b], p->bytes[b], cudaMemcpyDeviceToHost));
}

static void dev_free(void *dev[KB_COUNT]) {
    for (int b = 0; b < KB_COUNT; b++) CUDA_OK(cudaFree(dev[b]));
}

/* Run the prefill on the device from the initial buffers; results to out. */
static sp_status run_device(const kda_problem *p, void *const init[KB_COUNT],
                            void *out[KB_COUNT]) {
    void *dev[KB_COUNT];
    dev_upload(p, init, dev);
    sp_kda_args a;
    kp_args(p, dev, sp_cuda(0), &a);
    sp_status s = sp_kda_prefill(&a, NULL);
    dev_download(p, dev, out);
    dev_free(dev);
    return s;
}

static int outputs_equal(const kda_problem *p, void *const x[KB_COUNT], void *const y[KB_COUNT]) {
    for (int b = KB_O; b < KB_COUNT; b++)
        if (memcmp(x[b], y[b], p->bytes[b]) != 0) return 0;
    return 1;
}

static void batch_case(sp_dtype sdt, int32_t gate, int64_t interval, const int64_t *lens, int N,
                       int64_t H) {
    kda_problem p;
    kp_make(&p, N, lens, 3, H, sdt, gate, interval,
            2000 + (uint64_t)sdt * 100 + (uint64_t)gate * 10 + (uint64_t)interval);
    void *ref[KB_COUNT], *g1[KB_COUNT], *g2[KB_COUNT];
    kp_copy(&p, ref);
    kp_copy(&p, g1);
    kp_copy(&p, g2);
    sp_kda_args a;
    kp_args(&p, ref, sp_cpu(), &a);
    CHECK_OK(sp_kda_prefill_reference(&a));
    CHECK_OK(run_device(&p, p.host, g1));
    CHECK_OK(run_device(&p, p.host, g2));

    int64_t so, ss, sc;
    const double eo = kp_err_o(&p, g1[KB_O], ref[KB_O], &so);
    const double es = kp_err_state(&p, g1[KB_STATE], ref[KB_STATE], &ss);
    const double ec = kp_err_ckpt(&p, g1[KB_CKPT], ref[KB_CKPT], &sc);
    printf("cuda %-4s gate %d interval %2lld: o %.2e state %.2e ckpt %.2e\n", sp_dtype_name(sdt),
           gate, (long long)interval, eo, es, ec);
    CHECKF(eo < 5e-3 && so == 0, "o err %.3g, %lld stray", eo, (long long)so);
    CHECKF(es < kp_state_tol(&p) && ss == 0, "state err %.3g, %lld stray", es, (long long)ss);
    CHECKF(ec < kp_state_tol(&p) && sc == 0, "ckpt err %.3g, %lld stray", ec, (long long)sc);
    CHECKF(outputs_equal(&p, g1, g2), "%s gate %d interval %lld: two runs differ",
           sp_dtype_name(sdt), gate, (long long)interval);
    kp_free_copy(ref);
    kp_free_copy(g1);
    kp_free_copy(g2);
    kp_free(&p);
}

static void noop_cases(void) {
    const int64_t zero = 0;
    kda_problem p;
    void *b[KB_COUNT];
    kp_make(&p, 1, &zero, 0, 2, SP_BF16, SP_KDA_GATE_LOWER_BOUND, 8, 5); /* T = 0 */
    kp_copy(&p, b);
    CHECK_OK(run_device(&p, p.host, b));
    CHECK(outputs_equal(&p, b, p.host));
    kp_free_copy(b);
    kp_free(&p);
    kp_make(&p, 0, NULL, 40, 2, SP_F32, SP_KDA_GATE_SOFTPLUS, 0, 6); /* N = 0 */
    kp_copy(&p, b);
    CHECK_OK(run_device(&p, p.host, b));
    CHECK(outputs_equal(&p, b, p.host));
    kp_free_copy(b);
    kp_free(&p);
}

/* Index arrays live on the device: the kernel skips a sequence whose slot
 * or token range is out of bounds, writing nothing for it, and runs the
 * others exactly as usual. */
static void device_guard_cases(void) {
    static const int64_t lens[] = {20, 33, 17};
    kda_problem p;
    kp_make(&p, 3, lens, 0, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, 16, 31);
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
        case 3: a.g.strides[2] = 2 * SP_KDA_HEAD_DIM; break; /* not dense */
        case 4: a.cu_seqlens.device = sp_cpu(); want = SP_ERR_DEVICE_MISMATCH; break;
        case 5: a.o.data = a.k.data; want = SP_ERR_OVERLAP; break;
        case 6: a.lower_bound = 1.0f; break;
        }
        sp_status s = sp_kda_prefill(&a, NULL);
        CHECKF(s == want, "case %d: got %s, want %s (%s)", c, sp_status_string(s),
               sp_status_string(want), sp_last_error());
        dev_download(&p, dev, out);
        CHECKF(outputs_equal(&p, out, p.host), "case %d: an output was written", c);
    }
    sp_kda_args a;
    kp_args(&p, dev, sp_cuda(0), &a);
    CHECK_STATUS(sp_kda_prefill_reference(&a), SP_ERR_UNSUPPORTED);
    dev_free(dev);
    kp_free_copy(out);
    kp_free(&p);
}

int main(void) {
    if (!sp_cuda_available()) SP_SKIP("no usable CUDA device");
    static const int64_t lens[] = {1, 63, 64, 65, 300}, small[] = {1, 17, 40};
    static const int64_t extra[] = {0, 130, 2}; /* an empty sequence inside */
    static const sp_dtype dts[] = {SP_F32, SP_BF16};
    static const int32_t gates[] = {SP_KDA_GATE_LOWER_BOUND, SP_KDA_GATE_SOFTPLUS};
    static const int64_t intervals[] = {0, 1, 32, 64};
    if (kp_small()) {
        batch_case(SP_F32, SP_KDA_GATE_LOWER_BOUND, 16, small, 3, 2);
        batch_case(SP_BF16, SP_KDA_GATE_SOFTPLUS, 1, small, 3, 1);
    } else {
        for (int di = 0; di < 2; di++)
            for (int gi = 0; gi < 2; gi++)
                for (int ii = 0; ii < 4; ii++)
                    batch_case(dts[di], gates[gi], intervals[ii], lens, 5, 3);
        batch_case(SP_F32, SP_KDA_GATE_SOFTPLUS, 64, extra, 3, 4);
    }
    noop_cases();
    device_guard_cases();
    bad_argument_cases();
    return sp_test_finish("test_kda_gpu");
}

#else

int main(void) { SP_SKIP("built without CUDA"); }

#endif
