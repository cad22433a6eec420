/*
 * test_copy_batch.c — sp_copy_batch against the element-by-element host
 * reference, on one memory backend (ts_mem.h): built as test_copy_batch
 * (host memory, CPU backend) and test_copy_batch_gpu (device memory, CUDA
 * backend).
 *
 * Random batches: rank 0-8, sizes 0 and 1, negative, zero (sources only),
 * transposed and padded strides, random element offsets and base
 * alignments, every dtype, batches of 1 to 70 pairs (more than one pass's
 * worth); now and then a large pair (over the CPU backend's serial
 * threshold and chunk size; many CUDA tiles, every word width, two or more
 * outer dims). Half run on the backend's own stream. Fixed cases: touching
 * source and destination, the K3 layout, runs longer than a CPU chunk, all
 * pairs empty, sizes around CUDA tile boundaries for every alignment, 130
 * pairs (three passes).
 *
 * Every byte of the arena (sources, gaps, destinations) must match the host
 * image afterwards, and each batch takes one pass per 64 non-empty pairs.
 */
#include "check.h"
#include "test_support.h"
#include "ts_mem.h"

#include <stdint.h>
#include <string.h>

enum { MAX_PAIRS = 140 };

static const ts_mem *M;

/* Byte range [lo, hi) that t's elements cover (t non-empty). */
static void extent_of(const sp_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    int64_t es = (int64_t)sp_dtype_size((sp_dtype)t->dtype), neg = 0, pos = 0;
    for (int d = 0; d < t->ndim; d++) {
        int64_t span = (t->shape[d] - 1) * t->strides[d] * es;
        if (span < 0) neg += span; else pos += span;
    }
    *lo = (uintptr_t)t->data + (uintptr_t)neg;
    *hi = (uintptr_t)t->data + (uintptr_t)pos + (uintptr_t)es;
}

/* A base shift that keeps element alignment but varies the widest vector. */
static size_t random_shift(ts_rng *r, size_t es) {
    return es * (size_t)ts_rng_range(r, 0, 15 / (int64_t)es);
}

/* A shape with up to 2^20 elements over 1-4 dims: many tiles per pair. */
static int big_shape(ts_rng *r, int64_t *shape) {
    int nd = (int)ts_rng_range(r, 1, 4);
    int64_t numel = 1;
    for (int d = 0; d < nd; d++) {
        int64_t s = ts_rng_range(r, 1, d == nd - 1 ? 4096 : 300);
        while (s > 1 && numel * s > ((int64_t)1 << 20)) s /= 2;
        shape[d] = s;
        numel *= s;
    }
    return nd;
}

/* Draw pair i into the arena: a new source, or (sometimes) the source of
 * an earlier pair; a destination with a random or dense layout. */
static void draw_pair(ts_rng *r, ts_arena *a, int i, sp_copy_pair *pairs) {
    int64_t shape[SP_MAX_DIMS];
    int nd;
    sp_dtype dt;
    if (i > 0 && ts_rng_range(r, 0, 7) == 0) {
        int j = (int)ts_rng_range(r, 0, i - 1);
        pairs[i].src = pairs[j].src;
        dt = (sp_dtype)pairs[j].src.dtype;
        nd = pairs[j].src.ndim;
        memcpy(shape, pairs[j].src.shape, sizeof shape);
    } else {
        dt = (sp_dtype)ts_rng_range(r, 0, SP_DTYPE_COUNT_ - 1);
        int64_t k = ts_rng_range(r, 0, 49);
        if (k == 0) {
            nd = big_shape(r, shape);
        } else if (k == 1) {
            nd = 2;
            shape[0] = ts_rng_range(r, 1, 300);
            shape[1] = ts_rng_range(r, 1, 600);
        } else if (k == 2) {
            /* Up to ~4 MB: over the CPU backend's serial threshold and its
             * chunk size, so the parallel split into chunks of rows, and its
             * last partial chunk, are covered. */
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
        unsigned char *base = ts_arena_take(a, (size_t)ls.buffer_elems * es, random_shift(r, es));
        pairs[i].src = ts_layout_tensor(&ls, base, M->device);
    }
    ts_layout ld;
    if (ts_rng_range(r, 0, 3) == 0)
        ts_layout_dense(dt, nd, shape, &ld);
    else
        ts_layout_random(r, dt, nd, shape, 0, &ld);
    size_t es = sp_dtype_size(dt);
    unsigned char *base = ts_arena_take(a, (size_t)ld.buffer_elems * es, random_shift(r, es));
    pairs[i].dst = ts_layout_tensor(&ld, base, M->device);
}

/* Apply the reference to the image, run the batch on `stream`, and check
 * every byte of the arena and the number of passes. Returns 0 when all is
 * well. */
static int run_and_check(ts_arena *a, sp_copy_pair *pairs, int n, struct CUstream_st *stream,
                         const char *what, int trial) {
    int nonempty = 0;
    for (int i = 0; i < n; i++) {
        sp_tensor hs = ts_arena_on_image(a, pairs[i].src), hd = ts_arena_on_image(a, pairs[i].dst);
        ts_ref_copy(&hs, &hd);
        nonempty += ts_numel_shape(pairs[i].src.ndim, pairs[i].src.shape) > 0;
    }
    uint64_t before = sp_copy_pass_count();
    sp_status st = sp_copy_batch(pairs, (size_t)n, stream);
    uint64_t passes = sp_copy_pass_count() - before;
    CHECKF(st == SP_OK, "%s %d (n %d): %s: %s", what, trial, n, sp_status_string(st),
           sp_last_error());
    if (st != SP_OK) return 1;
    uint64_t want = ((uint64_t)nonempty + SP_MAX_PAIRS_PER_LAUNCH - 1) / SP_MAX_PAIRS_PER_LAUNCH;
    CHECKF(passes == want, "%s %d: %llu passes for %d non-empty pairs, expected %llu", what,
           trial, (unsigned long long)passes, nonempty, (unsigned long long)want);
    long diff = ts_arena_first_diff(a);
    CHECKF(diff < 0, "%s %d (n %d): first wrong arena byte %ld", what, trial, n, diff);
    if (diff >= 0) {
        for (int i = 0; i < n; i++) { /* name the pair that owns the byte */
            uintptr_t lo, hi, at = (uintptr_t)(a->base + diff);
            if (ts_numel_shape(pairs[i].dst.ndim, pairs[i].dst.shape) == 0) continue;
            extent_of(&pairs[i].dst, &lo, &hi);
            if (at >= lo && at < hi) {
                fprintf(stderr, "  inside pairs[%d].dst\n", i);
                ts_print_tensor(stderr, "src", &pairs[i].src);
                ts_print_tensor(stderr, "dst", &pairs[i].dst);
            }
        }
        return 1;
    }
    return passes != want;
}

static void test_random(ts_rng *r, ts_arena *a) {
    const int trials = ts_test_small() ? 80 : 600;
    int pairs_total = 0;
    sp_copy_pair pairs[MAX_PAIRS];
    for (int trial = 0; trial < trials; trial++) {
        int n;
        int64_t k = ts_rng_range(r, 0, 19);
        if (k < 14)
            n = (int)ts_rng_range(r, 1, 6);
        else if (k < 18)
            n = (int)ts_rng_range(r, 7, 40);
        else
            n = (int)ts_rng_range(r, 60, 70);
        ts_arena_reset(a);
        for (int i = 0; i < n; i++) draw_pair(r, a, i, pairs);
        ts_arena_poison(a, r);
        pairs_total += n;
        /* Half on the default stream, half on the backend's own. */
        if (run_and_check(a, pairs, n, trial % 2 ? M->stream : NULL, "random trial", trial))
            return; /* one failure explained beats a flood */
    }
    printf("random batches: %d trials, %d pairs\n", trials, pairs_total);
}

/* Fixed cases the random draw rarely hits. */
static void test_fixed(ts_rng *r, ts_arena *a) {
    /* n == 0: nothing to do, no pass. */
    uint64_t before = sp_copy_pass_count();
    CHECK_OK(sp_copy_batch(NULL, 0, NULL));
    CHECK(sp_copy_pass_count() == before);

    /* Source and destination touching in one buffer: [0, 64) -> [64, 128)
     * of reversed i32, allowed and exact. */
    ts_arena_reset(a);
    unsigned char *one = ts_arena_take(a, 128 * 4, 0);
    int64_t shape[1] = {64}, rev[1] = {-1};
    sp_copy_pair p;
    CHECK_OK(sp_tensor_view(&p.src, one, 63, SP_I32, 1, shape, rev, M->device));
    CHECK_OK(sp_tensor_dense(&p.dst, one + 64 * 4, SP_I32, 1, shape, M->device));
    ts_arena_poison(a, r);
    run_and_check(a, &p, 1, NULL, "touching", 0);

    /* The K3 layout: q, k, v slices of [T, 3P], beta of a [T, 128+H]
     * projection, g the first T rows of a longer buffer: one batch of four
     * strided copies plus g's dense one. */
    ts_k3 k;
    ts_k3_init(&k, 48, 4, TS_K3_BETA_FA);
    k.g_rows = 50;
    k.g_bytes = (size_t)k.g_rows * (size_t)k.P * 2;
    ts_arena_reset(a);
    unsigned char *qkv = ts_arena_take(a, k.qkv_bytes, 0);
    unsigned char *proj = ts_arena_take(a, k.proj_bytes, 0);
    unsigned char *g = ts_arena_take(a, k.g_bytes, 0);
    sp_tensor v[5];
    ts_k3_views(&k, qkv, proj, g, M->device, v);
    sp_copy_pair kp[5];
    for (int i = 0; i < 5; i++) {
        kp[i].src = v[i];
        unsigned char *d = ts_arena_take(a, (size_t)ts_numel(&v[i]) * 2, 0);
        CHECK_OK(sp_tensor_dense(&kp[i].dst, d, SP_BF16, v[i].ndim, v[i].shape, M->device));
    }
    ts_arena_poison(a, r);
    run_and_check(a, kp, 5, NULL, "K3", 0);

    /* Runs longer than the CPU backend's chunk, which it splits: a dense
     * 3 MB copy (one run after coalescing, at an odd byte offset), a 1 MB
     * gather (stride 3) and a 2-row copy of 700 KB rows, in one batch. */
    {
        const int64_t n_dense = 3 << 20, n_gather = 1 << 18, rows[2] = {2, 700 << 10};
        const int64_t s3[1] = {3}, cst[2] = {rows[1] + 64, 1};
        sp_copy_pair lp[3];
        ts_arena_reset(a);
        CHECK_OK(sp_tensor_dense(&lp[0].src, ts_arena_take(a, (size_t)n_dense, 3), SP_U8, 1,
                                 &n_dense, M->device));
        CHECK_OK(sp_tensor_dense(&lp[0].dst, ts_arena_take(a, (size_t)n_dense, 5), SP_U8, 1,
                                 &n_dense, M->device));
        CHECK_OK(sp_tensor_view(&lp[1].src, ts_arena_take(a, (size_t)n_gather * 3 * 4, 0), 0,
                                SP_F32, 1, &n_gather, s3, M->device));
        CHECK_OK(sp_tensor_dense(&lp[1].dst, ts_arena_take(a, (size_t)n_gather * 4, 0), SP_F32, 1,
                                 &n_gather, M->device));
        CHECK_OK(sp_tensor_view(&lp[2].src, ts_arena_take(a, (size_t)(rows[0] * cst[0]), 0), 0,
                                SP_U8, 2, rows, cst, M->device));
        CHECK_OK(sp_tensor_dense(&lp[2].dst, ts_arena_take(a, (size_t)(rows[0] * rows[1]), 0),
                                 SP_U8, 2, rows, M->device));
        ts_arena_poison(a, r);
        run_and_check(a, lp, 3, NULL, "long runs", 0);
    }

    /* Every pair empty: SP_OK, nothing written, no pass. */
    {
        ts_arena_reset(a);
        unsigned char *e = ts_arena_take(a, 64, 0);
        int64_t s0[2] = {0, 3};
        sp_copy_pair ep[2];
        for (int i = 0; i < 2; i++) {
            CHECK_OK(sp_tensor_dense(&ep[i].src, e, SP_F32, 2, s0, M->device));
            CHECK_OK(sp_tensor_dense(&ep[i].dst, e + 4 * i, SP_F32, 2, s0, M->device));
        }
        ep[1].src.data = NULL; /* an empty view may point anywhere, even nowhere */
        ep[1].dst.data = NULL;
        ts_arena_poison(a, r);
        run_and_check(a, ep, 2, NULL, "all empty", 0);
    }

    /* Contiguous 1-D copies whose sizes sit on and around CUDA tile
     * boundaries (32 KiB per block), for every element size and base
     * alignment, all in one batch. */
    static const int64_t bytes[] = {1, 15, 16, 17, 4096, 32767, 32768, 32769, 3 * 32768 + 5};
    sp_copy_pair pairs[MAX_PAIRS];
    int n = 0;
    ts_arena_reset(a);
    for (int es = 1; es <= 8; es *= 2) {
        sp_dtype dt = es == 1 ? SP_U8 : es == 2 ? SP_BF16 : es == 4 ? SP_F32 : SP_F64;
        for (size_t i = 0; i < sizeof bytes / sizeof bytes[0]; i++) {
            int64_t sh[1] = {(bytes[i] + es - 1) / es};
            size_t shift = (size_t)es * (size_t)(n % 3); /* aligned, and not */
            unsigned char *s = ts_arena_take(a, (size_t)(sh[0] * es), shift);
            unsigned char *d = ts_arena_take(a, (size_t)(sh[0] * es), shift);
            CHECK_OK(sp_tensor_dense(&pairs[n].src, s, dt, 1, sh, M->device));
            CHECK_OK(sp_tensor_dense(&pairs[n].dst, d, dt, 1, sh, M->device));
            n++;
        }
    }
    ts_arena_poison(a, r);
    run_and_check(a, pairs, n, NULL, "tile boundaries", 0);

    /* 130 small transposed pairs: three passes. */
    ts_arena_reset(a);
    for (int i = 0; i < 130; i++) {
        int64_t sh[2] = {3, 5 + i % 7}, strides[2] = {1, 3};
        sp_dtype dt = (sp_dtype)(i % SP_DTYPE_COUNT_);
        size_t es = sp_dtype_size(dt);
        unsigned char *s = ts_arena_take(a, (size_t)(sh[0] * sh[1]) * es, 0);
        unsigned char *d = ts_arena_take(a, (size_t)(sh[0] * sh[1]) * es, es);
        CHECK_OK(sp_tensor_view(&pairs[i].src, s, 0, dt, 2, sh, strides, M->device));
        CHECK_OK(sp_tensor_dense(&pairs[i].dst, d, dt, 2, sh, M->device));
    }
    ts_arena_poison(a, r);
    before = sp_copy_pass_count();
    run_and_check(a, pairs, 130, NULL, "130 pairs", 0);
    CHECK(sp_copy_pass_count() - before == 3);
}

int main(void) {
    M = ts_mem_or_skip(TS_MEM_BACKEND);
    ts_rng r;
    ts_rng_seed(&r, 0xc0b1ba7c4ull);
    ts_arena a;
    ts_arena_init(&a, M, (size_t)512 << 20);
    test_fixed(&r, &a);
    test_random(&r, &a);
    ts_arena_free(&a);
    return sp_test_finish(ts_mem_test_name(M, "test_copy_batch"));
}
