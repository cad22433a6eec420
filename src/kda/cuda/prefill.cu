/*
 * prefill.cu — the CUDA entry of the KDA prefill: the launch parameters from
 * the checked arguments, then the kernel of the call's plan (plan.c),
 * launched on the tensors' device (the caller's current device is
 * restored); and the KDA kernels' part of the device table.
 */
#include "cuda/device.h"
#include "cuda/runtime.h"
#include "kda/cuda/common.cuh"

#include <string.h>

static kda_input input_of(const sp_tensor *x) {
    kda_input in;
    in.at = (const uint16_t *)x->data;
    in.ts = x->strides[1];
    in.hs = x->strides[2];
    return in;
}

extern "C" kda_params sp_kda_cuda_params_(const sp_kda_args *a, const sp_kda_dims *d) {
    kda_params p;
    p.q = input_of(&a->q);
    p.k = input_of(&a->k);
    p.v = input_of(&a->v);
    p.g = input_of(&a->g);
    p.beta = input_of(&a->beta);
    p.A_log = (const float *)a->A_log.data;
    p.dt_bias = (const float *)a->dt_bias.data;
    p.ix = sp_kda_index_of_(a, d);
    p.state = a->state.data;
    p.ckpt = d->interval > 0 ? a->checkpoints.data : NULL;
    p.o = (uint16_t *)a->o.data;
    p.T = d->T;
    p.H = d->H;
    p.N = d->N;
    p.pitch = d->pitch;
    p.interval = d->interval;
    p.state_bf16 = d->state_bf16;
    p.state_k_first = d->state_k_first;
    p.gate = a->gate;
    p.beta_form = a->beta_form;
    p.g_f32 = a->g.dtype == SP_F32;
    p.beta_f32 = a->beta.dtype == SP_F32;
    p.any_gate = d->plan.every_gate;
    p.longest_first = d->plan.longest_first;
    p.lower_bound = a->lower_bound;
    p.scale = d->scale;
    return p;
}

/* The plan's kernel. The launches' own status, not cudaGetLastError():
 * that could be an error the caller left pending, reported as ours and
 * cleared. */
static sp_status launch(const kda_params *p, const sp_kda_plan *plan, void *workspace, int device,
                        cudaStream_t stream) {
    if (plan->kernel == SP_KDA_KERNEL_RECURRENT) {
        SP_CUDA_CHECK(sp_kda_launch_recurrent_(p, stream));
    } else if (plan->kernel == SP_KDA_KERNEL_DECODE) {
        SP_CUDA_CHECK(sp_kda_launch_decode_(p, plan, stream));
    } else if (plan->kernel == SP_KDA_KERNEL_CHUNKED_TWO_PASS) {
        const sp_cuda_device *dev;
        SP_FORWARD(sp_cuda_device_(device, SP_CUDA_PART_KDA, &dev));
        SP_CUDA_CHECK(sp_kda_launch_chunked_two_pass_(p, plan, workspace, dev, stream));
    } else {
        SP_CUDA_CHECK(sp_kda_launch_chunked_(p, plan, stream));
    }
    return SP_OK;
}

extern "C" sp_status sp_kda_prefill_cuda_(const sp_kda_args *a, const sp_kda_dims *d,
                                          struct CUstream_st *stream) {
    const kda_params p = sp_kda_cuda_params_(a, d);
    const int dev = (int)d->dev.ordinal;
    sp_cuda_device_guard g;
    SP_FORWARD(sp_cuda_device_enter_(&g, dev, "q"));
    const sp_status s = launch(&p, &d->plan, a->workspace, dev, (cudaStream_t)stream);
    return sp_cuda_device_leave_(&g, s);
}

extern "C" sp_status sp_kda_cuda_device_facts_(sp_cuda_device *d) {
    sp_kda_decode_device_facts_(d);
    /* Where a block cannot have the chunked kernels' shared memory (100 KB
     * parts, the A100's 163 KB) nothing more is asked: their kernels could
     * not even be given it, and the plan keeps to the recurrent kernel. */
    d->kda_chunked = (size_t)d->smem_optin >= sp_kda_chunked_smem_bytes_();
    d->kda_wgmma = 0;
    memset(d->kda_fused_per_sm, 0, sizeof d->kda_fused_per_sm);
    if (!d->kda_chunked) return SP_OK;
    SP_FORWARD(sp_kda_one_pass_device_facts_(d));
    return sp_kda_two_pass_device_facts_(d);
}
