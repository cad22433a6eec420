/*
 * chunked.cu — the library's two builds of the one-pass chunked KDA kernel
 * (chunked_kernel.cuh: mma.sync, and wgmma on sm_90a), their launcher, and
 * what the device table records of them.
 */
#include "kda/cuda/chunked_kernel.cuh"

/* The most any instance of the library's asks for (the hand-over's
 * mbarriers included). */
extern "C" size_t sp_kda_chunked_one_pass_smem_bytes_(void) {
    constexpr size_t w = one_pass_launch_smem<1>(), m = one_pass_launch_smem<0>();
    return w > m ? w : m;
}

extern "C" sp_status sp_kda_one_pass_device_facts_(sp_cuda_device *d) {
    /* The wgmma build's products are wgmma only in its sm_90a code (PTX
     * 9.0, which runs on compute capability 9.0 alone); elsewhere that
     * build would multiply its swizzled operands by mma.sync, a path no
     * test runs: the plan then keeps to the mma.sync build. No code for the
     * device at all is no wgmma either (the launch then reports it). */
    cudaFuncAttributes a;
    if (cudaFuncGetAttributes(&a, (const void *)kda_chunked_kernel<0, 1, 0>) != cudaSuccess) {
        (void)cudaGetLastError();
        d->kda_wgmma = 0;
        return SP_OK;
    }
    d->kda_wgmma = a.ptxVersion == 90 && a.binaryVersion == 90;
    return SP_OK;
}

/* The plan's build (K3's or the call's every-gate instance,
 * launch_one_pass_gates). */
extern "C" cudaError_t sp_kda_launch_chunked_(const kda_params *p, const sp_kda_plan *plan,
                                              cudaStream_t stream) {
    return launch_one_pass_gates<0>(p, plan->splits, plan->wgmma, stream);
}
