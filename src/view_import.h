/*
 * view_import.h — views as array producers describe them (NumPy's
 * __array_interface__, DLPack and torch once scaled: strides in bytes, an
 * element size, up to SP_BYTE_VIEW_MAX_DIMS_ dims) made into sp_tensors,
 * and the dims-level view math that these and the sp_tensor calls of
 * tensor.c share, so that density and coalescing are written once.
 *
 * Internal (sp_name_ names, no ABI): for the library's own callers that
 * start from bytes, such as the Python binding, which links the static
 * library. Messages set through sp_last_error() state the rule without an
 * argument name: the caller prefixes its own ("tensors[1]: ...").
 */
#ifndef SP_VIEW_IMPORT_H
#define SP_VIEW_IMPORT_H

#include "stridepack.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dims-level view math (tensor.c) ------------------------------------ */

/* 1 when every dim of size > 1 has the stride of a row-major layout whose
 * innermost step is `unit` (1 for element strides, the element size for
 * byte strides), 0 otherwise. Size-1 dims may have any stride. Sizes are
 * not checked: an empty view is the caller's to decide. */
int sp_dims_dense_(int ndim, const int64_t *shape, const int64_t *strides, int64_t unit);

/* Coalesce, in place, the dims of k (1 or 2) stride lists that share
 * `shape`: size-1 dims dropped, a dim merged into the one inside it where
 * every list allows it (outer stride == size * inner stride, no product
 * overflowing), row-major order kept. @return the new ndim (0 for one
 * element). An empty shape is the caller's to skip. */
int sp_coalesce_dims_(int ndim, int64_t *shape, int64_t *const *strides, int k);

/* ---- byte views --------------------------------------------------------- */

#define SP_BYTE_VIEW_MAX_DIMS_ 64 /* NumPy's limit */

typedef struct sp_byte_view_ {
    void *data;             /* address of element [0, ..., 0] */
    int64_t itemsize;       /* bytes per element, > 0 */
    int32_t dtype;          /* sp_dtype of the elements, or -1: none (moved as words) */
    int32_t ndim;           /* 0 .. SP_BYTE_VIEW_MAX_DIMS_ */
    const int64_t *shape;   /* (ndim), sizes >= 0 */
    const int64_t *strides; /* (ndim), in bytes, any sign */
    sp_device device;
} sp_byte_view_;

/* @return 1 when v is C-contiguous in bytes (size-1 dims may have any
 *         stride; an empty view is dense), 0 otherwise. */
int sp_byte_view_is_dense_(const sp_byte_view_ *v);

/* v as an sp_tensor of its own dtype (v->dtype >= 0): strides in whole
 * elements, the same dims.
 * @return SP_OK; SP_ERR_UNSUPPORTED when a byte stride is not a multiple of
 *         the element size or v has more than SP_MAX_DIMS dims. *t is
 *         written on success only; nothing else is checked (the call that
 *         takes *t validates it). */
sp_status sp_byte_view_elements_(const sp_byte_view_ *v, sp_tensor *t);

/* v as an sp_tensor moved in words: the widest of 8, 4, 2, 1 bytes that
 * divides the element size, the address (of a view with elements) and the
 * stride of every dim of size > 1, in v's dtype when the word is the
 * element and v has one, else SP_U8, SP_U16, SP_U32 or SP_U64; one more,
 * innermost, dim when the word is smaller than the element. A view of more
 * than SP_MAX_DIMS dims then is coalesced (sp_coalesce_dims_; an empty one
 * becomes shape (0,)).
 * @return SP_OK; SP_ERR_UNSUPPORTED when more than SP_MAX_DIMS dims remain
 *         or v has more than SP_BYTE_VIEW_MAX_DIMS_. *t is written on
 *         success only; nothing else is checked. */
sp_status sp_byte_view_words_(const sp_byte_view_ *v, sp_tensor *t);

/* src and dst of a copy as sp_byte_view_words_ makes them, in one word
 * when they share an element type and size (the narrower of their two
 * words; each its own otherwise, which the copy then refuses), coalesced
 * jointly when more than SP_MAX_DIMS dims and their word shapes agree.
 * @return as sp_byte_view_words_ (src looked at first); *p is written on
 *         success only. */
sp_status sp_byte_view_pair_words_(const sp_byte_view_ *src, const sp_byte_view_ *dst,
                                   sp_copy_pair *p);

#ifdef __cplusplus
}
#endif

#endif /* SP_VIEW_IMPORT_H */
