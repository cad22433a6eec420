/* copy.c — layer 2: sp_copy_batch. Validates every pair, then plans the
 * pairs into descriptors (the planner, sp_plan_pair_) and hands them to one
 * backend pass per SP_MAX_PAIRS_PER_LAUNCH pairs. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t abs64(int64_t x) { return x < 0 ? -x : x; }

void sp_plan_pair_(const sp_copy_pair *p, sp_copy_desc *d) {
    int64_t shape[SP_MAX_DIMS], ss[SP_MAX_DIMS], ds[SP_MAX_DIMS];
    int n;
    sp_coalesce_pair_(&p->src, &p->dst, &n, shape, ss, ds);
    if (n == 0) { /* a single element */
        shape[0] = 1;
        ss[0] = ds[0] = 1;
        n = 1;
    }
    const int64_t es = (int64_t)sp_dtype_size((sp_dtype)p->src.dtype);
    memset(d, 0, sizeof *d);
    d->src = (uint64_t)(uintptr_t)p->src.data;
    d->dst = (uint64_t)(uintptr_t)p->dst.data;
    d->nouter = n - 1;
    int64_t rows = 1;
    for (int i = 0; i < n - 1; i++) { /* outer dims, innermost first */
        int dim = n - 2 - i;
        d->outer_shape[i] = shape[dim];
        d->src_outer_stride[i] = ss[dim] * es;
        d->dst_outer_stride[i] = ds[dim] * es;
        rows *= shape[dim];
    }
    const int64_t inner = shape[n - 1];
    if (ss[n - 1] == 1 && ds[n - 1] == 1) {
        /* A contiguous run on both sides: move the widest words that divide
         * both addresses, the run and every outer stride. */
        uint64_t v[2 + 2 * SP_DESC_OUTER + 1];
        int k = 0;
        v[k++] = d->src;
        v[k++] = d->dst;
        v[k++] = (uint64_t)(inner * es);
        for (int i = 0; i < d->nouter; i++) {
            v[k++] = (uint64_t)d->src_outer_stride[i];
            v[k++] = (uint64_t)d->dst_outer_stride[i];
        }
        d->vec = sp_widest_vector_(v, k);
        d->run_units = inner * es / d->vec;
        d->src_run_stride = d->dst_run_stride = d->vec;
    } else { /* a gather (or scatter): one element per move */
        d->vec = (int32_t)es;
        d->run_units = inner;
        d->src_run_stride = ss[n - 1] * es;
        d->dst_run_stride = ds[n - 1] * es;
    }
    d->units = rows * d->run_units;
    int64_t sspan = abs64(d->src_run_stride) * (d->run_units - 1) + d->vec;
    int64_t dspan = abs64(d->dst_run_stride) * (d->run_units - 1) + d->vec;
    for (int i = 0; i < d->nouter; i++) {
        sspan += abs64(d->src_outer_stride[i]) * (d->outer_shape[i] - 1);
        dspan += abs64(d->dst_outer_stride[i]) * (d->outer_shape[i] - 1);
    }
    d->src_span = sspan;
    d->dst_span = dspan;
}

static int same_device(sp_device a, sp_device b) {
    return a.type == b.type && (a.type == SP_DEVICE_CPU || a.ordinal == b.ordinal);
}

static const char *device_text(sp_device d, char *buf, size_t n) {
    if (d.type == SP_DEVICE_CPU) snprintf(buf, n, "cpu");
    else if (d.type == SP_DEVICE_CUDA) snprintf(buf, n, "cuda:%d", (int)d.ordinal);
    else snprintf(buf, n, "device type %d", (int)d.type);
    return buf;
}

sp_status sp_check_device_(const sp_tensor *t, sp_device want, const char *name,
                           const char *where) {
    char a[32], b[32];
    SP_REQUIRE(same_device(t->device, want), SP_ERR_DEVICE_MISMATCH, "%s: on %s, %s %s", name,
               device_text(t->device, a, sizeof a), where, device_text(want, b, sizeof b));
    return SP_OK;
}

sp_status sp_check_same_device_(const sp_tensor *t, sp_device want, const char *name) {
    return sp_check_device_(t, want, name, "other tensors are on");
}

sp_status sp_check_device_usable_(sp_device dev) {
    if (dev.type == SP_DEVICE_CUDA)
        SP_REQUIRE(sp_cuda_available(), SP_ERR_NO_DEVICE,
                   "cuda:%d: this build has no CUDA backend or no CUDA device is usable",
                   (int)dev.ordinal);
    return SP_OK;
}

static sp_status check_pair_named(const sp_copy_pair *p, size_t i, sp_device dev,
                                  const char *sn, const char *dn) {
    SP_FORWARD(sp_tensor_check_aligned_(&p->src, sn));
    SP_FORWARD(sp_tensor_check_aligned_(&p->dst, dn));
    SP_FORWARD(sp_check_same_device_(&p->src, dev, sn));
    SP_FORWARD(sp_check_same_device_(&p->dst, dev, dn));
    SP_REQUIRE(p->src.dtype == p->dst.dtype, SP_ERR_DTYPE_MISMATCH,
               "pairs[%zu]: dst dtype %s differs from src %s", i, sp_dtype_name((sp_dtype)p->dst.dtype),
               sp_dtype_name((sp_dtype)p->src.dtype));
    int same = p->src.ndim == p->dst.ndim;
    for (int d = 0; same && d < p->src.ndim; d++) same = p->src.shape[d] == p->dst.shape[d];
    SP_REQUIRE(same, SP_ERR_SHAPE_MISMATCH, "pairs[%zu]: dst shape differs from src shape (ndim %d vs %d)",
               i, (int)p->dst.ndim, (int)p->src.ndim);
    SP_REQUIRE(!sp_tensor_self_overlaps_(&p->dst), SP_ERR_OVERLAP,
               "%s: two elements share memory, or may: a zero stride, or strides that "
               "interleave (a conservative test)", dn);
    return SP_OK;
}

/* Names are formatted only once a check has failed (the per-call path). */
static sp_status check_pair(const sp_copy_pair *p, size_t i, sp_device dev) {
    if (check_pair_named(p, i, dev, "", "") == SP_OK) return SP_OK;
    char sn[48], dn[48];
    snprintf(sn, sizeof sn, "pairs[%zu].src", i);
    snprintf(dn, sizeof dn, "pairs[%zu].dst", i);
    return check_pair_named(p, i, dev, sn, dn);
}

/* ---- the overlap policy ----------------------------------------------------
 * A written view may share no byte with any other view of the call. Byte
 * extents are sorted, written and read views apart, so that only the pairs
 * whose extents intersect are walked (never two read views) and tested
 * element by element: n log n plus those pairs, whatever n is. Each pair is
 * keyed (a, b), a written; the smallest failing key is the answer, so the
 * message does not depend on the order of the walk. */
typedef struct extent {
    uintptr_t lo, hi;
    size_t i; /* index into the views */
} extent;

static int by_lo(const void *x, const void *y) {
    const extent *a = x, *b = y;
    if (a->lo != b->lo) return a->lo < b->lo ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

typedef struct overlap_walk {
    const sp_view_ref_ *views;
    sp_overlap_hit_ *hit;
} overlap_walk;

/* Test the pair (a written, b) unless a smaller key has failed already. */
static void test_pair(overlap_walk *w, size_t a, size_t b) {
    sp_overlap_hit_ *h = w->hit;
    if (h->found && (a > h->a || (a == h->a && b >= h->b))) return;
    int o = sp_tensors_overlap_(w->views[a].t, w->views[b].t);
    if (o == 0) return;
    h->found = o;
    h->a = a;
    h->b = b;
}

enum { SP_OVERLAP_STACK = 2 * SP_MAX_PAIRS_PER_LAUNCH };

sp_status sp_find_overlap_(const sp_view_ref_ *views, size_t n, sp_overlap_hit_ *hit) {
    hit->found = 0;
    hit->a = hit->b = 0;
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
        uintptr_t lo, hi;
        sp_tensor_extent_(views[i].t, &lo, &hi);
        if (lo == hi) continue;
        e[views[i].written ? nw++ : n - 1 - nr++] = (extent){lo, hi, i};
    }
    extent *W = e, *R = e + n - nr;
    qsort(W, nw, sizeof *W, by_lo);
    qsort(R, nr, sizeof *R, by_lo);
    overlap_walk w = {views, hit};
    /* Written against written: each later extent that starts inside. */
    for (size_t x = 0; x < nw; x++)
        for (size_t y = x + 1; y < nw && W[y].lo < W[x].hi; y++)
            test_pair(&w, W[x].i < W[y].i ? W[x].i : W[y].i, W[x].i < W[y].i ? W[y].i : W[x].i);
    /* Written against read: the read extents that start inside a written
     * one (at or after its start), then the written extents that start
     * inside a read one (strictly after its start): every intersecting
     * pair once. */
    for (size_t x = 0, y0 = 0; x < nw; x++) {
        while (y0 < nr && R[y0].lo < W[x].lo) y0++;
        for (size_t y = y0; y < nr && R[y].lo < W[x].hi; y++) test_pair(&w, W[x].i, R[y].i);
    }
    for (size_t y = 0, x0 = 0; y < nr; y++) {
        while (x0 < nw && W[x0].lo <= R[y].lo) x0++;
        for (size_t x = x0; x < nw && W[x].lo < R[y].hi; x++) test_pair(&w, W[x].i, R[y].i);
    }
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

/* No destination may share a byte with another destination or any source.
 * The views are pairs[j].src at 2j and pairs[j].dst at 2j + 1, so the
 * first failing key is the first (i, j, src before dst) in pair order. */
static sp_status check_overlaps(const sp_copy_pair *pairs, size_t n, sp_view_ref_ *views) {
    for (size_t j = 0; j < n; j++) {
        views[2 * j] = (sp_view_ref_){&pairs[j].src, 0};
        views[2 * j + 1] = (sp_view_ref_){&pairs[j].dst, 1};
    }
    sp_overlap_hit_ h;
    SP_FORWARD(sp_find_overlap_(views, 2 * n, &h));
    if (h.found == 0) return SP_OK;
    char a[48], b[48];
    snprintf(a, sizeof a, "pairs[%zu].dst", h.a / 2);
    snprintf(b, sizeof b, "pairs[%zu].%s", h.b / 2, h.b % 2 ? "dst" : "src");
    return sp_overlap_error_(&h, a, b);
}

/* Plan every non-empty pair, then run the descriptors, SP_MAX_PAIRS_PER_LAUNCH
 * per pass: nothing is read from `pairs` once a byte has moved. */
static sp_status plan_and_run(const sp_copy_pair *pairs, size_t n, sp_copy_desc *descs,
                              struct CUstream_st *stream) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (sp_numel_(&pairs[i].src) != 0) sp_plan_pair_(&pairs[i], &descs[k++]);
    const sp_device dev = pairs[0].src.device;
    for (size_t at = 0; at < k; at += SP_MAX_PAIRS_PER_LAUNCH) {
        const int m = (int)(k - at < SP_MAX_PAIRS_PER_LAUNCH ? k - at : SP_MAX_PAIRS_PER_LAUNCH);
        SP_FORWARD(dev.type == SP_DEVICE_CUDA ? sp_cuda_copy_(descs + at, m, dev.ordinal, stream)
                                              : sp_cpu_copy_(descs + at, m));
        sp_count_pass_();
    }
    return SP_OK;
}

/* Host scratch of a batch: on the stack up to one pass, else one malloc. */
typedef struct batch_scratch {
    sp_copy_desc descs[SP_MAX_PAIRS_PER_LAUNCH];
    sp_view_ref_ views[2 * SP_MAX_PAIRS_PER_LAUNCH];
    sp_copy_desc *d;
    sp_view_ref_ *v;
    void *heap;
} batch_scratch;

static sp_status scratch_get(batch_scratch *s, size_t n) {
    s->heap = NULL;
    s->d = s->descs;
    s->v = s->views;
    if (n <= SP_MAX_PAIRS_PER_LAUNCH) return SP_OK;
    const size_t per = sizeof *s->d + 2 * sizeof *s->v;
    s->heap = n <= SIZE_MAX / per ? malloc(n * per) : NULL;
    SP_REQUIRE(s->heap != NULL, SP_ERR_OUT_OF_MEMORY,
               "pairs: no host memory to plan %zu pairs", n);
    s->d = s->heap;
    s->v = (sp_view_ref_ *)(s->d + n);
    return SP_OK;
}

sp_status sp_copy_validated_(const sp_copy_pair *pairs, size_t n, struct CUstream_st *stream) {
    batch_scratch s;
    SP_FORWARD(scratch_get(&s, n));
    sp_status st = plan_and_run(pairs, n, s.d, stream);
    free(s.heap);
    return st;
}

sp_status sp_copy_batch(const sp_copy_pair *pairs, size_t n, struct CUstream_st *stream) {
    if (n == 0) return SP_OK;
    SP_REQUIRE(pairs != NULL, SP_ERR_INVALID_ARGUMENT, "pairs: NULL with n = %zu", n);
    const sp_device dev = pairs[0].src.device;
    for (size_t i = 0; i < n; i++) SP_FORWARD(check_pair(&pairs[i], i, dev));
    batch_scratch s;
    SP_FORWARD(scratch_get(&s, n));
    sp_status st = check_overlaps(pairs, n, s.v);
    if (st == SP_OK) st = sp_check_device_usable_(dev);
    if (st == SP_OK) st = plan_and_run(pairs, n, s.d, stream);
    free(s.heap);
    return st;
}
