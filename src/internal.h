/*
 * internal.h — what the library's own files share and users never see:
 * error macros, the view math of tensor.c, and the copy descriptor that the
 * planner (copy_plan.c) hands to a backend (cpu/, cuda/).
 *
 * Names: the public API (include/) is sp_name; what library files share
 * through the headers under src/ is sp_name_ (a trailing underscore); what
 * stays in one file is static and carries no prefix.
 */
#ifndef SP_INTERNAL_H
#define SP_INTERNAL_H

#include "stridepack.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ------------------------------------------------------------ */

/* Record a formatted message as this thread's sp_last_error(); returns s. */
sp_status sp_set_error_(sp_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Fail with `status` and a message unless `cond` holds. */
#define SP_REQUIRE(cond, status, ...)                  \
    do {                                               \
        if (!(cond)) return sp_set_error_((status), __VA_ARGS__); \
    } while (0)

/* Return the status of `expr` unless it is SP_OK. */
#define SP_FORWARD(expr)                  \
    do {                                  \
        sp_status sp_fwd_ = (expr);       \
        if (sp_fwd_ != SP_OK) return sp_fwd_; \
    } while (0)

/* ---- view math (tensor.c) ---------------------------------------------- */

/* Structural check: ndim range, known dtype, sizes >= 0, numel fits int64,
 * the byte offsets of every element fit int64 (size-1 dims, any stride,
 * add none), and the bytes [lo, hi) lie in the address space with hi <=
 * UINTPTR_MAX. `name` prefixes the message ("beta", "inputs[2]"). */
sp_status sp_tensor_check_(const sp_tensor *t, const char *name);

/* The layout part of sp_tensor_check_ only: ndim, dtype, sizes, element
 * count and byte offsets; neither the device nor data is looked at (for
 * sizing before the data exists). */
sp_status sp_tensor_check_layout_(const sp_tensor *t, const char *name);

/* Same as sp_tensor_check_, and the data pointer is aligned to the element
 * size (not checked for an empty tensor). */
sp_status sp_tensor_check_aligned_(const sp_tensor *t, const char *name);

/* numel without error reporting; -1 on overflow or malformed input. */
int64_t sp_numel_(const sp_tensor *t);

/* Byte extent [lo, hi) of the elements, relative to nothing: absolute
 * addresses, lo <= hi with no wrap (sp_tensor_check_ refuses views whose
 * bytes leave the address space). lo == hi for an empty tensor. Valid
 * after sp_tensor_check_. */
void sp_tensor_extent_(const sp_tensor *t, uintptr_t *lo, uintptr_t *hi);

/* 1 when [alo, ahi) and [blo, bhi) share a byte (empty ranges share none). */
int sp_extents_overlap_(uintptr_t alo, uintptr_t ahi, uintptr_t blo, uintptr_t bhi);

/* 1 when some element of a shares a byte with some element of b, 0 when
 * none does, -1 when a bounded search could not decide (never for views
 * that coalesce to two distinct byte strides between them: two 1-D
 * progressions, column slices of one buffer, interleavings). a and b have
 * passed sp_tensor_check_. */
int sp_tensors_overlap_(const sp_tensor *a, const sp_tensor *b);

/* 1 when two distinct index tuples of t can address the same byte (a zero
 * stride on a dim of size > 1, or strides that interleave). Conservative:
 * may say 1 for exotic non-overlapping layouts. */
int sp_tensor_self_overlaps_(const sp_tensor *t);

/* Widest of 16, 8, 4, 2, 1 that divides every value given. */
int sp_widest_vector_(const uint64_t *values, int n);

/* Joint coalescing of a src/dst pair of equal shape: size-1 dims dropped,
 * dim i merged into i+1 where both sides allow it. Output arrays are in
 * elements, outermost first; *ndim may be 0 (one element) — an empty pair
 * is the caller's to skip. */
void sp_coalesce_pair_(const sp_tensor *src, const sp_tensor *dst, int *ndim, int64_t *shape,
                      int64_t *src_strides, int64_t *dst_strides);

/* |x| of a stride or byte offset of a view that passed sp_tensor_check_
 * (never INT64_MIN); for the planner and the overlap engine. */
static inline int64_t sp_abs64_(int64_t x) { return x < 0 ? -x : x; }

/* ---- the copy descriptor ------------------------------------------------ */

/* One pair planned for a backend; plain data passed to kernels by value.
 * The copy is `units` moves of `vec` bytes. Unit u is (outer index, i):
 * i = u % run_units is the position in the innermost run, the outer index
 * u / run_units is decomposed over outer_shape (innermost outer dim first).
 * Byte offset = sum(outer idx * outer stride) + i * run stride. */
#define SP_DESC_OUTER (SP_MAX_DIMS - 1)
typedef struct sp_copy_desc {
    uint64_t src;                           /* byte address of element 0 */
    uint64_t dst;
    int64_t units;                          /* total moves, > 0 */
    int64_t run_units;                      /* moves per innermost run, > 0 */
    int64_t src_run_stride;                 /* bytes between moves in a run */
    int64_t dst_run_stride;
    int64_t src_span;                       /* max |byte offset| + vec, for index width */
    int64_t dst_span;
    int32_t vec;                            /* bytes per move: 16, 8, 4, 2, 1 */
    int32_t nouter;                         /* 0 .. SP_DESC_OUTER */
    int64_t outer_shape[SP_DESC_OUTER];     /* innermost outer dim first */
    int64_t src_outer_stride[SP_DESC_OUTER]; /* bytes */
    int64_t dst_outer_stride[SP_DESC_OUTER];
} sp_copy_desc;

/* Plan one pair (already validated, non-empty) into *d (copy_plan.c). */
void sp_plan_pair_(const sp_copy_pair *p, sp_copy_desc *d);

/* ---- validation shared by the layers (device_check.c, overlap.c) -------- */

/* The device match, one rule and one message: SP_ERR_DEVICE_MISMATCH
 * unless t (named `name`) is on `want` (the same type; the same ordinal
 * for CUDA), "<name>: on <t's device>, <where> <want>", e.g. where = "q
 * is on", "the boundary serves". */
sp_status sp_check_device_(const sp_tensor *t, sp_device want, const char *name,
                           const char *where);
/* sp_check_device_ with where = "other tensors are on". */
sp_status sp_check_same_device_(const sp_tensor *t, sp_device want, const char *name);
/* SP_ERR_NO_DEVICE when `dev` is CUDA and this build or machine has none. */
sp_status sp_check_device_usable_(sp_device dev);
/* The one overlap policy: a view that a call writes may share no byte with
 * any other view of the call, decided per element (sp_tensors_overlap_).
 * views[i].written says which views are written. Pairs (a, b) have a
 * written and b != a, with a < b when b is written too; *hit gets the
 * first failing pair in (a, b) order: found 1 (they share memory) or -1
 * (they could not be proven disjoint), or found 0 when none fails. Byte
 * extents are sorted, so only pairs whose extents intersect are tested,
 * and two read views are never compared: n log n plus those pairs; where
 * many extents intersect (column slices of one buffer), each two-dim
 * layout shared by many written views is walked by its bytes' windows
 * modulo its row pitch instead (overlap.c).
 * @return SP_OK; SP_ERR_OUT_OF_MEMORY when more than
 * 2 * SP_MAX_PAIRS_PER_LAUNCH views need host scratch and none is left. */
typedef struct sp_view_ref_ {
    const sp_tensor *t; /* passed sp_tensor_check_ */
    int written;
} sp_view_ref_;
typedef struct sp_overlap_hit_ {
    int found;
    size_t a, b;
} sp_overlap_hit_;
sp_status sp_find_overlap_(const sp_view_ref_ *views, size_t n, sp_overlap_hit_ *hit);
/* The error for a failing hit of sp_find_overlap_ between views named a
 * and b, in the one wording every entry uses: "<a>: shares memory with
 * <b>" when they share memory, "<a>: could not prove it disjoint from <b>
 * (...)" when undecided. SP_OK when h->found is 0. */
sp_status sp_overlap_error_(const sp_overlap_hit_ *h, const char *a, const char *b);
/* sp_find_overlap_ over views named names[i], and its error. */
sp_status sp_check_disjoint_(const sp_view_ref_ *views, const char *const *names, size_t n);

/* A pack workspace of `bytes` (> 0) owned by a library object: device
 * memory on a CUDA device, else host memory aligned to SP_PACK_ALIGN. */
sp_status sp_workspace_alloc_(sp_device dev, size_t bytes, void **p);
/* Free what sp_workspace_alloc_ gave on dev; NULL is a no-op. */
sp_status sp_workspace_free_(sp_device dev, void *p);

/* sp_pack after its checks, for callers that made them (the KDA boundary):
 * n <= SP_MAX_PAIRS_PER_LAUNCH inputs that are well-formed views, aligned, on one
 * usable device, and a workspace of at least sp_pack_workspace_bytes.
 * What it still checks is the plan: that no input lies in the slots. */
sp_status sp_pack_validated_(const sp_tensor *inputs, size_t n, void *workspace,
                             sp_tensor *outputs, size_t *n_copied, struct CUstream_st *stream);

/* ---- named tensor specs (contract.c): an entry's arguments as a table ---- */

#define SP_SPEC_ANY (-1)    /* a size the rule leaves free */
#define SP_SPEC_FLOATS (-2) /* dtype rule: f32 or bf16 */
#define SP_SPEC_LIKE (-3)   /* dtype rule: the table's `like` dtype */
#define SP_SPEC_INDEX (-4)  /* dtype rule: i32 or i64 (an index array, index.h) */
#define SP_SPECS_MAX 16     /* tensor arguments of one call, at most */

typedef struct sp_spec_ {
    const sp_tensor *t;
    const char *name;
    int dtype;         /* an sp_dtype or a rule: SP_SPEC_FLOATS, _LIKE, _INDEX */
    int ndim;          /* > 0: the shape rule below; 0: the entry checks the shape */
    int64_t size[4];   /* expected sizes, SP_SPEC_ANY where free */
    const char *shape; /* how the shape rule reads in a message */
    int dense;         /* must be C-contiguous */
    int output;        /* written by the call */
} sp_spec_;

/* Every tensor of the table a well-formed aligned view, on the device of
 * the first (CPU or CUDA), with its dtype (`like`, named like_name, for
 * SP_SPEC_LIKE); each rule over the whole table before the next. */
sp_status sp_specs_placed_(const sp_spec_ *s, int n, int like, const char *like_name);
/* Then the shape rules (ndim > 0) and density. */
sp_status sp_specs_layout_(const sp_spec_ *s, int n);
/* No output shares a byte with any other argument (sp_check_disjoint_). */
sp_status sp_specs_disjoint_(const sp_spec_ *s, int n);

/* An optional tensor argument is set when it is not all zero (as the
 * args_init functions leave it). */
static inline int sp_tensor_set_(const sp_tensor *t) { return t->ndim != 0 || t->data != NULL; }

/* A tensor's shape "[1, 8, 12, 128]" or strides "(1024, 384, 128, 1)", for
 * messages: the one format every check uses (formatted only once a check
 * has failed). */
typedef struct sp_dims_text_ {
    char s[200];
} sp_dims_text_;
sp_dims_text_ sp_shape_text_(const sp_tensor *t);
sp_dims_text_ sp_strides_text_(const sp_tensor *t);

/* sp_copy_batch without the checks: for callers that validated already.
 * Every pair is planned before the first byte moves; more than
 * SP_MAX_PAIRS_PER_LAUNCH pairs take host scratch (SP_ERR_OUT_OF_MEMORY). */
sp_status sp_copy_validated_(const sp_copy_pair *pairs, size_t n, struct CUstream_st *stream);

/* ---- backends ----------------------------------------------------------- */

/* Run n (<= SP_MAX_PAIRS_PER_LAUNCH) descriptors in one parallel CPU pass. */
sp_status sp_cpu_copy_(const sp_copy_desc *descs, int n);

/* Run n (<= SP_MAX_PAIRS_PER_LAUNCH) descriptors in one kernel launch on
 * `device` and `stream`, restoring the caller's current device.
 * Builds without CUDA get a version that returns SP_ERR_NO_DEVICE. */
sp_status sp_cuda_copy_(const sp_copy_desc *descs, int n, int device, struct CUstream_st *stream);

/* Device memory and graph capture, for the plain C code (the KDA boundary);
 * src/cuda/runtime.cu implements them, and without CUDA src/cuda/none.c,
 * where allocation is SP_ERR_NO_DEVICE and no stream is capturing. */

/* cudaMalloc of `bytes` (> 0) on `device`; `what` names the buffer in errors.
 * @return SP_OK and *p; SP_ERR_OUT_OF_MEMORY, SP_ERR_NO_DEVICE or
 *         SP_ERR_CUDA with *p = NULL. */
sp_status sp_cuda_alloc_(int device, size_t bytes, void **p, const char *what);

/* cudaFree on `device`; a NULL p is a no-op. */
sp_status sp_cuda_free_(int device, void *p);

/* *capturing = 1 while `stream` is being captured into a CUDA graph. The
 * legacy default stream (NULL) cannot be captured: answered without a call,
 * so that no device's context is touched. */
sp_status sp_cuda_capturing_(struct CUstream_st *stream, int *capturing);

/* Bump the pass counter behind sp_copy_pass_count(). */
void sp_count_pass_(void);

#ifdef __cplusplus
}
#endif

#endif /* SP_INTERNAL_H */
