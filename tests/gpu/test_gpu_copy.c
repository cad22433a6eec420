/*
 * test_gpu_copy.c — sp_copy_batch on CUDA tensors against the host
 * reference, with the generator of the CPU property test: random rank 0-8,
 * sizes 0 and 1, negative, zero (sources only), transposed and padded
 * strides, random element offsets and base alignments, every dtype, batches
 * of 1 to 70 pairs; now and then a large pair (many tiles, every word width,
 * two or more outer dims). Every byte of the device arena (sources, gaps,
 * destinations) must match the host image afterwards.
 *
 * Also: launches counted per batch (ceil(non-empty / 64)), tile-boundary
 * sizes for every alignment, floating-point bit patterns through every copy
 * path, and the caller's current device left as it was.
 */
#include "gpu_util.h"

#include <stdint.h>

enum { MAX_PAIRS = 140 };

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
static void draw_pair(ts_rng *r, arena *a, int i, sp_copy_pair *pairs) {
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
        } else {
            nd = ts_shape_random(r, 8, 8, 2048, shape);
        }
        ts_layout ls;
        ts_layout_random(r, dt, nd, shape, TS_LAYOUT_ALLOW_ZERO_STRIDE, &ls);
        size_t es = sp_dtype_size(dt);
        unsigned char *base = arena_take(a, (size_t)ls.buffer_elems * es, random_shift(r, es));
        pairs[i].src = ts_layout_tensor(&ls, base, sp_cuda(0));
    }
    ts_layout ld;
    if (ts_rng_range(r, 0, 3) == 0)
        ts_layout_dense(dt, nd, shape, &ld);
    else
        ts_layout_random(r, dt, nd, shape, 0, &ld);
    size_t es = sp_dtype_size(dt);
    unsigned char *base = arena_take(a, (size_t)ld.buffer_elems * es, random_shift(r, es));
    pairs[i].dst = ts_layout_tensor(&ld, base, sp_cuda(0));
}

/* Run the batch on `stream` and check every byte of the arena and the
 * number of launches. Returns 0 when all is well. */
static int run_and_check(arena *a, sp_copy_pair *pairs, int n, cudaStream_t stream,
                         const char *what, int trial) {
    int nonempty = 0;
    for (int i = 0; i < n; i++) {
        sp_tensor hs = arena_on_host(a, pairs[i].src), hd = arena_on_host(a, pairs[i].dst);
        ts_ref_copy(&hs, &hd);
        nonempty += ts_numel_shape(pairs[i].src.ndim, pairs[i].src.shape) > 0;
    }
    uint64_t before = sp_copy_pass_count();
    sp_status st = sp_copy_batch(pairs, (size_t)n, (struct CUstream_st *)stream);
    uint64_t passes = sp_copy_pass_count() - before;
    CHECKF(st == SP_OK, "%s %d (n %d): %s: %s", what, trial, n, sp_status_string(st),
           sp_last_error());
    if (st != SP_OK) return 1;
    uint64_t want = ((uint64_t)nonempty + SP_MAX_PAIRS_PER_LAUNCH - 1) / SP_MAX_PAIRS_PER_LAUNCH;
    CHECKF(passes == want, "%s %d: %llu launches for %d non-empty pairs, expected %llu", what,
           trial, (unsigned long long)passes, nonempty, (unsigned long long)want);
    long diff = arena_first_diff(a);
    CHECKF(diff < 0, "%s %d (n %d): first wrong arena byte %ld", what, trial, n, diff);
    if (diff >= 0) {
        for (int i = 0; i < n; i++) { /* name the pair that owns the byte */
            uintptr_t lo, hi, at = (uintptr_t)(a->dev + diff);
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
    return 0;
}

static void test_random(ts_rng *r, arena *a, cudaStream_t stream) {
    const int trials = ts_test_small() ? 80 : 500;
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
        arena_reset(a);
        for (int i = 0; i < n; i++) draw_pair(r, a, i, pairs);
        arena_poison(a, r);
        pairs_total += n;
        /* Half on the legacy default stream, half on a stream of our own. */
        if (run_and_check(a, pairs, n, trial % 2 ? stream : NULL, "random trial", trial))
            return; /* one failure explained beats a flood */
    }
    printf("random batches: %d trials, %d pairs\n", trials, pairs_total);
}

/* Contiguous 1-D copies whose sizes sit on and around tile boundaries (32
 * KiB per block), for every element size and base alignment, all in one
 * batch; then 130 small pairs, which take three launches. */
static void test_fixed(ts_rng *r, arena *a) {
    CHECK_OK(sp_copy_batch(NULL, 0, NULL));

    static const int64_t bytes[] = {1, 15, 16, 17, 4096, 32767, 32768, 32769, 3 * 32768 + 5};
    sp_copy_pair pairs[MAX_PAIRS];
    int n = 0;
    arena_reset(a);
    for (int es = 1; es <= 8; es *= 2) {
        sp_dtype dt = es == 1 ? SP_U8 : es == 2 ? SP_BF16 : es == 4 ? SP_F32 : SP_F64;
        for (size_t i = 0; i < sizeof bytes / sizeof bytes[0]; i++) {
            int64_t shape[1] = {(bytes[i] + es - 1) / es};
            size_t shift = (size_t)es * (size_t)(n % 3); /* aligned, and not */
            unsigned char *s = arena_take(a, (size_t)(shape[0] * es), shift);
            unsigned char *d = arena_take(a, (size_t)(shape[0] * es), shift);
            CHECK_OK(sp_tensor_dense(&pairs[n].src, s, dt, 1, shape, sp_cuda(0)));
            CHECK_OK(sp_tensor_dense(&pairs[n].dst, d, dt, 1, shape, sp_cuda(0)));
            n++;
        }
    }
    arena_poison(a, r);
    run_and_check(a, pairs, n, NULL, "tile boundaries", 0);

    arena_reset(a);
    for (int i = 0; i < 130; i++) {
        int64_t shape[2] = {3, 5 + i % 7}, strides[2] = {1, 3}; /* transposed */
        sp_dtype dt = (sp_dtype)(i % SP_DTYPE_COUNT_);
        size_t es = sp_dtype_size(dt);
        unsigned char *s = arena_take(a, (size_t)(shape[0] * shape[1]) * es, 0);
        unsigned char *d = arena_take(a, (size_t)(shape[0] * shape[1]) * es, es);
        CHECK_OK(sp_tensor_view(&pairs[i].src, s, 0, dt, 2, shape, strides, sp_cuda(0)));
        CHECK_OK(sp_tensor_dense(&pairs[i].dst, d, dt, 2, shape, sp_cuda(0)));
    }
    arena_poison(a, r);
    run_and_check(a, pairs, 130, NULL, "130 pairs", 0);
}

/* ---- bit patterns ------------------------------------------------------------ */

enum { NPAT = TS_NPATTERNS };

/* Source layouts over a buffer of 8 * NPAT * NPAT elements filled with the
 * patterns in turn: one run, padded rows, a gather, reversed, transposed,
 * reversed rows, a broadcast. Destinations: dense, one element past a
 * 16-byte boundary (narrow moves), every other element reversed. */
static const struct {
    int ndim;
    int64_t shape[2], strides[2], offset;
} kSources[] = {
    {1, {4 * NPAT}, {1}, 0},
    {2, {4, NPAT}, {NPAT + 3, 1}, 0},
    {1, {4 * NPAT}, {3}, 0},
    {1, {4 * NPAT}, {-1}, 4 * NPAT - 1},
    {2, {NPAT, 4}, {1, NPAT}, 0},
    {2, {4, NPAT}, {-(NPAT + 1), -1}, 4 * (NPAT + 1)},
    {2, {3, NPAT}, {0, 1}, 0},
};
enum { NSRC = sizeof kSources / sizeof kSources[0] };

static void test_bitpatterns(ts_rng *r, arena *a) {
    for (int pi = 0; pi < 4; pi++) {
        const sp_dtype dt = ts_float_patterns[pi].dtype;
        const size_t es = sp_dtype_size(dt), src_elems = 8 * NPAT * NPAT;
        arena_reset(a);
        unsigned char *sbase = arena_take(a, src_elems * es, 0);
        sp_copy_pair pairs[3 * NSRC];
        int n = 0;
        for (int si = 0; si < NSRC; si++) {
            sp_tensor s;
            CHECK_OK(sp_tensor_view(&s, sbase, kSources[si].offset, dt, kSources[si].ndim,
                                    kSources[si].shape, kSources[si].strides, sp_cuda(0)));
            for (int di = 0; di < 3; di++) {
                int64_t shape[2], strides[2], running = di == 2 ? 2 : 1;
                for (int d = s.ndim - 1; d >= 0; d--) {
                    shape[d] = s.shape[d];
                    strides[d] = di == 2 ? -running : running;
                    running *= s.shape[d];
                }
                unsigned char *dbase = arena_take(a, (size_t)(running + 1) * es, di == 1 ? es : 0);
                pairs[n].src = s;
                CHECK_OK(sp_tensor_view(&pairs[n].dst, dbase, di == 2 ? running - 2 : 0, dt,
                                        s.ndim, shape, strides, sp_cuda(0)));
                n++;
            }
        }
        arena_poison(a, r);
        unsigned char *hs = (unsigned char *)arena_host(a, sbase);
        for (size_t k = 0; k < src_elems; k++) /* little-endian low bytes */
            memcpy(hs + k * es, &ts_float_patterns[pi].bits[k % NPAT], es);
        arena_upload(a, sbase, src_elems * es);
        int bad = run_and_check(a, pairs, n, NULL, "bit patterns", pi);
        CHECKF(!bad, "%s: a bit pattern changed on the way", sp_dtype_name(dt));
    }
}

/* ---- the caller's current device ---------------------------------------------- */

static void test_current_device(ts_rng *r, arena *a) {
    int ndev = 0, cur = -1;
    CUDA_OK(cudaGetDeviceCount(&ndev));
    arena_reset(a);
    int64_t shape[2] = {64, 100}, strides[2] = {128, 1};
    sp_copy_pair p;
    unsigned char *s = arena_take(a, 64 * 128 * 4, 0), *d = arena_take(a, 64 * 100 * 4, 0);
    CHECK_OK(sp_tensor_view(&p.src, s, 0, SP_F32, 2, shape, strides, sp_cuda(0)));
    CHECK_OK(sp_tensor_dense(&p.dst, d, SP_F32, 2, shape, sp_cuda(0)));
    arena_poison(a, r);

    /* A device that does not exist: an error, nothing written, and the
     * current device is still ours. */
    sp_copy_pair bad = p;
    bad.src.device = bad.dst.device = sp_cuda(ndev);
    uint64_t before = sp_copy_pass_count();
    sp_status st = sp_copy_batch(&bad, 1, NULL);
    CHECKF(st != SP_OK, "cuda:%d (missing) accepted", ndev);
    CHECK(sp_copy_pass_count() == before);
    CHECK(sp_last_error()[0] != '\0');
    CUDA_OK(cudaGetDevice(&cur));
    CHECKF(cur == 0, "current device %d after a failed call, expected 0", cur);
    CHECK(arena_first_diff(a) < 0);

    if (ndev < 2) {
        /* One device: the copy runs where we already are. */
        run_and_check(a, &p, 1, NULL, "current device", 0);
        CUDA_OK(cudaGetDevice(&cur));
        CHECKF(cur == 0, "current device %d after the copy, expected 0", cur);
        printf("current device: one GPU, switching not exercised\n");
        return;
    }
    /* Caller on device 1, tensors on device 0: runs there, comes back to 1. */
    sp_tensor hs = arena_on_host(a, p.src), hd = arena_on_host(a, p.dst);
    ts_ref_copy(&hs, &hd);
    CUDA_OK(cudaSetDevice(1));
    CHECK_OK(sp_copy_batch(&p, 1, NULL));
    CUDA_OK(cudaGetDevice(&cur));
    CHECKF(cur == 1, "current device %d after the copy, expected 1", cur);
    CUDA_OK(cudaSetDevice(0));
    CHECK(arena_first_diff(a) < 0);
}

int main(void) {
    gpu_require();
    ts_rng r;
    ts_rng_seed(&r, 0x9e1c0b1ull);
    arena a;
    arena_init(&a, (size_t)512 << 20);
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    test_fixed(&r, &a);
    test_bitpatterns(&r, &a);
    test_current_device(&r, &a);
    test_random(&r, &a, stream);
    CUDA_OK(cudaStreamDestroy(stream));
    arena_free(&a);
    return sp_test_finish("test_gpu_copy");
}
