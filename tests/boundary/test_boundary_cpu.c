/*
 * test_boundary_cpu.c — the KDA input boundary on the CPU: K3-layout strided
 * inputs (both beta widths, both state dtypes, checkpoints) give outputs,
 * states and checkpoints bit-identical to sp_kda_prefill on dense copies
 * made element by element, and so is sp_kda_prefill on the views it reads
 * in place; copy passes are counted with sp_copy_pass_count() (none for
 * the K3 layouts, one when q, k, v are shifted off 16-byte alignment);
 * short and tail shapes, T = 1, T = 0; bad inputs each with their error,
 * nothing written and no copy pass.
 */
#include "check.h"
#include "k3_problem.h"

#include <string.h>

enum { CAP_T = 256, CAP_H = 4 };

/* Which inputs the boundary sees strided (the others: the dense copies);
 * SHIFTED: all, with q, k, v 4 elements past their K3 columns. */
enum { STRIDED_ALL = 0, STRIDED_BETA = 1, STRIDED_NONE = 2, STRIDED_SHIFTED = 3 };

/* The header's rule, written independently: q, k, v, g are read in place
 * when dense or made of 16-byte aligned rows of 128 contiguous channels. */
static int read_in_place(const sp_tensor *x) {
    if (sp_tensor_is_dense(x)) return 1;
    return x->strides[3] == 1 && (x->shape[1] <= 1 || x->strides[1] % 8 == 0) &&
           (x->shape[2] <= 1 || x->strides[2] % 8 == 0) && (uintptr_t)x->data % 16 == 0;
}

static void k3_case(sp_kda_boundary *bd, int64_t T, int64_t H, int beta_kind, sp_dtype sdt,
                    int64_t interval, int which, uint64_t seed) {
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
    kp_make_ex(&p, N, lens, 0, H, sdt, SP_KDA_GATE_LOWER_BOUND, interval, seed, 0);
    k3_bufs k3;
    k3_make(&k3, T, H, beta_kind, &r);
    if (which == STRIDED_SHIFTED) /* within the buffers' slack */
        for (int i = 0; i < 3; i++) k3.views[i].data = (uint16_t *)k3.views[i].data + 4;
    k3_dense_copies(&k3, &p);

    void *want[KB_COUNT], *got[KB_COUNT], *direct[KB_COUNT];
    kp_copy(&p, want);
    kp_copy(&p, got);
    kp_copy(&p, direct);
    sp_kda_args a;
    kp_args(&p, want, sp_cpu(), &a);
    CHECK_OK(sp_kda_prefill(&a, NULL));

    kp_args(&p, got, sp_cpu(), &a);
    if (which == STRIDED_ALL || which == STRIDED_SHIFTED) {
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
    if (T > 1) CHECK(want_copied == (which == STRIDED_SHIFTED ? 3u : 0u));

    /* The prefill itself takes the views read in place, and refuses the
     * others with nothing written. */
    sp_kda_args da = a;
    kp_args(&p, direct, sp_cpu(), &da);
    da.q = a.q, da.k = a.k, da.v = a.v, da.g = a.g, da.beta = a.beta;
    if (want_copied == 0) {
        CHECK_OK(sp_kda_prefill(&da, NULL));
        CHECKF(kp_outputs_equal(&p, direct, want), "T %lld %s which %d: the prefill on the views "
               "differs from dense", (long long)T, ts_k3_beta_name(beta_kind), which);
    } else {
        CHECK_STATUS(sp_kda_prefill(&da, NULL), SP_ERR_INVALID_ARGUMENT);
        CHECK(kp_outputs_equal(&p, direct, p.host));
    }
    const uint64_t before = sp_copy_pass_count();
    CHECK_OK(sp_kda_boundary_run(bd, &a, NULL));
    const uint64_t passes = sp_copy_pass_count() - before;
    size_t copied = 99;
    CHECK_OK(sp_kda_boundary_last_copied(bd, &copied));
    CHECKF(passes == (want_copied ? 1u : 0u) && copied == want_copied,
           "T %lld %s which %d: %llu passes, %zu copied, want %zu", (long long)T,
           ts_k3_beta_name(beta_kind), which, (unsigned long long)passes, copied, want_copied);
    CHECKF(kp_outputs_equal(&p, got, want), "T %lld %s %s which %d: differs from the dense prefill",
           (long long)T, ts_k3_beta_name(beta_kind), sp_dtype_name(sdt), which);
    if (T > 0) CHECK(!kp_outputs_equal(&p, got, p.host)); /* something was computed */
    kp_free_copy(want);
    kp_free_copy(got);
    kp_free_copy(direct);
    k3_free(&k3);
    kp_free(&p);
}

static int untouched(const kda_problem *p, void *const b[KB_COUNT]) {
    return kp_outputs_equal(p, b, p->host);
}

static void bad_input_cases(sp_kda_boundary *bd) {
    static const int64_t lens[] = {100, 50};
    ts_rng r;
    ts_rng_seed(&r, 71);
    kda_problem p;
    kp_make_ex(&p, 2, lens, 0, 3, SP_F32, SP_KDA_GATE_LOWER_BOUND, 32, 71, 0);
    k3_bufs k3;
    k3_make(&k3, 150, 3, TS_K3_BETA_FA, &r);
    k3_dense_copies(&k3, &p);
    sp_kda_boundary *small_t = NULL, *small_h = NULL;
    CHECK_OK(sp_kda_boundary_create(&small_t, sp_cpu(), 149, CAP_H));
    CHECK_OK(sp_kda_boundary_create(&small_h, sp_cpu(), CAP_T, 2));
    for (int c = 0; c < 11; c++) {
        void *b[KB_COUNT];
        kp_copy(&p, b);
        sp_kda_args a;
        kp_args(&p, b, sp_cpu(), &a);
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
            what = "CUDA tensors on a CPU boundary";
            sp_tensor *all[] = {&a.q, &a.k, &a.v, &a.g, &a.beta, &a.A_log, &a.dt_bias,
                                &a.cu_seqlens, &a.state_indices, &a.checkpoint_cu_starts,
                                &a.checkpoints, &a.o, &a.state};
            for (size_t i = 0; i < sizeof all / sizeof *all; i++) all[i]->device = sp_cuda(0);
            want = SP_ERR_DEVICE_MISMATCH;
            break;
        }
        }
        const uint64_t before = sp_copy_pass_count();
        sp_status s = sp_kda_boundary_run(use, &a, NULL);
        CHECKF(s == want, "%s: got %s, want %s (%s)", what, sp_status_string(s),
               sp_status_string(want), sp_last_error());
        CHECKF(sp_copy_pass_count() == before, "%s: a copy pass ran", what);
        CHECKF(untouched(&p, b), "%s: an output was written", what);
        kp_free_copy(b);
    }
    /* Unmutated, the same call succeeds (each failure was its mutation's). */
    void *b[KB_COUNT];
    kp_copy(&p, b);
    sp_kda_args a;
    kp_args(&p, b, sp_cpu(), &a);
    a.beta = k3.views[4];
    CHECK_OK(sp_kda_boundary_run(bd, &a, NULL));
    CHECK(!untouched(&p, b));
    kp_free_copy(b);
    CHECK_OK(sp_kda_boundary_destroy(small_t));
    CHECK_OK(sp_kda_boundary_destroy(small_h));
    k3_free(&k3);
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

int main(void) {
    sp_kda_boundary *bd = NULL;
    CHECK_OK(sp_kda_boundary_create(&bd, sp_cpu(), CAP_T, CAP_H));
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
    bad_input_cases(bd);
    create_cases();
    CHECK_OK(sp_kda_boundary_destroy(bd));
    return sp_test_finish("test_boundary_cpu");
}
