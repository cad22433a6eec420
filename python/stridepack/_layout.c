/*
 * _layout.c — views (_binding.h) as the library's sp_tensors, through the
 * library's own view math (src/view_import.h: moved in the widest word that
 * divides the address, the element size and every stride applied, a view
 * of more than SP_MAX_DIMS dims merged where its strides allow, or in whole
 * elements); and a view's shape, strides and dtype as text for messages.
 */
#include "_binding.h"
#include "view_import.h"

#include <stdio.h>
#include <string.h>

/* ---- views as sp_tensors: the library's view math (view_import.h) ------- */

_Static_assert(MAX_READ_DIMS <= SP_BYTE_VIEW_MAX_DIMS_,
               "every view the readers take is one the library converts");

static sp_byte_view_ bytes_of(const view *v) {
    sp_byte_view_ b = {(void *)v->ptr, v->itemsize, v->exact, v->ndim, v->shape, v->strides,
                       v->device};
    return b;
}

/* 0, or 1 with the library's message in `reason`. */
static int converted(sp_status s) {
    if (s == SP_OK) return 0;
    snprintf(reason, sizeof reason, "%s", sp_last_error());
    return 1;
}

int is_dense(const view *v) {
    const sp_byte_view_ b = bytes_of(v);
    return sp_byte_view_is_dense_(&b);
}

int to_tensor(const view *v, sp_tensor *t) {
    const sp_byte_view_ b = bytes_of(v);
    return converted(sp_byte_view_words_(&b, t));
}

/* src and dst of a copy, in one unit when they share an element type (each
 * its own otherwise: the library then rejects the pair and says why). */
int pair_tensors(const view *s, const view *d, sp_copy_pair *p) {
    const sp_byte_view_ bs = bytes_of(s), bd = bytes_of(d);
    return converted(sp_byte_view_pair_words_(&bs, &bd, p));
}

/* v as an sp_tensor of its own element type (the KDA arrays): strides in
 * whole elements, at most SP_MAX_DIMS dims. 0, or 1 with `reason` set. */
int elements_tensor(const view *v, sp_tensor *t) {
    const sp_byte_view_ b = bytes_of(v);
    return converted(sp_byte_view_elements_(&b, t));
}

/* ---- views as text, for messages ------------------------------------------ */

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
