/*
 * test_view_import.c — byte-strided views as sp_tensors (src/view_import.h):
 * density, whole elements, words and pairs of words, against hand-computed
 * cases and, for random views of up to 12 dims (coalesced past
 * SP_MAX_DIMS), against brute force: the sp_tensor must visit the same
 * bytes in the same order as the byte view it came from.
 */
#include "check.h"
#include "internal.h"
#include "test_support.h"
#include "view_import.h"

#include <stdlib.h>
#include <string.h>

static sp_byte_view_ bv(void *data, int64_t itemsize, int32_t dtype, int ndim,
                        const int64_t *shape, const int64_t *strides) {
    sp_byte_view_ v = {data, itemsize, dtype, ndim, shape, strides, sp_cpu()};
    return v;
}

/* ---- density ----------------------------------------------------------- */

static void test_dense(void) {
    static char buf[256];
    int64_t s[3] = {2, 3, 4}, dense[3] = {48, 16, 4};
    sp_byte_view_ v = bv(buf, 4, SP_F32, 3, s, dense);
    CHECK(sp_byte_view_is_dense_(&v) == 1);
    int64_t padded[3] = {52, 16, 4}, rev[3] = {48, 16, -4}, odd[3] = {24, 8, 2};
    v.strides = padded;
    CHECK(sp_byte_view_is_dense_(&v) == 0);
    v.strides = rev;
    CHECK(sp_byte_view_is_dense_(&v) == 0);
    v.strides = odd; /* dense in 2-byte words, not in 4-byte elements */
    CHECK(sp_byte_view_is_dense_(&v) == 0);
    /* Size-1 dims take any stride; a size-0 dim makes any view dense. */
    int64_t s1[3] = {1, 3, 1}, st1[3] = {7, 2, -5};
    v = bv(buf, 2, SP_BF16, 3, s1, st1);
    CHECK(sp_byte_view_is_dense_(&v) == 1);
    int64_t s0[2] = {4, 0}, st0[2] = {3, 0};
    v = bv(buf, 8, SP_F64, 2, s0, st0);
    CHECK(sp_byte_view_is_dense_(&v) == 1);
    v = bv(buf, 4, SP_F32, 0, NULL, NULL); /* a scalar */
    CHECK(sp_byte_view_is_dense_(&v) == 1);
    /* Sizes whose byte count passes int64: no stride can match beyond it. */
    int64_t sb[3] = {2, 1LL << 31, 1LL << 31}, stb[3] = {1, 1LL << 33, 4};
    v = bv(buf, 4, SP_F32, 3, sb, stb);
    CHECK(sp_byte_view_is_dense_(&v) == 0);
    /* The element-stride density of tensor.c is the same rule, unit 1. */
    int64_t es[3] = {12, 4, 1};
    CHECK(sp_dims_dense_(3, s, es, 1) == 1);
    CHECK(sp_dims_dense_(3, s, dense, 4) == 1);
    CHECK(sp_dims_dense_(3, s, dense, 1) == 0);
}

/* ---- whole elements ----------------------------------------------------- */

static void test_elements(void) {
    static _Alignas(8) char buf[512];
    int64_t s[3] = {2, 3, 4}, st[3] = {-96, 32, 8};
    sp_byte_view_ v = bv(buf + 256, 8, SP_F64, 3, s, st);
    v.device = sp_cuda(1);
    sp_tensor t;
    CHECK_OK(sp_byte_view_elements_(&v, &t));
    CHECK(t.data == buf + 256 && t.dtype == SP_F64 && t.ndim == 3);
    CHECK(t.shape[0] == 2 && t.shape[1] == 3 && t.shape[2] == 4);
    CHECK(t.strides[0] == -12 && t.strides[1] == 4 && t.strides[2] == 1);
    CHECK(t.device.type == SP_DEVICE_CUDA && t.device.ordinal == 1);

    /* A byte stride that is not a multiple of the element size: refused,
     * *t untouched. */
    int64_t bad[3] = {-96, 30, 8};
    v.strides = bad;
    memset(&t, 0x5a, sizeof t);
    sp_tensor before = t;
    reset_last_error();
    CHECK_STATUS(sp_byte_view_elements_(&v, &t), SP_ERR_UNSUPPORTED);
    check_message("elements, odd stride", "strides not whole elements");
    CHECK(memcmp(&t, &before, sizeof t) == 0);

    /* More dims than an sp_tensor holds: refused, never merged. */
    int64_t s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, st9[9] = {8, 8, 8, 8, 8, 8, 8, 8, 8};
    v = bv(buf, 8, SP_I64, 9, s9, st9);
    reset_last_error();
    CHECK_STATUS(sp_byte_view_elements_(&v, &t), SP_ERR_UNSUPPORTED);
    check_message("elements, 9 dims", "more than 8 dims");
    v.ndim = 8;
    CHECK_OK(sp_byte_view_elements_(&v, &t));
    CHECK(t.ndim == 8 && t.dtype == SP_I64);
}

/* ---- words -------------------------------------------------------------- */

static void test_words(void) {
    static _Alignas(16) char buf[4096];
    sp_tensor t;
    /* Aligned f32 with strides of whole elements: moved as f32 itself. */
    int64_t s[2] = {3, 5}, st[2] = {40, 4};
    sp_byte_view_ v = bv(buf, 4, SP_F32, 2, s, st);
    CHECK_OK(sp_byte_view_words_(&v, &t));
    CHECK(t.dtype == SP_F32 && t.ndim == 2 && t.strides[0] == 10 && t.strides[1] == 1);

    /* An odd address: bytes, one more dim of 4. */
    v.data = buf + 1;
    CHECK_OK(sp_byte_view_words_(&v, &t));
    CHECK(t.dtype == SP_U8 && t.ndim == 3 && t.data == buf + 1);
    CHECK(t.shape[2] == 4 && t.strides[0] == 40 && t.strides[1] == 4 && t.strides[2] == 1);

    /* An odd stride of a size-1 dim is never applied: it does not narrow. */
    int64_t s1[2] = {1, 5}, st1[2] = {3, 4};
    v = bv(buf, 4, SP_F32, 2, s1, st1);
    CHECK_OK(sp_byte_view_words_(&v, &t));
    CHECK(t.dtype == SP_F32);
    /* Nor does the address of an empty view. */
    int64_t s0[2] = {0, 5};
    v = bv(buf + 1, 4, SP_F32, 2, s0, st);
    CHECK_OK(sp_byte_view_words_(&v, &t));
    CHECK(t.dtype == SP_F32 && t.ndim == 2);

    /* No stridepack dtype (complex128, a 12-byte record): the widest word
     * that divides, with the element as an inner dim. */
    int64_t sc[1] = {4}, stc[1] = {32};
    v = bv(buf, 16, -1, 1, sc, stc);
    CHECK_OK(sp_byte_view_words_(&v, &t));
    CHECK(t.dtype == SP_U64 && t.ndim == 2 && t.shape[1] == 2 && t.strides[0] == 4);
    int64_t str[1] = {12};
    v = bv(buf, 12, -1, 1, sc, str);
    CHECK_OK(sp_byte_view_words_(&v, &t));
    CHECK(t.dtype == SP_U32 && t.ndim == 2 && t.shape[1] == 3 && t.strides[0] == 3);
    /* A 2-byte type without a stridepack dtype moves as u16. */
    int64_t sh[1] = {4}, sth[1] = {2};
    v = bv(buf, 2, -1, 1, sh, sth);
    CHECK_OK(sp_byte_view_words_(&v, &t));
    CHECK(t.dtype == SP_U16 && t.ndim == 1);

    /* Ten dims of size 2 as one dense run: merged into one. */
    int64_t s10[10], st10[10];
    for (int d = 0; d < 10; d++) {
        s10[d] = 2;
        st10[d] = 2 << (9 - d); /* i16, dense */
    }
    v = bv(buf, 2, SP_I16, 10, s10, st10);
    CHECK_OK(sp_byte_view_words_(&v, &t));
    CHECK(t.ndim == 1 && t.shape[0] == 1024 && t.strides[0] == 1 && t.dtype == SP_I16);
    /* Every other dim reversed: nothing merges, and the message says so. */
    for (int d = 0; d < 10; d += 2) st10[d] = -st10[d];
    memset(&t, 0x5a, sizeof t);
    sp_tensor before = t;
    reset_last_error();
    CHECK_STATUS(sp_byte_view_words_(&v, &t), SP_ERR_UNSUPPORTED);
    check_message("words, 10 dims", "10 dims remain after merging (at most 8)");
    CHECK(memcmp(&t, &before, sizeof t) == 0);
    /* Nine dims at most eight of which remain once the element is in
     * bytes: an odd address adds a dim, which merges with the last. */
    for (int d = 0; d < 9; d++) st10[d] = (d % 2 ? 2 : -2) * (1 << (8 - d)); /* dims 7, 8 dense */
    st10[8] = 2;
    v = bv(buf + 2049, 2, SP_I16, 9, s10, st10);
    CHECK_OK(sp_byte_view_words_(&v, &t));
    CHECK(t.dtype == SP_U8 && t.ndim == 8);
    /* An empty view of many dims: shape (0,). */
    s10[3] = 0;
    v = bv(buf, 2, SP_I16, 10, s10, st10);
    CHECK_OK(sp_byte_view_words_(&v, &t));
    CHECK(t.ndim == 1 && t.shape[0] == 0);
    /* More dims than a byte view may have. */
    int64_t s65[SP_BYTE_VIEW_MAX_DIMS_ + 1], st65[SP_BYTE_VIEW_MAX_DIMS_ + 1];
    for (int d = 0; d <= SP_BYTE_VIEW_MAX_DIMS_; d++) s65[d] = 1, st65[d] = 1;
    v = bv(buf, 1, SP_U8, SP_BYTE_VIEW_MAX_DIMS_ + 1, s65, st65);
    CHECK_STATUS(sp_byte_view_words_(&v, &t), SP_ERR_UNSUPPORTED);
    v.ndim = SP_BYTE_VIEW_MAX_DIMS_;
    CHECK_OK(sp_byte_view_words_(&v, &t));
    CHECK(t.ndim == 0);
}

static void test_pair_words(void) {
    static _Alignas(16) char buf[8192];
    sp_copy_pair p;
    /* One element type: the narrower word of the two. */
    int64_t s[2] = {4, 8}, ss[2] = {64, 4}, ds[2] = {32, 4};
    sp_byte_view_ src = bv(buf, 4, SP_F32, 2, s, ss), dst = bv(buf + 2050, 4, SP_F32, 2, s, ds);
    CHECK_OK(sp_byte_view_pair_words_(&src, &dst, &p));
    CHECK(p.src.dtype == SP_U16 && p.dst.dtype == SP_U16);
    CHECK(p.src.ndim == 3 && p.dst.ndim == 3 && p.src.shape[2] == 2 && p.dst.shape[2] == 2);
    CHECK(p.src.strides[0] == 32 && p.dst.strides[0] == 16);
    dst.data = buf + 2048;
    CHECK_OK(sp_byte_view_pair_words_(&src, &dst, &p));
    CHECK(p.src.dtype == SP_F32 && p.dst.dtype == SP_F32 && p.src.ndim == 2);
    /* Different element types: each its own, for the copy to refuse. */
    dst.dtype = SP_I32;
    dst.data = buf + 2050;
    CHECK_OK(sp_byte_view_pair_words_(&src, &dst, &p));
    CHECK(p.src.dtype == SP_F32 && p.dst.dtype == SP_U16);

    /* Ten dims, dense on one side and reversed-dense on the other in the
     * same dims: merged jointly. */
    int64_t s10[10], a[10], b[10];
    for (int d = 0; d < 10; d++) {
        s10[d] = 2;
        a[d] = 4 << (9 - d);
        b[d] = d < 5 ? -a[d] : a[d];
    }
    src = bv(buf, 4, SP_U32, 10, s10, a);
    dst = bv(buf + 4096 + 4 * 992, 4, SP_U32, 10, s10, b); /* [0, ...]: the top of dims 0-4 */
    CHECK_OK(sp_byte_view_pair_words_(&src, &dst, &p));
    CHECK(p.src.ndim == 2 && p.dst.ndim == 2 && p.src.shape[0] == 32 && p.dst.shape[1] == 32);
    CHECK(p.src.strides[0] == 32 && p.dst.strides[0] == -32 && p.dst.strides[1] == 1);
    /* Alternating on the dst side: nothing merges jointly. */
    for (int d = 0; d < 10; d++) b[d] = d % 2 ? -a[d] : a[d];
    reset_last_error();
    CHECK_STATUS(sp_byte_view_pair_words_(&src, &dst, &p), SP_ERR_UNSUPPORTED);
    check_message("pair, 10 dims", "10 dims remain after merging (at most 8)");
}

/* ---- brute force -------------------------------------------------------- */

/* The address of every byte that a row-major walk over (shape, strides)
 * in `unit`-byte steps of elements of `es` bytes visits, into out; the
 * count. */
static int64_t walk(uintptr_t base, int ndim, const int64_t *shape, const int64_t *strides,
                    int64_t es, uintptr_t *out) {
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) numel *= shape[d];
    int64_t idx[SP_BYTE_VIEW_MAX_DIMS_ + 1] = {0}, n = 0;
    for (int64_t e = 0; e < numel; e++) {
        int64_t off = 0;
        for (int d = 0; d < ndim; d++) off += idx[d] * strides[d];
        for (int64_t b = 0; b < es; b++) out[n++] = base + (uintptr_t)off + (uintptr_t)b;
        for (int d = ndim - 1; d >= 0; d--) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
    return n;
}

static int64_t walk_tensor(const sp_tensor *t, uintptr_t *out) {
    const int64_t es = (int64_t)sp_dtype_size((sp_dtype)t->dtype);
    int64_t bs[SP_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) bs[d] = t->strides[d] * es;
    return walk((uintptr_t)t->data, t->ndim, t->shape, bs, es, out);
}

enum { MAX_BYTES = 1 << 14 };

static void random_view(ts_rng *r, int ndim, int64_t *shape, int64_t *strides, int64_t es) {
    const int64_t mult = ts_rng_range(r, 0, 3) == 0 ? 1 : es; /* odd byte strides at times */
    for (int d = 0; d < ndim; d++) shape[d] = ts_rng_range(r, 1, 2) + (d == ndim - 1);
    int64_t run = mult;
    for (int d = ndim - 1; d >= 0; d--) {
        switch (ts_rng_range(r, 0, 4)) {
        case 0: strides[d] = -run; break;                   /* reversed */
        case 1: strides[d] = run + mult; break;             /* padded */
        case 2: strides[d] = ts_rng_range(r, -1, 1) * 64; break; /* anything */
        default: strides[d] = run; break;                   /* dense */
        }
        if (strides[d] == 0 && ts_rng_range(r, 0, 1)) strides[d] = run;
        run = (strides[d] < 0 ? -strides[d] : strides[d]) * shape[d];
        if (run == 0) run = mult;
        if (run < es) run = es;
    }
    if (mult == es)
        for (int d = 0; d < ndim; d++) strides[d] = strides[d] / es * es;
}

static void test_random(ts_rng *r) {
    static const struct { int64_t es; int32_t dtype; } types[] = {
        {1, SP_U8}, {2, SP_BF16}, {4, SP_F32}, {8, SP_F64}, {16, -1}, {12, -1}, {2, -1},
    };
    uintptr_t *want = malloc(sizeof(uintptr_t) * MAX_BYTES * 4);
    uintptr_t *got = malloc(sizeof(uintptr_t) * MAX_BYTES * 4);
    CHECK(want && got);
    if (!want || !got) { free(want); free(got); return; }
    long tested = 0, refused = 0;
    for (int iter = 0; iter < 4000; iter++) {
        const int k = (int)ts_rng_range(r, 0, (int64_t)(sizeof types / sizeof types[0]) - 1);
        const int64_t es = types[k].es;
        const int ndim = (int)ts_rng_range(r, 0, 12);
        int64_t shape[12], ss[12], ds[12];
        random_view(r, ndim, shape, ss, es);
        random_view(r, ndim, shape, ds, es); /* same shape, own strides */
        int64_t numel = 1;
        for (int d = 0; d < ndim; d++) numel *= shape[d];
        if (numel * es > MAX_BYTES) continue;
        /* Bases anywhere: the view's bytes are never read. */
        const uintptr_t sb = (uintptr_t)1 << 40 | (uintptr_t)ts_rng_range(r, 0, 64);
        const uintptr_t db = (uintptr_t)1 << 41 | (uintptr_t)ts_rng_range(r, 0, 64);
        sp_byte_view_ src = bv((void *)sb, es, types[k].dtype, ndim, shape, ss);
        sp_byte_view_ dst = bv((void *)db, es, types[k].dtype, ndim, shape, ds);
        sp_tensor t;
        const int64_t n = walk(sb, ndim, shape, ss, es, want);
        sp_status st = sp_byte_view_words_(&src, &t);
        if (st != SP_OK) {
            CHECK(st == SP_ERR_UNSUPPORTED && ndim > SP_MAX_DIMS - 1);
            refused++;
        } else {
            CHECK(t.ndim <= SP_MAX_DIMS);
            CHECKF(walk_tensor(&t, got) == n && !memcmp(got, want, sizeof(uintptr_t) * (size_t)n),
                   "words: ndim %d, element %lld bytes", ndim, (long long)es);
            if (types[k].dtype >= 0 && (int64_t)sp_dtype_size((sp_dtype)t.dtype) == es)
                CHECK(t.dtype == types[k].dtype);
            /* Dense: the walk is one run of bytes from the base on. */
            int run = 1;
            for (int64_t b = 0; b < n && run; b++) run = want[b] == sb + (uintptr_t)b;
            CHECK(sp_byte_view_is_dense_(&src) == (numel == 0 || run));
        }
        sp_copy_pair p;
        st = sp_byte_view_pair_words_(&src, &dst, &p);
        if (st != SP_OK) {
            CHECK(st == SP_ERR_UNSUPPORTED && ndim > SP_MAX_DIMS - 1);
            refused++;
            continue;
        }
        tested++;
        CHECK(p.src.dtype == p.dst.dtype && p.src.ndim == p.dst.ndim);
        CHECK(!memcmp(p.src.shape, p.dst.shape, sizeof(int64_t) * (size_t)p.src.ndim));
        CHECKF(walk_tensor(&p.src, got) == n && !memcmp(got, want, sizeof(uintptr_t) * (size_t)n),
               "pair src: ndim %d, element %lld bytes", ndim, (long long)es);
        const int64_t nd = walk(db, ndim, shape, ds, es, want);
        CHECKF(walk_tensor(&p.dst, got) == nd && !memcmp(got, want, sizeof(uintptr_t) * (size_t)nd),
               "pair dst: ndim %d, element %lld bytes", ndim, (long long)es);
        /* In whole elements when every stride is. */
        int whole = ndim <= SP_MAX_DIMS && types[k].dtype >= 0;
        for (int d = 0; d < ndim; d++) whole = whole && ss[d] % es == 0;
        if (types[k].dtype >= 0) {
            st = sp_byte_view_elements_(&src, &t);
            CHECK(st == (whole ? SP_OK : SP_ERR_UNSUPPORTED));
            if (st == SP_OK) {
                CHECK(t.dtype == types[k].dtype && t.ndim == ndim);
                CHECK(walk_tensor(&t, got) == n);
                walk(sb, ndim, shape, ss, es, want);
                CHECK(!memcmp(got, want, sizeof(uintptr_t) * (size_t)n));
            }
        }
    }
    CHECKF(tested > 1000 && refused > 10, "tested %ld, refused %ld", tested, refused);
    free(want);
    free(got);
}

int main(void) {
    ts_rng r;
    ts_rng_seed(&r, 0x5eed0023);
    test_dense();
    test_elements();
    test_words();
    test_pair_words();
    test_random(&r);
    return sp_test_finish("test_view_import");
}
