/*
 * cuda_check.h — turn a failed CUDA runtime call into SP_ERR_CUDA with the
 * call's text and place, and return it. Never aborts: the caller decides.
 * Include from CUDA backend sources only (it pulls in the CUDA runtime).
 */
#ifndef SP_CUDA_CHECK_H
#define SP_CUDA_CHECK_H

#include "internal.h"

#include <cuda_runtime_api.h>
#include <string.h>

/* Record "cudaSetDevice(device) failed in sp_cuda_copy (copy.cu:123):
 * invalid device ordinal" as the last error; returns SP_ERR_CUDA.
 * The runtime's own last-error state is cleared: the error is reported
 * through the status, and left there it would surface in the caller's next
 * unrelated cudaGetLastError() check (a framework's launch check). A sticky
 * error (a crashed context) stays whatever we do. */
static inline sp_status sp_cuda_fail(cudaError_t err, const char *stmt, const char *func,
                                     const char *file, int line) {
    (void)cudaGetLastError();
    const char *base = strrchr(file, '/'); /* the file name, not the build path */
    return sp_set_error(SP_ERR_CUDA, "%s failed in %s (%s:%d): %s (%s)", stmt, func,
                        base ? base + 1 : file, line, cudaGetErrorString(err),
                        cudaGetErrorName(err));
}

/* Evaluate a CUDA runtime call; on failure return SP_ERR_CUDA from the
 * enclosing function. */
#define SP_CUDA_CHECK(stmt)                                                        \
    do {                                                                           \
        cudaError_t sp_cuda_err_ = (stmt);                                         \
        if (sp_cuda_err_ != cudaSuccess)                                           \
            return sp_cuda_fail(sp_cuda_err_, #stmt, __func__, __FILE__, __LINE__); \
    } while (0)

#endif /* SP_CUDA_CHECK_H */
