/*
 * test_gpu_errors.c — the error paths of sp_copy_batch and sp_pack on CUDA
 * tensors. Each case starts from a valid batch (checked to run), breaks one
 * thing, and requires the specific status, a message naming the argument,
 * no launch, and every byte of the device arena (sources, destinations,
 * workspace, gaps), of host buffers involved and of the outputs unchanged.
 * Mixtures of CPU and CUDA tensors, and of two CUDA devices, are refused
 * with SP_ERR_DEVICE_MISMATCH.
 */
#include "gpu_util.h"

#include <stdint.h>

enum { NP = 3, PAYLOAD = 4096 };

static arena A;
static unsigned char host_buf[PAYLOAD]; /* a CPU buffer for mixed cases */
static unsigned char host_before[PAYLOAD];

typedef struct scene {
    unsigned char *src[NP], *dst[NP]; /* device payloads */
    sp_copy_pair p[NP];
} scene;

/* pairs[0]: f32 [5,7] padded rows -> dense; pairs[1]: bf16 [4,6,3]
 * transposed -> dense; pairs[2]: u8 [33] stride 2 -> dense. Each view sits
 * at the front of a larger payload, so that a broken view a faulty library
 * would still write through stays inside the arena. */
static void scene_make(scene *s, ts_rng *r) {
    arena_reset(&A);
    for (int i = 0; i < NP; i++) {
        s->src[i] = arena_take(&A, PAYLOAD, 0);
        s->dst[i] = arena_take(&A, PAYLOAD, 0);
    }
    arena_poison(&A, r);
    ts_fill_random(host_buf, sizeof host_buf, r);
    memcpy(host_before, host_buf, sizeof host_buf);
    int64_t s0[2] = {5, 7}, st0[2] = {9, 1};
    int64_t s1[3] = {4, 6, 3}, st1[3] = {1, 12, 4};
    int64_t s2[1] = {33}, st2[1] = {2};
    sp_copy_pair *p = s->p;
    sp_device g = sp_cuda(0);
    sp_tensor_view(&p[0].src, s->src[0], 0, SP_F32, 2, s0, st0, g);
    sp_tensor_view(&p[1].src, s->src[1], 0, SP_BF16, 3, s1, st1, g);
    sp_tensor_view(&p[2].src, s->src[2], 0, SP_U8, 1, s2, st2, g);
    sp_tensor_dense(&p[0].dst, s->dst[0], SP_F32, 2, s0, g);
    sp_tensor_dense(&p[1].dst, s->dst[1], SP_BF16, 3, s1, g);
    sp_tensor_dense(&p[2].dst, s->dst[2], SP_U8, 1, s2, g);
}

static int untouched(void) {
    return arena_first_diff(&A) < 0 && memcmp(host_buf, host_before, sizeof host_buf) == 0;
}

static void expect_batch(const char *what, const sp_copy_pair *p, size_t n, sp_status want,
                         const char *needle) {
    reset_last_error();
    uint64_t before = sp_copy_pass_count();
    sp_status got = sp_copy_batch(p, n, NULL);
    CHECKF(got == want, "%s: got %s, expected %s (%s)", what, sp_status_string(got),
           sp_status_string(want), sp_last_error());
    CHECKF(untouched(), "%s: a buffer was written", what);
    CHECKF(sp_copy_pass_count() == before, "%s: a launch ran", what);
    check_message(what, needle);
}

#define BREAK(what, want, needle, stmt)        \
    do {                                       \
        scene s_;                              \
        scene_make(&s_, r);                    \
        sp_copy_pair *p = s_.p;                \
        (void)p;                               \
        stmt;                                  \
        expect_batch(what, s_.p, NP, want, needle); \
    } while (0)

static void test_copy_errors(ts_rng *r, int ndev) {
    /* The unbroken scene runs, and right: every failure below is the break's. */
    scene ok;
    scene_make(&ok, r);
    for (int i = 0; i < NP; i++) {
        sp_tensor hs = arena_on_host(&A, ok.p[i].src), hd = arena_on_host(&A, ok.p[i].dst);
        ts_ref_copy(&hs, &hd);
    }
    uint64_t before = sp_copy_pass_count();
    CHECK_OK(sp_copy_batch(ok.p, NP, NULL));
    CHECK(sp_copy_pass_count() - before == 1);
    CHECK(untouched());

    BREAK("shape", SP_ERR_SHAPE_MISMATCH, "pairs[1]", p[1].dst.shape[2] = 2);
    BREAK("ndim", SP_ERR_SHAPE_MISMATCH, "pairs[1]", p[1].dst.ndim = 2);
    BREAK("dtype of equal size", SP_ERR_DTYPE_MISMATCH, "pairs[1]", p[1].dst.dtype = SP_F16);
    BREAK("dtype", SP_ERR_DTYPE_MISMATCH, "pairs[0]", p[0].dst.dtype = SP_I32);
    BREAK("dst overlaps another dst", SP_ERR_OVERLAP, "pairs[1]", p[1].dst.data = s_.dst[0] + 64);
    BREAK("dst overlaps another pair's src", SP_ERR_OVERLAP, "pairs[1]",
          p[1].dst.data = s_.src[0] + 4);
    BREAK("dst is its own src", SP_ERR_OVERLAP, "pairs[0]", p[0].dst = p[0].src);
    BREAK("dst zero stride", SP_ERR_OVERLAP, "pairs[1]", p[1].dst.strides[1] = 0);
    BREAK("misaligned src", SP_ERR_MISALIGNED, "pairs[0]", p[0].src.data = s_.src[0] + 2);
    BREAK("misaligned dst", SP_ERR_MISALIGNED, "pairs[1]", p[1].dst.data = s_.dst[1] + 1);
    BREAK("negative size", SP_ERR_INVALID_ARGUMENT, "pairs[1]",
          p[1].src.shape[0] = p[1].dst.shape[0] = -4);
    BREAK("byte offsets overflow", SP_ERR_OVERFLOW, "pairs[1]", p[1].src.strides[0] = 1LL << 61);
    BREAK("NULL src data", SP_ERR_INVALID_ARGUMENT, "pairs[1]", p[1].src.data = NULL);

    /* CPU and CUDA mixed: in one pair, either way round, and across pairs. */
    BREAK("CPU src, CUDA dst", SP_ERR_DEVICE_MISMATCH, "pairs[2]", {
        p[2].src.data = host_buf;
        p[2].src.device = sp_cpu();
    });
    BREAK("CUDA src, CPU dst", SP_ERR_DEVICE_MISMATCH, "pairs[2]", {
        p[2].dst.data = host_buf;
        p[2].dst.device = sp_cpu();
    });
    BREAK("a CPU pair after CUDA pairs", SP_ERR_DEVICE_MISMATCH, "pairs[1]", {
        p[1].src.device = p[1].dst.device = sp_cpu();
        p[1].dst.data = host_buf;
    });
    BREAK("CUDA pairs after a CPU pair", SP_ERR_DEVICE_MISMATCH, "pairs[1]", {
        p[0].src.device = p[0].dst.device = sp_cpu();
        p[0].dst.data = host_buf;
    });
    /* Two CUDA devices (the ordinal need not exist for the check to apply). */
    BREAK("cuda:0 and cuda:1 in one pair", SP_ERR_DEVICE_MISMATCH, "pairs[1]",
          p[1].dst.device = sp_cuda(1));
    BREAK("cuda:0 and cuda:1 across pairs", SP_ERR_DEVICE_MISMATCH, "pairs[2]",
          p[2].src.device = p[2].dst.device = sp_cuda(1));

    /* Every tensor on a device that does not exist: an error, not a crash. */
    {
        scene s;
        scene_make(&s, r);
        for (int i = 0; i < NP; i++) s.p[i].src.device = s.p[i].dst.device = sp_cuda(ndev);
        reset_last_error();
        before = sp_copy_pass_count();
        sp_status got = sp_copy_batch(s.p, NP, NULL);
        CHECKF(got == SP_ERR_NO_DEVICE || got == SP_ERR_CUDA || got == SP_ERR_INVALID_ARGUMENT,
               "missing cuda:%d: got %s (%s)", ndev, sp_status_string(got), sp_last_error());
        CHECK(sp_copy_pass_count() == before);
        CHECK(untouched());
        check_message("missing device", NULL);
        /* ... and the runtime's last-error state is not left to haunt the
         * caller's next launch check. */
        CHECK(cudaGetLastError() == cudaSuccess);
    }

    /* 70 pairs (two launches' worth), the last one broken: nothing runs. */
    {
        enum { N = 70 };
        static sp_copy_pair p[N];
        scene s;
        scene_make(&s, r);
        for (int i = 0; i < N; i++) {
            int64_t sh[1] = {5}, st[1] = {-2};
            int b = i % NP, slot = i / NP;
            sp_tensor_view(&p[i].src, s.src[b] + slot * 40, 8, SP_F32, 1, sh, st, sp_cuda(0));
            sp_tensor_dense(&p[i].dst, s.dst[b] + slot * 40, SP_F32, 1, sh, sp_cuda(0));
        }
        p[N - 1].dst.dtype = SP_I32;
        expect_batch("70 pairs, last one broken", p, N, SP_ERR_DTYPE_MISMATCH, "pairs[69]");
        p[N - 1].dst.dtype = SP_F32;
        p[N - 1].dst.device = sp_cpu();
        expect_batch("70 pairs, last one on the CPU", p, N, SP_ERR_DEVICE_MISMATCH, "pairs[69]");
        p[N - 1].dst.device = sp_cuda(0);
        before = sp_copy_pass_count();
        CHECK_OK(sp_copy_batch(p, N, NULL)); /* repaired, it runs: two launches */
        CHECK(sp_copy_pass_count() - before == 2);
    }
}

/* ---- sp_pack -------------------------------------------------------------------- */

enum { NI = 4 };

typedef struct pscene {
    unsigned char *src[NI], *ws;
    sp_tensor in[NI], out[NI], out_before[NI];
    size_t wsb;
} pscene;

/* inputs: [0] f32 [8,8] transposed, [1] dense bf16 [3,5], [2] u16 [16,8]
 * padded rows, [3] f64 [32] reversed; the workspace 1 byte past 256. */
static void pscene_make(pscene *s, ts_rng *r) {
    arena_reset(&A);
    for (int i = 0; i < NI; i++) s->src[i] = arena_take(&A, PAYLOAD, 0);
    int64_t s0[2] = {8, 8}, st0[2] = {1, 8}, s1[2] = {3, 5}, s2[2] = {16, 8}, st2[2] = {9, 1},
            s3[1] = {32}, st3[1] = {-1};
    sp_device g = sp_cuda(0);
    sp_tensor_view(&s->in[0], s->src[0], 0, SP_F32, 2, s0, st0, g);
    sp_tensor_dense(&s->in[1], s->src[1], SP_BF16, 2, s1, g);
    sp_tensor_view(&s->in[2], s->src[2], 0, SP_U16, 2, s2, st2, g);
    sp_tensor_view(&s->in[3], s->src[3], 31, SP_F64, 1, s3, st3, g);
    s->wsb = 0;
    CHECK_OK(sp_pack_workspace_bytes(s->in, NI, &s->wsb));
    s->ws = arena_take(&A, s->wsb + PAYLOAD, 1);
    arena_poison(&A, r);
    ts_fill_random(host_buf, sizeof host_buf, r);
    memcpy(host_before, host_buf, sizeof host_buf);
    ts_fill_random(s->out, sizeof s->out, r);
    memcpy(s->out_before, s->out, sizeof s->out);
}

static void expect_pack(const char *what, pscene *s, const sp_tensor *in, void *ws, size_t wsb,
                        sp_status want, const char *needle) {
    reset_last_error();
    uint64_t before = sp_copy_pass_count();
    size_t copied = 99;
    sp_status got = sp_pack(in, NI, ws, wsb, s->out, &copied, NULL);
    CHECKF(got == want, "%s: got %s, expected %s (%s)", what, sp_status_string(got),
           sp_status_string(want), sp_last_error());
    CHECKF(untouched() && memcmp(s->out, s->out_before, sizeof s->out) == 0 && copied == 99,
           "%s: the workspace, an input or an output changed", what);
    CHECKF(sp_copy_pass_count() == before, "%s: a launch ran", what);
    check_message(what, needle);
}

#define PBREAK(what, want, needle, stmt, ws, wsb)                \
    do {                                                         \
        pscene s_;                                               \
        pscene_make(&s_, r);                                     \
        sp_tensor *in = s_.in;                                   \
        (void)in;                                                \
        stmt;                                                    \
        expect_pack(what, &s_, s_.in, ws, wsb, want, needle);    \
    } while (0)

static void test_pack_errors(ts_rng *r) {
    {
        pscene s;
        pscene_make(&s, r);
        CHECK(s.wsb == 3 * 256 + 255);
        size_t copied = 0;
        uint64_t before = sp_copy_pass_count();
        CHECK_OK(sp_pack(s.in, NI, s.ws, s.wsb, s.out, &copied, NULL)); /* exactly enough */
        CHECK(copied == 3 && sp_copy_pass_count() - before == 1);
        CHECK(s.out[1].data == s.in[1].data); /* the dense input, as itself */
        for (int i = 0; i < NI; i++) {
            CHECK(sp_tensor_is_dense(&s.out[i]));
            if (i == 1) continue;
            sp_tensor hi = arena_on_host(&A, s.in[i]), ho = arena_on_host(&A, s.out[i]);
            ts_ref_copy(&hi, &ho);
        }
        CHECK(arena_first_diff(&A) < 0); /* slots right, workspace gaps intact */
    }
    PBREAK("workspace short by 1", SP_ERR_WORKSPACE_TOO_SMALL, "workspace", (void)0, s_.ws,
           s_.wsb - 1);
    PBREAK("NULL workspace", SP_ERR_INVALID_ARGUMENT, "workspace", (void)0, NULL, s_.wsb);
    PBREAK("misaligned input", SP_ERR_MISALIGNED, "inputs[3]", in[3].data = (char *)in[3].data + 4,
           s_.ws, s_.wsb);
    PBREAK("workspace overlaps an input", SP_ERR_OVERLAP, "workspace", (void)0, s_.src[0] - 100,
           s_.wsb);
    PBREAK("a CPU input among CUDA ones", SP_ERR_DEVICE_MISMATCH, "inputs[2]", {
        in[2].device = sp_cpu();
        in[2].data = host_buf;
    }, s_.ws, s_.wsb);
    PBREAK("a dense CPU input among CUDA ones", SP_ERR_DEVICE_MISMATCH, "inputs[1]", {
        in[1].device = sp_cpu();
        in[1].data = host_buf;
    }, s_.ws, s_.wsb);
    PBREAK("cuda:1 among cuda:0", SP_ERR_DEVICE_MISMATCH, "inputs[3]", in[3].device = sp_cuda(1),
           s_.ws, s_.wsb);
}

int main(void) {
    gpu_require();
    int ndev = 0;
    CUDA_OK(cudaGetDeviceCount(&ndev));
    ts_rng r;
    ts_rng_seed(&r, 0xe77025ull);
    arena_init(&A, (size_t)1 << 20);
    test_copy_errors(&r, ndev);
    test_pack_errors(&r);
    arena_free(&A);
    return sp_test_finish("test_gpu_errors");
}
