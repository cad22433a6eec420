/*
 * runtime.cu — the CUDA runtime calls of the KDA input boundary (workspace
 * allocation, graph-capture query), kept on the CUDA side so that
 * boundary.c stays plain C with no CUDA header.
 */
#include "kda/kda_internal.h"

#include <cuda_runtime.h>

/* Run `stmt`; on failure record what failed, where, and return SP_ERR_CUDA. */
#define KDA_CUDA_TRY(stmt)                                                              \
    do {                                                                                \
        cudaError_t e_ = (stmt);                                                        \
        if (e_ != cudaSuccess)                                                          \
            return sp_set_error(SP_ERR_CUDA, "%s: %s failed: %s (%s:%d)", __func__, #stmt, \
                                cudaGetErrorString(e_), __FILE__, __LINE__);            \
    } while (0)

/* cudaMalloc (free_it = 0) or cudaFree on `device`, restoring the caller's
 * current device afterwards. */
static sp_status alloc_or_free(int device, void **p, size_t bytes, int free_it) {
    int count = 0, prev = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
        cudaGetLastError(); /* clear, so it does not leak into a later check */
        return sp_set_error(SP_ERR_NO_DEVICE, "dev: CUDA device %d is not available", device);
    }
    KDA_CUDA_TRY(cudaGetDevice(&prev));
    if (prev != device) KDA_CUDA_TRY(cudaSetDevice(device));
    cudaError_t e = free_it ? cudaFree(*p) : cudaMalloc(p, bytes);
    if (prev != device) cudaSetDevice(prev);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        *p = NULL;
        return sp_set_error(SP_ERR_OUT_OF_MEMORY, "workspace: cudaMalloc of %zu bytes failed",
                            bytes);
    }
    if (e != cudaSuccess) {
        if (!free_it) *p = NULL;
        return sp_set_error(SP_ERR_CUDA, "workspace: %s failed: %s",
                            free_it ? "cudaFree" : "cudaMalloc", cudaGetErrorString(e));
    }
    return SP_OK;
}

extern "C" sp_status sp_kda_cuda_alloc_(int device, size_t bytes, void **p) {
    *p = NULL;
    return alloc_or_free(device, p, bytes, 0);
}

extern "C" sp_status sp_kda_cuda_free_(int device, void *p) {
    if (!p) return SP_OK;
    return alloc_or_free(device, &p, 0, 1);
}

extern "C" sp_status sp_kda_cuda_capturing_(struct CUstream_st *stream, int *capturing) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    KDA_CUDA_TRY(cudaStreamIsCapturing(stream, &st));
    *capturing = st != cudaStreamCaptureStatusNone;
    return SP_OK;
}
