/*
 * kda_probe.cu — timing probes of the one-pass chunked KDA kernel, for
 * bench_kda --probe: the same kernel (chunked_kernel.cuh) with only its V
 * side's or only its K side's arithmetic, so that each side's time alone can
 * be measured (their results are wrong on purpose). They are built into
 * this benchmark only, never into the library. (The mbarrier hand-over is
 * the library's, a plan field: sp_kda_plan.mbarrier_handover.)
 */
#include "kda/cuda/chunked_kernel.cuh"

/* The probe `side` (1: the V side only, 2: the K side only) of the plan's
 * build, on the call's arguments (checked as
 * sp_kda_prefill checks them), on device 0. 0 on success; -1 with
 * sp_last_error() set. */
extern "C" int bench_kda_probe(const sp_kda_args *a, const sp_kda_plan *plan, int side,
                               cudaStream_t s) {
    sp_kda_dims d;
    if (sp_kda_check_(a, 1, &d) != SP_OK) return -1;
    const kda_params p = sp_kda_cuda_params_(a, &d);
    const cudaError_t e =
        side == ONE_PASS_PROBE_V ? launch_one_pass<ONE_PASS_PROBE_V, 0>(&p, plan->splits, plan->wgmma, s)
                                 : launch_one_pass<ONE_PASS_PROBE_K, 0>(&p, plan->splits, plan->wgmma, s);
    if (e != cudaSuccess) {
        sp_set_error_(SP_ERR_CUDA, "probe launch: %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}
