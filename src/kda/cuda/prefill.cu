/*
 * prefill.cu — the CUDA entry of the KDA prefill: the launch parameters from
 * the checked arguments, then the kernel that dispatch.c chose, launched on
 * the tensors' device (the caller's current device is restored).
 */
#include "kda/cuda/common.cuh"

static kda_params params_of(const sp_kda_args *a, const sp_kda_dims *d) {
    kda_params p;
    p.q = (const uint16_t *)a->q.data;
    p.k = (const uint16_t *)a->k.data;
    p.v = (const uint16_t *)a->v.data;
    p.g = (const uint16_t *)a->g.data;
    p.beta = (const uint16_t *)a->beta.data;
    p.A_log = (const float *)a->A_log.data;
    p.dt_bias = (const float *)a->dt_bias.data;
    p.cu_seqlens = (const int64_t *)a->cu_seqlens.data;
    p.cu_starts = d->interval > 0 ? (const int64_t *)a->checkpoint_cu_starts.data : NULL;
    p.state_indices = (const int32_t *)a->state_indices.data;
    p.state = a->state.data;
    p.ckpt = d->interval > 0 ? a->checkpoints.data : NULL;
    p.o = (uint16_t *)a->o.data;
    p.T = d->T;
    p.H = d->H;
    p.N = d->N;
    p.slots = d->slots;
    p.pitch = d->pitch;
    p.C = d->C;
    p.interval = d->interval;
    p.state_bf16 = d->state_bf16;
    p.gate = a->gate;
    p.lower_bound = a->lower_bound;
    p.scale = d->scale;
    return p;
}

static cudaError_t launch(const kda_params *p, int kernel, void *workspace, int device,
                          cudaStream_t stream) {
    if (kernel == SP_KDA_KERNEL_RECURRENT) return sp_kda_launch_recurrent_(p, stream);
    if (kernel == SP_KDA_KERNEL_CHUNKED_TWO_PASS)
        return sp_kda_launch_chunked_two_pass_(p, workspace, stream);
    int sms = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return e;
    return sp_kda_launch_chunked_(p, sp_kda_chunked_splits_(p->N * p->H, sms), stream);
}

extern "C" sp_status sp_kda_prefill_cuda_(const sp_kda_args *a, const sp_kda_dims *d,
                                          struct CUstream_st *stream) {
    const kda_params p = params_of(a, d);
    const int dev = (int)d->dev.ordinal;
    int prev = 0;
    cudaError_t e = cudaGetDevice(&prev);
    if (e == cudaSuccess && prev != dev) e = cudaSetDevice(dev);
    if (e == cudaSuccess) {
        /* The launch's own status, not cudaGetLastError(): that could be an
         * error the caller left pending, reported as ours and cleared. */
        e = launch(&p, d->kernel, a->workspace, dev, (cudaStream_t)stream);
        if (prev != dev) {
            cudaError_t r = cudaSetDevice(prev);
            if (e == cudaSuccess) e = r;
        }
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* ours, reported below: do not leave it to the caller */
        return sp_set_error(SP_ERR_CUDA, "sp_kda_prefill: launch of the %s kernel failed: %s",
                            sp_kda_kernel_name((sp_kda_kernel)d->kernel), cudaGetErrorString(e));
    }
    return SP_OK;
}
