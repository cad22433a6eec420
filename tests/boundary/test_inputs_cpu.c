/*
 * test_inputs_cpu.c — the inputs boundary (sp_kda_inputs_*) on the CPU: the
 * K3 views (both beta widths; all five strided, only beta strided, none)
 * come back dense and bit-identical to element-by-element copies, dense
 * inputs as themselves, with one copy pass when anything is strided and
 * none otherwise, at fixed workspace addresses call after call; a caller's
 * workspace is used as given; each bad input fails with its status and
 * message, with no pass and no workspace byte written.
 */
#include "check.h"
#include "k3_problem.h"

#include <string.h>

enum { CAP_T = 200, CAP_H = 3 };

static void dense_like(const sp_tensor *v, void **buf, sp_tensor *d) {
    int64_t n = 1;
    for (int i = 0; i < v->ndim; i++) n *= v->shape[i];
    *buf = k3_alloc((size_t)(n ? n : 1) * 2);
    sp_tensor_dense(d, *buf, SP_BF16, v->ndim, v->shape, sp_cpu());
    ts_ref_copy(v, d);
}

/* which: 0 all strided (as the K3 producers leave them), 1 only beta
 * strided (q, k, v, g given as dense copies), 2 none strided. */
static void k3_case(sp_kda_inputs *p, int64_t T, int64_t H, int beta_kind, int which,
                    uint64_t seed) {
    ts_rng r;
    ts_rng_seed(&r, seed);
    k3_bufs k3;
    k3_make(&k3, T, H, beta_kind, &r);
    void *buf[5];
    sp_tensor want[5], in[5], out[5], out2[5];
    for (int i = 0; i < 5; i++) dense_like(&k3.views[i], &buf[i], &want[i]);
    for (int i = 0; i < 5; i++) {
        const int strided = which == 0 ? i != 3 /* g is dense in K3 */ : which == 1 ? i == 4 : 0;
        in[i] = strided || i == 3 ? k3.views[i] : want[i];
        if (which == 2) in[i] = want[i];
    }
    size_t expect = 0;
    for (int i = 0; i < 5; i++) expect += !sp_tensor_is_dense(&in[i]);
    const uint64_t passes = sp_copy_pass_count();
    size_t copied = 99;
    CHECK_OK(sp_kda_inputs_pack(p, in, out, &copied, NULL));
    CHECKF(copied == expect, "T=%lld which=%d: %zu copied, %zu expected", (long long)T, which,
           copied, expect);
    CHECK(sp_copy_pass_count() - passes == (expect ? 1u : 0u));
    for (int i = 0; i < 5; i++) {
        CHECK(sp_tensor_is_dense(&out[i]));
        if (sp_tensor_is_dense(&in[i])) CHECK(out[i].data == in[i].data);
        else CHECK((uintptr_t)out[i].data % SP_PACK_ALIGN == 0);
        int64_t first;
        CHECKF(ts_ref_compare(&out[i], &want[i], &first) == 0, "input %d differs at %lld", i,
               (long long)first);
    }
    /* Same views again: the same addresses (what a CUDA graph replays). */
    CHECK_OK(sp_kda_inputs_pack(p, in, out2, NULL, NULL));
    for (int i = 0; i < 5; i++) CHECK(out2[i].data == out[i].data);
    for (int i = 0; i < 5; i++) free(buf[i]);
    k3_free(&k3);
}

static void expect_error(sp_kda_inputs *p, sp_tensor in[5], sp_status st, const char *needle,
                         void *ws, size_t ws_bytes) {
    memset(ws, 0x5a, ws_bytes);
    const uint64_t passes = sp_copy_pass_count();
    sp_tensor out[5];
    memset(out, 0, sizeof out);
    reset_last_error();
    CHECK_STATUS(sp_kda_inputs_pack(p, in, out, NULL, NULL), st);
    check_message(needle, needle);
    CHECK(sp_copy_pass_count() == passes);
    size_t dirty = 0;
    for (size_t i = 0; i < ws_bytes; i++) dirty += ((unsigned char *)ws)[i] != 0x5a;
    CHECKF(dirty == 0, "%s: %zu workspace bytes written", needle, dirty);
    CHECK(out[0].data == NULL);
}

static void errors(void) {
    size_t need = 0;
    CHECK_OK(sp_kda_inputs_workspace_bytes(64, 2, &need));
    void *ws = k3_alloc(need);
    sp_kda_inputs *p = NULL;
    CHECK_OK(sp_kda_inputs_create(&p, sp_cpu(), 64, 2, ws, need));
    ts_rng r;
    ts_rng_seed(&r, 7);
    k3_bufs k3;
    k3_make(&k3, 64, 2, TS_K3_BETA_FA, &r);
    sp_tensor in[5];
    memcpy(in, k3.views, sizeof in);
    in[2].dtype = SP_F16;
    expect_error(p, in, SP_ERR_DTYPE_MISMATCH, "v: dtype f16", ws, need);
    memcpy(in, k3.views, sizeof in);
    in[4].shape[2] = 1;
    expect_error(p, in, SP_ERR_SHAPE_MISMATCH, "beta: shape [1, 64, 1], expected [1, 64, 2]", ws,
                 need);
    memcpy(in, k3.views, sizeof in);
    in[1].shape[1] = 63;
    expect_error(p, in, SP_ERR_SHAPE_MISMATCH, "k: shape [1, 63, 2, 128] differs from q", ws,
                 need);
    memcpy(in, k3.views, sizeof in);
    in[3].device = sp_cuda(0);
    expect_error(p, in, SP_ERR_DEVICE_MISMATCH, "g: on cuda:0", ws, need);
    memcpy(in, k3.views, sizeof in);
    in[0].data = (char *)in[0].data + 1;
    expect_error(p, in, SP_ERR_MISALIGNED, "q:", ws, need);
    memcpy(in, k3.views, sizeof in);
    in[2].strides[3] = INT64_MAX / 64; /* 127 of them pass int64 */
    expect_error(p, in, SP_ERR_OVERFLOW, "v:", ws, need);
    k3_free(&k3);
    k3_make(&k3, 65, 2, TS_K3_BETA_FA, &r);
    expect_error(p, k3.views, SP_ERR_CAPACITY, "q: T = 65 exceeds", ws, need);
    k3_free(&k3);
    k3_make(&k3, 8, 3, TS_K3_BETA_FA, &r);
    expect_error(p, k3.views, SP_ERR_CAPACITY, "q: H = 3 exceeds", ws, need);
    /* An input inside the workspace. */
    k3_free(&k3);
    k3_make(&k3, 8, 2, TS_K3_BETA_FA, &r);
    memcpy(in, k3.views, sizeof in);
    const int64_t s3[3] = {8 * 130, 130, 1};
    sp_tensor_view(&in[4], ws, 0, SP_BF16, 3, in[4].shape, s3, sp_cpu());
    expect_error(p, in, SP_ERR_OVERLAP, "workspace", ws, need);
    CHECK_STATUS(sp_kda_inputs_pack(NULL, in, in, NULL, NULL), SP_ERR_INVALID_ARGUMENT);
    CHECK_OK(sp_kda_inputs_destroy(p));
    k3_free(&k3);
    free(ws);

    /* Creation. */
    sp_kda_inputs *q = (sp_kda_inputs *)1;
    CHECK_STATUS(sp_kda_inputs_create(&q, sp_cpu(), -1, 2, NULL, 0), SP_ERR_INVALID_ARGUMENT);
    CHECK(q == NULL);
    char small[64];
    CHECK_STATUS(sp_kda_inputs_create(&q, sp_cpu(), 64, 2, small, sizeof small),
                 SP_ERR_WORKSPACE_TOO_SMALL);
    check_message("too small", "needed for 64 tokens x 2 heads");
    CHECK_STATUS(sp_kda_inputs_create(&q, sp_cpu(), 64, 2, NULL, 10), SP_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(sp_kda_inputs_workspace_bytes(INT64_MAX, INT64_MAX, &need), SP_ERR_OVERFLOW);
    CHECK_OK(sp_kda_inputs_workspace_bytes(0, 0, &need));
    CHECK(need == 0);
    CHECK_OK(sp_kda_inputs_create(&q, sp_cpu(), 0, 0, NULL, 0));
    CHECK_OK(sp_kda_inputs_destroy(q));
    CHECK_OK(sp_kda_inputs_destroy(NULL));
}

int main(void) {
    sp_kda_inputs *p = NULL;
    CHECK_OK(sp_kda_inputs_create(&p, sp_cpu(), CAP_T, CAP_H, NULL, 0));
    uint64_t seed = 1;
    const int64_t Ts[] = {CAP_T, 77, 1, 0};
    for (int beta = 0; beta < 2; beta++)
        for (size_t t = 0; t < sizeof Ts / sizeof Ts[0]; t++)
            for (int which = 0; which < 3; which++)
                k3_case(p, Ts[t], t == 1 ? 2 : CAP_H, beta ? TS_K3_BETA_INPROJ : TS_K3_BETA_FA,
                        which, seed++);
    CHECK_OK(sp_kda_inputs_destroy(p));
    errors();
    return sp_test_finish("test_inputs_cpu");
}
