/*
 * prefill.cu — the CUDA entry of the KDA prefill: the launch parameters from
 * the checked arguments, then the kernel that dispatch.c chose, launched on
 * the tensors' device (the caller's current device is restored).
 */
#include "cuda/runtime.h"
#include "kda/cuda/common.cuh"

static kda_input input_of(const sp_tensor *x) {
    kda_input in;
    in.at = (const uint16_t *)x->data;
    in.ts = x->strides[1];
    in.hs = x->strides[2];
    return in;
}

static kda_params params_of(const sp_kda_args *a, const sp_kda_dims *d) {
    kda_params p;
    p.q = input_of(&a->q);
    p.k = input_of(&a->k);
    p.v = input_of(&a->v);
    p.g = input_of(&a->g);
    p.beta = input_of(&a->beta);
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

static sp_status launch(const kda_params *p, int kernel, void *workspace, int device,
                        cudaStream_t stream) {
    /* The launches' own status, not cudaGetLastError(): that could be an
     * error the caller left pending, reported as ours and cleared. */
    if (kernel == SP_KDA_KERNEL_RECURRENT) {
        SP_CUDA_CHECK(sp_kda_launch_recurrent_(p, stream));
        return SP_OK;
    }
    int sms = 0;
    SP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    if (kernel == SP_KDA_KERNEL_CHUNKED_TWO_PASS) {
        int records = 0;
        int64_t head_slots = 0;
        sp_kda_two_pass_plan_(p->N * p->H, sms, sp_kda_two_pass_slots_(p->T, p->N), &records,
                              &head_slots);
        SP_CUDA_CHECK(sp_kda_launch_chunked_two_pass_(p, workspace, records, head_slots, device,
                                                      sms, stream));
    } else {
        const int splits = sp_kda_chunked_splits_(p->N * p->H, sms);
        SP_CUDA_CHECK(sp_kda_launch_chunked_(
            p, splits,
            sp_kda_chunked_wgmma_(splits) && sp_kda_chunked_has_wgmma_(device),
            stream));
    }
    return SP_OK;
}

extern "C" sp_status sp_kda_prefill_cuda_(const sp_kda_args *a, const sp_kda_dims *d,
                                          struct CUstream_st *stream) {
    const kda_params p = params_of(a, d);
    const int dev = (int)d->dev.ordinal;
    sp_cuda_device_guard g;
    SP_FORWARD(sp_cuda_device_enter_(&g, dev, "q"));
    const sp_status s = launch(&p, d->kernel, a->workspace, dev, (cudaStream_t)stream);
    return sp_cuda_device_leave_(&g, s);
}

/* Shared memory per block the device allows, per device; 0 until asked. */
static int smem_optin[64];

extern "C" int sp_kda_cuda_chunked_fits_(int device) {
    if (device < 0 || device >= 64) return 0;
    int have = __atomic_load_n(&smem_optin[device], __ATOMIC_RELAXED);
    if (have == 0) {
        if (cudaDeviceGetAttribute(&have, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
            cudaSuccess) {
            (void)cudaGetLastError();
            return 0;
        }
        __atomic_store_n(&smem_optin[device], have, __ATOMIC_RELAXED);
    }
    return (size_t)have >= sp_kda_chunked_smem_bytes_();
}
