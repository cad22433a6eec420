/* copy.c — layer 2: sp_copy_batch. Validates every pair, then plans the
 * pairs into descriptors (the planner, sp_plan_pair_) and hands them to one
 * backend pass per SP_MAX_PAIRS_PER_LAUNCH pairs. */
#include "internal.h"

#include <stdio.h>
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
    else snprintf(buf, n, "cuda:%d", (int)d.ordinal);
    return buf;
}

sp_status sp_check_same_device_(const sp_tensor *t, sp_device want, const char *name) {
    char a[32], b[32];
    SP_REQUIRE(same_device(t->device, want), SP_ERR_DEVICE_MISMATCH,
               "%s: on %s, other tensors are on %s", name, device_text(t->device, a, sizeof a),
               device_text(want, b, sizeof b));
    return SP_OK;
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

/* Byte extent of pairs[i].src (which 0) or .dst (which 1): from `cache`
 * when the batch is small enough to have one, else computed. */
#define SP_EXTENT_CACHE 64
static void extent_of(const sp_copy_pair *pairs, size_t i, int which,
                      const uintptr_t (*cache)[4], uintptr_t *lo, uintptr_t *hi) {
    if (cache) {
        *lo = cache[i][2 * which];
        *hi = cache[i][2 * which + 1];
    } else {
        sp_tensor_extent_(which ? &pairs[i].dst : &pairs[i].src, lo, hi);
    }
}

/* pairs[i].dst against `other`, which is pairs[j].src or .dst (`side`). */
static sp_status check_disjoint(const sp_copy_pair *pairs, size_t i, const sp_tensor *other,
                                size_t j, const char *side) {
    int o = sp_tensors_overlap_(&pairs[i].dst, other);
    if (o == 0) return SP_OK;
    if (o > 0)
        return sp_set_error_(SP_ERR_OVERLAP, "pairs[%zu].dst: shares memory with pairs[%zu].%s", i,
                            j, side);
    return sp_set_error_(SP_ERR_OVERLAP,
                        "pairs[%zu].dst: could not prove it disjoint from pairs[%zu].%s (their "
                        "layouts are too intricate for the bounded overlap search; they may "
                        "well not share memory)",
                        i, j, side);
}

/* No destination may share a byte with another destination or any source.
 * Byte extents are compared first (computed once for batches of up to
 * SP_EXTENT_CACHE pairs; nothing is allocated); the element-exact test runs
 * only for pairs whose extents meet. */
static sp_status check_overlaps(const sp_copy_pair *pairs, size_t n) {
    uintptr_t cache[SP_EXTENT_CACHE][4];
    const uintptr_t(*c)[4] = NULL;
    if (n <= SP_EXTENT_CACHE) {
        for (size_t i = 0; i < n; i++) {
            sp_tensor_extent_(&pairs[i].src, &cache[i][0], &cache[i][1]);
            sp_tensor_extent_(&pairs[i].dst, &cache[i][2], &cache[i][3]);
        }
        c = (const uintptr_t(*)[4])cache;
    }
    for (size_t i = 0; i < n; i++) {
        uintptr_t dlo, dhi, lo, hi;
        extent_of(pairs, i, 1, c, &dlo, &dhi);
        for (size_t j = 0; j < n; j++) {
            extent_of(pairs, j, 0, c, &lo, &hi);
            if (sp_extents_overlap_(dlo, dhi, lo, hi))
                SP_FORWARD(check_disjoint(pairs, i, &pairs[j].src, j, "src"));
            if (j <= i) continue;
            extent_of(pairs, j, 1, c, &lo, &hi);
            if (sp_extents_overlap_(dlo, dhi, lo, hi))
                SP_FORWARD(check_disjoint(pairs, i, &pairs[j].dst, j, "dst"));
        }
    }
    return SP_OK;
}

sp_status sp_copy_validated_(const sp_copy_pair *pairs, size_t n, struct CUstream_st *stream) {
    sp_copy_desc descs[SP_MAX_PAIRS_PER_LAUNCH];
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        if (sp_numel_(&pairs[i].src) == 0) continue;
        sp_plan_pair_(&pairs[i], &descs[k++]);
        if (k == SP_MAX_PAIRS_PER_LAUNCH || i + 1 == n) {
            sp_device dev = pairs[i].src.device;
            SP_FORWARD(dev.type == SP_DEVICE_CUDA ? sp_cuda_copy_(descs, k, dev.ordinal, stream)
                                                  : sp_cpu_copy_(descs, k));
            sp_count_pass_();
            k = 0;
        }
    }
    if (k > 0) { /* trailing empty pairs ended the loop before the flush */
        sp_device dev = pairs[0].src.device;
        SP_FORWARD(dev.type == SP_DEVICE_CUDA ? sp_cuda_copy_(descs, k, dev.ordinal, stream)
                                              : sp_cpu_copy_(descs, k));
        sp_count_pass_();
    }
    return SP_OK;
}

sp_status sp_copy_batch(const sp_copy_pair *pairs, size_t n, struct CUstream_st *stream) {
    if (n == 0) return SP_OK;
    SP_REQUIRE(pairs != NULL, SP_ERR_INVALID_ARGUMENT, "pairs: NULL with n = %zu", n);
    const sp_device dev = pairs[0].src.device;
    for (size_t i = 0; i < n; i++) SP_FORWARD(check_pair(&pairs[i], i, dev));
    SP_FORWARD(check_overlaps(pairs, n));
    SP_FORWARD(sp_check_device_usable_(dev));
    return sp_copy_validated_(pairs, n, stream);
}
