/* test_overlap.c — the exact overlap test of two views against brute force:
 * paint every byte each view covers, and compare "some byte painted twice"
 * with sp_tensors_overlap_ over many random small views of one buffer. Then
 * the cases that matter: column slices of one fused buffer never overlap, and
 * sp_copy_batch accepts scattering into them. And the overlap policy over
 * many views (sp_find_overlap_) against the plain pairwise loop. */
#include "check.h"
#include "internal.h"
#include "test_support.h"

#include <string.h>

enum { BUF = 8192, ORIGIN = 4096 };
static unsigned char buf[BUF], paint_marks[BUF];

/* Or `bit` into marks[] at every byte of t, a view into base. */
static void paint_at(const sp_tensor *t, const unsigned char *base, unsigned char *marks,
                     unsigned char bit) {
    int64_t idx[SP_MAX_DIMS] = {0}, n = sp_numel_(t);
    int64_t es = (int64_t)sp_dtype_size((sp_dtype)t->dtype);
    for (int64_t l = 0; l < n; l++) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
        const unsigned char *p = (const unsigned char *)t->data + off * es;
        for (int64_t k = 0; k < es; k++) marks[p - base + k] |= bit;
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
}

static void paint(const sp_tensor *t, unsigned char bit) { paint_at(t, buf, paint_marks, bit); }

static sp_tensor random_view(ts_rng *r) {
    static const sp_dtype types[4] = {SP_U8, SP_BF16, SP_F32, SP_F64};
    sp_dtype dt = types[ts_rng_range(r, 0, 3)];
    int64_t es = (int64_t)sp_dtype_size(dt), shape[SP_MAX_DIMS], strides[SP_MAX_DIMS];
    int nd = (int)ts_rng_range(r, 0, 4);
    for (int d = 0; d < nd; d++) {
        shape[d] = ts_rng_range(r, 0, 5);
        strides[d] = ts_rng_range(r, -9, 9);
    }
    int64_t at = (ORIGIN + ts_rng_range(r, -64, 64)) / es; /* element index of [0..0] */
    sp_tensor t;
    sp_tensor_view(&t, buf, at, dt, nd, shape, strides, sp_cpu());
    return t;
}

/* 1-D and 2-D progressions far past the search budget: always decided
 * exactly (never -1), brute force is the judge. Rows of two pitches in one
 * buffer, strides of any sign, bytes of one view between those of the other. */
static void test_large_progressions(ts_rng *r) {
    enum { BIG = 1 << 18, MID = BIG / 2 };
    static unsigned char big[BIG], marks[BIG];
    int exact = 0;
    for (int it = 0; it < 300; it++) {
        sp_tensor v[2];
        for (int k = 0; k < 2; k++) {
            int nd = (int)ts_rng_range(r, 1, 2);
            int64_t sh[2], st[2];
            if (nd == 1) {
                sh[0] = ts_rng_range(r, 1000, 20000);
                st[0] = ts_rng_range(r, -6, 6);
            } else { /* rows of a [rows, pitch] buffer, maybe reversed */
                sh[1] = ts_rng_range(r, 2, 64);
                st[1] = ts_rng_range(r, 0, 2) ? 1 : ts_rng_range(r, -3, 3);
                sh[0] = ts_rng_range(r, 50, 400);
                st[0] = (ts_rng_range(r, 0, 1) ? 1 : -1) * ts_rng_range(r, 64, 300);
            }
            CHECK_OK(sp_tensor_view(&v[k], big, MID + ts_rng_range(r, -40, 40), SP_U8, nd, sh,
                                    st, sp_cpu()));
        }
        memset(marks, 0, sizeof marks);
        paint_at(&v[0], big, marks, 1);
        paint_at(&v[1], big, marks, 2);
        int truth = memchr(marks, 3, sizeof marks) != NULL, got = sp_tensors_overlap_(&v[0], &v[1]);
        CHECKF(got == truth, "progressions %d: got %d, brute force %d", it, got, truth);
        if (got != truth) {
            ts_print_tensor(stderr, "a", &v[0]);
            ts_print_tensor(stderr, "b", &v[1]);
        }
        exact += got == truth;
    }
    CHECK(exact == 300);
}

/* Rows of two pitches in one buffer, [T, w] with strides (W, 1), thousands
 * of rows each (views of a buffer never touched: only the math runs). The
 * truth, row by row of b: the rows of a near it in address. */
static int rows_meet(int64_t ta, int64_t wa, int64_t pa, int64_t tb, int64_t wb, int64_t pb,
                     int64_t gap) {
    for (int64_t j = 0; j < tb; j++) {
        int64_t lo = gap + j * pb, hi = lo + wb; /* b's row j: bytes [lo, hi) */
        int64_t i = lo >= 0 ? lo / pa : 0;       /* a's row at or before lo */
        for (int64_t k = i; k <= i + 1 && k < ta; k++)
            if (k * pa < hi && lo < k * pa + wa) return 1;
    }
    return 0;
}

static void test_two_pitches(ts_rng *r) {
    unsigned char *base = (unsigned char *)((uintptr_t)1 << 40);
    int undecided = 0;
    for (int it = 0; it < 200; it++) {
        int64_t ta = ts_rng_range(r, 1, 3000), tb = ts_rng_range(r, 1, 3000);
        int64_t wa = ts_rng_range(r, 1, 3000), wb = ts_rng_range(r, 1, 3000);
        int64_t pa = wa + ts_rng_range(r, 0, 2000), pb = wb + ts_rng_range(r, 0, 2000);
        int64_t gap = ts_rng_range(r, 0, 1000000);
        int64_t sha[2] = {ta, wa}, sta[2] = {pa, 1}, shb[2] = {tb, wb}, stb[2] = {pb, 1};
        sp_tensor a, b;
        CHECK_OK(sp_tensor_view(&a, base, 0, SP_U8, 2, sha, sta, sp_cpu()));
        CHECK_OK(sp_tensor_view(&b, base, gap, SP_U8, 2, shb, stb, sp_cpu()));
        int truth = rows_meet(ta, wa, pa, tb, wb, pb, gap), got = sp_tensors_overlap_(&a, &b);
        undecided += got == -1;
        CHECKF(got == truth || got == -1, "pitches %d: got %d, truth %d", it, got, truth);
    }
    CHECKF(undecided == 0, "%d of 200 row pairs undecided", undecided);
}

/* Sixteen dims of unrelated strides: the bounded search gives up on this
 * disjoint pair (brute force: no byte in common). It must then say
 * "unknown" (-1), never "overlap", and sp_copy_batch must say it could not
 * prove the views disjoint rather than that they share memory. */
static void test_search_gives_up(void) {
    enum { BIG = 1 << 18, MID = BIG / 2 };
    static unsigned char big[BIG], marks[BIG];
    static const int64_t sa[8] = {733, 742, 1514, -3010, -6028, -12039, -24098, -48194};
    static const int64_t sb[8] = {9041, -12074, -8641, 3400, 11814, 9500, 14204, 2927};
    int64_t sh2[8], sh3[8];
    for (int d = 0; d < 8; d++) sh2[d] = 2, sh3[d] = 3;
    sp_copy_pair p[2];
    CHECK_OK(sp_tensor_view(&p[0].dst, big, MID + 25, SP_U8, 8, sh2, sa, sp_cpu()));
    CHECK_OK(sp_tensor_view(&p[1].src, big, MID + 55, SP_U8, 8, sh3, sb, sp_cpu()));
    static unsigned char a_src[256], b_dst[6561];
    CHECK_OK(sp_tensor_dense(&p[0].src, a_src, SP_U8, 8, sh2, sp_cpu()));
    CHECK_OK(sp_tensor_dense(&p[1].dst, b_dst, SP_U8, 8, sh3, sp_cpu()));
    memset(marks, 0, sizeof marks);
    paint_at(&p[0].dst, big, marks, 1);
    paint_at(&p[1].src, big, marks, 2);
    CHECK(memchr(marks, 3, sizeof marks) == NULL);
    int got = sp_tensors_overlap_(&p[0].dst, &p[1].src);
    CHECKF(got != 1, "a disjoint pair reported as overlapping");
    if (got == -1) {
        CHECK_STATUS(sp_copy_batch(p, 2, NULL), SP_ERR_OVERLAP);
        CHECKF(strstr(sp_last_error(), "could not prove") && !strstr(sp_last_error(), "shares"),
               "message: %s", sp_last_error());
    }
}

/* sp_find_overlap_ against the pairwise rule it replaces: random sets of up
 * to 300 views (the stack and the heap path) in one small buffer, each
 * written or read at random, many of them overlapping; the first failing
 * (a, b) of the plain double loop is the answer, found or not. */
static void test_find_overlap(ts_rng *r) {
    enum { MAXV = 300 };
    static sp_tensor v[MAXV];
    static sp_view_ref_ refs[MAXV];
    int found = 0;
    for (int it = 0; it < 400; it++) {
        const size_t n = (size_t)ts_rng_range(r, 0, it % 4 == 0 ? MAXV : 40);
        const int wfrac = (int)ts_rng_range(r, 0, 8), sparse = (int)ts_rng_range(r, 0, 3) == 0;
        for (size_t i = 0; i < n; i++) {
            v[i] = random_view(r);
            if (sparse && sp_numel_(&v[i]) > 0) /* mostly apart: few intersecting extents */
                v[i].data = (unsigned char *)v[i].data + (ts_rng_range(r, -30, 30) * 64) /
                                                             (int64_t)sp_dtype_size((sp_dtype)v[i].dtype) *
                                                             (int64_t)sp_dtype_size((sp_dtype)v[i].dtype);
            refs[i] = (sp_view_ref_){&v[i], ts_rng_range(r, 0, 7) < wfrac};
        }
        sp_overlap_hit_ want = {0, 0, 0}, got;
        for (size_t a = 0; a < n && !want.found; a++) {
            if (!refs[a].written) continue;
            for (size_t b = 0; b < n && !want.found; b++) {
                if (b == a || (refs[b].written && b < a)) continue;
                int o = sp_tensors_overlap_(&v[a], &v[b]);
                if (o) want = (sp_overlap_hit_){o, a, b};
            }
        }
        CHECK_OK(sp_find_overlap_(refs, n, &got));
        CHECKF(got.found == want.found && (!want.found || (got.a == want.a && got.b == want.b)),
               "set %d of %zu views: found %d (%zu, %zu), the pairwise rule %d (%zu, %zu)", it, n,
               got.found, got.a, got.b, want.found, want.a, want.b);
        found += want.found != 0;
    }
    CHECK(found > 50 && found < 350); /* both outcomes well represented */
}

/* The pairwise rule sp_find_overlap_ must agree with: the first failing
 * (written, other) pair in key order. */
static sp_overlap_hit_ pairwise(const sp_view_ref_ *refs, size_t n) {
    for (size_t a = 0; a < n; a++) {
        if (!refs[a].written) continue;
        for (size_t b = 0; b < n; b++) {
            if (b == a || (refs[b].written && b < a)) continue;
            int o = sp_tensors_overlap_(refs[a].t, refs[b].t);
            if (o) return (sp_overlap_hit_){o, a, b};
        }
    }
    return (sp_overlap_hit_){0, 0, 0};
}

/* Many column slices of one fused [rows, pitch] buffer (all their extents
 * intersect: sp_find_overlap_ walks them by their windows modulo the
 * pitch), or blocks of two rows of it (many share a window: walked by
 * extents, where fewer pairs meet), one moved to share bytes in most sets, with dense views and odd views of other layouts among them,
 * written or read: the same answer as the pairwise rule. */
static void test_family_walk(ts_rng *r) {
    enum { ROWS = 64, PITCH = 1600, MAXV = 400, ODD = ROWS * PITCH };
    static float fused[3 * ROWS * PITCH + 512];
    static sp_tensor v[MAXV];
    static sp_view_ref_ refs[MAXV];
    int found = 0;
    for (int it = 0; it < 120; it++) {
        const size_t n = (size_t)ts_rng_range(r, 100, MAXV);
        const int rowblocks = it % 3 == 1;
        /* One view moved by a few columns in most sets: it may meet a
         * neighbour. */
        const size_t moved = it % 4 != 0 ? (size_t)ts_rng_range(r, 0, (int64_t)n - 1) : n;
        for (size_t i = 0; i < n; i++) {
            const int kind = (int)ts_rng_range(r, 0, 19);
            int64_t shape[2] = {rowblocks ? 2 : ROWS, ts_rng_range(r, 1, 4)}, strides[2] = {PITCH, 1};
            /* Columns 4 apart (row blocks of two rows: rows apart, then
             * columns): none meet. */
            int64_t at = rowblocks ? (int64_t)(i % (ROWS / 2)) * 2 * PITCH + (int64_t)(i / (ROWS / 2)) * 4
                                   : (int64_t)i * 4;
            int written = ts_rng_range(r, 0, 3) != 0;
            if (kind >= 1 && kind <= 5) { /* a second family: another pitch, another buffer */
                strides[0] = PITCH + 2;
                shape[0] = ROWS;
                at = ODD + (int64_t)i * 4;
            }
            if (i == moved) at += ts_rng_range(r, 1, 3);
            if (kind == 6) { /* one dense run there: read */
                shape[0] = 1;
                shape[1] = ts_rng_range(r, 1, 200);
                at = 2 * ODD + 256 + ts_rng_range(r, 0, ROWS * PITCH - 200);
                written = 0;
            }
            CHECK_OK(sp_tensor_view(&v[i], fused, at, SP_F32, 2, shape, strides, sp_cpu()));
            refs[i] = (sp_view_ref_){&v[i], written};
        }
        const sp_overlap_hit_ want = pairwise(refs, n);
        sp_overlap_hit_ got;
        CHECK_OK(sp_find_overlap_(refs, n, &got));
        CHECKF(got.found == want.found && (!want.found || (got.a == want.a && got.b == want.b)),
               "family set %d of %zu views: found %d (%zu, %zu), the pairwise rule %d (%zu, %zu)",
               it, n, got.found, got.a, got.b, want.found, want.a, want.b);
        found += want.found != 0;
    }
    CHECKF(found > 20 && found < 100, "%d of 120 sets overlap", found); /* both outcomes */
}

int main(void) {
    ts_rng r;
    ts_rng_seed(&r, 11);
    test_find_overlap(&r);
    test_family_walk(&r);
    long agree = 0, both = 0;
    for (int it = 0; it < 100000; it++) {
        sp_tensor a = random_view(&r), b = random_view(&r);
        memset(paint_marks, 0, sizeof paint_marks);
        paint(&a, 1);
        paint(&b, 2);
        int truth = memchr(paint_marks, 3, sizeof paint_marks) != NULL;
        int got = sp_tensors_overlap_(&a, &b);
        CHECKF(got == truth || got == 1, "iteration %d: says no overlap, but views share a byte", it);
        agree += got == truth;
        both += truth;
    }
    /* Exact on these small views: a "maybe" is allowed only when the search
     * budget runs out, which these sizes never reach. */
    CHECKF(agree == 100000, "%ld of 100000 answers exact", agree);
    CHECK(both > 10000 && both < 90000); /* both outcomes well represented */

    /* Views whose decision exhausts the search budget: the answer must then
     * be "overlap", and these pairs do overlap (brute force says so). */
    static const struct {
        int nd[2];
        int64_t off[2], shape[2][6], strides[2][6];
    } hard[3] = {
        {{6, 4}, {0, 30}, {{8, 3, 4, 7, 7, 11}, {2, 6, 10, 3}},
         {{-56, 52, -46, 65, 44, 20}, {67, 60, -46, 63}}},
        {{5, 6}, {0, 57}, {{6, 7, 3, 7, 9}, {4, 8, 1, 8, 9, 8}},
         {{58, 54, -14, -96, -74}, {-70, -60, 90, -97, -30, -52}}},
        {{4, 4}, {0, 30}, {{8, 10, 2, 10}, {9, 7, 10, 3}}, {{51, -72, -45, 54}, {73, 33, -15, -60}}},
    };
    for (int i = 0; i < 3; i++) {
        sp_tensor v[2];
        for (int k = 0; k < 2; k++)
            CHECK_OK(sp_tensor_view(&v[k], buf, ORIGIN + hard[i].off[k], SP_U8, hard[i].nd[k],
                                    hard[i].shape[k], hard[i].strides[k], sp_cpu()));
        memset(paint_marks, 0, sizeof paint_marks);
        paint(&v[0], 1);
        paint(&v[1], 2);
        CHECK(memchr(paint_marks, 3, sizeof paint_marks) != NULL);
        CHECKF(sp_tensors_overlap_(&v[0], &v[1]) == 1, "hard case %d: says no overlap", i);
    }

    test_large_progressions(&r);
    test_two_pitches(&r);
    test_search_gives_up();

    /* q, k, v: column slices of a [T, 3P] buffer, written back by a scatter. */
    enum { T = 5, H = 2, P = H * 128 };
    static uint16_t fused[T * 3 * P], dense[3][T * P];
    int64_t shape[4] = {1, T, H, 128}, st[4] = {T * 3 * P, 3 * P, 128, 1};
    sp_copy_pair pairs[3];
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < T * P; j++) dense[i][j] = (uint16_t)(i * 7919 + j * 31 + 1);
        sp_tensor_dense(&pairs[i].src, dense[i], SP_BF16, 4, shape, sp_cpu());
        sp_tensor_view(&pairs[i].dst, fused, (int64_t)i * P, SP_BF16, 4, shape, st, sp_cpu());
    }
    CHECK(!sp_tensors_overlap_(&pairs[0].dst, &pairs[1].dst));
    CHECK(!sp_tensors_overlap_(&pairs[1].dst, &pairs[2].dst));
    CHECK_OK(sp_copy_batch(pairs, 3, NULL));
    for (int i = 0; i < 3; i++) CHECK(ts_ref_compare(&pairs[i].src, &pairs[i].dst, NULL) == 0);
    /* Shift k one element left: now it shares its first column with q's last. */
    pairs[1].dst.data = (uint16_t *)pairs[1].dst.data - 1;
    CHECK(sp_tensors_overlap_(&pairs[0].dst, &pairs[1].dst));
    CHECK_STATUS(sp_copy_batch(pairs, 3, NULL), SP_ERR_OVERLAP);
    return sp_test_finish("test_overlap");
}
