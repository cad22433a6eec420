/* copy_plan.c — the planner of one copy pair: a validated pair, coalesced
 * jointly, becomes the sp_copy_desc a backend runs. The planner alone
 * chooses how bytes move (the widest word a contiguous run allows, else one
 * element per move) and the byte spans by which the CUDA backend picks its
 * index width; the backends only follow the descriptor. */
#include "internal.h"

#include <string.h>

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
    int64_t sspan = sp_abs64_(d->src_run_stride) * (d->run_units - 1) + d->vec;
    int64_t dspan = sp_abs64_(d->dst_run_stride) * (d->run_units - 1) + d->vec;
    for (int i = 0; i < d->nouter; i++) {
        sspan += sp_abs64_(d->src_outer_stride[i]) * (d->outer_shape[i] - 1);
        dspan += sp_abs64_(d->dst_outer_stride[i]) * (d->outer_shape[i] - 1);
    }
    d->src_span = sspan;
    d->dst_span = dspan;
}
