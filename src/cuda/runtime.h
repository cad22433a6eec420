/*
 * runtime.h — the library's helpers over the CUDA runtime, for four things
 * every CUDA source needs alike (launchers call the runtime's launch,
 * attribute and occupancy functions themselves; what a device offers is
 * read once, in device.h's table):
 *
 *   errors   SP_CUDA_CHECK(stmt): a failed call becomes SP_ERR_CUDA with the
 *            call's text, function, file and line; the runtime's last-error
 *            state is cleared. Never aborts.
 *   devices  sp_cuda_device_enter_ / sp_cuda_device_leave_: run on a tensor's
 *            device, then give the caller back its current device.
 *   memory   sp_cuda_alloc_ / sp_cuda_free_ on a given device;
 *   capture  sp_cuda_capturing_: is a stream being captured into a graph?
 *            (these two declared in internal.h, free of CUDA types, for
 *            the plain C code that needs them)
 *
 * A typical entry point of a CUDA source:
 *
 *     sp_cuda_device_guard g;
 *     SP_FORWARD(sp_cuda_device_enter_(&g, t->device.ordinal, "q"));
 *     sp_status s = launch(...);          (SP_CUDA_CHECK inside)
 *     return sp_cuda_device_leave_(&g, s);
 *
 * Include from CUDA sources (.cu) only: it pulls in the CUDA runtime API.
 * The public headers stay free of CUDA.
 */
#ifndef SP_CUDA_RUNTIME_H
#define SP_CUDA_RUNTIME_H

#include "internal.h"

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ---------------------------------------------------------------- */

/* Record "cudaSetDevice(device) failed in sp_cuda_copy_ (copy.cu:123):
 * invalid device ordinal (cudaErrorInvalidDevice)" as the last error and
 * clear the runtime's last-error state: the error travels in the status, and
 * left in the runtime it would surface in the caller's next unrelated
 * cudaGetLastError() check (a framework's launch check). A sticky error (a
 * broken context) stays whatever we do.
 * @return SP_ERR_CUDA */
sp_status sp_cuda_fail_(cudaError_t err, const char *stmt, const char *func, const char *file,
                       int line);

/* Evaluate a CUDA runtime call; on failure return SP_ERR_CUDA from the
 * enclosing function (which must return sp_status). */
#define SP_CUDA_CHECK(stmt)                                                        \
    do {                                                                           \
        cudaError_t sp_cuda_err_ = (stmt);                                         \
        if (sp_cuda_err_ != cudaSuccess)                                           \
            return sp_cuda_fail_(sp_cuda_err_, #stmt, __func__, __FILE__, __LINE__); \
    } while (0)

/* ---- devices --------------------------------------------------------------- */

/* What sp_cuda_device_enter_ changed, for sp_cuda_device_leave_ to undo. */
typedef struct sp_cuda_device_guard {
    int prev;     /* the caller's current device */
    int switched; /* 1 when enter made `device` current */
} sp_cuda_device_guard;

/* Make `device` the calling thread's current device when it is not already
 * (nothing is called but cudaGetDevice when it is). `arg` names the argument
 * the device came from, for the error message.
 * @return SP_OK; SP_ERR_NO_DEVICE when the process has no device `device`
 *         (*g is then left so that sp_cuda_device_leave_ does nothing);
 *         SP_ERR_CUDA when the runtime fails. */
sp_status sp_cuda_device_enter_(sp_cuda_device_guard *g, int device, const char *arg);

/* Undo sp_cuda_device_enter_: make the caller's device current again, on
 * every path, success or not. The caller's device is followed only when it
 * is in use, that is when its primary context is active: a thread that never
 * chose a device sees device 0 as "current", and switching back to it would
 * create a context there (hundreds of MB on a GPU the process may never use).
 * Such a thread keeps `device` current instead, as PyTorch's device guard
 * does.
 * @return `s` when it is an error; otherwise SP_OK, or SP_ERR_CUDA when the
 *         restore fails. */
sp_status sp_cuda_device_leave_(const sp_cuda_device_guard *g, sp_status s);

#ifdef __cplusplus
}
#endif

#endif /* SP_CUDA_RUNTIME_H */
