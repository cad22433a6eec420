/* none.c — the CUDA backend of a build made without a CUDA compiler, for
 * the whole library: every CUDA request is answered SP_ERR_NO_DEVICE (no
 * stream is ever capturing), so CPU-only builds link and fail cleanly. */
#include "conv/conv_internal.h"
#include "cuda/device.h"
#include "internal.h"
#include "kda/kda_internal.h"

static sp_status no_backend(const char *arg) {
    return sp_set_error_(SP_ERR_NO_DEVICE, "%s: this build of stridepack has no CUDA backend", arg);
}

int sp_cuda_available(void) { return 0; }

sp_status sp_cuda_copy_(const sp_copy_desc *descs, int n, int device, struct CUstream_st *stream) {
    (void)descs, (void)n, (void)stream;
    return sp_set_error_(SP_ERR_NO_DEVICE, "cuda:%d: this build of stridepack has no CUDA backend",
                        device);
}

sp_status sp_cuda_alloc_(int device, size_t bytes, void **p, const char *what) {
    (void)device, (void)bytes;
    *p = NULL;
    return no_backend(what);
}

sp_status sp_cuda_free_(int device, void *p) {
    (void)device, (void)p;
    return SP_OK;
}

sp_status sp_cuda_capturing_(struct CUstream_st *stream, int *capturing) {
    (void)stream;
    *capturing = 0;
    return SP_OK;
}

sp_status sp_kda_prefill_cuda_(const sp_kda_args *a, const sp_kda_dims *d,
                               struct CUstream_st *stream) {
    (void)a, (void)d, (void)stream;
    return no_backend("q");
}

sp_status sp_cuda_device_(int device, unsigned parts, const sp_cuda_device **info) {
    (void)parts;
    *info = NULL;
    return sp_set_error_(SP_ERR_NO_DEVICE, "cuda:%d: this build of stridepack has no CUDA backend",
                        device);
}

sp_status sp_conv_cuda_(const sp_conv_args *a, const sp_conv_dims *d, struct CUstream_st *stream) {
    (void)a, (void)d, (void)stream;
    return no_backend("x");
}
