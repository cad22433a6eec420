/*
 * test_errors.c — every error path of sp_copy_batch and sp_pack, on one
 * memory backend (ts_mem.h): built as test_errors (host memory) and
 * test_errors_gpu (device memory). Each case starts from a batch that is
 * valid (checked to run, and right), breaks one thing, and requires the
 * specific status, a last-error message naming the argument, no pass, and
 * every byte of the arena (sources, destinations, workspace, gaps), of the
 * host buffer that mixed-device cases point at, and of the outputs left
 * exactly as it was. Views on the other kind of device (CPU and CUDA mixed)
 * are refused with SP_ERR_DEVICE_MISMATCH.
 *
 * The host run also covers what needs no memory: the constructors, the
 * status and dtype strings, the version.
 */
#include "check.h"
#include "test_support.h"
#include "ts_mem.h"

#include <stdint.h>
#include <string.h>

enum { NP = 3, PAYLOAD = 4096 };

static const ts_mem *M;
static ts_arena A;
static unsigned char host_buf[PAYLOAD]; /* what views on the CPU point at in the device run */
static unsigned char host_before[PAYLOAD];

/* Move t to the other kind of device: to CUDA in the host run (its data
 * stays: a correct library never reaches it), to the CPU on host_buf in
 * the device run. */
static void to_other_device(sp_tensor *t) {
    if (M->device.type == SP_DEVICE_CPU) {
        t->device = sp_cuda(0);
    } else {
        t->device = sp_cpu();
        t->data = host_buf;
    }
}

static void poison(ts_rng *r) {
    ts_arena_poison(&A, r);
    ts_fill_random(host_buf, sizeof host_buf, r);
    memcpy(host_before, host_buf, sizeof host_buf);
}

static int untouched(void) {
    return ts_arena_first_diff(&A) < 0 && memcmp(host_buf, host_before, sizeof host_buf) == 0;
}

/* ---- a valid three-pair batch to break ------------------------------------ */

typedef struct scene {
    unsigned char *src[NP], *dst[NP];
    sp_copy_pair p[NP];
} scene;

/* pairs[0]: f32 [5,7], padded rows -> dense; pairs[1]: bf16 [4,6,3],
 * transposed -> dense; pairs[2]: u8 [33], stride 2 -> dense. Each view sits
 * at the front of a much larger payload, so a broken view that a faulty
 * library would still write through stays inside memory we check. */
static void scene_make(scene *s, ts_rng *r) {
    ts_arena_reset(&A);
    for (int i = 0; i < NP; i++) {
        s->src[i] = ts_arena_take(&A, PAYLOAD, 0);
        s->dst[i] = ts_arena_take(&A, PAYLOAD, 0);
    }
    poison(r);
    int64_t s0[2] = {5, 7}, st0[2] = {9, 1};
    int64_t s1[3] = {4, 6, 3}, st1[3] = {1, 12, 4};
    int64_t s2[1] = {33}, st2[1] = {2};
    sp_copy_pair *p = s->p;
    const sp_device dev = M->device;
    sp_tensor_view(&p[0].src, s->src[0], 0, SP_F32, 2, s0, st0, dev);
    sp_tensor_view(&p[1].src, s->src[1], 0, SP_BF16, 3, s1, st1, dev);
    sp_tensor_view(&p[2].src, s->src[2], 0, SP_U8, 1, s2, st2, dev);
    sp_tensor_dense(&p[0].dst, s->dst[0], SP_F32, 2, s0, dev);
    sp_tensor_dense(&p[1].dst, s->dst[1], SP_BF16, 3, s1, dev);
    sp_tensor_dense(&p[2].dst, s->dst[2], SP_U8, 1, s2, dev);
}

/* The reference result of pairs p on the image: what a run must leave. */
static void expect_copies(const sp_copy_pair *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        sp_tensor hs = ts_arena_on_image(&A, p[i].src), hd = ts_arena_on_image(&A, p[i].dst);
        ts_ref_copy(&hs, &hd);
    }
}

static void expect_batch(const char *what, const sp_copy_pair *p, size_t n, sp_status want,
                         const char *needle) {
    reset_last_error();
    uint64_t before = sp_copy_pass_count();
    sp_status got = sp_copy_batch(p, n, NULL);
    CHECKF(got == want, "%s: got %s, expected %s (%s)", what, sp_status_string(got),
           sp_status_string(want), sp_last_error());
    CHECKF(untouched(), "%s: a buffer was written", what);
    CHECKF(sp_copy_pass_count() == before, "%s: a pass ran", what);
    check_message(what, needle);
}

/* On a fresh scene s_ of `type` (`view` naming its views), run `stmt`, then
 * `expect`. */
#define ON_FRESH(type, make, view, views, stmt, expect) \
    do {                                                \
        type s_;                                        \
        make(&s_, r);                                   \
        view = s_.views;                                \
        (void)views;                                    \
        stmt;                                           \
        expect;                                         \
    } while (0)

/* Break the fresh scene with `stmt`, expect `want` naming `needle`. */
#define BREAK(what, want, needle, stmt) \
    ON_FRESH(scene, scene_make, sp_copy_pair *p, p, stmt, \
             expect_batch(what, s_.p, NP, want, needle))

static void test_copy_errors(ts_rng *r) {
    /* The unbroken scene runs, and right: every failure below is the break's. */
    scene ok;
    scene_make(&ok, r);
    expect_copies(ok.p, NP);
    uint64_t before = sp_copy_pass_count();
    CHECK_OK(sp_copy_batch(ok.p, NP, NULL));
    CHECK(sp_copy_pass_count() - before == 1);
    CHECK(untouched());

    BREAK("shape", SP_ERR_SHAPE_MISMATCH, "pairs[1]", p[1].dst.shape[2] = 2);
    BREAK("shape, other side", SP_ERR_SHAPE_MISMATCH, "pairs[1]", p[1].src.shape[0] = 5);
    BREAK("ndim", SP_ERR_SHAPE_MISMATCH, "pairs[1]", p[1].dst.ndim = 2);
    BREAK("same count, other shape", SP_ERR_SHAPE_MISMATCH, "pairs[2]", {
        int64_t sh[2];
        sh[0] = 3;
        sh[1] = 11;
        sp_tensor_dense(&p[2].dst, s_.dst[2], SP_U8, 2, sh, M->device);
    });
    BREAK("dtype of equal size", SP_ERR_DTYPE_MISMATCH, "pairs[1]", p[1].dst.dtype = SP_F16);
    BREAK("dtype", SP_ERR_DTYPE_MISMATCH, "pairs[0]", p[0].dst.dtype = SP_I32);
    BREAK("dtype wider", SP_ERR_DTYPE_MISMATCH, "pairs[2]", p[2].src.dtype = SP_U16);

    /* Overlaps. */
    BREAK("dst overlaps another dst", SP_ERR_OVERLAP, "pairs[1]", p[1].dst.data = s_.dst[0] + 64);
    /* Reversed: element [0,0,0] is the highest, the lowest lands on the
     * first byte of pairs[2].dst. */
    BREAK("dst overlaps another dst (reversed)", SP_ERR_OVERLAP, "pairs[1]", {
        p[1].dst.strides[0] = -18;
        p[1].dst.strides[1] = -3;
        p[1].dst.strides[2] = -1;
        p[1].dst.data = s_.dst[2] + 2 * 71;
    });
    BREAK("dst overlaps another pair's src", SP_ERR_OVERLAP, "pairs[1]",
          p[1].dst.data = s_.src[0] + 4);
    BREAK("dst overlaps its own src", SP_ERR_OVERLAP, "pairs[2]", p[2].dst.data = s_.src[2] + 1);
    BREAK("dst is its own src", SP_ERR_OVERLAP, "pairs[0]", p[0].dst = p[0].src);
    BREAK("dst zero stride", SP_ERR_OVERLAP, "pairs[1]", p[1].dst.strides[1] = 0);
    BREAK("dst interleaved strides", SP_ERR_OVERLAP, "pairs[0]", p[0].dst.strides[0] = 3);

    /* Devices: the other kind in one pair, either way round, and across pairs. */
    BREAK("src on the other device", SP_ERR_DEVICE_MISMATCH, "pairs[2]",
          to_other_device(&p[2].src));
    BREAK("dst on the other device", SP_ERR_DEVICE_MISMATCH, "pairs[1]",
          to_other_device(&p[1].dst));
    BREAK("a pair on the other device after ours", SP_ERR_DEVICE_MISMATCH, "pairs[1]", {
        to_other_device(&p[1].src);
        to_other_device(&p[1].dst);
    });
    BREAK("pairs of ours after one on the other device", SP_ERR_DEVICE_MISMATCH, "pairs[1]", {
        to_other_device(&p[0].src);
        to_other_device(&p[0].dst);
    });
    BREAK("unknown device type", SP_ERR_INVALID_ARGUMENT, "pairs[0]", {
        for (int i = 0; i < NP; i++) p[i].src.device.type = p[i].dst.device.type = 7;
    });
    if (!sp_cuda_available()) {
        BREAK("CUDA without a device", SP_ERR_NO_DEVICE, NULL, {
            for (int i = 0; i < NP; i++) p[i].src.device = p[i].dst.device = sp_cuda(0);
        });
    }

    /* Malformed views. */
    BREAK("negative size", SP_ERR_INVALID_ARGUMENT, "pairs[1]",
          p[1].src.shape[0] = p[1].dst.shape[0] = -4);
    BREAK("negative size in dst only", SP_ERR_INVALID_ARGUMENT, "pairs[1]",
          p[1].dst.shape[1] = -6);
    BREAK("numel overflow", SP_ERR_OVERFLOW, "pairs[1]", {
        p[1].src.shape[0] = p[1].dst.shape[0] = 1LL << 32;
        p[1].src.shape[1] = p[1].dst.shape[1] = 1LL << 32;
    });
    BREAK("byte offsets overflow", SP_ERR_OVERFLOW, "pairs[1]", p[1].src.strides[0] = 1LL << 61);
    BREAK("ndim 9", SP_ERR_INVALID_ARGUMENT, "pairs[1]", p[1].src.ndim = p[1].dst.ndim = 9);
    BREAK("ndim -1", SP_ERR_INVALID_ARGUMENT, "pairs[1]", p[1].src.ndim = p[1].dst.ndim = -1);
    BREAK("unknown dtype", SP_ERR_INVALID_ARGUMENT, "pairs[1]",
          p[1].src.dtype = p[1].dst.dtype = SP_DTYPE_COUNT_);
    BREAK("negative dtype", SP_ERR_INVALID_ARGUMENT, "pairs[1]",
          p[1].src.dtype = p[1].dst.dtype = -1);
    BREAK("misaligned src", SP_ERR_MISALIGNED, "pairs[0]", p[0].src.data = s_.src[0] + 2);
    BREAK("misaligned dst", SP_ERR_MISALIGNED, "pairs[1]", p[1].dst.data = s_.dst[1] + 1);

    {
        scene s;
        scene_make(&s, r);
        expect_batch("NULL pairs", NULL, NP, SP_ERR_INVALID_ARGUMENT, NULL);
    }
}

/* A batch longer than one pass: an error in the last pair, or an overlap
 * between the first and the last chunk, must stop everything, including
 * the chunks that are valid on their own. */
static void test_long_batch(ts_rng *r) {
    enum { N = 70 };
    static sp_copy_pair p[N];
    scene s; /* three buffers each side, 70 small pairs spread over them */
    scene_make(&s, r);
    for (int i = 0; i < N; i++) {
        int64_t sh[1] = {5}, st[1] = {-2};
        int b = i % NP, slot = i / NP;
        sp_tensor_view(&p[i].src, s.src[b] + slot * 40, 8, SP_F32, 1, sh, st, M->device);
        sp_tensor_dense(&p[i].dst, s.dst[b] + slot * 40, SP_F32, 1, sh, M->device);
    }
    p[N - 1].dst.dtype = SP_I32;
    expect_batch("70 pairs, last one broken", p, N, SP_ERR_DTYPE_MISMATCH, "pairs[69]");
    p[N - 1].dst.dtype = SP_F32;
    sp_tensor keep = p[N - 1].dst;
    to_other_device(&p[N - 1].dst);
    expect_batch("70 pairs, last one on the other device", p, N, SP_ERR_DEVICE_MISMATCH,
                 "pairs[69]");
    p[N - 1].dst = keep;
    keep = p[N - 2].dst;
    p[N - 2].dst.data = (char *)p[2].src.data - 4; /* across chunks */
    expect_batch("70 pairs, cross-chunk overlap", p, N, SP_ERR_OVERLAP, "pairs[68]");
    p[N - 2].dst = keep;
    /* Repaired, it runs, right, in two passes. */
    expect_copies(p, N);
    uint64_t before = sp_copy_pass_count();
    CHECK_OK(sp_copy_batch(p, N, NULL));
    CHECK(sp_copy_pass_count() - before == 2);
    CHECK(untouched());
}

/* More than one pass, and pairs[0].dst is the pairs array itself: pass one
 * overwrites it with a forged array whose last pair writes a buffer nobody
 * validated. Every pair is planned before a byte moves, so the last pair is
 * still copied as it was given and the forged destination stays untouched.
 * Host memory only: the array is host memory. */
static void test_pairs_in_a_destination(ts_rng *r) {
    if (M->device.type != SP_DEVICE_CPU) return;
    enum { N = SP_MAX_PAIRS_PER_LAUNCH + 1, ROW = 64 };
    static sp_copy_pair p[N], forged[N];
    ts_arena_reset(&A);
    unsigned char *img = ts_arena_take(&A, sizeof p, 0);
    unsigned char *src = ts_arena_take(&A, (size_t)ROW * N, 0);
    unsigned char *dst = ts_arena_take(&A, (size_t)ROW * N, 0);
    unsigned char *victim = ts_arena_take(&A, ROW, 0);
    poison(r);
    const int64_t row[1] = {ROW}, all[1] = {(int64_t)sizeof p};
    for (int i = 1; i < N; i++) {
        sp_tensor_dense(&p[i].src, src + ROW * i, SP_U8, 1, row, M->device);
        sp_tensor_dense(&p[i].dst, dst + ROW * i, SP_U8, 1, row, M->device);
    }
    sp_tensor_dense(&p[0].src, img, SP_U8, 1, all, M->device);
    sp_tensor_dense(&p[0].dst, p, SP_U8, 1, all, M->device);
    memcpy(forged, p, sizeof p);
    forged[N - 1].dst.data = victim;
    memcpy(ts_arena_image(&A, img), forged, sizeof p);
    ts_arena_upload(&A, img, sizeof p);
    for (int i = 1; i < N; i++) expect_copies(&p[i], 1);
    uint64_t before = sp_copy_pass_count();
    CHECK_OK(sp_copy_batch(p, N, NULL));
    CHECK(sp_copy_pass_count() - before == 2);
    CHECK(memcmp(p, forged, sizeof p) == 0);
    long diff = ts_arena_first_diff(&A);
    CHECKF(diff < 0, "65 pairs over their own array: arena byte %ld (victim at %ld) differs", diff,
           (long)(victim - A.base));
}

/* ---- sp_pack ---------------------------------------------------------------- */

enum { NI = 4 };

typedef struct pscene {
    unsigned char *src[NI], *ws;
    sp_tensor in[NI], out[NI], out_before[NI];
    size_t wsb;
} pscene;

/* inputs: [0] f32 [8,8] transposed, [1] dense bf16 [3,5], [2] u16 [16,8]
 * padded rows, [3] f64 [32] reversed. Every copied input is a multiple of
 * 256 bytes, and the workspace sits 1 byte past 256, so that the size
 * sp_pack_workspace_bytes gives is exactly what this address needs. */
static void pscene_make(pscene *s, ts_rng *r) {
    ts_arena_reset(&A);
    for (int i = 0; i < NI; i++) s->src[i] = ts_arena_take(&A, PAYLOAD, 0);
    int64_t s0[2] = {8, 8}, st0[2] = {1, 8}, s1[2] = {3, 5}, s2[2] = {16, 8}, st2[2] = {9, 1},
            s3[1] = {32}, st3[1] = {-1};
    const sp_device dev = M->device;
    sp_tensor_view(&s->in[0], s->src[0], 0, SP_F32, 2, s0, st0, dev);
    sp_tensor_dense(&s->in[1], s->src[1], SP_BF16, 2, s1, dev);
    sp_tensor_view(&s->in[2], s->src[2], 0, SP_U16, 2, s2, st2, dev);
    sp_tensor_view(&s->in[3], s->src[3], 31, SP_F64, 1, s3, st3, dev);
    s->wsb = 0;
    CHECK_OK(sp_pack_workspace_bytes(s->in, NI, &s->wsb));
    s->ws = ts_arena_take(&A, s->wsb + PAYLOAD, 1);
    poison(r);
    ts_fill_random(s->out, sizeof s->out, r);
    memcpy(s->out_before, s->out, sizeof s->out);
}

/* The reference result of a pack on the image: each input that was copied
 * (its output is not the input itself) lands in its output. */
static void expect_packed(const sp_tensor *in, const sp_tensor *out, int n) {
    for (int i = 0; i < n; i++) {
        if (out[i].data == in[i].data) continue;
        sp_tensor hi = ts_arena_on_image(&A, in[i]), ho = ts_arena_on_image(&A, out[i]);
        ts_ref_copy(&hi, &ho);
    }
}

static void expect_pack(const char *what, pscene *s, const sp_tensor *in, void *ws, size_t wsb,
                        sp_tensor *out, sp_status want, const char *needle) {
    reset_last_error();
    uint64_t before = sp_copy_pass_count();
    size_t copied = 99;
    sp_status got = sp_pack(in, NI, ws, wsb, out, &copied, NULL);
    CHECKF(got == want, "%s: got %s, expected %s (%s)", what, sp_status_string(got),
           sp_status_string(want), sp_last_error());
    CHECKF(untouched() && memcmp(s->out, s->out_before, sizeof s->out) == 0 && copied == 99,
           "%s: the workspace, an input or an output changed", what);
    CHECKF(sp_copy_pass_count() == before, "%s: a pass ran", what);
    check_message(what, needle);
}

#define PBREAK(what, want, needle, stmt, ...) \
    ON_FRESH(pscene, pscene_make, sp_tensor *in, in, stmt, \
             expect_pack(what, &s_, __VA_ARGS__, want, needle))

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
        for (int i = 0; i < NI; i++) CHECK(sp_tensor_is_dense(&s.out[i]));
        expect_packed(s.in, s.out, NI);
        CHECK(ts_arena_first_diff(&A) < 0); /* slots right, workspace gaps intact */
    }
#define WS s_.ws, s_.wsb, s_.out
    PBREAK("workspace short by 1", SP_ERR_WORKSPACE_TOO_SMALL, "workspace", (void)0, s_.in,
           s_.ws, s_.wsb - 1, s_.out);
    PBREAK("workspace of 0 bytes", SP_ERR_WORKSPACE_TOO_SMALL, "workspace", (void)0, s_.in,
           s_.ws, 0, s_.out);
    PBREAK("NULL workspace", SP_ERR_INVALID_ARGUMENT, "workspace", (void)0, s_.in, NULL, s_.wsb,
           s_.out);
    PBREAK("NULL inputs", SP_ERR_INVALID_ARGUMENT, NULL, (void)0, NULL, WS);
    PBREAK("NULL outputs", SP_ERR_INVALID_ARGUMENT, NULL, (void)0, s_.in, s_.ws, s_.wsb, NULL);
    PBREAK("negative size", SP_ERR_INVALID_ARGUMENT, "inputs[1]", in[1].shape[0] = -3, s_.in, WS);
    PBREAK("unknown dtype", SP_ERR_INVALID_ARGUMENT, "inputs[2]", in[2].dtype = 99, s_.in, WS);
    PBREAK("ndim 9", SP_ERR_INVALID_ARGUMENT, "inputs[0]", in[0].ndim = 9, s_.in, WS);
    PBREAK("misaligned input", SP_ERR_MISALIGNED, "inputs[3]",
           in[3].data = (char *)in[3].data + 4, s_.in, WS);
    PBREAK("misaligned dense input", SP_ERR_MISALIGNED, "inputs[1]",
           in[1].data = (char *)in[1].data + 1, s_.in, WS);
    PBREAK("an input on the other device", SP_ERR_DEVICE_MISMATCH, "inputs[2]",
           to_other_device(&in[2]), s_.in, WS);
    PBREAK("a dense input on the other device", SP_ERR_DEVICE_MISMATCH, "inputs[1]",
           to_other_device(&in[1]), s_.in, WS);
    if (!sp_cuda_available())
        PBREAK("CUDA without a device", SP_ERR_NO_DEVICE, NULL,
               for (int i = 0; i < NI; i++) in[i].device = sp_cuda(0), s_.in, WS);
    /* The first slot (the next 256-aligned address) covers inputs[0]. */
    PBREAK("workspace overlaps an input", SP_ERR_OVERLAP, "workspace", (void)0, s_.in,
           s_.src[0] - 100, s_.wsb, s_.out);
    /* The dense input would be returned as itself and then overwritten. */
    PBREAK("workspace overlaps a dense input", SP_ERR_OVERLAP, "workspace", (void)0, s_.in,
           s_.src[1] - 200, s_.wsb, s_.out);
#undef WS

    /* More inputs than one pass takes: SP_ERR_UNSUPPORTED, nothing written. */
    {
        enum { MANY = SP_MAX_PAIRS_PER_LAUNCH + 1 };
        static sp_tensor many[MANY], mout[MANY], mout0[MANY];
        ts_arena_reset(&A);
        unsigned char *src = ts_arena_take(&A, 64, 0);
        int64_t sh[1] = {4}, st[1] = {-1};
        for (int i = 0; i < MANY; i++)
            sp_tensor_view(&many[i], src, 3, SP_U8, 1, sh, st, M->device);
        size_t need = 0;
        CHECK_OK(sp_pack_workspace_bytes(many, MANY, &need));
        unsigned char *ws = ts_arena_take(&A, need, 0);
        poison(r);
        ts_fill_random(mout, sizeof mout, r);
        memcpy(mout0, mout, sizeof mout);
        reset_last_error();
        CHECK_STATUS(sp_pack(many, MANY, ws, need, mout, NULL, NULL), SP_ERR_UNSUPPORTED);
        CHECK(untouched() && memcmp(mout, mout0, sizeof mout) == 0);
        check_message("65 inputs", "inputs");
    }

    /* An input lying in the workspace's unused tail is fine. */
    {
        pscene s;
        pscene_make(&s, r);
        unsigned char *tail = s.ws + s.wsb + 64;
        sp_tensor in[NI];
        memcpy(in, s.in, sizeof in);
        int64_t sh[1] = {32}, st[1] = {-1};
        sp_tensor_view(&in[3], tail, 31, SP_F64, 1, sh, st, M->device);
        CHECK_OK(sp_pack(in, NI, s.ws, s.wsb + PAYLOAD, s.out, NULL, NULL));
        CHECK(s.out[3].data != in[3].data);
        expect_packed(in, s.out, NI);
        CHECK(ts_arena_first_diff(&A) < 0);
    }

    /* sp_pack_workspace_bytes looks at layouts only: views with no data yet
     * (NULL) or on any device, even one it does not know, size as the placed
     * views do; a malformed layout is still refused. */
    {
        pscene s;
        pscene_make(&s, r);
        sp_tensor in[NI];
        memcpy(in, s.in, sizeof in);
        for (int i = 0; i < NI; i++) in[i].data = NULL;
        in[1].device.type = 7;
        in[2].device.ordinal = -3;
        size_t b = 42;
        CHECK_OK(sp_pack_workspace_bytes(in, NI, &b));
        CHECK(b == s.wsb);
        in[3].shape[0] = -1;
        b = 42;
        reset_last_error();
        CHECK_STATUS(sp_pack_workspace_bytes(in, NI, &b), SP_ERR_INVALID_ARGUMENT);
        check_message("workspace bytes, no data, negative size", "inputs[3]");
        CHECK(b == 42);
    }

    /* sp_pack_workspace_bytes. */
    pscene s;
    pscene_make(&s, r);
    size_t b = 42;
    reset_last_error();
    CHECK_STATUS(sp_pack_workspace_bytes(s.in, NI, NULL), SP_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(sp_pack_workspace_bytes(NULL, NI, &b), SP_ERR_INVALID_ARGUMENT);
    s.in[2].shape[1] = -1;
    CHECK_STATUS(sp_pack_workspace_bytes(s.in, NI, &b), SP_ERR_INVALID_ARGUMENT);
    check_message("workspace bytes, negative size", "inputs[2]");
    CHECK(b == 42);
    /* Byte counts that overflow: 2^61 f64 elements (a zero stride keeps the
     * view itself small) need 2^64 bytes; four of 2^62 bytes, the same. */
    sp_tensor big[4];
    int64_t sh61[1] = {1LL << 61}, sh59[1] = {1LL << 59}, z[1] = {0};
    sp_tensor_view(&big[0], s.src[0], 0, SP_F64, 1, sh61, z, M->device);
    CHECK_STATUS(sp_pack_workspace_bytes(big, 1, &b), SP_ERR_OVERFLOW);
    for (int i = 0; i < 4; i++) sp_tensor_view(&big[i], s.src[i], 0, SP_F64, 1, sh59, z, M->device);
    CHECK_STATUS(sp_pack_workspace_bytes(big, 4, &b), SP_ERR_OVERFLOW);
    CHECK(b == 42);
}

/* NULL data in a non-empty view; last, since a library that misses it
 * crashes here. */
static void test_null_data(ts_rng *r) {
    BREAK("NULL src data", SP_ERR_INVALID_ARGUMENT, "pairs[1]", p[1].src.data = NULL);
    BREAK("NULL dst data", SP_ERR_INVALID_ARGUMENT, "pairs[2]", p[2].dst.data = NULL);
    PBREAK("NULL input data", SP_ERR_INVALID_ARGUMENT, "inputs[0]", in[0].data = NULL, s_.in,
           s_.ws, s_.wsb, s_.out);
}

/* ---- constructors, strings, version ------------------------------------------ */

static void test_constructors(void) {
    static float buf[64];
    int64_t shape[3] = {2, 3, 4}, strides[3] = {12, 4, 1};
    sp_tensor t, before;
    memset(&t, 0x5a, sizeof t);
    before = t;
    int64_t neg[3] = {2, -3, 4}, over[3] = {1LL << 32, 1LL << 32, 4};
    CHECK_STATUS(sp_tensor_dense(NULL, buf, SP_F32, 3, shape, sp_cpu()), SP_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(sp_tensor_dense(&t, buf, SP_F32, 3, NULL, sp_cpu()), SP_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(sp_tensor_dense(&t, buf, SP_F32, 9, shape, sp_cpu()), SP_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(sp_tensor_dense(&t, buf, SP_F32, -1, shape, sp_cpu()), SP_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(sp_tensor_dense(&t, buf, (sp_dtype)13, 3, shape, sp_cpu()),
                 SP_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(sp_tensor_dense(&t, buf, SP_F32, 3, neg, sp_cpu()), SP_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(sp_tensor_dense(&t, buf, SP_F32, 3, over, sp_cpu()), SP_ERR_OVERFLOW);
    CHECK_STATUS(sp_tensor_view(&t, buf, 0, SP_F32, 3, shape, NULL, sp_cpu()),
                 SP_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(sp_tensor_view(&t, buf, 0, SP_F32, 3, neg, strides, sp_cpu()),
                 SP_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(sp_tensor_view(&t, buf, 0, (sp_dtype)-2, 3, shape, strides, sp_cpu()),
                 SP_ERR_INVALID_ARGUMENT);
    CHECK(memcmp(&t, &before, sizeof t) == 0); /* untouched by every failure */
    CHECK_OK(sp_tensor_dense(&t, buf, SP_F32, 0, NULL, sp_cpu()));
    CHECK(t.ndim == 0 && t.data == buf);
    CHECK_OK(sp_tensor_view(&t, buf, 2, SP_F32, 0, NULL, NULL, sp_cpu()));
    CHECK(t.ndim == 0 && t.data == buf + 2);
}

static void test_strings(void) {
    const char *seen[64];
    int n = 0;
#define SP_CHECK_STATUS_(name, value, text)                                             \
    do {                                                                                \
        const char *s_ = sp_status_string(name);                                        \
        CHECKF(s_ && strncmp(s_, #name, strlen(#name)) == 0 && strstr(s_, text),        \
               "sp_status_string(%s) is \"%s\"", #name, s_ ? s_ : "(null)");            \
        CHECK((int)name == value);                                                      \
        for (int i_ = 0; s_ && i_ < n; i_++) CHECK(strcmp(seen[i_], s_) != 0);          \
        seen[n++] = s_;                                                                 \
    } while (0);
    SP_STATUS_MAP(SP_CHECK_STATUS_)
#undef SP_CHECK_STATUS_
    CHECK(n >= 14);
    CHECK(strcmp(sp_status_string((sp_status)999), "SP_ERR_UNKNOWN") == 0);
    CHECK(strcmp(sp_status_string((sp_status)-1), "SP_ERR_UNKNOWN") == 0);

    static const size_t sizes[SP_DTYPE_COUNT_] = {1, 1, 1, 2, 2, 4, 4, 8, 8, 2, 2, 4, 8};
    static const char *names[SP_DTYPE_COUNT_] = {"bool", "u8",  "i8",  "u16", "i16",
                                                 "u32",  "i32", "u64", "i64", "f16",
                                                 "bf16", "f32", "f64"};
    for (int t = 0; t < SP_DTYPE_COUNT_; t++) {
        CHECK(sp_dtype_size((sp_dtype)t) == sizes[t]);
        CHECK(strcmp(sp_dtype_name((sp_dtype)t), names[t]) == 0);
    }
    CHECK(sp_dtype_size((sp_dtype)SP_DTYPE_COUNT_) == 0 && sp_dtype_size((sp_dtype)-1) == 0);
    CHECK(strcmp(sp_dtype_name((sp_dtype)-1), "unknown") == 0);

    CHECK(sp_version_number() == SP_VERSION_NUMBER);
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", SP_VERSION_MAJOR, SP_VERSION_MINOR, SP_VERSION_PATCH);
    CHECK(strcmp(sp_version(), v) == 0);
}

int main(void) {
    M = ts_mem_or_skip(TS_MEM_BACKEND);
    ts_rng r;
    ts_rng_seed(&r, 0xe4404ull);
    if (M->device.type == SP_DEVICE_CPU) { /* no memory involved: once is enough */
        test_strings();
        test_constructors();
    }
    ts_arena_init(&A, M, (size_t)1 << 20);
    test_copy_errors(&r);
    test_long_batch(&r);
    test_pairs_in_a_destination(&r);
    test_pack_errors(&r);
    test_null_data(&r);
    ts_arena_free(&A);
    return sp_test_finish(ts_mem_test_name(M, "test_errors"));
}
