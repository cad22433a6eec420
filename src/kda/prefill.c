/*
 * prefill.c — the public KDA prefill entry points: check the contract once,
 * then hand the call to the backend of the tensors' device.
 */
#include "kda/kda_internal.h"

sp_status sp_kda_args_init(sp_kda_args *args) {
    SP_REQUIRE(args, SP_ERR_INVALID_ARGUMENT, "args: NULL");
    memset(args, 0, sizeof *args);
    args->gate = SP_KDA_GATE_LOWER_BOUND;
    args->lower_bound = -5.0f;
    args->scale = 0.0f;
    args->checkpoint_interval = 0;
    return SP_OK;
}

sp_status sp_kda_run_(const sp_kda_args *a, const sp_kda_dims *d, struct CUstream_st *stream) {
    /* Empty sequences leave their state as it is (a bf16 state round-trips
     * through fp32 exactly), so T = 0, N = 0 or H = 0 has nothing to do. */
    if (d->T == 0 || d->N == 0 || d->H == 0) return SP_OK;
    if (d->dev.type == SP_DEVICE_CPU) return sp_kda_prefill_cpu_(a, d);
    return sp_kda_prefill_cuda_(a, d, stream);
}

sp_status sp_kda_prefill(const sp_kda_args *args, struct CUstream_st *stream) {
    sp_kda_dims d;
    SP_FORWARD(sp_kda_check_(args, 1, &d)); /* CUDA: the device was found usable there */
    return sp_kda_run_(args, &d, stream);
}

sp_status sp_kda_prefill_workspace_bytes(const sp_kda_args *args, size_t *bytes) {
    SP_REQUIRE(args, SP_ERR_INVALID_ARGUMENT, "args: NULL");
    SP_REQUIRE(bytes, SP_ERR_INVALID_ARGUMENT, "bytes: NULL");
    sp_kda_args a = *args;
    a.kernel = SP_KDA_KERNEL_AUTO;
    a.workspace = NULL;
    a.workspace_bytes = 0;
    sp_kda_dims d;
    SP_FORWARD(sp_kda_check_(&a, 1, &d));
    *bytes = 0;
    if (sp_kda_chunked_can_serve_(&a, &d)) SP_FORWARD(sp_kda_two_pass_bytes_(d.T, d.N, d.H, bytes));
    return SP_OK;
}

sp_status sp_kda_prefill_kernel(const sp_kda_args *args, sp_kda_kernel *chosen) {
    SP_REQUIRE(chosen, SP_ERR_INVALID_ARGUMENT, "chosen: NULL");
    sp_kda_plan plan;
    SP_FORWARD(sp_kda_prefill_plan_(args, &plan));
    *chosen = (sp_kda_kernel)plan.kernel;
    return SP_OK;
}

sp_status sp_kda_prefill_reference(const sp_kda_args *args) {
    SP_REQUIRE(args, SP_ERR_INVALID_ARGUMENT, "args: NULL");
    sp_kda_args a = *args;
    a.kernel = SP_KDA_KERNEL_AUTO; /* one way to compute here: the choice is ignored */
    args = &a;
    sp_kda_dims d;
    SP_FORWARD(sp_kda_check_(args, 1, &d));
    SP_REQUIRE(d.dev.type == SP_DEVICE_CPU, SP_ERR_UNSUPPORTED,
               "q: the float64 reference runs on CPU tensors only");
    if (d.T == 0 || d.N == 0 || d.H == 0) return SP_OK;
    return sp_kda_prefill_ref_(args, &d);
}
