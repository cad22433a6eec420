/*
 * test_gpu_device.c — which CUDA device a call runs on, what only the device
 * run can check (the copy and error bodies themselves are test_copy_batch.c
 * and test_errors.c, run on device memory as *_gpu):
 *
 * - the caller's current device is left as it was, after a copy and after a
 *   failed call; with two GPUs, tensors on cuda:0 are copied there while the
 *   caller sits on cuda:1;
 * - a device that does not exist is an error, not a crash, and leaves no
 *   error in the CUDA runtime's last-error state for the caller's next check;
 * - two CUDA ordinals in one call (the second need not exist for the check
 *   to apply) are refused with SP_ERR_DEVICE_MISMATCH, in one pair, across
 *   pairs, and among sp_pack's inputs.
 *
 * Every case checks every byte of the device arena afterwards.
 */
#include "check.h"
#include "cuda_ok.h"
#include "test_support.h"
#include "ts_mem.h"

#include <stdint.h>

static ts_arena A;

/* Two pairs, f32 [64,100] rows of 128 -> dense, on a freshly poisoned arena. */
static void make_pairs(sp_copy_pair p[2], ts_rng *r) {
    int64_t shape[2] = {64, 100}, strides[2] = {128, 1};
    ts_arena_reset(&A);
    for (int i = 0; i < 2; i++) {
        unsigned char *s = ts_arena_take(&A, 64 * 128 * 4, 0);
        unsigned char *d = ts_arena_take(&A, 64 * 100 * 4, 0);
        CHECK_OK(sp_tensor_view(&p[i].src, s, 0, SP_F32, 2, shape, strides, sp_cuda(0)));
        CHECK_OK(sp_tensor_dense(&p[i].dst, d, SP_F32, 2, shape, sp_cuda(0)));
    }
    ts_arena_poison(&A, r);
}

static void expect_copy(const sp_copy_pair *p) {
    sp_tensor hs = ts_arena_on_image(&A, p->src), hd = ts_arena_on_image(&A, p->dst);
    ts_ref_copy(&hs, &hd);
}

/* The call fails with `want` (any status but SP_OK when want is SP_OK),
 * names `needle`, runs nothing and writes nothing. */
static void expect_refused(const char *what, sp_status got, sp_status want, const char *needle,
                           uint64_t passes_before) {
    CHECKF(want == SP_OK ? got != SP_OK : got == want, "%s: got %s (%s)", what,
           sp_status_string(got), sp_last_error());
    CHECKF(sp_copy_pass_count() == passes_before, "%s: a launch ran", what);
    CHECKF(ts_arena_first_diff(&A) < 0, "%s: the arena changed", what);
    check_message(what, needle);
}

static void test_current_device(ts_rng *r, int ndev) {
    int cur = -1;
    sp_copy_pair p[2];
    make_pairs(p, r);

    /* A device that does not exist: an error, nothing written, and the
     * current device is still ours. */
    sp_copy_pair bad = p[0];
    bad.src.device = bad.dst.device = sp_cuda(ndev);
    reset_last_error();
    uint64_t before = sp_copy_pass_count();
    expect_refused("missing device", sp_copy_batch(&bad, 1, NULL), SP_OK, NULL, before);
    CUDA_OK(cudaGetDevice(&cur));
    CHECKF(cur == 0, "current device %d after a failed call, expected 0", cur);

    expect_copy(&p[0]);
    if (ndev < 2) {
        /* One device: the copy runs where we already are. */
        before = sp_copy_pass_count();
        CHECK_OK(sp_copy_batch(&p[0], 1, NULL));
        CHECK(sp_copy_pass_count() - before == 1);
        CUDA_OK(cudaGetDevice(&cur));
        CHECKF(cur == 0, "current device %d after the copy, expected 0", cur);
        CHECK(ts_arena_first_diff(&A) < 0);
        printf("current device: one GPU, switching not exercised\n");
        return;
    }
    /* Caller on device 1, tensors on device 0: runs there, comes back to 1. */
    CUDA_OK(cudaSetDevice(1));
    CHECK_OK(sp_copy_batch(&p[0], 1, NULL));
    CUDA_OK(cudaGetDevice(&cur));
    CHECKF(cur == 1, "current device %d after the copy, expected 1", cur);
    CUDA_OK(cudaSetDevice(0));
    CHECK(ts_arena_first_diff(&A) < 0);
}

static void test_missing_device(ts_rng *r, int ndev) {
    sp_copy_pair p[2];
    make_pairs(p, r);
    for (int i = 0; i < 2; i++) p[i].src.device = p[i].dst.device = sp_cuda(ndev);
    reset_last_error();
    uint64_t before = sp_copy_pass_count();
    sp_status got = sp_copy_batch(p, 2, NULL);
    CHECKF(got == SP_ERR_NO_DEVICE || got == SP_ERR_CUDA || got == SP_ERR_INVALID_ARGUMENT,
           "missing cuda:%d: got %s (%s)", ndev, sp_status_string(got), sp_last_error());
    expect_refused("missing device, every tensor", got, got, NULL, before);
    /* ... and the runtime's last-error state is not left to haunt the
     * caller's next launch check. */
    CHECK(cudaGetLastError() == cudaSuccess);
}

static void test_two_ordinals(ts_rng *r) {
    sp_copy_pair p[2];
    make_pairs(p, r);
    uint64_t before = sp_copy_pass_count();
    p[1].dst.device = sp_cuda(1);
    reset_last_error();
    expect_refused("cuda:0 and cuda:1 in one pair", sp_copy_batch(p, 2, NULL),
                   SP_ERR_DEVICE_MISMATCH, "pairs[1]", before);
    p[1].src.device = sp_cuda(1);
    reset_last_error();
    expect_refused("cuda:0 and cuda:1 across pairs", sp_copy_batch(p, 2, NULL),
                   SP_ERR_DEVICE_MISMATCH, "pairs[1]", before);

    sp_tensor in[2] = {p[0].src, p[1].src}, out[2], out_before[2];
    size_t wsb = 0, copied = 99;
    in[1].device = sp_cuda(0);
    CHECK_OK(sp_pack_workspace_bytes(in, 2, &wsb));
    unsigned char *ws = ts_arena_take(&A, wsb, 0);
    ts_arena_poison(&A, r);
    in[1].device = sp_cuda(1);
    ts_fill_random(out, sizeof out, r);
    memcpy(out_before, out, sizeof out);
    reset_last_error();
    expect_refused("cuda:1 among cuda:0 inputs", sp_pack(in, 2, ws, wsb, out, &copied, NULL),
                   SP_ERR_DEVICE_MISMATCH, "inputs[1]", before);
    CHECK(copied == 99 && memcmp(out, out_before, sizeof out) == 0);
}

int main(void) {
    const ts_mem *m = ts_mem_or_skip("cuda");
    int ndev = 0;
    CUDA_OK(cudaGetDeviceCount(&ndev));
    ts_rng r;
    ts_rng_seed(&r, 0xde71ceull);
    ts_arena_init(&A, m, (size_t)1 << 20);
    test_current_device(&r, ndev);
    test_missing_device(&r, ndev);
    test_two_ordinals(&r);
    ts_arena_free(&A);
    return sp_test_finish("test_gpu_device");
}
