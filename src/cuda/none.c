/* none.c — the CUDA backend of a build made without a CUDA compiler: every
 * CUDA request is answered SP_ERR_NO_DEVICE. */
#include "internal.h"

int sp_cuda_available(void) { return 0; }

sp_status sp_cuda_copy_(const sp_copy_desc *descs, int n, int device, struct CUstream_st *stream) {
    (void)descs;
    (void)n;
    (void)stream;
    return sp_set_error_(SP_ERR_NO_DEVICE, "cuda:%d: this build of stridepack has no CUDA backend",
                        device);
}
