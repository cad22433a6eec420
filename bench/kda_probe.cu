/*
 * kda_probe.cu — timing probes of the one-pass chunked KDA kernel, for
 * bench_kda --probe: the same kernel (chunked_kernel.cuh) with only its V
 * side's or only its K side's arithmetic, so that each side's time alone can
 * be measured (their results are wrong on purpose), and the every-gate
 * build with every chunk factored (no vote, no safe form: what they cost)
 * or with its gate form and g's dtype fixed at compile time (what reading
 * them at run time costs). They are built into
 * this benchmark only, never into the library. (The mbarrier hand-over is
 * the library's, a plan field: sp_kda_plan.mbarrier_handover.)
 */
#include "kda/cuda/chunked_kernel.cuh"

/* bench_kda's probe side for the every-gate build with the call's gate form
 * and g dtype fixed at compile time (chunk_k.cuh, any_fixed); the wgmma
 * build's, as the factored-only probe (the probes of the every-gate build
 * are for Hopper's one-wave shapes, where the plan takes that build). */
enum { PROBE_FIXED_FORMS = 16 };
static cudaError_t launch_fixed(const kda_params *p, const sp_kda_plan *plan, cudaStream_t s) {
    const int g32 = p->g_f32 != 0;
    switch (p->gate) {
    case SP_KDA_GATE_LOWER_BOUND:
        return g32 ? launch_one_pass_build<0, 1, any_fixed(0, 1)>(p, plan->splits, s)
                   : launch_one_pass_build<0, 1, any_fixed(0, 0)>(p, plan->splits, s);
    case SP_KDA_GATE_SOFTPLUS:
        return g32 ? launch_one_pass_build<0, 1, any_fixed(1, 1)>(p, plan->splits, s)
                   : launch_one_pass_build<0, 1, any_fixed(1, 0)>(p, plan->splits, s);
    default:
        return g32 ? launch_one_pass_build<0, 1, any_fixed(2, 1)>(p, plan->splits, s)
                   : launch_one_pass_build<0, 1, any_fixed(2, 0)>(p, plan->splits, s);
    }
}

/* The probe `side` (ONE_PASS_PROBE_V: the V side only, _K: the K side only,
 * _FACTORED: every chunk factored, PROBE_FIXED_FORMS: the forms fixed; the
 * last two of the every-gate build only) of the plan's
 * build (K3's or every gate's: plan->every_gate), on the call's arguments
 * (checked as sp_kda_prefill checks them), on device 0. 0 on success; -1
 * with sp_last_error() set. */
extern "C" int bench_kda_probe(const sp_kda_args *a, const sp_kda_plan *plan, int side,
                               cudaStream_t s) {
    sp_kda_dims d;
    if (sp_kda_check_(a, 1, &d) != SP_OK) return -1;
    kda_params p = sp_kda_cuda_params_(a, &d);
    p.any_gate = plan->every_gate;
    if ((side == ONE_PASS_PROBE_FACTORED || side == PROBE_FIXED_FORMS) &&
        (!p.any_gate || !plan->wgmma)) {
        sp_set_error_(SP_ERR_INVALID_ARGUMENT,
                      "the factored-only and fixed-form probes are of the every-gate wgmma build");
        return -1;
    }
    cudaError_t e;
    if (side == PROBE_FIXED_FORMS)
        e = launch_fixed(&p, plan, s);
    else if (side == ONE_PASS_PROBE_FACTORED)
        e = launch_one_pass_build<ONE_PASS_PROBE_FACTORED, 1, 1>(&p, plan->splits, s);
    else if (side == ONE_PASS_PROBE_V)
        e = p.any_gate ? launch_one_pass<ONE_PASS_PROBE_V, 1>(&p, plan->splits, plan->wgmma, s)
                       : launch_one_pass<ONE_PASS_PROBE_V, 0>(&p, plan->splits, plan->wgmma, s);
    else
        e = p.any_gate ? launch_one_pass<ONE_PASS_PROBE_K, 1>(&p, plan->splits, plan->wgmma, s)
                       : launch_one_pass<ONE_PASS_PROBE_K, 0>(&p, plan->splits, plan->wgmma, s);
    if (e != cudaSuccess) {
        sp_set_error_(SP_ERR_CUDA, "probe launch: %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}
