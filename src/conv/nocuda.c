/*
 * nocuda.c — the convolution's CUDA entry point in a build without CUDA:
 * it says there is no device, so CPU-only builds link and fail cleanly.
 */
#include "conv/conv_internal.h"

sp_status sp_conv_cuda_(const sp_conv_args *a, const sp_conv_dims *d, struct CUstream_st *stream) {
    (void)a, (void)d, (void)stream;
    return sp_set_error_(SP_ERR_NO_DEVICE, "x: this build has no CUDA backend");
}
