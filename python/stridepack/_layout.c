/*
 * _layout.c — views (_binding.h) as the library's sp_tensors: moved in the
 * widest word (8, 4, 2 or 1 bytes) that divides the address, the element
 * size and every stride applied, a view of more than SP_MAX_DIMS dims
 * merged where its strides allow; and a view's shape, strides and dtype as
 * text for messages.
 */
#include "_binding.h"

#include <stdio.h>
#include <string.h>

/* ---- view math (byte views -> sp_tensors) ------------------------------ */

static int64_t numel(const view *v) {
    int64_t n = 1;
    for (int i = 0; i < v->ndim; i++) n *= v->shape[i];
    return n;
}

int is_dense(const view *v) {
    int64_t expect = v->itemsize;
    for (int i = 0; i < v->ndim; i++) if (v->shape[i] == 0) return 1;
    for (int i = v->ndim - 1; i >= 0; i--) {
        if (v->shape[i] != 1 && v->strides[i] != expect) return 0;
        expect *= v->shape[i];
    }
    return 1;
}

/* Widest power of two <= 8 dividing the element size, the address and
 * every stride that is ever applied: the lowest bit set in any of them (a
 * negative stride has the low bits of its magnitude). */
static int best_unit(const view *v) {
    uint64_t bits = 8 | (uint64_t)v->itemsize | (numel(v) ? (uint64_t)v->ptr : 0);
    for (int i = 0; i < v->ndim; i++)
        if (v->shape[i] > 1) bits |= (uint64_t)v->strides[i];
    return (int)(bits & (0 - bits));
}

typedef struct { int ndim; int64_t shape[MAX_READ_DIMS + 1]; int64_t strides[2][MAX_READ_DIMS + 1]; } layout;

/* v moved in `unit`-byte words: one more dim when the unit is smaller than
 * the element. Returns the sp_dtype. */
static int unit_layout(const view *v, int unit, layout *l, int which) {
    l->ndim = v->ndim;
    for (int i = 0; i < v->ndim; i++) {
        l->shape[i] = v->shape[i];
        l->strides[which][i] = v->strides[i] / unit;
    }
    if (unit < v->itemsize) {
        l->shape[l->ndim] = v->itemsize / unit;
        l->strides[which][l->ndim] = 1;
        l->ndim++;
    }
    if (unit == v->itemsize && v->exact >= 0) return v->exact;
    return unit == 1 ? SP_U8 : unit == 2 ? SP_U16 : unit == 4 ? SP_U32 : SP_U64;
}

/* Merge dims jointly for k stride lists (row-major order kept, so the dense
 * destination of the result is that of the original). Used only for views
 * with more than SP_MAX_DIMS dims. */
static void coalesce(layout *l, int k) {
    int out = 0;
    for (int i = 0; i < l->ndim; i++) if (l->shape[i] == 0) {
        l->ndim = 1; l->shape[0] = 0;
        for (int j = 0; j < k; j++) l->strides[j][0] = 1;
        return;
    }
    for (int i = 0; i < l->ndim; i++) {
        if (l->shape[i] == 1) continue;
        int merge = out > 0;
        for (int j = 0; j < k && merge; j++)
            merge = l->strides[j][out - 1] == l->shape[i] * l->strides[j][i];
        if (merge) {
            l->shape[out - 1] *= l->shape[i];
            for (int j = 0; j < k; j++) l->strides[j][out - 1] = l->strides[j][i];
        } else {
            l->shape[out] = l->shape[i];
            for (int j = 0; j < k; j++) l->strides[j][out] = l->strides[j][i];
            out++;
        }
    }
    l->ndim = out;
}

static int fill(sp_tensor *t, const view *v, int dtype, const layout *l, int which) {
    if (l->ndim > SP_MAX_DIMS) {
        snprintf(reason, sizeof reason, "%d dims remain after merging (at most %d)", l->ndim,
                 SP_MAX_DIMS);
        return 1;
    }
    memset(t, 0, sizeof *t);
    t->data = (void *)v->ptr;
    t->dtype = dtype;
    t->ndim = l->ndim;
    memcpy(t->shape, l->shape, sizeof(int64_t) * (size_t)l->ndim);
    memcpy(t->strides, l->strides[which], sizeof(int64_t) * (size_t)l->ndim);
    t->device = v->device;
    return 0;
}

int to_tensor(const view *v, sp_tensor *t) {
    layout l;
    int dtype = unit_layout(v, best_unit(v), &l, 0);
    if (l.ndim > SP_MAX_DIMS) coalesce(&l, 1);
    return fill(t, v, dtype, &l, 0);
}

/* src and dst of a copy, in one unit when they share an element type (each
 * its own otherwise: the library then rejects the pair and says why). */
int pair_tensors(const view *s, const view *d, sp_copy_pair *p) {
    int same = s->itemsize == d->itemsize && s->exact == d->exact;
    int us = best_unit(s), ud = best_unit(d);
    if (same) us = ud = us < ud ? us : ud;
    layout l, ld;
    int ts = unit_layout(s, us, &l, 0);
    int td = unit_layout(d, ud, &ld, 1);
    int same_shape = l.ndim == ld.ndim && !memcmp(l.shape, ld.shape, sizeof(int64_t) * (size_t)l.ndim);
    if (l.ndim > SP_MAX_DIMS && same_shape) {
        memcpy(l.strides[1], ld.strides[1], sizeof ld.strides[1]);
        coalesce(&l, 2);
        ld = l;
    }
    return fill(&p->src, s, ts, &l, 0) || fill(&p->dst, d, td, &ld, 1);
}

/* "(64, 33)": the shape of v, for messages. */
const char *shape_text(const view *v, char *buf, size_t n) {
    size_t at = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < v->ndim && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, i ? ", %lld" : "%lld", (long long)v->shape[i]);
    if (at < n) snprintf(buf + at, n - at, v->ndim == 1 ? ",)" : ")");
    return buf;
}

const char *strides_text(const view *v, char *buf, size_t n) {
    size_t at = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < v->ndim && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, i ? ", %lld" : "%lld", (long long)v->strides[i]);
    if (at < n) snprintf(buf + at, n - at, v->ndim == 1 ? ",)" : ")");
    return buf;
}

/* The element type of v, for messages. */
const char *dtype_text(const view *v, char *buf, size_t n) {
    if (v->exact >= 0) snprintf(buf, n, "%s", sp_dtype_name((sp_dtype)v->exact));
    else snprintf(buf, n, "a %lld-byte type without a stridepack dtype", (long long)v->itemsize);
    return buf;
}

/* v as an sp_tensor of its own element type (the KDA arrays): strides in
 * whole elements, at most SP_MAX_DIMS dims. 0, or 1 with `reason` set. */
int elements_tensor(const view *v, sp_tensor *t) {
    int whole = v->ndim <= SP_MAX_DIMS;
    for (int d = 0; d < v->ndim && whole; d++) whole = v->strides[d] % v->itemsize == 0;
    if (!whole) {
        snprintf(reason, sizeof reason, "strides not whole elements, or more than %d dims",
                 SP_MAX_DIMS);
        return 1;
    }
    layout l;
    unit_layout(v, (int)v->itemsize, &l, 0);
    return fill(t, v, v->exact, &l, 0);
}
