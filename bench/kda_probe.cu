/*
 * kda_probe.cu — timing probes of the one-pass chunked KDA kernel, for
 * bench_kda --probe: the same kernel (chunked_kernel.cuh) with only its V
 * side's or only its K side's arithmetic, so that each side's time alone can
 * be measured (their results are wrong on purpose), and the every-gate
 * build with every chunk factored (no vote, no safe form: what they cost);
 * each of the call's instance (launch_one_pass_gates), as the library's, and
 * the every-gate ones of the wgmma build only (the one-wave shapes on Hopper).
 * They are built into this benchmark only, for Hopper and later, never into
 * the library.
 */
#include "kda/cuda/chunked_kernel.cuh"

/* The probe `side` (ONE_PASS_PROBE_V: the V side only, _K: the K side only,
 * _FACTORED: every chunk factored, the every-gate build only) of the plan's
 * build (K3's or every gate's: plan->every_gate), on the call's arguments
 * (checked as sp_kda_prefill checks them), on device 0. 0 on success; -1
 * with sp_last_error() set. */
extern "C" int bench_kda_probe(const sp_kda_args *a, const sp_kda_plan *plan, int side,
                               cudaStream_t s) {
    sp_kda_dims d;
    if (sp_kda_check_(a, 1, &d) != SP_OK) return -1;
    kda_params p = sp_kda_cuda_params_(a, &d);
    p.any_gate = plan->every_gate;
    if ((side == ONE_PASS_PROBE_FACTORED && !p.any_gate) || (p.any_gate && !plan->wgmma)) {
        sp_set_error_(SP_ERR_INVALID_ARGUMENT,
                      "the every-gate probes are of the wgmma build; the factored-only probe "
                      "of the every-gate build");
        return -1;
    }
    cudaError_t e;
    if (!p.any_gate)
        e = side == ONE_PASS_PROBE_V
                ? launch_one_pass<ONE_PASS_PROBE_V, 0>(&p, plan->splits, plan->wgmma, s)
                : launch_one_pass<ONE_PASS_PROBE_K, 0>(&p, plan->splits, plan->wgmma, s);
    else
        e = side == ONE_PASS_PROBE_FACTORED
                ? launch_one_pass_gates<ONE_PASS_PROBE_FACTORED, 1>(&p, plan->splits, 1, s)
            : side == ONE_PASS_PROBE_V
                ? launch_one_pass_gates<ONE_PASS_PROBE_V, 1>(&p, plan->splits, 1, s)
                : launch_one_pass_gates<ONE_PASS_PROBE_K, 1>(&p, plan->splits, 1, s);
    if (e != cudaSuccess) {
        sp_set_error_(SP_ERR_CUDA, "probe launch: %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}
