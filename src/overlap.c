/* overlap.c — the overlap engine: whether a view that a call writes shares
 * a byte with another view of the call (sp_find_overlap_), and the one
 * wording of its error. sp_copy_batch and the contracts of the other
 * entries (contract.c, the KDA checks) all decide overlap here, so that
 * every entry answers alike. The policy and the walks that keep it fast
 * follow. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- the overlap policy ----------------------------------------------------
 * A written view may share no byte with any other view of the call. Byte
 * extents are sorted, written and read views apart, so that only the pairs
 * whose extents intersect are walked (never two read views) and tested
 * element by element. Each pair is keyed (a, b), a written; the smallest
 * failing key is the answer, so the message does not depend on the order
 * of the walk.
 *
 * Column slices of one fused buffer all have intersecting extents, so a
 * family of them is walked by a second key instead. A view whose layout
 * coalesces to two dims of byte strides s < P, and whose bytes within one
 * step of the larger stride span at most P, has every byte in the window
 * [lo mod P, lo mod P + span) modulo P. Two views of one family (the same
 * s and P) whose windows do not meet share no byte; and the exact test of
 * two such views is never undecided (two distinct strides: it is solved
 * exactly), so leaving them untested changes no answer. Each family of
 * many written views (a group) is walked within itself in window order, or
 * in extent order where that meets fewer pairs; every other pair (across
 * groups, or with a view of no group) in extent order. A view that
 * coalesces to one dim of byte stride P joins a group of that P (its
 * window: one element). Views of different families in one buffer are
 * still tested pair by pair. */
typedef struct extent {
    uintptr_t lo, hi;
    size_t i;            /* index into the views */
    uint64_t s, P;       /* its family, or P = 0 for none */
    uint64_t r, span;    /* its window modulo P */
    size_t g;            /* the group it is walked in (see sp_find_overlap_) */
} extent;

static int by_group_lo(const void *x, const void *y) {
    const extent *a = x, *b = y;
    if (a->g != b->g) return a->g < b->g ? -1 : 1;
    if (a->lo != b->lo) return a->lo < b->lo ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

static int by_lo(const void *x, const void *y) {
    const extent *a = x, *b = y;
    if (a->lo != b->lo) return a->lo < b->lo ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

static int by_r(const void *x, const void *y) {
    const extent *a = x, *b = y;
    if (a->r != b->r) return a->r < b->r ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

static int by_family(const void *x, const void *y) {
    const extent *a = x, *b = y;
    if (a->P != b->P) return a->P < b->P ? -1 : 1;
    if (a->s != b->s) return a->s < b->s ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

/* t's family and window, when it has them (see above). A layout that
 * coalesces to one dim of byte stride P >= its element (a column one
 * element wide) has the window [lo mod P, lo mod P + element) and s = 0:
 * it may join the family of any two-dim layout with that P, since its
 * exact test against one of them still sees two strides only. */
static void family_of(const sp_tensor *t, extent *x) {
    x->s = x->P = x->r = x->span = 0;
    int64_t shape[SP_MAX_DIMS], st[SP_MAX_DIMS], unused[SP_MAX_DIMS];
    int nd;
    sp_coalesce_pair_(t, t, &nd, shape, st, unused);
    const uint64_t es = (uint64_t)sp_dtype_size((sp_dtype)t->dtype);
    if (nd == 1 && st[0] != 0) {
        x->P = (uint64_t)sp_abs64_(st[0]) * es;
        x->r = (uint64_t)x->lo % x->P;
        x->span = es;
        return;
    }
    if (nd != 2 || st[0] == 0 || st[1] == 0) return;
    const int small = sp_abs64_(st[0]) < sp_abs64_(st[1]) ? 0 : 1;
    const uint64_t s = (uint64_t)sp_abs64_(st[small]) * es, P = (uint64_t)sp_abs64_(st[1 - small]) * es;
    const uint64_t span = (uint64_t)(shape[small] - 1) * s + es;
    if (s >= P || span > P) return;
    x->s = s;
    x->P = P;
    x->r = (uint64_t)x->lo % P;
    x->span = span;
}

typedef struct overlap_walk {
    const sp_view_ref_ *views;
    sp_overlap_hit_ *hit;
} overlap_walk;

/* Test views i and j (one written), keyed (written, other) or, both
 * written, (smaller, larger), unless a smaller key has failed already. */
static void test_pair(overlap_walk *w, size_t i, size_t j) {
    if (i == j) return;
    const int wi = w->views[i].written, wj = w->views[j].written;
    const size_t a = wi && wj ? (i < j ? i : j) : wi ? i : j, b = a == i ? j : i;
    sp_overlap_hit_ *h = w->hit;
    if (h->found && (a > h->a || (a == h->a && b >= h->b))) return;
    int o = sp_tensors_overlap_(w->views[a].t, w->views[b].t);
    if (o == 0) return;
    h->found = o;
    h->a = a;
    h->b = b;
}

/* First index of X[0 .. n) (sorted by r) whose r is not below v. */
static size_t first_r(const extent *X, size_t n, uint64_t v) {
    size_t a = 0, b = n;
    while (a < b) {
        const size_t m = a + (b - a) / 2;
        if (X[m].r < v) a = m + 1;
        else b = m;
    }
    return a;
}

/* Pairs of A and B (sorted by lo) whose extents intersect: B's that start
 * inside an A at or after its start, A's that start inside a B after its
 * start; with B == A, each pair once. With w NULL they are only counted,
 * up to just past `limit`. */
static size_t walk_extents(overlap_walk *w, const extent *A, size_t na, const extent *B,
                           size_t nb, size_t limit) {
    size_t met = 0;
    for (size_t x = 0, y0 = 0; x < na; x++) {
        if (A == B) y0 = x + 1;
        else
            while (y0 < nb && B[y0].lo < A[x].lo) y0++;
        for (size_t y = y0; y < nb && B[y].lo < A[x].hi; y++) {
            if (w) test_pair(w, A[x].i, B[y].i);
            else if (++met > limit) return met;
        }
    }
    if (A == B) return met;
    for (size_t y = 0, x0 = 0; y < nb; y++) {
        while (x0 < na && A[x0].lo <= B[y].lo) x0++;
        for (size_t x = x0; x < na && A[x].lo < B[y].hi; x++) {
            if (w) test_pair(w, A[x].i, B[y].i);
            else if (++met > limit) return met;
        }
    }
    return met;
}

/* Members x of X (sorted by r) whose r is in [lo, hi) modulo P, for
 * 0 <= lo < P and hi <= lo + P: visited (w) or counted. */
static size_t walk_window(overlap_walk *w, size_t i, const extent *X, size_t n, uint64_t lo,
                          uint64_t hi, uint64_t P) {
    size_t met = 0;
    const uint64_t ranges[2][2] = {{lo, hi < P ? hi : P}, {0, hi > P ? hi - P : 0}};
    for (int k = 0; k < 2; k++) {
        const size_t y0 = first_r(X, n, ranges[k][0]), y1 = first_r(X, n, ranges[k][1]);
        if (y1 <= y0) continue;
        if (!w) met += y1 - y0;
        else
            for (size_t y = y0; y < y1; y++) test_pair(w, i, X[y].i);
    }
    return met;
}

/* Pairs of one family's A and B (sorted by r) whose windows meet: a B
 * that starts in an A's window, or an A that starts in a B's (with B == A
 * the first is every pair). */
static size_t walk_windows(overlap_walk *w, const extent *A, size_t na, const extent *B,
                           size_t nb) {
    size_t met = 0;
    for (size_t x = 0; x < na; x++) {
        met += walk_window(w, A[x].i, B, nb, A[x].r, A[x].r + A[x].span, A[x].P);
        if (met > SIZE_MAX / 4) met = SIZE_MAX / 4;
    }
    if (A == B) return met;
    for (size_t y = 0; y < nb; y++) {
        met += walk_window(w, B[y].i, A, na, B[y].r, B[y].r + B[y].span, B[y].P);
        if (met > SIZE_MAX / 4) met = SIZE_MAX / 4;
    }
    return met;
}

/* Pairs of A and B, by whichever order meets fewer of them. Ar, Br: the
 * same views sorted by r (one family). */
static void walk_family(overlap_walk *w, const extent *A, const extent *Ar, size_t na,
                        const extent *B, const extent *Br, size_t nb) {
    const size_t by_windows = walk_windows(NULL, Ar, na, Br, nb);
    if (walk_extents(NULL, A, na, B, nb, by_windows) > by_windows)
        walk_windows(w, Ar, na, Br, nb);
    else
        walk_extents(w, A, na, B, nb, 0);
}

enum { SP_OVERLAP_STACK = 2 * SP_MAX_PAIRS_PER_LAUNCH };

sp_status sp_find_overlap_(const sp_view_ref_ *views, size_t n, sp_overlap_hit_ *hit) {
    hit->found = 0;
    hit->a = hit->b = 0;
    if (n < 2) return SP_OK;
    extent stack[SP_OVERLAP_STACK], *e = stack;
    if (n > SP_OVERLAP_STACK) {
        e = n <= SIZE_MAX / sizeof *e ? malloc(n * sizeof *e) : NULL;
        SP_REQUIRE(e != NULL, SP_ERR_OUT_OF_MEMORY,
                   "no host memory for the overlap check of %zu views", n);
    }
    /* Written views from the front, read views from the back; empty ones
     * touch nothing and are left out. */
    size_t nw = 0, nr = 0;
    for (size_t i = 0; i < n; i++) {
        extent x = {0, 0, i, 0, 0, 0, 0, 0};
        sp_tensor_extent_(views[i].t, &x.lo, &x.hi);
        if (x.lo == x.hi) continue;
        e[views[i].written ? nw++ : n - 1 - nr++] = x;
    }
    extent *W = e, *R = e + n - nr;
    overlap_walk w = {views, hit};
    qsort(W, nw, sizeof *W, by_lo);
    qsort(R, nr, sizeof *R, by_lo);
    /* Few intersecting extents (the usual case), or no memory for the
     * groups' two scratch lists of n: each of those pairs. */
    const size_t limit = 8 * n;
    extent *F = NULL;
    if (walk_extents(NULL, W, nw, W, nw, limit) + walk_extents(NULL, W, nw, R, nr, limit) <= limit ||
        !(F = n <= SIZE_MAX / (2 * sizeof *F) ? malloc(2 * n * sizeof *F) : NULL)) {
        walk_extents(&w, W, nw, W, nw, 0);
        walk_extents(&w, W, nw, R, nr, 0);
        if (e != stack) free(e);
        return SP_OK;
    }
    for (size_t x = 0; x < nw; x++) family_of(views[W[x].i].t, &W[x]);
    for (size_t x = 0; x < nr; x++) family_of(views[R[x].i].t, &R[x]);
    /* Groups: each family (s, P) of at least max(8, nw / 16) written views
     * (so at most 16), walked by windows within itself. A one-dim view
     * (s = 0) joins the first group of its P (of a two-dim family only two
     * strides then meet in one exact test); the rest are "others". */
    enum { MAX_GROUPS = 16 };
    uint64_t gs[MAX_GROUPS], gP[MAX_GROUPS];
    size_t k = 0;
    memcpy(F, W, nw * sizeof *F);
    qsort(F, nw, sizeof *F, by_family);
    const size_t min_size = nw / 16 > 8 ? nw / 16 : 8;
    for (size_t x = 0; x < nw && k < MAX_GROUPS;) {
        size_t y = x + 1;
        while (y < nw && F[y].P == F[x].P && F[y].s == F[x].s) y++;
        if (F[x].P != 0 && y - x >= min_size) gs[k] = F[x].s, gP[k++] = F[x].P;
        x = y;
    }
    extent *X[2] = {W, R};
    const size_t nx[2] = {nw, nr};
    for (int l = 0; l < 2; l++)
        for (size_t x = 0; x < nx[l]; x++) {
            extent *v = &X[l][x];
            v->g = k; /* others */
            for (size_t j = 0; j < k && v->g == k; j++)
                if (v->P == gP[j] && (v->s == gs[j] || v->s == 0)) v->g = j;
        }
    /* By group, then by lo: each group's views one sorted run, the others
     * last. */
    qsort(W, nw, sizeof *W, by_group_lo);
    qsort(R, nr, sizeof *R, by_group_lo);
    size_t wb[MAX_GROUPS + 2], rb[MAX_GROUPS + 2];
    for (size_t j = 0, x = 0, y = 0; j <= k + 1; j++) {
        while (x < nw && W[x].g < j) x++;
        while (y < nr && R[y].g < j) y++;
        wb[j] = x, rb[j] = y;
    }
    extent *T = F + n; /* scratch: n views sorted by lo */
    for (size_t j = 0; j < k; j++) {
        extent *Wj = W + wb[j], *Rj = R + rb[j];
        const size_t nwj = wb[j + 1] - wb[j], nrj = rb[j + 1] - rb[j];
        extent *Wjr = F, *Rjr = F + nwj; /* the same by r */
        memcpy(Wjr, Wj, nwj * sizeof *F);
        memcpy(Rjr, Rj, nrj * sizeof *F);
        qsort(Wjr, nwj, sizeof *F, by_r);
        qsort(Rjr, nrj, sizeof *F, by_r);
        walk_family(&w, Wj, Wjr, nwj, Wj, Wjr, nwj); /* written x written, in the group */
        walk_family(&w, Wj, Wjr, nwj, Rj, Rjr, nrj); /* written x read, in the group */
        /* x the written views of later groups and the others */
        size_t nt = nw - wb[j + 1];
        memcpy(T, W + wb[j + 1], nt * sizeof *T);
        qsort(T, nt, sizeof *T, by_lo);
        walk_extents(&w, Wj, nwj, T, nt, 0);
        /* x the read views outside the group */
        nt = 0;
        for (size_t y = 0; y < nr; y++)
            if (R[y].g != j) T[nt++] = R[y];
        qsort(T, nt, sizeof *T, by_lo);
        walk_extents(&w, Wj, nwj, T, nt, 0);
    }
    /* The others: among themselves, and x every read view. */
    extent *Wo = W + wb[k];
    const size_t wo = nw - wb[k];
    walk_extents(&w, Wo, wo, Wo, wo, 0);
    memcpy(T, R, nr * sizeof *T);
    qsort(T, nr, sizeof *T, by_lo);
    walk_extents(&w, Wo, wo, T, nr, 0);
    free(F);
    if (e != stack) free(e);
    return SP_OK;
}

sp_status sp_overlap_error_(const sp_overlap_hit_ *h, const char *a, const char *b) {
    if (h->found == 0) return SP_OK;
    if (h->found > 0) return sp_set_error_(SP_ERR_OVERLAP, "%s: shares memory with %s", a, b);
    return sp_set_error_(SP_ERR_OVERLAP,
                        "%s: could not prove it disjoint from %s (their layouts are too "
                        "intricate for the bounded overlap search; they may well not share "
                        "memory)",
                        a, b);
}

sp_status sp_check_disjoint_(const sp_view_ref_ *views, const char *const *names, size_t n) {
    sp_overlap_hit_ h;
    SP_FORWARD(sp_find_overlap_(views, n, &h));
    if (h.found == 0) return SP_OK;
    return sp_overlap_error_(&h, names[h.a], names[h.b]);
}
