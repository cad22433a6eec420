/* copy.c — layer 2: sp_copy_batch. Validates every pair (the device
 * checks: device_check.c; overlaps: overlap.c), then plans the pairs into
 * descriptors (copy_plan.c) and hands them to one backend pass per
 * SP_MAX_PAIRS_PER_LAUNCH pairs. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>

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
