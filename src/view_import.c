/* view_import.c — byte-strided views (view_import.h) as sp_tensors: in
 * whole elements, or in the widest word that the address, the element size
 * and every stride applied allow, with dims beyond SP_MAX_DIMS coalesced
 * where their strides let them. Nothing here validates a view beyond its
 * conversion: the call that takes the sp_tensor does. */
#include "view_import.h"

#include "internal.h"

#include <string.h>

/* One more dim than the view: the bytes of an element, in words. */
typedef struct words {
    int ndim;
    int64_t shape[SP_BYTE_VIEW_MAX_DIMS_ + 1];
    int64_t strides[SP_BYTE_VIEW_MAX_DIMS_ + 1];
} words;

static int has_zero(const sp_byte_view_ *v) {
    for (int d = 0; d < v->ndim; d++)
        if (v->shape[d] == 0) return 1;
    return 0;
}

int sp_byte_view_is_dense_(const sp_byte_view_ *v) {
    return has_zero(v) || sp_dims_dense_(v->ndim, v->shape, v->strides, v->itemsize);
}

/* The widest of 8, 4, 2, 1 dividing the element size, the address of a view
 * with elements, and every stride ever applied (a negative stride has the
 * low bits of its magnitude). */
static int64_t word_of(const sp_byte_view_ *v) {
    uint64_t bits = (uint64_t)v->itemsize | (has_zero(v) ? 0 : (uint64_t)(uintptr_t)v->data);
    for (int d = 0; d < v->ndim; d++)
        if (v->shape[d] > 1) bits |= (uint64_t)v->strides[d];
    const int w = sp_widest_vector_(&bits, 1);
    return w > 8 ? 8 : w;
}

/* v in `unit`-byte words (unit divides every stride of a dim of size > 1;
 * a size-1 dim's stride is never applied). @return the dtype moved. */
static int32_t to_words(const sp_byte_view_ *v, int64_t unit, words *w) {
    w->ndim = v->ndim;
    for (int d = 0; d < v->ndim; d++) {
        w->shape[d] = v->shape[d];
        w->strides[d] = v->strides[d] / unit;
    }
    if (unit < v->itemsize) {
        w->shape[w->ndim] = v->itemsize / unit;
        w->strides[w->ndim] = 1;
        w->ndim++;
    }
    if (unit == v->itemsize && v->dtype >= 0) return v->dtype;
    return unit == 1 ? SP_U8 : unit == 2 ? SP_U16 : unit == 4 ? SP_U32 : SP_U64;
}

/* Coalesce k word layouts of one shape jointly (the shape of w[0] is
 * kept); an empty one becomes shape (0,). */
static void merge(words *const *w, int k) {
    for (int d = 0; d < w[0]->ndim; d++)
        if (w[0]->shape[d] == 0) {
            for (int j = 0; j < k; j++) {
                w[j]->ndim = 1;
                w[j]->shape[0] = 0;
                w[j]->strides[0] = 1;
            }
            return;
        }
    int64_t *strides[2] = {w[0]->strides, k > 1 ? w[1]->strides : NULL};
    const int n = sp_coalesce_dims_(w[0]->ndim, w[0]->shape, strides, k);
    for (int j = 0; j < k; j++) {
        w[j]->ndim = n;
        if (j) memcpy(w[j]->shape, w[0]->shape, sizeof(int64_t) * (size_t)n);
    }
}

static sp_status check_dims(int ndim) {
    SP_REQUIRE(ndim <= SP_MAX_DIMS, SP_ERR_UNSUPPORTED, "%d dims remain after merging (at most %d)",
               ndim, SP_MAX_DIMS);
    return SP_OK;
}

static sp_status check_view(const sp_byte_view_ *v) {
    SP_REQUIRE(v->ndim >= 0 && v->ndim <= SP_BYTE_VIEW_MAX_DIMS_, SP_ERR_UNSUPPORTED,
               "%d dims (at most %d)", (int)v->ndim, SP_BYTE_VIEW_MAX_DIMS_);
    return SP_OK;
}

static void fill(sp_tensor *t, const sp_byte_view_ *v, int32_t dtype, const words *w) {
    memset(t, 0, sizeof *t);
    t->data = v->data;
    t->dtype = dtype;
    t->ndim = w->ndim;
    memcpy(t->shape, w->shape, sizeof(int64_t) * (size_t)w->ndim);
    memcpy(t->strides, w->strides, sizeof(int64_t) * (size_t)w->ndim);
    t->device = v->device;
}

sp_status sp_byte_view_elements_(const sp_byte_view_ *v, sp_tensor *t) {
    int whole = v->ndim >= 0 && v->ndim <= SP_MAX_DIMS && v->itemsize > 0;
    for (int d = 0; d < v->ndim && whole; d++) whole = v->strides[d] % v->itemsize == 0;
    SP_REQUIRE(whole, SP_ERR_UNSUPPORTED, "strides not whole elements, or more than %d dims",
               SP_MAX_DIMS);
    words w;
    to_words(v, v->itemsize, &w);
    fill(t, v, v->dtype, &w);
    return SP_OK;
}

sp_status sp_byte_view_words_(const sp_byte_view_ *v, sp_tensor *t) {
    SP_FORWARD(check_view(v));
    words w, *const all[1] = {&w};
    const int32_t dtype = to_words(v, word_of(v), &w);
    if (w.ndim > SP_MAX_DIMS) merge(all, 1);
    SP_FORWARD(check_dims(w.ndim));
    fill(t, v, dtype, &w);
    return SP_OK;
}

sp_status sp_byte_view_pair_words_(const sp_byte_view_ *src, const sp_byte_view_ *dst,
                                   sp_copy_pair *p) {
    SP_FORWARD(check_view(src));
    SP_FORWARD(check_view(dst));
    int64_t us = word_of(src), ud = word_of(dst);
    if (src->itemsize == dst->itemsize && src->dtype == dst->dtype) us = ud = us < ud ? us : ud;
    words ws, wd, *const both[2] = {&ws, &wd};
    const int32_t ts = to_words(src, us, &ws), td = to_words(dst, ud, &wd);
    const int same_shape = ws.ndim == wd.ndim &&
                           !memcmp(ws.shape, wd.shape, sizeof(int64_t) * (size_t)ws.ndim);
    if (ws.ndim > SP_MAX_DIMS && same_shape) merge(both, 2);
    SP_FORWARD(check_dims(ws.ndim));
    SP_FORWARD(check_dims(wd.ndim));
    fill(&p->src, src, ts, &ws);
    fill(&p->dst, dst, td, &wd);
    return SP_OK;
}
