/*
 * stridepack.h — materialize strided tensor views into dense buffers, all of
 * them in one pass (one kernel launch on CUDA, one parallel pass on the CPU).
 *
 * Usage (the K3 layout: q is a column slice of a [T, 3P] buffer):
 *
 *     sp_tensor q;
 *     int64_t shape[4]   = {1, T, H, 128};
 *     int64_t strides[4] = {T * 3 * P, 3 * P, 128, 1};
 *     sp_tensor_view(&q, qkv_buffer, 0, SP_BF16, 4, shape, strides, sp_cpu());
 *
 *     size_t bytes;
 *     sp_pack_workspace_bytes(&q, 1, &bytes);          // size the workspace
 *     void *ws = malloc(bytes);
 *     sp_tensor dense;
 *     size_t copied;
 *     if (sp_pack(&q, 1, ws, bytes, &dense, &copied, NULL) != SP_OK)
 *         fprintf(stderr, "%s\n", sp_last_error());
 *
 * Conventions, for every function in this header:
 *   - Each returns an sp_status: SP_OK on success, an error otherwise.
 *     sp_status_string() names a status; sp_last_error() (thread-local) says
 *     which argument broke which rule, for the last failing call on the thread.
 *   - Everything is validated before the first byte moves: on error nothing
 *     is written, not to outputs and not to the workspace.
 *   - The library never exits, aborts or prints.
 *   - Shapes and strides are in elements, as in DLPack; strides may be
 *     negative or zero. A tensor's `data` is the address of element [0,...,0].
 *   - Addresses: the bytes of a view, [lowest element, end of the highest
 *     element), must lie inside the address space without wrapping around
 *     (the end address itself at most UINTPTR_MAX); a view that leaves it,
 *     above the top or below address 0 through a negative stride, is
 *     SP_ERR_OVERFLOW. The same holds for the part of a workspace in use.
 *   - A stream is `struct CUstream_st *`, the type that cudaStream_t names;
 *     NULL is the legacy default stream. CPU work ignores it.
 *
 * ABI: sp_tensor and sp_device are plain data with fixed-width fields; new
 * enum values are only ever appended; status values are never reused.
 */
#ifndef STRIDEPACK_H
#define STRIDEPACK_H

#include <stddef.h>
#include <stdint.h>

#define SP_VERSION_MAJOR 0
#define SP_VERSION_MINOR 1
#define SP_VERSION_PATCH 0
#define SP_VERSION_NUMBER \
    (SP_VERSION_MAJOR * 10000 + SP_VERSION_MINOR * 100 + SP_VERSION_PATCH)

#if defined(_WIN32) && defined(SP_SHARED_BUILD)
#define SP_API __declspec(dllexport)
#elif defined(_WIN32) && defined(SP_SHARED)
#define SP_API __declspec(dllimport)
#elif defined(__GNUC__) && defined(SP_SHARED_BUILD)
#define SP_API __attribute__((visibility("default")))
#else
#define SP_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque CUDA stream; the same type that cudaStream_t names. */
struct CUstream_st;

/* ---------------------------------------------------------------------- */
/* Version                                                                 */

/* @return SP_VERSION_NUMBER of the library actually linked. */
SP_API unsigned sp_version_number(void);
/* @return "MAJOR.MINOR.PATCH" of the library actually linked. */
SP_API const char *sp_version(void);

/* ---------------------------------------------------------------------- */
/* Status codes: one list, expanded into the enum and into the strings.    */

#define SP_STATUS_MAP(XX)                                                     \
    XX(SP_OK, 0, "success")                                                   \
    XX(SP_ERR_INVALID_ARGUMENT, 1, "invalid argument")                        \
    XX(SP_ERR_SHAPE_MISMATCH, 2, "shapes differ")                             \
    XX(SP_ERR_DTYPE_MISMATCH, 3, "dtypes differ")                             \
    XX(SP_ERR_OVERLAP, 4, "memory regions overlap")                           \
    XX(SP_ERR_DEVICE_MISMATCH, 5, "tensors are on different devices")         \
    XX(SP_ERR_NO_DEVICE, 6, "device not available in this build or machine") \
    XX(SP_ERR_UNSUPPORTED, 7, "unsupported input")                            \
    XX(SP_ERR_OVERFLOW, 8, "size arithmetic overflows")                       \
    XX(SP_ERR_WORKSPACE_TOO_SMALL, 9, "workspace too small")                  \
    XX(SP_ERR_MISALIGNED, 10, "address not aligned")                          \
    XX(SP_ERR_CUDA, 11, "CUDA runtime error")                                 \
    XX(SP_ERR_OUT_OF_MEMORY, 12, "out of memory")                             \
    XX(SP_ERR_CAPACITY, 13, "exceeds the capacity fixed at creation")

typedef enum sp_status {
#define SP_STATUS_ENUM_(name, value, text) name = value,
    SP_STATUS_MAP(SP_STATUS_ENUM_)
#undef SP_STATUS_ENUM_
} sp_status;

/* @return a static string naming `s` ("SP_ERR_OVERLAP: memory regions
 *         overlap"); "SP_ERR_UNKNOWN" for a value not in the list. */
SP_API const char *sp_status_string(sp_status s);

/* @return the message of the last failing call on this thread, naming the
 *         argument and the rule ("beta: base address 0x... is not 2-byte
 *         aligned"); "" when no call on this thread has failed. The text
 *         stays valid until the next stridepack call on the same thread. */
SP_API const char *sp_last_error(void);

/* ---------------------------------------------------------------------- */
/* Element types. Values are fixed; new ones are appended.                 */

typedef enum sp_dtype {
    SP_BOOL = 0,
    SP_U8 = 1,
    SP_I8 = 2,
    SP_U16 = 3,
    SP_I16 = 4,
    SP_U32 = 5,
    SP_I32 = 6,
    SP_U64 = 7,
    SP_I64 = 8,
    SP_F16 = 9,
    SP_BF16 = 10,
    SP_F32 = 11,
    SP_F64 = 12,
    SP_DTYPE_COUNT_ = 13 /* not a type: one past the last */
} sp_dtype;

/* @return the element size in bytes (1, 2, 4 or 8); 0 for an unknown dtype. */
SP_API size_t sp_dtype_size(sp_dtype t);
/* @return "bf16", "f32", ...; "unknown" for an unknown dtype. */
SP_API const char *sp_dtype_name(sp_dtype t);

/* ---------------------------------------------------------------------- */
/* Devices                                                                 */

typedef enum sp_device_type { SP_DEVICE_CPU = 0, SP_DEVICE_CUDA = 1 } sp_device_type;

typedef struct sp_device {
    int32_t type;    /* sp_device_type */
    int32_t ordinal; /* CUDA device ordinal; 0 for the CPU */
} sp_device;

static inline sp_device sp_cpu(void) {
    sp_device d = {SP_DEVICE_CPU, 0};
    return d;
}
static inline sp_device sp_cuda(int32_t ordinal) {
    sp_device d = {SP_DEVICE_CUDA, ordinal};
    return d;
}

/* @return 1 when this build has the CUDA backend and a CUDA device it can
 *         run on is present (compute capability at least the lowest
 *         architecture built: sm_80 in the default full build), 0
 *         otherwise. Never fails. */
SP_API int sp_cuda_available(void);

/* ---------------------------------------------------------------------- */
/* Tensor views                                                            */

#define SP_MAX_DIMS 8

/* A strided view, plain data (layout fixed; compare DLPack's DLTensor).
 * Element [i0, ..., i(n-1)] lives at
 *     (char *)data + (i0*strides[0] + ... + i(n-1)*strides[n-1]) * dtype_size.
 * Entries of shape/strides at index >= ndim are ignored. */
typedef struct sp_tensor {
    void *data;                   /* address of element [0, ..., 0] */
    int32_t dtype;                /* sp_dtype */
    int32_t ndim;                 /* 0 .. SP_MAX_DIMS; 0 is a scalar */
    int64_t shape[SP_MAX_DIMS];   /* sizes, >= 0 */
    int64_t strides[SP_MAX_DIMS]; /* in elements, any sign */
    sp_device device;
} sp_tensor;

/* Views with a size-0 dim hold no element: their data pointer may be NULL
 * and their strides are not checked. A size-1 dim adds nothing to any
 * element's offset, so its stride may be any value (INT64_MIN included). */

/* Fill *t as a dense (row-major, C-contiguous) tensor at `data`.
 * @return SP_OK; SP_ERR_INVALID_ARGUMENT for a NULL t or shape (with
 *         ndim > 0), ndim outside 0..SP_MAX_DIMS, an unknown dtype or
 *         device, a negative size, or NULL data with elements;
 *         SP_ERR_OVERFLOW when the element count or a byte offset
 *         overflows int64, or the view's bytes leave the address space
 *         (see "Addresses" above). On error *t is left unchanged. */
SP_API sp_status sp_tensor_dense(sp_tensor *t, void *data, sp_dtype dtype, int ndim,
                                 const int64_t *shape, sp_device device);

/* Fill *t as a strided view of a buffer: data = base + offset elements.
 * @return as sp_tensor_dense (SP_ERR_OVERFLOW also when offset in bytes
 *         overflows, or base + offset leaves the address space); strides
 *         may not be NULL when ndim > 0. */
SP_API sp_status sp_tensor_view(sp_tensor *t, void *base, int64_t offset, sp_dtype dtype,
                                int ndim, const int64_t *shape, const int64_t *strides,
                                sp_device device);

/* Element count (1 for a scalar, 0 when any size is 0) into *numel, for a
 * well-formed view (the structural checks of sp_copy_batch, alignment
 * aside).
 * @return SP_OK; SP_ERR_INVALID_ARGUMENT for a malformed tensor (ndim,
 *         dtype, device, a negative size, NULL data with elements);
 *         SP_ERR_OVERFLOW when the count, or the byte offset of some
 *         element, overflows int64, or the view's bytes leave the address
 *         space. */
SP_API sp_status sp_tensor_numel(const sp_tensor *t, int64_t *numel);

/* @return 1 when t is C-contiguous (size-1 dims may have any stride; an
 *         empty tensor is dense), 0 otherwise or when t's ndim, sizes or
 *         dtype are malformed. Looks at the layout only, not at data. */
SP_API int sp_tensor_is_dense(const sp_tensor *t);

/* ---------------------------------------------------------------------- */
/* Batched copy                                                            */

/* Most pairs one CUDA launch takes; a larger batch takes the fewest
 * launches (ceil(n / SP_MAX_PAIRS_PER_LAUNCH)). */
#define SP_MAX_PAIRS_PER_LAUNCH 64

typedef struct sp_copy_pair {
    sp_tensor src;
    sp_tensor dst;
} sp_copy_pair;

/* Copy each pairs[i].src into pairs[i].dst, all pairs in one pass: one
 * kernel launch on `stream` for CUDA tensors (none when every pair is
 * empty), one parallel pass on the CPU. Bits are copied, never values.
 *
 * Rules, checked before anything is written:
 *   - src and dst of a pair have the same dtype (SP_ERR_DTYPE_MISMATCH) and
 *     shape (SP_ERR_SHAPE_MISMATCH); sizes are >= 0, counts do not
 *     overflow (SP_ERR_INVALID_ARGUMENT, SP_ERR_OVERFLOW);
 *   - every tensor is on one device (SP_ERR_DEVICE_MISMATCH); CUDA tensors
 *     need a CUDA build and device (SP_ERR_NO_DEVICE);
 *   - each data pointer is aligned to its element size (SP_ERR_MISALIGNED);
 *     every view's bytes lie inside the address space (SP_ERR_OVERFLOW);
 *   - no destination overlaps another destination or any source, nor
 *     itself through a zero or aliasing stride (SP_ERR_OVERLAP; this
 *     self-overlap test is a sufficient condition: strides that interleave
 *     without colliding, like [2, 3] with strides (3, 2), are refused too).
 *     Overlap between tensors is decided per element, not per address
 *     range, so views interleaved in one buffer are accepted. The answer is
 *     exact for the layouts that occur: two views that, each with its dims
 *     coalesced, have at most two distinct byte strides between them (two
 *     1-D progressions, such as strides 4 and 6 at even and odd bytes;
 *     column or row slices of one [T, W] buffer, such as q, k, v of a fused
 *     [T, 3P] buffer; 2-D views with equal strides), and interleavings
 *     (bases a gap apart that no multiple of the gcd of all strides can
 *     bridge). Other layouts go through a bounded search, exact unless it
 *     runs out; for intricate layouts where it does (many dims of unrelated
 *     strides in one buffer) the answer is a conservative SP_ERR_OVERLAP
 *     whose message says the views could not be proven disjoint.
 * Every pair is checked and planned before the first byte moves, so the
 * pairs array itself may lie in a destination. The checks cost n log n plus
 * the element-exact tests of the pairs whose byte extents intersect.
 * CUDA: asynchronous on `stream`, allocates no device memory, copies nothing
 * between host and device and never synchronizes, so it can be captured
 * into a CUDA graph; it runs on the tensors' device and restores the
 * caller's current device.
 * Up to SP_MAX_PAIRS_PER_LAUNCH pairs nothing is allocated at all; a larger
 * batch takes host scratch for its checks and plan (SP_ERR_OUT_OF_MEMORY
 * when there is none).
 * @return SP_OK, or the error above. n == 0 is SP_OK with nothing done. */
SP_API sp_status sp_copy_batch(const sp_copy_pair *pairs, size_t n, struct CUstream_st *stream);

/* ---------------------------------------------------------------------- */
/* Pack                                                                    */

/* Alignment of every workspace slot, in bytes. */
#define SP_PACK_ALIGN 256

/* Workspace bytes that sp_pack needs for these inputs, whatever the
 * workspace's address: each non-dense input's bytes rounded up to
 * SP_PACK_ALIGN, plus SP_PACK_ALIGN - 1 for aligning the base; 0 when every
 * input is dense. Only shapes, strides and dtypes are looked at: not data
 * (it may be NULL, for sizing before the buffers exist), alignment, the
 * device, or the count limit of sp_pack.
 * @return SP_OK; SP_ERR_INVALID_ARGUMENT for NULL bytes, NULL inputs with
 *         n > 0, or a malformed layout (ndim, dtype, a negative size);
 *         SP_ERR_OVERFLOW when an element count or a byte offset overflows
 *         int64, or the bytes needed overflow size_t. On error *bytes is
 *         left unchanged. */
SP_API sp_status sp_pack_workspace_bytes(const sp_tensor *inputs, size_t n, size_t *bytes);

/* Make a dense view of each input. outputs[i] is inputs[i] itself when that
 * is dense (no byte moves). Otherwise it is a dense tensor in the next
 * SP_PACK_ALIGN-aligned slot of `workspace` (on the inputs' device), and all
 * such inputs are filled by one sp_copy_batch: exactly one launch when one
 * or more need copying, none when none do. *n_copied (may be NULL) gets how
 * many inputs were copied.
 * Slot offsets depend only on the inputs' shapes and dtypes and on the
 * workspace address, so a repeated call with the same arguments yields the
 * same outputs (what CUDA graph replay needs).
 * When every input is dense nothing is launched and no device is needed:
 * the call succeeds even for CUDA views in a build without CUDA.
 * The used part of the workspace, for the overlap check below, runs from
 * the first slot to the end of the last slot's padding.
 * outputs may alias inputs in any way (the same array, or overlapping parts
 * of one array): every input is read before the first output is written.
 * At most SP_MAX_PAIRS_PER_LAUNCH inputs per call (SP_ERR_UNSUPPORTED).
 * Errors, before anything is written: those of sp_copy_batch;
 * SP_ERR_INVALID_ARGUMENT for NULL inputs/outputs with n > 0, or a NULL
 * workspace that is needed; SP_ERR_WORKSPACE_TOO_SMALL; SP_ERR_OVERFLOW when
 * the bytes needed from `workspace` on (see sp_pack_workspace_bytes) pass
 * the top of the address space; SP_ERR_OVERLAP when the used part of the
 * workspace overlaps an input. On error outputs are left unchanged. */
SP_API sp_status sp_pack(const sp_tensor *inputs, size_t n, void *workspace,
                         size_t workspace_bytes, sp_tensor *outputs, size_t *n_copied,
                         struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif /* STRIDEPACK_H */

/* ======================================================================
 * Experimental and testing API. Not stable: may change or go in any
 * release, with no ABI promise. Declared only for code that defines
 * SP_EXPERIMENTAL before including this header, as the library's own
 * tests, tools and benchmarks do:
 *     #define SP_EXPERIMENTAL
 *     #include "stridepack.h"
 * ====================================================================== */
#if defined(SP_EXPERIMENTAL) && !defined(STRIDEPACK_H_EXPERIMENTAL)
#define STRIDEPACK_H_EXPERIMENTAL

#ifdef __cplusplus
extern "C" {
#endif

/* @return how many copy passes (kernel launches on CUDA, parallel passes on
 *         the CPU) this process has issued through sp_copy_batch and
 *         sp_pack. Thread-safe. */
SP_API uint64_t sp_copy_pass_count(void);

#ifdef __cplusplus
}
#endif

#endif /* SP_EXPERIMENTAL */
