/*
 * test_view_math.c — the view math of src/tensor.c and the planner's
 * descriptor, against hand-computed cases and against brute force:
 * numel, density, coalescing, byte extents, overlap, self-overlap, vector
 * width, and sp_plan_pair_ (executed here move by move, as a backend would).
 */
#include "check.h"
#include "ts_mem.h"
#include "internal.h"
#include "test_support.h"

#include <stdlib.h>
#include <string.h>

static sp_tensor mk(void *data, sp_dtype dt, int ndim, const int64_t *shape,
                    const int64_t *strides) {
    sp_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dt;
    t.ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        t.shape[d] = shape[d];
        t.strides[d] = strides[d];
    }
    t.device = sp_cpu();
    return t;
}

/* ---- numel ------------------------------------------------------------- */

static void test_numel(void) {
    static char buf[64];
    int64_t n = -7;
    sp_tensor t = mk(buf, SP_F32, 0, NULL, NULL);
    CHECK_OK(sp_tensor_numel(&t, &n));
    CHECK(n == 1); /* a scalar is one element */
    CHECK(sp_numel_(&t) == 1);

    int64_t s1[3] = {1, 1, 1}, st1[3] = {5, -3, 0};
    t = mk(buf, SP_F32, 3, s1, st1);
    CHECK_OK(sp_tensor_numel(&t, &n));
    CHECK(n == 1);

    int64_t s0[3] = {4, 0, 9}, st0[3] = {9, 9, 1};
    t = mk(buf, SP_F32, 3, s0, st0);
    CHECK_OK(sp_tensor_numel(&t, &n));
    CHECK(n == 0);
    CHECK(sp_numel_(&t) == 0);

    int64_t s3[4] = {2, 3, 5, 7}, st3[4] = {105, 35, 7, 1};
    t = mk(buf, SP_U8, 4, s3, st3);
    CHECK_OK(sp_tensor_numel(&t, &n));
    CHECK(n == 210);
    CHECK(sp_numel_(&t) == 210);

    /* The largest count that fits, then one that does not. */
    int64_t sbig[1] = {INT64_MAX}, stbig[1] = {0};
    t = mk(buf, SP_U8, 1, sbig, stbig);
    CHECK_OK(sp_tensor_numel(&t, &n));
    CHECK(n == INT64_MAX);
    int64_t sfit[2] = {3037000499LL, 3037000499LL}, sover[2] = {3037000500LL, 3037000500LL};
    int64_t stz[2] = {0, 0};
    t = mk(buf, SP_U8, 2, sfit, stz);
    CHECK_OK(sp_tensor_numel(&t, &n));
    CHECK(n == 3037000499LL * 3037000499LL);
    t = mk(buf, SP_U8, 2, sover, stz);
    n = -7;
    CHECK_STATUS(sp_tensor_numel(&t, &n), SP_ERR_OVERFLOW);
    CHECK(sp_numel_(&t) == -1);
    int64_t s62[3] = {1LL << 32, 1LL << 32, 2};
    int64_t st62[3] = {0, 0, 0};
    t = mk(buf, SP_U8, 3, s62, st62);
    CHECK_STATUS(sp_tensor_numel(&t, &n), SP_ERR_OVERFLOW);
    CHECK(sp_numel_(&t) == -1);
    /* A zero anywhere makes the count 0 ("0 when any size is 0"), even
     * when the sizes before it would overflow on their own. */
    int64_t szl[3] = {1LL << 40, 1LL << 40, 0};
    t = mk(buf, SP_U8, 3, szl, st62);
    n = -7;
    CHECK_OK(sp_tensor_numel(&t, &n));
    CHECK(n == 0);

    /* Malformed input is an error, and sp_numel_ says -1. */
    int64_t sneg[2] = {3, -1}, stn[2] = {1, 1};
    t = mk(buf, SP_U8, 2, sneg, stn);
    CHECK_STATUS(sp_tensor_numel(&t, &n), SP_ERR_INVALID_ARGUMENT);
    CHECK(sp_numel_(&t) == -1);
    t = mk(buf, SP_U8, 0, NULL, NULL);
    t.ndim = SP_MAX_DIMS + 1;
    CHECK_STATUS(sp_tensor_numel(&t, &n), SP_ERR_INVALID_ARGUMENT);
    CHECK(sp_numel_(&t) == -1);
    t.ndim = -1;
    CHECK_STATUS(sp_tensor_numel(&t, &n), SP_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(sp_tensor_numel(NULL, &n), SP_ERR_INVALID_ARGUMENT);
}

/* ---- density ----------------------------------------------------------- */

static void test_dense(void) {
    static char buf[64];
    int64_t s[3] = {2, 3, 4};
    int64_t dense[3] = {12, 4, 1};
    sp_tensor t = mk(buf, SP_F32, 3, s, dense);
    CHECK(sp_tensor_is_dense(&t) == 1);
    t.strides[0] = 13; /* padded rows */
    CHECK(sp_tensor_is_dense(&t) == 0);
    t.strides[0] = -12; /* reversed */
    CHECK(sp_tensor_is_dense(&t) == 0);
    int64_t tr[3] = {12, 1, 3}; /* last two dims transposed */
    t = mk(buf, SP_F32, 3, s, tr);
    CHECK(sp_tensor_is_dense(&t) == 0);

    /* Size-1 dims may have any stride. */
    int64_t s1[5] = {1, 2, 1, 3, 1}, st1[5] = {-99, 3, 0, 1, 12345};
    t = mk(buf, SP_U16, 5, s1, st1);
    CHECK(sp_tensor_is_dense(&t) == 1);
    st1[1] = 4;
    t = mk(buf, SP_U16, 5, s1, st1);
    CHECK(sp_tensor_is_dense(&t) == 0);

    /* An empty tensor is dense whatever its strides; a scalar is dense. */
    int64_t s0[2] = {0, 5}, st0[2] = {-7, 3};
    t = mk(buf, SP_F64, 2, s0, st0);
    CHECK(sp_tensor_is_dense(&t) == 1);
    t = mk(buf, SP_F64, 0, NULL, NULL);
    CHECK(sp_tensor_is_dense(&t) == 1);

    /* Zero stride on a real dim is not dense; malformed is 0. */
    int64_t sz[2] = {3, 4}, stz[2] = {0, 1};
    t = mk(buf, SP_F32, 2, sz, stz);
    CHECK(sp_tensor_is_dense(&t) == 0);
    int64_t sn[2] = {-3, 4}, stn[2] = {4, 1};
    t = mk(buf, SP_F32, 2, sn, stn);
    CHECK(sp_tensor_is_dense(&t) == 0);
    t = mk(buf, SP_F32, 2, sz, dense + 1);
    t.dtype = SP_DTYPE_COUNT_;
    CHECK(sp_tensor_is_dense(&t) == 0);
    CHECK(sp_tensor_is_dense(NULL) == 0);

    /* The constructors make dense tensors. */
    sp_tensor d;
    CHECK_OK(sp_tensor_dense(&d, buf, SP_BF16, 3, s, sp_cpu()));
    CHECK(d.data == buf && d.ndim == 3 && d.dtype == SP_BF16);
    CHECK(d.strides[0] == 12 && d.strides[1] == 4 && d.strides[2] == 1);
    CHECK(sp_tensor_is_dense(&d) == 1);
    CHECK(d.device.type == SP_DEVICE_CPU);
    CHECK_OK(sp_tensor_view(&d, buf, 3, SP_F32, 3, s, tr, sp_cuda(2)));
    CHECK(d.data == buf + 12 && d.strides[1] == 1 && d.strides[2] == 3);
    CHECK(d.device.type == SP_DEVICE_CUDA && d.device.ordinal == 2);
}

/* ---- coalescing ---------------------------------------------------------- */

static void coalesce(const sp_tensor *s, const sp_tensor *d, int *nd, int64_t *shape,
                     int64_t *ss, int64_t *ds) {
    for (int i = 0; i < SP_MAX_DIMS; i++) shape[i] = ss[i] = ds[i] = -12345;
    *nd = -1;
    sp_coalesce_pair_(s, d, nd, shape, ss, ds);
}

static void test_coalesce_hand(void) {
    /* K3 q: [1, T, H, 128] with strides (T*3P, 3P, 128, 1) against a dense
     * destination coalesces to [T, P]: (3P, 1) / (P, 1). */
    enum { T = 4, H = 2, P = H * 128 };
    static uint16_t qkv[T * 3 * P], out[T * P];
    int64_t shape4[4] = {1, T, H, 128};
    int64_t qst[4] = {(int64_t)T * 3 * P, 3 * P, 128, 1};
    sp_tensor q = mk(qkv + P, SP_BF16, 4, shape4, qst), dq;
    CHECK_OK(sp_tensor_dense(&dq, out, SP_BF16, 4, shape4, sp_cpu()));
    int nd;
    int64_t sh[SP_MAX_DIMS], ss[SP_MAX_DIMS], ds[SP_MAX_DIMS];
    coalesce(&q, &dq, &nd, sh, ss, ds);
    CHECK(nd == 2);
    CHECK(sh[0] == T && sh[1] == P);
    CHECK(ss[0] == 3 * P && ss[1] == 1);
    CHECK(ds[0] == P && ds[1] == 1);

    /* Dense to dense: one dim. */
    coalesce(&dq, &dq, &nd, sh, ss, ds);
    CHECK(nd == 1 && sh[0] == T * P && ss[0] == 1 && ds[0] == 1);

    /* A transposed source does not merge. */
    static float m[35], mt[35];
    int64_t ts[2] = {7, 5}, tst[2] = {1, 7};
    sp_tensor tsrc = mk(m, SP_F32, 2, ts, tst), tdst;
    CHECK_OK(sp_tensor_dense(&tdst, mt, SP_F32, 2, ts, sp_cpu()));
    coalesce(&tsrc, &tdst, &nd, sh, ss, ds);
    CHECK(nd == 2 && sh[0] == 7 && sh[1] == 5);
    CHECK(ss[0] == 1 && ss[1] == 7 && ds[0] == 5 && ds[1] == 1);

    /* Size-1 dims vanish whatever their strides. */
    int64_t s1[4] = {1, 5, 1, 3}, st1[4] = {77, 3, -4, 1};
    sp_tensor one = mk(m, SP_F32, 4, s1, st1), oned;
    CHECK_OK(sp_tensor_dense(&oned, mt, SP_F32, 4, s1, sp_cpu()));
    coalesce(&one, &oned, &nd, sh, ss, ds);
    CHECK(nd == 1 && sh[0] == 15 && ss[0] == 1 && ds[0] == 1);

    /* A stride whose product with the next size passes 2^63 merges nothing
     * (and is not computed with a wrap: UBSan watches this one). */
    int64_t s22[2] = {2, 2}, huge[2] = {1, 1LL << 62}, hd[2] = {2, 1};
    sp_tensor hs = mk(m, SP_U8, 2, s22, huge), hdd = mk(mt, SP_U8, 2, s22, hd);
    coalesce(&hs, &hdd, &nd, sh, ss, ds);
    CHECK(nd == 2 && ss[0] == 1 && ss[1] == (1LL << 62));
    coalesce(&hdd, &hs, &nd, sh, ss, ds);
    CHECK(nd == 2 && ds[0] == 1 && ds[1] == (1LL << 62));

    /* Only where both sides allow: the source is dense [3,4,5], the
     * destination has padded rows of its outer dim (stride 21, not 20). */
    static float big[3 * 21];
    int64_t s3[3] = {3, 4, 5}, dpad[3] = {21, 5, 1};
    sp_tensor d3 = mk(big, SP_F32, 3, s3, dpad), s3d;
    CHECK_OK(sp_tensor_dense(&s3d, m, SP_F32, 3, s3, sp_cpu()));
    s3d.data = big; /* never dereferenced here */
    coalesce(&s3d, &d3, &nd, sh, ss, ds);
    CHECK(nd == 2 && sh[0] == 3 && sh[1] == 20);
    CHECK(ss[0] == 20 && ss[1] == 1 && ds[0] == 21 && ds[1] == 1);
    coalesce(&d3, &s3d, &nd, sh, ss, ds); /* the other way round */
    CHECK(nd == 2 && sh[0] == 3 && sh[1] == 20 && ss[0] == 21 && ds[0] == 20);

    /* Negative strides merge by the same rule: (-3, -1) on [2, 3] is one
     * reversed run of 6. */
    int64_t s23[2] = {2, 3}, neg[2] = {-3, -1};
    sp_tensor rv = mk(m + 5, SP_F32, 2, s23, neg), rvd;
    CHECK_OK(sp_tensor_dense(&rvd, mt, SP_F32, 2, s23, sp_cpu()));
    coalesce(&rv, &rvd, &nd, sh, ss, ds);
    CHECK(nd == 1 && sh[0] == 6 && ss[0] == -1 && ds[0] == 1);

    /* A scalar, and an all-ones shape, coalesce to 0 dims. */
    sp_tensor sc = mk(m, SP_F32, 0, NULL, NULL);
    coalesce(&sc, &sc, &nd, sh, ss, ds);
    CHECK(nd == 0);
    int64_t ones[3] = {1, 1, 1}, ost[3] = {4, 9, 2};
    sp_tensor o1 = mk(m, SP_F32, 3, ones, ost), o1d;
    CHECK_OK(sp_tensor_dense(&o1d, mt, SP_F32, 3, ones, sp_cpu()));
    coalesce(&o1, &o1d, &nd, sh, ss, ds);
    CHECK(nd == 0);
}

/* Every (dst offset, src offset) of a shape/stride set, row-major. */
static int64_t offsets(int nd, const int64_t *shape, const int64_t *ss, const int64_t *ds,
                       int64_t *out) {
    int64_t idx[SP_MAX_DIMS] = {0}, n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    for (int64_t k = 0; k < n; k++) {
        int64_t so = 0, doff = 0;
        for (int d = 0; d < nd; d++) {
            so += idx[d] * ss[d];
            doff += idx[d] * ds[d];
        }
        out[2 * k] = doff;
        out[2 * k + 1] = so;
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
    return n;
}

static int cmp_pair(const void *a, const void *b) {
    const int64_t *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

/* Random pairs: coalescing keeps the exact element map, leaves no size-1
 * dim and no adjacent dims that both sides could still merge. */
static void test_coalesce_random(ts_rng *r) {
    enum { MAXN = 4096 };
    static int64_t a[2 * MAXN], b[2 * MAXN];
    static char mem[16];
    for (int trial = 0; trial < 2000; trial++) {
        int64_t shape[SP_MAX_DIMS];
        int nd0 = ts_shape_random(r, 8, 6, MAXN, shape);
        int64_t numel = 1;
        for (int d = 0; d < nd0; d++) numel *= shape[d];
        if (numel == 0) continue; /* empty pairs are the caller's to skip */
        ts_layout ls, ld;
        sp_dtype dt = (sp_dtype)ts_rng_range(r, 0, SP_DTYPE_COUNT_ - 1);
        ts_layout_random(r, dt, nd0, shape, TS_LAYOUT_ALLOW_ZERO_STRIDE, &ls);
        ts_layout_random(r, dt, nd0, shape, 0, &ld);
        sp_tensor s = ts_layout_tensor(&ls, mem, sp_cpu());
        sp_tensor d = ts_layout_tensor(&ld, mem, sp_cpu());
        int nd;
        int64_t sh[SP_MAX_DIMS], ss[SP_MAX_DIMS], ds[SP_MAX_DIMS];
        coalesce(&s, &d, &nd, sh, ss, ds);
        int ok = nd >= 0 && nd <= nd0;
        for (int i = 0; ok && i < nd; i++) ok = sh[i] >= 2;
        for (int i = 0; ok && i + 1 < nd; i++)
            ok = !(ss[i] == sh[i + 1] * ss[i + 1] && ds[i] == sh[i + 1] * ds[i + 1]);
        int64_t na = offsets(nd0, s.shape, s.strides, d.strides, a);
        int64_t nb = ok ? offsets(nd, sh, ss, ds, b) : -1;
        if (ok && na == nb) {
            qsort(a, (size_t)na, 2 * sizeof(int64_t), cmp_pair);
            qsort(b, (size_t)nb, 2 * sizeof(int64_t), cmp_pair);
            ok = memcmp(a, b, (size_t)na * 2 * sizeof(int64_t)) == 0;
        } else {
            ok = 0;
        }
        CHECKF(ok, "coalescing trial %d changed the element map or is not maximal (nd %d)", trial,
               nd);
        if (!ok) {
            ts_print_tensor(stderr, "src", &s);
            ts_print_tensor(stderr, "dst", &d);
            return;
        }
    }
}

/* ---- extents and overlap -------------------------------------------------- */

static void test_extent(void) {
    static double buf[64];
    char *base = (char *)(buf + 32);
    uintptr_t lo, hi, b = (uintptr_t)base;
    sp_tensor sc = mk(base, SP_F64, 0, NULL, NULL);
    sp_tensor_extent_(&sc, &lo, &hi);
    CHECK(lo == b && hi == b + 8);

    int64_t s[2] = {3, 4}, st[2] = {5, 1};
    sp_tensor t = mk(base, SP_F32, 2, s, st);
    sp_tensor_extent_(&t, &lo, &hi); /* last element at 2*5+3 = 13 */
    CHECK(lo == b && hi == b + 14 * 4);
    st[0] = -5;
    t = mk(base, SP_F32, 2, s, st);
    sp_tensor_extent_(&t, &lo, &hi); /* -10 .. 3 */
    CHECK(lo == b - 40 && hi == b + 16);
    st[0] = -5, st[1] = -1;
    t = mk(base, SP_F32, 2, s, st);
    sp_tensor_extent_(&t, &lo, &hi); /* -13 .. 0 */
    CHECK(lo == b - 52 && hi == b + 4);
    st[0] = 0, st[1] = 0; /* a broadcast scalar: one element */
    t = mk(base, SP_U16, 2, s, st);
    sp_tensor_extent_(&t, &lo, &hi);
    CHECK(lo == b && hi == b + 2);
    st[0] = 0, st[1] = -2;
    t = mk(base, SP_U16, 2, s, st);
    sp_tensor_extent_(&t, &lo, &hi); /* -6 .. 0 */
    CHECK(lo == b - 12 && hi == b + 2);
    /* Strides of size-1 dims do not widen the extent. */
    int64_t s1[2] = {1, 4}, st1[2] = {-1000, 1};
    t = mk(base, SP_U8, 2, s1, st1);
    sp_tensor_extent_(&t, &lo, &hi);
    CHECK(lo == b && hi == b + 4);
    /* Empty: lo == hi. */
    int64_t s0[2] = {0, 4}, st0[2] = {-4, 1};
    t = mk(base, SP_U8, 2, s0, st0);
    sp_tensor_extent_(&t, &lo, &hi);
    CHECK(lo == hi);

    /* Overlap of extents: touching ranges share no byte; empty ranges
     * share none; containment and partial overlap do. */
    CHECK(sp_extents_overlap_(100, 200, 200, 300) == 0);
    CHECK(sp_extents_overlap_(200, 300, 100, 200) == 0);
    CHECK(sp_extents_overlap_(100, 201, 200, 300) == 1);
    CHECK(sp_extents_overlap_(200, 300, 100, 201) == 1);
    CHECK(sp_extents_overlap_(100, 400, 200, 300) == 1);
    CHECK(sp_extents_overlap_(200, 300, 100, 400) == 1);
    CHECK(sp_extents_overlap_(100, 200, 100, 200) == 1);
    CHECK(sp_extents_overlap_(150, 150, 100, 200) == 0);
    CHECK(sp_extents_overlap_(100, 200, 150, 150) == 0);
    CHECK(sp_extents_overlap_(150, 150, 150, 150) == 0);
    CHECK(sp_extents_overlap_(0, 1, 0, 1) == 1);
}

/* Brute force: do two distinct index tuples hit a shared byte? */
static int aliases(const sp_tensor *t) {
    enum { MAXN = 512 };
    int64_t off[MAXN], idx[SP_MAX_DIMS] = {0}, n = sp_numel_(t);
    int64_t es = (int64_t)sp_dtype_size((sp_dtype)t->dtype);
    if (n > MAXN) abort();
    for (int64_t k = 0; k < n; k++) {
        off[k] = 0;
        for (int d = 0; d < t->ndim; d++) off[k] += idx[d] * t->strides[d] * es;
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i + 1; j < n; j++)
            if (off[i] - off[j] < es && off[j] - off[i] < es) return 1;
    return 0;
}

static void test_self_overlap(ts_rng *r) {
    static char buf[16];
    int64_t s[2] = {3, 4};
    int64_t dense[2] = {4, 1}, zero[2] = {0, 1}, inter[2] = {2, 1}, tr[2] = {1, 3},
            pad[2] = {-9, 2}, zs1[2] = {4, 0};
    sp_tensor t = mk(buf, SP_F32, 2, s, dense);
    CHECK(sp_tensor_self_overlaps_(&t) == 0);
    t = mk(buf, SP_F32, 2, s, zero);
    CHECK(sp_tensor_self_overlaps_(&t) == 1);
    t = mk(buf, SP_F32, 2, s, zs1);
    CHECK(sp_tensor_self_overlaps_(&t) == 1);
    t = mk(buf, SP_F32, 2, s, inter); /* [0,2] and [1,0] are both at 2 */
    CHECK(sp_tensor_self_overlaps_(&t) == 1);
    t = mk(buf, SP_F32, 2, s, tr);
    CHECK(sp_tensor_self_overlaps_(&t) == 0);
    t = mk(buf, SP_F32, 2, s, pad);
    CHECK(sp_tensor_self_overlaps_(&t) == 0);
    /* A zero stride on a size-1 dim aliases nothing. */
    int64_t s1[3] = {3, 1, 4}, st1[3] = {4, 0, 1};
    t = mk(buf, SP_F32, 3, s1, st1);
    CHECK(sp_tensor_self_overlaps_(&t) == 0);
    t = mk(buf, SP_F32, 0, NULL, NULL);
    CHECK(sp_tensor_self_overlaps_(&t) == 0);

    /* Layouts the generator makes for destinations never alias, and the
     * check must accept them (the copy tests rely on it); random small
     * strides: a "no" must be true. */
    for (int trial = 0; trial < 3000; trial++) {
        int64_t shape[SP_MAX_DIMS];
        int nd = ts_shape_random(r, 5, 5, 400, shape);
        sp_dtype dt = (sp_dtype)ts_rng_range(r, 0, SP_DTYPE_COUNT_ - 1);
        ts_layout l;
        ts_layout_random(r, dt, nd, shape, 0, &l);
        t = ts_layout_tensor(&l, buf, sp_cpu());
        int got = sp_tensor_self_overlaps_(&t);
        CHECKF(got == 0, "trial %d: a generated non-aliasing layout reported as overlapping",
               trial);
        if (got) ts_print_tensor(stderr, "t", &t);
        for (int d = 0; d < nd; d++) t.strides[d] = ts_rng_range(r, -6, 6);
        if (sp_tensor_self_overlaps_(&t) == 0) {
            CHECKF(!aliases(&t), "trial %d: an aliasing layout reported as not overlapping",
                   trial);
            if (aliases(&t)) ts_print_tensor(stderr, "t", &t);
        }
    }
}

/* ---- vector width ---------------------------------------------------------- */

static void test_widest(void) {
    uint64_t v[4];
    v[0] = 0;
    CHECK(sp_widest_vector_(v, 1) == 16);
    CHECK(sp_widest_vector_(v, 0) == 16);
    v[0] = 256, v[1] = 48, v[2] = 4096;
    CHECK(sp_widest_vector_(v, 3) == 16);
    v[1] = 24;
    CHECK(sp_widest_vector_(v, 3) == 8);
    v[0] = 12;
    CHECK(sp_widest_vector_(v, 3) == 4);
    v[2] = 6;
    CHECK(sp_widest_vector_(v, 3) == 2);
    v[3] = 3;
    CHECK(sp_widest_vector_(v, 4) == 1);
    v[0] = 0x7ffe0010; /* an address-like value */
    CHECK(sp_widest_vector_(v, 1) == 16);
    v[0] = 0x7ffe0018;
    CHECK(sp_widest_vector_(v, 1) == 8);
    v[0] = (uint64_t)1 << 63;
    CHECK(sp_widest_vector_(v, 1) == 16);
    v[0] = 2, v[1] = 1;
    CHECK(sp_widest_vector_(v, 2) == 1);
}

/* ---- plan_pair ------------------------------------------------------------- */

/* Run a descriptor move by move, as documented in internal.h. Returns 0,
 * or a nonzero code when a move breaks the descriptor's own promises
 * (misaligned for vec, beyond the declared span). */
static int run_desc(const sp_copy_desc *d) {
    if (d->vec != 1 && d->vec != 2 && d->vec != 4 && d->vec != 8 && d->vec != 16) return 1;
    if (d->units <= 0 || d->run_units <= 0 || d->units % d->run_units) return 2;
    if (d->nouter < 0 || d->nouter > SP_DESC_OUTER) return 3;
    int64_t outer = 1;
    for (int k = 0; k < d->nouter; k++) outer *= d->outer_shape[k];
    if (outer * d->run_units != d->units) return 4;
    for (int64_t u = 0; u < d->units; u++) {
        int64_t o = u / d->run_units, i = u % d->run_units;
        int64_t so = i * d->src_run_stride, dof = i * d->dst_run_stride;
        for (int k = 0; k < d->nouter; k++) {
            int64_t ik = o % d->outer_shape[k];
            o /= d->outer_shape[k];
            so += ik * d->src_outer_stride[k];
            dof += ik * d->dst_outer_stride[k];
        }
        uint64_t sa = d->src + (uint64_t)so, da = d->dst + (uint64_t)dof;
        if (sa % (uint64_t)d->vec || da % (uint64_t)d->vec) return 5;
        if ((so < 0 ? -so : so) + d->vec > d->src_span) return 6;
        if ((dof < 0 ? -dof : dof) + d->vec > d->dst_span) return 7;
        memcpy((void *)(uintptr_t)da, (const void *)(uintptr_t)sa, (size_t)d->vec);
    }
    return 0;
}

static void plan(const sp_tensor *s, const sp_tensor *d, sp_copy_desc *out) {
    sp_copy_pair p;
    p.src = *s;
    p.dst = *d;
    memset(out, 0xa5, sizeof *out);
    sp_plan_pair_(&p, out);
}

static void test_plan_hand(void) {
    /* K3 q, k, v of a [T, 3P] buffer: runs of P bf16 = 256H bytes, 16-byte
     * moves, one outer dim of T rows. */
    enum { T = 4, H = 2, P = H * 128 };
    uint16_t *qkv = aligned_alloc(256, (size_t)T * 3 * P * 2);
    uint16_t *dense = aligned_alloc(256, (size_t)T * P * 2);
    int64_t shape4[4] = {1, T, H, 128};
    int64_t qst[4] = {(int64_t)T * 3 * P, 3 * P, 128, 1};
    sp_copy_desc d;
    for (int which = 0; which < 3; which++) {
        sp_tensor q = mk(qkv + which * P, SP_BF16, 4, shape4, qst), dq;
        CHECK_OK(sp_tensor_dense(&dq, dense, SP_BF16, 4, shape4, sp_cpu()));
        plan(&q, &dq, &d);
        CHECK(d.src == (uint64_t)(uintptr_t)(qkv + which * P));
        CHECK(d.dst == (uint64_t)(uintptr_t)dense);
        CHECK(d.vec == 16);
        CHECK(d.run_units == 2 * P / 16);
        CHECK(d.units == (int64_t)T * 2 * P / 16);
        CHECK(d.src_run_stride == 16 && d.dst_run_stride == 16);
        CHECK(d.nouter == 1 && d.outer_shape[0] == T);
        CHECK(d.src_outer_stride[0] == 3 * P * 2 && d.dst_outer_stride[0] == P * 2);
    }
    free(qkv);
    free(dense);

    /* beta, a column slice of a merged projection, at TP1 (H = 96: rows of
     * 192 bytes, 16-byte moves) and TP8 (H = 12: rows of 24 bytes, so 8). */
    const int64_t heads[2] = {96, 12};
    const int vecs[2] = {16, 8};
    for (int tp = 0; tp < 2; tp++)
        for (int kind = TS_K3_BETA_FA; kind <= TS_K3_BETA_INPROJ; kind++) {
            ts_k3 k;
            ts_k3_init(&k, 4, heads[tp], kind);
            void *qkv = aligned_alloc(256, (k.qkv_bytes + 255) / 256 * 256);
            void *proj = aligned_alloc(256, (k.proj_bytes + 255) / 256 * 256);
            void *g = aligned_alloc(256, (k.g_bytes + 255) / 256 * 256);
            void *out = aligned_alloc(256, 4096);
            sp_tensor v[5], db;
            ts_k3_views(&k, qkv, proj, g, sp_cpu(), v);
            CHECK_OK(sp_tensor_dense(&db, out, SP_BF16, 3, v[4].shape, sp_cpu()));
            plan(&v[4], &db, &d);
            int64_t H_ = heads[tp];
            CHECKF(d.vec == vecs[tp], "beta %s H=%lld: vec %d", ts_k3_beta_name(kind),
                   (long long)H_, d.vec);
            CHECK(d.run_units == H_ * 2 / vecs[tp]);
            CHECK(d.units == 4 * H_ * 2 / vecs[tp]);
            CHECK(d.src_run_stride == vecs[tp] && d.dst_run_stride == vecs[tp]);
            CHECK(d.nouter == 1 && d.outer_shape[0] == 4);
            CHECK(d.src_outer_stride[0] == k.width * 2 && d.dst_outer_stride[0] == H_ * 2);
            CHECK(d.src == (uint64_t)(uintptr_t)v[4].data);
            free(qkv);
            free(proj);
            free(g);
            free(out);
        }

    /* A transposed source (element stride 7 innermost): an element-wise
     * gather, one element per move. */
    float *m = aligned_alloc(256, 256), *mt = aligned_alloc(256, 256);
    int64_t ts[2] = {7, 5}, tst[2] = {1, 7};
    sp_tensor tsrc = mk(m, SP_F32, 2, ts, tst), tdst;
    CHECK_OK(sp_tensor_dense(&tdst, mt, SP_F32, 2, ts, sp_cpu()));
    plan(&tsrc, &tdst, &d);
    CHECK(d.vec == 4 && d.units == 35 && d.run_units == 5);
    CHECK(d.src_run_stride == 28 && d.dst_run_stride == 4);
    CHECK(d.nouter == 1 && d.outer_shape[0] == 7);
    CHECK(d.src_outer_stride[0] == 4 && d.dst_outer_stride[0] == 20);

    /* A destination 2 bytes off 16: contiguous runs, but only 2-byte moves. */
    int64_t s2[2] = {4, 8}, st2[2] = {16, 1};
    sp_tensor a = mk(m, SP_BF16, 2, s2, st2), b;
    CHECK_OK(sp_tensor_dense(&b, (char *)mt + 2, SP_BF16, 2, s2, sp_cpu()));
    plan(&a, &b, &d);
    CHECK(d.vec == 2 && d.units == 32);
    /* Dense to dense of 48 bytes: a single run. */
    int64_t s3[1] = {12};
    sp_tensor c, e;
    CHECK_OK(sp_tensor_dense(&c, m, SP_F32, 1, s3, sp_cpu()));
    CHECK_OK(sp_tensor_dense(&e, mt, SP_F32, 1, s3, sp_cpu()));
    plan(&c, &e, &d);
    CHECK(d.vec == 16 && d.units == 3 && d.run_units == 3 && d.nouter == 0);
    /* A scalar: one move of the element size. */
    sp_tensor sc = mk(m, SP_F64, 0, NULL, NULL), sd = mk(mt, SP_F64, 0, NULL, NULL);
    plan(&sc, &sd, &d);
    CHECK(d.units * d.vec == 8 && run_desc(&d) == 0);
    free(m);
    free(mt);
}

/* Random valid pairs: the descriptor, executed here, reproduces the
 * reference copy bit for bit and touches nothing else; every move is
 * aligned to vec and within the declared spans. */
static void test_plan_random(ts_rng *r) {
    ts_arena a; /* source and destination, with poisoned gaps around them */
    ts_arena_init(&a, ts_mem_host(), (size_t)64 << 20);
    for (int trial = 0; trial < 1500; trial++) {
        int64_t shape[SP_MAX_DIMS];
        int nd = ts_shape_random(r, 8, 7, 3000, shape);
        int64_t numel = 1;
        for (int i = 0; i < nd; i++) numel *= shape[i];
        if (numel == 0) continue; /* planned pairs are non-empty */
        sp_dtype dt = (sp_dtype)ts_rng_range(r, 0, SP_DTYPE_COUNT_ - 1);
        size_t es = sp_dtype_size(dt);
        ts_layout ls, ld;
        ts_layout_random(r, dt, nd, shape, TS_LAYOUT_ALLOW_ZERO_STRIDE, &ls);
        if (ts_rng_range(r, 0, 3) == 0)
            ts_layout_dense(dt, nd, shape, &ld);
        else
            ts_layout_random(r, dt, nd, shape, 0, &ld);
        size_t shs = es * (size_t)ts_rng_range(r, 0, 15 / (int64_t)es);
        size_t shd = es * (size_t)ts_rng_range(r, 0, 15 / (int64_t)es);
        ts_arena_reset(&a);
        sp_tensor s = ts_layout_tensor(&ls, ts_arena_take(&a, (size_t)ls.buffer_elems * es, shs),
                                       sp_cpu());
        sp_tensor d = ts_layout_tensor(&ld, ts_arena_take(&a, (size_t)ld.buffer_elems * es, shd),
                                       sp_cpu());
        ts_arena_poison(&a, r);
        sp_tensor de = ts_arena_on_image(&a, d);
        ts_ref_copy(&s, &de);
        sp_copy_desc desc;
        plan(&s, &d, &desc);
        int rc = run_desc(&desc);
        long diff = ts_arena_first_diff(&a);
        CHECKF(rc == 0 && diff < 0,
               "plan trial %d: descriptor check %d, first wrong byte %ld (vec %d units %lld "
               "run %lld nouter %d)",
               trial, rc, diff, desc.vec, (long long)desc.units, (long long)desc.run_units,
               desc.nouter);
        int bad = rc != 0 || diff >= 0;
        if (bad) {
            ts_print_tensor(stderr, "src", &s);
            ts_print_tensor(stderr, "dst", &d);
        }
        if (bad) break;
    }
    ts_arena_free(&a);
}

int main(void) {
    ts_rng r;
    ts_rng_seed(&r, 0x5eed0001);
    test_numel();
    test_dense();
    test_coalesce_hand();
    test_coalesce_random(&r);
    test_extent();
    test_self_overlap(&r);
    test_widest();
    test_plan_hand();
    test_plan_random(&r);
    return sp_test_finish("test_view_math");
}
