/*
 * test_limits.c — views at the edges of the rules, through the public API:
 * disjoint progressions the overlap test must accept, strides near 2^63,
 * byte ranges that leave the address space, size-1 dims with any stride,
 * KDA sizes that overflow only in products, and sp_pack with an outputs
 * array that overlaps its inputs array. Every refused call must leave every
 * byte (outputs, workspace, buffers) as it was.
 */
#include "check.h"
#include "kda_problem.h"
#include "test_support.h"
#include "ts_mem.h"
#include "stridepack_kda.h"

#include <string.h>

/* A host arena holding one poisoned buffer of `bytes`; returns the buffer. */
static unsigned char *guarded(ts_arena *a, size_t bytes, ts_rng *r) {
    ts_arena_init(a, ts_mem_host(), bytes + 4 * TS_ARENA_GAP);
    unsigned char *p = ts_arena_take(a, bytes, 0);
    ts_arena_poison(a, r);
    return p;
}

static int has(const char *needle) { return strstr(sp_last_error(), needle) != NULL; }

/* One pair, expected to fail with `want`; the guarded buffer stays intact. */
static void expect_refused(const char *what, const sp_copy_pair *p, ts_arena *b,
                           sp_status want, const char *needle) {
    uint64_t passes = sp_copy_pass_count();
    sp_status got = sp_copy_batch(p, 1, NULL);
    CHECKF(got == want, "%s: got %s, expected %s (%s)", what, sp_status_string(got),
           sp_status_string(want), sp_last_error());
    CHECKF(has(needle), "%s: message \"%s\" lacks \"%s\"", what, sp_last_error(), needle);
    CHECKF(ts_arena_first_diff(b) < 0 && sp_copy_pass_count() == passes,
           "%s: something was written", what);
}

/* One pair, expected to succeed and to write exactly what the reference
 * writes into the guarded buffer holding dst. */
static void expect_copied(const char *what, sp_copy_pair *p, ts_arena *b) {
    CHECKF(sp_copy_batch(p, 1, NULL) == SP_OK, "%s: %s", what, sp_last_error());
    sp_tensor de = ts_arena_on_image(b, p->dst);
    ts_ref_copy(&p->src, &de);
    CHECKF(ts_arena_first_diff(b) < 0, "%s: bytes differ from the reference at %ld", what,
           ts_arena_first_diff(b));
    ts_arena_sync(b);
}

/* A random view of u8 in [0, room): up to 2 dims of sizes up to `size`,
 * strides in [-9, 9] (as a destination: positive, never aliasing). */
static sp_tensor random_progression(ts_rng *r, unsigned char *base, int64_t room, int64_t size,
                                    int as_dst, int nd, const int64_t *shape) {
    int64_t st[2] = {0, 0}, lo = 0, hi = 0;
    for (int d = nd - 1; d >= 0; d--) {
        if (as_dst) /* each stride past what the inner dims reach */
            st[d] = (d == nd - 1 ? 0 : st[d + 1] * (shape[d + 1] - 1)) + ts_rng_range(r, 1, 9);
        else
            st[d] = ts_rng_range(r, -9, 9) * (d == 0 && nd == 2 ? ts_rng_range(r, 1, size) : 1);
        *(st[d] < 0 ? &lo : &hi) += st[d] * (shape[d] - 1);
    }
    int64_t at = -lo + ts_rng_range(r, 0, room - 1 - (hi - lo) > 0 ? room - 1 - (hi - lo) : 0);
    sp_tensor t;
    sp_tensor_view(&t, base, at, SP_U8, nd, shape, st, sp_cpu());
    return t;
}

/* Element offsets of u8 view t relative to base into mark, or-ing `bit`. */
static void paint(const sp_tensor *t, const unsigned char *base, unsigned char *mark,
                  unsigned char bit) {
    int64_t n1 = t->ndim == 2 ? t->shape[0] : 1, n0 = t->shape[t->ndim - 1];
    int64_t s1 = t->ndim == 2 ? t->strides[0] : 0, s0 = t->strides[t->ndim - 1];
    for (int64_t i = 0; i < n1; i++)
        for (int64_t j = 0; j < n0; j++)
            mark[(const unsigned char *)t->data + i * s1 + j * s0 - base] |= bit;
}

/* Disjoint 1-D and 2-D progressions in one buffer: accepted and copied;
 * meeting ones refused as sharing memory. Decided exactly, whatever the
 * sizes (brute force is the judge). */
static void test_progressions(ts_rng *r) {
    enum { N = 8000, ROOM = 6 * N + 64 };
    ts_arena b;
    unsigned char *bp = guarded(&b, ROOM, r);
    sp_copy_pair p;
    int64_t n[1] = {N}, s4[1] = {4}, s6[1] = {6}, s7[1] = {7}, s10[1] = {10}, s15[1] = {15};
    /* Even bytes from odd bytes. */
    sp_tensor_view(&p.dst, bp, 0, SP_U8, 1, n, s4, sp_cpu());
    sp_tensor_view(&p.src, bp, 1, SP_U8, 1, n, s6, sp_cpu());
    expect_copied("u8 [8000] stride 4 from stride 6 at +1", &p, &b);
    /* Bytes 10i and 1 + 15j: 10i - 15j = 1 has no solution (gcd 5). */
    sp_tensor_view(&p.dst, bp, 0, SP_U8, 1, n, s10, sp_cpu());
    sp_tensor_view(&p.src, bp, 1, SP_U8, 1, n, s15, sp_cpu());
    p.dst.shape[0] = p.src.shape[0] = N / 4;
    expect_copied("u8 strides 10 and 15, offset 1", &p, &b);
    /* u16 at bytes 12i and 6 + 14j: 6i - 7j = 3 at i = 4, j = 3. */
    sp_tensor_view(&p.dst, bp, 0, SP_U16, 1, n, s6, sp_cpu());
    sp_tensor_view(&p.src, bp, 3, SP_U16, 1, n, s7, sp_cpu());
    p.dst.shape[0] = p.src.shape[0] = N / 4;
    expect_refused("u16 strides 6 and 7 that meet", &p, &b, SP_ERR_OVERLAP, "shares memory");

    static unsigned char mark[ROOM];
    int met = 0, apart = 0;
    for (int trial = 0; trial < 600; trial++) {
        int nd = (int)ts_rng_range(r, 1, 2);
        int64_t shape[2];
        for (int d = 0; d < nd; d++) shape[d] = ts_rng_range(r, 1, nd == 1 ? 4000 : 60);
        p.dst = random_progression(r, bp, ROOM, 60, 1, nd, shape);
        p.src = random_progression(r, bp, ROOM, 60, 0, nd, shape);
        memset(mark, 0, sizeof mark);
        paint(&p.dst, bp, mark, 1);
        paint(&p.src, bp, mark, 2);
        if (memchr(mark, 3, sizeof mark)) {
            met++;
            expect_refused("random progressions that meet", &p, &b, SP_ERR_OVERLAP,
                           "shares memory");
        } else {
            apart++;
            expect_copied("random disjoint progressions", &p, &b);
        }
    }
    CHECKF(met > 100 && apart > 100, "%d meeting, %d apart: both should be common", met, apart);
    ts_arena_free(&b);
}

/* Strides near 2^63: the search and the planner must not wrap. dst and src
 * below address the same four bytes (in reverse order). */
static void test_huge_strides(ts_rng *r) {
    if (sizeof(uintptr_t) < 8) return;
    ts_arena b;
    unsigned char *bp = guarded(&b, 64, r);
    if ((uintptr_t)bp > UINTPTR_MAX - (3ull << 61) - 64) { /* cannot place the views */
        ts_arena_free(&b);
        return;
    }
    sp_copy_pair p;
    int64_t sh[2] = {2, 2}, ds[2] = {1LL << 62, 1LL << 61}, ss[2] = {-(1LL << 62), -(1LL << 61)};
    CHECK_OK(sp_tensor_view(&p.dst, bp, 0, SP_U8, 2, sh, ds, sp_cpu()));
    CHECK_OK(sp_tensor_view(&p.src, bp, (1LL << 62) + (1LL << 61), SP_U8, 2, sh, ss, sp_cpu()));
    expect_refused("same addresses through 2^62 strides", &p, &b, SP_ERR_OVERLAP,
                   "shares memory");
    /* The same bytes with one side reordered: still the same addresses. */
    int64_t ss2[2] = {-(1LL << 61), -(1LL << 62)};
    CHECK_OK(sp_tensor_view(&p.src, bp, (1LL << 62) + (1LL << 61), SP_U8, 2, sh, ss2, sp_cpu()));
    expect_refused("same addresses, transposed", &p, &b, SP_ERR_OVERLAP, "shares memory");
    ts_arena_free(&b);
}

/* Views whose bytes wrap around the address space are refused. */
static void test_address_wrap(ts_rng *r) {
    ts_arena b;
    unsigned char *bp = guarded(&b, 256, r);
    sp_tensor t;
    int64_t four[1] = {4}, one[1] = {1}, back[1] = {-1};
    void *top = (void *)(UINTPTR_MAX - 15);
    CHECK_STATUS(sp_tensor_dense(&t, top, SP_F64, 1, four, sp_cpu()), SP_ERR_OVERFLOW);
    CHECK_OK(sp_tensor_dense(&t, top, SP_F64, 1, one, sp_cpu())); /* its bytes fit */
    CHECK_STATUS(sp_tensor_view(&t, (void *)2, 0, SP_U8, 1, four, back, sp_cpu()),
                 SP_ERR_OVERFLOW); /* bytes 2, 1, 0, and below 0 */
    CHECK_OK(sp_tensor_view(&t, (void *)16, 0, SP_U8, 1, four, back, sp_cpu())); /* 16 .. 13 */
    CHECK_STATUS(sp_tensor_view(&t, (void *)16, -17, SP_U8, 1, one, one, sp_cpu()),
                 SP_ERR_OVERFLOW); /* the base itself wraps */

    sp_copy_pair p;
    sp_tensor_dense(&p.dst, bp, SP_F64, 1, four, sp_cpu());
    sp_tensor_dense(&p.src, bp + 128, SP_F64, 1, four, sp_cpu());
    p.src.data = top;
    expect_refused("source past the top of the address space", &p, &b, SP_ERR_OVERFLOW,
                   "pairs[0].src");
    int64_t sh64[1] = {64};
    sp_tensor_dense(&p.src, bp + 128, SP_U8, 1, sh64, sp_cpu());
    sp_tensor_view(&p.dst, bp, 63, SP_U8, 1, sh64, back, sp_cpu());
    p.dst.data = (void *)32; /* 32, 31, ..., -31 */
    expect_refused("destination below address 0", &p, &b, SP_ERR_OVERFLOW, "pairs[0].dst");

    /* sp_pack: a workspace whose slot would round up past the top. */
    int64_t sh[2] = {4, 4}, tr[2] = {1, 4};
    sp_tensor in, out, out0;
    sp_tensor_view(&in, bp, 0, SP_F32, 2, sh, tr, sp_cpu());
    size_t need = 0;
    CHECK_OK(sp_pack_workspace_bytes(&in, 1, &need));
    ts_fill_random(&out, sizeof out, r);
    out0 = out;
    uint64_t passes = sp_copy_pass_count();
    CHECK_STATUS(sp_pack(&in, 1, (void *)(UINTPTR_MAX - 100), need, &out, NULL, NULL),
                 SP_ERR_OVERFLOW);
    CHECK(has("workspace"));
    CHECK(memcmp(&out, &out0, sizeof out) == 0 && sp_copy_pass_count() == passes);
    CHECK(ts_arena_first_diff(&b) < 0);
    ts_arena_free(&b);
}

/* A size-1 dim may have any stride, INT64_MIN and INT64_MAX included. */
static void test_size_one_any_stride(ts_rng *r) {
    ts_arena b;
    unsigned char *bp = guarded(&b, 64, r);
    int64_t sh[3] = {1, 4, 1}, st[3] = {INT64_MIN, 1, INT64_MAX};
    sp_copy_pair p;
    CHECK_OK(sp_tensor_view(&p.src, bp, 0, SP_U32, 3, sh, st, sp_cpu()));
    int64_t n = 0;
    CHECK_OK(sp_tensor_numel(&p.src, &n));
    CHECK(n == 4 && sp_tensor_is_dense(&p.src));
    CHECK_OK(sp_tensor_view(&p.dst, bp, 8, SP_U32, 3, sh, st, sp_cpu()));
    expect_copied("size-1 dims with strides INT64_MIN and INT64_MAX", &p, &b);
    size_t need = 1;
    CHECK_OK(sp_pack_workspace_bytes(&p.src, 1, &need));
    CHECK(need == 0);
    ts_arena_free(&b);
}

/* outputs overlapping inputs, shifted either way: every output is what the
 * original input packs to. */
static void test_pack_aliasing(ts_rng *r) {
    enum { NI = 3 };
    ts_arena src;
    unsigned char *srcp = guarded(&src, 4096, r);
    int64_t sh[2] = {8, 8}, tr[2] = {1, 8}, pad[2] = {9, 1};
    sp_tensor orig[NI];
    sp_tensor_view(&orig[0], srcp, 0, SP_F32, 2, sh, tr, sp_cpu());
    sp_tensor_dense(&orig[1], srcp + 1024, SP_BF16, 2, sh, sp_cpu());
    sp_tensor_view(&orig[2], srcp + 2048, 0, SP_U16, 2, sh, pad, sp_cpu());
    size_t need = 0;
    CHECK_OK(sp_pack_workspace_bytes(orig, NI, &need));
    ts_arena ws;
    unsigned char *wsp = guarded(&ws, need, r);
    for (int shift = -1; shift <= 1; shift++) {
        sp_tensor arr[NI + 2];
        sp_tensor *in = arr + 1, *out = arr + 1 + shift;
        memcpy(in, orig, sizeof orig);
        size_t copied = 0;
        CHECKF(sp_pack(in, NI, wsp, need, out, &copied, NULL) == SP_OK, "shift %d: %s", shift,
               sp_last_error());
        CHECK(copied == 2);
        for (int i = 0; i < NI; i++) {
            CHECKF(sp_tensor_is_dense(&out[i]) && ts_ref_compare(&orig[i], &out[i], NULL) == 0,
                   "shift %d: outputs[%d] is not inputs[%d] packed", shift, i, i);
        }
        CHECKF(out[1].data == orig[1].data, "shift %d: the dense input was not passed through",
               shift);
        CHECKF(out[0].data != out[2].data, "shift %d: two outputs share a slot", shift);
    }
    /* A workspace size overstated past the top of the address space is
     * fine: only the part in use must fit. */
    sp_tensor out[NI];
    CHECKF(sp_pack(orig, NI, wsp, SIZE_MAX, out, NULL, NULL) == SP_OK, "%s", sp_last_error());
    ts_arena_free(&src);
    ts_arena_free(&ws);
}

/* KDA: H large enough that H * 128 * 128 wraps, with T = N = 0 so that no
 * tensor holding H elements per token exists. */
static void test_kda_products(void) {
    static uint16_t bf[8];
    static float f32[8];
    static int64_t cu[1] = {0};
    static int32_t idx[1];
    const int64_t T = 0, H = 1LL << 57, x4[4] = {1, T, H, 128}, x3[3] = {1, T, H},
                  hd[1] = {0}, nh[1] = {H}, one[1] = {1}, zero[1] = {0},
                  st[4] = {0, H, 128, 128};
    sp_kda_args a;
    sp_kda_args_init(&a);
    sp_tensor_dense(&a.q, bf, SP_BF16, 4, x4, sp_cpu());
    a.k = a.v = a.g = a.q;
    sp_tensor_dense(&a.o, bf + 4, SP_BF16, 4, x4, sp_cpu());
    sp_tensor_dense(&a.beta, bf, SP_BF16, 3, x3, sp_cpu());
    /* A_log [H] "holds" 2^57 floats: the prefill never reads them for N = 0,
     * and the view math must not care where they would end. */
    CHECK_OK(sp_tensor_dense(&a.A_log, f32, SP_F32, 1, nh, sp_cpu()));
    sp_tensor_dense(&a.dt_bias, f32 + 4, SP_F32, 1, hd, sp_cpu()); /* H * 128 wrapped to 0 */
    sp_tensor_dense(&a.cu_seqlens, cu, SP_I64, 1, one, sp_cpu());
    sp_tensor_dense(&a.state_indices, idx, SP_I32, 1, zero, sp_cpu());
    sp_tensor_dense(&a.state, f32, SP_F32, 4, st, sp_cpu());
    sp_status s = sp_kda_prefill(&a, NULL);
    CHECKF(s == SP_ERR_OVERFLOW, "H = 2^57, T = 0: got %s (%s)", sp_status_string(s),
           sp_last_error());
    CHECK(has("H"));
}

/* KDA: checkpoint_cu_starts entries at the ends of int64 get a message that
 * names the decrease (not a wrapped difference). */
static void test_kda_checkpoint_extremes(void) {
    const int64_t lens[2] = {8, 8};
    kda_problem pr;
    kp_make(&pr, 2, lens, 0, 1, SP_F32, SP_KDA_GATE_LOWER_BOUND, 4, 7);
    void *buf[KB_COUNT];
    kp_copy(&pr, buf);
    sp_kda_args a;
    kp_args(&pr, buf, sp_cpu(), &a);
    int64_t *cs = (int64_t *)buf[KB_CKS];
    const int64_t cases[2][3] = {{5, INT64_MIN, 0}, {0, INT64_MAX, INT64_MIN}};
    for (int c = 0; c < 2; c++) {
        memcpy(cs, cases[c], sizeof cases[c]);
        sp_status s = sp_kda_prefill(&a, NULL);
        CHECKF(s == SP_ERR_INVALID_ARGUMENT, "case %d: got %s", c, sp_status_string(s));
        CHECKF(has("checkpoint_cu_starts") && has("decreases"), "case %d: message \"%s\"", c,
               sp_last_error());
    }
    kp_free_copy(buf);
    kp_free(&pr);
}

int main(void) {
    ts_rng r;
    ts_rng_seed(&r, 0x11a175ull);
    test_progressions(&r);
    test_huge_strides(&r);
    test_size_one_any_stride(&r);
    test_pack_aliasing(&r);
    test_kda_products();
    test_kda_checkpoint_extremes();
    test_address_wrap(&r); /* last: a library that misses it crashes here */
    return sp_test_finish("test_limits");
}
