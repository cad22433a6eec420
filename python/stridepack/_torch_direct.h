/*
 * _torch_direct.h — a torch tensor's layout read through libtorch's C shim
 * (the extern "C" functions torch exports for AOTInductor: sizes, strides,
 * data pointer, dtype, device), instead of one Python-level call per field.
 *
 * The extension reads a tensor's TensorImpl address with one attribute read
 * (Tensor._cdata, torch's own getter) and passes it here; everything else is
 * plain C calls. Whether this holds for the torch in the process is not
 * assumed: the extension compares what these reads give with the attribute
 * reads on a few probe tensors before it relies on them (direct_agrees in
 * the torch reader),
 * and takes the attribute reads whenever anything here is missing or fails.
 */
#ifndef SP_TORCH_DIRECT_H
#define SP_TORCH_DIRECT_H

#include <stdint.h>

enum { TD_CPU = 0, TD_CUDA = 1, TD_OTHER = 2 };

typedef struct td_meta {
    uintptr_t data;         /* address of element 0 (storage offset included) */
    int64_t ndim;
    const int64_t *sizes;   /* borrowed from the tensor: read before it can change */
    const int64_t *strides; /* in elements */
    int32_t dtype;          /* torch's code, compare with td_dtype_code() */
    int32_t device;         /* TD_CPU, TD_CUDA or TD_OTHER */
    int32_t device_index;
} td_meta;

/* 1 when every function used here resolved in the loaded libtorch, else 0.
 * Looks the functions up once (later calls return the same answer), in the
 * loaded object that defines them whatever its file name; never loads a
 * library that is not loaded already. */
int td_load(void);

/* The layout of the tensor whose TensorImpl is at `impl`: 0 done, -1 when
 * torch cannot describe it that way (not strided, no storage, symbolic
 * sizes...): the caller then reads the attributes. Only after td_load()
 * returned 1. */
int td_describe(uintptr_t impl, td_meta *m);

/* torch's code for the dtype torch.<name> (e.g. "bfloat16"), or -1. */
int32_t td_dtype_code(const char *name);

/* Whether autograd records: 1 or 0, -1 when unknown. */
int td_grad_enabled(void);

/* torch's current CUDA stream on device `ordinal`: 0 done, -1 unavailable
 * (a torch without CUDA, or the shim lacks it). */
int td_cuda_stream(int ordinal, uintptr_t *stream);

#endif
