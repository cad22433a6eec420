/*
 * test_copy_batch.c — sp_copy_batch on the CPU against the element-by-element
 * reference, over thousands of random views: rank 0-8, sizes 0 and 1,
 * negative, zero (sources only), transposed and padded strides, random
 * element offsets and base alignments, every dtype, batches of 1 to 70
 * pairs (more than one launch's worth). Every destination allocation is
 * compared byte for byte with its expected image, guards and gaps included;
 * every source must come back unchanged.
 */
#include "check.h"
#include "guarded.h"
#include "test_support.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_PAIRS = 72 };

typedef struct pair_bufs {
    gbuf src, dst;
    int owns_src; /* 0 when the source is another pair's (shared read) */
} pair_bufs;

/* A base shift that keeps element alignment but varies the widest vector. */
static size_t random_shift(ts_rng *r, size_t es) {
    return es * (size_t)ts_rng_range(r, 0, 15 / (int64_t)es);
}

/* Draw pair i: a new source, or (sometimes) the source of an earlier pair. */
static void draw_pair(ts_rng *r, int i, sp_copy_pair *pairs, pair_bufs *b) {
    int64_t shape[SP_MAX_DIMS];
    int nd;
    sp_dtype dt;
    if (i > 0 && ts_rng_range(r, 0, 7) == 0) {
        int j = (int)ts_rng_range(r, 0, i - 1);
        pairs[i].src = pairs[j].src;
        b[i].owns_src = 0;
        dt = (sp_dtype)pairs[j].src.dtype;
        nd = pairs[j].src.ndim;
        memcpy(shape, pairs[j].src.shape, sizeof shape);
    } else {
        dt = (sp_dtype)ts_rng_range(r, 0, SP_DTYPE_COUNT_ - 1);
        if (ts_rng_range(r, 0, 39) == 0) {
            /* Now and then a big one (up to ~4 MB): over the CPU backend's
             * serial threshold and its chunk size, so the parallel split
             * into chunks of rows, and its last partial chunk, are covered. */
            nd = (int)ts_rng_range(r, 2, 3);
            shape[0] = ts_rng_range(r, 1000, 6000);
            shape[1] = ts_rng_range(r, 1, 80);
            shape[2] = ts_rng_range(r, 1, 3);
        } else {
            nd = ts_shape_random(r, 8, 8, 2048, shape);
        }
        ts_layout ls;
        ts_layout_random(r, dt, nd, shape, TS_LAYOUT_ALLOW_ZERO_STRIDE, &ls);
        size_t es = sp_dtype_size(dt);
        b[i].src = gb_alloc((size_t)ls.buffer_elems * es, random_shift(r, es), r);
        b[i].owns_src = 1;
        pairs[i].src = ts_layout_tensor(&ls, b[i].src.p, sp_cpu());
    }
    ts_layout ld;
    if (ts_rng_range(r, 0, 3) == 0)
        ts_layout_dense(dt, nd, shape, &ld);
    else
        ts_layout_random(r, dt, nd, shape, 0, &ld);
    size_t es = sp_dtype_size(dt);
    b[i].dst = gb_alloc((size_t)ld.buffer_elems * es, random_shift(r, es), r);
    pairs[i].dst = ts_layout_tensor(&ld, b[i].dst.p, sp_cpu());
    sp_tensor de = gb_on_expect(&b[i].dst, pairs[i].dst);
    ts_ref_copy(&pairs[i].src, &de);
}

/* One random batch of n pairs; returns 0 when all is well. */
static int run_batch(ts_rng *r, int n, int trial) {
    sp_copy_pair pairs[MAX_PAIRS];
    pair_bufs b[MAX_PAIRS];
    int nonempty = 0;
    for (int i = 0; i < n; i++) {
        draw_pair(r, i, pairs, b);
        nonempty += ts_numel_shape(pairs[i].src.ndim, pairs[i].src.shape) > 0;
    }
    uint64_t before = sp_copy_pass_count();
    sp_status st = sp_copy_batch(pairs, (size_t)n, NULL);
    uint64_t passes = sp_copy_pass_count() - before;
    int bad = 0;
    CHECKF(st == SP_OK, "trial %d (n %d): %s: %s", trial, n, sp_status_string(st),
           sp_last_error());
    bad |= st != SP_OK;
    uint64_t most = ((uint64_t)n + SP_MAX_PAIRS_PER_LAUNCH - 1) / SP_MAX_PAIRS_PER_LAUNCH;
    CHECKF(passes <= most && (nonempty == 0 || passes >= 1),
           "trial %d: %llu passes for %d pairs (%d non-empty)", trial,
           (unsigned long long)passes, n, nonempty);
    for (int i = 0; i < n && !bad; i++) {
        long dd = gb_first_diff(&b[i].dst);
        long sd = b[i].owns_src ? gb_first_diff(&b[i].src) : -1;
        CHECKF(dd < 0 && sd < 0,
               "trial %d pair %d of %d: first wrong byte %ld of dst (payload at %d), %ld of src",
               trial, i, n, dd, (int)(b[i].dst.p - b[i].dst.raw), sd);
        if (dd >= 0 || sd >= 0) {
            ts_print_tensor(stderr, "src", &pairs[i].src);
            ts_print_tensor(stderr, "dst", &pairs[i].dst);
            bad = 1;
        }
    }
    for (int i = 0; i < n; i++) {
        if (b[i].owns_src) gb_free(&b[i].src);
        gb_free(&b[i].dst);
    }
    return bad;
}

static void test_random(ts_rng *r) {
    int pairs_total = 0;
    for (int trial = 0; trial < 600; trial++) {
        int n;
        int64_t k = ts_rng_range(r, 0, 19);
        if (k < 14)
            n = (int)ts_rng_range(r, 1, 6);
        else if (k < 18)
            n = (int)ts_rng_range(r, 7, 40);
        else
            n = (int)ts_rng_range(r, 60, 70);
        pairs_total += n;
        if (run_batch(r, n, trial)) return; /* one failure explained beats a flood */
    }
    printf("random batches: %d pairs\n", pairs_total);
}

/* Fixed cases the random draw rarely hits. */
static void test_fixed(ts_rng *r) {
    /* n == 0: nothing to do, no pass. */
    uint64_t before = sp_copy_pass_count();
    CHECK_OK(sp_copy_batch(NULL, 0, NULL));
    CHECK(sp_copy_pass_count() == before);

    /* Source and destination touching in one buffer: [0, 64) -> [64, 128)
     * of reversed i32, allowed and exact. */
    gbuf one = gb_alloc(128 * 4, 0, r);
    int64_t shape[1] = {64}, rev[1] = {-1};
    sp_copy_pair p;
    CHECK_OK(sp_tensor_view(&p.src, one.p, 63, SP_I32, 1, shape, rev, sp_cpu()));
    CHECK_OK(sp_tensor_dense(&p.dst, one.p + 64 * 4, SP_I32, 1, shape, sp_cpu()));
    sp_tensor de = gb_on_expect(&one, p.dst);
    sp_tensor se = gb_on_expect(&one, p.src);
    ts_ref_copy(&se, &de);
    CHECK_OK(sp_copy_batch(&p, 1, NULL));
    CHECK(gb_first_diff(&one) < 0);
    gb_free(&one);

    /* The K3 layout: q, k, v slices of [T, 3P], beta of a [T, 128+H]
     * projection, g the first T rows of a longer buffer: one batch of four
     * strided copies plus g's dense one. */
    ts_k3 k;
    ts_k3_init(&k, 48, 4, TS_K3_BETA_FA);
    k.g_rows = 50;
    k.g_bytes = (size_t)k.g_rows * (size_t)k.P * 2;
    gbuf qkv = gb_alloc(k.qkv_bytes, 0, r), proj = gb_alloc(k.proj_bytes, 0, r),
         g = gb_alloc(k.g_bytes, 0, r), out = gb_alloc(k.dense_bytes + 5 * 256, 0, r);
    sp_tensor v[5];
    ts_k3_views(&k, qkv.p, proj.p, g.p, sp_cpu(), v);
    sp_copy_pair kp[5];
    size_t off = 0;
    for (int i = 0; i < 5; i++) {
        kp[i].src = v[i];
        CHECK_OK(sp_tensor_dense(&kp[i].dst, out.p + off, SP_BF16, v[i].ndim, v[i].shape,
                                 sp_cpu()));
        de = gb_on_expect(&out, kp[i].dst);
        ts_ref_copy(&v[i], &de);
        size_t bytes = 2;
        for (int d = 0; d < v[i].ndim; d++) bytes *= (size_t)v[i].shape[d];
        off += (bytes + 255) / 256 * 256;
    }
    before = sp_copy_pass_count();
    CHECK_OK(sp_copy_batch(kp, 5, NULL));
    CHECK(sp_copy_pass_count() - before == 1);
    CHECK(gb_first_diff(&out) < 0);
    CHECK(gb_first_diff(&qkv) < 0 && gb_first_diff(&proj) < 0 && gb_first_diff(&g) < 0);
    gb_free(&qkv);
    gb_free(&proj);
    gb_free(&g);
    gb_free(&out);

    /* Runs longer than the CPU backend's chunk, which it splits: a dense
     * 3 MB copy (one run after coalescing, at an odd byte offset), a 1 MB
     * gather (stride 3) and a 2-row copy of 700 KB rows, in one batch. */
    {
        const int64_t n_dense = 3 << 20, n_gather = 1 << 18, rows[2] = {2, 700 << 10};
        gbuf a = gb_alloc((size_t)n_dense, 3, r), ad = gb_alloc((size_t)n_dense, 5, r);
        gbuf b = gb_alloc((size_t)n_gather * 3 * 4, 0, r), bd = gb_alloc((size_t)n_gather * 4, 0, r);
        gbuf c = gb_alloc((size_t)(rows[0] * (rows[1] + 64)), 0, r),
             cd = gb_alloc((size_t)(rows[0] * rows[1]), 0, r);
        sp_copy_pair lp[3];
        const int64_t s3[1] = {3}, cst[2] = {rows[1] + 64, 1};
        CHECK_OK(sp_tensor_dense(&lp[0].src, a.p, SP_U8, 1, &n_dense, sp_cpu()));
        CHECK_OK(sp_tensor_dense(&lp[0].dst, ad.p, SP_U8, 1, &n_dense, sp_cpu()));
        CHECK_OK(sp_tensor_view(&lp[1].src, b.p, 0, SP_F32, 1, &n_gather, s3, sp_cpu()));
        CHECK_OK(sp_tensor_dense(&lp[1].dst, bd.p, SP_F32, 1, &n_gather, sp_cpu()));
        CHECK_OK(sp_tensor_view(&lp[2].src, c.p, 0, SP_U8, 2, rows, cst, sp_cpu()));
        CHECK_OK(sp_tensor_dense(&lp[2].dst, cd.p, SP_U8, 2, rows, sp_cpu()));
        gbuf *dsts[3] = {&ad, &bd, &cd};
        for (int i = 0; i < 3; i++) {
            sp_tensor x = gb_on_expect(dsts[i], lp[i].dst);
            ts_ref_copy(&lp[i].src, &x);
        }
        CHECK_OK(sp_copy_batch(lp, 3, NULL));
        for (int i = 0; i < 3; i++) CHECKF(gb_first_diff(dsts[i]) < 0, "long run %d", i);
        gbuf *all[6] = {&a, &ad, &b, &bd, &c, &cd};
        for (int i = 0; i < 6; i++) gb_free(all[i]);
    }

    /* Every pair empty: SP_OK, nothing written. */
    gbuf e = gb_alloc(64, 0, r);
    int64_t s0[2] = {0, 3};
    sp_copy_pair ep[2];
    for (int i = 0; i < 2; i++) {
        CHECK_OK(sp_tensor_dense(&ep[i].src, e.p, SP_F32, 2, s0, sp_cpu()));
        CHECK_OK(sp_tensor_dense(&ep[i].dst, e.p + 4 * i, SP_F32, 2, s0, sp_cpu()));
    }
    ep[1].src.data = NULL; /* an empty view may point anywhere, even nowhere */
    ep[1].dst.data = NULL;
    CHECK_OK(sp_copy_batch(ep, 2, NULL));
    CHECK(gb_first_diff(&e) < 0);
    gb_free(&e);
}

int main(void) {
    ts_rng r;
    ts_rng_seed(&r, 0xc0b1ba7c4ull);
    test_fixed(&r);
    test_random(&r);
    return sp_test_finish("test_copy_batch");
}
