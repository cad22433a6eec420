/*
 * runtime.cu — the CUDA runtime calls of the KDA input boundary (workspace
 * allocation, the graph-capture query), through the library's CUDA runtime
 * layer, so that boundary.c stays plain C with no CUDA header.
 */
#include "cuda/runtime.h"
#include "kda/kda_internal.h"

extern "C" sp_status sp_kda_cuda_alloc_(int device, size_t bytes, void **p) {
    return sp_cuda_alloc_(device, bytes, p, "workspace");
}

extern "C" sp_status sp_kda_cuda_free_(int device, void *p) { return sp_cuda_free_(device, p); }

extern "C" sp_status sp_kda_cuda_capturing_(struct CUstream_st *stream, int *capturing) {
    return sp_cuda_capturing_((cudaStream_t)stream, capturing);
}
