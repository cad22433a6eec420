/*
 * nocuda.c — the KDA CUDA entry points of a build without CUDA: each says
 * there is no device, so CPU-only builds link and fail cleanly.
 */
#include "kda/kda_internal.h"

sp_status sp_kda_prefill_cuda_(const sp_kda_args *a, const sp_kda_dims *d,
                               struct CUstream_st *stream) {
    (void)a, (void)d, (void)stream;
    return sp_set_error_(SP_ERR_NO_DEVICE, "q: this build has no CUDA backend");
}

sp_status sp_kda_cuda_alloc_(int device, size_t bytes, void **p) {
    (void)device, (void)bytes;
    *p = NULL;
    return sp_set_error_(SP_ERR_NO_DEVICE, "dev: this build has no CUDA backend");
}

sp_status sp_kda_cuda_free_(int device, void *p) {
    (void)device, (void)p;
    return SP_OK;
}

sp_status sp_kda_cuda_capturing_(struct CUstream_st *stream, int *capturing) {
    (void)stream;
    *capturing = 0;
    return SP_OK;
}

int sp_kda_cuda_chunked_fits_(int device) {
    (void)device;
    return 0;
}
